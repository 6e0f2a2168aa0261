//! The released abx:epp 1.0.0 provider (tests/fixtures/epp-1.0.0, built from
//! 472a2d9's guest and WIT) under today's host, whose WIT has moved on: it is
//! loaded (imports matched by semver, exports called by name), says which
//! version it was built against, and serves a real session against the
//! testbed; what 1.0 cannot do here answers E8004.

mod common;

use common::host_command;
use epp_client::{Client, EppCode, Options};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

fn fixture(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/epp-1.0.0")
        .join(file)
}

const PATIENCE: Duration = Duration::from_secs(120);

#[test]
fn inspect_says_which_contract_and_what_follows() {
    let out = host_command()
        .args([
            "inspect",
            "--json",
            "--trust-file",
            "/dev/null",
            "--trusted-key",
        ])
        .arg(fixture("fixture.pub"))
        .arg(fixture("opensandbox.wasm"))
        .output()
        .expect("epp-host inspect");
    let report: Value = serde_json::from_slice(&out.stdout).expect("inspect --json");
    assert_eq!(report["world"], "abx:epp/provider@1.0.0", "{report:#}");
    assert_eq!(report["exports"], json!(["abx:epp/infra@1.0.0"]));
    let contract = &report["contract"];
    assert_eq!(contract["built_against"], "abx:epp@1.0.0");
    assert_eq!(
        contract["host_speaks"],
        format!("abx:epp@{}", epp_host::contract::current())
    );
    assert_eq!(contract["current"], false);
    for adapter in ["exec.run", "pty", "files.rw"] {
        assert!(
            contract["not_served"]
                .as_array()
                .unwrap()
                .contains(&json!(adapter)),
            "{contract}"
        );
    }
    assert_eq!(
        contract["secrets_in_component_environment"],
        json!(["api_key", "registry_password"])
    );
    assert_eq!(report["signature"]["trusted"], true);
    // Its provider.json (beside it) names the world it was built against, and matches.
    assert_eq!(report["manifest"]["wit_world"], "abx:epp/provider@1.0.0");
    assert_eq!(report["manifest_file"]["matches"], true, "{report:#}");
    // The text view says it too.
    let out = host_command()
        .args(["inspect", "--trust-file", "/dev/null"])
        .arg(fixture("opensandbox.wasm"))
        .output()
        .expect("epp-host inspect");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("contract:   built against abx:epp@1.0.0"),
        "{text}"
    );
    assert!(text.contains("are in its environment"), "{text}");
}

/// `epp-host run` of the fixture against the shared testbed, allowed to
/// reach it only by `--allow-host` (a 1.0 component declares no origin).
fn serve_fixture(cache: &Path) -> (Child, Client) {
    let tb = epp_e2e::testbed();
    let mut cmd = host_command();
    cmd.arg("run")
        .arg(fixture("opensandbox.wasm"))
        .arg("--trusted-key")
        .arg(fixture("fixture.pub"))
        .args(["--trust-file", "/dev/null", "--allow-host", "127.0.0.1"])
        .arg("--cache-dir")
        .arg(cache)
        .env("ABX_OPENSANDBOX_BASE_URL", &tb.url)
        .env("ABX_OPENSANDBOX_READY_TIMEOUT", "60")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if !tb.api_key.is_empty() {
        cmd.env("ABX_OPENSANDBOX_API_KEY", &tb.api_key);
    }
    let mut child = cmd.spawn().expect("starting epp-host");
    let client = Client::new(
        child.stdin.take().unwrap(),
        child.stdout.take().unwrap(),
        Options {
            transcript: false,
            on_line: None,
        },
    );
    (child, client)
}

#[test]
fn the_released_1_0_component_serves_a_session_against_the_testbed() {
    let cache = tempfile::tempdir().unwrap();
    let (mut child, client) = serve_fixture(cache.path());
    let call = |method: &str, params: Value| {
        client
            .call(method, params, PATIENCE)
            .unwrap_or_else(|e| panic!("{method}: no answer ({e:?})"))
    };
    let hello = call("epp.hello", json!({"protocol": "EPP/1"})).expect("epp.hello");
    assert_eq!(hello["provider"]["id"], "opensandbox");
    assert_eq!(hello["capabilities"]["sandbox.lifecycle"], true, "{hello}");
    assert_eq!(hello["capabilities"]["exec.run"], false, "{hello}");

    let created = call("sandbox.create", json!({"timeout": 300})).expect("sandbox.create");
    let id = created["sandbox_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no sandbox_id in {created}"))
        .to_string();
    let info = call("sandbox.get_info", json!({"sandbox_id": id})).expect("sandbox.get_info");
    assert_eq!(info["sandbox_id"], id.as_str(), "{info}");
    let listed = call("sandbox.list", json!({})).expect("sandbox.list");
    assert!(listed.to_string().contains(&id), "{listed}");

    // What a 1.0 component cannot do under this host is E8004, at once.
    let err = call("commands.run", json!({"sandbox_id": id, "command": "true"}))
        .expect_err("commands.run is not served for abx:epp 1.0");
    assert_eq!(err.code(), Some(EppCode::Unsupported), "{err}");

    call("sandbox.kill", json!({"sandbox_id": id})).expect("sandbox.kill");
    let gone = call("sandbox.get_info", json!({"sandbox_id": id}));
    match gone {
        Err(e) => assert_eq!(e.code(), Some(EppCode::NotFound), "{e}"),
        Ok(info) => assert_ne!(info["state"], "Running", "still running after kill: {info}"),
    }
    client.close_input();
    let _ = child.wait();
}
