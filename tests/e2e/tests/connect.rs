//! commands.connect: another process attaches to a running background
//! command and gets its output from the start until it exits; detaching
//! leaves the command running. Commands wait in the sandbox on a gate file
//! the test writes, so nothing here synchronises by sleeping.

use epp_e2e::{Host, Mode, both_modes, wait_until, workdir};
use serde_json::{Value, json};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(60);

/// A shell line that waits until `gate` exists.
fn wait_for(gate: &str) -> String {
    format!("while [ ! -e '{gate}' ]; do sleep 0.05; done")
}

fn open(host: &Host, sandbox_id: &str, gate: &str) {
    host.ok(
        "files.write",
        json!({"sandbox_id": sandbox_id, "path": gate, "content": ""}),
    );
}

fn background(host: &Host, sandbox_id: &str, cmd: &str) -> String {
    let started = host.ok(
        "commands.run",
        json!({"sandbox_id": sandbox_id, "cmd": cmd, "background": true}),
    );
    started["command_id"]
        .as_str()
        .expect("a background command's id")
        .to_string()
}

/// Everything a request got as `commands.output`, in order.
fn output(host: &Host, req: &Value) -> String {
    host.notes_for("commands.output", req)
        .iter()
        .map(|(_, n)| n["params"]["data"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn attach(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let gate = format!("{}/gate-attach", workdir(&host, &id));
    let command_id = background(
        &host,
        &id,
        &format!(
            "echo before; echo err-before >&2; {}; echo after; exit 3",
            wait_for(&gate)
        ),
    );
    // Another host process attaches while the command waits.
    let other = Host::start(mode);
    let req = other.send(
        "commands.connect",
        json!({"sandbox_id": id, "command_id": command_id, "stream": true}),
    );
    let started = other
        .first_note("commands.started", &req, PATIENCE)
        .expect("commands.started");
    assert_eq!(
        started["params"]["command_id"],
        command_id.as_str(),
        "{started}"
    );
    // What it printed before anyone attached comes first.
    wait_until("the output from the start", PATIENCE, || {
        let seen = output(&other, &req);
        (seen.contains("before") && seen.contains("err-before")).then_some(())
    });
    open(&host, &id, &gate);
    let answer = other.wait(&req, PATIENCE).expect("commands.connect");
    assert_eq!(answer["exit_code"], 3, "{answer}");
    assert_eq!(answer["command_id"], command_id.as_str(), "{answer}");
    // A plain exit, as commands.run says it: no error.
    assert!(answer.get("error").is_none(), "{answer}");
    assert!(answer.get("stdout").is_none(), "streamed: {answer}");
    let all = output(&other, &req);
    let (before, after) = (all.find("before\n"), all.find("after\n"));
    assert!(
        before.is_some() && after.is_some() && before < after,
        "{all:?}"
    );
    // Once it has ended, a connect collects all of it at once.
    let collected = host.ok(
        "commands.connect",
        json!({"sandbox_id": id, "command_id": command_id}),
    );
    assert_eq!(collected["exit_code"], 3, "{collected}");
    let stdout = collected["stdout"].as_str().expect("collected output");
    assert!(
        stdout.contains("before\n")
            && stdout.contains("err-before\n")
            && stdout.contains("after\n"),
        "{collected}"
    );
}
both_modes!(attaches_from_another_process, super::attach);

fn refusals(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let e = host.fails(
        "commands.connect",
        json!({"sandbox_id": id, "command_id": "0123456789abcdef0123456789abcdef"}),
        "E4004",
    );
    assert!(e.message.contains("0123456789abcdef"), "{e:?}");
    // A foreground command's output is its own request's: execd keeps no log of it.
    let gate = format!("{}/gate-fg", workdir(&host, &id));
    let fg = host.send(
        "commands.run",
        json!({"sandbox_id": id, "cmd": wait_for(&gate), "stream": true}),
    );
    let started = host
        .first_note("commands.started", &fg, PATIENCE)
        .expect("commands.started");
    let fg_id = started["params"]["command_id"]
        .as_str()
        .expect("an id")
        .to_string();
    let e = host.fails(
        "commands.connect",
        json!({"sandbox_id": id, "command_id": fg_id}),
        "E4009",
    );
    assert!(e.message.contains("background"), "{e:?}");
    open(&host, &id, &gate);
    assert_eq!(
        host.wait(&fg, PATIENCE).expect("the command")["exit_code"],
        0
    );
}
both_modes!(foreground_and_unknown_commands_are_refused, super::refusals);

fn detach(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let gate = format!("{}/gate-detach", workdir(&host, &id));
    let command_id = background(&host, &id, &format!("echo up; {}", wait_for(&gate)));
    let req = host.send(
        "commands.connect",
        json!({"sandbox_id": id, "command_id": command_id, "stream": true}),
    );
    host.first_note("commands.started", &req, PATIENCE)
        .expect("commands.started");
    host.notify("epp.cancel", json!({"id": req}));
    let e = host.wait(&req, PATIENCE).expect_err("cancelled");
    assert_eq!(e.epp, "E4999", "{e:?}");
    // Nothing was undone: detaching is not stopping.
    assert!(!e.message.contains("undone"), "{e:?}");
    let status = host.ok(
        "commands.status",
        json!({"sandbox_id": id, "command_id": command_id}),
    );
    assert_eq!(status["running"], true, "{status}");
    open(&host, &id, &gate);
    wait_until("the command's end", PATIENCE, || {
        let status = host.ok(
            "commands.status",
            json!({"sandbox_id": id, "command_id": command_id}),
        );
        (status["running"] == false).then_some(())
    });
}
both_modes!(detaching_leaves_the_command_running, super::detach);
