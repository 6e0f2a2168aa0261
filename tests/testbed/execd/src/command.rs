//! `/command` and friends, following execd 1.1.1 (`runtime/command.go`,
//! `runtime/command_common.go`, `controller/command.go`, `controller/sse.go`), with the
//! `argv` form of execd ≥ 1.1 (exactly one of `command` = shell text or `argv` = program
//! exec'd directly):
//!
//! * events are compact JSON objects each followed by `\n\n` (no `data:` prefix);
//! * stdout/stderr go to temp files that are tailed every 100 ms; each event carries the
//!   bytes up to and including a `\n` or `\r` (execd 1.1.1, upstream #2033: concatenated
//!   events are the exact output, `\r\n` arrives as `…\r` then `\n`, a last fragment
//!   without terminator is sent when the command ends). `EXECD_STANDIN_LEGACY_LINES=1`
//!   restores execd ≤ 1.1.0's splitting (terminators dropped, blank line = `"\n"`) so
//!   clients can test their fallback;
//! * exit 0 → `execution_complete`; anything else → a single `error` event;
//! * the response ends right after the last event (no fixed delay, upstream #1825);
//! * a client disconnect never kills a foreground command;
//! * a background command's children outlive its shell (upstream #2074); a timeout or an
//!   interrupt still kills the whole process group.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode, header};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use tokio::process::Command;
use tokio::sync::mpsc::{self, UnboundedSender};

use crate::State;
use crate::paths;
use crate::sys;
use crate::web::{self as h, INVALID_REQUEST, Query, RUNTIME_ERROR, Resp};

/// Bookkeeping for one command (`commandKernel` in execd), kept for the process lifetime.
#[derive(Clone)]
struct Kernel {
    /// Process-group id while running; 0 afterwards so a late interrupt cannot hit a
    /// recycled pid.
    pid: i32,
    running: bool,
    background: bool,
    content: String,
    /// Combined output file (background commands only).
    output: Option<PathBuf>,
    started_at: SystemTime,
    finished_at: Option<SystemTime>,
    exit_code: Option<i32>,
    error: String,
}

#[derive(Default)]
pub struct Registry {
    kernels: Mutex<HashMap<String, Kernel>>,
}

impl Registry {
    fn insert(&self, id: &str, k: Kernel) {
        self.kernels.lock().unwrap().insert(id.to_string(), k);
    }

    fn get(&self, id: &str) -> Option<Kernel> {
        self.kernels.lock().unwrap().get(id).cloned()
    }

    fn finish(&self, id: &str, code: i32, error: String) {
        if let Some(k) = self.kernels.lock().unwrap().get_mut(id) {
            k.exit_code = Some(code);
            k.error = error;
            k.running = false;
            k.finished_at = Some(SystemTime::now());
            k.pid = 0;
        }
    }

    /// For shutdown: process groups still running and log files to remove.
    pub fn shutdown(&self) {
        let kernels = self.kernels.lock().unwrap();
        for k in kernels.values() {
            if k.running && k.pid > 0 {
                let _ = sys::kill_group(k.pid, libc::SIGKILL);
            }
            if let Some(p) = &k.output {
                let _ = fs::remove_file(p);
            }
        }
    }
}

#[derive(Deserialize, Default)]
struct RunCommandRequest {
    #[serde(default)]
    command: Option<String>,
    /// execd ≥ 1.1: program and literal arguments, exec'd without a shell.
    #[serde(default)]
    argv: Option<Vec<String>>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    background: Option<bool>,
    /// Milliseconds.
    #[serde(default)]
    timeout: Option<i64>,
    #[serde(default)]
    uid: Option<u32>,
    #[serde(default)]
    gid: Option<u32>,
    #[serde(default)]
    envs: Option<HashMap<String, String>>,
}

#[derive(Serialize)]
pub(crate) struct ErrorOutput {
    ename: String,
    evalue: String,
    traceback: Vec<String>,
}

/// `model.ServerStreamEvent`, field order and omitempty rules included.
#[derive(Serialize)]
struct Event<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    text: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    execution_time: i64,
    timestamp: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorOutput>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

pub(crate) fn frame(
    kind: &str,
    text: &str,
    execution_time: i64,
    error: Option<ErrorOutput>,
) -> Bytes {
    let mut b = h::go_json(&Event {
        kind,
        text,
        execution_time,
        timestamp: h::unix_ms(SystemTime::now()),
        error,
    });
    b.extend_from_slice(b"\n\n");
    Bytes::from(b)
}

