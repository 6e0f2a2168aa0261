//! Sandbox endpoints on another host than the configured server (README,
//! "Network policy"): loopback names are one host, so `localhost` needs nothing
//! more; endpoints on any other host are refused at first with an error that
//! names the exact setting, and with that setting everything works. A testbed
//! started with `--eip
//! 127.0.0.2` hands out its endpoints on 127.0.0.2, as a Docker deployment with
//! `server.eip` does on its public address (its server-proxy endpoints too:
//! the real server builds them from `eip`, so there proxy mode is no way out).

use epp_e2e::{Host, HostBuilder, Mode, PrivateTestbed, b64d, b64e, orphans, sh, unique};
use serde_json::json;
use std::time::{Duration, Instant};

/// What a new sandbox must do: a command, a file round trip and a terminal
/// (the terminal is a WebSocket: the same rule applies to it).
fn works(host: &Host) -> String {
    let id = host.create_sandbox();
    assert_eq!(sh(host, &id, "echo hi"), "hi\n");
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": "/tmp/e2e-endpoint", "content": "round trip"}),
    );
    let read = host.ok(
        "files.read",
        json!({"sandbox_id": id, "path": "/tmp/e2e-endpoint"}),
    );
    assert_eq!(read["content"], "round trip");
    let pty = host.ok("pty.create", json!({"sandbox_id": id}))["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    host.ok(
        "pty.send_input",
        json!({"sandbox_id": id, "pty_id": pty, "data": b64e(b"echo $((40+2))\n")}),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out: Vec<u8> = host
            .notes()
            .iter()
            .filter(|(_, n)| n["method"] == "pty.output" && n["params"]["pty_id"] == pty.as_str())
            .flat_map(|(_, n)| b64d(n["params"]["data"].as_str().unwrap()))
            .collect();
        if String::from_utf8_lossy(&out).contains("\n42\r\n") {
            break;
        }
        assert!(Instant::now() < deadline, "the terminal never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    host.ok("pty.kill", json!({"sandbox_id": id, "pty_id": pty}));
    id
}

/// `NAME=value` as the message spells it, found by the variable's name alone.
fn assignment<'m>(message: &'m str, name: &str) -> (&'m str, &'m str) {
    let word = message
        .split_whitespace()
        .find(|w| w.starts_with(&format!("{name}=")))
        .unwrap_or_else(|| panic!("the message names no {name}=…: {message}"));
    let word = word.trim_end_matches([',', ';', '.', ')']);
    word.split_once('=').unwrap()
}

#[test]
fn a_localhost_base_url_reaches_endpoints_on_127_0_0_1() {
    // The testbed hands out endpoints on 127.0.0.1 (its own host); the server
    // is configured as `localhost`. Before loopback names were one host, every
    // sandbox call failed with E6001.
    let url = epp_e2e::testbed().url.replace("127.0.0.1", "localhost");
    assert!(url.contains("localhost"), "{url}");
    let host = HostBuilder::new(Mode::Direct)
        .env("ABX_OPENSANDBOX_BASE_URL", &url)
        .spawn();
    works(&host);
}

#[test]
fn endpoints_on_another_host_the_first_error_says_what_to_set() {
    let tb = PrivateTestbed::start_with(&["--eip", "127.0.0.2"]);
    let on = |b: HostBuilder| {
        b.env("ABX_OPENSANDBOX_BASE_URL", &tb.url)
            .env("ABX_OPENSANDBOX_API_KEY", &tb.api_key)
    };

    // The first error: the endpoint's host is not the server's, so it is refused.
    let host = on(HostBuilder::new(Mode::Direct)).spawn();
    let tag = unique("eip");
    let e = host.fails("sandbox.create", json!({"metadata": {"e2e": tag}}), "E6001");
    let (var, value) = assignment(&e.message, "ABX_OPENSANDBOX_ALLOW_HOSTS");
    assert_eq!(value, "127.0.0.2", "{e:?}");
    assert!(
        e.message.contains("deleted sandbox"),
        "the half-made sandbox: {e:?}"
    );
    let left = host.ok("sandbox.list", json!({"metadata": {"e2e": tag}}));
    assert_eq!(left["sandboxes"], json!([]), "the refused sandbox is left");

    // With what the message says, everything works.
    let allowed = on(HostBuilder::new(Mode::Direct)).env(var, value).spawn();
    let first = works(&allowed);

    drop((host, allowed));
    assert!(orphans(&[first], Duration::from_secs(10)).is_empty());
}

#[test]
fn a_refused_endpoint_is_named_in_every_sandbox_call() {
    // A sandbox made where its endpoint is allowed, then used from a host that
    // does not allow it: each call says the same (run, files, terminal).
    let tb = PrivateTestbed::start_with(&["--eip", "127.0.0.2"]);
    let on = |b: HostBuilder| {
        b.env("ABX_OPENSANDBOX_BASE_URL", &tb.url)
            .env("ABX_OPENSANDBOX_API_KEY", &tb.api_key)
    };
    let maker = on(HostBuilder::new(Mode::Direct))
        .arg("--allow-host")
        .arg("127.0.0.2")
        .spawn();
    let id = maker.create_sandbox();
    let host = on(HostBuilder::new(Mode::Direct)).spawn();
    for (method, params) in [
        ("commands.run", json!({"sandbox_id": id, "cmd": "true"})),
        ("files.exists", json!({"sandbox_id": id, "path": "/tmp"})),
        (
            "files.write",
            json!({"sandbox_id": id, "path": "/tmp/x", "content": "x"}),
        ),
        ("sandbox.connect", json!({"sandbox_id": id})),
    ] {
        let e = host.fails(method, params, "E6001");
        let (_, value) = assignment(&e.message, "ABX_OPENSANDBOX_ALLOW_HOSTS");
        assert_eq!(value, "127.0.0.2", "{method}: {e:?}");
        assert!(e.message.contains(&id), "{method}: {e:?}");
    }
    let e = host.fails("pty.create", json!({"sandbox_id": id}), "E6001");
    assert!(e.message.contains("127.0.0.2"), "{e:?}");
}
