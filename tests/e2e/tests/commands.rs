//! exec.run, exec.stream and process.manage.

use epp_e2e::{Host, Mode, both_modes, unique, workdir};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn exit_codes_output_cwd_env(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let run = |cmd: &str| host.ok("commands.run", json!({"sandbox_id": id, "cmd": cmd}));

    let r = run("echo out; echo err >&2; exit 3");
    assert_eq!(
        (
            r["exit_code"].as_i64(),
            r["stdout"].as_str(),
            r["stderr"].as_str()
        ),
        (Some(3), Some("out\n"), Some("err\n")),
        "{r}"
    );
    assert!(r["command_id"].is_string());
    assert_eq!(run("true")["exit_code"], 0);
    assert_eq!(run("false")["exit_code"], 1);
    assert_eq!(run("sh -c 'kill -9 $$'")["exit_code"], 137);

    let dir = format!("{}/sub dir ü", workdir(&host, &id));
    host.ok("files.make_dir", json!({"sandbox_id": id, "path": dir}));
    let r = host.ok(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "pwd", "cwd": dir}),
    );
    assert_eq!(r["stdout"], format!("{dir}\n"));

    let r = host.ok(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "echo \"$A|$B\"", "envs": {"A": "1  2", "B": "ü'\""}}),
    );
    assert_eq!(r["stdout"], "1  2|ü'\"\n");

    // Blank lines and a last line without newline keep their shape.
    let r = run("printf 'a\\n\\nb\\n'");
    assert_eq!(r["stdout"], "a\n\nb\n");

    let started = Instant::now();
    let e = host.fails(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "sleep 30", "timeout": 1}),
        "E5004",
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{e:?}");
    assert!(e.message.contains("timeout"), "{e:?}");

    host.fails(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "pwd", "cwd": "/no/such/dir"}),
        "E1001",
    );
    host.fails(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "  "}),
        "E1001",
    );
}
both_modes!(
    exit_codes_stderr_cwd_env_timeout,
    super::exit_codes_output_cwd_env
);

fn stream_incrementally(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    // 10 MiB in ten bursts 0.3 s apart, then a pause: output must flow while the
    // command runs, not arrive at its end.
    let mib: usize = 1024 * 1024;
    let cmd = format!(
        "for i in $(seq 10); do head -c {mib} /dev/zero | tr '\\0' x | fold -w 1023; echo; sleep 0.3; done; sleep 2; echo done >&2"
    );
    let req = host.send(
        "commands.run",
        json!({"sandbox_id": id, "cmd": cmd, "stream": true}),
    );
    let answer = host
        .wait(&req, Duration::from_secs(120))
        .expect("stream run");
    let answered_at = Instant::now();
    assert_eq!(answer["exit_code"], 0, "{answer}");
    assert!(
        answer.get("stdout").is_none(),
        "streamed runs don't repeat the output: {answer}"
    );

    let started = host.notes_for("commands.started", &req);
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].1["params"]["command_id"], answer["command_id"]);
    let outputs = host.notes_for("commands.output", &req);
    let stdout: usize = outputs
        .iter()
        .filter(|(_, n)| n["params"]["stream"] == "stdout")
        .map(|(_, n)| n["params"]["data"].as_str().unwrap().len())
        .sum();
    let lines = 10 * mib.div_ceil(1023);
    assert_eq!(
        stdout,
        10 * mib + lines,
        "all output arrives, line terminators restored"
    );
    let stderr: String = outputs
        .iter()
        .filter(|(_, n)| n["params"]["stream"] == "stderr")
        .map(|(_, n)| n["params"]["data"].as_str().unwrap())
        .collect();
    assert_eq!(stderr, "done\n");
    assert!(
        outputs.len() >= 10,
        "output comes in pieces, got {}",
        outputs.len()
    );
    let first = outputs[0].0;
    let last_stdout = outputs
        .iter()
        .rev()
        .find(|(_, n)| n["params"]["stream"] == "stdout")
        .unwrap()
        .0;
    assert!(
        last_stdout.duration_since(first) > Duration::from_millis(1500),
        "stdout arrived in one lump"
    );
    assert!(
        answered_at.duration_since(first) > Duration::from_secs(3),
        "output was held back until the end"
    );
    assert!(started[0].0 <= first);
}
both_modes!(stream_10_mib_incrementally, super::stream_incrementally);

