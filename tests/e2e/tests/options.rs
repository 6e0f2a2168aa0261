//! `provider_options` in `epp.hello` against the testbed: the server and its
//! API key given by the EPP client (EPP/1's generic keys) instead of the
//! environment, ahead of it, checked like the environment, never in the
//! guest, and fixed once a call has reached the provider.

use epp_e2e::secrets::scan_guest_memory;
use epp_e2e::{Host, HostBuilder, Mode, Reply, sh, testbed, unique};
use serde_json::{Value, json};
use std::time::Duration;

/// A host whose environment names no server and no key (and whose base URL,
/// if `dead` is set, points where nothing answers).
fn bare(mode: Mode, dead: bool) -> Host {
    let mut b = HostBuilder::new(mode).without_env("ABX_OPENSANDBOX_API_KEY");
    b = if dead {
        b.env("ABX_OPENSANDBOX_BASE_URL", "http://127.0.0.1:9")
    } else {
        b.without_env("ABX_OPENSANDBOX_BASE_URL")
    };
    b.spawn()
}

fn hello(host: &Host, options: Value) -> Reply {
    host.call("epp.hello", json!({"provider_options": options}))
}

fn modes(mode: Mode) {
    let tb = testbed();
    // The environment points at a port where nothing answers: the options win.
    let host = bare(mode, true);
    let answer = hello(
        &host,
        json!({"sandbox_base_url": tb.url, "sandbox_api_key": tb.api_key}),
    )
    .expect("hello with provider_options");
    assert_eq!(
        answer["provider_options"]["applied"],
        json!({"sandbox_base_url": "base_url", "sandbox_api_key": "api_key"})
    );
    let id = host.create_sandbox();
    assert_eq!(sh(&host, &id, "echo via-options"), "via-options\n");

    // The key was injected by the host: it is nowhere in the guest's memory
    // while a request is in flight (the sandbox's id is: the scan works).
    let req = host.send(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "sleep 2; echo done", "stream": true}),
    );
    host.first_note("commands.started", &req, Duration::from_secs(20))
        .expect("commands.started");
    let canary = format!("sandbox {id}");
    let scan = scan_guest_memory(host.pid(), &[tb.api_key.as_str(), canary.as_str()])
        .expect("reading the host's guest memory");
    host.wait(&req, Duration::from_secs(60))
        .expect("the command");
    assert!(scan.hits[1] > 0, "the scan missed the live instance");
    assert_eq!(scan.hits[0], 0, "the API key is in guest memory");

    // Now the settings are fixed.
    let e = hello(&host, json!({"sandbox_base_url": "http://127.0.0.1:9"})).unwrap_err();
    assert_eq!(e.epp, "E4009", "{e:?}");
    assert!(e.message.contains("before the first call"), "{e:?}");
    assert_eq!(sh(&host, &id, "echo still"), "still\n");
    // (The harness sweeps every line this host wrote for the key.)
}
epp_e2e::both_modes!(the_server_and_key_from_provider_options, super::modes);

#[test]
fn bad_options_are_e2001_naming_the_option() {
    let tb = testbed();
    let host = bare(Mode::Direct, false);
    for (options, named) in [
        (
            json!({"sandbox_base_url": "ftp://example.com"}),
            "provider_options.sandbox_base_url",
        ),
        (
            json!({"sandbox_base_url": tb.url, "ready_timeout": "soon"}),
            "provider_options.ready_timeout",
        ),
        (
            json!({"base_url": tb.url, "use_server_proxy": "maybe"}),
            "provider_options.use_server_proxy",
        ),
        (
            json!({"base_url": tb.url, "network_policy": [1, 2]}),
            "provider_options.network_policy",
        ),
    ] {
        let e = hello(&host, options.clone()).unwrap_err();
        assert_eq!(e.epp, "E2001", "{options}: {e:?}");
        assert!(
            e.message.contains(named) && !e.message.contains("ABX_OPENSANDBOX_"),
            "{options}: {e:?}"
        );
    }
    // None of them was applied, and a good one still is.
    hello(
        &host,
        json!({"base_url": tb.url, "api_key": tb.api_key, "ready_timeout": 20}),
    )
    .expect("good options");
    let tag = unique("options");
    let made = host.ok("sandbox.create", json!({"metadata": {"e2e": tag}}));
    host.ok("sandbox.kill", json!({"sandbox_id": made["sandbox_id"]}));
}
