//! Foreground commands: `POST /command` and its event stream, read by the
//! shared machine (crate::event_stream) through [`CommandEvents`].

use crate::bindings::exports::abx::epp::infra::{CommandEvent, CommandExit, CommandRequest};
use crate::error::{self, Kind, Result, invalid};
use crate::event_stream::{Clock, EventStream, Failure, Mapping, Source, Step, stream_timeouts};
use crate::execd::Execd;
use crate::exit_code;
use crate::lines::{self, Evidence, Lines};
use crate::models::{ExecEvent, RunCommand};
use crate::sse::FrameReader;
use crate::undo::Token;
use crate::users::{self, User};
use serde::Serialize;
use std::collections::BTreeMap;

/// `POST /command` with the user to run as (execd's `uid`; it takes the
/// primary group and supplementary groups from the user's entry itself).
#[derive(Serialize)]
struct AsUser<'a> {
    #[serde(flatten)]
    run: RunCommand<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<u32>,
}

/// Checks a request before anything is sent.
fn check(req: &CommandRequest) -> Result<()> {
    if req.cmd.trim().is_empty() {
        return Err(invalid("`cmd` is empty; give a shell command line"));
    }
    for (key, _) in &req.envs {
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            return Err(invalid(format!(
                "`{key}` is not a valid environment variable name"
            )));
        }
    }
    if req.timeout_ms == Some(0) {
        return Err(invalid("`timeout` must be positive"));
    }
    Ok(())
}

/// The `POST /command` body of a checked request, run as `user` if given
/// (with the user's `HOME`, `USER` and `LOGNAME` unless `envs` sets them).
fn body(req: &CommandRequest, background: bool, user: Option<&User>) -> Vec<u8> {
    let mut envs: BTreeMap<&str, &str> = req
        .envs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if let Some(user) = user {
        envs.extend(user.identity_env(&req.envs));
    }
    let run = AsUser {
        run: RunCommand {
            command: &req.cmd,
            cwd: req.cwd.as_deref(),
            background,
            timeout: req.timeout_ms,
            envs,
        },
        uid: user.map(|u| u.uid),
    };
    serde_json::to_vec(&run).expect("serialisable")
}

/// Sends `POST /command` and returns its event stream.
pub(super) fn post(
    execd: &mut Execd,
    req: &CommandRequest,
    background: bool,
) -> Result<FrameReader> {
    check(req)?;
    let user = users::of_request(execd, req.user.as_deref())?;
    let body = body(req, background, user.as_ref());
    let timeouts = stream_timeouts(req.timeout_ms);
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
                crate::time::seconds(ms)
            )),
            _ => e,
        })?;
    let resp = execd.check(resp, "the command")?;
    Ok(FrameReader::new(resp.into_reader()))
}

/// How `/command`'s events become a command's.
pub struct CommandEvents {
    sandbox_id: String,
    target: String,
    /// How this sandbox's execd sends lines, once known.
    lines: Lines,
    /// Whether an unclear event may run the probe (not in the probe itself,
    /// nor after it found nothing clear: then events are taken as they come,
    /// which is exact on execd 1.1.1).
    may_probe: bool,
    clock: Clock,
}

impl CommandEvents {
    /// The output an event's text stands for: the text itself on execd ≥ 1.1.1,
    /// the line with its `\n` back on older execd (crate::lines).
    fn output(&mut self, text: String) -> String {
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
            (Lines::Unknown, Evidence::Ambiguous) if self.may_probe => {
                self.may_probe = false;
                if let Some(kind) = probe_lines(&self.sandbox_id) {
                    self.lines = kind;
                }
            }
            _ => {}
        }
        lines::output(self.lines, text)
    }
}

impl Mapping for CommandEvents {
    type Event = CommandEvent;
    const WHAT: &'static str = "the command";

    fn target(&self) -> String {
        self.target.clone()
    }

