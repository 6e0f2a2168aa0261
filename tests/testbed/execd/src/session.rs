//! Bash sessions (`/session`, `/session/{id}/run`, `DELETE /session/{id}`), following
//! execd 1.1.1 (`runtime/bash_session.go`, `controller/codeinterpreting.go`):
//!
//! * a session is not a live shell: it is an environment (execd's own plus `EXECD_ENVS`)
//!   and a working directory. Each run starts `bash --noprofile --norc` in its own process
//!   group with `export K=V` lines, `cd`, the command, then prints markers with
//!   `export -p`, `pwd` and `$?`; the exported variables and the final directory are kept
//!   for the next run. Shell functions and unexported variables are NOT kept;
//! * the script is not left on disk (upstream #2076); here it is passed with `-c`;
//! * stdout and stderr are one pipe, read line by line: each non-empty line is a `stdout`
//!   event without its terminator (blank lines are dropped, as execd's hook does);
//! * exit 0 → `execution_complete`; anything else → `error` with `evalue` = the code;
//! * a timeout (ms, default 24 h) SIGKILLs the whole process group (upstream #2079) and
//!   appends a bare `{"code":"RUNTIME_ERROR","message":"error running in session. timeout
//!   after …"}` to the 200 stream; a client disconnect kills the group too (the request
//!   context ends the run);
//! * an unknown session: `run` answers 500 RUNTIME_ERROR "error running in session.
//!   context not found", `DELETE` 404 CONTEXT_NOT_FOUND; `DELETE` SIGKILLs a running run.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Request, StatusCode};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::command::{error_frame, frame, late_error, sse_response};
use crate::paths;
use crate::sys;
use crate::web::{self as h, CONTEXT_NOT_FOUND, INVALID_REQUEST, Resp};

const ENV_START: &str = "__ENV_DUMP_START__";
const ENV_END: &str = "__ENV_DUMP_END__";
const EXIT_PREFIX: &str = "__EXIT_CODE__:";
const PWD_PREFIX: &str = "__PWD__:";
/// Values longer than this are not carried to the next run.
const MAX_VALUE: usize = 8 * 1024;
const NOT_PERSISTED: [&str; 5] = ["PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND"];

struct Session {
    env: BTreeMap<String, String>,
    cwd: String,
    /// Process group of the latest run while it runs, else 0.
    pgid: i32,
}

#[derive(Default)]
pub struct Registry {
    sessions: Mutex<HashMap<String, Arc<Mutex<Session>>>>,
}

impl Registry {
    fn get(&self, id: &str) -> Option<Arc<Mutex<Session>>> {
        self.sessions.lock().unwrap().get(id).cloned()
    }

    pub fn shutdown(&self) {
        for s in self.sessions.lock().unwrap().values() {
            let pgid = s.lock().unwrap().pgid;
            if pgid > 0 {
                let _ = sys::kill_group(pgid, libc::SIGKILL);
            }
        }
    }
}

#[derive(Deserialize, Default)]
struct CreateRequest {
    #[serde(default)]
    cwd: Option<String>,
}

#[derive(Serialize)]
struct Created<'a> {
    session_id: &'a str,
}

#[derive(Deserialize, Default)]
struct RunRequest {
    #[serde(default)]
    command: String,
    #[serde(default)]
    cwd: Option<String>,
    /// Milliseconds, ≥ 0; 0 = the default of 24 h.
    #[serde(default)]
    timeout: i64,
}

