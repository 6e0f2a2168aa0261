//! `epp-host call`: one request through `epp-host run` (started by `call`,
//! driven with epp-client). The result as pretty JSON on stdout and exit 0;
//! an error answer on stderr and exit 1; a host that cannot start, exit 2.
//! Streamed output is printed as it arrives; Ctrl-C cancels the request
//! through the server's own path.

mod common;

use common::*;
use serde_json::{Value, json};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// `epp-host call <probe> METHOD PARAMS --allow-unsigned … EXTRA`.
fn call_args(method: &str, params: &Value, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "call".to_string(),
        probe_wasm().display().to_string(),
        method.to_string(),
        params.to_string(),
        "--allow-unsigned".to_string(),
        "--trust-file".to_string(),
        "/dev/null".to_string(),
        "--cache-dir".to_string(),
        shared_cache_dir().display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn call(method: &str, params: Value, extra: &[&str]) -> Output {
    let args = call_args(method, &params, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_host_once(&args, &[])
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_result_is_pretty_json_on_stdout() {
    let out = call("sandbox.get_info", json!({"sandbox_id": "echo hi"}), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let value: Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    assert_eq!(value["sandbox_id"], "hi");
    assert_eq!(
        stdout,
        serde_json::to_string_pretty(&value).unwrap() + "\n",
        "pretty, and nothing else"
    );
}

#[test]
fn streamed_output_comes_first_then_the_result() {
    let out = call(
        "commands.run",
        json!({"sandbox_id": "sb", "cmd": "stream 3 10", "stream": true}),
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let (output, result) = stdout.split_at(stdout.find('{').expect("a result"));
    assert_eq!(output, "line 1\nline 2\nline 3\n");
    let result: Value = serde_json::from_str(result).expect("the result");
    assert_eq!(result["exit_code"], 0, "{result}");
    // The other notification (commands.started) is a JSON line on stderr.
    let started = text(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|n| n["method"] == "commands.started")
        .unwrap_or_else(|| panic!("no commands.started on stderr:\n{}", text(&out.stderr)));
    assert_eq!(started["params"]["request_id"], 1, "{started}");
}

#[test]
fn an_error_answer_goes_to_stderr_with_exit_1() {
    let out = call("sandbox.get_info", json!({"sandbox_id": "sleep soon"}), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l == "error E1001 (-32602): sleep: `soon` is not a number"),
        "{stderr}"
    );
    // A host error (params the method does not take) takes the same way.
    let out = call("sandbox.get_info", json!({"sandbox": "x"}), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("error E1001 (-32602): invalid params for sandbox.get_info"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_servers_deadline_applies() {
    let started = Instant::now();
    let out = call(
        "sandbox.get_info",
        json!({"sandbox_id": "sleep 20000"}),
        &["--call-timeout", "1"],
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("error E9001 (-32000): sandbox.get_info took longer than 1s and was stopped"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_host_that_cannot_start_exits_2() {
    // Bad params never start a host.
    let out = run_host_once(
        &[
            "call",
            probe_wasm().to_str().unwrap(),
            "sandbox.list",
            "[1]",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("params must be a JSON object"));
    // An unsigned component without --allow-unsigned: `run` refuses it and
    // says why; `call` passes its exit code on.
    let out = run_host_once(
        &[
            "call",
            probe_wasm().to_str().unwrap(),
            "sandbox.list",
            "--trust-file",
            "/dev/null",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("refusing to run"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn ctrl_c_cancels_the_request() {
    let args = call_args(
        "commands.run",
        &json!({"sandbox_id": "sb", "cmd": "stream 1000 50", "stream": true}),
        &[],
    );
    let mut cmd = host_command();
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = in_lab(move || cmd.spawn()).expect("spawning epp-host call");
    // Wait for the first streamed line, then interrupt `call` alone (as a
    // terminal would, `run` being in a process group of its own).
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).expect("reading stdout");
    assert_eq!(first, "line 1\n");
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: a signal to our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let started = Instant::now();
    let out = {
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut rest).expect("stdout");
        let status = child.wait().expect("wait");
        let mut stderr = Vec::new();
        std::io::Read::read_to_end(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        (status, text(&rest), text(&stderr))
    };
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let (status, rest, stderr) = out;
    assert_eq!(status.code(), Some(1), "{stderr}");
    // The cancelled command was stopped in the sandbox (the probe's undo).
    assert!(
        stderr.lines().any(|l| l
            == "error E4999 (-32800): request cancelled by epp.cancel; undone: killed command cmd-sb"),
        "{stderr}"
    );
    assert!(
        !rest.contains("exit_code"),
        "no result after a cancel: {rest}"
    );
}

#[test]
fn options_go_to_the_provider_in_epp_hello_first() {
    // The probe's `env` answers its environment as an error message.
    let out = call(
        "sandbox.get_info",
        json!({"sandbox_id": "env"}),
        &["--option", "label=from-call"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("{LABEL_ENV}=from-call")), "{err}");

    // A value the provider refuses is epp.hello's E2001, naming the option, and
    // the request is not sent.
    let out = call(
        "sandbox.get_info",
        json!({"sandbox_id": "echo hi"}),
        &["--option", "label=invalid"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("E2001") && err.contains("provider_options.label"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));

    // Not KEY=VALUE: refused before anything starts.
    let out = call("epp.hello", json!({}), &["--option", "label"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("KEY=VALUE"),
        "{}",
        text(&out.stderr)
    );
}
