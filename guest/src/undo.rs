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
//! - `build:SANDBOX:NAME`: a templates.build whose snapshot POST has not
//!   answered yet; undone by deleting the snapshots of SANDBOX named NAME,
//!   looking for a while when none is there yet.
//!
//! Undoing what is already gone is no failure: the words say so.

use crate::bindings::abx::epp::request;
use crate::code;
use crate::commands;
use crate::error::{Error, Kind, Result, invalid};
use crate::execd::Execd;
use crate::lifecycle::{Lifecycle, check_id};
use crate::sandbox;
use crate::templates;

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
            Token::Build { sandbox_id, name } => format!("build:{sandbox_id}:{name}"),
        }
    }

    pub fn parse(token: &str) -> Result<Token> {
        let bad = || {
            invalid(format!(
                "`{token}` is not a token of this provider (it reports `sandbox:ID`, \
                 `command:SANDBOX:ID`, `code:SANDBOX:CONTEXT`, `create:LABEL`, `snapshot:ID` \
                 and `build:SANDBOX:NAME`)"
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
            ["build", sandbox, name] => Ok(Token::Build {
                sandbox_id: id("sandbox", sandbox)?,
                name: id("template name", name)?,
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
        Token::Build { sandbox_id, name } => templates::undo_build(&sandbox_id, &name),
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
            "build:sb:a/b",
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
}