fn valid_key(k: &str) -> bool {
    let mut chars = k.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// POST /session (an empty body is allowed).
pub async fn create(reg: &Registry, req: Request<Incoming>) -> Resp {
    let body = match h::read_body(req.into_body()).await {
        Ok(b) => b,
        Err(e) => return bad(format!("error parsing request. {e}")),
    };
    let r: CreateRequest = if body.iter().all(u8::is_ascii_whitespace) {
        CreateRequest::default()
    } else {
        match h::decode_json(&body) {
            Ok(r) => r,
            Err(e) => return bad(format!("error parsing request. {e}")),
        }
    };
    let raw = r.cwd.unwrap_or_default();
    let cwd = match paths::expand(&raw) {
        Ok(c) => c,
        Err(e) => {
            return h::runtime_error(format!(
                "error creating session. resolve request cwd {raw}: {e}"
            ));
        }
    };
    if !cwd.is_empty()
        && let Err(e) = std::fs::create_dir_all(&cwd)
    {
        return h::runtime_error(format!(
            "error creating session. mkdir {cwd}: {}",
            sys::errno_text(&e)
        ));
    }
    let mut env: BTreeMap<String, String> =
        std::env::vars().filter(|(k, _)| valid_key(k)).collect();
    env.extend(crate::command::envs_from_file());
    let id = h::new_uuid(true);
    reg.sessions.lock().unwrap().insert(
        id.clone(),
        Arc::new(Mutex::new(Session { env, cwd, pgid: 0 })),
    );
    h::json(StatusCode::OK, &Created { session_id: &id })
}

fn bad(msg: String) -> Resp {
    h::error(StatusCode::BAD_REQUEST, INVALID_REQUEST, msg)
}

/// Go's `time.Duration.String()` for whole milliseconds.
fn go_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let secs = if rest % 1000 == 0 {
        format!("{}s", rest / 1000)
    } else {
        let s = format!("{}.{:03}", rest / 1000, rest % 1000);
        format!("{}s", s.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

fn shell_escape(v: &str) -> String {
    format!("'{}'", v.replace('\'', r#"'"'"'"#))
}

fn script(command: &str, env: &BTreeMap<String, String>, cwd: &str) -> String {
    let mut b = String::new();
    for (k, v) in env {
        if valid_key(k) && !NOT_PERSISTED.contains(&k.as_str()) && v.len() <= MAX_VALUE {
            b.push_str(&format!("export {k}={}\n", shell_escape(v)));
        }
    }
    if !cwd.is_empty() {
        b.push_str(&format!("cd {}\n", shell_escape(cwd)));
    }
    b.push_str(command);
    if !command.ends_with('\n') {
        b.push('\n');
    }
    b.push_str("__USER_EXIT_CODE__=$?\n");
    b.push_str(&format!("printf \"\\n%s\\n\" \"{ENV_START}\"\n"));
    b.push_str("export -p\n");
    b.push_str(&format!("printf \"%s\\n\" \"{ENV_END}\"\n"));
    b.push_str(&format!("printf \"{PWD_PREFIX}%s\\n\" \"$(pwd)\"\n"));
    b.push_str(&format!(
        "printf \"{EXIT_PREFIX}%s\\n\" \"$__USER_EXIT_CODE__\"\n"
    ));
    b.push_str("exit \"$__USER_EXIT_CODE__\"\n");
    b
}

/// One `declare -x NAME="value"` line of `export -p` (Go's `strconv.Unquote`, else the
/// quotes trimmed).
fn parse_export(line: &str) -> Option<(String, String)> {
    let rest = line.strip_prefix("declare -x ")?.trim();
    if rest.is_empty() {
        return None;
    }
    let (name, value) = match rest.split_once('=') {
        Some((n, raw)) => (
            n,
            go_unquote(raw).unwrap_or_else(|| raw.trim_matches('"').into()),
        ),
        None => (rest, String::new()),
    };
    valid_key(name).then(|| (name.to_string(), value))
}

/// The subset of Go's `strconv.Unquote` that `export -p` output can reach: `"…"` with
/// `\\` and `\"` escapes; any other escape (bash's `\$`, `` \` ``) makes it fail.
fn go_unquote(raw: &str) -> Option<String> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                '\\' => out.push('\\'),
                '"' => out.push('"'),
                'n' => out.push('\n'),
                't' => out.push('\t'),
                _ => return None,
            },
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// POST /session/{id}/run
pub async fn run(reg: Arc<Registry>, id: &str, req: Request<Incoming>) -> Resp {
    let body = match h::read_body(req.into_body()).await {
        Ok(b) => b,
        Err(e) => return bad(format!("error parsing request. {e}")),
    };
    let r: RunRequest = match h::decode_json(&body) {
        Ok(r) => r,
        Err(e) => return bad(format!("error parsing request. {e}")),
    };
    if r.command.is_empty() {
        return bad(
            "invalid request. Key: 'RunInSessionRequest.Command' Error:Field validation for \
             'Command' failed on the 'required' tag"
                .into(),
        );
    }
    if r.timeout < 0 {
        return bad(
            "invalid request. Key: 'RunInSessionRequest.Timeout' Error:Field validation for \
             'Timeout' failed on the 'gte' tag"
                .into(),
        );
    }
    let req_cwd = r.cwd.clone().unwrap_or_default();
    let req_cwd = if req_cwd.is_empty() {
        String::new()
    } else {
        let resolved = match paths::expand(&req_cwd) {
            Ok(c) => c,
            Err(e) => {
                return bad(format!(
                    "invalid request. cannot resolve working directory {req_cwd:?}: {e}"
                ));
            }
        };
        match std::fs::metadata(&resolved) {
            Ok(m) if m.is_dir() => resolved,
            Ok(_) => {
                return bad(format!(
                    "invalid request. working directory path is not a directory: {req_cwd}"
                ));
            }
            Err(e) => {
                return bad(format!(
                    "invalid request. working directory does not exist: {req_cwd}: stat {resolved}: {}",
                    sys::errno_text(&e)
                ));
            }
        }
    };
    let Some(sess) = reg.get(id) else {
        return h::runtime_error("error running in session. context not found");
    };
    let (env, cwd) = {
        let s = sess.lock().unwrap();
        let cwd = if req_cwd.is_empty() {
            s.cwd.clone()
        } else {
            req_cwd
        };
        (s.env.clone(), cwd)
    };
    let wait = if r.timeout > 0 {
        r.timeout as u64
    } else {
        24 * 3600 * 1000
    };
    let text = script(&r.command, &env, &cwd);
    let (reader, writer) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => {
            return h::runtime_error(format!(
                "error running in session. stdout pipe: {}",
                sys::errno_text(&e)
            ));
        }
    };
    let writer2 = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return h::runtime_error(format!("error running in session. {e}")),
    };
    let mut cmd = tokio::process::Command::new("bash");
    cmd.args(["--noprofile", "--norc", "-c", &text])
        .stdin(std::process::Stdio::null())
        .stdout(writer)
        .stderr(writer2)
        .process_group(0)
        .kill_on_drop(false);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return h::runtime_error(format!(
                "error running in session. start bash: {}",
                sys::errno_text(&e)
            ));
        }
    };
    // Our copies of the write end must go, or the reader never sees EOF.
    drop(cmd);
    let pgid = child.id().unwrap_or(0) as i32;
    sess.lock().unwrap().pgid = pgid;

    let (tx, rx) = mpsc::unbounded_channel();
    let id = id.to_string();
    tokio::spawn(async move {
        let started = Instant::now();
        let _ = tx.send(frame("init", &id, 0, None));
        let (line_tx, mut lines) = mpsc::unbounded_channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(reader).split(b'\n') {
                let Ok(line) = line else { break };
                if line_tx
                    .send(String::from_utf8_lossy(&line).into_owned())
                    .is_err()
                {
                    break;
                }
            }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait);
        let (mut env_lines, mut in_env, mut pwd, mut exit) = (Vec::new(), false, None, None);
        let mut timed_out = false;
        let mut gone = false;
        loop {
            tokio::select! {
                line = lines.recv() => {
                    let Some(line) = line else { break };
                    if line == ENV_START {
                        in_env = true;
                    } else if line == ENV_END {
                        in_env = false;
                    } else if let Some(code) = line.strip_prefix(EXIT_PREFIX) {
                        exit = code.parse::<i32>().ok();
                    } else if let Some(dir) = line.strip_prefix(PWD_PREFIX) {
                        pwd = Some(dir.to_string());
                    } else if in_env {
                        env_lines.push(line);
                    } else if !line.is_empty() {
                        let _ = tx.send(frame("stdout", &line, 0, None));
                    }
                }
                _ = tokio::time::sleep_until(deadline), if !timed_out && !gone => {
                    timed_out = true;
                    let _ = sys::kill_group(pgid, libc::SIGKILL);
                }
                _ = tx.closed(), if !gone && !timed_out => {
                    gone = true;
                    let _ = sys::kill_group(pgid, libc::SIGKILL);
                }
            }
        }
        let status = child.wait().await;
        {
            let mut s = sess.lock().unwrap();
            if s.pgid == pgid {
                s.pgid = 0;
            }
        }
        if timed_out {
            let _ = tx.send(late_error(format!(
                "error running in session. timeout after {}",
                go_duration(wait)
            )));
            return;
        }
        if gone {
            return;
        }
        let updated: BTreeMap<String, String> = env_lines
            .iter()
            .filter_map(|l| parse_export(l))
            .filter(|(k, v)| !NOT_PERSISTED.contains(&k.as_str()) && v.len() <= MAX_VALUE)
            .collect();
        {
            let mut s = sess.lock().unwrap();
            if !updated.is_empty() {
                s.env = updated;
            }
            if let Some(dir) = pwd.filter(|d| !d.is_empty()) {
                s.cwd = dir;
            }
        }
        let code = exit.unwrap_or_else(|| match &status {
            Ok(s) => s.code().unwrap_or(-1),
            Err(_) => -1,
        });
        if code != 0 {
            let msg = match &status {
                Ok(s) if s.code().is_some_and(|c| c != 0) => format!("exit status {}", code),
                Ok(s) if s.signal().is_some() => crate::command::describe(*s).1,
                _ => format!("command exited with code {code}"),
            };
            let _ = tx.send(error_frame(code.to_string(), msg));
            return;
        }
        let _ = tx.send(frame(
            "execution_complete",
            "",
            started.elapsed().as_millis() as i64,
            None,
        ));
    });
    sse_response(rx)
}

