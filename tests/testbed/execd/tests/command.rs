//! Black-box tests of `/command`, status, logs and interrupt against the real wire format.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http::StatusCode;
use http_body_util::BodyExt;
use serde_json::json;

#[tokio::test]
async fn framing_is_bare_json_with_blank_line_and_lazy_sse_headers() {
    let x = Execd::start();
    let (r, events) = run(x.port, json!({"command": "echo hi; echo oops >&2"})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    assert_eq!(r.header("cache-control").as_deref(), Some("no-cache"));
    assert_eq!(r.header("x-accel-buffering").as_deref(), Some("no"));
    assert_eq!(r.header("transfer-encoding").as_deref(), Some("chunked"));
    // Every frame is one compact JSON object followed by "\n\n"; no "data:" lines.
    let raw = r.text();
    assert!(raw.ends_with("}\n\n"), "{raw:?}");
    for frame in raw.strip_suffix("\n\n").unwrap().split("\n\n") {
        assert!(
            frame.starts_with("{\"type\":\"") && frame.ends_with('}'),
            "{frame:?}"
        );
        assert!(!frame.contains('\n'));
    }
    assert_eq!(events[0]["type"], "init");
    let id = events[0]["text"].as_str().unwrap();
    assert_eq!(id.len(), 32);
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(
        events[1],
        json!({"type": "ping", "text": "pong", "timestamp": events[1]["timestamp"]})
    );
    for e in &events {
        assert!(e["timestamp"].as_i64().unwrap() > 1_600_000_000_000, "{e}");
    }
    assert_eq!(texts(&events, "stdout"), ["hi\n"]);
    assert_eq!(texts(&events, "stderr"), ["oops\n"]);
    assert_eq!(last(&events)["type"], "execution_complete");
}

#[tokio::test]
async fn events_keep_line_terminators_like_execd_1_1_1() {
    let x = Execd::start();
    // The output exactly, one event per line with its terminator; no newline is added.
    let (_, ev) = run(x.port, json!({"command": "printf abc"})).await;
    assert_eq!(texts(&ev, "stdout"), ["abc"]);

    let (_, ev) = run(x.port, json!({"command": "printf 'a\\r50%%\\r100%%\\n'"})).await;
    assert_eq!(texts(&ev, "stdout"), ["a\r", "50%\r", "100%\n"]);

    let (_, ev) = run(
        x.port,
        json!({"command": "printf 'one\\r\\n\\ntwo\\n\\n\\nthree'; printf 'e\\r\\n' >&2"}),
    )
    .await;
    // CRLF arrives as two events, blank lines as "\n", the unterminated tail at the end.
    assert_eq!(
        texts(&ev, "stdout"),
        ["one\r", "\n", "\n", "two\n", "\n", "\n", "three"]
    );
    assert_eq!(texts(&ev, "stdout").concat(), "one\r\n\ntwo\n\n\nthree");
    assert_eq!(texts(&ev, "stderr"), ["e\r", "\n"]);

    // A line written in two parts across tail polls is still one event.
    let (_, ev) = run(
        x.port,
        json!({"command": "printf 'left-'; sleep 0.35; printf 'right\\n'"}),
    )
    .await;
    assert_eq!(texts(&ev, "stdout"), ["left-right\n"]);
}

#[tokio::test]
async fn legacy_lines_model_execd_1_1_0_for_fallback_tests() {
    let x = Execd::start_with(&[], &[("EXECD_STANDIN_LEGACY_LINES", "1")]);
    let (_, ev) = run(x.port, json!({"command": "printf 'a\\r50%%\\r100%%\\n'"})).await;
    assert_eq!(texts(&ev, "stdout"), ["a", "50%", "100%"]);

    let (_, ev) = run(
        x.port,
        json!({"command": "printf 'one\\r\\n\\ntwo\\n\\n\\nthree'"}),
    )
    .await;
    // CRLF counts once, blank lines arrive as "\n", the unterminated tail is flushed.
    assert_eq!(
        texts(&ev, "stdout"),
        ["one", "\n", "two", "\n", "\n", "three"]
    );
    let (_, ev) = run(x.port, json!({"command": "echo abc"})).await;
    assert_eq!(texts(&ev, "stdout"), ["abc"]);
}

#[tokio::test]
async fn exit_codes_zero_nonzero_and_signal() {
    let x = Execd::start();
    let (_, ev) = run(x.port, json!({"command": "true"})).await;
    assert_eq!(last(&ev)["type"], "execution_complete");

    let (_, ev) = run(x.port, json!({"command": "echo before; exit 3"})).await;
    assert_eq!(texts(&ev, "stdout"), ["before\n"]);
    assert_eq!(
        last(&ev)["error"],
        json!({"ename": "CommandExecError", "evalue": "3", "traceback": ["exit status 3"]})
    );
    assert!(ev.iter().all(|e| e["type"] != "execution_complete"));

    let (_, ev) = run(x.port, json!({"command": "kill -KILL $$"})).await;
    assert_eq!(last(&ev)["error"]["evalue"], "-1");
    assert_eq!(last(&ev)["error"]["traceback"], json!(["signal: killed"]));
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let x = Execd::start();
    let marker = x.path("survivor");
    let start = Instant::now();
    let (_, ev) = run(
        x.port,
        json!({
            "command": format!("(sleep 2; touch {}) & sleep 30", marker.display()),
            "timeout": 500
        }),
    )
    .await;
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(
        last(&ev)["error"],
        json!({"ename": "CommandExecError", "evalue": "-1", "traceback": ["signal: killed"]})
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        !marker.exists(),
        "a child of the timed-out command survived"
    );
}

#[tokio::test]
async fn request_errors_are_plain_json_before_the_stream_starts() {
    let x = Execd::start();
    let (r, _) = run(
        x.port,
        json!({"command": "ls", "cwd": "/definitely/not/here"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(
        r.json(),
        json!({
            "code": "INVALID_REQUEST_BODY",
            "message": "invalid request, validation error working directory does not exist: /definitely/not/here: stat /definitely/not/here: no such file or directory"
        })
    );

    std::fs::write(x.path("plain"), "x").unwrap();
    let (r, _) = run(x.port, json!({"command": "ls", "cwd": x.path("plain")})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("is not a directory")
    );

    let (r, _) = run(x.port, json!({"command": "ls", "timeout": -1})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text().contains("'TimeoutMs' failed on the 'gte' tag"));

    let (r, _) = run(x.port, json!({"cwd": "/"})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json(),
        json!({
            "code": "INVALID_REQUEST_BODY",
            "message": "invalid request, validation error command or argv is required"
        })
    );

    let (r, _) = run(x.port, json!({"command": "ls", "gid": 0})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text().contains("uid is required when gid is provided"));

    // cwd may use the request's envs (execd 1.1.0, #1611); undefined names are errors.
    let (r, ev) = run(
        x.port,
        json!({"command": "pwd", "cwd": "$MYDIR_X", "envs": {"MYDIR_X": "/"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(texts(&ev, "stdout"), ["/\n"]);
    let (r, _) = run(x.port, json!({"command": "ls", "cwd": "$NOT_SET_X"})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.text()
            .contains("undefined environment variables: NOT_SET_X")
    );

    let r = call(x.port, "POST", "/command", "not json").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.text()
            .contains("error parsing request, MAYBE invalid body format")
    );
}

#[tokio::test]
async fn argv_is_executed_without_a_shell() {
    let x = Execd::start();
    // Through the in-process proxy path, exactly as the SDKs send it.
    let r = post_json(
        x.port,
        "/proxy/44772/command",
        json!({"argv": ["printf", "%s|", "a b", "$HOME"], "background": false}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    let ev = parse_events(&r.body);
    assert_eq!(ev[0]["type"], "init");
    assert_eq!(ev[0]["text"].as_str().unwrap().len(), 32);
    assert_eq!(ev[1]["type"], "ping");
    assert_eq!(texts(&ev, "stdout"), ["a b|$HOME|"]);
    assert_eq!(last(&ev)["type"], "execution_complete");
    let id = ev[0]["text"].as_str().unwrap();
    let st = get(x.port, &format!("/command/status/{id}")).await.json();
    assert_eq!(st["content"], "printf '%s|' 'a b' '$HOME'");
    assert_eq!(st["exit_code"], 0);

    // Globs, quotes and redirections are literal arguments too.
    let (_, ev) = run(
        x.port,
        json!({"argv": ["echo", "*", "'q'", ">", "/dev/null"]}),
    )
    .await;
    assert_eq!(texts(&ev, "stdout"), ["* 'q' > /dev/null\n"]);

    // Same exit-code, stderr, cwd, envs and timeout semantics as `command`.
    let (_, ev) = run(x.port, json!({"argv": ["sh", "-c", "echo e >&2; exit 4"]})).await;
    assert_eq!(texts(&ev, "stderr"), ["e\n"]);
    assert_eq!(
        last(&ev)["error"],
        json!({"ename": "CommandExecError", "evalue": "4", "traceback": ["exit status 4"]})
    );
    let sub = x.path("sub");
    std::fs::create_dir(&sub).unwrap();
    let (_, ev) = run(
        x.port,
        json!({"argv": ["sh", "-c", "pwd; echo \"$REQ\""], "cwd": sub, "envs": {"REQ": "r v"}}),
    )
    .await;
    assert_eq!(
        texts(&ev, "stdout"),
        [format!("{}\n", sub.display()), "r v\n".into()]
    );
    let start = Instant::now();
    let (_, ev) = run(x.port, json!({"argv": ["sleep", "30"], "timeout": 300})).await;
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(last(&ev)["error"]["traceback"], json!(["signal: killed"]));

    // Bare names are searched in the child's PATH (request envs included); names with a
    // slash are taken relative to cwd.
    let bin = x.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let tool = bin.join("tool");
    std::fs::write(&tool, "#!/bin/sh\necho \"tool:$0:$1\"\n").unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let (_, ev) = run(
        x.port,
        json!({"argv": ["tool", "x y"], "envs": {"PATH": path}}),
    )
    .await;
    assert_eq!(
        texts(&ev, "stdout"),
        [format!("tool:{}:x y\n", tool.display())]
    );
    let (_, ev) = run(x.port, json!({"argv": ["./tool", "z"], "cwd": bin})).await;
    assert_eq!(texts(&ev, "stdout"), ["tool:./tool:z\n"]);
}

#[tokio::test]
async fn argv_background_status_logs_and_interrupt() {
    let x = Execd::start();
    let (r, ev) = run(
        x.port,
        json!({"argv": ["printf", "%s\n", "x y", "$HOME"], "background": true}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(
        (ev[0]["type"].as_str(), ev[1]["type"].as_str()),
        (Some("init"), Some("execution_complete"))
    );
    let id = ev[0]["text"].as_str().unwrap().to_string();
    eventually(async || {
        get(x.port, &format!("/command/status/{id}")).await.json()["exit_code"] == 0
    })
    .await;
    let r = get(x.port, &format!("/command/{id}/logs?cursor=0")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.text(), "x y\n$HOME\n");
    assert_eq!(
        r.header("execd-commands-tail-cursor").as_deref(),
        Some("10")
    );

    let (_, ev) = run(
        x.port,
        json!({"argv": ["sleep", "30"], "background": true, "cwd": x.dir()}),
    )
    .await;
    let id = ev[0]["text"].as_str().unwrap().to_string();
    let st = get(x.port, &format!("/command/status/{id}")).await.json();
    assert_eq!(st["running"], true);
    assert_eq!(st["content"], "sleep 30");
    let r = call(x.port, "DELETE", &format!("/command?id={id}"), Bytes::new()).await;
    assert_eq!(r.status, StatusCode::OK);
    eventually(async || {
        get(x.port, &format!("/command/status/{id}")).await.json()["running"] == false
    })
    .await;
    let st = get(x.port, &format!("/command/status/{id}")).await.json();
    assert_eq!(
        (st["exit_code"].clone(), st["error"].clone()),
        (json!(-1), json!("signal: terminated"))
    );
}

#[tokio::test]
async fn argv_validation_errors() {
    let x = Execd::start();
    let cases = [
        (
            json!({"command": "echo hi", "argv": ["echo", "hi"]}),
            "command and argv are mutually exclusive",
        ),
        (json!({"argv": []}), "argv must not be empty"),
        (
            json!({"argv": [], "background": true}),
            "argv must not be empty",
        ),
        (json!({"argv": ["", "x"]}), "argv[0] must not be empty"),
        (
            json!({"argv": ["echo", "a\u{0}b"]}),
            "argv[1] must not contain NUL",
        ),
        (json!({"argv": null}), "command or argv is required"),
    ];
    for (body, msg) in cases {
        let (r, _) = run(x.port, body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("application/json; charset=utf-8")
        );
        assert_eq!(
            r.json(),
            json!({
                "code": "INVALID_REQUEST_BODY",
                "message": format!("invalid request, validation error {msg}")
            }),
            "{body}"
        );
    }
    let (r, _) = run(x.port, json!({"argv": "echo hi"})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.text()
            .contains("error parsing request, MAYBE invalid body format")
    );
}

#[tokio::test]
async fn argv_missing_program_is_a_start_failure() {
    let x = Execd::start();
    let (r, ev) = run(x.port, json!({"argv": ["nope"]})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(ev[0]["type"], "init");
    let msg = r#"exec: "nope": executable file not found in $PATH"#;
    assert_eq!(
        last(&ev)["error"],
        json!({"ename": "CommandExecError", "evalue": msg, "traceback": [msg]})
    );
    assert!(ev.iter().all(|e| e["type"] != "execution_complete"));
    assert!(texts(&ev, "stdout").is_empty());

    // The lookup uses the child's PATH, not the stand-in's.
    let (_, ev) = run(
        x.port,
        json!({"argv": ["printf", "x"], "envs": {"PATH": "/definitely/not/here"}}),
    )
    .await;
    assert_eq!(
        last(&ev)["error"]["evalue"],
        r#"exec: "printf": executable file not found in $PATH"#
    );

    // A path that does not exist fails in exec itself.
    let (_, ev) = run(x.port, json!({"argv": ["./nope", "a"]})).await;
    assert_eq!(
        last(&ev)["error"]["evalue"],
        "fork/exec ./nope: no such file or directory"
    );

    // Background: init, then execd's bare error object; the status records the failure.
    let (r, ev) = run(x.port, json!({"argv": ["nope"], "background": true})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(ev[0]["type"], "init");
    assert_eq!(
        last(&ev),
        &json!({
            "code": "RUNTIME_ERROR",
            "message": format!("error running commands failed to start commands: {msg}")
        })
    );
    let id = ev[0]["text"].as_str().unwrap();
    let st = get(x.port, &format!("/command/status/{id}")).await.json();
    assert_eq!(
        (
            st["running"].clone(),
            st["exit_code"].clone(),
            st["error"].clone()
        ),
        (json!(false), json!(255), json!(msg))
    );
}

#[tokio::test]
async fn cwd_envs_and_envs_file() {
    let envs_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        envs_file.path(),
        "# comment\nFROM_FILE=file-$HOME\nBOTH=file\n",
    )
    .unwrap();
    let x = Execd::start_with(&[], &[("EXECD_ENVS", envs_file.path().to_str().unwrap())]);
    let sub = x.path("sub");
    std::fs::create_dir(&sub).unwrap();
    let (_, ev) = run(
        x.port,
        json!({
            "command": "pwd; echo $FROM_FILE; echo $BOTH; echo $REQ",
            "cwd": "~/../sub",
            "envs": {"BOTH": "request", "REQ": "r"}
        }),
    )
    .await;
    let home = x.path("home");
    assert_eq!(
        texts(&ev, "stdout"),
        [
            format!("{}\n", sub.display()),
            format!("file-{}\n", home.display()),
            "request\n".into(),
            "r\n".into()
        ]
    );
    // Default cwd is the stand-in's own working directory (the sandbox directory).
    let (_, ev) = run(x.port, json!({"command": "pwd"})).await;
    assert_eq!(
        texts(&ev, "stdout"),
        [format!("{}\n", x.dir().canonicalize().unwrap().display())]
    );
}

#[tokio::test]
async fn pings_every_three_seconds_and_no_delay_after_the_last_event() {
    let x = Execd::start();
    let start = Instant::now();
    let resp = send(
        x.port,
        req("POST", "/command", r#"{"command":"sleep 3.5; echo done"}"#),
    )
    .await;
    let mut body = resp.into_body();
    let mut raw = Vec::new();
    let mut done_at = None;
    while let Some(f) = body.frame().await {
        raw.extend_from_slice(f.unwrap().data_ref().unwrap());
        if done_at.is_none() && String::from_utf8_lossy(&raw).contains("execution_complete") {
            done_at = Some(Instant::now());
        }
    }
    let ended = Instant::now();
    let ev = parse_events(&raw);
    let pings = ev.iter().filter(|e| e["type"] == "ping").count();
    assert_eq!(pings, 2, "{ev:?}");
    assert!(start.elapsed() >= Duration::from_millis(3500));
    // execd 1.1.1 (#1825) ends the stream with the last event, even when
    // EXECD_API_GRACE_SHUTDOWN (the ≤ 1.1.0 delay) is set.
    let lingered = ended - done_at.unwrap();
    assert!(
        lingered < Duration::from_millis(300),
        "closed {lingered:?} after the last event"
    );

    // A background start is acknowledged and the stream ends at once.
    let x = Execd::start_with(&[], &[("EXECD_API_GRACE_SHUTDOWN", "2s")]);
    let start = Instant::now();
    let (_, ev) = run(x.port, json!({"command": "sleep 5", "background": true})).await;
    assert_eq!(last(&ev)["type"], "execution_complete");
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
}

/// Whether process `pid` exists (and is not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Waits until `path` holds a pid, and returns it.
async fn pid_in(path: &std::path::Path) -> i32 {
    let mut pid = 0;
    eventually(async || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        pid > 0
    })
    .await;
    pid
}

#[tokio::test]
async fn background_children_outlive_their_finished_script() {
    let x = Execd::start();
    let pidfile = x.path("child.pid");
    let (_, ev) = run(
        x.port,
        json!({
            "command": format!("sleep 120 & echo $! > {}", pidfile.display()),
            "background": true
        }),
    )
    .await;
    let id = ev[0]["text"].as_str().unwrap().to_string();
    let child = pid_in(&pidfile).await;
    eventually(async || {
        get(x.port, &format!("/command/status/{id}")).await.json()["running"] == false
    })
    .await;
    let st = get(x.port, &format!("/command/status/{id}")).await.json();
    assert_eq!(st["exit_code"], 0, "{st}");
    // execd 1.1.1 (#2074): the script ended, its child keeps running.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        alive(child),
        "the background child {child} died with its script"
    );
    // Interrupting the finished command is refused; the child is still there to signal.
    let r = call(x.port, "DELETE", &format!("/command?id={id}"), Bytes::new()).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(alive(child));
    unsafe { libc::kill(child, libc::SIGKILL) };

    // `nohup ./server &` too.
    let pidfile = x.path("nohup.pid");
    std::fs::write(x.path("server"), "#!/bin/sh\nexec sleep 120\n").unwrap();
    std::fs::set_permissions(
        x.path("server"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    run(
        x.port,
        json!({
            "command": format!("nohup ./server >/dev/null 2>&1 & echo $! > {}", pidfile.display()),
            "background": true
        }),
    )
    .await;
    let server = pid_in(&pidfile).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(alive(server), "nohup ./server & died with its script");
    unsafe { libc::kill(server, libc::SIGKILL) };
}

#[tokio::test]
async fn background_timeout_and_interrupt_still_kill_the_whole_group() {
    let x = Execd::start();
    for (name, timeout) in [("timeout", Some(500)), ("interrupt", None)] {
        let pidfile = x.path(&format!("{name}.pid"));
        let mut body = json!({
            "command": format!("sleep 120 & echo $! > {}; sleep 120", pidfile.display()),
            "background": true
        });
        if let Some(t) = timeout {
            body["timeout"] = json!(t);
        }
        let (_, ev) = run(x.port, body).await;
        let id = ev[0]["text"].as_str().unwrap().to_string();
        let child = pid_in(&pidfile).await;
        if timeout.is_none() {
            let r = call(x.port, "DELETE", &format!("/command?id={id}"), Bytes::new()).await;
            assert_eq!(r.status, StatusCode::OK);
        }
        eventually(async || !alive(child)).await;
        let st = get(x.port, &format!("/command/status/{id}")).await.json();
        assert_eq!(st["running"], false, "{name}: {st}");
        assert_eq!(st["exit_code"], -1, "{name}: {st}");
    }
}

#[tokio::test]
async fn background_status_logs_and_interrupt() {
    let x = Execd::start();
    let (r, ev) = run(
        x.port,
        json!({"command": "echo first; echo err >&2; sleep 30; echo never", "background": true}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[0]["type"], "init");
    assert_eq!(ev[1]["type"], "execution_complete");
    let id = ev[0]["text"].as_str().unwrap().to_string();

    let st = get(x.port, &format!("/command/status/{id}")).await.json();
    assert_eq!(st["id"], id.as_str());
    assert_eq!(st["running"], true);
    assert_eq!(
        st["content"],
        "echo first; echo err >&2; sleep 30; echo never"
    );
    assert!(st["started_at"].as_str().unwrap().ends_with('Z'));
    assert!(st.get("exit_code").is_none() && st.get("finished_at").is_none());

    // Logs: byte-offset cursor, combined stdout+stderr.
    let mut log = String::new();
    let mut cursor = 0i64;
    eventually(async || {
        let r = get(x.port, &format!("/command/{id}/logs?cursor={cursor}")).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("text/plain; charset=utf-8")
        );
        cursor = r
            .header("execd-commands-tail-cursor")
            .unwrap()
            .parse()
            .unwrap();
        log.push_str(&r.text());
        log == "first\nerr\n"
    })
    .await;
    assert_eq!(cursor, 10);
    let r = get(x.port, &format!("/command/{id}/logs?cursor=6")).await;
    assert_eq!(r.text(), "err\n");
    assert_eq!(
        r.header("execd-commands-tail-cursor").as_deref(),
        Some("10")
    );
    let r = get(x.port, &format!("/command/{id}/logs")).await;
    assert_eq!(r.text(), "first\nerr\n");
    // A cursor past the end is clamped to the end (execd 1.1.0, #1708).
    let r = get(x.port, &format!("/command/{id}/logs?cursor=1000")).await;
    assert_eq!(r.text(), "");
    assert_eq!(
        r.header("execd-commands-tail-cursor").as_deref(),
        Some("10")
    );

    let r = call(x.port, "DELETE", &format!("/command?id={id}"), Bytes::new()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.is_empty());
    eventually(async || {
        get(x.port, &format!("/command/status/{id}")).await.json()["running"] == false
    })
    .await;
    let st = get(x.port, &format!("/command/status/{id}")).await.json();
    assert_eq!(st["exit_code"], -1);
    assert_eq!(st["error"], "signal: terminated");
    assert!(st["finished_at"].is_string());

    // Interrupting a finished command is a 500, unknown ids too; missing id is a 400.
    let r = call(x.port, "DELETE", &format!("/command?id={id}"), Bytes::new()).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(r.json()["code"], "RUNTIME_ERROR");
    let r = call(x.port, "DELETE", "/command?id=nope", Bytes::new()).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    let r = call(x.port, "DELETE", "/command", Bytes::new()).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["code"], "MISSING_QUERY");

    let r = get(x.port, "/command/status/unknown").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["code"], "INVALID_REQUEST_BODY");
    let r = get(x.port, "/command/unknown/logs").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn background_exit_code_in_status_and_logs_only_for_background() {
    let x = Execd::start();
    let (_, ev) = run(x.port, json!({"command": "exit 5", "background": true})).await;
    let id = ev[0]["text"].as_str().unwrap().to_string();
    eventually(async || {
        get(x.port, &format!("/command/status/{id}")).await.json()["exit_code"] == 5
    })
    .await;
    assert_eq!(
        get(x.port, &format!("/command/status/{id}")).await.json()["error"],
        "exit status 5"
    );

    let (_, ev) = run(x.port, json!({"command": "echo fg"})).await;
    let fg = ev[0]["text"].as_str().unwrap();
    let st = get(x.port, &format!("/command/status/{fg}")).await.json();
    assert_eq!(
        (st["running"].clone(), st["exit_code"].clone()),
        (json!(false), json!(0))
    );
    let r = get(x.port, &format!("/command/{fg}/logs")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text().contains("is not running in background"));
}

#[tokio::test]
async fn interrupting_a_foreground_command_ends_its_stream() {
    let x = Execd::start();
    let resp = send(
        x.port,
        req(
            "POST",
            "/command",
            r#"{"command":"echo started; sleep 30"}"#,
        ),
    )
    .await;
    let mut body = resp.into_body();
    let mut raw = Vec::new();
    // Read up to the first stdout line, then interrupt from another connection.
    while !String::from_utf8_lossy(&raw).contains("started") {
        raw.extend_from_slice(body.frame().await.unwrap().unwrap().data_ref().unwrap());
    }
    let id = parse_events(&raw)[0]["text"].as_str().unwrap().to_string();
    let r = call(x.port, "DELETE", &format!("/command?id={id}"), Bytes::new()).await;
    assert_eq!(r.status, StatusCode::OK);
    while let Some(f) = body.frame().await {
        raw.extend_from_slice(f.unwrap().data_ref().unwrap());
    }
    let ev = parse_events(&raw);
    assert_eq!(last(&ev)["error"]["evalue"], "-1");
    assert_eq!(
        last(&ev)["error"]["traceback"],
        json!(["signal: terminated"])
    );
}

#[tokio::test]
async fn client_disconnect_does_not_kill_a_foreground_command() {
    let x = Execd::start();
    let marker = x.path("finished");
    let cmd = format!("sleep 1; touch {}", marker.display());
    let resp = send(
        x.port,
        req(
            "POST",
            "/command",
            serde_json::to_vec(&json!({"command": cmd})).unwrap(),
        ),
    )
    .await;
    drop(resp);
    let start = Instant::now();
    while !marker.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "command was killed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn access_token_guards_everything() {
    let x = Execd::start_with(&["--access-token", "s3cret"], &[]);
    for path in ["/ping", "/proxy/44772/ping", "/files/info?path=/"] {
        let r = get(x.port, path).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(
            r.json(),
            json!({"error": "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"})
        );
    }
    let mut rq = req("GET", "/ping", Bytes::new());
    rq.headers_mut()
        .insert("X-EXECD-ACCESS-TOKEN", "s3cret".parse().unwrap());
    assert_eq!(collect(send(x.port, rq).await).await.status, StatusCode::OK);
    // The environment variable works too.
    let y = Execd::start_with(&[], &[("EXECD_ACCESS_TOKEN", "envtok")]);
    assert_eq!(get(y.port, "/ping").await.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn ping_unknown_routes_and_sigterm() {
    let mut x = Execd::start();
    let r = get(x.port, "/ping").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.is_empty());
    assert_eq!(get(x.port, "/nope").await.status, StatusCode::NOT_FOUND);

    // SIGTERM takes running commands down with the stand-in.
    let (_, ev) = run(x.port, json!({"command": "sleep 60", "background": true})).await;
    let id = ev[0]["text"].as_str().unwrap().to_string();
    let output = std::env::temp_dir().join(format!("{id}.output"));
    assert!(output.exists());
    let (_, ev) = run(
        x.port,
        json!({"command": "echo $$; exec sleep 61", "background": true}),
    )
    .await;
    let id2 = ev[0]["text"].as_str().unwrap().to_string();
    let mut pid = String::new();
    eventually(async || {
        pid = get(x.port, &format!("/command/{id2}/logs"))
            .await
            .text()
            .trim()
            .to_string();
        !pid.is_empty()
    })
    .await;
    let status = x.terminate();
    assert!(status.success());
    let pid: i32 = pid.parse().unwrap();
    eventually(async || unsafe { libc::kill(pid, 0) } != 0).await;
    assert!(!output.exists(), "log file left behind");
}
