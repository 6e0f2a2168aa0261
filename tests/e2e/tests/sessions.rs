//! sessions: execd's bash sessions (exported variables, cwd and shell functions
//! carry over between runs), shared between hosts, closed, timed out and cancelled.

use epp_e2e::{Host, Mode, both_modes, sandbox_processes, unique, workdir};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn run(host: &Host, sandbox: &str, session: &str, cmd: &str) -> Value {
    host.ok(
        "sessions.run",
        json!({"sandbox_id": sandbox, "session_id": session, "cmd": cmd}),
    )
}

fn state_carries_over(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let dir = format!("{}/{}", workdir(&host, &id), unique("sess"));
    let session = host.ok("sessions.create", json!({"sandbox_id": id, "cwd": dir}))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    // cwd is created by execd.
    assert_eq!(
        run(&host, &id, &session, "pwd")["stdout"],
        format!("{dir}\n")
    );

    let r = run(
        &host,
        &id,
        &session,
        "mkdir -p sub && cd sub && export GREETING='hi there' && LOCAL=1 && greet() { echo \"hello $1\"; } && echo out && echo err >&2",
    );
    assert_eq!(
        (
            r["exit_code"].as_i64(),
            r["stdout"].as_str(),
            r["stderr"].as_str()
        ),
        (Some(0), Some("out\nerr\n"), Some("")),
        "stderr is merged into stdout by execd: {r}"
    );
    assert_eq!(r["session_id"], session.as_str(), "{r}");
    let r = run(
        &host,
        &id,
        &session,
        "pwd; echo \"$GREETING|${LOCAL:-unset}\"; exit 7",
    );
    assert_eq!(r["exit_code"], 7, "{r}");
    assert_eq!(r["stdout"], format!("{dir}/sub\nhi there|unset\n"));
    // Shell functions carry over too (the provider saves `declare -f` after a run),
    // and a failing run keeps its own status.
    let r = run(&host, &id, &session, "greet world; false");
    assert_eq!(
        (r["exit_code"].as_i64(), r["stdout"].as_str()),
        (Some(1), Some("hello world\n")),
        "{r}"
    );

    // Streamed: the same notifications as commands.run, with the session's id.
    let req = host.send(
        "sessions.run",
        json!({"sandbox_id": id, "session_id": session, "cmd": "for i in 1 2 3; do echo $i; sleep 0.2; done", "stream": true}),
    );
    let answer = host
        .wait(&req, Duration::from_secs(30))
        .expect("stream run");
    assert_eq!(answer["exit_code"], 0, "{answer}");
    assert!(answer.get("stdout").is_none(), "{answer}");
    let started = host.notes_for("commands.started", &req);
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].1["params"]["session_id"], session.as_str());
    let out: String = host
        .notes_for("commands.output", &req)
        .iter()
        .map(|(_, n)| n["params"]["data"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(out, "1\n2\n3\n");

    assert_eq!(
        host.ok(
            "sessions.close",
            json!({"sandbox_id": id, "session_id": session})
        ),
        json!({})
    );
    let e = host.fails(
        "sessions.close",
        json!({"sandbox_id": id, "session_id": session}),
        "E4004",
    );
    assert!(e.message.contains(&session), "{e:?}");
    let e = host.fails(
        "sessions.run",
        json!({"sandbox_id": id, "session_id": session, "cmd": "true"}),
        "E4004",
    );
    assert!(e.message.contains("closed"), "{e:?}");
    host.fails(
        "sessions.run",
        json!({"sandbox_id": id, "session_id": "no-such-session", "cmd": "true"}),
        "E4004",
    );
}
both_modes!(state_carries_over_and_close, super::state_carries_over);

fn shared_between_hosts(mode: Mode) {
    let first = Host::start(mode);
    let second = Host::start(mode);
    let id = first.create_sandbox();
    let session = first.ok("sessions.create", json!({"sandbox_id": id}))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    run(&first, &id, &session, "export SHARED=from-first; cd /tmp");
    let r = run(&second, &id, &session, "echo \"$SHARED $(pwd)\"");
    assert_eq!(r["stdout"], "from-first /tmp\n", "{r}");
    second.ok(
        "sessions.close",
        json!({"sandbox_id": id, "session_id": session}),
    );
    first.fails(
        "sessions.run",
        json!({"sandbox_id": id, "session_id": session, "cmd": "true"}),
        "E4004",
    );
}
both_modes!(two_hosts_share_a_session, super::shared_between_hosts);

/// Pids of this sandbox's processes whose command line contains `needle`.
fn procs_with(sandbox: &str, needle: &str) -> Vec<u32> {
    sandbox_processes(sandbox)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

fn gone_within(sandbox: &str, needle: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if procs_with(sandbox, needle).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

fn timeout_and_cancel_end_the_group(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let session = host.ok("sessions.create", json!({"sandbox_id": id}))["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    // A timed-out run: E5004 after about its timeout, and its background child dies too.
    let started = Instant::now();
    let e = host.fails(
        "sessions.run",
        json!({"sandbox_id": id, "session_id": session, "cmd": "sleep 4101 & sleep 4102", "timeout": 1}),
        "E5004",
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{e:?}");
    assert!(e.message.contains("timeout"), "{e:?}");
    assert!(
        gone_within(&id, "sleep 410", Duration::from_secs(5)),
        "the run's group outlived its timeout"
    );
    // The session is still usable.
    assert_eq!(run(&host, &id, &session, "echo ok")["stdout"], "ok\n");

    // A cancelled run is killed in the sandbox; the session stays.
    let req = host.send(
        "sessions.run",
        json!({"sandbox_id": id, "session_id": session, "cmd": "echo go; sleep 4201", "stream": true}),
    );
    assert!(
        host.first_note("commands.output", &req, Duration::from_secs(30))
            .is_some()
    );
    host.ok("epp.cancel", json!({"id": req}));
    let e = host
        .wait(&req, Duration::from_secs(30))
        .expect_err("cancelled");
    assert_eq!(e.epp.as_str(), "E4999");
    assert!(
        gone_within(&id, "sleep 4201", Duration::from_secs(10)),
        "a cancelled run kept running"
    );
    assert_eq!(run(&host, &id, &session, "echo still")["stdout"], "still\n");
}
both_modes!(
    timeout_and_cancel_kill_the_run,
    super::timeout_and_cancel_end_the_group
);
