//! pty: a real terminal through execd's WebSocket; a terminal as another user;
//! pty.connect from another process (replay, then live output; input and resize
//! from there; the previous holder told it was taken over).

use epp_e2e::{
    Fault, FaultProxy, Host, HostBuilder, Mode, b64d, b64e, both_modes, unique, wait_until,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The bytes a terminal printed in this host's notifications from the
/// `from`-th notification on.
fn bytes_from(host: &Host, pty: &str, from: usize) -> Vec<u8> {
    host.notes()
        .iter()
        .skip(from)
        .filter(|(_, n)| n["method"] == "pty.output" && n["params"]["pty_id"] == pty)
        .flat_map(|(_, n)| b64d(n["params"]["data"].as_str().unwrap()))
        .collect()
}

/// Everything a terminal printed so far.
fn output(host: &Host, pty: &str) -> String {
    String::from_utf8_lossy(&bytes_from(host, pty, 0)).into_owned()
}

/// Waits until what the terminal printed from the `from`-th notification on
/// holds `needle`; answers that output.
fn wait_output_from(host: &Host, pty: &str, from: usize, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = String::from_utf8_lossy(&bytes_from(host, pty, from)).into_owned();
        if seen.contains(needle) {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "terminal never printed {needle:?}; got {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_output(host: &Host, pty: &str, needle: &str) {
    wait_output_from(host, pty, 0, needle);
}

fn type_in(host: &Host, id: &str, pty: &str, text: &str) {
    host.ok(
        "pty.send_input",
        json!({"sandbox_id": id, "pty_id": pty, "data": b64e(text.as_bytes())}),
    );
}

/// The `pty.exit` of `pty` on `host`.
fn wait_exit(host: &Host, pty: &str) -> Value {
    host.wait_note(Duration::from_secs(20), |n| {
        n["method"] == "pty.exit" && n["params"]["pty_id"] == pty
    })
    .unwrap_or_else(|| panic!("no pty.exit for {pty}"))
}

/// Waits for the terminal's `pty.exit` and checks its code (the whole note in
/// the failure: its `error` says why a code is missing).
fn assert_exit(host: &Host, pty: &str, code: i64) {
    let exit = wait_exit(host, pty);
    assert_eq!(exit["params"]["exit_code"], code, "{exit}");
}

fn terminal(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let created = host.ok(
        "pty.create",
        json!({"sandbox_id": id, "cols": 80, "rows": 24}),
    );
    let pty = created["pty_id"].as_str().unwrap().to_string();
    let input = |text: &str| type_in(&host, &id, &pty, text);

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
    let exit = wait_exit(&host, &pty);
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

/// A `cmd` runs at the requested size from its start: it is set before the
/// program runs, not by a frame after the connect that could race its exit.
fn command_size(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let pty = host.ok(
        "pty.create",
        json!({"sandbox_id": id, "cols": 100, "rows": 40, "cmd": "stty size; exit 3"}),
    )["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_exit(&host, &pty, 3);
    assert!(
        output(&host, &pty).contains("40 100"),
        "{}",
        output(&host, &pty)
    );
}
both_modes!(a_command_starts_at_its_size, super::command_size);

/// A connection that ends without execd's exit frame and cannot be attached
/// again (opensandbox-server's proxy gives up on a connection with 1011 and
/// drops what was left; here the fault proxy does it right after the
/// handshake, to the stream's reattach too): `pty.exit` has no code and an
/// error saying why and that the shell still runs, and `pty.connect` attaches
/// it again, up to its real exit.
#[test]
fn a_lost_exit_frame_is_told() {
    let proxy = FaultProxy::testbed();
    let host = HostBuilder::new(Mode::Proxy).via(&proxy).spawn();
    let id = host.create_sandbox();
    // Every attach, until healed (a reattach that execd answers 409 first
    // tries again).
    proxy.fault("GET", "/ws", Fault::CloseFrame(1011), 100);
    let pty = host.ok("pty.create", json!({"sandbox_id": id}))["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    let exit = wait_exit(&host, &pty);
    assert_eq!(exit["params"]["exit_code"], Value::Null, "{exit}");
    let error = exit["params"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("closed with code 1011") && error.contains("its shell still runs"),
        "{exit}"
    );
    assert!(
        proxy.count("GET", "/ws") >= 2,
        "create's and the reattach's"
    );

    proxy.heal();
    host.ok("pty.connect", json!({"sandbox_id": id, "pty_id": pty}));
    type_in(&host, &id, &pty, "exit 5\n");
    let exit = second_exit(&host, &pty);
    assert_eq!(exit["params"]["exit_code"], 5, "{exit}");
}

/// The terminal's `pty.exit` that has a code (after one without).
fn second_exit(host: &Host, pty: &str) -> Value {
    host.wait_note(Duration::from_secs(20), |n| {
        n["method"] == "pty.exit"
            && n["params"]["pty_id"] == pty
            && n["params"]["exit_code"] != Value::Null
    })
    .unwrap_or_else(|| panic!("no pty.exit with a code: {:?}", host.notes()))
}

/// A connection that drops while the shell runs is attached again by the
/// stream itself, from the byte it had reached: the output goes on with
/// nothing lost or repeated, input works again, and the exit code arrives.
#[test]
fn a_dropped_connection_is_reattached() {
    let proxy = FaultProxy::testbed();
    let host = HostBuilder::new(Mode::Proxy).via(&proxy).spawn();
    let id = host.create_sandbox();
    let pty = host.ok("pty.create", json!({"sandbox_id": id}))["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    type_in(&host, &id, &pty, "echo one-$((0+1))\n");
    wait_output(&host, &pty, "\none-1\r\n");
    // Printed while the connection is down: it comes with the reattach. Cut
    // once the shell has the line (its echo is back), so it is not lost.
    type_in(&host, &id, &pty, "sleep 1; echo three-$((1+2))\n");
    wait_output(&host, &pty, "echo three-$((1+2))");

    assert_eq!(proxy.cut_websockets(), 1);
    // Input sent before the stream saw the connection end would be lost with
    // it: wait for the reattach's handshake; until it is answered, input is
    // E4004 (the connection is not open).
    wait_until("the reattach", Duration::from_secs(20), || {
        (proxy.count("GET", "/ws") >= 2).then_some(())
    });
    wait_until(
        "input to reach the terminal again",
        Duration::from_secs(20),
        || {
            let typed = host.call(
                "pty.send_input",
                json!({"sandbox_id": id, "pty_id": pty, "data": b64e(b"echo two-$((1+1))\n")}),
            );
            match typed {
                Ok(_) => Some(()),
                Err(e) if e.epp == "E4004" => None,
                Err(e) => panic!("{e:?}"),
            }
        },
    );
    wait_output(&host, &pty, "\ntwo-2\r\n");
    let seen = wait_output_from(&host, &pty, 0, "\nthree-3\r\n");
    for line in ["\none-1\r\n", "\ntwo-2\r\n", "\nthree-3\r\n"] {
        assert_eq!(seen.matches(line).count(), 1, "{line:?} in {seen:?}");
    }

    type_in(&host, &id, &pty, "exit 5\n");
    let exit = wait_exit(&host, &pty);
    assert_eq!(exit["params"]["exit_code"], 5, "{exit}");
}

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
    let exit = wait_exit(&host, &pty);
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

/// A terminal as another user: the shell, and a `cmd`, are theirs.
fn as_user(host: Host, user: &str, home: &str) {
    let id = host.create_sandbox();
    let pty = host.ok(
        "pty.create",
        json!({"sandbox_id": id, "user": user, "envs": {"MARK": "m"}}),
    )["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    type_in(&host, &id, &pty, "echo \"<$(id -un)|$HOME|$USER|$MARK>\"\n");
    wait_output(&host, &pty, &format!("\n<{user}|{home}|{user}|m>"));
    type_in(&host, &id, &pty, "exit 4\n");
    assert_exit(&host, &pty, 4);

    let pty = host.ok(
        "pty.create",
        json!({"sandbox_id": id, "user": user, "cols": 100, "rows": 40,
            "cmd": "echo \"[$(id -un)|$(stty size)]\"; exit 6"}),
    )["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_exit(&host, &pty, 6);
    assert!(
        output(&host, &pty).contains(&format!("[{user}|40 100]")),
        "{}",
        output(&host, &pty)
    );

    // The request's PATH is the user's shell's: root finds setpriv without it.
    let pty = host.ok(
        "pty.create",
        json!({"sandbox_id": id, "user": user, "envs": {"PATH": "/nonexistent"},
            "cmd": "echo \"[$PATH|$(/usr/bin/id -un)]\""}),
    )["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_exit(&host, &pty, 0);
    assert!(
        output(&host, &pty).contains(&format!("[/nonexistent|{user}]")),
        "{}",
        output(&host, &pty)
    );

    let ghost = unique("ghost");
    let e = host.fails(
        "pty.create",
        json!({"sandbox_id": id, "user": ghost}),
        "E1001",
    );
    assert!(e.message.contains(&ghost), "{e:?}");
}

fn as_user_docker(mode: Mode) {
    as_user(Host::start_docker(mode), "user", "/home/user")
}
both_modes!(docker_terminal_as_a_user, super::as_user_docker);

fn as_user_local(mode: Mode) {
    as_user(Host::start(mode), "nobody", "/nonexistent")
}
both_modes!(local_terminal_as_a_user, super::as_user_local);

/// pty.connect from a second process: it gets the terminal's output from the
/// start (replay), then live; its input and resize reach the shell; the first
/// holder's stream ends saying it was taken over, and its input is refused. A
/// third connects from an offset; the second, connecting again, replaces its
/// own stream; an unknown or exited terminal is E4004.
fn connect(first: Host, second: Host, third: Host) {
    let id = first.create_sandbox();
    let pty = first.ok("pty.create", json!({"sandbox_id": id}))["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    type_in(&first, &id, &pty, "echo one-$((1+1))\n");
    wait_output(&first, &pty, "\none-2\r\n");

    let answer = second.ok("pty.connect", json!({"sandbox_id": id, "pty_id": pty}));
    assert_eq!(answer, json!({"pty_id": pty}));
    // The replay: what the first saw, from the first byte.
    wait_output(&second, &pty, "\none-2\r\n");
    let first_saw = output(&first, &pty);
    let second_saw = output(&second, &pty);
    assert!(
        second_saw.starts_with(&first_saw[..first_saw.find("one-2\r\n").unwrap()]),
        "replay {second_saw:?} is not what the first saw, {first_saw:?}"
    );
    // The first is told, and can no longer type.
    let exit = wait_exit(&first, &pty);
    let error = exit["params"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!(
            "terminal {pty} of sandbox {id} was taken over by a pty.connect"
        )) && error.contains("another epp-host process")
            && error.contains("call pty.connect here"),
        "{exit}"
    );
    assert_eq!(exit["params"]["exit_code"], Value::Null, "{exit}");
    let e = first.fails(
        "pty.send_input",
        json!({"sandbox_id": id, "pty_id": pty, "data": b64e(b"echo lost\n")}),
        "E4004",
    );
    assert!(e.message.contains("pty.connect attaches it here"), "{e:?}");

    // Live: input and resize from the second.
    let live_from = second.notes().len();
    second.ok(
        "pty.resize",
        json!({"sandbox_id": id, "pty_id": pty, "cols": 101, "rows": 41}),
    );
    type_in(&second, &id, &pty, "stty size; echo two-$((1+1))\n");
    wait_output_from(&second, &pty, live_from, "\ntwo-2\r\n");
    let live = wait_output_from(&second, &pty, live_from, "41 101");
    assert!(
        !live.contains("one-2\r\n"),
        "live output repeated the replay: {live:?}"
    );

    // A third from an offset: only what came after it.
    let since = bytes_from(&second, &pty, 0).len();
    third.ok(
        "pty.connect",
        json!({"sandbox_id": id, "pty_id": pty, "since": since}),
    );
    type_in(&third, &id, &pty, "echo three-$((1+2))\n");
    wait_output(&third, &pty, "\nthree-3\r\n");
    let third_saw = output(&third, &pty);
    assert!(
        !third_saw.contains("one-2") && !third_saw.contains("two-2"),
        "since={since} replayed older output: {third_saw:?}"
    );
    let exit = wait_exit(&second, &pty);
    assert!(
        exit["params"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("taken over"),
        "{exit}"
    );

    // Connecting again from the same process replaces its own stream.
    let before = third.notes().len();
    third.ok("pty.connect", json!({"sandbox_id": id, "pty_id": pty}));
    let exit = wait_exit(&third, &pty);
    assert!(
        exit["params"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("a later pty.connect in this epp-host process"),
        "{exit}"
    );
    wait_output_from(&third, &pty, before, "\none-2\r\n");
    let after = third.notes().len();
    type_in(&third, &id, &pty, "echo four-$((2+2))\n");
    wait_output_from(&third, &pty, after, "\nfour-4\r\n");
    third.ok("pty.kill", json!({"sandbox_id": id, "pty_id": pty}));
    let exit = third
        .wait_note(Duration::from_secs(20), |n| {
            n["method"] == "pty.exit"
                && n["params"]["pty_id"] == pty
                && n["params"]["exit_code"] == 137
        })
        .expect("pty.exit 137 after pty.kill");
    assert!(exit["params"].get("error").is_none(), "{exit}");

    // Gone, never there, or exited: E4004.
    for missing in [pty.as_str(), "no-such-terminal"] {
        let e = second.fails(
            "pty.connect",
            json!({"sandbox_id": id, "pty_id": missing}),
            "E4004",
        );
        assert!(
            e.message
                .contains(&format!("terminal {missing} does not exist"))
                && e.message.contains("open a new one with pty.create"),
            "{e:?}"
        );
    }
    let done = first.ok("pty.create", json!({"sandbox_id": id, "cmd": "exit 0"}))["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_exit(&first, &done, 0);
    let e = second.fails(
        "pty.connect",
        json!({"sandbox_id": id, "pty_id": done}),
        "E4004",
    );
    assert!(e.message.contains("has exited"), "{e:?}");
}

fn connect_docker(mode: Mode) {
    connect(
        Host::start_docker(mode),
        Host::start_docker(mode),
        Host::start_docker(mode),
    )
}
both_modes!(docker_connect_from_other_processes, super::connect_docker);

fn connect_local(mode: Mode) {
    connect(Host::start(mode), Host::start(mode), Host::start(mode))
}
both_modes!(local_connect_from_other_processes, super::connect_local);

/// A host process stopped (SIGSTOP: it reads nothing) until this is dropped,
/// however the test ends.
struct Stopped<'a>(&'a Host);

fn kill(host: &Host, signal: &str) -> bool {
    std::process::Command::new("kill")
        .args([format!("-{signal}"), host.pid().to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

impl<'a> Stopped<'a> {
    fn new(host: &'a Host) -> Stopped<'a> {
        assert!(kill(host, "STOP"), "kill -STOP {}", host.pid());
        Stopped(host)
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        kill(self.0, "CONT");
    }
}

/// The `pty.exit`s of `pty` on `host` so far: (with an error, without).
fn exits(host: &Host, pty: &str) -> (Vec<Value>, Vec<Value>) {
    host.notes()
        .into_iter()
        .map(|(_, n)| n)
        .filter(|n| n["method"] == "pty.exit" && n["params"]["pty_id"] == pty)
        .partition(|n| n["params"].get("error").is_some())
}

/// Successive take-overs: the first holder never reads again (stopped), a
/// second process connects three times in a row, then twice at once. Each
/// replaced stream ends exactly once, saying who took it; the last holder
/// alone gets what is typed after it, once; two connects at once leave the
/// terminal attached here (one may be told to retry), naming no internal key.
fn takeovers(first: Host, second: Host) {
    let id = first.create_sandbox();
    let pty = first.ok("pty.create", json!({"sandbox_id": id}))["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    type_in(&first, &id, &pty, "echo one-$((1+1))\n");
    wait_output(&first, &pty, "\none-2\r\n");
    let stopped = Stopped::new(&first);
    let params = json!({"sandbox_id": id, "pty_id": pty});
    for _ in 0..3 {
        second.ok("pty.connect", params.clone());
    }
    let from = second.notes().len();
    type_in(&second, &id, &pty, "echo mark-$((40+2))\n");
    wait_output_from(&second, &pty, from, "\nmark-42\r\n");
    let here = "was taken over by a later pty.connect in this epp-host process";
    let replaced = wait_until(
        "the two replaced streams' ends",
        Duration::from_secs(20),
        || {
            let (errored, _) = exits(&second, &pty);
            (errored.len() >= 2).then_some(errored)
        },
    );
    for exit in &replaced {
        let error = exit["params"]["error"].as_str().unwrap();
        assert!(error.contains(here), "{exit}");
        assert_eq!(exit["params"]["exit_code"], Value::Null, "{exit}");
    }

    // Typed after the last connect: printed once (each connect's replay came
    // before it).
    let seen = output(&second, &pty);
    assert_eq!(seen.matches("mark-42\r\n").count(), 1, "{seen:?}");

    // Two at once: each answers, the terminal stays attached here, and a
    // refusal says what happened in words.
    let calls = [
        second.send("pty.connect", params.clone()),
        second.send("pty.connect", params.clone()),
    ];
    let answers: Vec<_> = calls
        .iter()
        .map(|c| second.wait(c, Duration::from_secs(30)))
        .collect();
    let attached = answers.iter().filter(|a| a.is_ok()).count();
    assert!(attached >= 1, "{answers:?}");
    for e in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert_eq!(e.epp, "E4009", "{e:?}");
        assert!(
            e.message.contains(&format!(
                "another pty.connect of terminal {pty} of sandbox {id} is under way in this \
                 epp-host process; retry"
            )) && !e.message.contains("WebSocket")
                && !e.message.contains("pty:"),
            "{e:?}"
        );
    }
    let from = second.notes().len();
    type_in(&second, &id, &pty, "echo after-$((2+3))\n");
    wait_output_from(&second, &pty, from, "\nafter-5\r\n");

    // The stopped holder, running again, learns it was taken elsewhere.
    drop(stopped);
    let exit = wait_exit(&first, &pty);
    assert!(
        exit["params"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("taken over by a pty.connect elsewhere"),
        "{exit}"
    );

    type_in(&second, &id, &pty, "exit 0\n");
    let clean = wait_until("the shell's exit", Duration::from_secs(20), || {
        let (_, clean) = exits(&second, &pty);
        clean.first().cloned()
    });
    assert_eq!(clean["params"]["exit_code"], 0, "{clean}");
    let (errored, clean) = exits(&second, &pty);
    assert_eq!(
        (errored.len(), clean.len()),
        // The three connects in a row replaced two; each connect at once that
        // attached replaced one more.
        (2 + attached, 1),
        "every replaced stream ends once: {errored:?} {clean:?}"
    );
    assert!(
        errored
            .iter()
            .all(|e| e["params"]["error"].as_str().unwrap().contains(here))
    );
    let all = output(&second, &pty);
    assert_eq!(all.matches("after-5\r\n").count(), 1, "{all:?}");
    assert_eq!(exits(&first, &pty).0.len() + exits(&first, &pty).1.len(), 1);
}

fn takeovers_local(mode: Mode) {
    takeovers(Host::start(mode), Host::start(mode))
}
both_modes!(
    local_successive_and_concurrent_takeovers,
    super::takeovers_local
);

/// pty.kill from a process the terminal is not attached to: the holder still
/// reports 137 (the kill left word in the sandbox, which it reads and
/// removes); a shell killed by another signal still reports -1.
fn kill_elsewhere(first: Host, second: Host) {
    let id = first.create_sandbox();
    let pty = first.ok("pty.create", json!({"sandbox_id": id}))["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    type_in(&first, &id, &pty, "echo ready-$((1+1))\n");
    wait_output(&first, &pty, "\nready-2\r\n");
    second.ok("pty.kill", json!({"sandbox_id": id, "pty_id": pty}));
    let exit = wait_exit(&first, &pty);
    assert_eq!(exit["params"]["exit_code"], 137, "{exit}");
    assert!(exit["params"].get("error").is_none(), "{exit}");
    let word = format!("/run/epp/pty-killed/{pty}");
    assert_eq!(
        second.ok("files.exists", json!({"sandbox_id": id, "path": word}))["exists"],
        false
    );

    let other = first.ok("pty.create", json!({"sandbox_id": id}))["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    type_in(&first, &id, &other, "kill -KILL $$\n");
    assert_exit(&first, &other, -1);
}

fn kill_elsewhere_local(mode: Mode) {
    kill_elsewhere(Host::start(mode), Host::start(mode))
}
both_modes!(local_kill_from_another_process, super::kill_elsewhere_local);