fn cancel_mid_stream(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let marker = format!("{}/{}", workdir(&host, &id), unique("never"));
    let cmd = format!("for i in $(seq 1 25); do echo $i; sleep 0.2; done; touch '{marker}'");
    let req = host.send(
        "commands.run",
        json!({"sandbox_id": id, "cmd": cmd, "stream": true}),
    );
    let first = host.first_note("commands.output", &req, Duration::from_secs(30));
    assert!(first.is_some(), "no output before cancel");
    let command_id = host.notes_for("commands.started", &req)[0].1["params"]["command_id"].clone();
    // The testbed runs the command as a shell of this machine, its script
    // (naming the marker) on its command line: how the test sees it end.
    assert!(
        !epp_e2e::processes_with_arg(&marker).is_empty(),
        "no process runs the command's script"
    );
    assert_eq!(
        host.ok("epp.cancel", json!({"id": req})),
        json!({"cancelled": true})
    );
    let e = host
        .wait(&req, Duration::from_secs(30))
        .expect_err("cancelled");
    assert_eq!((e.code, e.epp.as_str()), (-32800, "E4999"));
    // The command was interrupted in the sandbox.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = host.ok(
            "commands.status",
            json!({"sandbox_id": id, "command_id": command_id}),
        );
        if status["running"] == false {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running after cancel: {status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The shell whose script would touch the marker (it is in its command
    // line) is gone: nothing can make the marker any more.
    epp_e2e::wait_until(
        "the end of the cancelled command's shell",
        Duration::from_secs(10),
        || {
            epp_e2e::processes_with_arg(&marker)
                .is_empty()
                .then_some(())
        },
    );
    let exists = host.ok("files.exists", json!({"sandbox_id": id, "path": marker}));
    assert_eq!(
        exists["exists"], false,
        "the cancelled command ran to its end"
    );
    // Cancelling something finished is harmless.
    assert_eq!(
        host.ok("epp.cancel", json!({"id": req})),
        json!({"cancelled": false})
    );
}
both_modes!(cancel_interrupts_the_command, super::cancel_mid_stream);

fn background(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let started = Instant::now();
    let r = host.ok(
        "commands.run",
        json!({"sandbox_id": id, "background": true, "cmd": "for i in 1 2 3; do echo line$i; sleep 0.3; done"}),
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "background returns at once"
    );
    let cmd = r["command_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let s = host.ok(
            "commands.status",
            json!({"sandbox_id": id, "command_id": cmd}),
        );
        if s["running"] == false {
            break s;
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status["exit_code"], 0, "{status}");
    let logs = host.ok(
        "commands.logs",
        json!({"sandbox_id": id, "command_id": cmd}),
    );
    assert_eq!(logs["output"], "line1\nline2\nline3\n");
    let rest = host.ok(
        "commands.logs",
        json!({"sandbox_id": id, "command_id": cmd, "cursor": logs["cursor"]}),
    );
    assert_eq!(rest["output"], "");
    host.fails(
        "commands.kill",
        json!({"sandbox_id": id, "command_id": cmd}),
        "E4004",
    );

    let long = host.ok(
        "commands.run",
        json!({"sandbox_id": id, "background": true, "cmd": "sleep 60"}),
    );
    let long_id = long["command_id"].as_str().unwrap();
    host.ok(
        "commands.kill",
        json!({"sandbox_id": id, "command_id": long_id}),
    );
    let s = host.ok(
        "commands.status",
        json!({"sandbox_id": id, "command_id": long_id}),
    );
    assert_eq!(s["running"], false, "{s}");
    // Interrupted (SIGTERM): 128 + 15, as commands.run reports a signal.
    assert_eq!(s["exit_code"], 143, "{s}");
    host.fails(
        "commands.status",
        json!({"sandbox_id": id, "command_id": "0123456789abcdef"}),
        "E4004",
    );
    host.fails(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "true", "background": true, "stream": true}),
        "E1001",
    );
}
both_modes!(background_status_logs_kill, super::background);

