//! `epp-host inspect`: what a component is, before anyone runs it.

use crate::cli::TrustArgs;
use crate::net::policy::NetPolicy;
use crate::runtime::limits::Limits;
use crate::runtime::{LoadOptions, Runtime};
use crate::signing::{self, SignatureStatus, TrustedKeys};
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;

/// The world a provider must implement.
pub const WORLD: &str = "abx:epp/provider@1.0.0";
const INFRA_EXPORT: &str = "abx:epp/infra@1.0.0";

pub async fn run(path: PathBuf, trust: TrustArgs, as_json: bool) -> Result<ExitCode> {
    let wasm = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let status = signing::verify(&wasm, &TrustedKeys::load(&trust)?);
    let signer = match &status {
        SignatureStatus::Trusted(ids)
        | SignatureStatus::Untrusted(ids)
        | SignatureStatus::Tampered(ids) => ids.clone(),
        _ => Vec::new(),
    };
    // Inspection never reaches the network: the policy allows nothing.
    let origin =
        opensandbox_settings::Origin::parse_url("inspect", "http://invalid.:1").expect("literal");
    let options = LoadOptions {
        wasm: wasm.clone(),
        cache_dir: None,
        limits: Limits::new(256, 10_000),
        instances: 4,
        policy: NetPolicy::new(&origin, &[], None).map_err(anyhow::Error::msg)?,
        guest_env: Vec::new(),
    };
    let loaded = Runtime::load(options).await;
    let (imports, exports, capabilities, provider, load_error) = match &loaded {
        Ok(rt) => {
            let ty = rt.component().component_type();
            let imports: Vec<String> = ty
                .imports(rt.engine())
                .map(|(n, _)| n.to_string())
                .collect();
            let exports: Vec<String> = ty
                .exports(rt.engine())
                .map(|(n, _)| n.to_string())
                .collect();
            let caps: serde_json::Map<String, Value> = rt
                .info
                .capabilities
                .iter()
                .map(|c| (c.name.clone(), json!(c.supported)))
                .collect();
            (
                imports,
                exports,
                Value::Object(caps),
                json!({"id": rt.info.id, "version": rt.info.version}),
                None,
            )
        }
        Err(e) => (
            Vec::new(),
            Vec::new(),
            Value::Null,
            Value::Null,
            Some(format!("{e:#}")),
        ),
    };
    let world = exports.iter().any(|e| e == INFRA_EXPORT).then_some(WORLD);
    let report = json!({
        "file": path.display().to_string(),
        "size": wasm.len(),
        "sha256": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&wasm)),
        "signature": {"status": status.describe(), "trusted": matches!(status, SignatureStatus::Trusted(_)), "key_ids": signer},
        "world": world,
        "provider": provider,
        "imports": imports,
        "exports": exports,
        "capabilities": capabilities,
        "error": load_error,
    });
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(if loaded.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_text(r: &Value) {
    let s = |v: &Value| v.as_str().unwrap_or("-").to_string();
    println!("file:       {} ({} bytes)", s(&r["file"]), r["size"]);
    println!("sha256:     {}", s(&r["sha256"]));
    println!("signature:  {}", s(&r["signature"]["status"]));
    println!(
        "world:      {}",
        r["world"]
            .as_str()
            .unwrap_or("(does not export abx:epp/infra)")
    );
    if r["provider"].is_object() {
        println!(
            "provider:   {} {}",
            s(&r["provider"]["id"]),
            s(&r["provider"]["version"])
        );
    }
    for (title, key) in [("imports", "imports"), ("exports", "exports")] {
        println!("{title}:");
        for item in r[key].as_array().into_iter().flatten() {
            println!("  {}", s(item));
        }
    }
    if let Some(caps) = r["capabilities"].as_object() {
        println!("capabilities:");
        for (name, on) in caps {
            println!(
                "  {:<18} {}",
                name,
                if on == &json!(true) { "yes" } else { "no" }
            );
        }
    }
    if let Some(e) = r["error"].as_str() {
        println!("error:      {e}");
    }
}
