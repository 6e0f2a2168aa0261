//! Reused instances: a call may be served by an instance an earlier call left
//! (a plain call, or a command followed to its end), by default only when the
//! provider declares its instances reusable (`reusable()`, abx:epp 1.2), or
//! for any provider with `--reuse-instances`. The probe's `count` answers how
//! many times its instance has counted (1 on a fresh instance), so it shows
//! which instance served a call; the probe declares its instances not
//! reusable (that counter outlives a call). An instance is kept only when
//! nothing of its call can reach the next: not after a trap, a provider
//! error, memory grown past the bound, or a host resource left open.

mod common;

use common::*;
use serde_json::json;

fn count(host: &mut Host) -> String {
    result(&host.probe("count"))["sandbox_id"]
        .as_str()
        .expect("count answers a number")
        .to_string()
}

#[test]
fn a_provider_that_does_not_declare_reuse_gets_a_fresh_instance_for_every_call() {
    let mut host = HostBuilder::new().spawn();
    for _ in 0..3 {
        assert_eq!(count(&mut host), "1");
    }
    let log = host.log();
    assert!(
        log.contains(
            "instances fresh for every call (the provider does not declare them reusable)"
        ),
        "{log}"
    );
}

/// What the host says of its instances at start-up, for a provider that
/// declares them reusable (minibox) under `args`.
fn minibox_instances(args: &[&str]) -> String {
    let mut host = HostBuilder::new()
        .wasm(MINIBOX.wasm())
        .env("MINIBOX_ENDPOINT", "http://127.0.0.1:9")
        .env("MINIBOX_TOKEN", "t")
        .args(args)
        .spawn();
    // Answered only once the component is loaded, after the start-up line.
    result(&host.call("epp.hello", json!({"protocol": "EPP/1"})));
    let log = host.log();
    let line = log
        .lines()
        .find(|l| l.contains("compile cache"))
        .unwrap_or_else(|| panic!("no start-up line in {log}"));
    line.split_once("instances ")
        .unwrap_or_else(|| panic!("the start-up line says nothing of instances: {line}"))
        .1
        .to_string()
}

#[test]
fn a_provider_that_declares_reuse_is_reused_unless_the_operator_says_fresh() {
    for (args, says) in [
        (&[][..], "reused (the provider declares them reusable)"),
        (
            &["--fresh-instances"],
            "fresh for every call (--fresh-instances)",
        ),
        (&["--reuse-instances"], "reused (--reuse-instances)"),
    ] {
        let instances = minibox_instances(args);
        assert!(instances.starts_with(says), "{args:?}: {instances}");
    }
}

#[test]
fn inspect_says_whether_a_provider_declares_reuse() {
    for (wasm, declared) in [(probe_wasm(), false), (MINIBOX.wasm(), true)] {
        let out = run_host_once(
            &[
                "inspect",
                "--json",
                "--trust-file",
                "/dev/null",
                wasm.to_str().unwrap(),
            ],
            &[],
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(
            report["contract"]["declares_reusable"], declared,
            "{wasm:?}"
        );
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
