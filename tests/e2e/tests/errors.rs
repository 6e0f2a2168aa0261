//! Every EPP error code reachable from bad input or a bad environment, and the
//! unsupported methods.

use epp_e2e::{Host, HostBuilder, Mode, testbed};
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn unsupported_methods_answer_e8004_at_once_without_network() {
    // A base URL nobody listens on: any network use would fail with E5003 instead.
    let host = HostBuilder::new(Mode::Direct)
        .env("ABX_OPENSANDBOX_BASE_URL", "http://127.0.0.1:9")
        .spawn();
    let s = "sb-1";
    let cases = [
        // OpenSandbox builds no images (templates come from sandboxes).
        (
            "templates.build",
            json!({"name": "t", "base_image": "alpine"}),
        ),
        (
            "templates.build",
            json!({"name": "t", "dockerfile": "FROM alpine"}),
        ),
        (
            "ports.domain",
            json!({"sandbox_id": s, "port": 80, "domain": "x.example.org"}),
        ),
        // Mounts are made at create (`volumes`): the methods say so.
        (
            "storage.mount",
            json!({"sandbox_id": s, "source": "s3://b", "mount_path": "/mnt"}),
        ),
        (
            "storage.unmount",
            json!({"sandbox_id": s, "mount_path": "/mnt"}),
        ),
        (
            "network.vpc_attach",
            json!({"sandbox_id": s, "vpc_id": "v"}),
        ),
        (
            "network.vpc_detach",
            json!({"sandbox_id": s, "vpc_id": "v"}),
        ),
    ];
    let started = Instant::now();
    for (method, params) in cases {
        let e = host.fails(method, params, "E8004");
        assert_eq!(e.code, -32000, "{method}: {e:?}");
        assert!(e.message.contains(method), "{method}: {e:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "E8004 answers took {:?}",
        started.elapsed()
    );
    let hello = host.ok("epp.hello", json!({}));
    let caps = hello["capabilities"].as_object().unwrap();
    assert_eq!(caps.len(), 18);
    assert_eq!(caps.values().filter(|v| **v == json!(true)).count(), 16);
    for on in ["templates.read", "templates.build", "storage.mount"] {
        assert_eq!(caps[on], true, "{on}");
    }
    for off in ["ports.domain", "network.vpc"] {
        assert_eq!(caps[off], false, "{off}");
    }
    assert_eq!(caps["code.interpret"], true);
    assert_eq!(caps["files.transfer"], true);
    assert_eq!(caps["sessions"], true);
    assert_eq!(caps["files.watch"], true);
}

#[test]
fn bad_params_are_e1001() {
    let host = Host::start(Mode::Direct);
    let e = host.fails("sandbox.create", json!({"timeout": 30}), "E1001");
    assert!(e.message.contains("60"), "{e:?}");
    host.fails("sandbox.create", json!({"entrypoint": []}), "E1001");
    let e = host.fails("sandbox.get_info", json!({"sandboxId": "x"}), "E1001");
    assert_eq!(e.code, -32602);
    assert!(e.message.contains("sandboxId"), "{e:?}");
    let e = host.fails("commands.run", json!({"sandbox_id": "x"}), "E1001");
    assert!(e.message.contains("cmd"), "{e:?}");
    host.fails("sandbox.get_info", json!({"sandbox_id": "../etc"}), "E1001");
    host.fails(
        "sandbox.set_timeout",
        json!({"sandbox_id": "x", "timeout": -5}),
        "E1001",
    );
    let e = host.call("no.such_method", json!({})).unwrap_err();
    assert_eq!((e.code, e.epp.as_str()), (-32601, "E1001"));
}

#[test]
fn invalid_setting_is_e2001_naming_the_variable() {
    for (var, value) in [
        ("ABX_OPENSANDBOX_READY_TIMEOUT", "soon"),
        ("ABX_OPENSANDBOX_PLATFORM", "linux/riscv"),
        ("ABX_OPENSANDBOX_NETWORK_POLICY", "{not json"),
        ("ABX_OPENSANDBOX_USE_SERVER_PROXY", "maybe"),
    ] {
        let host = HostBuilder::new(Mode::Direct).env(var, value).spawn();
        let e = host.fails("sandbox.list", json!({}), "E2001");
        assert!(e.message.contains(var), "{var}: {e:?}");
    }
}

#[test]
fn wrong_api_key_is_e2002() {
    if testbed().api_key.is_empty() {
        panic!("the e2e testbed must run with an API key");
    }
    let host = HostBuilder::new(Mode::Direct)
        .env("ABX_OPENSANDBOX_API_KEY", "wrong-key")
        .spawn();
    let e = host.fails("sandbox.list", json!({}), "E2002");
    assert_eq!(e.data["http_status"], 401);
    assert!(
        !e.message.contains("wrong-key"),
        "the key leaked into the message: {e:?}"
    );
    let host = HostBuilder::new(Mode::Direct)
        .without_env("ABX_OPENSANDBOX_API_KEY")
        .spawn();
    host.fails("sandbox.list", json!({}), "E2002");
}

#[test]
fn unknown_sandbox_is_e4004() {
    let host = Host::start(Mode::Direct);
    for (method, params) in [
        ("sandbox.get_info", json!({"sandbox_id": "no-such-sandbox"})),
        ("sandbox.kill", json!({"sandbox_id": "no-such-sandbox"})),
        ("sandbox.pause", json!({"sandbox_id": "no-such-sandbox"})),
        (
            "commands.run",
            json!({"sandbox_id": "no-such-sandbox", "cmd": "true"}),
        ),
        (
            "files.read",
            json!({"sandbox_id": "no-such-sandbox", "path": "/etc/hostname"}),
        ),
        (
            "files.exists",
            json!({"sandbox_id": "no-such-sandbox", "path": "/etc/hostname"}),
        ),
    ] {
        host.fails(method, params, "E4004");
    }
}

#[test]
fn server_down_is_e5003() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = HostBuilder::new(Mode::Direct)
        .env(
            "ABX_OPENSANDBOX_BASE_URL",
            &format!("http://127.0.0.1:{port}"),
        )
        .spawn();
    let e = host.fails("sandbox.list", json!({}), "E5003");
    assert!(e.message.contains(&port.to_string()), "{e:?}");
}

/// A sandbox whose execd died: through the server proxy that is a 502 (E5001),
/// directly a refused connection (E5003).
fn dead_execd(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let pid = epp_e2e::execd_pid(&host, &id);
    // The testbed runs sandboxes as processes of this machine: execd is dead
    // once its process is.
    let own = u32::try_from(pid).expect("a pid");
    assert!(
        epp_e2e::running(own),
        "execd {pid} is no process of this machine"
    );
    // execd may die before it answers its own killing: then the answer is
    // lost, or says that the sandbox stopped under it (its main process died).
    if let Err(e) = host.call(
        "process.signal",
        json!({"sandbox_id": id, "pid": pid, "signal": "KILL"}),
    ) {
        assert!(
            matches!(e.epp.as_str(), "E5001" | "E5003" | "E4009"),
            "{e:?}"
        );
    }
    epp_e2e::wait_until("execd's end", Duration::from_secs(10), || {
        (!epp_e2e::running(own)).then_some(())
    });
    let want = if mode == Mode::Proxy {
        "E5001"
    } else {
        "E5003"
    };
    let e = host
        .call("commands.run", json!({"sandbox_id": id, "cmd": "true"}))
        .unwrap_err();
    assert_eq!(e.epp, want, "{mode:?}: {e:?}");
}
epp_e2e::both_modes!(execd_gone, super::dead_execd);
