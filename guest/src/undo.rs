//! What a failed request leaves behind, named by tokens the provider reports
//! through `request.made` and takes back in `infra.undo` (abx:epp 1.1). The
//! host calls `undo` for each token not settled when a request fails or is
//! abandoned, in a fresh instance, and puts the words it answers in the error.
//!
//! A token is `KIND:ID…`, its ids as `lifecycle::check_id` accepts them (no `:`):
//! - `sandbox:ID`: a sandbox this request made; undone by killing it;
//! - `command:SANDBOX:ID`: a command it started (foreground, background, or
//!   with stdin: `stdin-…`); undone by `commands.kill`;
//! - `code:SANDBOX:CONTEXT`: a code run in a context; undone by interrupting
//!   the context's kernel;
//! - `create:LABEL`: a sandbox.create whose `POST /sandboxes` has not answered
//!   yet; undone by killing the sandboxes that carry the label, looking for a
//!   while when none is there yet (crate::sandbox's `label`);
//! - `snapshot:ID`: a snapshot a templates.build made; undone by deleting it,
//!   once it is no longer being made (crate::templates);
//! - `build:SANDBOX:NAME:MS`: a templates.build whose snapshot POST has not
//!   answered yet, begun at MS (ms since the Unix epoch); undone by deleting
//!   the snapshots of SANDBOX named NAME that were made since then, looking
//!   for a while when none is there yet.
//!
//! Undoing what is already gone is no failure: the words say so. The undos
//! that must first find what they remove (`create:`, `build:`, and
//! `snapshot:`, whose snapshot may not be removable yet) share one loop,
//! [`find_and_remove`].

use crate::bindings::abx::epp::request;
use crate::code;
use crate::commands;
use crate::error::{Error, Kind, Result, invalid};
use crate::execd::Execd;
use crate::lifecycle::{Lifecycle, check_id};
use crate::sandbox;
use crate::templates;
use crate::time::{monotonic_ms, sleep_ms};

/// Something a request set going that must not outlive the request if it fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    Sandbox(String),
    Command {
        sandbox_id: String,
        command_id: String,
    },
    Code {
        sandbox_id: String,
        context_id: String,
    },
    Create(String),
    Snapshot(String),
    Build {
        sandbox_id: String,
        name: String,
        /// When the build began, in ms since the Unix epoch (the server's
        /// clock writes `created_at`): older snapshots are not its own.
        since_ms: u64,
    },
}

impl Token {
    pub fn text(&self) -> String {
        match self {
            Token::Sandbox(id) => format!("sandbox:{id}"),
            Token::Command {
                sandbox_id,
                command_id,
            } => format!("command:{sandbox_id}:{command_id}"),
            Token::Code {
                sandbox_id,
                context_id,
            } => format!("code:{sandbox_id}:{context_id}"),
            Token::Create(label) => format!("create:{label}"),
            Token::Snapshot(id) => format!("snapshot:{id}"),
            Token::Build {
                sandbox_id,
                name,
                since_ms,
            } => format!("build:{sandbox_id}:{name}:{since_ms}"),
        }
    }

    pub fn parse(token: &str) -> Result<Token> {
        let bad = || {
            invalid(format!(
                "`{token}` is not a token of this provider (it reports `sandbox:ID`, \
                 `command:SANDBOX:ID`, `code:SANDBOX:CONTEXT`, `create:LABEL`, `snapshot:ID` \
                 and `build:SANDBOX:NAME:MS`)"
            ))
        };
        let parts: Vec<&str> = token.split(':').collect();
        let id = |kind: &str, id: &str| {
            check_id(kind, id).map_err(|_| bad())?;
            Ok::<String, Error>(id.to_string())
        };
        match parts.as_slice() {
            ["sandbox", sandbox] => Ok(Token::Sandbox(id("sandbox", sandbox)?)),
            ["command", sandbox, command] => Ok(Token::Command {
                sandbox_id: id("sandbox", sandbox)?,
                command_id: id("command", command)?,
            }),
            ["code", sandbox, context] => Ok(Token::Code {
                sandbox_id: id("sandbox", sandbox)?,
                context_id: id("code context", context)?,
            }),
            ["create", label] => Ok(Token::Create(id("label", label)?)),
            ["snapshot", snapshot] => Ok(Token::Snapshot(id("snapshot", snapshot)?)),
            ["build", sandbox, name, since] => Ok(Token::Build {
                sandbox_id: id("sandbox", sandbox)?,
                name: id("template name", name)?,
                since_ms: match since.bytes().all(|b| b.is_ascii_digit()) {
                    true => since.parse().map_err(|_| bad())?,
                    false => return Err(bad()),
                },
            }),
            _ => Err(bad()),
        }
    }

