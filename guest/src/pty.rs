//! pty over execd's `POST /pty` and its WebSocket `/pty/{id}/ws`, through the
//! host's `websocket` import. The connection is keyed by sandbox and terminal,
//! so input, resize and kill (other requests) reach the same connection the
//! output stream reads.

use crate::bindings::abx::epp::memo;
use crate::bindings::abx::epp::websocket::{self, Message};
use crate::bindings::exports::abx::epp::infra::{PtyEvent, PtyRequest};
use crate::error::{self, Result, invalid, not_found};
use crate::execd::Execd;
use crate::lifecycle::check_id;
use crate::models::PtyCreated;
use std::cell::Cell;

fn key(sandbox_id: &str, pty_id: &str) -> String {
    format!("pty:{sandbox_id}:{pty_id}")
}

/// Set (host-wide) just before `pty.kill` asks execd to SIGKILL a terminal, so the
/// stream that reports its end knows the signal.
fn killed_key(key: &str) -> String {
    format!("killed:{key}")
}

/// execd reports a shell killed by a signal as `exit_code: -1`. When the signal
/// was our own `pty.kill` (SIGKILL) that becomes 137 (128 + 9) as in
/// `commands.run`; any other signal stays -1 (execd does not say which).
fn exit_code(code: i64, killed_by_us: bool) -> i32 {
    match code {
        -1 if killed_by_us => 128 + 9,
        c => i32::try_from(c).unwrap_or(-1),
    }
}

/// Single-quotes a value for bash.
fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// `export K='V'; ` for each variable: execd's PTY API takes no environment,
/// so terminals and stdin commands carry theirs in the command line.
pub fn exports(envs: &[(String, String)]) -> Result<String> {
    let mut exports = String::new();
    for (k, v) in envs {
        if k.is_empty()
            || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            || k.as_bytes()[0].is_ascii_digit()
        {
            return Err(invalid(format!(
                "`{k}` is not a valid environment variable name"
            )));
        }
        exports.push_str(&format!("export {k}={}; ", shell_quote(v)));
    }
    Ok(exports)
}

/// The program execd should run: the user's command, or an interactive shell,
/// with the requested environment.
fn command(req: &PtyRequest) -> Result<Option<String>> {
    let exports = exports(&req.envs)?;
    Ok(match (&req.cmd, exports.is_empty()) {
        (Some(cmd), true) => Some(cmd.clone()),
        (Some(cmd), false) => Some(format!("{exports}{cmd}")),
        (None, true) => None,
        (None, false) => Some(format!("{exports}exec bash --norc --noprofile")),
    })
}

fn send_json(key: &str, value: serde_json::Value) -> Result<()> {
    Ok(websocket::send(key, &Message::Text(value.to_string()))?)
}

pub struct PtyStream {
    key: String,
    exited: Cell<bool>,
}

impl PtyStream {
    pub fn next(&self) -> Result<Option<PtyEvent>> {
        if self.exited.get() {
            return Ok(None);
        }
        loop {
            let Some(message) = websocket::receive(&self.key)? else {
                return Ok(None);
            };
            match message {
                // 0x01 stdout, 0x02 stderr (pipe mode), 0x03 replay (8-byte offset first).
                Message::Binary(frame) => match frame.first() {
                    Some(1) | Some(2) if frame.len() > 1 => {
                        return Ok(Some(PtyEvent::Output(frame[1..].to_vec())));
                    }
                    Some(3) if frame.len() > 9 => {
                        return Ok(Some(PtyEvent::Output(frame[9..].to_vec())));
                    }
                    _ => continue,
                },
                Message::Text(text) => {
                    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
                        continue;
                    };
                    match value.get("type").and_then(|t| t.as_str()) {
                        Some("exit") => {
                            self.exited.set(true);
                            let code = value
                                .get("exit_code")
                                .and_then(|c| c.as_i64())
                                .unwrap_or(-1);
                            let killed = memo::get(&killed_key(&self.key)).is_some();
                            return Ok(Some(PtyEvent::Exited(exit_code(code, killed))));
                        }
                        Some("error") => {
                            let code = value
                                .get("code")
                                .and_then(|c| c.as_str())
                                .unwrap_or("ERROR");
                            let message = value
                                .get("error")
                                .or(value.get("message"))
                                .and_then(|m| m.as_str())
                                .unwrap_or("");
                            return Err(error::upstream(format!(
                                "the terminal reported {code}: {message}"
                            )));
                        }
                        _ => continue,
                    }
                }
                Message::Close((code, reason)) => {
                    if code == 4001 {
                        return Err(error::conflict(format!(
                            "another client took this terminal over ({reason})"
                        )));
                    }
                    return Ok(None);
                }
            }
        }
    }
}

impl Drop for PtyStream {
    fn drop(&mut self) {
        // Detach only: the shell keeps running until it exits or pty.kill.
        websocket::close(&self.key, 1000, "detached");
    }
}

