//! `network_policy` of sandbox.create (and the setting it replaces) against
//! the real server, OpenSandbox 1.1.1: checked like the setting, `ports`
//! refused before anything is created (1.1.x drops them without a word), a
//! policy without ports sent to the server.

use epp_e2e::{Host, HostBuilder, Mode, both_modes, unique};
use serde_json::{Value, json};

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