    /// Reports the token to the host: undone if the request fails.
    pub fn made(&self) {
        request::made(&self.text());
    }

    /// Tells the host the token needs no undoing any more.
    pub fn settled(&self) {
        request::settled(&self.text());
    }
}

/// Undoes what `token` stands for; answers what was done, in words.
pub fn undo(token: &str) -> Result<String> {
    match Token::parse(token)? {
        Token::Create(label) => sandbox::undo_create(&label),
        Token::Snapshot(id) => templates::undo_snapshot(&id),
        Token::Build {
            sandbox_id,
            name,
            since_ms,
        } => templates::undo_build(&sandbox_id, &name, since_ms),
        Token::Sandbox(id) => {
            let outcome = Lifecycle::new()?.delete(&id);
            said(outcome, format!("killed sandbox {id}"), || {
                format!("sandbox {id} was already gone")
            })
            .map_err(|e| {
                left(
                    e,
                    &format!("sandbox {id} is left: kill it with sandbox.kill, or it expires after its timeout"),
                )
            })
        }
        Token::Command {
            sandbox_id,
            command_id,
        } => {
            let outcome = commands::kill(&sandbox_id, &command_id);
            said(
                outcome,
                format!("stopped command {command_id} in sandbox {sandbox_id}"),
                || format!("command {command_id} in sandbox {sandbox_id} had already ended"),
            )
            .map_err(|e| {
                left(
                    e,
                    &format!(
                        "command {command_id} may still run in sandbox {sandbox_id}: stop it \
                         with commands.kill"
                    ),
                )
            })
        }
        Token::Code {
            sandbox_id,
            context_id,
        } => {
            let interrupted = Execd::connect(&sandbox_id)
                .and_then(|mut execd| code::interrupt_kernel(&mut execd, &context_id));
            let done =
                format!("interrupted the run in code context {context_id} of sandbox {sandbox_id}");
            let ended = || {
                format!(
                    "the run in code context {context_id} of sandbox {sandbox_id} had already ended"
                )
            };
            match interrupted {
                Ok(false) => Ok(ended()),
                other => said(other.map(drop), done, ended),
            }
            .map_err(|e| {
                left(
                    e,
                    &format!(
                        "code may still run in context {context_id} of sandbox {sandbox_id}: \
                         interrupt it with code.interrupt"
                    ),
                )
            })
        }
    }
}

/// The longest an undo looks for what has not appeared yet (the server may
/// still be answering the request that makes it).
const LOOK_MS: u64 = 15_000;
/// How often it looks, and how soon it tries again a removal that may work
/// later.
const EVERY_MS: u64 = 500;
/// Kept back from the undo's own deadline for its answer.
const MARGIN_MS: u64 = 3_000;
/// An undo's time when the host gives it no deadline (epp-host gives 30 s).
const WITHOUT_DEADLINE_MS: u64 = 25_000;

/// The clock an undo waits by: WASI's monotonic clock, or a unit test's.
pub trait Clock {
    fn now_ms(&self) -> u64;
    fn sleep_ms(&self, ms: u64);
}

pub struct Wasi;

impl Clock for Wasi {
    fn now_ms(&self) -> u64 {
        monotonic_ms()
    }

    fn sleep_ms(&self, ms: u64) {
        sleep_ms(ms)
    }
}

/// One try at removing what an undo found.
#[derive(Debug)]
pub enum Removal {
    /// Removed, or already gone: the words for the answer.
    Done(String),
    /// Not removable yet, but it may be soon (a snapshot still being made):
    /// tried again within the undo's time. The error says what is left and
    /// how to remove it, then why.
    NotYet(Error),
    /// Failed: what is left and how to remove it, then why.
    Failed(Error),
}

