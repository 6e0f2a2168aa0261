//! `epp-host inspect`: what a component is, before anyone runs it.

use crate::cli::{RegistryArgs, TrustArgs};
use crate::contract::capabilities;
use crate::manifest::{MANIFEST_FILE, Manifest, Needs};
use crate::net::grant::{Grant, host_env, scope_name};
use crate::net::policy::NetPolicy;
use crate::runtime::Runtime;
use crate::signing::{self, SignatureStatus, TrustedKeys};
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What the provider asks for (`needs()`), as JSON: provider.json's `needs`
/// with the capability flags.
fn requested(rt: &Runtime) -> Value {
    let mut needs = json!(Needs::from(&rt.needs));
    needs["capabilities"] = json!(capabilities::names(rt.needs.capabilities).collect::<Vec<_>>());
    needs
}

/// What this environment and `allow_hosts` grant it, as JSON; never a secret value.
fn granted(rt: &Runtime, allow_hosts: &[String]) -> Value {
    let grant = match Grant::resolve(&rt.info, &rt.needs, &host_env, allow_hosts) {
        Ok(grant) => grant,
        Err(e) => return json!({"error": e}),
    };
    let policy_error = NetPolicy::new(&grant).err();
    let origin = grant
        .origin
        .as_ref()
        .map(|o| json!({"template": o.template, "url": o.url, "destination": o.dest.to_string()}));
    let skipped: Vec<Value> = grant
        .skipped
        .iter()
        .map(|s| json!({"template": s.template, "why": s.why}))
        .collect();
    let allow: Vec<Value> = grant
        .allow
        .iter()
        .map(|a| json!({"source": a.source.to_string(), "entries": a.each().collect::<Vec<_>>()}))
        .collect();
    let headers: Vec<Value> = grant
        .secret_headers
        .iter()
        .map(|h| {
            json!({"setting": h.setting, "header": h.header.as_str(), "scope": scope_name(h.scope),
                   "var": h.var, "set": h.value.is_some()})
        })
        .collect();
    json!({
        "capabilities": capabilities::names(rt.needs.capabilities).collect::<Vec<_>>(),
        "origin": origin,
        "origin_skipped": skipped,
        "origin_missing": grant.missing_origin(),
        "origin_host_any_port": grant.origin.is_some() && grant.origin_host_any_port,
        "allow_hosts": allow,
        "secret_headers": headers,
        "withheld_env": grant.withheld().collect::<Vec<_>>(),
        "error": policy_error,
    })
}

/// Where `inspect` finds the component: `path` is a file or an `oci://`
/// reference (pulled with `registry` into the cache under `cache_dir`).
pub struct Source {
    /// A .wasm file or an `oci://` reference.
    pub path: PathBuf,
    /// How to reach the registry of a reference.
    pub registry: RegistryArgs,
    /// The download cache (default `$XDG_CACHE_HOME/epp-host`).
    pub cache_dir: Option<PathBuf>,
}

impl Source {
    async fn read(&self) -> Result<Vec<u8>> {
        let Some(reference) = crate::oci::reference::OciRef::from_arg(&self.path) else {
            return std::fs::read(&self.path)
                .with_context(|| format!("reading {}", self.path.display()));
        };
        let env = crate::oci::credentials::EnvSnapshot::from_process();
        let pulled = crate::oci::commands::fetch(
            &reference?,
            &self.registry,
            self.cache_dir.as_deref(),
            &env,
        )
        .await?;
        Ok(pulled.wasm)
    }
}

