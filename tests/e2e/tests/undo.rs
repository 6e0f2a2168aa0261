//! A `sandbox.create` abandoned after the server made the sandbox (cancelled by
//! the client, or cut short by the host's shutdown) leaves nothing behind: the
//! provider reports a token for it to the host (`request.made`) before it asks
//! the server, and the host has the provider undo it (`infra.undo`) and says so
//! in the answer (`; undone: …`). That holds from the moment the POST is sent:
//! also while the server's answer is still on its way.
//!
//! The sandboxes of the first two tests never answer: the fault proxy
//! (server-proxy mode, so execd's `/ping` passes it) answers every `/ping` with
//! 503. The last holds the server's answer to the create's POST.

use epp_e2e::{
    Fault, FaultProxy, Host, HostBuilder, Mode, both_modes, figure, orphans, unique, wait_until,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A host whose sandboxes never become ready, and the proxy that sees to it.
fn never_ready() -> (FaultProxy, Host) {
    let proxy = FaultProxy::testbed();
    proxy.fault("GET", "/ping", Fault::Status(503), 1_000_000);
    let host = HostBuilder::new(Mode::Proxy).via(&proxy).spawn();
    host.ok("epp.hello", json!({}));
    (proxy, host)
}

/// Sandboxes tagged `tag`, as the server lists them.
fn tagged(host: &Host, tag: &str) -> Vec<Value> {
    host.ok("sandbox.list", json!({"metadata": {"e2e": tag}}))["sandboxes"]
        .as_array()
        .unwrap()
        .clone()
}

/// Waits until the create tagged `tag` is in its ready wait: the server made
/// the sandbox and execd is being polled. Returns the sandbox's id.
fn in_ready_wait(proxy: &FaultProxy, host: &Host, tag: &str) -> String {
    wait_until(
        "the create's ready wait",
        Duration::from_secs(30),
        || match tagged(host, tag).as_slice() {
            [one] if proxy.count("GET", "/ping") > 0 => {
                Some(one["sandbox_id"].as_str().unwrap().to_string())
            }
            _ => None,
        },
    )
}

/// Whether an error message says that sandbox `id` was undone.
fn says_undone(message: &str, id: &str) -> bool {
    message.contains("; undone: ") && message.contains(id)
}

#[test]
fn a_cancelled_create_deletes_its_sandbox() {
    let (proxy, host) = never_ready();
    let tag = unique("cancel-create");
    let req = host.send(
        "sandbox.create",
        json!({"metadata": {"e2e": tag}, "ready_timeout": 120}),
    );
    let id = in_ready_wait(&proxy, &host, &tag);
    let began = Instant::now();
    assert_eq!(
        host.ok("epp.cancel", json!({"id": req})),
        json!({"cancelled": true})
    );
    let e = match host.wait(&req, Duration::from_secs(60)) {
        Ok(v) => panic!("the cancelled create answered {v}"),
        Err(e) => e,
    };
    let took = began.elapsed();
    assert_eq!(e.epp, "E4999", "{e:?}");
    // The answer says what the host did about it.
    assert!(says_undone(&e.message, &id), "{e:?}");
    // The server no longer has it, and nothing of it runs.
    assert_eq!(tagged(&host, &tag), Vec::<Value>::new());
    assert!(orphans(&[id], Duration::from_secs(10)).is_empty());
    figure(
        "faults",
        &format!(
            "| sandbox.create cancelled in its ready wait (execd never answers) | proxy | E4999 | {:.2} s | the host had the provider undo the new sandbox (infra.undo) and says so; none left |",
            took.as_secs_f64()
        ),
    );

    // The same host goes on: a create that is not cancelled still fails on its
    // own, deleting its sandbox itself (nothing for the host to undo).
    let e = host.fails(
        "sandbox.create",
        json!({"metadata": {"e2e": tag}, "ready_timeout": 2}),
        "E5004",
    );
    assert!(
        e.message.contains("was deleted") && !e.message.contains("undone"),
        "{e:?}"
    );
    assert_eq!(tagged(&host, &tag), Vec::<Value>::new());
}

#[test]
fn a_create_cut_short_by_shutdown_deletes_its_sandbox() {
    // End of input: the host lets requests finish for --shutdown-grace, then
    // cancels them; the create in its ready wait is undone before the host exits.
    let proxy = FaultProxy::testbed();
    proxy.fault("GET", "/ping", Fault::Status(503), 1_000_000);
    let mut host = HostBuilder::new(Mode::Proxy)
        .via(&proxy)
        .arg("--shutdown-grace")
        .arg("1")
        .spawn();
    let tag = unique("shutdown-create");
    let req = host.send(
        "sandbox.create",
        json!({"metadata": {"e2e": tag}, "ready_timeout": 120}),
    );
    let id = in_ready_wait(&proxy, &host, &tag);
    let status = host.finish(Duration::from_secs(60));
    assert!(status.success(), "{status:?}");
    let e = host.wait(&req, Duration::from_secs(1)).unwrap_err();
    assert_eq!(e.epp, "E4999", "{e:?}");
    assert!(says_undone(&e.message, &id), "{e:?}");
    let other = Host::start(Mode::Direct);
    assert_eq!(tagged(&other, &tag), Vec::<Value>::new());
    assert!(orphans(&[id], Duration::from_secs(10)).is_empty());
}

/// The server has made the sandbox but its answer is held back by the fault
/// proxy when the client cancels: the provider never learnt the sandbox's id,
/// yet the token it reported before the POST lets it find and delete it.
fn cancelled_while_the_post_is_in_flight(mode: Mode) {
    let proxy = FaultProxy::testbed();
    let host = HostBuilder::new(mode).via(&proxy).spawn();
    host.ok("epp.hello", json!({}));
    let tag = unique("cancel-in-flight");
    proxy.fault("POST", "/v1/sandboxes", Fault::Hold, 1);
    let req = host.send(
        "sandbox.create",
        json!({"metadata": {"e2e": tag}, "ready_timeout": 120}),
    );
    // The server answered the POST: the sandbox exists, the provider does not know it.
    let held = proxy.wait_held(Duration::from_secs(60));
    let made = held.json();
    assert_eq!(made["metadata"]["e2e"], tag.as_str(), "{made}");
    let id = made["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in the server's answer {made}"))
        .to_string();
    assert_eq!(
        host.ok("epp.cancel", json!({"id": req})),
        json!({"cancelled": true})
    );
    let e = match host.wait(&req, Duration::from_secs(60)) {
        Ok(v) => panic!("the cancelled create answered {v}"),
        Err(e) => e,
    };
    assert_eq!((e.code, e.epp.as_str()), (-32800, "E4999"), "{e:?}");
    assert!(
        e.message
            .contains(&format!("; undone: killed sandbox {id}")),
        "{e:?}"
    );
    // The late answer goes nowhere: the request it was for has ended.
    proxy.release();
    // A host that never saw the request finds no sandbox of it, and nothing of it runs.
    let other = Host::start(mode);
    assert_eq!(tagged(&other, &tag), Vec::<Value>::new());
    assert!(orphans(&[id], Duration::from_secs(10)).is_empty());
}
both_modes!(
    a_create_cancelled_in_flight_leaves_no_sandbox,
    super::cancelled_while_the_post_is_in_flight
);