pub(crate) fn error_frame(evalue: String, traceback: String) -> Bytes {
    frame(
        "error",
        "",
        0,
        Some(ErrorOutput {
            ename: "CommandExecError".into(),
            evalue,
            traceback: vec![traceback],
        }),
    )
}

/// A bare `{code,message}` object appended to an already started stream, without the
/// `\n\n` terminator: what Gin emits when `RespondError` runs after the first event.
pub(crate) fn late_error(message: String) -> Bytes {
    Bytes::from(h::go_json(&h::ErrorBody {
        code: RUNTIME_ERROR,
        message: &message,
    }))
}

pub(crate) fn sse_response(rx: mpsc::UnboundedReceiver<Bytes>) -> Resp {
    let mut r = h::response(
        StatusCode::OK,
        Some("text/event-stream"),
        h::unbounded_body(rx),
    );
    let hd = r.headers_mut();
    hd.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    hd.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// The shell execd uses: bash, or sh on images without bash. Resolved once against the
/// stand-in's own PATH (Go's exec.LookPath), not the command's merged environment.
fn shell() -> &'static (String, PathBuf) {
    static SHELL: std::sync::OnceLock<(String, PathBuf)> = std::sync::OnceLock::new();
    SHELL.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap_or_default();
        for name in ["bash", "sh"] {
            for dir in std::env::split_paths(&path) {
                let p = dir.join(name);
                if p.is_file() {
                    return (name.to_string(), p);
                }
            }
        }
        ("sh".into(), PathBuf::from("/bin/sh"))
    })
}

/// `KEY=VALUE` lines of the file named by `EXECD_ENVS`; values are `$VAR`-expanded.
pub(crate) fn envs_from_file() -> HashMap<String, String> {
    let mut out = HashMap::new();
    let Some(path) = std::env::var("EXECD_ENVS").ok().filter(|p| !p.is_empty()) else {
        return out;
    };
    let Ok(path) = paths::expand(&path) else {
        return out;
    };
    let Ok(data) = fs::read_to_string(path) else {
        return out;
    };
    let env = paths::env_map(None);
    for line in data.split('\n') {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let v = paths::go_expand(v, |name| env.get(name).cloned().unwrap_or_default());
            out.insert(k.to_string(), v);
        }
    }
    out
}

/// Go's `(*ProcessState).String()` and `ExitCode()` for a finished process.
pub(crate) fn describe(status: ExitStatus) -> (i32, String) {
    if let Some(code) = status.code() {
        return (code, format!("exit status {code}"));
    }
    let sig = status.signal().unwrap_or(0);
    let name = match sig {
        libc::SIGHUP => "hangup".to_string(),
        libc::SIGINT => "interrupt".into(),
        libc::SIGQUIT => "quit".into(),
        libc::SIGILL => "illegal instruction".into(),
        libc::SIGTRAP => "trace/breakpoint trap".into(),
        libc::SIGABRT => "aborted".into(),
        libc::SIGBUS => "bus error".into(),
        libc::SIGFPE => "floating point exception".into(),
        libc::SIGKILL => "killed".into(),
        libc::SIGUSR1 => "user defined signal 1".into(),
        libc::SIGSEGV => "segmentation fault".into(),
        libc::SIGUSR2 => "user defined signal 2".into(),
        libc::SIGPIPE => "broken pipe".into(),
        libc::SIGALRM => "alarm clock".into(),
        libc::SIGTERM => "terminated".into(),
        n => format!("signal {n}"),
    };
    let core = if status.core_dumped() {
        " (core dumped)"
    } else {
        ""
    };
    (-1, format!("signal: {name}{core}"))
}

/// `buildCredential`: with only `uid`, the user's primary group and supplementary groups
/// come from the user database (gid 0 if the user is unknown, as in Go).
fn credentials(uid: Option<u32>, gid: Option<u32>) -> Option<(u32, u32, Vec<u32>)> {
    let uid = uid?;
    let (primary, groups) = sys::user_groups(uid).unwrap_or((0, Vec::new()));
    Some((uid, gid.unwrap_or(primary), groups))
}

/// What to exec: the shell with `-c <command>`, or the program of an `argv` request.
struct Program {
    /// Path handed to exec (Go's `cmd.Path`): absolute after a PATH search, else as given.
    path: PathBuf,
    arg0: String,
    args: Vec<String>,
}

