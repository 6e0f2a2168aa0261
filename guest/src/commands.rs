//! exec.run and exec.stream over execd's `POST /command`, plus background
//! commands, status, logs and interrupt.

use crate::bindings::exports::abx::epp::infra::{
    CommandEvent, CommandExit, CommandLogs, CommandRequest, CommandStatus,
};
use crate::error::{self, Error, Kind, Result, invalid, not_found};
use crate::execd::Execd;
use crate::http::{Timeouts, encode};
use crate::lifecycle::{Lifecycle, check_id};
use crate::lines::{self, Evidence, Lines};
use crate::models::{self, ExecEvent, RunCommand};
use crate::refusal::{self, Refusal};
use crate::sse::{Frame, FrameReader};
use crate::time::{monotonic_ms, sleep_ms};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

fn body(req: &CommandRequest, background: bool) -> Result<Vec<u8>> {
    if req.cmd.trim().is_empty() {
        return Err(invalid("`cmd` is empty; give a shell command line"));
    }
    let envs: BTreeMap<&str, &str> = req
        .envs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for key in envs.keys() {
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            return Err(invalid(format!(
                "`{key}` is not a valid environment variable name"
            )));
        }
    }
    if req.timeout_ms == Some(0) {
        return Err(invalid("`timeout` must be positive"));
    }
    let run = RunCommand {
        command: &req.cmd,
        cwd: req.cwd.as_deref(),
        background,
        timeout: req.timeout_ms,
        envs,
    };
    Ok(serde_json::to_vec(&run).expect("serialisable"))
}

/// How long past its own timeout a command may stay silent: execd answers at
/// once (`init`), pings every 3 s and reports the kill right after the timeout.
const TIMEOUT_SLACK: Duration = Duration::from_secs(2);

/// The waits of `POST /command`. Pings arrive every 3 s once the command runs,
/// so a long silence means trouble; with a command timeout, no wait (connect,
/// first byte, between bytes) is longer than that timeout plus a little slack,
/// so a sandbox that does not answer (e.g. paused) fails in about that time.
pub(crate) fn command_timeouts(timeout_ms: Option<u64>) -> Timeouts {
    let t = Timeouts::API.between_bytes(Duration::from_secs(120));
    let Some(ms) = timeout_ms else {
        return t;
    };
    let bound = Duration::from_millis(ms) + TIMEOUT_SLACK;
    Timeouts {
        connect: t.connect.min(bound),
        first_byte: t.first_byte.min(bound),
        between_bytes: t.between_bytes.min(bound),
    }
}

/// Starts `POST /command` and returns its event stream.
fn start(execd: &mut Execd, req: &CommandRequest, background: bool) -> Result<FrameReader> {
    let body = body(req, background)?;
    let timeouts = command_timeouts(req.timeout_ms);
    let resp = execd
        .send(
            |e| {
                Ok(e.request("POST", "/command")?
                    .header("content-type", "application/json")
                    .header("accept", "text/event-stream")
                    .timeouts(timeouts))
            },
            &body,
        )
        .map_err(|e| match req.timeout_ms {
            Some(ms) if e.is(Kind::TimedOut) => error::timed_out(format!(
                "sandbox {} did not answer the command within its timeout of {} s; a paused \
             sandbox does not answer (resume it with sandbox.resume), else retry or raise \
             the timeout",
                req.sandbox_id,
                ms as f64 / 1000.0
            )),
            _ => e,
        })?;
    let resp = execd.check(resp, "the command")?;
    Ok(FrameReader::new(resp.into_reader()))
}

/// Learns how the sandbox's execd sends output lines by running `echo x`
/// (crate::lines), and remembers it. `None` when the probe says nothing clear.
fn probe_lines(sandbox_id: &str) -> Option<Lines> {
    let req = CommandRequest {
        sandbox_id: sandbox_id.to_string(),
        cmd: "echo x".to_string(),
        cwd: None,
        envs: Vec::new(),
        timeout_ms: Some(10_000),
    };
    let mut execd = Execd::connect(sandbox_id).ok()?;
    let mut reader = start(&mut execd, &req, false).ok()?;
    let mut stdout = String::new();
    let ok = loop {
        match reader.next() {
            Ok(Some(Ok(Frame::Event(e)))) => match e.kind.as_str() {
                "stdout" => stdout.push_str(e.text.as_deref().unwrap_or_default()),
                "execution_complete" => break true,
                "error" => break false,
                _ => {}
            },
            Ok(None) => break false,
            _ => break false,
        }
    };
    reader.close();
    let kind = lines::from_probe(&stdout).filter(|_| ok)?;
    lines::remember(sandbox_id, kind);
    Some(kind)
}

