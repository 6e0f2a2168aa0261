//! Upstream faults, injected by the fault proxy (`epp_e2e::faults`) between the
//! host and the testbed, or done to the testbed itself: every case ends with a
//! clear EPP error (right code, a message that says what to do) within a bounded
//! time, the same host answers the next request, and no half-written file is
//! reported as written. Figures go to `target/reliability/faults.txt`.
//!
//! Direct mode reaches sandboxes at `127.0.0.1:<execd port>`, past the proxy;
//! the cases that fault execd traffic therefore run in server-proxy mode.

use epp_e2e::{
    Fault, FaultProxy, Host, HostBuilder, Mode, PrivateTestbed, RpcError, both_modes, figure,
    orphans, sh, unique, workdir,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let began = Instant::now();
    let out = f();
    (out, began.elapsed())
}

/// One row of the fault table: case, mode, answer, time, what else was checked.
fn row(case: &str, mode: Mode, answer: &str, took: Duration, note: &str) {
    figure(
        "faults",
        &format!(
            "| {case} | {} | {answer} | {:.2} s | {note} |",
            if mode == Mode::Direct {
                "direct"
            } else {
                "proxy"
            },
            took.as_secs_f64()
        ),
    );
}

/// The error's EPP code; its message goes to `fault-messages.txt`.
fn code(e: &RpcError) -> String {
    figure("fault-messages", &format!("| {} | {} |", e.epp, e.message));
    e.epp.clone()
}

fn err(reply: epp_e2e::Reply, what: &str) -> Box<RpcError> {
    match reply {
        Ok(v) => panic!("{what} should have failed but returned {v}"),
        Err(e) => e,
    }
}

/// A host through `proxy`, started and past its first instance, so timings
/// measure the fault, not start-up.
fn host_via(mode: Mode, proxy: &FaultProxy) -> Host {
    let host = HostBuilder::new(mode).via(proxy).spawn();
    host.ok("epp.hello", json!({}));
    host
}

/// The host still answers, and still reaches the testbed.
fn still_serving(host: &Host) {
    assert_eq!(host.ok("epp.hello", json!({}))["protocol"], "EPP/1");
    host.ok(
        "sandbox.list",
        json!({"metadata": {"e2e": "nothing-has-this"}}),
    );
}

#[test]
fn server_down_at_start_then_back() {
    let proxy = FaultProxy::testbed();
    proxy.down();
    let host = host_via(Mode::Direct, &proxy);
    let (e, took) = timed(|| host.fails("sandbox.list", json!({}), "E5003"));
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert!(e.message.contains(&proxy.url()), "{e:?}");
    assert!(e.message.contains("ABX_OPENSANDBOX_BASE_URL"), "{e:?}");
    row(
        "server down at start: sandbox.list",
        Mode::Direct,
        &code(&e),
        took,
        "3 retries with backoff (connection refused); message names the URL and ABX_OPENSANDBOX_BASE_URL",
    );
    proxy.up();
    let (_, took) = timed(|| still_serving(&host));
    row(
        "server back: next request, same host",
        Mode::Direct,
        "ok",
        took,
        "no restart of the host needed",
    );
}

fn down_mid_session(mode: Mode) {
    let proxy = FaultProxy::testbed();
    let host = host_via(mode, &proxy);
    let id = host.create_sandbox();
    assert_eq!(sh(&host, &id, "echo up"), "up\n");
    proxy.down();
    let (e, took) = timed(|| host.fails("sandbox.get_info", json!({"sandbox_id": id}), "E5003"));
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert!(e.message.contains("check that it is running"), "{e:?}");
    row(
        "server down mid-session: sandbox.get_info",
        mode,
        &code(&e),
        took,
        "read retried 3 times, then E5003",
    );
    let (run, took) = timed(|| {
        host.call(
            "commands.run",
            json!({"sandbox_id": id, "cmd": "echo during"}),
        )
    });
    match mode {
        // The sandbox's endpoint is remembered and execd is reached directly.
        Mode::Direct => {
            assert_eq!(run.as_ref().unwrap()["stdout"], "during\n", "{run:?}");
            row(
                "server down mid-session: commands.run",
                mode,
                "ok",
                took,
                "execd reached directly (endpoint memoised)",
            );
        }
        Mode::Proxy => {
            let e = err(run, "commands.run through a server that is down");
            assert_eq!(e.epp, "E5003", "{e:?}");
            row(
                "server down mid-session: commands.run",
                mode,
                &code(&e),
                took,
                "POST /command is not retried",
            );
        }
    }
    proxy.up();
    host.ok("sandbox.get_info", json!({"sandbox_id": id}));
    assert_eq!(sh(&host, &id, "echo after"), "after\n");
}
both_modes!(server_down_mid_session, super::down_mid_session);