/// Resolves the request to a program (`exec.Command`). For `argv`, a name without `/`
/// is searched in the absolute entries of the child's `PATH` (request `envs` and
/// `EXECD_ENVS` included); a name with `/` is used as given (relative to `cwd`). The
/// error is Go's `exec.ErrNotFound` text, reported like a start failure.
fn program(r: &RunCommandRequest, child_env: &HashMap<String, String>) -> Result<Program, String> {
    let Some(argv) = r.argv.as_deref() else {
        let (name, path) = shell();
        return Ok(Program {
            path: path.clone(),
            arg0: name.clone(),
            args: vec!["-c".into(), r.command.clone().unwrap_or_default()],
        });
    };
    let name = &argv[0];
    let path = if name.contains('/') {
        PathBuf::from(name)
    } else {
        let path_var = child_env.get("PATH").map(String::as_str).unwrap_or("");
        look_path(name, path_var).ok_or_else(|| {
            format!(
                "exec: {}: executable file not found in $PATH",
                serde_json::to_string(name).unwrap_or_default()
            )
        })?
    };
    Ok(Program {
        path,
        arg0: name.clone(),
        args: argv[1..].to_vec(),
    })
}

/// Go's `exec.LookPath` over the absolute entries of `path_var`: the first entry holding
/// a non-directory with an execute bit.
fn look_path(name: &str, path_var: &str) -> Option<PathBuf> {
    path_var
        .split(':')
        .filter(|dir| dir.starts_with('/'))
        .map(|dir| Path::new(dir).join(name))
        .find(|p| {
            fs::metadata(p).is_ok_and(|md| !md.is_dir() && md.permissions().mode() & 0o111 != 0)
        })
}

/// `content` reported by `/command/status`: the shell text, or for `argv` the arguments
/// joined by spaces and single-quoted where a shell would need it.
fn content_of(r: &RunCommandRequest) -> String {
    let Some(argv) = &r.argv else {
        return r.command.clone().unwrap_or_default();
    };
    let quote = |a: &String| {
        let plain = !a.is_empty()
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b));
        if plain {
            a.clone()
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    argv.iter().map(quote).collect::<Vec<_>>().join(" ")
}

fn build_command(
    p: &Program,
    r: &RunCommandRequest,
    cwd: &str,
    child_env: &HashMap<String, String>,
) -> Command {
    let mut cmd = Command::new(&p.path);
    cmd.arg0(&p.arg0)
        .args(&p.args)
        .env_clear()
        .envs(child_env)
        .stdin(Stdio::null())
        // Own process group, so timeouts and interrupts reach every descendant.
        .process_group(0)
        .kill_on_drop(false);
    if !cwd.is_empty() {
        cmd.current_dir(cwd);
    }
    if let Some((uid, gid, groups)) = credentials(r.uid, r.gid) {
        // SAFETY: the closure only makes async-signal-safe syscalls on pre-built data.
        unsafe {
            cmd.pre_exec(move || sys::switch_credentials(uid, gid, &groups));
        }
    }
    cmd
}

/// Resolves and starts the program; the error is Go's text for a failed `cmd.Start()`.
fn spawn(
    r: &RunCommandRequest,
    cwd: &str,
    env: &HashMap<String, String>,
    stdout: fs::File,
    stderr: fs::File,
) -> Result<tokio::process::Child, String> {
    let child_env = paths::env_map(Some(env));
    let p = program(r, &child_env)?;
    let mut cmd = build_command(&p, r, cwd, &child_env);
    cmd.stdout(stdout).stderr(stderr);
    cmd.spawn()
        .map_err(|e| format!("fork/exec {}: {}", p.path.display(), sys::errno_text(&e)))
}

/// `RunCommandRequest.Validate`: tag errors as go-playground/validator formats them, then
/// execd's own checks (input mode, uid/gid, cwd). `env` is the request's environment
/// (`EXECD_ENVS` and `envs`), which `cwd` may use since execd 1.1.0 (#1611).
fn validate(r: &RunCommandRequest, env: &HashMap<String, String>) -> Result<(), String> {
    if r.timeout.is_some_and(|t| t < 0) {
        return Err("Key: 'RunCommandRequest.TimeoutMs' Error:Field validation for 'TimeoutMs' failed on the 'gte' tag".into());
    }
    // Exactly one input mode. As in Go, an empty `command` counts as absent; `argv` is
    // present unless missing or null.
    let has_command = !r.command.as_deref().unwrap_or("").is_empty();
    match (has_command, r.argv.as_deref()) {
        (true, None) => {}
        (true, Some(_)) => return Err("command and argv are mutually exclusive".into()),
        (false, None) => return Err("command or argv is required".into()),
        (false, Some([])) => return Err("argv must not be empty".into()),
        (false, Some([first, ..])) if first.is_empty() => {
            return Err("argv[0] must not be empty".into());
        }
        (false, Some(argv)) => {
            if let Some(i) = argv.iter().position(|a| a.contains('\0')) {
                return Err(format!("argv[{i}] must not contain NUL"));
            }
        }
    }
    if r.gid.is_some() && r.uid.is_none() {
        return Err("uid is required when gid is provided".into());
    }
    let cwd = r.cwd.as_deref().unwrap_or("");
    if cwd.is_empty() {
        return Ok(());
    }
    let resolved = paths::expand_with(cwd, Some(env)).map_err(|e| {
        format!(
            "cannot resolve working directory {}: {e}",
            serde_json::to_string(cwd).unwrap_or_default()
        )
    })?;
    match fs::metadata(&resolved) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
            "working directory does not exist: {cwd}: {}",
            sys::path_err("stat", &resolved, &e)
        )),
        Err(e) => Err(format!(
            "cannot access working directory {}: {}",
            serde_json::to_string(cwd).unwrap_or_default(),
            sys::path_err("stat", &resolved, &e)
        )),
        Ok(md) if !md.is_dir() => Err(format!("working directory path is not a directory: {cwd}")),
        Ok(_) => Ok(()),
    }
}

