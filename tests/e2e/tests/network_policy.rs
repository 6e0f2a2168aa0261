//! `network_policy` of sandbox.create (and the setting it replaces) against
//! the real server, OpenSandbox 1.1.1: checked like the setting, `ports`
//! refused before anything is created (1.1.x drops them without a word), a
//! policy without ports sent to the server and, on the Docker tier, handed to
//! the sandbox's egress sidecar.

use epp_e2e::{Fault, FaultProxy, Host, HostBuilder, Mode, both_modes, docker_testbed, unique};
use serde_json::{Value, json};
use std::io::{Read, Write};

/// The sandboxes with this tag (none must be made by a refused create).
fn tagged(host: &Host, tag: &str) -> Vec<Value> {
    host.ok("sandbox.list", json!({"metadata": {"e2e-policy": tag}}))["sandboxes"]
        .as_array()
        .unwrap()
        .clone()
}

fn ports_refused_on_old_servers(mode: Mode) {
    let host = Host::start(mode);
    let tag = unique("policy");
    let e = host.fails(
        "sandbox.create",
        json!({
            "metadata": {"e2e-policy": tag},
            "network_policy": {"default_action": "deny", "egress": [
                {"action": "allow", "target": "pypi.org"},
                {"action": "allow", "target": "10.0.0.0/8", "ports": [443]},
            ]},
        }),
        "E1001",
    );
    for words in [
        "network_policy.egress[1] limits ports",
        "is OpenSandbox 1.1.1",
        "every port",
        "nothing was created",
        "1.2 or later",
    ] {
        assert!(e.message.contains(words), "{words}: {e:?}");
    }
    assert_eq!(tagged(&host, &tag), Vec::<Value>::new());

    // The same rule in the setting: E2001 naming it, nothing made either.
    let configured = HostBuilder::new(mode)
        .env(
            "ABX_OPENSANDBOX_NETWORK_POLICY",
            r#"{"defaultAction":"deny","egress":[{"action":"allow","target":"10.0.0.0/8","ports":[443]}]}"#,
        )
        .spawn();
    let e = configured.fails(
        "sandbox.create",
        json!({"metadata": {"e2e-policy": tag}}),
        "E2001",
    );
    assert!(
        e.message
            .contains("ABX_OPENSANDBOX_NETWORK_POLICY (egress[0]) limits ports"),
        "{e:?}"
    );
    assert_eq!(tagged(&host, &tag), Vec::<Value>::new());
    // A request's own policy without ports replaces the setting's: it is sent
    // (this testbed's runtime has no egress sidecar and says so).
    let e = configured.fails(
        "sandbox.create",
        json!({"metadata": {"e2e-policy": tag}, "network_policy": {"egress": [{"action": "allow", "target": "pypi.org"}]}}),
        "E1001",
    );
    assert!(
        e.message
            .contains("networkPolicy is not supported by the testbed"),
        "{e:?}"
    );
    assert_eq!(tagged(&host, &tag), Vec::<Value>::new());
}
both_modes!(
    ports_are_refused_before_opensandbox_1_2,
    super::ports_refused_on_old_servers
);

#[test]
fn bad_policies_are_e1001_naming_the_rule() {
    let host = Host::start(Mode::Direct);
    let tag = unique("policy");
    for (egress, words) in [
        (json!([{"action": "allow"}]), "egress[0] needs a target"),
        (
            json!([{"action": "deny", "target": "a.io"}, {"action": "allow", "target": "pypi.org", "ports": [443]}]),
            "egress[1] limits ports of the domain `pypi.org`",
        ),
        (
            json!([{"action": "allow", "ports": [0]}]),
            "`0` is not a TCP port",
        ),
    ] {
        let e = host.fails(
            "sandbox.create",
            json!({"metadata": {"e2e-policy": tag}, "network_policy": {"egress": egress}}),
            "E1001",
        );
        assert!(e.message.contains(words), "{words}: {e:?}");
    }
    // The contract's own checks: an action that is neither allow nor deny.
    let e = host.fails(
        "sandbox.create",
        json!({"network_policy": {"egress": [{"action": "block", "target": "a.io"}]}}),
        "E1001",
    );
    assert_eq!(e.code, -32602, "{e:?}");
    assert_eq!(tagged(&host, &tag), Vec::<Value>::new());
}

