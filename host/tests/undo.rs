//! `request.made`, `request.settled` and `infra.undo`: what a request reported
//! and did not settle is undone when the request fails or never ends (cancelled,
//! stopped at its deadline, trapped), and only then; the error answer says what
//! was undone (`; undone: WORDS`) or could not be (`; not undone: MESSAGE`).
//! `request.time-left-ms` tells the provider its deadline.
//!
//! The probe's `sandbox-create` with template `made ID THEN` reports the token
//! `sandbox:ID`, puts `started:ID` in the memo (the test's signal that the call
//! has begun), then does THEN; `undo(sandbox:ID)` leaves `undone:ID` in the memo
//! and answers `killed sandbox ID`. With `stuck ID THEN` the token's undo fails.

mod common;

use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

fn undone(host: &mut Host, id: &str) -> bool {
    host.memo(&format!("undone:{id}")).as_deref() == Some("1")
}

fn create(host: &mut Host, template: &str) -> serde_json::Value {
    host.request("sandbox.create", json!({"template": template}))
}

/// Cancels request `req` once the probe says it has begun (`started:KEY`);
/// returns the error answer's message, checking it is a cancellation answered
/// in good time.
fn cancel_once_begun(host: &mut Host, req: &serde_json::Value, key: &str) -> String {
    host.wait_memo(&format!("started:{key}"));
    let began = Instant::now();
    host.call("epp.cancel", json!({"id": req}));
    let (code, epp, message) = error(&host.response(req));
    assert_eq!((code, epp.as_str()), (-32800, "E4999"), "{message}");
    assert!(began.elapsed() < Duration::from_secs(5));
    message
}

#[test]
fn a_cancelled_call_is_undone_and_says_so() {
    let mut host = Host::start();
    let req = create(&mut host, "made sb-cancel sleep 30000");
    let message = cancel_once_begun(&mut host, &req, "sb-cancel");
    assert!(
        message.contains("; undone: killed sandbox sb-cancel"),
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
        message.contains("; undone: killed sandbox sb-late"),
        "{message}"
    );
    assert!(undone(&mut host, "sb-late"));

    let req = create(&mut host, "made sb-trap trap");
    let (_, epp, message) = error(&host.response(&req));
    assert_eq!(epp, "E9001", "{message}");
    assert!(
        message.contains("; undone: killed sandbox sb-trap"),
        "{message}"
    );
    assert!(undone(&mut host, "sb-trap"));
}

#[test]
fn an_undo_that_fails_says_what_is_left() {
    let mut host = Host::start();
    let req = create(&mut host, "stuck sb-stuck sleep 30000");
    let message = cancel_once_begun(&mut host, &req, "sb-stuck");
    assert!(
        message.contains(
            "; not undone: sandbox sb-stuck could not be killed; kill it with sandbox.kill sb-stuck"
        ),
        "{message}"
    );
    assert!(!message.contains("; undone:"), "{message}");
}

#[test]
fn a_call_that_returns_keeps_what_it_made() {
    let mut host = Host::start();
    // Answered: the client has the id.
    let req = create(&mut host, "made sb-ok echo sb-ok");
    assert_eq!(result(&host.response(&req))["sandbox_id"], "sb-ok");
    // Failed on its own: the provider cleans up after itself and settles its token.
    let req = create(&mut host, "made sb-failed fail");
    let (_, epp, message) = error(&host.response(&req));
    assert_eq!(epp, "E5001");
    assert!(!message.contains("undone"), "{message}");
    assert!(!undone(&mut host, "sb-ok") && !undone(&mut host, "sb-failed"));
    // A call that reports nothing has nothing undone, cancelled or not.
    let req = host.request(
        "sandbox.get_info",
        json!({"sandbox_id": "begin get-info sleep 30000"}),
    );
    let message = cancel_once_begun(&mut host, &req, "get-info");
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