/// POST /command
pub async fn run(st: Arc<State>, req: Request<Incoming>) -> Resp {
    let body = match h::read_body(req.into_body()).await {
        Ok(b) => b,
        Err(e) => {
            return bad_request(format!(
                "error parsing request, MAYBE invalid body format. {e}"
            ));
        }
    };
    let r: RunCommandRequest = match h::decode_json(&body) {
        Ok(r) => r,
        Err(e) => {
            return bad_request(format!(
                "error parsing request, MAYBE invalid body format. {e}"
            ));
        }
    };
    let mut env = envs_from_file();
    env.extend(r.envs.clone().unwrap_or_default());
    if let Err(e) = validate(&r, &env) {
        return bad_request(format!("invalid request, validation error {e}"));
    }
    if r.background.unwrap_or(false) {
        run_background(st, r, env)
    } else {
        run_foreground(st, r, env)
    }
}

/// `POST /code` without a context language (execd's `runtime.Command`): `code` runs as a
/// shell command with `/command`'s events (`background-command`: in the background).
pub(crate) fn run_code(st: Arc<State>, code: String, background: bool) -> Resp {
    let r = RunCommandRequest {
        command: Some(code),
        ..Default::default()
    };
    if background {
        run_background(st, r, envs_from_file())
    } else {
        run_foreground(st, r, envs_from_file())
    }
}

fn bad_request(msg: String) -> Resp {
    h::error(StatusCode::BAD_REQUEST, INVALID_REQUEST, msg)
}

fn runtime_error(msg: String) -> Resp {
    h::runtime_error(msg)
}

fn timeout_of(r: &RunCommandRequest) -> Option<Duration> {
    r.timeout
        .filter(|&t| t > 0)
        .map(|t| Duration::from_millis(t as u64))
}

/// Sends a keep-alive `ping` every 3 s until aborted (pings stop by themselves once the
/// client is gone, like execd's request-scoped ping loop).
pub(crate) fn spawn_pinger(tx: UnboundedSender<Bytes>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut t = tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_secs(3),
            Duration::from_secs(3),
        );
        loop {
            t.tick().await;
            if tx.send(frame("ping", "pong", 0, None)).is_err() {
                return;
            }
        }
    })
}