fn processes(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    // A command line no other test (or mode) uses: the testbed shows every process of the machine.
    let tag: u64 = unique("p")
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let secs = format!("{}.{:03}", 200 + tag % 700, tag % 997);
    host.ok(
        "commands.run",
        json!({"sandbox_id": id, "background": true, "cmd": format!("exec sleep {secs}")}),
    );
    let find = || -> Option<Value> {
        let list = host.ok("process.list", json!({"sandbox_id": id}));
        list["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["cmdline"] == format!("sleep {secs}"))
            .cloned()
    };
    let mut proc = None;
    for _ in 0..25 {
        proc = find();
        if proc.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let proc = proc.expect("the background sleep is listed");
    assert!(
        proc["ppid"].as_u64().is_some() && proc["user"].as_str().is_some_and(|u| !u.is_empty()),
        "{proc}"
    );
    let pid = proc["pid"].as_u64().unwrap();
    host.ok(
        "process.signal",
        json!({"sandbox_id": id, "pid": pid, "signal": "SIGKILL"}),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while find().is_some() {
        assert!(Instant::now() < deadline, "process {pid} survived SIGKILL");
        std::thread::sleep(Duration::from_millis(200));
    }
    host.fails(
        "process.signal",
        json!({"sandbox_id": id, "pid": pid, "signal": "TERM"}),
        "E4004",
    );
    host.fails(
        "process.signal",
        json!({"sandbox_id": id, "pid": pid, "signal": "SIGNOPE"}),
        "E1001",
    );
    host.fails(
        "commands.send_input",
        json!({"sandbox_id": id, "command_id": "x", "data": "aGk="}),
        "E4009",
    );
}
both_modes!(process_list_and_signal, super::processes);

/// Runs `cmd` buffered and streamed; returns (stdout, stderr) of each.
fn both_ways(host: &Host, id: &str, cmd: &str) -> [(String, String); 2] {
    let r = host.ok("commands.run", json!({"sandbox_id": id, "cmd": cmd}));
    assert_eq!(r["exit_code"], 0, "{cmd}: {r}");
    let buffered = (
        r["stdout"].as_str().unwrap().to_string(),
        r["stderr"].as_str().unwrap().to_string(),
    );
    let req = host.send(
        "commands.run",
        json!({"sandbox_id": id, "cmd": cmd, "stream": true}),
    );
    let answer = host.wait(&req, Duration::from_secs(60)).expect("stream");
    assert_eq!(answer["exit_code"], 0, "{cmd}: {answer}");
    let outputs = host.notes_for("commands.output", &req);
    let of = |stream: &str| -> String {
        outputs
            .iter()
            .filter(|(_, n)| n["params"]["stream"] == stream)
            .map(|(_, n)| n["params"]["data"].as_str().unwrap())
            .collect()
    };
    [buffered, (of("stdout"), of("stderr"))]
}

fn exact_output(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    // execd 1.1.1 keeps every byte: nothing is added or lost, buffered or streamed.
    for (cmd, stdout, stderr) in [
        ("printf abc", "abc", ""),
        ("printf 'a\\r\\nb\\n\\n\\rc'", "a\r\nb\n\n\rc", ""),
        ("printf '\\n\\nx\\n\\n'", "\n\nx\n\n", ""),
        (
            "printf '10%%\\r50%%\\r100%%'; printf 'no newline' >&2",
            "10%\r50%\r100%",
            "no newline",
        ),
        ("echo one; printf two", "one\ntwo", ""),
    ] {
        for (way, got) in ["buffered", "streamed"]
            .iter()
            .zip(both_ways(&host, &id, cmd))
        {
            assert_eq!(
                (got.0.as_str(), got.1.as_str()),
                (stdout, stderr),
                "{way}: {cmd}"
            );
        }
    }
}
both_modes!(output_is_exact_on_execd_1_1_1, super::exact_output);

fn older_execd_fallback(mode: Mode) {
    let host = Host::start(mode);
    // A sandbox whose execd cuts lines like execd <= 1.1.0 (terminators dropped).
    let legacy = host.create_info(json!({
        "metadata": {"e2e": unique("legacy")},
        "env": {"EXECD_STANDIN_LEGACY_LINES": "1"}
    }))["sandbox_id"]
        .as_str()
        .unwrap()
        .to_string();
    // First command: one line without evidence either way; a probe settles it.
    let [buffered, streamed] = both_ways(&host, &legacy, "echo abc");
    assert_eq!(buffered.0, "abc\n");
    assert_eq!(streamed.0, "abc\n");
    for (cmd, stdout) in [
        ("printf 'a\\n\\nb\\n'", "a\n\nb\n"),
        ("echo one; echo two >&2", "one\n"),
        ("printf 'x\\r\\ny\\n'", "x\ny\n"),
    ] {
        for (way, got) in ["buffered", "streamed"]
            .iter()
            .zip(both_ways(&host, &legacy, cmd))
        {
            assert_eq!(got.0, stdout, "{way}: {cmd}");
        }
    }
    // What older execd cannot tell: whether the last line had a newline.
    assert_eq!(both_ways(&host, &legacy, "printf abc")[0].0, "abc\n");
    // Another sandbox of the same host has execd 1.1.1: exact again.
    let id = host.create_sandbox();
    assert_eq!(both_ways(&host, &id, "printf abc")[0].0, "abc");
}
both_modes!(older_execd_lines_are_detected, super::older_execd_fallback);

fn paused_timeout(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    host.ok("sandbox.pause", json!({"sandbox_id": id}));
    let started = Instant::now();
    let e = host.fails(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "echo x", "timeout": 2}),
        "E5004",
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}: {e:?}");
    assert!(e.message.contains("paused"), "{e:?}");
    // Streamed and background runs are bounded the same way.
    let started = Instant::now();
    host.fails(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "echo x", "timeout": 2, "stream": true}),
        "E5004",
    );
    host.fails(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "echo x", "timeout": 2, "background": true}),
        "E5004",
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    host.ok("sandbox.resume", json!({"sandbox_id": id}));
    let r = host.ok(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "echo back", "timeout": 5}),
    );
    assert_eq!(r["stdout"], "back\n");
}
both_modes!(
    paused_sandbox_honours_the_command_timeout,
    super::paused_timeout
);

