//! `templates.build {name, from_sandbox}`: `POST /sandboxes/{id}/snapshots
//! {name}`, then the wait until the snapshot is `Ready`, within what the
//! host's deadline leaves (`timeout` extends it). OpenSandbox builds no
//! images, so `dockerfile` and `base_image` are refused (E8004).
//!
//! What a build leaves when it fails, times out or is abandoned is removed:
//! while the POST is out, the token `build:SANDBOX:NAME` stands for any
//! snapshot of that sandbox with that name (found by the server's filter, as
//! a create's label is); once the server answered, `snapshot:ID`. A snapshot
//! cannot be deleted while it is `Creating` (the server answers 409), so the
//! undo waits for it to end first, within its own deadline.

use super::names::{check_free, check_new};
use super::{info, no_snapshots, remember_name};
use crate::bindings::abx::epp::request;
use crate::bindings::exports::abx::epp::infra::{TemplateBuildRequest, TemplateInfo};
use crate::config;
use crate::error::{self, Error, Kind, Result, invalid, unsupported};
use crate::lifecycle::{CreateFailed, Lifecycle, check_id};
use crate::models::Snapshot;
use crate::time::{monotonic_ms, sleep_ms};
use crate::undo::Token;

/// How often a snapshot's state is read while it is made.
const POLL_MS: u64 = 500;
/// Without a deadline from the host: how long a build waits, on top of `timeout`.
const DEFAULT_WAIT_MS: u64 = 300_000;
/// Kept back from the host's deadline to answer (and remove a failed snapshot).
const MARGIN_MS: u64 = 5_000;
/// The longest an undo looks for the snapshot of an unanswered POST.
const UNDO_FIND_MS: u64 = 15_000;
/// Kept back from an undo's own deadline for its answer.
const UNDO_MARGIN_MS: u64 = 3_000;

pub fn build(req: TemplateBuildRequest) -> Result<TemplateInfo> {
    let sandbox = from_sandbox(&req)?;
    check_new(&req.name, config::settings()?)?;
    check_id("sandbox", sandbox)?;
    let name = req.name.as_str();
    let budget = wait_budget(request::time_left_ms(), req.timeout);
    let lifecycle = Lifecycle::new()?;
    match lifecycle.snapshots(Some(name), None) {
        Ok(existing) => check_free(name, &existing)?,
        Err(e) if no_snapshots(&e) => return Err(cannot_snapshot(&lifecycle, e)),
        Err(e) => return Err(e),
    }
    // Before the server is asked: an abandoned POST is undone by finding the
    // snapshot by its sandbox and name.
    let pending = Token::Build {
        sandbox_id: sandbox.to_string(),
        name: name.to_string(),
    };
    pending.made();
    let made = match lifecycle.snapshot(sandbox, name) {
        Ok(made) => made,
        Err(CreateFailed { error, may_exist }) => {
            if !may_exist {
                pending.settled();
            }
            return Err(refused(&lifecycle, error, sandbox));
        }
    };
    let token = Token::Snapshot(made.id.clone());
    token.made();
    pending.settled();
    remember_name(&made.id, name);
    let snapshot = wait(&lifecycle, made, budget)?;
    match snapshot.status.state.as_str() {
        "Ready" => {
            token.settled();
            Ok(info(snapshot))
        }
        "Creating" => Err(error::timed_out(format!(
            "snapshot {} of sandbox {sandbox} (template `{name}`) was not ready within {} s; \
             pass a longer `timeout` (seconds epp-host adds to its --call-timeout)",
            snapshot.id,
            budget / 1000
        ))),
        "Failed" => {
            let removed = match lifecycle.delete_snapshot(&snapshot.id) {
                Ok(()) => {
                    token.settled();
                    "it was removed"
                }
                Err(e) if e.is(Kind::NotFound) => {
                    token.settled();
                    "it is gone"
                }
                Err(_) => "removing it failed",
            };
            Err(error::upstream(format!(
                "the server could not snapshot sandbox {sandbox} (snapshot {}: {}); {removed}",
                snapshot.id,
                said(&snapshot)
            )))
        }
        state => Err(error::conflict(format!(
            "snapshot {} of sandbox {sandbox} (template `{name}`) is {} before it was ready \
             (removed by someone else?)",
            snapshot.id,
            state.to_ascii_lowercase()
        ))),
    }
}