fn run_foreground(st: Arc<State>, r: RunCommandRequest, env: HashMap<String, String>) -> Resp {
    let id = h::new_uuid(false);
    let tmp = std::env::temp_dir();
    let out_path = tmp.join(format!("{id}.stdout"));
    let err_path = tmp.join(format!("{id}.stderr"));
    let files = (|| -> io::Result<(fs::File, fs::File)> {
        fs::create_dir_all(&tmp)?;
        Ok((fs::File::create(&out_path)?, fs::File::create(&err_path)?))
    })();
    let (out_file, err_file) = match files {
        Ok(f) => f,
        Err(e) => {
            return runtime_error(format!(
                "error running commands failed to get stdlog descriptor: {}",
                sys::errno_text(&e)
            ));
        }
    };
    let cwd_raw = r.cwd.clone().unwrap_or_default();
    let cwd = match paths::expand_with(&cwd_raw, Some(&env)) {
        Ok(c) => c,
        Err(e) => {
            let _ = fs::remove_file(&out_path);
            let _ = fs::remove_file(&err_path);
            return runtime_error(format!(
                "error running commands resolve request cwd {cwd_raw}: {e}"
            ));
        }
    };
    let started = Instant::now();
    let started_at = SystemTime::now();
    let spawned = spawn(&r, &cwd, &env, out_file, err_file);

    let (tx, rx) = mpsc::unbounded_channel();
    let legacy_lines = st.cfg.legacy_lines;
    let timeout = timeout_of(&r);
    tokio::spawn(async move {
        let send = |b: Bytes| {
            let _ = tx.send(b);
        };
        let child = match spawned {
            Ok(c) => c,
            Err(msg) => {
                send(frame("init", &id, 0, None));
                send(frame("ping", "pong", 0, None));
                send(error_frame(msg.clone(), msg));
                let _ = fs::remove_file(&out_path);
                let _ = fs::remove_file(&err_path);
                return;
            }
        };
        let pid = child.id().unwrap_or(0) as i32;
        st.commands.insert(
            &id,
            Kernel {
                pid,
                running: true,
                background: false,
                content: content_of(&r),
                output: None,
                started_at,
                finished_at: None,
                exit_code: None,
                error: String::new(),
            },
        );
        send(frame("init", &id, 0, None));
        // execd's ping loop fires once right away, then every 3 s.
        send(frame("ping", "pong", 0, None));
        let pinger = spawn_pinger(tx.clone());

        let tails = (
            Tailer::new(out_path.clone(), legacy_lines),
            Tailer::new(err_path.clone(), legacy_lines),
        );
        let status = supervise(child, pid, timeout, tails, &tx).await;
        match status {
            Ok(s) if s.success() => {
                st.commands.finish(&id, 0, String::new());
                send(frame(
                    "execution_complete",
                    "",
                    started.elapsed().as_millis() as i64,
                    None,
                ));
            }
            Ok(s) => {
                let (code, text) = describe(s);
                st.commands.finish(&id, code, text.clone());
                send(error_frame(code.to_string(), text));
            }
            Err(e) => {
                let text = sys::errno_text(&e);
                st.commands.finish(&id, 1, text.clone());
                send(error_frame(text.clone(), text));
            }
        }
        // Output files are only read by the tailer; remove them now the command is done.
        // The stream ends at once (execd 1.1.1 dropped its fixed 1 s delay, #1825).
        let _ = fs::remove_file(&out_path);
        let _ = fs::remove_file(&err_path);
        pinger.abort();
    });
    sse_response(rx)
}

/// Waits for the command while tailing its output files every 100 ms and enforcing the
/// timeout (SIGKILL to the whole group).
async fn supervise(
    mut child: tokio::process::Child,
    pid: i32,
    timeout: Option<Duration>,
    mut tails: (Tailer, Tailer),
    tx: &UnboundedSender<Bytes>,
) -> io::Result<ExitStatus> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    ticker.tick().await;
    let mut killed = false;
    let status = loop {
        tokio::select! {
            s = child.wait() => break s,
            _ = ticker.tick() => {
                tails = poll_tails(tails, false, tx).await;
            }
            _ = async { tokio::time::sleep_until(deadline.unwrap()).await }, if deadline.is_some() && !killed => {
                killed = true;
                let _ = sys::kill_group(pid, libc::SIGKILL);
            }
        }
    };
    poll_tails(tails, true, tx).await;
    status
}

async fn poll_tails(
    mut tails: (Tailer, Tailer),
    flush: bool,
    tx: &UnboundedSender<Bytes>,
) -> (Tailer, Tailer) {
    let (tails, out, err) = tokio::task::spawn_blocking(move || {
        let out = tails.0.poll(flush);
        let err = tails.1.poll(flush);
        (tails, out, err)
    })
    .await
    .expect("tail task");
    for line in out {
        let _ = tx.send(frame("stdout", &line, 0, None));
    }
    for line in err {
        let _ = tx.send(frame("stderr", &line, 0, None));
    }
    tails
}

/// execd's `tailStdPipe`/`commandOutputTail`: reads what was appended since the last poll
/// and cuts it into events. An unterminated last piece is left for the next poll unless
/// `flush` (process exited) is set.
struct Tailer {
    path: PathBuf,
    pos: u64,
    /// Split like execd ≤ 1.1.0 (terminators dropped) instead of 1.1.1 (kept).
    legacy: bool,
    last_was_cr: bool,
}

impl Tailer {
    fn new(path: PathBuf, legacy: bool) -> Self {
        Tailer {
            path,
            pos: 0,
            legacy,
            last_was_cr: false,
        }
    }

    fn poll(&mut self, flush: bool) -> Vec<String> {
        let mut data = Vec::new();
        if let Ok(mut f) = fs::File::open(&self.path)
            && f.seek(SeekFrom::Start(self.pos)).is_ok()
        {
            let _ = f.read_to_end(&mut data);
        }
        let (lines, consumed) = if self.legacy {
            let (lines, consumed, cr) = split_lines_legacy(&data, self.last_was_cr, flush);
            self.last_was_cr = cr;
            (lines, consumed)
        } else {
            split_lines(&data, flush)
        };
        self.pos += consumed as u64;
        lines
    }
}