#[test]
fn http_5xx_reads_are_retried_writes_are_not() {
    let proxy = FaultProxy::testbed();
    let host = host_via(Mode::Direct, &proxy);
    let id = host.create_sandbox();
    let path = format!("/sandboxes/{id}");
    let get = || host.call("sandbox.get_info", json!({"sandbox_id": id}));
    let gets = || proxy.count("GET", &path);

    // 503 twice, then the real answer: the read succeeds after two retries.
    for (status, times) in [(503, 2), (502, 1), (504, 1)] {
        proxy.fault("GET", &path, Fault::Status(status), times);
        let before = gets();
        let (info, took) = timed(get);
        assert_eq!(info.unwrap()["sandbox_id"], id.as_str());
        assert_eq!(gets() - before, times + 1);
        row(
            &format!("HTTP {status} ×{times} on sandbox.get_info"),
            Mode::Direct,
            "ok",
            took,
            &format!("{} attempts, answered after the retries", times + 1),
        );
    }
    // 500: a server bug, not retried.
    proxy.fault("GET", &path, Fault::Status(500), 1);
    let before = gets();
    let (e, took) = timed(|| err(get(), "a 500"));
    assert_eq!((e.epp.as_str(), gets() - before), ("E5001", 1), "{e:?}");
    assert_eq!(e.data["http_status"], 500);
    assert!(e.message.contains("retry later"), "{e:?}");
    row(
        "HTTP 500 on sandbox.get_info",
        Mode::Direct,
        "E5001",
        took,
        "1 attempt (500 is not retried)",
    );
    // 503 for good: bounded retries, then E5001.
    proxy.fault("GET", &path, Fault::Status(503), 1000);
    let before = gets();
    let (e, took) = timed(|| err(get(), "503 for ever"));
    assert_eq!((e.epp.as_str(), gets() - before), ("E5001", 4), "{e:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    row(
        "HTTP 503 for good on sandbox.get_info",
        Mode::Direct,
        "E5001",
        took,
        "4 attempts in ≤ 3 s, then the error (http_status 503)",
    );
    proxy.heal();
    assert_eq!(get().unwrap()["state"], "running");

    // DELETE after a 503 (the server did nothing): retried; the kill works.
    proxy.fault("DELETE", &path, Fault::Status(503), 1);
    let (_, took) = timed(|| host.ok("sandbox.kill", json!({"sandbox_id": id})));
    assert_eq!(proxy.count("DELETE", &path), 2);
    host.fails("sandbox.get_info", json!({"sandbox_id": id}), "E4004");
    row(
        "HTTP 503 on sandbox.kill",
        Mode::Direct,
        "ok",
        took,
        "DELETE retried once; sandbox gone",
    );
    still_serving(&host);
}

#[test]
fn create_is_never_retried() {
    let proxy = FaultProxy::testbed();
    let host = host_via(Mode::Direct, &proxy);
    let posts = || proxy.count("POST", "/v1/sandboxes");
    let ours = |tag: &str| -> Vec<Value> {
        host.ok("sandbox.list", json!({"metadata": {"e2e": tag}}))["sandboxes"]
            .as_array()
            .unwrap()
            .clone()
    };

    for status in [503, 502, 500] {
        let tag = unique("create-5xx");
        proxy.fault("POST", "/v1/sandboxes", Fault::Status(status), 1);
        let before = posts();
        let (e, took) =
            timed(|| host.fails("sandbox.create", json!({"metadata": {"e2e": tag}}), "E5001"));
        assert_eq!(posts() - before, 1, "create was sent again");
        assert!(ours(&tag).is_empty());
        if status == 502 {
            assert!(e.message.contains("sandbox.list"), "{e:?}");
        }
        row(
            &format!("HTTP {status} on sandbox.create"),
            Mode::Direct,
            &code(&e),
            took,
            "1 POST (never retried), no sandbox made",
        );
    }

    // The answer is lost after the server made the sandbox: one POST, and the
    // sandbox it made is found by the create's own label and killed before
    // the error goes out, which says so.
    let tag = unique("create-lost");
    proxy.fault("POST", "/v1/sandboxes", Fault::LoseAnswer, 1);
    let before = posts();
    let (e, took) =
        timed(|| host.fails("sandbox.create", json!({"metadata": {"e2e": tag}}), "E5003"));
    assert_eq!(posts() - before, 1);
    assert!(e.message.contains("never retried"), "{e:?}");
    let orphan = e
        .message
        .split("undone: killed sandbox ")
        .nth(1)
        .and_then(|rest| rest.split([' ', ';', ')']).next())
        .unwrap_or_else(|| panic!("the orphan was not undone: {e:?}"))
        .to_string();
    assert!(ours(&tag).is_empty(), "{:?}", ours(&tag));
    assert!(epp_e2e::orphans(&[orphan], Duration::from_secs(10)).is_empty());
    row(
        "answer to sandbox.create lost (connection reset after the server answered)",
        Mode::Direct,
        &code(&e),
        took,
        "1 POST; the sandbox it made is found by the create's label and killed before the answer, which says so",
    );
    still_serving(&host);
}