/// Go's names for signals, as execd reports a killed process (`signal: killed`).
const GO_SIGNALS: &[(&str, i32)] = &[
    ("hangup", 1),
    ("interrupt", 2),
    ("quit", 3),
    ("illegal instruction", 4),
    ("aborted", 6),
    ("bus error", 7),
    ("floating point exception", 8),
    ("killed", 9),
    ("user defined signal 1", 10),
    ("segmentation fault", 11),
    ("user defined signal 2", 12),
    ("broken pipe", 13),
    ("alarm clock", 14),
    ("terminated", 15),
];

/// The exit code `commands.status` reports: execd says -1 for a process killed by
/// a signal (its error names the signal); that becomes 128 + N as in `commands.run`.
fn status_exit_code(code: Option<i32>, error: Option<&str>) -> Option<i32> {
    match code {
        Some(-1) => Some(error.and_then(signal_exit_code).unwrap_or(-1)),
        other => other,
    }
}

/// `signal: killed` → 137, like a shell's `$?`.
fn signal_exit_code(detail: &str) -> Option<i32> {
    let name = detail.trim().strip_prefix("signal: ")?;
    let name = name.trim_end_matches(" (core dumped)");
    GO_SIGNALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, sig)| 128 + sig)
}

/// A foreground command's events: from `/command`'s (or a session run's) SSE, or
/// from a PTY in pipe mode for a command with stdin (crate::stdin).
pub enum CommandStream {
    Sse(RefCell<StreamState>),
    Pipe(crate::stdin::PipeStream),
}

pub struct StreamState {
    reader: FrameReader,
    sandbox_id: String,
    target: String,
    /// How this sandbox's execd sends lines, once known.
    lines: Lines,
    /// The probe found nothing clear: take events as they come (exact on 1.1.1).
    probe_failed: bool,
    finished: bool,
    timeout_ms: Option<u64>,
    started_ms: u64,
    /// A run in a bash session (crate::sessions): execd sends lines without their
    /// terminators, stderr merged into stdout, and reports a timeout as a bare error.
    session: Option<String>,
}

impl StreamState {
    /// The output an event's text stands for: the text itself on execd ≥ 1.1.1,
    /// the line with its `\n` back on older execd (crate::lines).
    fn output(&mut self, text: String) -> String {
        if self.session.is_some() {
            return lines::output(Lines::Stripped, text);
        }
        // Once the kind is known to be raw nothing can change it: skip the scan
        // (it would read every byte of a big output again).
        if self.lines == Lines::Raw {
            return text;
        }
        match (self.lines, lines::evidence(&text)) {
            // Only execd ≥ 1.1.1 sends a terminator next to other bytes.
            (Lines::Unknown | Lines::Stripped, Evidence::Raw) => {
                self.lines = Lines::Raw;
                lines::remember(&self.sandbox_id, Lines::Raw);
            }
            (Lines::Unknown, Evidence::Ambiguous) if !self.probe_failed => {
                match probe_lines(&self.sandbox_id) {
                    Some(kind) => self.lines = kind,
                    None => self.probe_failed = true,
                }
            }
            _ => {}
        }
        lines::output(self.lines, text)
    }