/// The one loop of the undos that must find what they remove: `find` is
/// asked until it finds something or [`LOOK_MS`] (within the undo's time,
/// `left` ms, less a margin) has passed, then `remove` is tried on each found
/// item, again while it answers [`Removal::NotYet`] and time is left. The
/// answer names what became of every item: the words of each, or an error
/// with every item left (then the words of those removed). `nothing(secs)`
/// is the answer when nothing appeared within `secs` seconds.
pub fn find_and_remove<T>(
    clock: &impl Clock,
    left: Option<u64>,
    mut find: impl FnMut() -> Result<Vec<T>>,
    mut remove: impl FnMut(&T) -> Removal,
    nothing: impl FnOnce(u64) -> String,
) -> Result<String> {
    let budget = left.map_or(WITHOUT_DEADLINE_MS, |left| left.saturating_sub(MARGIN_MS));
    let look = LOOK_MS.min(budget);
    let start = clock.now_ms();
    let found = loop {
        let found = find()?;
        if !found.is_empty() || clock.now_ms() + EVERY_MS > start + look {
            break found;
        }
        clock.sleep_ms(EVERY_MS);
    };
    if found.is_empty() {
        return Ok(nothing(look / 1000));
    }
    let mut done = Vec::new();
    let mut failed: Vec<Error> = Vec::new();
    for item in &found {
        loop {
            match remove(item) {
                Removal::Done(words) => done.push(words),
                Removal::NotYet(_) if clock.now_ms() + EVERY_MS <= start + budget => {
                    clock.sleep_ms(EVERY_MS);
                    continue;
                }
                Removal::NotYet(e) | Removal::Failed(e) => failed.push(e),
            }
            break;
        }
    }
    let mut failed = failed.into_iter();
    let Some(first) = failed.next() else {
        return Ok(done.join("; "));
    };
    let words: Vec<String> = std::iter::once(first.message.clone())
        .chain(failed.map(|e| e.message))
        .chain(done)
        .collect();
    let kind = first.kind;
    Err(first.reworded(kind, words.join("; ")))
}

/// `done` when the undo worked, `gone()` when there was nothing left to undo
/// (not found: the sandbox or what ran in it is gone).
fn said(outcome: Result<()>, done: String, gone: impl FnOnce() -> String) -> Result<String> {
    match outcome {
        Ok(()) => Ok(done),
        Err(e) if e.is(Kind::NotFound) => Ok(gone()),
        Err(e) => Err(e),
    }
}