/// The sandbox to snapshot: exactly one of `dockerfile`, `base_image` and
/// `from_sandbox`, and only `from_sandbox` is built here.
fn from_sandbox(req: &TemplateBuildRequest) -> Result<&str> {
    let given: Vec<&str> = [
        ("dockerfile", req.dockerfile.is_some()),
        ("base_image", req.base_image.is_some()),
        ("from_sandbox", req.from_sandbox.is_some()),
    ]
    .iter()
    .filter(|(_, set)| *set)
    .map(|(field, _)| *field)
    .collect();
    match (given.as_slice(), &req.from_sandbox) {
        (["from_sandbox"], Some(sandbox)) => Ok(sandbox),
        ([_], _) => Err(unsupported(
            "templates.build",
            "OpenSandbox builds no images, so neither `dockerfile` nor `base_image` can be \
             built: build and push an image yourself and use its URI as sandbox.create's \
             `template` (or name it in ABX_OPENSANDBOX_IMAGE_ALIASES), or make a sandbox, set \
             it up and save it with `from_sandbox`",
        )),
        (none, _) => Err(invalid(format!(
            "give exactly one of `dockerfile`, `base_image` and `from_sandbox`{}",
            if none.is_empty() {
                String::new()
            } else {
                format!(", not {}", none.join(" and "))
            }
        ))),
    }
}

/// How long the build may wait for its snapshot: what the host's deadline
/// (`left`, ms; `timeout` already in it) leaves after a margin, or without
/// one, five minutes plus `timeout`.
fn wait_budget(left: Option<u64>, timeout: Option<u32>) -> u64 {
    match left {
        Some(left) => left.saturating_sub(MARGIN_MS),
        None => DEFAULT_WAIT_MS + u64::from(timeout.unwrap_or(0)) * 1000,
    }
}

/// Reads the snapshot until it is no longer `Creating` or `budget` ms passed.
fn wait(lifecycle: &Lifecycle, made: Snapshot, budget: u64) -> Result<Snapshot> {
    let deadline = monotonic_ms() + budget;
    let mut snapshot = made;
    while snapshot.status.state == "Creating" && monotonic_ms() + POLL_MS <= deadline {
        sleep_ms(POLL_MS);
        snapshot = lifecycle.get_snapshot(&snapshot.id)?;
    }
    Ok(snapshot)
}

