//! A provider that spins, hoards memory, sleeps past its deadline or traps is
//! stopped with E9001 naming the limit, and the host keeps answering meanwhile
//! and afterwards.

mod common;

use common::*;
use serde_json::json;

fn assert_fault(resp: &serde_json::Value, needle: &str) {
    let (code, epp, message) = error(resp);
    assert_eq!((code, epp.as_str()), (-32000, "E9001"), "{resp}");
    assert!(
        message.contains(needle),
        "expected {needle:?} in: {message}"
    );
}

#[test]
fn runaway_guests_are_stopped_and_the_host_keeps_answering() {
    let mut host = HostBuilder::new()
        .args(["--cpu-budget-ms", "1000"])
        .args(["--max-memory-mib", "32"])
        .args(["--call-timeout", "2"])
        .spawn();
    let probe =
        |host: &mut Host, what: &str| host.request("sandbox.get_info", json!({"sandbox_id": what}));

    let spin = probe(&mut host, "spin");
    let alloc = probe(&mut host, "alloc");
    let sleep = probe(&mut host, "sleep 60000");
    let trap = probe(&mut host, "trap");
    // While those run, an ordinary request is answered, before the spinner is stopped.
    let echo = probe(&mut host, "echo still here");
    assert_eq!(result(&host.response(&echo))["sandbox_id"], "still here");
    assert!(
        !host.pending().iter().any(|m| m["id"] == spin),
        "the spinning guest held up other requests: {:?}",
        host.pending()
    );

    assert_fault(&host.response(&spin), "--cpu-budget-ms");
    assert_fault(&host.response(&alloc), "--max-memory-mib");
    assert_fault(&host.response(&trap), "crashed");
    assert_fault(&host.response(&sleep), "--call-timeout");

    // Again, to show the instances were released, then ordinary service.
    for _ in 0..2 {
        assert_fault(&host.probe("spin"), "--cpu-budget-ms");
        assert_fault(&host.probe("alloc"), "--max-memory-mib");
        assert_eq!(result(&host.probe("echo ok"))["sandbox_id"], "ok");
    }
    assert_eq!(
        result(&host.call("epp.hello", json!({})))["protocol"],
        "EPP/1"
    );
    assert!(host.alive());
    let (status, rest) = host.finish();
    assert!(status.success());
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn output_caps_bound_what_the_host_buffers() {
    let mut host = HostBuilder::new()
        .args(["--max-output-bytes", "20"])
        .spawn();
    // A reader that announces two terabytes is refused before a byte is read.
    let resp = host.call(
        "files.read",
        json!({"sandbox_id": "s", "path": "chunks 2000000 1000000"}),
    );
    let (code, _, message) = error(&resp);
    assert_eq!(code, -32602, "{resp}");
    assert!(message.contains("--max-output-bytes"), "{message}");
    // A collected command keeps the first bytes and says it dropped the rest.
    let resp = host.call(
        "commands.run",
        json!({"sandbox_id": "s", "cmd": "stream 10 0"}),
    );
    let out = result(&resp);
    let stdout = out["stdout"].as_str().expect("stdout");
    assert!(stdout.len() <= 20, "{stdout:?}");
    assert!(stdout.starts_with("line 1\nline 2\n"), "{stdout:?}");
    assert_eq!(out["truncated"], true);
    assert_eq!(out["exit_code"], 0);
    assert_eq!(result(&host.probe("echo fine"))["sandbox_id"], "fine");
}
