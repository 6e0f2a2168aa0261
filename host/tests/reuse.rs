//! `--reuse-instances`: a call may be served by an instance an earlier call
//! left (a plain call, or a command followed to its end). The probe's `count`
//! answers how many times its instance has counted (1 on a fresh instance),
//! so it shows which instance served a call. Off by default (every call
//! fresh); on, an instance is kept only when nothing of its call can reach
//! the next: not after a trap, a provider error, memory grown past the bound,
//! or a host resource left open.

mod common;

use common::*;

fn count(host: &mut Host) -> String {
    result(&host.probe("count"))["sandbox_id"]
        .as_str()
        .expect("count answers a number")
        .to_string()
}

#[test]
fn every_call_gets_a_fresh_instance_by_default() {
    let mut host = HostBuilder::new().spawn();
    for _ in 0..3 {
        assert_eq!(count(&mut host), "1");
    }
}

#[test]
fn a_kept_instance_serves_the_next_plain_call() {
    let mut host = HostBuilder::new().args(["--reuse-instances"]).spawn();
    // The provider's own state outlives a call: what the flag trades away.
    assert_eq!(count(&mut host), "1");
    assert_eq!(count(&mut host), "2");
    assert_eq!(count(&mut host), "3");
}

#[test]
fn a_command_that_ran_to_its_end_gives_its_instance_back() {
    let mut host = HostBuilder::new().args(["--reuse-instances"]).spawn();
    assert_eq!(count(&mut host), "1");
    // Takes the kept instance, follows the command's events to the end and
    // releases its stream: the instance is kept again.
    let out = result(&host.call(
        "commands.run",
        serde_json::json!({"sandbox_id": "s", "cmd": "stream 3 0"}),
    ))
    .clone();
    assert_eq!(out["exit_code"], 0, "{out}");
    assert_eq!(count(&mut host), "2");
}

#[test]
fn an_instance_is_not_kept_after_what_its_call_left() {
    let mut host = HostBuilder::new()
        .args(["--reuse-instances", "--max-memory-mib", "64"])
        .spawn();
    assert_eq!(count(&mut host), "1");
    // Each takes the kept instance and must leave none: the next call counts
    // on a fresh one.
    for (instruction, fails) in [
        ("trap", true),
        ("no-such-instruction", true),
        ("huge 6", false),
        ("leak", false),
    ] {
        let resp = host.probe(instruction);
        assert_eq!(resp.get("error").is_some(), fails, "{instruction}: {resp}");
        assert_eq!(count(&mut host), "1", "after {instruction}");
        assert_eq!(count(&mut host), "2", "after {instruction}, kept again");
    }
}