#[test]
fn a_stalled_server_ends_in_e5004_after_30_s() {
    let proxy = FaultProxy::testbed();
    let host = host_via(Mode::Direct, &proxy);
    proxy.fault(
        "GET",
        "/sandboxes/stalled-",
        Fault::Stall(Duration::from_secs(45)),
        1,
    );
    let (e, took) = timed(|| {
        host.fails(
            "sandbox.get_info",
            json!({"sandbox_id": "stalled-sandbox"}),
            "E5004",
        )
    });
    assert!(
        took >= Duration::from_secs(29) && took < Duration::from_secs(36),
        "{took:?}"
    );
    assert!(e.message.contains("did not answer in time"), "{e:?}");
    assert_eq!(
        proxy.count("GET", "/sandboxes/stalled-"),
        1,
        "a timeout is not retried"
    );
    row(
        "server stalls 45 s on sandbox.get_info",
        Mode::Direct,
        &code(&e),
        took,
        "read timeout 30 s (first byte), not retried",
    );
    let (_, took) = timed(|| still_serving(&host));
    assert!(took < Duration::from_secs(5));
}

#[test]
fn malformed_json_is_e5001() {
    let proxy = FaultProxy::testbed();
    let host = host_via(Mode::Direct, &proxy);
    let id = host.create_sandbox();
    for (path, body, method, params) in [
        (
            format!("/sandboxes/{id}"),
            r#"{"id": "x", "status": {"#,
            "sandbox.get_info",
            json!({"sandbox_id": id}),
        ),
        (
            "/v1/sandboxes?".to_string(),
            r#"{"items": 5}"#,
            "sandbox.list",
            json!({}),
        ),
        (
            format!("/sandboxes/{id}/endpoints/"),
            "[1, 2",
            "commands.run",
            json!({"sandbox_id": id, "cmd": "true"}),
        ),
    ] {
        // A fresh host: nothing memoised, so the endpoint is asked for.
        let fresh = host_via(Mode::Direct, &proxy);
        proxy.fault("GET", &path, Fault::Body(200, body.to_string()), 1);
        let (e, took) = timed(|| fresh.fails(method, params.clone(), "E5001"));
        assert!(e.message.contains("answer"), "{e:?}");
        row(
            &format!("malformed JSON answer to {method}"),
            Mode::Direct,
            &code(&e),
            took,
            "not retried (a 200 is an answer); message says the answer is not what OpenSandbox sends",
        );
        assert_eq!(sh(&fresh, &id, "echo fine"), "fine\n");
    }
    still_serving(&host);
}