/// execd 1.1.1: one event per line with its terminator kept — a line ends after each `\n`
/// and after each `\r` (so `\r\n` gives `"…\r"` then `"\n"`); the bytes of all events are
/// the output exactly. Returns the events and how many bytes were consumed.
fn split_lines(data: &[u8], flush: bool) -> (Vec<String>, usize) {
    let mut lines = Vec::new();
    let mut start = 0;
    for (i, &b) in data.iter().enumerate() {
        if b == b'\n' || b == b'\r' {
            lines.push(String::from_utf8_lossy(&data[start..=i]).into_owned());
            start = i + 1;
        }
    }
    if start < data.len() && flush {
        lines.push(String::from_utf8_lossy(&data[start..]).into_owned());
        start = data.len();
    }
    (lines, start)
}

/// execd ≤ 1.1.0: splits on `\n` or `\r` (terminator dropped, `\r\n` counted once,
/// blank line as "\n"). Returns the lines, how many bytes were consumed and the CR state.
fn split_lines_legacy(data: &[u8], mut cr: bool, flush: bool) -> (Vec<String>, usize, bool) {
    let mut lines = Vec::new();
    let mut start = 0;
    for (i, &b) in data.iter().enumerate() {
        if b == b'\n' || b == b'\r' {
            if i > start {
                lines.push(String::from_utf8_lossy(&data[start..i]).into_owned());
            } else if !(b == b'\n' && cr) {
                lines.push("\n".to_string());
            }
            cr = b == b'\r';
            start = i + 1;
        } else {
            cr = false;
        }
    }
    if start < data.len() && flush {
        lines.push(String::from_utf8_lossy(&data[start..]).into_owned());
        start = data.len();
    }
    (lines, start, cr)
}

fn run_background(st: Arc<State>, r: RunCommandRequest, env: HashMap<String, String>) -> Resp {
    let id = h::new_uuid(false);
    let (tx, rx) = mpsc::unbounded_channel();
    let _ = tx.send(frame("init", &id, 0, None));
    let started = Instant::now();
    let started_at = SystemTime::now();
    let content = content_of(&r);

    let output = std::env::temp_dir().join(format!("{id}.output"));
    let file =
        match fs::create_dir_all(std::env::temp_dir()).and_then(|_| fs::File::create(&output)) {
            Ok(f) => f,
            Err(e) => {
                let _ = tx.send(late_error(format!(
                    "error running commands failed to get combined output descriptor: {}",
                    sys::errno_text(&e)
                )));
                return sse_response(rx);
            }
        };
    let cwd_raw = r.cwd.clone().unwrap_or_default();
    let cwd = match paths::expand_with(&cwd_raw, Some(&env)) {
        Ok(c) => c,
        Err(e) => {
            let _ = tx.send(late_error(format!(
                "error running commands resolve cwd: {e}"
            )));
            return sse_response(rx);
        }
    };
    // One descriptor for both streams: stdout and stderr interleave in a single log.
    let (out, err) = match file.try_clone() {
        Ok(dup) => (file, dup),
        Err(e) => {
            let _ = tx.send(late_error(format!(
                "error running commands failed to get combined output descriptor: {}",
                sys::errno_text(&e)
            )));
            return sse_response(rx);
        }
    };
    let mut kernel = Kernel {
        pid: 0,
        running: true,
        background: true,
        content,
        output: Some(output),
        started_at,
        finished_at: None,
        exit_code: None,
        error: String::new(),
    };
    let mut child = match spawn(&r, &cwd, &env, out, err) {
        Ok(c) => c,
        Err(msg) => {
            kernel.running = false;
            st.commands.insert(&id, kernel);
            st.commands.finish(&id, 255, msg.clone());
            let _ = tx.send(late_error(format!(
                "error running commands failed to start commands: {msg}"
            )));
            return sse_response(rx);
        }
    };
    let pid = child.id().unwrap_or(0) as i32;
    kernel.pid = pid;
    st.commands.insert(&id, kernel);

    let timeout = timeout_of(&r);
    let st2 = st.clone();
    let id2 = id.clone();
    tokio::spawn(async move {
        let status = match timeout {
            Some(t) => match tokio::time::timeout(t, child.wait()).await {
                Ok(s) => s,
                Err(_) => {
                    let _ = sys::kill_group(pid, libc::SIGKILL);
                    child.wait().await
                }
            },
            None => child.wait().await,
        };
        let (code, text) = match status {
            Ok(s) if s.success() => (0, String::new()),
            Ok(s) => describe(s),
            Err(e) => (1, sys::errno_text(&e)),
        };
        // Since execd 1.1.1 (#2074) the end of the shell no longer kills its process
        // group: children such as `nohup ./server &` keep running.
        st2.commands.finish(&id2, code, text);
    });

    // Acknowledged at once; the stream ends with it (no fixed delay since #1825).
    let _ = tx.send(frame(
        "execution_complete",
        "",
        started.elapsed().as_millis() as i64,
        None,
    ));
    drop(tx);
    sse_response(rx)
}