/// `epp-host inspect`: loads the component offline and prints the report
/// (text, or JSON with `as_json`); exit 1 when it cannot be loaded, its
/// grant is refused or a manifest does not match.
pub async fn run(
    source: Source,
    trust: TrustArgs,
    allow_hosts: Vec<String>,
    manifest: Option<PathBuf>,
    as_json: bool,
) -> Result<ExitCode> {
    let wasm = source.read().await?;
    let path = source.path;
    let status = signing::verify(&wasm, &TrustedKeys::load(&trust)?);
    let signer = match &status {
        SignatureStatus::Trusted(ids)
        | SignatureStatus::Untrusted(ids)
        | SignatureStatus::Tampered(ids) => ids.clone(),
        _ => Vec::new(),
    };
    let loaded = Runtime::load_offline(wasm.clone()).await;
    let (imports, exports, capabilities, provider, needs, grant, load_error) = match &loaded {
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
                requested(rt),
                granted(rt, &allow_hosts),
                None,
            )
        }
        Err(e) => (
            Vec::new(),
            Vec::new(),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Some(format!("{e:#}")),
        ),
    };
    let grant_ok = grant.is_null() || grant["error"].is_null();
    let world = loaded.as_ref().ok().map(|rt| rt.contract.world());
    let contract = loaded.as_ref().ok().map(contract_view);
    // The manifest view names only signers this host verified.
    let trusted = match &status {
        SignatureStatus::Trusted(ids) => ids.clone(),
        _ => Vec::new(),
    };
    let derived = loaded.as_ref().ok().map(|rt| {
        let file = path.file_name().map(|n| n.to_string_lossy().into_owned());
        Manifest::derive(
            &file.unwrap_or_default(),
            &wasm,
            &rt.info,
            &rt.needs,
            trusted,
        )
    });
    let manifest_path = manifest.or_else(|| {
        let beside = path.parent()?.join(MANIFEST_FILE);
        beside.is_file().then_some(beside)
    });
    let manifest_file = manifest_path
        .as_deref()
        .map(|p| check_manifest_file(p, &wasm, derived.as_ref()));
    let manifest_ok = manifest_file
        .as_ref()
        .is_none_or(|c| c["matches"] == json!(true));
    let report = json!({
        "file": path.display().to_string(),
        "size": wasm.len(),
        "sha256": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&wasm)),
        "signature": {"status": status.describe(), "trusted": matches!(status, SignatureStatus::Trusted(_)), "key_ids": signer},
        "world": world,
        "contract": contract,
        "provider": provider,
        "imports": imports,
        "exports": exports,
        "capabilities": capabilities,
        "needs": needs,
        "grant": grant,
        "error": load_error,
        "manifest": derived,
        "manifest_file": manifest_file,
    });
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(if loaded.is_ok() && grant_ok && manifest_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Compares a manifest file with the component: always its sha256, and every
/// other field when the component could be loaded (`derived`).
fn check_manifest_file(path: &Path, wasm: &[u8], derived: Option<&Manifest>) -> Value {
    let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(wasm));
    let (sha256_matches, problems) = match Manifest::read(path) {
        Err(e) => (Value::Null, vec![format!("{e:#}")]),
        Ok(file) => {
            let problems = match derived {
                Some(actual) => file.differences(actual),
                None if file.sha256 == sha256 => Vec::new(),
                None => vec!["sha256 differs from the component's".to_string()],
            };
            (json!(file.sha256 == sha256), problems)
        }
    };
    json!({
        "path": path.display().to_string(),
        "sha256_matches": sha256_matches,
        "matches": problems.is_empty(),
        "problems": problems,
    })
}

