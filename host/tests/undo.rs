//! `request.made` and `undo=`: what a call reported it made is undone when the
//! call never returns (cancelled, stopped at its deadline, trapped), and only
//! then; `request.time-left-ms` tells the provider its deadline. The probe's
//! `sandbox-create` with template `made ID THEN` reports ID, then does THEN;
//! its `sandbox-kill(ID)` leaves `undone:ID` in the memo.

mod common;

use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

fn undone(host: &mut Host, id: &str) -> bool {
    meta(&host.probe(&format!("memo-get undone:{id}")), "value") == Some("1")
}

fn create(host: &mut Host, template: &str) -> serde_json::Value {
    host.request("sandbox.create", json!({"template": template}))
}

#[test]
fn a_cancelled_call_is_undone_and_says_so() {
    let mut host = Host::start();
    let req = create(&mut host, "made sb-cancel sleep 30000");
    std::thread::sleep(Duration::from_millis(300));
    let began = Instant::now();
    host.call("epp.cancel", json!({"id": req}));
    let (code, epp, message) = error(&host.response(&req));
    assert_eq!((code, epp.as_str()), (-32800, "E4999"));
    assert!(began.elapsed() < Duration::from_secs(5));
    assert!(
        message.contains("what it had made was undone (sandbox.kill sb-cancel)"),
        "{message}"
    );
    assert!(undone(&mut host, "sb-cancel"));
}

#[test]
fn a_call_stopped_at_its_deadline_or_trapped_is_undone() {
    let mut host = HostBuilder::new().args(["--call-timeout", "1"]).spawn();
    let req = create(&mut host, "made sb-late sleep 30000");
    let (_, epp, message) = error(&host.response(&req));
    assert_eq!(epp, "E9001", "{message}");
    assert!(message.contains("took longer than 1s"), "{message}");
    assert!(
        message.contains("undone (sandbox.kill sb-late)"),
        "{message}"
    );
    assert!(undone(&mut host, "sb-late"));

    let req = create(&mut host, "made sb-trap trap");
    let (_, epp, message) = error(&host.response(&req));
    assert_eq!(epp, "E9001", "{message}");
    assert!(
        message.contains("undone (sandbox.kill sb-trap)"),
        "{message}"
    );
    assert!(undone(&mut host, "sb-trap"));
}

#[test]
fn a_call_that_returns_keeps_what_it_made() {
    let mut host = Host::start();
    // Answered: the client has the id.
    let req = create(&mut host, "made sb-ok echo sb-ok");
    assert_eq!(result(&host.response(&req))["sandbox_id"], "sb-ok");
    // Failed on its own: the provider cleans up after itself.
    let req = create(&mut host, "made sb-failed fail");
    let (_, epp, message) = error(&host.response(&req));
    assert_eq!(epp, "E5001");
    assert!(!message.contains("undone"), "{message}");
    assert!(!undone(&mut host, "sb-ok") && !undone(&mut host, "sb-failed"));
    // A method without `undo=` never undoes anything, cancelled or not.
    let req = host.request("sandbox.get_info", json!({"sandbox_id": "sleep 30000"}));
    std::thread::sleep(Duration::from_millis(200));
    host.call("epp.cancel", json!({"id": req}));
    let (_, _, message) = error(&host.response(&req));
    assert!(!message.contains("undone"), "{message}");
}

#[test]
fn the_provider_knows_its_deadline() {
    let mut host = HostBuilder::new().args(["--call-timeout", "100"]).spawn();
    let left = |host: &mut Host| -> u64 {
        let resp = host.probe("time-left");
        result(&resp)["sandbox_id"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let ms = left(&mut host);
    assert!((95_000..=100_000).contains(&ms), "{ms}");
    // A create's deadline is --call-timeout plus the ready_timeout it passes.
    let resp = host.call(
        "sandbox.create",
        json!({"template": "made sb-t time-left", "ready_timeout": 50}),
    );
    let ms: u64 = result(&resp)["sandbox_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((145_000..=150_000).contains(&ms), "{ms}");
}
