//! commands.connect: following a background command by its id, from any
//! process, from its first byte of output until it exits (E2B's
//! `commands.connect`). execd has no stream to attach to, so this polls what
//! it has: `GET /command/{id}/logs?cursor=` (stdout and stderr merged, a byte
//! cursor) and `GET /command/status/{id}`, 50 ms apart at first and backing off
//! to 500 ms while nothing new arrives. The command has ended when the status
//! says it no longer runs and a logs call made after that returns nothing.
//!
//! execd serves logs for background commands only; a foreground command, or
//! one with stdin (a terminal, one client at a time), cannot be attached.
//! No token (crate::undo): detaching must not stop the command. The request
//! has no deadline, so a sandbox that goes away ends it (crate::broken_off).

use super::stdin;
use crate::bindings::exports::abx::epp::infra::{CommandEvent, CommandExit};
use crate::broken_off;
use crate::error::{self, Error, Result, conflict, not_found};
use crate::event_stream::Source;
use crate::execd::Execd;
use crate::exit_code;
use crate::http::BodyReader;
use crate::lifecycle::check_id;
use crate::models;
use crate::refusal::{self, Refusal};
use crate::time::sleep_ms;
use crate::utf8::Utf8Carry;

/// The first wait between polls, after output arrived.
const FIRST_POLL_MS: u64 = 50;
/// The longest wait between polls, when nothing arrives.
const MAX_POLL_MS: u64 = 500;
/// The most output handed out at once (the rest of a long log follows).
const CHUNK: usize = 1 << 20;

/// What follows a logs answer that was read to its end.
#[derive(Debug)]
enum Then {
    /// The status had seen the command ended, and the logs held nothing more.
    Finish(CommandExit),
    /// Nothing new: wait before the next poll.
    Wait,
    /// Output came: poll again at once (there may be more).
    Poll,
}

fn after_logs(fresh: bool, exit: Option<CommandExit>) -> Then {
    match (fresh, exit) {
        (false, Some(exit)) => Then::Finish(exit),
        (false, None) => Then::Wait,
        // Output came after a status that saw the end: one more logs call must
        // come back empty first (a status taken after the output settles it).
        (true, _) => Then::Poll,
    }
}

/// The next wait between polls while nothing arrives.
fn backed_off(wait_ms: u64) -> u64 {
    (wait_ms * 2).min(MAX_POLL_MS)
}

/// A background command being followed.
pub struct Attached {
    execd: Execd,
    command_id: String,
    /// Bytes of the log handed out so far.
    cursor: u64,
    /// The logs answer being read.
    body: Option<BodyReader>,
    /// The body being read has had output.
    fresh: bool,
    /// The status said the command ended, just before the body being read
    /// was asked for: once that body holds nothing, this is the end.
    exit: Option<CommandExit>,
    text: Utf8Carry,
    wait_ms: u64,
    started: bool,
    ended: bool,
}

/// Attaches to `command_id`; its first logs answer is asked for at once, so a
/// command that cannot be attached is an error before any event.
pub fn connect(sandbox_id: &str, command_id: &str) -> Result<Attached> {
    if stdin::pty_of(command_id).is_some() {
        return Err(conflict(format!(
            "command {command_id} of sandbox {sandbox_id} runs with stdin, through a terminal \
             of execd's that serves one client (the host process that started it), so it \
             cannot be attached; its output goes to the commands.run stream that started it \
             (commands.status and commands.kill work on it)"
        )));
    }
    check_id("command", command_id)?;
    let mut attached = Attached {
        execd: Execd::connect(sandbox_id)?,
        command_id: command_id.to_string(),
        cursor: 0,
        body: None,
        fresh: false,
        exit: None,
        text: Utf8Carry::default(),
        wait_ms: FIRST_POLL_MS,
        started: false,
        ended: false,
    };
    attached.open_logs()?;
    Ok(attached)
}

impl Attached {
    fn subject(&self) -> String {
        format!("command {}", self.command_id)
    }

    /// `GET /command/{id}/logs?cursor=`: its body is read as output arrives.
    fn open_logs(&mut self) -> Result<()> {
        let path = format!("/command/{}/logs?cursor={}", self.command_id, self.cursor);
        let resp = self.execd.send(|e| e.request("GET", &path), &[])?;
        if resp.status == 400 {
            let body = resp.read_all(64 * 1024).unwrap_or_default();
            let (id, sandbox_id) = (&self.command_id, &self.execd.sandbox_id);
            return Err(match refusal::of_answer(400, &body) {
                Refusal::NotBackground => conflict(format!(
                    "command {id} of sandbox {sandbox_id} runs in the foreground: execd keeps \
                     output only of background commands (commands.run with background: true, \
                     then commands.logs or commands.connect), so it cannot be attached; its \
                     output goes to the commands.run stream that started it"
                )),
                _ => not_found(format!(
                    "no background command {id} in sandbox {sandbox_id} (execd forgets \
                     commands when it restarts, and finished ones after about a day)"
                )),
            });
        }
        let resp = self.execd.check(resp, &self.subject())?;
        self.body = Some(resp.into_reader());
        self.fresh = false;
        Ok(())
    }

