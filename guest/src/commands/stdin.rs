//! Commands with stdin (`commands.run` with `stdin: true`): execd's `/command` has no
//! stdin, so these run through its PTY API in pipe mode (`POST /pty` with the command,
//! then the WebSocket `/pty/{id}/ws?pty=0`: no terminal, `0x01` stdout and `0x02`
//! stderr frames, stdin as `0x00` + bytes). The command id is `stdin-<pty id>`, so
//! `commands.send_input`, `commands.kill` and `commands.status` know where it runs.
//!
//! execd has no frame that closes stdin (EOF): a program that reads to the end of its
//! input never sees it; `commands.send_input` with no data says so (E4009).
//! execd allows one client per terminal, so only the host process that started the
//! command can write to it.

use crate::bindings::abx::epp::memo;
use crate::bindings::abx::epp::websocket::{self, Message};
use crate::bindings::exports::abx::epp::infra::{CommandEvent, CommandExit, CommandRequest};
use crate::error::{self, Result, invalid, not_found};
use crate::event_stream::Source;
use crate::execd::Execd;
use crate::lifecycle::check_id;
use crate::undo::Token;
use crate::utf8::Utf8Carry;

const PREFIX: &str = "stdin-";

/// The terminal behind a stdin command's id, if it is one.
pub fn pty_of(command_id: &str) -> Option<&str> {
    command_id.strip_prefix(PREFIX)
}

fn key(sandbox_id: &str, pty_id: &str) -> String {
    format!("stdin:{sandbox_id}:{pty_id}")
}

fn killed_key(key: &str) -> String {
    format!("killed:{key}")
}

pub struct PipeStream {
    key: String,
    command_id: String,
    /// Out from the start (crate::undo): settled once the command is over.
    token: Token,
    started: bool,
    exited: bool,
    /// Bytes of a UTF-8 sequence split across frames, per stream (stdout, stderr).
    partial: [Utf8Carry; 2],
}

impl PipeStream {
    fn text(&mut self, which: usize, bytes: &[u8]) -> String {
        self.partial[which].push(bytes)
    }

    fn leftovers(&mut self, out: &mut Vec<CommandEvent>) {
        for (i, carry) in self.partial.iter_mut().enumerate() {
            let text = carry.rest();
            if !text.is_empty() {
                out.push(if i == 0 {
                    CommandEvent::Stdout(text)
                } else {
                    CommandEvent::Stderr(text)
                });
            }
        }
    }

    /// Whether our own `commands.kill` sent the SIGKILL (marked before the DELETE).
    fn killed(&self) -> bool {
        memo::get(&killed_key(&self.key)).is_some()
    }

    /// After our own kill execd may close the terminal, or refuse to start it,
    /// before its exit frame arrives: that is the kill's exit, not a failure.
    /// The command is over: nothing of it is left to undo.
    fn over(&mut self) {
        self.exited = true;
        self.token.settled();
    }

    fn killed_exit(&mut self) -> Option<Vec<CommandEvent>> {
        if !self.killed() {
            return None;
        }
        self.over();
        let mut out = Vec::new();
        self.leftovers(&mut out);
        out.push(CommandEvent::Exited(CommandExit {
            exit_code: 137,
            error: Some("signal: killed".to_string()),
        }));
        Some(out)
    }
}

impl Source<CommandEvent> for PipeStream {
    fn next(&mut self) -> Result<Option<Vec<CommandEvent>>> {
        if self.exited {
            return Ok(None);
        }
        if !std::mem::replace(&mut self.started, true) {
            return Ok(Some(vec![CommandEvent::Started(self.command_id.clone())]));
        }
        loop {
            let Some(message) = websocket::receive(&self.key)? else {
                self.exited = true;
                if let Some(events) = self.killed_exit() {
                    return Ok(Some(events));
                }
                return Err(error::upstream(format!(
                    "the connection to command {} closed before it exited; check commands.status",
                    self.command_id
                )));
            };
            match message {
                Message::Binary(frame) => match frame.first() {
                    Some(1) | Some(2) | Some(3) if frame.len() > 1 => {
                        let (which, data) = match frame[0] {
                            1 => (0, &frame[1..]),
                            2 => (1, &frame[1..]),
                            _ if frame.len() > 9 => (0, &frame[9..]),
                            _ => continue,
                        };
                        let text = self.text(which, data);
                        if text.is_empty() {
                            continue;
                        }
                        return Ok(Some(vec![if which == 0 {
                            CommandEvent::Stdout(text)
                        } else {
                            CommandEvent::Stderr(text)
                        }]));
                    }
                    _ => continue,
                },
                Message::Text(text) => {
                    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
                        continue;
                    };
                    match v.get("type").and_then(|t| t.as_str()) {
                        Some("exit") => {
                            self.over();
                            let code = v.get("exit_code").and_then(|c| c.as_i64()).unwrap_or(-1);
                            let (exit_code, error) = match code {
                                -1 if self.killed() => (137, Some("signal: killed".to_string())),
                                -1 => (-1, Some("killed by a signal".to_string())),
                                c => (i32::try_from(c).unwrap_or(-1), None),
                            };
                            let mut out = Vec::new();
                            self.leftovers(&mut out);
                            out.push(CommandEvent::Exited(CommandExit { exit_code, error }));
                            websocket::close(&self.key, 1000, "done");
                            return Ok(Some(out));
                        }
                        Some("error") => {
                            self.exited = true;
                            // A kill racing the start ends as "pty session is closing".
                            if let Some(events) = self.killed_exit() {
                                return Ok(Some(events));
                            }
                            let code = v.get("code").and_then(|c| c.as_str()).unwrap_or("ERROR");
                            // The shell never started, or its terminal is gone.
                            if matches!(code, "START_FAILED" | "SESSION_GONE") {
                                self.token.settled();
                            }
                            let msg = v
                                .get("error")
                                .or(v.get("message"))
                                .and_then(|m| m.as_str())
                                .unwrap_or("");
                            return Err(error::upstream(format!(
                                "command {} failed: {code}: {msg}",
                                self.command_id
                            )));
                        }
                        _ => continue,
                    }
                }
                Message::Close((code, reason)) => {
                    self.exited = true;
                    if let Some(events) = self.killed_exit() {
                        return Ok(Some(events));
                    }
                    return Err(error::upstream(format!(
                        "the connection to command {} closed ({code} {reason}) before it exited",
                        self.command_id
                    )));
                }
            }
        }
    }
}