/// The gate on `ports` reads the server's version: a pre-release of 1.2
/// (`1.2.0rc1`, `1.2.0.dev0`) keeps it shut like 1.1.x, a final 1.2.0 opens
/// it. The fault proxy answers `GET /version` with each; one host each, as
/// a host remembers a server's version.
#[test]
fn only_a_final_1_2_takes_ports() {
    let rule = json!({"egress": [{"action": "allow", "target": "10.0.0.0/8", "ports": [443]}]});
    let tag = unique("policy");
    for (version, refused) in [("1.2.0rc1", true), ("1.2.0.dev0", true), ("1.2.0", false)] {
        let proxy = FaultProxy::testbed();
        proxy.fault(
            "GET",
            "/version",
            Fault::Body(200, json!({"version": version}).to_string()),
            1,
        );
        let host = HostBuilder::new(Mode::Direct).via(&proxy).spawn();
        let e = host.fails(
            "sandbox.create",
            json!({"metadata": {"e2e-policy": tag}, "network_policy": rule}),
            "E1001",
        );
        assert_eq!(proxy.count("GET", "/version"), 1, "{version}");
        if refused {
            for words in [
                format!("is OpenSandbox {version}"),
                "nothing was created".to_string(),
            ] {
                assert!(e.message.contains(&words), "{version}: {words}: {e:?}");
            }
            assert_eq!(proxy.count("POST", "/sandboxes"), 0, "{version}");
        } else {
            // Sent: this testbed's runtime has no egress sidecar and says so.
            assert!(
                e.message
                    .contains("networkPolicy is not supported by the testbed"),
                "{version}: {e:?}"
            );
            assert_eq!(proxy.count("POST", "/sandboxes"), 1, "{version}");
        }
        assert_eq!(tagged(&host, &tag), Vec::<Value>::new());
    }
}

// ------------------------------------------------------------------ Docker tier
// The server starts an egress sidecar per sandbox with a policy (the testbed's
// stand-in reports what it was handed; it enforces nothing).

/// `GET {server}/v1/sandboxes/{id}/networkpolicy`: the policy the server
/// handed the sandbox's egress sidecar (it proxies the sidecar's `/policy`).
fn sidecar_policy(sandbox_id: &str) -> Value {
    let tb = docker_testbed();
    let authority = tb.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let key = match tb.api_key.as_str() {
        "" => String::new(),
        key => format!("OPEN-SANDBOX-API-KEY: {key}\r\n"),
    };
    write!(
        stream,
        "GET /v1/sandboxes/{sandbox_id}/networkpolicy HTTP/1.0\r\nHost: {authority}\r\n{key}\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{answer}"
    );
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn policy_reaches_the_sidecar(mode: Mode) {
    let host = Host::start_docker(mode);
    let tag = unique("policy");
    let info = host.create_info(json!({
        "metadata": {"e2e-policy": tag},
        "network_policy": {"default_action": "deny", "egress": [
            {"action": "allow", "target": "pypi.org"},
            {"action": "deny", "target": "*.example.com"},
        ]},
    }));
    let id = info["sandbox_id"].as_str().unwrap();
    let handed = sidecar_policy(id);
    assert_eq!(
        handed["policy"],
        json!({"defaultAction": "deny", "egress": [
            {"action": "allow", "target": "pypi.org"},
            {"action": "deny", "target": "*.example.com"},
        ]}),
        "{handed}"
    );
    assert_eq!(handed["mode"], "deny_all", "{handed}");
    // The sandbox itself works as any other.
    assert_eq!(epp_e2e::sh(&host, id, "echo up"), "up\n");
}
both_modes!(
    a_policy_without_ports_reaches_the_egress_sidecar,
    super::policy_reaches_the_sidecar
);