/// What the server said about a snapshot's state.
fn said(s: &Snapshot) -> String {
    [s.status.reason.as_deref(), s.status.message.as_deref()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(": ")
}

/// A refused snapshot POST, in words for `templates.build`.
fn refused(lifecycle: &Lifecycle, e: Error, sandbox: &str) -> Error {
    if e.status() == Some(501) {
        return cannot_snapshot(lifecycle, e);
    }
    let kind = e.kind;
    let message = format!("templates.build from sandbox {sandbox}: {}", e.message);
    e.reworded(kind, message)
}

/// The server keeps no snapshots (its runtime has none, or it predates them).
fn cannot_snapshot(lifecycle: &Lifecycle, e: Error) -> Error {
    let message = format!(
        "{} cannot snapshot sandboxes ({}); OpenSandbox snapshots need its Docker or \
         Kubernetes runtime and a server of 1.1 or later",
        lifecycle.target(),
        e.message
    );
    e.reworded(Kind::Unsupported, message)
}

/// Undoes `snapshot:ID`: deletes the snapshot, waiting while it is still
/// being made (the server refuses to delete it then).
pub fn undo_snapshot(id: &str) -> Result<String> {
    let lifecycle = Lifecycle::new()?;
    let deadline = monotonic_ms() + undo_budget();
    remove_when_made(&lifecycle, id, deadline)
}

/// Undoes `build:SANDBOX:NAME`: removes the snapshots of that sandbox with
/// that name, looking for a while when none is listed yet.
pub fn undo_build(sandbox: &str, name: &str) -> Result<String> {
    let lifecycle = Lifecycle::new()?;
    let deadline = monotonic_ms() + undo_budget();
    let look_until = monotonic_ms() + UNDO_FIND_MS.min(undo_budget());
    let found = loop {
        let found = lifecycle.snapshots(Some(name), Some(sandbox))?;
        if !found.is_empty() || monotonic_ms() + POLL_MS > look_until {
            break found;
        }
        sleep_ms(POLL_MS);
    };
    if found.is_empty() {
        return Ok(format!(
            "no snapshot named `{name}` of sandbox {sandbox} appeared; if one appears later, \
             remove it with templates.remove"
        ));
    }
    let done = found
        .iter()
        .map(|s| remove_when_made(&lifecycle, &s.id, deadline))
        .collect::<Result<Vec<_>>>()?;
    Ok(done.join("; "))
}

/// How long an undo may take: its own deadline less a margin, else 25 s.
fn undo_budget() -> u64 {
    request::time_left_ms().map_or(25_000, |left| left.saturating_sub(UNDO_MARGIN_MS))
}

fn remove_when_made(lifecycle: &Lifecycle, id: &str, deadline: u64) -> Result<String> {
    loop {
        match lifecycle.delete_snapshot(id) {
            Ok(()) => return Ok(format!("removed snapshot {id}")),
            Err(e) if e.is(Kind::NotFound) => return Ok(format!("snapshot {id} was already gone")),
            Err(e) if e.is(Kind::Conflict) && monotonic_ms() + POLL_MS <= deadline => {
                sleep_ms(POLL_MS)
            }
            Err(e) => {
                let message = format!(
                    "snapshot {id} is left ({}): remove it with templates.remove {{\"name\": \
                     \"{id}\"}} once it is made",
                    e.message
                );
                let kind = e.kind;
                return Err(e.reworded(kind, message));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(dockerfile: bool, base: bool, sandbox: bool) -> TemplateBuildRequest {
        TemplateBuildRequest {
            name: "t".into(),
            dockerfile: dockerfile.then(|| "FROM x".into()),
            base_image: base.then(|| "alpine".into()),
            from_sandbox: sandbox.then(|| "sb-1".into()),
            timeout: None,
        }
    }

    #[test]
    fn exactly_one_source_and_only_sandboxes_are_built() {
        assert_eq!(from_sandbox(&req(false, false, true)).unwrap(), "sb-1");
        for (r, kind, words) in [
            (
                req(true, false, false),
                Kind::Unsupported,
                "builds no images",
            ),
            (req(false, true, false), Kind::Unsupported, "from_sandbox"),
            (req(false, false, false), Kind::Invalid, "exactly one of"),
            (
                req(true, false, true),
                Kind::Invalid,
                "not dockerfile and from_sandbox",
            ),
        ] {
            let e = from_sandbox(&r).unwrap_err();
            assert_eq!(e.kind, kind, "{e:?}");
            assert!(e.message.contains(words), "{words}: {e:?}");
        }
    }

    #[test]
    fn the_wait_fits_in_the_hosts_deadline() {
        assert_eq!(wait_budget(Some(65_000), Some(60)), 60_000);
        assert_eq!(wait_budget(Some(1_000), None), 0);
        assert_eq!(wait_budget(None, Some(60)), 360_000);
        assert_eq!(wait_budget(None, None), DEFAULT_WAIT_MS);
    }
}
