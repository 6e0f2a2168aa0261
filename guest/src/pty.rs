//! pty over execd's `POST /pty` and its WebSocket `/pty/{id}/ws`, through the
//! host's `websocket` import. The connection is keyed by sandbox and terminal,
//! so input, resize and kill (other requests) reach the same connection the
//! output stream reads. `pty.connect` attaches from any process with
//! `?takeover=1&since=N`: execd replays what it kept (a `0x03` frame) and
//! closes the previous holder's connection with 4001 `TAKEN_OVER`.

use crate::bindings::abx::epp::memo;
use crate::bindings::abx::epp::websocket::{self, Message};
use crate::bindings::exports::abx::epp::infra::{PtyEvent, PtyRequest};
use crate::error::{self, Error, Kind, Result, invalid, not_found};
use crate::execd::Execd;
use crate::lifecycle::check_id;
use crate::models::PtyCreated;
use crate::shell;
use crate::users::{self, User};
use std::cell::Cell;

/// The keys this host process may hold a terminal's connection under.
/// `pty.create` attaches under the first; `pty.connect` under the one not
/// open, so the stream it replaces (in this process) never shares a key with
/// it: that stream's end (its close, its drop) touches only its own key.
fn keys(sandbox_id: &str, pty_id: &str) -> [String; 2] {
    let first = format!("pty:{sandbox_id}:{pty_id}");
    let second = format!("{first}:2");
    [first, second]
}

/// Set (host-wide) just before `pty.kill` asks execd to SIGKILL a terminal, so the
/// stream that reports its end knows the signal.
fn killed_key(sandbox_id: &str, pty_id: &str) -> String {
    format!("killed:pty:{sandbox_id}:{pty_id}")
}

/// Set (host-wide) on the key of a connection a `pty.connect` of this process
/// replaces, so its stream reports the take-over whatever close code reaches it.
fn taken_key(key: &str) -> String {
    format!("taken:{key}")
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

/// The program execd should run for a terminal or a stdin command: `cmd`, or
/// an interactive shell, with the requested environment, as `user` if given
/// (crate::users::shell_as, which hands the variables to the user's shell
/// alone). None: execd's own shell as it is.
pub fn program(
    envs: &[(String, String)],
    cmd: Option<&str>,
    user: Option<&User>,
) -> Result<Option<String>> {
    shell::check_names(envs)?;
    let exports = shell::exports(envs);
    Ok(match (user, cmd) {
        (Some(user), cmd) => Some(users::shell_as(user, envs, cmd)),
        (None, Some(cmd)) => Some(format!("{exports}{cmd}")),
        (None, None) if exports.is_empty() => None,
        (None, None) => Some(format!("{exports}exec bash --norc --noprofile")),
    })
}

fn send_json(key: &str, value: serde_json::Value) -> Result<()> {
    Ok(websocket::send(key, &Message::Text(value.to_string()))?)
}

pub struct PtyStream {
    sandbox_id: String,
    pty_id: String,
    key: String,
    exited: Cell<bool>,
    /// The host forgot `key` already (the connection closed or failed), so
    /// dropping the stream must not close it again.
    gone: Cell<bool>,
}

impl PtyStream {
    fn new(sandbox_id: &str, pty_id: &str, key: String) -> PtyStream {
        PtyStream {
            sandbox_id: sandbox_id.to_string(),
            pty_id: pty_id.to_string(),
            key,
            exited: Cell::new(false),
            gone: Cell::new(false),
        }
    }

    pub fn next(&self) -> Result<Option<PtyEvent>> {
        if self.exited.get() {
            return Ok(None);
        }
        loop {
            let message = match websocket::receive(&self.key) {
                Ok(Some(message)) => message,
                Ok(None) => return self.closed(None),
                Err(e) => {
                    self.closed(None)?;
                    return Err(e.into());
                }
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
                            let killed =
                                memo::get(&killed_key(&self.sandbox_id, &self.pty_id)).is_some();
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
                                "terminal {} reported {code}: {message}",
                                self.pty_id
                            )));
                        }
                        _ => continue,
                    }
                }
                Message::Close((code, _)) => return self.closed(Some(code)),
            }
        }
    }

    /// The connection is over (closed with `code`, or gone): the end of the
    /// stream, or, when a `pty.connect` took the terminal (execd closes the
    /// replaced connection with 4001 `TAKEN_OVER`), an error that says so.
    fn closed(&self, code: Option<u16>) -> Result<Option<PtyEvent>> {
        self.gone.set(true);
        self.exited.set(true);
        let here = memo::get(&taken_key(&self.key)).is_some();
        if code != Some(4001) && !here {
            return Ok(None);
        }
        let by = if here {
            "a later pty.connect in this epp-host process"
        } else {
            "a pty.connect elsewhere (another epp-host process, or another client of execd)"
        };
        Err(error::conflict(format!(
            "terminal {} of sandbox {} was taken over by {by}: its output now goes there, and \
             its input and resizes come from there; the shell keeps running. To use it from \
             here again, call pty.connect here (which takes it back)",
            self.pty_id, self.sandbox_id
        )))
    }
}

impl Drop for PtyStream {
    fn drop(&mut self) {
        // Detach only: the shell keeps running until it exits or pty.kill.
        if !self.gone.get() {
            websocket::close(&self.key, 1000, "detached");
        }
    }
}