    /// Turns one execd event into EPP events (pings and unknown types give none).
    fn convert(&mut self, event: ExecEvent, out: &mut Vec<CommandEvent>) -> Result<()> {
        match event.kind.as_str() {
            "init" => out.push(CommandEvent::Started(event.text.unwrap_or_default())),
            "stdout" => {
                let text = self.output(event.text.unwrap_or_default());
                out.push(CommandEvent::Stdout(text));
            }
            "stderr" => {
                let text = self.output(event.text.unwrap_or_default());
                out.push(CommandEvent::Stderr(text));
            }
            "execution_complete" => {
                self.finished = true;
                out.push(CommandEvent::Exited(CommandExit {
                    exit_code: 0,
                    error: None,
                }));
            }
            "error" => {
                self.finished = true;
                let e = event.error.unwrap_or_default();
                let detail = e
                    .traceback
                    .first()
                    .cloned()
                    .unwrap_or_else(|| e.evalue.clone());
                match e.evalue.trim().parse::<i32>() {
                    Ok(-1) if self.timed_out() => {
                        return Err(error::timed_out(format!(
                            "the command in {} ran longer than its timeout of {} s and was killed",
                            self.target,
                            self.timeout_ms.unwrap_or_default() as f64 / 1000.0
                        )));
                    }
                    // Killed by a signal: report it as a shell would (128 + N).
                    Ok(-1) => out.push(CommandEvent::Exited(CommandExit {
                        exit_code: signal_exit_code(&detail).unwrap_or(-1),
                        error: Some(detail),
                    })),
                    Ok(code) => out.push(CommandEvent::Exited(CommandExit {
                        exit_code: code,
                        error: None,
                    })),
                    // The process never started: execd reports the reason as text.
                    Err(_) => out.push(CommandEvent::Exited(CommandExit {
                        exit_code: -1,
                        error: Some(format!("{}: {}", e.ename, e.evalue)),
                    })),
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn timed_out(&self) -> bool {
        self.timeout_ms
            .is_some_and(|t| monotonic_ms().saturating_sub(self.started_ms) + 50 >= t)
    }

    fn next_batch(&mut self) -> Result<Option<Vec<CommandEvent>>> {
        if self.finished {
            return Ok(None);
        }
        let mut out = Vec::new();
        // Block for the first event, then take what is already buffered.
        while out.is_empty() || (!self.finished && self.reader.has_buffered()) {
            let frame = match self.reader.next() {
                Ok(frame) => frame,
                Err(t) => {
                    self.finished = true;
                    return Err(broken_off(
                        &self.sandbox_id,
                        "the command",
                        error::broken_body(t, &self.target),
                    ));
                }
            };
            match frame {
                Some(Ok(Frame::Event(event))) => self.convert(event, &mut out)?,
                Some(Ok(Frame::Error { code, message })) => {
                    self.finished = true;
                    if let Some(session) = &self.session
                        && refusal::of_frame(&message) == Refusal::SessionTimeout
                    {
                        return Err(error::timed_out(format!(
                            "the run in session {session} ({}) ran longer than its timeout of {} s; \
                             execd killed its whole process group (the session stays usable)",
                            self.target,
                            self.timeout_ms.unwrap_or_default() as f64 / 1000.0
                        )));
                    }
                    return Err(error::upstream(format!(
                        "{} reported {code}: {message}",
                        self.target
                    )));
                }
                Some(Err(bad)) => {
                    self.finished = true;
                    return Err(error::upstream(format!("{}: {bad}", self.target)));
                }
                None => {
                    self.finished = true;
                    if out.is_empty() {
                        return Err(broken_off(
                            &self.sandbox_id,
                            "the command",
                            error::upstream(format!(
                                "the command stream from {} ended before the command finished (connection lost); \
                             the command may still be running: check commands.status",
                                self.target
                            )),
                        ));
                    }
                    break;
                }
            }
            if self.finished {
                break;
            }
        }
        if self.finished {
            // Don't wait for execd's grace period after the last event.
            self.reader.close();
        }
        Ok(Some(out))
    }
}

/// A stream (of `what`: "the command", "the code") that broke off with `e`:
/// said more precisely when the sandbox itself was deleted or stopped. While
/// the server still shows it running but its execd does not answer, it may be
/// going away: asked again, for about a second. A lost connection to a live
/// sandbox stays `e`.
pub(crate) fn broken_off(sandbox_id: &str, what: &str, e: Error) -> Error {
    if e.is(Kind::TimedOut) {
        return e;
    }
    let Ok(lifecycle) = Lifecycle::new() else {
        return e;
    };
    let execd_answers = || {
        Execd::connect(sandbox_id)
            .and_then(|execd| execd.ping())
            .unwrap_or(false)
    };
    for attempt in 0..4 {
        match lifecycle.get(sandbox_id) {
            Err(gone) if gone.is(Kind::NotFound) => {
                Execd::forget(sandbox_id);
                return not_found(format!(
                    "sandbox {sandbox_id} was deleted (or expired) while {what} ran; its output ends here"
                ));
            }
            Ok(sandbox) if sandbox.status.state != "Running" => {
                Execd::forget(sandbox_id);
                let why = sandbox
                    .status
                    .message
                    .or(sandbox.status.reason)
                    .unwrap_or_default();
                return error::upstream(format!(
                    "sandbox {sandbox_id} stopped while {what} ran (state {}: {why}); {what}'s \
                     outcome is unknown",
                    sandbox.status.state
                ));
            }
            Ok(_) if attempt < 3 && !execd_answers() => sleep_ms(400),
            _ => return e,
        }
    }
    e
}

impl CommandStream {
    pub fn next(&self) -> Result<Option<Vec<CommandEvent>>> {
        match self {
            CommandStream::Sse(inner) => inner.borrow_mut().next_batch(),
            CommandStream::Pipe(pipe) => pipe.next(),
        }
    }
}

pub fn run(req: CommandRequest) -> Result<CommandStream> {
    let mut execd = Execd::connect(&req.sandbox_id)?;
    // execd's timeout clock starts when it gets the request, before its answer
    // arrives: count from here, or a slow answer makes a timeout look like a kill.
    let started_ms = monotonic_ms();
    let reader = start(&mut execd, &req, false)?;
    Ok(CommandStream::Sse(RefCell::new(StreamState {
        reader,
        sandbox_id: req.sandbox_id.clone(),
        target: execd.target().to_string(),
        lines: lines::remembered(&req.sandbox_id),
        probe_failed: false,
        finished: false,
        timeout_ms: req.timeout_ms,
        started_ms,
        session: None,
    })))
}

/// Follows a run in a bash session (`POST /session/{id}/run`).
pub fn follow_session(
    reader: FrameReader,
    sandbox_id: &str,
    session_id: &str,
    target: String,
    timeout_ms: Option<u64>,
    started_ms: u64,
) -> CommandStream {
    CommandStream::Sse(RefCell::new(StreamState {
        reader,
        sandbox_id: sandbox_id.to_string(),
        target,
        lines: Lines::Stripped,
        probe_failed: true,
        finished: false,
        timeout_ms,
        started_ms,
        session: Some(session_id.to_string()),
    }))
}

/// A background command: `init` then `execution_complete` right away.
pub fn start_background(req: CommandRequest) -> Result<String> {
    let mut execd = Execd::connect(&req.sandbox_id)?;
    let mut reader = start(&mut execd, &req, true)?;
    let mut id = None;
    loop {
        match reader
            .next()
            .map_err(|t| error::broken_body(t, execd.target()))?
        {
            Some(Ok(Frame::Event(e))) if e.kind == "init" => id = e.text,
            Some(Ok(Frame::Event(e))) if e.kind == "execution_complete" => break,
            Some(Ok(Frame::Event(e))) if e.kind == "error" => {
                let e = e.error.unwrap_or_default();
                return Err(error::upstream(format!(
                    "the background command failed to start: {} {}",
                    e.ename, e.evalue
                )));
            }
            Some(Ok(Frame::Event(_))) => {}
            Some(Ok(Frame::Error { code, message })) => {
                return Err(error::upstream(format!(
                    "the background command failed to start: {code}: {message}"
                )));
            }
            Some(Err(bad)) => return Err(error::upstream(bad)),
            None => break,
        }
    }
    reader.close();
    id.ok_or_else(|| {
        error::upstream(format!(
            "{} did not report the background command's id",
            execd.target()
        ))
    })
}

pub fn kill(sandbox_id: &str, command_id: &str) -> Result<()> {
    if let Some(pty_id) = crate::stdin::pty_of(command_id) {
        return crate::stdin::kill(sandbox_id, pty_id);
    }
    check_id("command", command_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let path = format!("/command?id={}", encode(command_id));
    let resp = execd.send(|e| e.request("DELETE", &path), &[])?;
    if resp.status == 500 {
        let body = resp.read_all(64 * 1024).unwrap_or_default();
        // execd's words for a command that is unknown or already finished.
        if refusal::of_answer(500, &body) == Refusal::NotRunning {
            return Err(not_found(format!(
                "command {command_id} is not running in sandbox {sandbox_id} (it finished, or the id is unknown)"
            )));
        }
        return Err(error::status(
            500,
            &body,
            execd.target(),
            &format!("command {command_id}"),
        ));
    }
    execd
        .check(resp, &format!("command {command_id}"))
        .map(drop)
}

pub fn status(sandbox_id: &str, command_id: &str) -> Result<CommandStatus> {
    if let Some(pty_id) = crate::stdin::pty_of(command_id) {
        // execd keeps no exit code or times for a terminal.
        return Ok(CommandStatus {
            command_id: command_id.to_string(),
            running: crate::stdin::running(sandbox_id, pty_id)?,
            exit_code: None,
            error: None,
            started_at: None,
            finished_at: None,
        });
    }
    check_id("command", command_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let path = format!("/command/status/{command_id}");
    let subject = format!("command {command_id}");
    let resp = execd.send(|e| e.request("GET", &path), &[])?;
    let s: models::CommandStatus = execd.json(execd.check(resp, &subject)?, &subject)?;
    let error = s.error.filter(|e| !e.is_empty());
    Ok(CommandStatus {
        command_id: s.id.unwrap_or_else(|| command_id.to_string()),
        running: s.running,
        exit_code: status_exit_code(s.exit_code, error.as_deref()),
        error,
        started_at: s.started_at,
        finished_at: s.finished_at,
    })
}

pub fn logs(sandbox_id: &str, command_id: &str, cursor: Option<u64>) -> Result<CommandLogs> {
    check_id("command", command_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let cursor = cursor.unwrap_or(0);
    let path = format!("/command/{command_id}/logs?cursor={cursor}");
    let subject = format!("command {command_id}");
    let resp = execd.send(|e| e.request("GET", &path), &[])?;
    if resp.status == 400 {
        return Err(not_found(format!(
            "no background command {command_id} in sandbox {sandbox_id} (logs exist only for background commands)"
        )));
    }
    let resp = execd.check(resp, &subject)?;
    let next = resp
        .header("execd-commands-tail-cursor")
        .and_then(|c| c.trim().parse::<u64>().ok());
    let body = resp
        .read_all(64 << 20)
        .map_err(|t| error::broken_body(t, execd.target()))?;
    let next = next.unwrap_or(cursor + body.len() as u64);
    Ok(CommandLogs {
        output: String::from_utf8_lossy(&body).into_owned(),
        cursor: next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_become_shell_exit_codes() {
        assert_eq!(signal_exit_code("signal: killed"), Some(137));
        assert_eq!(signal_exit_code("signal: terminated"), Some(143));
        assert_eq!(
            signal_exit_code("signal: segmentation fault (core dumped)"),
            Some(139)
        );
        assert_eq!(signal_exit_code("exit status 3"), None);
        // commands.status says the same as commands.run.
        assert_eq!(
            status_exit_code(Some(-1), Some("signal: killed")),
            Some(137)
        );
        assert_eq!(
            status_exit_code(Some(-1), Some("signal: terminated")),
            Some(143)
        );
        assert_eq!(status_exit_code(Some(-1), Some("odd")), Some(-1));
        assert_eq!(status_exit_code(Some(-1), None), Some(-1));
        assert_eq!(status_exit_code(Some(3), Some("exit status 3")), Some(3));
        assert_eq!(status_exit_code(None, None), None);
    }

    #[test]
    fn a_command_timeout_bounds_every_wait() {
        let t = command_timeouts(None);
        assert_eq!(
            (t.connect, t.first_byte, t.between_bytes),
            (
                Duration::from_secs(10),
                Duration::from_secs(60),
                Duration::from_secs(120)
            )
        );
        let t = command_timeouts(Some(5_000));
        assert_eq!(
            (t.connect, t.first_byte, t.between_bytes),
            (
                Duration::from_secs(7),
                Duration::from_secs(7),
                Duration::from_secs(7)
            )
        );
        let t = command_timeouts(Some(3_600_000));
        assert_eq!(
            (t.connect, t.first_byte, t.between_bytes),
            (
                Duration::from_secs(10),
                Duration::from_secs(60),
                Duration::from_secs(120)
            )
        );
    }
}

/// Runs a helper command to completion and returns (exit code, stdout, stderr).
pub fn run_to_end(sandbox_id: &str, cmd: &str, timeout_ms: u64) -> Result<(i32, String, String)> {
    let stream = run(CommandRequest {
        sandbox_id: sandbox_id.to_string(),
        cmd: cmd.to_string(),
        cwd: None,
        envs: Vec::new(),
        timeout_ms: Some(timeout_ms),
    })?;
    let (mut stdout, mut stderr) = (String::new(), String::new());
    while let Some(events) = stream.next()? {
        for event in events {
            match event {
                CommandEvent::Stdout(t) => stdout.push_str(&t),
                CommandEvent::Stderr(t) => stderr.push_str(&t),
                CommandEvent::Exited(exit) => return Ok((exit.exit_code, stdout, stderr)),
                CommandEvent::Started(_) => {}
            }
        }
    }
    Err(error::upstream(
        "the helper command ended without an exit status",
    ))
}