#[test]
fn reset_during_a_command_stream() {
    let proxy = FaultProxy::testbed();
    let host = host_via(Mode::Proxy, &proxy);
    let id = host.create_sandbox();
    // After the stream's head and ~1 KiB of events (init, a few lines), RST.
    proxy.fault("POST", "44772/command", Fault::ResetAfter(1024), 1);
    let began = Instant::now();
    let req = host.send(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "for i in $(seq 80); do echo line $i; sleep 0.1; done", "stream": true}),
    );
    let e = err(host.wait(&req, Duration::from_secs(60)), "a reset stream");
    let took = began.elapsed();
    assert!(matches!(e.epp.as_str(), "E5001" | "E5003"), "{e:?}");
    assert!(e.message.contains(&id), "{e:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // The host stopped the command it could no longer follow.
    let started = host
        .notes_for("commands.started", &req)
        .first()
        .map(|(_, n)| n["params"]["command_id"].as_str().unwrap().to_string())
        .expect("commands.started before the reset");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = host.ok(
            "commands.status",
            json!({"sandbox_id": id, "command_id": started}),
        );
        if status["running"] == false {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the command kept running: {status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    row(
        "connection reset during a commands.run stream",
        Mode::Proxy,
        &code(&e),
        took,
        "not retried; the host killed the command (commands.status: not running)",
    );
    assert_eq!(sh(&host, &id, "echo next"), "next\n");
}

#[test]
fn a_truncated_download_is_an_error_not_a_short_file() {
    let proxy = FaultProxy::testbed();
    let host = host_via(Mode::Proxy, &proxy);
    let id = host.create_sandbox();
    let path = format!("{}/big.bin", workdir(&host, &id));
    let content = "0123456789abcdef".repeat(128 << 10); // 2 MiB
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": path, "content": content}),
    );
    proxy.fault(
        "GET",
        "/files/download",
        Fault::TruncateAnswer(256 << 10),
        1,
    );
    let (e, took) = timed(|| {
        err(
            host.call("files.read", json!({"sandbox_id": id, "path": path})),
            "a cut download",
        )
    });
    assert!(matches!(e.epp.as_str(), "E5001" | "E5003"), "{e:?}");
    assert!(e.message.contains("retry"), "{e:?}");
    row(
        "download body cut at 256 KiB of 2 MiB (files.read)",
        Mode::Proxy,
        &code(&e),
        took,
        "no partial content returned; the next read returns all 2 MiB",
    );
    let read = host.ok("files.read", json!({"sandbox_id": id, "path": path}));
    assert_eq!(read["size"], content.len());
    assert!(read["content"] == content.as_str());
}

#[test]
fn a_truncated_upload_writes_nothing() {
    let proxy = FaultProxy::testbed();
    let host = host_via(Mode::Proxy, &proxy);
    let id = host.create_sandbox();
    let dir = workdir(&host, &id);
    let old = format!("{dir}/keep.txt");
    let new = format!("{dir}/new.txt");
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": old, "content": "version 1\n"}),
    );
    let big = "y".repeat(2 << 20);
    let mut took_max = Duration::ZERO;
    let mut codes = Vec::new();
    for path in [&old, &new] {
        proxy.fault(
            "POST",
            "/files/upload",
            Fault::TruncateRequest(256 << 10),
            1,
        );
        let (e, took) = timed(|| {
            err(
                host.call(
                    "files.write",
                    json!({"sandbox_id": id, "path": path, "content": big}),
                ),
                "a cut upload",
            )
        });
        assert!(matches!(e.epp.as_str(), "E5001" | "E5003"), "{e:?}");
        took_max = took_max.max(took);
        codes.push(code(&e));
    }
    // The old file is untouched, the new one does not exist, and no temporary
    // upload file is left once execd has noticed the broken upload.
    let read = host.ok("files.read", json!({"sandbox_id": id, "path": old}));
    assert_eq!(read["content"], "version 1\n");
    host.fails(
        "files.get_info",
        json!({"sandbox_id": id, "path": new}),
        "E4004",
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let leftovers = loop {
        let list = host.ok("files.list", json!({"sandbox_id": id, "path": dir}));
        let temp: Vec<String> = list["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .filter(|n| n.contains("execd-upload"))
            .collect();
        if temp.is_empty() || Instant::now() >= deadline {
            break temp;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        leftovers.is_empty(),
        "temporary upload files left: {leftovers:?}"
    );
    row(
        "upload body cut at 256 KiB of 2 MiB (files.write, existing and new file)",
        Mode::Proxy,
        &codes.join(", "),
        took_max,
        "old content kept, new path absent (files.get_info E4004), no temporary file left",
    );
    assert_eq!(sh(&host, &id, "echo next"), "next\n");
}

fn deleted_while_streaming(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let req = host.send(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "for i in $(seq 200); do echo $i; sleep 0.1; done", "stream": true}),
    );
    host.first_note("commands.output", &req, Duration::from_secs(20))
        .expect("output before the kill");
    let began = Instant::now();
    host.ok("sandbox.kill", json!({"sandbox_id": id}));
    let e = err(
        host.wait(&req, Duration::from_secs(60)),
        "a stream in a deleted sandbox",
    );
    let took = began.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(e.message.contains(&id), "{e:?}");
    assert!(
        e.epp == "E4004" || (e.epp == "E4009" && e.message.contains("stopped while")),
        "{e:?}"
    );
    row(
        "sandbox killed while a command streams",
        mode,
        &code(&e),
        took,
        "the stream ends with the sandbox named as deleted; no process left",
    );
    host.fails("sandbox.get_info", json!({"sandbox_id": id}), "E4004");
    assert!(orphans(&[id], Duration::from_secs(10)).is_empty());
    still_serving(&host);
}
both_modes!(
    sandbox_deleted_while_a_command_streams,
    super::deleted_while_streaming
);

fn execd_killed(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let pid = epp_e2e::execd_pid(&host, &id);
    let req = host.send(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "for i in $(seq 200); do echo $i; sleep 0.1; done", "stream": true}),
    );
    host.first_note("commands.output", &req, Duration::from_secs(20))
        .expect("output before execd dies");
    let began = Instant::now();
    // SAFETY: SIGKILL to a testbed process of this user.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let e = err(
        host.wait(&req, Duration::from_secs(60)),
        "a stream whose execd died",
    );
    let took = began.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    // The sandbox's main process died with execd: the sandbox stopped (E4009,
    // as for any stream whose sandbox stops under it), or, before the server
    // saw it, the connection was lost.
    assert!(
        matches!(e.epp.as_str(), "E4009" | "E5001" | "E5003"),
        "{e:?}"
    );
    assert!(e.message.contains(&id), "{e:?}");
    row(
        "execd killed (SIGKILL) mid-stream",
        mode,
        &code(&e),
        took,
        "the message names the sandbox and its state",
    );
    still_serving(&host);
    host.ok("sandbox.kill", json!({"sandbox_id": id}));
    assert!(orphans(&[id], Duration::from_secs(10)).is_empty());
}
both_modes!(execd_killed_mid_stream, super::execd_killed);

