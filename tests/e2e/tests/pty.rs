//! pty: a real terminal through execd's WebSocket.

use epp_e2e::{Host, Mode, b64d, b64e, both_modes};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Everything a terminal printed so far.
fn output(host: &Host, pty: &str) -> String {
    let bytes: Vec<u8> = host
        .notes()
        .iter()
        .filter(|(_, n)| n["method"] == "pty.output" && n["params"]["pty_id"] == pty)
        .flat_map(|(_, n)| b64d(n["params"]["data"].as_str().unwrap()))
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn wait_output(host: &Host, pty: &str, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !output(host, pty).contains(needle) {
        assert!(
            Instant::now() < deadline,
            "terminal never printed {needle:?}; got {:?}",
            output(host, pty)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn terminal(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let created = host.ok(
        "pty.create",
        json!({"sandbox_id": id, "cols": 80, "rows": 24}),
    );
    let pty = created["pty_id"].as_str().unwrap().to_string();
    let input = |text: &str| {
        host.ok(
            "pty.send_input",
            json!({"sandbox_id": id, "pty_id": pty, "data": b64e(text.as_bytes())}),
        )
    };

    input("echo $((40+2))\n");
    // The terminal echoes the typed line; the answer is the line that is only "42".
    wait_output(&host, &pty, "\n42\r\n");

    host.ok(
        "pty.resize",
        json!({"sandbox_id": id, "pty_id": pty, "cols": 100, "rows": 40}),
    );
    input("stty size\n");
    wait_output(&host, &pty, "40 100");

    input("exit 3\n");
    let exit = host
        .wait_note(Duration::from_secs(20), |n: &Value| {
            n["method"] == "pty.exit" && n["params"]["pty_id"] == pty.as_str()
        })
        .expect("pty.exit");
    assert_eq!(exit["params"]["exit_code"], 3, "{exit}");
    assert_eq!(exit["params"]["sandbox_id"], id.as_str());
    // Output never comes after the exit notification.
    let notes = host.notes();
    let exit_at = notes
        .iter()
        .position(|(_, n)| n["method"] == "pty.exit")
        .unwrap();
    assert!(
        !notes[exit_at..]
            .iter()
            .any(|(_, n)| n["method"] == "pty.output" && n["params"]["pty_id"] == pty.as_str())
    );
    host.fails(
        "pty.send_input",
        json!({"sandbox_id": id, "pty_id": pty, "data": b64e(b"x")}),
        "E4004",
    );
}
both_modes!(echo_resize_and_exit_code, super::terminal);

fn kill_and_env(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let created = host.ok(
        "pty.create",
        json!({"sandbox_id": id, "cols": 80, "rows": 24, "envs": {"GREETING": "hi there"}}),
    );
    let pty = created["pty_id"].as_str().unwrap().to_string();
    host.ok(
        "pty.send_input",
        json!({"sandbox_id": id, "pty_id": pty, "data": b64e(b"echo \"<$GREETING>\"\n")}),
    );
    wait_output(&host, &pty, "<hi there>");
    host.ok("pty.kill", json!({"sandbox_id": id, "pty_id": pty}));
    let exit = host.wait_note(Duration::from_secs(20), |n| {
        n["method"] == "pty.exit" && n["params"]["pty_id"] == pty.as_str()
    });
    let exit = exit.expect("no pty.exit after pty.kill");
    // pty.kill sends SIGKILL: 128 + 9, as commands.run reports a signal.
    assert_eq!(exit["params"]["exit_code"], 137, "{exit}");
    host.fails(
        "pty.kill",
        json!({"sandbox_id": id, "pty_id": pty}),
        "E4004",
    );
    host.fails(
        "pty.create",
        json!({"sandbox_id": id, "cols": 0, "rows": 24}),
        "E1001",
    );
}
both_modes!(kill_and_environment, super::kill_and_env);