impl Drop for PipeStream {
    fn drop(&mut self) {
        websocket::close(&self.key, 1000, "detached");
    }
}

pub fn run(req: CommandRequest) -> Result<PipeStream> {
    if req.cmd.trim().is_empty() {
        return Err(invalid("`cmd` is empty; give a shell command line"));
    }
    if req.timeout_ms.is_some() {
        return Err(invalid(
            "`timeout` is not available with `stdin: true` (execd's pipe mode has none); \
             stop the command with commands.kill or epp.cancel",
        ));
    }
    let mut execd = Execd::connect(&req.sandbox_id)?;
    let user = crate::users::of_request(&mut execd, req.user.as_deref())?;
    let command = crate::pty::program(&req.envs, Some(&req.cmd), user.as_ref())?;
    let pty_id = crate::pty::open(
        &mut execd,
        req.cwd.as_deref(),
        command,
        "command",
        "the command",
    )?;
    let command_id = format!("{PREFIX}{pty_id}");
    // The terminal exists from here (its shell starts on attach): a request
    // that fails from now on removes it (`DELETE /pty/{id}`, commands.kill).
    let token = Token::Command {
        sandbox_id: req.sandbox_id.clone(),
        command_id: command_id.clone(),
    };
    token.made();
    let key = key(&req.sandbox_id, &pty_id);
    websocket::connect(
        &key,
        &execd.ws_url(&format!("/pty/{pty_id}/ws?pty=0")),
        execd.headers(),
    )?;
    Ok(PipeStream {
        key,
        command_id,
        token,
        started: false,
        exited: false,
        partial: Default::default(),
    })
}

pub fn send_input(sandbox_id: &str, command_id: &str, data: Vec<u8>) -> Result<()> {
    let Some(pty_id) = pty_of(command_id) else {
        check_id("command", command_id)?;
        return Err(error::conflict(format!(
            "command {command_id} was not started with stdin: run it with commands.run \
             {{\"stdin\": true, \"stream\": true}} to write to it"
        )));
    };
    check_id("command", pty_id)?;
    if data.is_empty() {
        return Err(error::conflict(
            "execd cannot close a command's stdin (its pipe mode has no end-of-input frame); \
             send the input the program expects, or stop it with commands.kill",
        ));
    }
    let key = key(sandbox_id, pty_id);
    if !websocket::is_open(&key) {
        return Err(not_found(format!(
            "command {command_id} of sandbox {sandbox_id} is not running in this host process \
             (it exited, or another process started it: only that one can write to it)"
        )));
    }
    // In frames of at most a MiB: a WebSocket peer may refuse a bigger one
    // (many cap frames at 16 MiB or less), and no copy of the whole input is
    // made beside the one the call brought.
    for piece in data.chunks(STDIN_FRAME) {
        let mut frame = Vec::with_capacity(piece.len() + 1);
        frame.push(0);
        frame.extend_from_slice(piece);
        websocket::send(&key, &Message::Binary(frame))?;
    }
    Ok(())
}

/// The most stdin bytes sent in one WebSocket frame.
const STDIN_FRAME: usize = 1 << 20;

pub fn kill(sandbox_id: &str, pty_id: &str) -> Result<()> {
    check_id("command", pty_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let killed = killed_key(&key(sandbox_id, pty_id));
    memo::put(&killed, "9", 60_000);
    let resp = execd.send(|e| e.request("DELETE", &format!("/pty/{pty_id}")), &[])?;
    if resp.status == 404 {
        memo::forget(&killed);
        return Err(not_found(format!(
            "command {PREFIX}{pty_id} is not known in sandbox {sandbox_id}"
        )));
    }
    execd
        .check(resp, &format!("command {PREFIX}{pty_id}"))
        .map(drop)
}

#[derive(serde::Deserialize)]
struct PtyStatus {
    running: bool,
}

/// execd keeps no exit code for a terminal: `running` only.
pub fn running(sandbox_id: &str, pty_id: &str) -> Result<bool> {
    check_id("command", pty_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let resp = execd.send(|e| e.request("GET", &format!("/pty/{pty_id}")), &[])?;
    if resp.status == 404 {
        return Err(not_found(format!(
            "command {PREFIX}{pty_id} is not known in sandbox {sandbox_id}"
        )));
    }
    let subject = format!("command {PREFIX}{pty_id}");
    let s: PtyStatus = execd.json(execd.check(resp, &subject)?, &subject)?;
    Ok(s.running)
}