/// The pid that a background command printed first in its log.
fn logged_pid(host: &Host, id: &str, command_id: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let logs = host.ok(
            "commands.logs",
            json!({"sandbox_id": id, "command_id": command_id}),
        );
        if let Some(pid) = logs["output"]
            .as_str()
            .unwrap()
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid logged: {logs}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn background_children(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let listed = |pid: u64| -> bool {
        host.ok("process.list", json!({"sandbox_id": id}))["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"] == pid)
    };
    for cmd in [
        "sleep 120 & echo $!",
        "nohup sleep 120 >/dev/null 2>&1 & echo $!",
    ] {
        let r = host.ok(
            "commands.run",
            json!({"sandbox_id": id, "background": true, "cmd": cmd}),
        );
        let command_id = r["command_id"].as_str().unwrap().to_string();
        let child = logged_pid(&host, &id, &command_id);
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            let s = host.ok(
                "commands.status",
                json!({"sandbox_id": id, "command_id": command_id}),
            );
            if s["running"] == false {
                break s;
            }
            assert!(Instant::now() < deadline, "{s}");
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(status["exit_code"], 0, "{status}");
        // The script is done; what it started in the background still runs.
        std::thread::sleep(Duration::from_secs(1));
        assert!(listed(child), "`{cmd}`: child {child} died with its script");
        // It is an ordinary process of the sandbox: process.signal ends it.
        host.ok(
            "process.signal",
            json!({"sandbox_id": id, "pid": child, "signal": "SIGKILL"}),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while listed(child) {
            assert!(Instant::now() < deadline, "{child} survived SIGKILL");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // A timeout still ends the whole group, children included.
    let r = host.ok(
        "commands.run",
        json!({"sandbox_id": id, "background": true, "timeout": 1, "cmd": "sleep 120 & echo $!; sleep 120"}),
    );
    let command_id = r["command_id"].as_str().unwrap().to_string();
    let child = logged_pid(&host, &id, &command_id);
    let deadline = Instant::now() + Duration::from_secs(15);
    while listed(child) {
        assert!(Instant::now() < deadline, "{child} outlived the timeout");
        std::thread::sleep(Duration::from_millis(200));
    }
    let s = host.ok(
        "commands.status",
        json!({"sandbox_id": id, "command_id": command_id}),
    );
    // Killed by SIGKILL: 128 + 9, as commands.run says.
    assert_eq!(
        (s["running"].clone(), s["exit_code"].clone()),
        (json!(false), json!(137)),
        "{s}"
    );
}
both_modes!(
    background_children_outlive_their_script,
    super::background_children
);