/// Which `abx:epp` the component was built against and what follows for it
/// here: an older one is served by name, without what it cannot have; and
/// which secret settings it reads from its environment: those the host does
/// not send as headers for it (all of them for a 1.0 component, which has no
/// `needs()`; for a later one, those it sends itself, such as a registry
/// password in a request body).
fn contract_view(rt: &Runtime) -> Value {
    let secrets: Vec<&str> = rt
        .info
        .settings
        .iter()
        .filter(|s| s.secret)
        .filter(|s| !rt.needs.secret_headers.iter().any(|h| h.setting == s.name))
        .map(|s| s.name.as_str())
        .collect();
    json!({
        "built_against": format!("abx:epp@{}", rt.contract.version),
        "host_speaks": format!("abx:epp@{}", crate::contract::current()),
        "current": rt.contract.is_current(),
        "not_served": rt.not_served,
        "has_needs": rt.contract.has_needs(),
        "declares_reusable": rt.declares_reusable,
        "secrets_in_component_environment": secrets,
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
    print_contract(&r["contract"]);
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
    print_grant(&r["needs"], &r["grant"]);
    print_manifest(r);
    if let Some(e) = r["error"].as_str() {
        println!("error:      {e}");
    }
}

/// The contract version, and for an older one what this host does about it.
fn print_contract(c: &Value) {
    if !c.is_object() {
        return;
    }
    println!(
        "contract:   built against {}; this host speaks {}",
        c["built_against"].as_str().unwrap_or("-"),
        c["host_speaks"].as_str().unwrap_or("-")
    );
    println!(
        "instances:  {}",
        match c["declares_reusable"].as_bool() {
            Some(true) =>
                "reusable (it declares so: a call may get an instance an earlier call left)",
            _ => "fresh for every call (it does not declare them reusable)",
        }
    );
    if c["current"] == json!(true) {
        return;
    }
    println!(
        "            older contract: no needs(), so no origin and no secret headers; it \
         reaches only --allow-host destinations"
    );
    let not_served = strings(&c["not_served"]);
    if !not_served.is_empty() {
        println!(
            "            not served here (E8004): {}",
            not_served.join(", ")
        );
    }
    let secrets = strings(&c["secrets_in_component_environment"]);
    if !secrets.is_empty() {
        // Before needs() (abx:epp 1.0) every secret, the API key too.
        let warning = match c["has_needs"].as_bool() {
            Some(false) => "WARNING: built before needs(), ",
            _ => "",
        };
        println!(
            "            {warning}its secret settings ({}) are in its environment: it sends them itself",
            secrets.join(", ")
        );
    }
}

/// Strings of a JSON array.
fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// What the provider asks for next to what it is granted here.
fn print_grant(needs: &Value, grant: &Value) {
    if !needs.is_object() {
        return;
    }
    println!("needs (asked -> granted here):");
    if let Some(e) = grant["error"].as_str() {
        println!("  REFUSED: {e}");
    }
    let templates = strings(&needs["origin"]);
    let origin = match grant["origin"]["destination"].as_str() {
        Some(dest) => format!(
            "{dest} (from `{}`)",
            grant["origin"]["template"].as_str().unwrap_or("-")
        ),
        None if templates.is_empty() => "none".to_string(),
        None => format!(
            "none: {}",
            grant["origin_missing"]
                .as_str()
                .unwrap_or("the grant was refused")
        ),
    };
    let templates = if templates.is_empty() {
        "(none)".to_string()
    } else {
        templates.join(" | ")
    };
    println!("  origin         {templates}");
    println!("                 -> {origin}");
    for s in grant["origin_skipped"].as_array().into_iter().flatten() {
        if grant["origin"].is_object() {
            println!(
                "                    skipped `{}`: {}",
                s["template"].as_str().unwrap_or("-"),
                s["why"].as_str().unwrap_or("-")
            );
        }
    }
    let yes = |v: &Value| if v == &json!(true) { "yes" } else { "no" };
    println!(
        "  any port       {} -> {}",
        yes(&needs["origin_host_any_port"]),
        yes(&grant["origin_host_any_port"])
    );
    let vars = strings(&needs["allow_hosts_env"]);
    println!(
        "  allow hosts    from {}",
        if vars.is_empty() {
            "--allow-host".to_string()
        } else {
            format!("{} or --allow-host", vars.join(", "))
        }
    );
    let lists = grant["allow_hosts"].as_array().cloned().unwrap_or_default();
    if lists.is_empty() {
        println!("                 -> none listed");
    }
    for list in &lists {
        println!(
            "                 -> {}: {}",
            list["source"].as_str().unwrap_or("-"),
            strings(&list["entries"]).join(", ")
        );
    }
    for (i, h) in needs["secret_headers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let granted = &grant["secret_headers"][i];
        let value = match granted["var"].as_str() {
            Some(var) => format!("set (from {var})"),
            None if granted.is_object() => "not set: nothing is sent".to_string(),
            None => "-".to_string(),
        };
        println!(
            "  secret header  {} as `{}` to the {} -> {value}",
            h["setting"].as_str().unwrap_or("-"),
            h["header"].as_str().unwrap_or("-"),
            h["scope"].as_str().unwrap_or("-"),
        );
    }
    let withheld = strings(&grant["withheld_env"]);
    if !withheld.is_empty() {
        println!("  withheld env   {}", withheld.join(", "));
    }
    let generic: Vec<String> = needs["generic_settings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| {
            format!(
                "{} -> {}",
                g["key"].as_str().unwrap_or("-"),
                g["setting"].as_str().unwrap_or("-")
            )
        })
        .collect();
    println!(
        "  options        {}",
        if generic.is_empty() {
            "no generic provider_options keys".to_string()
        } else {
            format!("provider_options {}", generic.join(", "))
        }
    );
}

/// The manifest view: kind, settings, and whether a provider.json matches.
fn print_manifest(r: &Value) {
    let m = &r["manifest"];
    if m.is_object() {
        println!(
            "kind:       {}, protocol {}",
            m["kind"].as_str().unwrap_or("-"),
            m["protocol"].as_str().unwrap_or("-")
        );
        println!("settings:");
        for s in m["settings"].as_array().into_iter().flatten() {
            let name = s["name"].as_str().unwrap_or("-");
            let secret = if s["secret"] == json!(true) {
                " (secret)"
            } else {
                ""
            };
            let env: Vec<&str> = s["env"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let default = s["default"].as_str().map(|d| format!("; default {d}"));
            println!(
                "  {:<27} {}{}",
                format!("{name}{secret}"),
                env.join(", "),
                default.unwrap_or_default()
            );
        }
    }
    let f = &r["manifest_file"];
    if f.is_object() {
        let path = f["path"].as_str().unwrap_or("-");
        let verdict = if f["matches"] == json!(true) {
            "matches this component (sha256, capabilities, settings)".to_string()
        } else {
            let problems: Vec<&str> = f["problems"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            format!("DOES NOT MATCH: {}", problems.join("; "))
        };
        println!("manifest:   {path}: {verdict}");
    } else {
        println!("manifest:   no {MANIFEST_FILE} next to the component (--manifest PATH)");
    }
}
