//! A `sandbox.create` abandoned after the server made the sandbox (cancelled by
//! the client, or cut short by the host's shutdown) leaves nothing behind: the
//! provider reports the new id to the host (`request.made`) before its ready
//! wait, and the host deletes it (`undo=sandbox-kill`) and says so in the answer.
//!
//! The sandboxes here never answer: the fault proxy (server-proxy mode, so
//! execd's `/ping` passes it) answers every `/ping` with 503.

use epp_e2e::{Fault, FaultProxy, Host, HostBuilder, Mode, figure, orphans, unique};
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
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let [one] = tagged(host, tag).as_slice()
            && proxy.count("GET", "/ping") > 0
        {
            return one["sandbox_id"].as_str().unwrap().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the create never reached its ready wait"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
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
    assert!(
        e.message.contains("was undone") && e.message.contains(&format!("sandbox.kill {id}")),
        "{e:?}"
    );
    // The server no longer has it, and nothing of it runs.
    assert_eq!(tagged(&host, &tag), Vec::<Value>::new());
    assert!(orphans(&[id], Duration::from_secs(10)).is_empty());
    figure(
        "faults",
        &format!(
            "| sandbox.create cancelled in its ready wait (execd never answers) | proxy | E4999 | {:.2} s | the host deleted the new sandbox (undo=sandbox-kill) and says so; none left |",
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
    assert!(e.message.contains(&format!("sandbox.kill {id}")), "{e:?}");
    let other = Host::start(Mode::Direct);
    assert_eq!(tagged(&other, &tag), Vec::<Value>::new());
    assert!(orphans(&[id], Duration::from_secs(10)).is_empty());
}