/// DELETE /command?id= — SIGTERM to the group, up to 3 s grace, then SIGKILL.
pub async fn interrupt(st: Arc<State>, q: &Query) -> Resp {
    let id = match q.required("id") {
        Ok(v) => v,
        Err(resp) => return resp,
    };
    let err = match st.commands.get(id) {
        None => "no such session".to_string(),
        Some(k) if !k.running || k.pid <= 0 => format!("command session {id} is not running"),
        Some(k) => match kill_group_gracefully(k.pid).await {
            Ok(()) => return h::ok(),
            Err(e) => e,
        },
    };
    runtime_error(format!("error interruptting code context. {err}"))
}

/// execd's `killPid`.
async fn kill_group_gracefully(pgid: i32) -> Result<(), String> {
    let mut term_delivered = false;
    match sys::kill_group(pgid, libc::SIGTERM) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(()),
        Err(_) => {}
        Ok(()) => {
            term_delivered = true;
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if !sys::group_alive(pgid) {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    match sys::kill_group(pgid, libc::SIGKILL) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        Err(_) if term_delivered => Ok(()),
        Err(e) => Err(format!(
            "failed to kill process group {pgid}: {}",
            sys::errno_text(&e)
        )),
        Ok(()) => {
            for _ in 0..3 {
                if !sys::group_alive(pgid) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(())
        }
    }
}

#[derive(Serialize)]
struct StatusResponse<'a> {
    id: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    content: &'a str,
    running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "str::is_empty")]
    error: &'a str,
    started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<String>,
}

/// GET /command/status/{id}
pub fn status(st: &State, id: &str) -> Resp {
    let Some(k) = st.commands.get(id) else {
        return h::error(
            StatusCode::NOT_FOUND,
            INVALID_REQUEST,
            format!("command not found: {id}"),
        );
    };
    h::json(
        StatusCode::OK,
        &StatusResponse {
            id,
            content: &k.content,
            running: k.running,
            exit_code: k.exit_code,
            error: &k.error,
            started_at: h::rfc3339_system(k.started_at),
            finished_at: k.finished_at.map(h::rfc3339_system),
        },
    )
}