    /// How the command ended, or none while it runs.
    fn status(&mut self) -> Result<Option<CommandExit>> {
        let path = format!("/command/status/{}", self.command_id);
        let subject = self.subject();
        let resp = self.execd.send(|e| e.request("GET", &path), &[])?;
        let s: models::CommandStatus = self
            .execd
            .json(self.execd.check(resp, &subject)?, &subject)?;
        if s.running {
            return Ok(None);
        }
        // As a command's `exited` says it: an error only when it did not just
        // exit (execd's status restates a plain exit as `exit status N`).
        let error = s
            .error
            .filter(|e| !e.is_empty() && !e.starts_with("exit status "));
        Ok(Some(CommandExit {
            exit_code: exit_code::of_status(s.exit_code, error.as_deref()).unwrap_or(-1),
            error,
        }))
    }

    /// The next piece of the logs answer being read; none once it ended.
    fn read(&mut self) -> Result<Option<Vec<u8>>> {
        let Some(body) = self.body.as_mut() else {
            return Ok(None);
        };
        match body.read(CHUNK) {
            Ok(Some(bytes)) => Ok(Some(bytes)),
            Ok(None) => {
                self.body = None;
                Ok(None)
            }
            Err(t) => {
                self.body = None;
                Err(error::broken_body(t, self.execd.target()))
            }
        }
    }

    /// The events up to the next output, or to the end.
    fn follow(&mut self) -> Result<Vec<CommandEvent>> {
        loop {
            while let Some(bytes) = self.read()? {
                self.cursor += bytes.len() as u64;
                self.fresh |= !bytes.is_empty();
                let text = self.text.push(&bytes);
                if !text.is_empty() {
                    self.wait_ms = FIRST_POLL_MS;
                    return Ok(vec![CommandEvent::Stdout(text)]);
                }
            }
            match after_logs(self.fresh, self.exit.take()) {
                Then::Finish(exit) => return Ok(self.finish(exit)),
                Then::Wait => {
                    sleep_ms(self.wait_ms);
                    self.wait_ms = backed_off(self.wait_ms);
                }
                Then::Poll => {}
            }
            // Status first: a logs call after a status that saw the command
            // ended holds all of its output.
            self.exit = self.status()?;
            self.open_logs()?;
        }
    }

    fn finish(&mut self, exit: CommandExit) -> Vec<CommandEvent> {
        self.ended = true;
        let rest = self.text.rest();
        let mut out = Vec::with_capacity(2);
        if !rest.is_empty() {
            out.push(CommandEvent::Stdout(rest));
        }
        out.push(CommandEvent::Exited(exit));
        out
    }

    /// A poll failed: said as what happened to the sandbox when it went away.
    fn lost(&self, e: Error) -> Error {
        let sandbox_id = &self.execd.sandbox_id;
        broken_off::after_break(sandbox_id)
            .error(sandbox_id, "the command")
            .unwrap_or(e)
    }
}

impl Source<CommandEvent> for Attached {
    fn next(&mut self) -> Result<Option<Vec<CommandEvent>>> {
        if self.ended {
            return Ok(None);
        }
        if !std::mem::replace(&mut self.started, true) {
            return Ok(Some(vec![CommandEvent::Started(self.command_id.clone())]));
        }
        match self.follow() {
            Ok(events) => Ok(Some(events)),
            Err(e) => {
                self.ended = true;
                Err(self.lost(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(code: i32) -> CommandExit {
        CommandExit {
            exit_code: code,
            error: None,
        }
    }

    #[test]
    fn the_end_is_a_stopped_status_then_an_empty_log() {
        assert!(matches!(
            after_logs(false, Some(exit(3))),
            Then::Finish(CommandExit { exit_code: 3, .. })
        ));
        assert!(matches!(after_logs(true, Some(exit(3))), Then::Poll));
        assert!(matches!(after_logs(true, None), Then::Poll));
        assert!(matches!(after_logs(false, None), Then::Wait));
    }

    #[test]
    fn polls_back_off_while_nothing_arrives() {
        let waits: Vec<u64> = std::iter::successors(Some(FIRST_POLL_MS), |w| Some(backed_off(*w)))
            .take(6)
            .collect();
        assert_eq!(waits, [50, 100, 200, 400, 500, 500]);
    }
}
