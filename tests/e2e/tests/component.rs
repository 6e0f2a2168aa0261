//! The shipped component itself: valid, signed, the right world, and importing
//! nothing beyond what a provider may use.

use epp_e2e::{artifact, target_dir};
use serde_json::Value;
use std::process::Command;

/// `epp-host inspect` of the shipped component: its stdout (`--json` or text).
fn inspect_output(json: bool) -> Vec<u8> {
    let host = artifact("EPP_HOST_BIN", target_dir().join("debug/epp-host"));
    let wasm = artifact("EPP_GUEST_WASM", target_dir().join("epp/opensandbox.wasm"));
    let key = artifact("EPP_TRUSTED_KEY", target_dir().join("epp/dev.pub"));
    let mut cmd = Command::new(host);
    cmd.arg("inspect").arg(&wasm).arg("--trusted-key").arg(&key);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("running epp-host inspect");
    assert!(
        out.status.success(),
        "inspect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn inspect() -> Value {
    serde_json::from_slice(&inspect_output(true)).expect("inspect --json prints JSON")
}

#[test]
fn the_text_view_shows_what_it_needs_and_its_generic_options() {
    let text = String::from_utf8(inspect_output(false)).unwrap();
    assert!(text.contains("needs (asked -> granted here):"), "{text}");
    assert!(
        text.contains("provider_options sandbox_base_url -> base_url, sandbox_api_key -> api_key"),
        "{text}"
    );
    assert_eq!(
        report_generic(&inspect()),
        ["sandbox_base_url", "sandbox_api_key"]
    );
}

fn report_generic(report: &Value) -> Vec<String> {
    report["manifest"]["needs"]["generic_settings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| g["key"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn imports_only_http_io_clocks_random_cli_basics_and_epp() {
    let report = inspect();
    let imports: Vec<&str> = report["imports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!imports.is_empty());
    let allowed = [
        "wasi:http/types@",
        "wasi:http/outgoing-handler@",
        "wasi:io/",
        "wasi:clocks/monotonic-clock@",
        "wasi:clocks/wall-clock@",
        "wasi:random/",
        "wasi:cli/environment@",
        "wasi:cli/exit@",
        "wasi:cli/stdin@",
        "wasi:cli/stdout@",
        "wasi:cli/stderr@",
        "wasi:cli/terminal-",
        "abx:epp/types@1.3.0",
        "abx:epp/websocket@1.3.0",
        "abx:epp/memo@1.3.0",
        "abx:epp/request@1.3.0",
    ];
    for import in &imports {
        assert!(
            allowed.iter().any(|a| import.starts_with(a)),
            "the component imports {import}, which a provider must not use"
        );
    }
    for needed in [
        "wasi:http/outgoing-handler@0.2.12",
        "abx:epp/websocket@1.3.0",
        "abx:epp/request@1.3.0",
    ] {
        assert!(
            imports.contains(&needed),
            "{needed} missing from {imports:?}"
        );
    }
    assert!(
        !imports
            .iter()
            .any(|i| i.contains("filesystem") || i.contains("sockets"))
    );
}

#[test]
fn exports_the_provider_world_and_is_signed() {
    let report = inspect();
    assert_eq!(report["world"], "abx:epp/provider@1.3.0");
    assert_eq!(
        report["exports"],
        serde_json::json!(["abx:epp/infra@1.3.0"])
    );
    assert_eq!(
        report["signature"]["trusted"], true,
        "{}",
        report["signature"]
    );
    assert_eq!(report["provider"]["id"], "opensandbox");
    let caps = report["capabilities"].as_object().unwrap();
    assert_eq!(caps.len(), 18);
}