/// GET /command/{id}/logs?cursor=N — the cursor is a byte offset into the combined log.
/// A cursor past the end is clamped to the end (execd 1.1.0, #1708).
pub fn logs(st: &State, id: &str, q: &Query) -> Resp {
    let cursor: i64 = q.get("cursor").parse().unwrap_or(0);
    let res = (|| -> Result<(Vec<u8>, i64), String> {
        let k = st
            .commands
            .get(id)
            .ok_or_else(|| format!("command not found: {id}"))?;
        let path = match (&k.output, k.background) {
            (Some(p), true) => p.clone(),
            _ => return Err(format!("command {id} is not running in background")),
        };
        let shown = path.to_string_lossy().into_owned();
        let mut f = fs::File::open(&path).map_err(|e| {
            format!(
                "error open combined output file for command {id}: {}",
                sys::path_err("open", &shown, &e)
            )
        })?;
        if cursor < 0 {
            return Err(format!("error seek file: seek {shown}: invalid argument"));
        }
        let end = f
            .metadata()
            .map_err(|e| format!("error stat file: {}", sys::path_err("stat", &shown, &e)))?
            .len() as i64;
        let cursor = cursor.min(end);
        f.seek(SeekFrom::Start(cursor as u64))
            .map_err(|e| format!("error seek file: {}", sys::path_err("seek", &shown, &e)))?;
        let mut data = Vec::new();
        f.read_to_end(&mut data)
            .map_err(|e| format!("error read file: {}", sys::path_err("read", &shown, &e)))?;
        let next = cursor + data.len() as i64;
        Ok((data, next))
    })();
    match res {
        Err(e) => h::error(StatusCode::BAD_REQUEST, INVALID_REQUEST, e),
        Ok((data, next)) => {
            let mut r = h::response(
                StatusCode::OK,
                Some("text/plain; charset=utf-8"),
                h::full(data),
            );
            r.headers_mut()
                .insert("execd-commands-tail-cursor", HeaderValue::from(next));
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str, flush: bool) -> Vec<String> {
        split_lines(s.as_bytes(), flush).0
    }

    fn split_legacy(s: &str, flush: bool) -> Vec<String> {
        split_lines_legacy(s.as_bytes(), false, flush).0
    }

    #[test]
    fn lines_keep_their_terminators() {
        assert_eq!(split("a\r50%\r100%\n", true), ["a\r", "50%\r", "100%\n"]);
        assert_eq!(
            split("a\n\nb\n\n\nc\r\n\r\nd", true),
            ["a\n", "\n", "b\n", "\n", "\n", "c\r", "\n", "\r", "\n", "d"]
        );
        assert_eq!(split("x\npartial", false), ["x\n"]);
        assert_eq!(split("x\npartial", true), ["x\n", "partial"]);
        assert_eq!(split_lines(b"abc", false), (vec![], 0));
        assert_eq!(split_lines(b"abc", true), (vec!["abc".to_string()], 3));
        // Whatever the input, the events are the input.
        let input = "\r\n\n \r\r x\ny\r\nz";
        assert_eq!(split(input, true).concat(), input);
    }

    #[test]
    fn legacy_line_splitting_matches_execd_1_1_0() {
        assert_eq!(split_legacy("a\r50%\r100%\n", true), ["a", "50%", "100%"]);
        assert_eq!(
            split_legacy("a\n\nb\n\n\nc\r\n\r\nd", true),
            ["a", "\n", "b", "\n", "\n", "c", "\n", "d"]
        );
        assert_eq!(split_legacy("x\npartial", false), ["x"]);
        assert_eq!(split_legacy("x\npartial", true), ["x", "partial"]);
        // A CRLF split across two polls does not produce a blank line.
        let (l, n, cr) = split_lines_legacy(b"a\r", false, false);
        assert_eq!((l, n, cr), (vec!["a".to_string()], 2, true));
        assert_eq!(split_lines_legacy(b"\nb\n", true, false).0, ["b"]);
    }

    #[test]
    fn validation_messages() {
        let r = RunCommandRequest {
            timeout: Some(-1),
            ..Default::default()
        };
        let e = validate(&r, &HashMap::new()).unwrap_err();
        assert!(e.contains("'TimeoutMs' failed on the 'gte' tag"));

        let with = |command: Option<&str>, argv: Option<&[&str]>| RunCommandRequest {
            command: command.map(String::from),
            argv: argv.map(|a| a.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        };
        let err = |r: RunCommandRequest| validate(&r, &HashMap::new()).err();
        assert_eq!(
            err(with(None, None)).as_deref(),
            Some("command or argv is required")
        );
        assert_eq!(
            err(with(Some("ls"), Some(&["ls"]))).as_deref(),
            Some("command and argv are mutually exclusive")
        );
        assert_eq!(
            err(with(None, Some(&[]))).as_deref(),
            Some("argv must not be empty")
        );
        assert_eq!(
            err(with(None, Some(&["", "x"]))).as_deref(),
            Some("argv[0] must not be empty")
        );
        assert_eq!(
            err(with(None, Some(&["echo", "a\0b"]))).as_deref(),
            Some("argv[1] must not contain NUL")
        );
        // An empty command counts as absent (Go cannot tell "" from missing).
        assert_eq!(err(with(Some(""), Some(&["true"]))), None);
        assert_eq!(err(with(Some("true"), None)), None);
    }

    #[test]
    fn argv_lookup_and_status_content() {
        let env = |path: &str| HashMap::from([("PATH".to_string(), path.to_string())]);
        let argv = |a: &[&str]| RunCommandRequest {
            argv: Some(a.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        };
        let p = program(&argv(&["sh", "-c", "x"]), &env("relative:/bin")).unwrap();
        assert_eq!(p.path, PathBuf::from("/bin/sh"));
        assert_eq!((p.arg0.as_str(), p.args.len()), ("sh", 2));
        // Relative PATH entries are never searched; names with a slash are not looked up.
        let e = program(&argv(&["sh"]), &env(".:bin")).err().unwrap();
        assert_eq!(e, r#"exec: "sh": executable file not found in $PATH"#);
        let p = program(&argv(&["./tool"]), &env("")).unwrap();
        assert_eq!(p.path, PathBuf::from("./tool"));

        assert_eq!(
            content_of(&argv(&["printf", "%s|", "a b", "it's", ""])),
            r#"printf '%s|' 'a b' 'it'\''s' ''"#
        );
    }
}