pub fn connect(
    _sandbox_id: &str,
    _pty_id: &str,
    _since: Option<u64>,
) -> Result<(String, PtyStream)> {
    Err(error::unsupported("pty.connect", "not built yet"))
}

pub fn create(req: PtyRequest) -> Result<(String, PtyStream)> {
    if req.cols == 0 || req.rows == 0 {
        return Err(invalid("cols and rows must be at least 1"));
    }
    let mut execd = Execd::connect(&req.sandbox_id)?;
    let pty_id = open(
        &mut execd,
        req.cwd.as_deref(),
        command(&req)?,
        "terminal",
        "the new terminal",
    )?;
    let key = key(&req.sandbox_id, &pty_id);
    websocket::connect(
        &key,
        &execd.ws_url(&format!("/pty/{pty_id}/ws")),
        execd.headers(),
    )?;
    let stream = PtyStream {
        key: key.clone(),
        exited: Cell::new(false),
    };
    send_json(
        &key,
        serde_json::json!({"type": "resize", "cols": req.cols, "rows": req.rows}),
    )?;
    Ok((pty_id, stream))
}

/// `POST /pty`: a new terminal (or, in pipe mode, a stdin command) running
/// `command` (a shell without one) in `cwd`; answers its checked id. `what`
/// and `subject` name it in errors.
pub fn open(
    execd: &mut Execd,
    cwd: Option<&str>,
    command: Option<String>,
    what: &str,
    subject: &str,
) -> Result<String> {
    let mut body = serde_json::Map::new();
    if let Some(cwd) = cwd {
        body.insert("cwd".into(), cwd.into());
    }
    if let Some(cmd) = command {
        body.insert("command".into(), cmd.into());
    }
    let body = serde_json::Value::Object(body).to_string();
    let resp = execd.send(
        |e| {
            Ok(e.request("POST", "/pty")?
                .header("content-type", "application/json"))
        },
        body.as_bytes(),
    )?;
    // execd may write an error body before a 201 on internal failures: only 201 counts.
    if resp.status != 201 {
        let status = resp.status;
        let text = resp.read_all(64 * 1024).unwrap_or_default();
        return Err(error::status(status, &text, execd.target(), subject));
    }
    let created: PtyCreated = execd.json(resp, subject)?;
    check_id(what, &created.session_id)?;
    Ok(created.session_id)
}

fn attached(sandbox_id: &str, pty_id: &str) -> Result<String> {
    check_id("terminal", pty_id)?;
    let key = key(sandbox_id, pty_id);
    if !websocket::is_open(&key) {
        return Err(not_found(format!(
            "terminal {pty_id} of sandbox {sandbox_id} is not open in this host process \
             (it exited, or it was created by another process)"
        )));
    }
    Ok(key)
}

pub fn send_input(sandbox_id: &str, pty_id: &str, data: Vec<u8>) -> Result<()> {
    let key = attached(sandbox_id, pty_id)?;
    let mut frame = Vec::with_capacity(data.len() + 1);
    frame.push(0);
    frame.extend_from_slice(&data);
    Ok(websocket::send(&key, &Message::Binary(frame))?)
}

pub fn resize(sandbox_id: &str, pty_id: &str, cols: u16, rows: u16) -> Result<()> {
    if cols == 0 || rows == 0 {
        return Err(invalid("cols and rows must be at least 1"));
    }
    let key = attached(sandbox_id, pty_id)?;
    send_json(
        &key,
        serde_json::json!({"type": "resize", "cols": cols, "rows": rows}),
    )
}

pub fn kill(sandbox_id: &str, pty_id: &str) -> Result<()> {
    check_id("terminal", pty_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let path = format!("/pty/{pty_id}");
    // Before the request: the exit frame may reach the stream before execd answers.
    let killed = killed_key(&key(sandbox_id, pty_id));
    memo::put(&killed, "9", 60_000);
    let resp = execd.send(|e| e.request("DELETE", &path), &[]);
    let subject = format!("terminal {pty_id}");
    let outcome = resp.and_then(|resp| execd.check(resp, &subject).map(drop));
    if outcome.is_err() {
        memo::forget(&killed);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        let req = PtyRequest {
            sandbox_id: "s".into(),
            cols: 80,
            rows: 24,
            cwd: None,
            envs: vec![("A".into(), "x y".into())],
            cmd: None,
            user: None,
        };
        assert_eq!(
            command(&req).unwrap().unwrap(),
            "export A='x y'; exec bash --norc --noprofile"
        );
        let bad = PtyRequest {
            envs: vec![("1A".into(), "x".into())],
            ..req
        };
        assert!(command(&bad).is_err());
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(3, false), 3);
        assert_eq!(exit_code(0, true), 0);
        // Killed by our pty.kill (SIGKILL): 128 + 9, like commands.run.
        assert_eq!(exit_code(-1, true), 137);
        // Killed by some other signal: execd does not say which.
        assert_eq!(exit_code(-1, false), -1);
    }
}
