//! commands.run with `stdin: true` and commands.send_input (execd's PTY API in
//! pipe mode): input reaches the program, kill/status/cancel work on it, and
//! commands without stdin say how to get one.

use epp_e2e::{Host, Mode, b64e, both_modes, figure, wait_until};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn start(host: &Host, sandbox: &str, cmd: &str) -> (Value, String) {
    let req = host.send(
        "commands.run",
        json!({"sandbox_id": sandbox, "cmd": cmd, "stdin": true, "stream": true}),
    );
    let started = host
        .first_note("commands.started", &req, Duration::from_secs(30))
        .expect("commands.started");
    let id = started["params"]["command_id"]
        .as_str()
        .unwrap()
        .to_string();
    (req, id)
}

fn input(host: &Host, sandbox: &str, id: &str, data: &[u8]) {
    host.ok(
        "commands.send_input",
        json!({"sandbox_id": sandbox, "command_id": id, "data": b64e(data)}),
    );
}

fn output(host: &Host, req: &Value, stream: &str) -> String {
    host.notes_for("commands.output", req)
        .iter()
        .filter(|(_, n)| n["params"]["stream"] == stream)
        .map(|(_, n)| n["params"]["data"].as_str().unwrap().to_string())
        .collect()
}

fn input_reaches_the_program(mode: Mode) {
    let host = Host::start(mode);
    let sb = host.create_sandbox();
    let (req, id) = start(
        &host,
        &sb,
        "python3 -c 'print(input()[::-1])'; echo err >&2",
    );
    input(&host, &sb, &id, b"hello\n");
    let answer = host.wait(&req, Duration::from_secs(30)).expect("exits");
    assert_eq!(answer["exit_code"], 0, "{answer}");
    assert_eq!(answer["command_id"], id.as_str());
    assert_eq!(output(&host, &req, "stdout"), "olleh\n");
    assert_eq!(output(&host, &req, "stderr"), "err\n");

    // envs and cwd apply.
    let req = host.send(
        "commands.run",
        json!({"sandbox_id": sb, "cmd": "read a; echo \"$A:$a:$(pwd)\"", "stdin": true,
               "stream": true, "envs": {"A": "x y"}, "cwd": "/tmp"}),
    );
    let started = host
        .first_note("commands.started", &req, Duration::from_secs(30))
        .expect("commands.started");
    input(
        &host,
        &sb,
        started["params"]["command_id"].as_str().unwrap(),
        b"in\n",
    );
    let answer = host.wait(&req, Duration::from_secs(30)).expect("exits");
    assert_eq!(answer["exit_code"], 0, "{answer}");
    assert_eq!(output(&host, &req, "stdout"), "x y:in:/tmp\n");

    // Round trips: one line through `cat`, send -> echoed output notification.
    let (req, id) = start(&host, &sb, "cat");
    let mut trips = Vec::new();
    for i in 0..30 {
        let line = format!("line {i}\n");
        let before = host.notes_for("commands.output", &req).len();
        let sent = Instant::now();
        input(&host, &sb, &id, line.as_bytes());
        loop {
            let notes = host.notes_for("commands.output", &req);
            if notes.len() > before {
                trips.push(notes[before].0.saturating_duration_since(sent));
                break;
            }
            assert!(
                sent.elapsed() < Duration::from_secs(10),
                "no echo of {line:?}"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    trips.sort();
    figure(
        "stdin",
        &format!(
            "{mode:?}: stdin round trip (send_input -> commands.output) p50 {:.1} ms, p90 {:.1} ms over {}",
            trips[trips.len() / 2].as_secs_f64() * 1e3,
            trips[trips.len() * 9 / 10].as_secs_f64() * 1e3,
            trips.len()
        ),
    );
    assert_eq!(
        output(&host, &req, "stdout"),
        (0..30).map(|i| format!("line {i}\n")).collect::<String>()
    );
    host.ok("commands.kill", json!({"sandbox_id": sb, "command_id": id}));
    let answer = host.wait(&req, Duration::from_secs(30)).expect("killed");
    assert_eq!(answer["exit_code"], 137, "{answer}");
}
both_modes!(input_reaches_the_program, super::input_reaches_the_program);

fn killed_while_waiting_for_input(mode: Mode) {
    let host = Host::start(mode);
    let sb = host.create_sandbox();
    let (req, id) = start(&host, &sb, "read line; echo never");
    // The shell starts as the stream attaches: running within moments.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status = host.ok(
            "commands.status",
            json!({"sandbox_id": sb, "command_id": id}),
        );
        if status["running"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "never running: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
    host.ok("commands.kill", json!({"sandbox_id": sb, "command_id": id}));
    let answer = host.wait(&req, Duration::from_secs(30)).expect("ends");
    assert_eq!(answer["exit_code"], 137, "{answer}");
    assert_eq!(output(&host, &req, "stdout"), "");
    // Gone: input and kill say so.
    host.fails(
        "commands.send_input",
        json!({"sandbox_id": sb, "command_id": id, "data": b64e(b"x\n")}),
        "E4004",
    );

    // Cancel stops it in the sandbox too.
    let (req, id) = start(&host, &sb, "read line");
    host.ok("epp.cancel", json!({"id": req}));
    assert_eq!(
        host.wait(&req, Duration::from_secs(30)).unwrap_err().epp,
        "E4999"
    );
    // Stopped: its status says so, or the terminal is gone altogether (E4004);
    // any other answer is a failure, not a reason to stop asking.
    wait_until(
        "the cancelled command to stop",
        Duration::from_secs(10),
        || match host.call(
            "commands.status",
            json!({"sandbox_id": sb, "command_id": id}),
        ) {
            Ok(s) if s["running"] == true => None,
            Ok(s) if s["running"] == false => Some(()),
            Err(e) if e.epp == "E4004" => Some(()),
            other => panic!("commands.status of the cancelled command: {other:?}"),
        },
    );
}
both_modes!(
    killed_while_waiting_for_input,
    super::killed_while_waiting_for_input
);

fn without_stdin_says_how(mode: Mode) {
    let host = Host::start(mode);
    let sb = host.create_sandbox();
    let r = host.ok("commands.run", json!({"sandbox_id": sb, "cmd": "true"}));
    let e = host.fails(
        "commands.send_input",
        json!({"sandbox_id": sb, "command_id": r["command_id"], "data": b64e(b"x")}),
        "E4009",
    );
    assert!(e.message.contains("stdin"), "{e:?}");
    // EOF cannot be sent: execd has no frame for it.
    let (req, id) = start(&host, &sb, "cat");
    let e = host.fails(
        "commands.send_input",
        json!({"sandbox_id": sb, "command_id": id, "data": ""}),
        "E4009",
    );
    assert!(e.message.contains("close"), "{e:?}");
    host.ok("commands.kill", json!({"sandbox_id": sb, "command_id": id}));
    host.wait(&req, Duration::from_secs(30)).expect("killed");
    host.fails(
        "commands.run",
        json!({"sandbox_id": sb, "cmd": "cat", "stdin": true, "background": true}),
        "E1001",
    );
}
both_modes!(without_stdin_says_how, super::without_stdin_says_how);