/// The server goes away between create and run and comes back within a second:
/// a host that has not seen the sandbox yet must resolve its endpoint, and the
/// read retries bridge the gap.
#[test]
fn a_short_restart_between_create_and_run_is_bridged() {
    let proxy = FaultProxy::testbed();
    let creator = host_via(Mode::Direct, &proxy);
    let id = creator.create_sandbox();
    let runner = host_via(Mode::Direct, &proxy);
    proxy.down();
    let began = Instant::now();
    let req = runner.send(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "echo after restart"}),
    );
    std::thread::sleep(Duration::from_millis(900));
    proxy.up();
    let out = runner
        .wait(&req, Duration::from_secs(30))
        .expect("the run after the restart");
    let took = began.elapsed();
    assert_eq!(out["stdout"], "after restart\n");
    row(
        "server unreachable for 0.9 s between create and run (fresh host)",
        Mode::Direct,
        "ok",
        took,
        "the endpoint lookup was retried until the server answered",
    );
}

/// A real restart of the testbed between create and run: the testbed keeps its
/// sandboxes in memory, so they are gone afterwards (Docker would keep them);
/// the run says so, the host goes on, and nothing is left running.
fn real_restart(mode: Mode) {
    let mut tb = PrivateTestbed::start();
    let host = HostBuilder::new(mode)
        .env("ABX_OPENSANDBOX_BASE_URL", &tb.url)
        .env("ABX_OPENSANDBOX_API_KEY", &tb.api_key)
        .spawn();
    let old = host.ok(
        "sandbox.create",
        json!({"metadata": {"e2e": unique("restart")}}),
    )["sandbox_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sh(&host, &old, "echo before"), "before\n");
    tb.stop();
    let (e, took_down) = timed(|| {
        err(
            host.call("commands.run", json!({"sandbox_id": old, "cmd": "true"})),
            "run while down",
        )
    });
    // Direct mode: execd died with the server; proxy mode: the server is gone.
    assert_eq!(e.epp, "E5003", "{e:?}");
    tb.restart();
    let (e, took) = timed(|| {
        host.fails(
            "commands.run",
            json!({"sandbox_id": old, "cmd": "true"}),
            "E4004",
        )
    });
    assert!(e.message.contains(&old), "{e:?}");
    code(&e);
    row(
        "testbed restarted between create and run",
        mode,
        &format!(
            "E5003 while down ({:.2} s), then E4004",
            took_down.as_secs_f64()
        ),
        took,
        "the testbed forgets sandboxes on restart; message names the sandbox; a new create works",
    );
    let fresh = host.ok(
        "sandbox.create",
        json!({"metadata": {"e2e": unique("restart")}}),
    )["sandbox_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sh(&host, &fresh, "echo after"), "after\n");
    host.ok("sandbox.kill", json!({"sandbox_id": fresh}));
    drop(host);
    tb.stop();
    assert!(orphans(&[old, fresh], Duration::from_secs(10)).is_empty());
}
both_modes!(real_restart_between_create_and_run, super::real_restart);

#[test]
fn create_gives_up_at_ready_timeout_and_deletes_the_sandbox() {
    // Server-proxy mode: execd's /ping passes the proxy, which answers 503 to
    // every one of them, so the sandbox runs but never answers.
    let proxy = FaultProxy::testbed();
    let host = host_via(Mode::Proxy, &proxy);
    let tag = unique("not-ready");
    proxy.fault("GET", "/ping", Fault::Status(503), 100_000);
    let (e, took) = timed(|| {
        host.fails(
            "sandbox.create",
            json!({"metadata": {"e2e": tag}, "ready_timeout": 3}),
            "E5004",
        )
    });
    assert!(proxy.count("GET", "/ping") >= 2, "execd was not polled");
    assert!(
        e.message.contains("not ready within 3 s")
            && e.message
                .contains("last seen: state Running, execd does not answer /ping")
            && e.message.contains("was deleted")
            && e.message.contains("ready_timeout"),
        "{e:?}"
    );
    assert!(
        took < Duration::from_secs(20),
        "create took {took:?} with ready_timeout 3"
    );
    let left = host.ok("sandbox.list", json!({"metadata": {"e2e": tag}}));
    assert_eq!(
        left["sandboxes"],
        json!([]),
        "the half-made sandbox is left"
    );
    row(
        "execd never answers /ping (503), `ready_timeout: 3`",
        Mode::Proxy,
        &code(&e),
        took,
        "message names the last state and the setting; the sandbox was deleted",
    );

    // Once execd answers again, create works through the same host.
    proxy.heal();
    let made = host.ok("sandbox.create", json!({"metadata": {"e2e": tag}}));
    host.ok("sandbox.kill", json!({"sandbox_id": made["sandbox_id"]}));
    still_serving(&host);
}

#[test]
fn a_quota_refusal_is_not_a_credentials_error() {
    let proxy = FaultProxy::testbed();
    let host = host_via(Mode::Direct, &proxy);
    // What opensandbox-server on Kubernetes answers when the namespace quota is used up.
    let quota = r#"{"code":"KUBERNETES::QUOTA_EXCEEDED","message":"Namespace ResourceQuota exceeded: pods \"sbx\" is forbidden: exceeded quota: sandboxes, requested: pods=1, used: pods=10, limited: pods=10"}"#;
    proxy.fault(
        "POST",
        "/v1/sandboxes",
        Fault::Body(403, quota.to_string()),
        1,
    );
    let tag = unique("quota");
    let (e, took) =
        timed(|| host.fails("sandbox.create", json!({"metadata": {"e2e": tag}}), "E4009"));
    assert_eq!(e.data["http_status"], 403, "{e:?}");
    assert_eq!(
        e.data["upstream_code"], "KUBERNETES::QUOTA_EXCEEDED",
        "{e:?}"
    );
    assert!(
        e.message.contains("limited: pods=10") && e.message.contains("quota"),
        "{e:?}"
    );
    assert!(!e.message.contains("ABX_OPENSANDBOX_API_KEY"), "{e:?}");
    row(
        "HTTP 403 KUBERNETES::QUOTA_EXCEEDED on sandbox.create",
        Mode::Direct,
        &code(&e),
        took,
        "quota, not credentials: the server's message, what to do",
    );
    // Credentials are still E2002, with a 401 or a 403 that says so.
    for (status, body) in [
        (
            401,
            r#"{"code":"INVALID_API_KEY","message":"Authentication credentials are invalid."}"#,
        ),
        (
            403,
            r#"{"code":"INVALID_API_KEY","message":"Authentication credentials are invalid."}"#,
        ),
        (403, "Forbidden"),
    ] {
        proxy.fault(
            "GET",
            "/v1/sandboxes",
            Fault::Body(status, body.to_string()),
            1,
        );
        let e = host.fails("sandbox.list", json!({}), "E2002");
        assert!(e.message.contains("ABX_OPENSANDBOX_API_KEY"), "{e:?}");
    }
    still_serving(&host);
}
