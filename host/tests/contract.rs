//! The released abx:epp 1.0.0 and 1.1.0 providers (tests/fixtures/epp-1.0.0,
//! built from 472a2d9's guest and WIT; tests/fixtures/epp-1.1.0, from
//! 126fecf's) under today's host, whose WIT has moved on: each is loaded
//! (imports matched by semver, exports called by name, like every
//! component's), says which version it was built against, and serves a real
//! session against the testbed, streams and terminals included; what it lacks
//! (functions, and params of its functions, added since) answers E8004.

mod common;

use common::host_command;
use epp_client::{Client, EppCode, Options};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

fn fixture(file: &str) -> PathBuf {
    fixture_of("1.0.0", file)
}

fn fixture_of(version: &str, file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../tests/fixtures/epp-{version}"))
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
    // Every capability it declares, it exports functions of: all are served.
    assert_eq!(contract["not_served"], json!([]), "{contract}");
    // It has no reusable(): a fresh instance for every call.
    assert_eq!(contract["declares_reusable"], false, "{contract}");
    let capabilities = &report["manifest"]["capabilities"];
    for streamed in ["exec.run", "exec.stream", "pty", "files.rw"] {
        assert_eq!(capabilities[streamed], true, "{streamed}: {capabilities}");
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

/// `epp-host run` of the `version` fixture against the shared testbed, with
/// `args` (a 1.0 component declares no origin: it reaches the testbed only
/// by `--allow-host`; a 1.1 one says what it needs itself).
fn serve(version: &str, args: &[&str], cache: &Path) -> (Child, Client) {
    let tb = epp_e2e::testbed();
    let mut cmd = host_command();
    cmd.arg("run")
        .arg(fixture_of(version, "opensandbox.wasm"))
        .arg("--trusted-key")
        .arg(fixture_of(version, "fixture.pub"))
        .args(["--trust-file", "/dev/null"])
        .args(args)
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
    let (mut child, client) = serve("1.0.0", &["--allow-host", "127.0.0.1"], cache.path());
    let call = |method: &str, params: Value| {
        client
            .call(method, params, PATIENCE)
            .unwrap_or_else(|e| panic!("{method}: no answer ({e:?})"))
    };
    let hello = call("epp.hello", json!({"protocol": "EPP/1"})).expect("epp.hello");
    assert_eq!(hello["provider"]["id"], "opensandbox");
    for served in [
        "sandbox.lifecycle",
        "exec.run",
        "exec.stream",
        "pty",
        "files.rw",
    ] {
        assert_eq!(hello["capabilities"][served], true, "{served}: {hello}");
    }

    let created = call("sandbox.create", json!({"timeout": 300})).expect("sandbox.create");
    let id = created["sandbox_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no sandbox_id in {created}"))
        .to_string();
    let info = call("sandbox.get_info", json!({"sandbox_id": id})).expect("sandbox.get_info");
    assert_eq!(info["sandbox_id"], id.as_str(), "{info}");
    let listed = call("sandbox.list", json!({})).expect("sandbox.list");
    assert!(listed.to_string().contains(&id), "{listed}");

    // A streamed command: its output as notifications, then its exit code.
    let run = client.request(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "echo one; echo two >&2; exit 3", "stream": true}),
    );
    let answer = client
        .response(&run, PATIENCE)
        .expect("commands.run answers")
        .reply()
        .expect("commands.run");
    assert_eq!(answer["exit_code"], 3, "{answer}");
    let command_id = answer["command_id"].as_str().expect("a command id");
    let notes = client.notifications();
    let of = |method: &str| {
        notes
            .iter()
            .filter(|n| n.is_notification(method) && n.request_id() == &run)
            .map(|n| n.raw["params"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        of("commands.started"),
        [json!({"request_id": run, "command_id": command_id})]
    );
    let output: String = of("commands.output")
        .iter()
        .map(|p| {
            format!(
                "{}:{}",
                p["stream"].as_str().unwrap(),
                p["data"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        output.contains("stdout:one") && output.contains("stderr:two"),
        "{output}"
    );
    // The same collected.
    let collected =
        call("commands.run", json!({"sandbox_id": id, "cmd": "echo hi"})).expect("commands.run");
    assert_eq!(
        collected["stdout"].as_str().map(str::trim),
        Some("hi"),
        "{collected}"
    );

    // A terminal: what is typed comes back as output, and it can be killed.
    let pty = call("pty.create", json!({"sandbox_id": id})).expect("pty.create");
    let pty_id = pty["pty_id"].as_str().expect("a pty id").to_string();
    let typed = base64_of(b"echo typed-$((40+2))\n");
    call(
        "pty.send_input",
        json!({"sandbox_id": id, "pty_id": pty_id, "data": typed}),
    )
    .expect("pty.send_input");
    // All output so far, decoded: the echo of the line and its result may
    // come in several notifications.
    let output_of = |notes: &[epp_client::Message]| -> String {
        notes
            .iter()
            .filter(|n| {
                n.is_notification("pty.output") && n.raw["params"]["pty_id"] == pty_id.as_str()
            })
            .map(|n| decoded(n.raw["params"]["data"].as_str().unwrap_or_default()))
            .collect()
    };
    let is_output = |n: &epp_client::Message| {
        n.is_notification("pty.output") && n.raw["params"]["pty_id"] == pty_id.as_str()
    };
    loop {
        let notes = client.notifications();
        if output_of(&notes).contains("typed-42") {
            break;
        }
        // Wait for the next piece of output.
        let newest = notes.iter().filter(|n| is_output(n)).map(|n| n.at).max();
        let next = client.wait_notification(PATIENCE, |n| is_output(n) && Some(n.at) > newest);
        assert!(
            next.is_some(),
            "no pty.output with the typed line: {:?}",
            output_of(&client.notifications())
        );
    }
    call("pty.kill", json!({"sandbox_id": id, "pty_id": pty_id})).expect("pty.kill");
    let exited = client.wait_notification(PATIENCE, |n| {
        n.is_notification("pty.exit") && n.raw["params"]["pty_id"] == pty_id.as_str()
    });
    assert!(exited.is_some(), "no pty.exit");

    // What 1.0 lacks (a function added in 1.1) is E8004, at once.
    let err = call(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "cat", "stdin": true}),
    )
    .expect_err("1.0 has no commands-run-stdin");
    assert_eq!(err.code(), Some(EppCode::Unsupported), "{err}");
    assert!(err.message.contains("abx:epp@1.0.0"), "{err}");

    call("sandbox.kill", json!({"sandbox_id": id})).expect("sandbox.kill");
    let gone = call("sandbox.get_info", json!({"sandbox_id": id}));
    match gone {
        Err(e) => assert_eq!(e.code(), Some(EppCode::NotFound), "{e}"),
        Ok(info) => assert_ne!(info["state"], "Running", "still running after kill: {info}"),
    }
    client.close_input();
    let _ = child.wait();
}

#[test]
fn inspect_says_the_1_1_component_is_older_and_keeps_its_secrets_out() {
    let out = host_command()
        .args([
            "inspect",
            "--json",
            "--trust-file",
            "/dev/null",
            "--trusted-key",
        ])
        .arg(fixture_of("1.1.0", "fixture.pub"))
        .arg(fixture_of("1.1.0", "opensandbox.wasm"))
        .output()
        .expect("epp-host inspect");
    let report: Value = serde_json::from_slice(&out.stdout).expect("inspect --json");
    assert_eq!(report["world"], "abx:epp/provider@1.1.0", "{report:#}");
    assert_eq!(report["exports"], json!(["abx:epp/infra@1.1.0"]));
    let contract = &report["contract"];
    assert_eq!(contract["built_against"], "abx:epp@1.1.0");
    assert_eq!(contract["current"], false);
    assert_eq!(contract["not_served"], json!([]), "{contract}");
    // A 1.1 component says what it needs: its API key stays with the host;
    // the registry password, which it sends itself (in the create body), is
    // all it sees.
    assert_eq!(
        contract["secrets_in_component_environment"],
        json!(["registry_password"]),
        "{contract}"
    );
    assert_eq!(contract["has_needs"], true);
    let capabilities = &report["manifest"]["capabilities"];
    for (name, on) in [
        ("code.interpret", true),
        ("sessions", true),
        ("templates.read", false),
        ("storage.mount", false),
    ] {
        assert_eq!(capabilities[name], on, "{name}: {capabilities}");
    }
    assert_eq!(report["manifest"]["wit_world"], "abx:epp/provider@1.1.0");
    assert_eq!(report["manifest_file"]["matches"], true, "{report:#}");
}

#[test]
fn the_released_1_1_component_serves_a_session_against_the_testbed() {
    let cache = tempfile::tempdir().unwrap();
    let (mut child, client) = serve("1.1.0", &[], cache.path());
    let call = |method: &str, params: Value| {
        client
            .call(method, params, PATIENCE)
            .unwrap_or_else(|e| panic!("{method}: no answer ({e:?})"))
    };
    let hello = call("epp.hello", json!({"protocol": "EPP/1"})).expect("epp.hello");
    for (name, on) in [
        ("sessions", true),
        ("code.interpret", true),
        ("templates.read", false),
        ("templates.build", false),
        ("storage.mount", false),
    ] {
        assert_eq!(hello["capabilities"][name], on, "{name}: {hello}");
    }
    let tag = format!("contract-1-1-{}", std::process::id());
    let created = call("sandbox.create", json!({"metadata": {"t": tag}})).expect("sandbox.create");
    let id = created["sandbox_id"].as_str().expect("an id").to_string();

    // A 1.1 sandbox.list answers the bare list, which the host still answers
    // as `{sandboxes}` (the 1.2 page record keeps that key).
    let listed = call("sandbox.list", json!({"metadata": {"t": tag}})).expect("sandbox.list");
    let ids: Vec<&str> = listed["sandboxes"]
        .as_array()
        .unwrap_or_else(|| panic!("no sandboxes list in {listed}"))
        .iter()
        .filter_map(|s| s["sandbox_id"].as_str())
        .collect();
    assert_eq!(ids, [id.as_str()], "{listed}");
    assert!(listed.get("next_cursor").is_none(), "{listed}");

    // What 1.1 added works: a command fed through stdin.
    let run = call(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "echo $((6*7))"}),
    )
    .expect("commands.run");
    assert_eq!(run["stdout"], "42\n", "{run}");
    let session = call("sessions.create", json!({"sandbox_id": id})).expect("sessions.create");
    assert!(session["session_id"].is_string(), "{session}");

    // What 1.2 added is E8004 naming the version, at once: a param of an
    // existing method (a field of its record, a param of its function) and a
    // new method of a capability it has.
    for (method, params, names) in [
        (
            "commands.run",
            json!({"sandbox_id": id, "cmd": "id", "user": "nobody"}),
            "`user`",
        ),
        (
            "sessions.create",
            json!({"sandbox_id": id, "user": "nobody"}),
            "`user`",
        ),
        (
            "sandbox.create",
            json!({"volumes": [{"source": "/tmp", "mount_path": "/mnt"}]}),
            "`volumes`",
        ),
        ("sandbox.list", json!({"limit": 1}), "`limit`"),
        (
            "sandbox.metrics",
            json!({"sandbox_id": id}),
            "sandbox-metrics",
        ),
        (
            "files.replace",
            json!({"sandbox_id": id, "path": "/tmp/x", "old": "a", "new": "b"}),
            "files-replace",
        ),
    ] {
        let err = call(method, params).expect_err(method);
        assert_eq!(err.code(), Some(EppCode::Unsupported), "{method}: {err}");
        assert!(
            err.message.contains("abx:epp@1.1.0") && err.message.contains(names),
            "{method}: {err}"
        );
    }
    // Its file reader and writer have no `read-into`/`write-from` (abx:epp
    // 1.3): the host moves streamed content through `read` and `write`.
    let content: Vec<u8> = (0..(3 << 20) + 7).map(|i| (i * 7 % 251) as u8).collect();
    let path = "/tmp/contract-1-1.bin";
    let write = client.request(
        "files.write",
        json!({"sandbox_id": id, "path": path, "size": content.len(), "stream": true,
               "encoding": "binary"}),
    );
    for piece in content.chunks(900_001) {
        client.notify_framed("files.write_chunk", json!({"request_id": write}), piece);
    }
    let info = client
        .response(&write, PATIENCE)
        .expect("files.write answers")
        .reply()
        .expect("files.write");
    assert_eq!(info["size"], content.len(), "{info}");
    let read = client.request(
        "files.read",
        json!({"sandbox_id": id, "path": path, "stream": true, "encoding": "binary"}),
    );
    let answer = client
        .response(&read, PATIENCE)
        .expect("files.read answers")
        .reply()
        .expect("files.read");
    assert_eq!(answer["size"], content.len(), "{answer}");
    let mut back = Vec::new();
    for note in client.notifications() {
        if note.is_notification("files.data") && note.request_id() == &read {
            assert_eq!(note.raw["params"]["offset"], back.len(), "{:?}", note.raw);
            back.extend_from_slice(note.frame.as_deref().expect("a binary frame"));
        }
    }
    assert!(
        back == content,
        "read back {} bytes, not what was written",
        back.len()
    );

    // A capability it does not declare is refused as before.
    let err = call("templates.list", json!({})).expect_err("templates.list");
    assert_eq!(err.code(), Some(EppCode::Unsupported), "{err}");
    // A plain typo is still E1001, not E8004.
    let err = call(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "id", "usr": "x"}),
    )
    .expect_err("a typo");
    assert_eq!(err.code(), Some(EppCode::InvalidArgument), "{err}");

    call("sandbox.kill", json!({"sandbox_id": id})).expect("sandbox.kill");
    client.close_input();
    let _ = child.wait();
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn decoded(data: &str) -> String {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}