/// `GET /pty/{id}`: whether the terminal exists and its shell still runs
/// (attaching to one whose shell ended would make execd start a new shell).
fn check_running(execd: &mut Execd, pty_id: &str) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Status {
        running: bool,
    }
    let path = format!("/pty/{pty_id}");
    let resp = execd.send(|e| e.request("GET", &path), &[])?;
    let subject = format!("terminal {pty_id}");
    let status: Status = execd.json(
        execd
            .check(resp, &subject)
            .map_err(|e| unknown(e, &execd.sandbox_id, pty_id))?,
        &subject,
    )?;
    if !status.running {
        return Err(not_found(format!(
            "terminal {pty_id} of sandbox {} has exited (its shell ended); open a new one \
             with pty.create",
            execd.sandbox_id
        )));
    }
    Ok(())
}

/// A 404 about a terminal, in plain words (the HTTP answer kept).
fn unknown(e: Error, sandbox_id: &str, pty_id: &str) -> Error {
    if e.is(Kind::NotFound) || e.status() == Some(404) {
        return e.reworded(
            Kind::NotFound,
            format!(
                "terminal {pty_id} does not exist in sandbox {sandbox_id} (it was killed, or \
                 never opened there)"
            ),
        );
    }
    e
}

pub fn connect(sandbox_id: &str, pty_id: &str, since: Option<u64>) -> Result<(String, PtyStream)> {
    check_id("terminal", pty_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    check_running(&mut execd, pty_id)?;
    let [first, second] = keys(sandbox_id, pty_id);
    let (old, key) = if websocket::is_open(&first) {
        (Some(first), second)
    } else if websocket::is_open(&second) {
        (Some(second), first)
    } else {
        (None, first)
    };
    let mut path = format!("/pty/{pty_id}/ws?takeover=1");
    if let Some(since) = since {
        path.push_str(&format!("&since={since}"));
    }
    if let Some(old) = &old {
        memo::put(&taken_key(old), "1", 60_000);
    }
    memo::forget(&taken_key(&key));
    // execd evicts the holder (4001 TAKEN_OVER) when this one attaches; a
    // failed attach leaves the old connection as it was.
    if let Err(e) = websocket::connect(&key, &execd.ws_url(&path), execd.headers()) {
        if let Some(old) = &old {
            memo::forget(&taken_key(old));
        }
        return Err(unknown(e.into(), sandbox_id, pty_id));
    }
    // This process's old connection is closed here at once, so input and
    // resizes from now on find only the new one.
    if let Some(old) = &old {
        websocket::close(old, 1000, "taken over by pty.connect");
    }
    Ok((pty_id.to_string(), PtyStream::new(sandbox_id, pty_id, key)))
}

pub fn create(req: PtyRequest) -> Result<(String, PtyStream)> {
    if req.cols == 0 || req.rows == 0 {
        return Err(invalid("cols and rows must be at least 1"));
    }
    let mut execd = Execd::connect(&req.sandbox_id)?;
    let user = users::of_request(&mut execd, req.user.as_deref())?;
    let command = program(&req.envs, req.cmd.as_deref(), user.as_ref())?;
    let pty_id = open(
        &mut execd,
        req.cwd.as_deref(),
        command,
        "terminal",
        "the new terminal",
    )?;
    let [key, _] = keys(&req.sandbox_id, &pty_id);
    websocket::connect(
        &key,
        &execd.ws_url(&format!("/pty/{pty_id}/ws")),
        execd.headers(),
    )?;
    let stream = PtyStream::new(&req.sandbox_id, &pty_id, key.clone());
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

/// The key this process holds the terminal under.
fn attached(sandbox_id: &str, pty_id: &str) -> Result<String> {
    check_id("terminal", pty_id)?;
    keys(sandbox_id, pty_id)
        .into_iter()
        .find(|key| websocket::is_open(key))
        .ok_or_else(|| {
            not_found(format!(
                "terminal {pty_id} of sandbox {sandbox_id} is not attached to this host process \
                 (it exited, another process holds it, or it was opened elsewhere); \
                 pty.connect attaches it here"
            ))
        })
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
    let killed = killed_key(sandbox_id, pty_id);
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
    fn programs() {
        let envs = vec![("A".to_string(), "x y".to_string())];
        assert_eq!(
            program(&envs, None, None).unwrap().unwrap(),
            "export A='x y'; exec bash --norc --noprofile"
        );
        assert_eq!(program(&[], None, None).unwrap(), None);
        assert_eq!(
            program(&envs, Some("top"), None).unwrap().unwrap(),
            "export A='x y'; top"
        );
        assert!(program(&[("1A".into(), "x".into())], None, None).is_err());
        // As a user: nothing exported in root's shell; the variables are the
        // user's shell's (crate::users::shell_as).
        let user = User {
            name: "user".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/user".into(),
        };
        let line = program(&envs, Some("id -un"), Some(&user))
            .unwrap()
            .unwrap();
        assert!(line.starts_with("__epp_setpriv="), "{line}");
        assert!(
            line.ends_with("LOGNAME='user' A='x y' \"$BASH\" --norc --noprofile -c 'id -un'"),
            "{line}"
        );
        assert!(program(&[("1A".into(), "x".into())], None, Some(&user)).is_err());
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