/// An undo that failed: what is left and how to remove it, then why.
fn left(e: Error, what: &str) -> Error {
    let (kind, message) = (e.kind, format!("{what} ({})", e.message));
    e.reworded(kind, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_strangers_are_refused() {
        for t in [
            Token::Sandbox("5c1f-a_b.c".into()),
            Token::Command {
                sandbox_id: "sb".into(),
                command_id: "stdin-9f".into(),
            },
            Token::Code {
                sandbox_id: "sb".into(),
                context_id: "ctx".into(),
            },
            Token::Create("0123abcd".into()),
            Token::Snapshot("5c1f-9e".into()),
            Token::Build {
                sandbox_id: "sb".into(),
                name: "py-data.v1".into(),
                since_ms: 1_795_000_000_250,
            },
        ] {
            assert_eq!(Token::parse(&t.text()).ok(), Some(t));
        }
        assert_eq!(
            Token::parse("command:sb:c1").unwrap().text(),
            "command:sb:c1"
        );
        for bad in [
            "",
            "sandbox",
            "sandbox:",
            "sandbox:a/b",
            "sandbox:a:b",
            "disk:x",
            "command:sb",
            "command:sb:",
            "command:sb:c:d",
            "code::ctx",
            "code:sb:../x",
            "snapshot:",
            "build:sb",
            "build:sb:t",
            "build:sb:a/b:1",
            "build:sb:t:",
            "build:sb:t:-1",
            "build:sb:t:1e3",
            "build:sb:t:99999999999999999999",
        ] {
            let e = Token::parse(bad).expect_err(bad);
            assert_eq!(e.kind, Kind::Invalid, "{bad}");
        }
    }

    #[test]
    fn undoing_what_is_gone_is_no_failure() {
        let gone = || "gone".to_string();
        assert_eq!(said(Ok(()), "done".into(), gone).unwrap(), "done");
        let missing = Err(crate::error::not_found("no such sandbox"));
        assert_eq!(said(missing, "done".into(), gone).unwrap(), "gone");
        let broken = Err(crate::error::upstream("HTTP 500"));
        let e = said(broken, "done".into(), gone).unwrap_err();
        let e = left(e, "sandbox x is left: kill it with sandbox.kill");
        assert_eq!(e.kind, Kind::Upstream);
        assert_eq!(
            e.message,
            "sandbox x is left: kill it with sandbox.kill (HTTP 500)"
        );
    }

    /// A clock that moves only when the code under test sleeps.
    struct Fake(std::cell::Cell<u64>);

    impl Clock for Fake {
        fn now_ms(&self) -> u64 {
            self.0.get()
        }

        fn sleep_ms(&self, ms: u64) {
            self.0.set(self.0.get() + ms)
        }
    }

    fn is_left(what: &str) -> Error {
        crate::error::conflict(format!("{what} is left (HTTP 409)"))
    }

    #[test]
    fn an_undo_looks_until_something_appears_then_removes_each() {
        let clock = Fake(std::cell::Cell::new(1_000));
        // Nothing listed for 2 s, then two items.
        let answer = find_and_remove(
            &clock,
            Some(30_000),
            || {
                Ok(if clock.now_ms() < 3_000 {
                    vec![]
                } else {
                    vec!["a", "b"]
                })
            },
            |id| Removal::Done(format!("removed {id}")),
            |secs| format!("nothing within {secs} s"),
        );
        assert_eq!(answer.unwrap(), "removed a; removed b");
        assert_eq!(clock.now_ms(), 3_000);

        // Nothing ever: it looks for 15 s at most, within its own time.
        for (left, looked) in [
            (None, 15_000),
            (Some(60_000), 15_000),
            (Some(10_000), 7_000),
        ] {
            let clock = Fake(std::cell::Cell::new(0));
            let answer = find_and_remove(
                &clock,
                left,
                || Ok(Vec::<&str>::new()),
                |_| unreachable!("nothing to remove"),
                |secs| format!("nothing within {secs} s"),
            );
            assert_eq!(
                answer.unwrap(),
                format!("nothing within {} s", looked / 1000)
            );
            assert!(clock.now_ms() <= looked, "{left:?}: {}", clock.now_ms());
            assert!(
                clock.now_ms() + EVERY_MS > looked,
                "{left:?}: {}",
                clock.now_ms()
            );
        }
    }

    #[test]
    fn an_undo_tries_again_only_what_may_work_later_and_names_all_that_is_left() {
        let clock = Fake(std::cell::Cell::new(0));
        let tries = std::cell::RefCell::new(Vec::new());
        // `slow` is removable after 2 s; `stuck` never; `used` refuses for good.
        let answer = find_and_remove(
            &clock,
            Some(10_000),
            || Ok(vec!["slow", "stuck", "used", "gone"]),
            |id| {
                tries.borrow_mut().push(*id);
                match *id {
                    "slow" if clock.now_ms() >= 2_000 => Removal::Done("removed slow".into()),
                    "slow" | "stuck" => Removal::NotYet(is_left(id)),
                    "used" => Removal::Failed(is_left(id)),
                    _ => Removal::Done(format!("{id} was already gone")),
                }
            },
            |_| unreachable!("found at once"),
        );
        let e = answer.unwrap_err();
        assert_eq!(e.kind, Kind::Conflict);
        assert_eq!(
            e.message,
            "stuck is left (HTTP 409); used is left (HTTP 409); removed slow; gone was already gone"
        );
        let tries = tries.into_inner();
        assert_eq!(tries.iter().filter(|t| **t == "slow").count(), 5);
        assert_eq!(tries.iter().filter(|t| **t == "used").count(), 1);
        // `stuck` is tried until the undo's time (10 s less the margin) is up.
        assert!(
            clock.now_ms() <= 7_000 && clock.now_ms() + EVERY_MS > 7_000,
            "{}",
            clock.now_ms()
        );

        // A failure to look is the undo's failure.
        let e = find_and_remove(
            &Fake(std::cell::Cell::new(0)),
            None,
            || Err::<Vec<&str>, _>(crate::error::upstream("HTTP 500")),
            |_| unreachable!(),
            |_| unreachable!(),
        )
        .unwrap_err();
        assert_eq!(e.message, "HTTP 500");
    }
}