    fn map(
        &mut self,
        event: ExecEvent,
        out: &mut Vec<CommandEvent>,
    ) -> std::result::Result<Step, Failure> {
        let text = event.text.unwrap_or_default();
        match event.kind.as_str() {
            "init" => {
                out.push(CommandEvent::Started(text.clone()));
                return Ok(Step::Started(text));
            }
            "stdout" => out.push(CommandEvent::Stdout(self.output(text))),
            "stderr" => out.push(CommandEvent::Stderr(self.output(text))),
            "execution_complete" => {
                out.push(CommandEvent::Exited(CommandExit {
                    exit_code: 0,
                    error: None,
                }));
                return Ok(Step::End);
            }
            "error" => {
                let e = event.error.unwrap_or_default();
                // execd kills a command at its timeout: the kill is the timeout's.
                if exit_code::by_signal(&e) && self.clock.passed() {
                    return Err(Failure::ended(error::timed_out(format!(
                        "the command in {} ran longer than its timeout of {} s and was killed",
                        self.target,
                        self.clock.seconds()
                    ))));
                }
                out.push(CommandEvent::Exited(exit_code::of_error(e)));
                return Ok(Step::End);
            }
            _ => {}
        }
        Ok(Step::Go)
    }

    fn refused(&mut self, _message: &str) -> Option<Failure> {
        None
    }

    fn at_end(&mut self, _out: &mut Vec<CommandEvent>) -> bool {
        false
    }

    /// execd does not stop a foreground command whose client went away: a
    /// failed request kills it, unless it ended (crate::undo).
    fn token(&self, started: &str) -> Option<Token> {
        Some(Token::Command {
            sandbox_id: self.sandbox_id.clone(),
            command_id: started.to_string(),
        })
    }

    fn lost(&self) -> String {
        format!(
            "the command stream from {} ended before the command finished (connection lost); \
             the command may still be running: check commands.status",
            self.target
        )
    }
}

/// A foreground command in `execd`, once `POST /command` answered.
fn follow(
    execd: &Execd,
    reader: FrameReader,
    lines: Lines,
    may_probe: bool,
    clock: Clock,
) -> EventStream<CommandEvents> {
    let mapping = CommandEvents {
        sandbox_id: execd.sandbox_id.clone(),
        target: execd.target().to_string(),
        lines,
        may_probe,
        clock,
    };
    EventStream::new(reader, &execd.sandbox_id, mapping)
}

/// Starts a foreground command.
pub fn run(req: CommandRequest) -> Result<EventStream<CommandEvents>> {
    start(&req, lines::remembered(&req.sandbox_id), true)
}

fn start(
    req: &CommandRequest,
    lines: Lines,
    may_probe: bool,
) -> Result<EventStream<CommandEvents>> {
    let mut execd = Execd::connect(&req.sandbox_id)?;
    let clock = Clock::start(req.timeout_ms);
    let reader = post(&mut execd, req, false)?;
    Ok(follow(&execd, reader, lines, may_probe, clock))
}

/// A helper command's end: exit code, stdout, stderr.
pub type Outcome = (i32, String, String);

/// Runs `cmd` to its end with output read as `lines` says.
fn collect(
    sandbox_id: &str,
    cmd: &str,
    timeout_ms: u64,
    lines: Lines,
    may_probe: bool,
) -> Result<Outcome> {
    let req = CommandRequest {
        sandbox_id: sandbox_id.to_string(),
        cmd: cmd.to_string(),
        cwd: None,
        envs: Vec::new(),
        timeout_ms: Some(timeout_ms),
        user: None,
    };
    let mut stream = start(&req, lines, may_probe)?;
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

/// Runs a helper command (process.list, code.languages…) to its end.
pub fn run_to_end(sandbox_id: &str, cmd: &str, timeout_ms: u64) -> Result<Outcome> {
    collect(
        sandbox_id,
        cmd,
        timeout_ms,
        lines::remembered(sandbox_id),
        true,
    )
}

/// Learns how the sandbox's execd sends output lines by running `echo x`
/// (crate::lines), and remembers it. `None` when the probe says nothing clear.
fn probe_lines(sandbox_id: &str) -> Option<Lines> {
    // Read raw: the events' text as execd sent it is what the probe judges.
    let (code, stdout, _) = collect(sandbox_id, "echo x", 10_000, Lines::Raw, false).ok()?;
    let kind = lines::from_probe(&stdout).filter(|_| code == 0)?;
    lines::remember(sandbox_id, kind);
    Some(kind)
}