/// DELETE /session/{id}
pub fn delete(reg: &Registry, id: &str) -> Resp {
    let Some(sess) = reg.sessions.lock().unwrap().remove(id) else {
        return h::error(
            StatusCode::NOT_FOUND,
            CONTEXT_NOT_FOUND,
            format!("session {id} not found"),
        );
    };
    let pgid = std::mem::take(&mut sess.lock().unwrap().pgid);
    if pgid > 0 {
        let _ = sys::kill_group(pgid, libc::SIGKILL);
    }
    h::ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_go() {
        assert_eq!(go_duration(2000), "2s");
        assert_eq!(go_duration(1500), "1.5s");
        assert_eq!(go_duration(250), "250ms");
        assert_eq!(go_duration(24 * 3600 * 1000), "24h0m0s");
        assert_eq!(go_duration(61_000), "1m1s");
    }

    #[test]
    fn export_lines() {
        assert_eq!(
            parse_export(r#"declare -x FOO="a \"b\" c""#),
            Some(("FOO".into(), r#"a "b" c"#.into()))
        );
        assert_eq!(
            parse_export("declare -x EMPTY"),
            Some(("EMPTY".into(), "".into()))
        );
        // bash escapes `$`; Go's Unquote fails and the quotes are trimmed.
        assert_eq!(
            parse_export(r#"declare -x P="\$HOME""#),
            Some(("P".into(), r"\$HOME".into()))
        );
        assert_eq!(parse_export("declare -f fn"), None);
    }
}
