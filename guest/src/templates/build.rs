//! `templates.build {name, from_sandbox}`: `POST /sandboxes/{id}/snapshots
//! {name}`, then the wait until the snapshot is `Ready`, within what the
//! host's deadline leaves (`timeout` extends it). OpenSandbox builds no
//! images, so `dockerfile` and `base_image` are refused (E8004).
//!
//! What a build leaves when it fails, times out or is abandoned is removed:
//! while the POST is out, the token `build:SANDBOX:NAME:MS` stands for the
//! snapshots of that sandbox with that name made since MS, when the build
//! began (found by the server's filter, as a create's label is); once the
//! server answered, `snapshot:ID`. A snapshot cannot be deleted while it is
//! `Creating` (the server answers 409 `SNAPSHOT::INVALID_STATE`), so the undo
//! tries again until it is made, within its own deadline (crate::undo's
//! `find_and_remove`).
//!
//! Two builds of one name at once both find it free; after its POST a build
//! lists the name again, and the later of two (by creation, then id) gives
//! way: E4009, and its snapshot is undone.

use super::names::{check_free, check_new};
use super::{info, no_snapshots, remember_name};
use crate::bindings::abx::epp::request;
use crate::bindings::exports::abx::epp::infra::{TemplateBuildRequest, TemplateInfo};
use crate::config;
use crate::error::{self, Error, Kind, Result, invalid, unsupported};
use crate::lifecycle::{CreateFailed, Lifecycle, check_id};
use crate::models::Snapshot;
use crate::sandbox::order::{Key, parse};
use crate::time::{monotonic_ms, sleep_ms};
use crate::undo::{self, Removal, Token};
use std::time::Duration;

/// How often a snapshot's state is read while it is made.
const POLL_MS: u64 = 500;
/// Without a deadline from the host: how long a build waits, on top of `timeout`.
const DEFAULT_WAIT_MS: u64 = 300_000;
/// Kept back from the host's deadline to answer (and remove a failed snapshot).
const MARGIN_MS: u64 = 5_000;
/// The longest the snapshot POST waits for its answer (the server records
/// the snapshot and answers; Docker commits afterwards).
const POST_WAIT_MS: u64 = 60_000;
/// The least time worth sending the POST with: less, and its answer would
/// be lost to the deadline, leaving a snapshot for the undo to find.
const MIN_POST_WAIT_MS: u64 = 1_000;
/// How far the server's clock (which writes `created_at`) may be behind
/// ours for a snapshot to count as one the build made.
const CLOCK_SKEW_MS: u64 = 30_000;

pub fn build(req: TemplateBuildRequest) -> Result<TemplateInfo> {
    let sandbox = from_sandbox(&req)?;
    check_new(&req.name, config::settings()?)?;
    check_id("sandbox", sandbox)?;
    let name = req.name.as_str();
    // Taken before the name is checked free: a snapshot of this name that
    // can be this build's own was made after it, so the undo of an
    // unanswered POST looks only at those.
    let since_ms = wall_ms();
    let lifecycle = Lifecycle::new()?;
    match lifecycle.snapshots(Some(name), None) {
        Ok(existing) => check_free(name, &existing)?,
        Err(e) if no_snapshots(&e) => return Err(cannot_snapshot(&lifecycle, e)),
        Err(e) => return Err(e),
    }
    let post = post_wait(request::time_left_ms()).ok_or_else(|| {
        error::timed_out(format!(
            "templates.build of `{name}` ran out of time before it could ask the server for \
             the snapshot (checking the name took it); nothing was made. Pass a longer \
             `timeout` (seconds epp-host adds to its --call-timeout)"
        ))
    })?;
    // Before the server is asked: an abandoned POST is undone by finding the
    // snapshot by its sandbox, name and time.
    let pending = Token::Build {
        sandbox_id: sandbox.to_string(),
        name: name.to_string(),
        since_ms,
    };
    pending.made();
    let made = match lifecycle.snapshot(sandbox, name, post) {
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
    if let Some(rival) = earlier_rival(&made, &lifecycle.snapshots(Some(name), None)?) {
        return Err(error::conflict(format!(
            "template `{name}` was taken meanwhile: snapshot {} of sandbox {} (another \
             templates.build of the same name, begun first) is {}; this build's snapshot {} \
             is removed. Give another name, or remove that one first",
            rival.id,
            rival.sandbox_id,
            rival.status.state.to_ascii_lowercase(),
            made.id
        )));
    }
    // Computed after the POST and the check, which took part of the time.
    let budget = wait_budget(request::time_left_ms(), req.timeout);
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
                    "it was removed".to_string()
                }
                Err(e) if e.is(Kind::NotFound) => {
                    token.settled();
                    "it is gone".to_string()
                }
                // The token stays: the host's undo, which runs next, tries
                // again (and says so after `undone:` or `not undone:`).
                Err(e) => format!(
                    "removing it failed ({}), so the undo that follows tries again; if it \
                     stays, remove it with templates.remove {{\"name\": \"{}\"}}",
                    e.message, snapshot.id
                ),
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

/// Now on the wall clock, in ms since the Unix epoch (what `created_at` is
/// written in).
fn wall_ms() -> u64 {
    let now = wasip2::clocks::wall_clock::now();
    now.seconds * 1000 + u64::from(now.nanoseconds / 1_000_000)
}

/// Another build's snapshot of the same name, begun before `made` (earlier
/// by creation, then by id) and not failed or going: `made` gives way to it.
/// The rule picks one winner of any number of builds at once, each seeing
/// the others or not.
fn earlier_rival<'a>(made: &Snapshot, named: &'a [Snapshot]) -> Option<&'a Snapshot> {
    let key = |s: &Snapshot| Key::new(s.created_at.as_deref(), &s.id);
    let own = key(made);
    named.iter().find(|s| {
        s.id != made.id && matches!(s.status.state.as_str(), "Creating" | "Ready") && key(s) < own
    })
}

/// How long the snapshot POST may wait for its answer: [`POST_WAIT_MS`],
/// or what the host's deadline (`left`, ms) leaves after a margin; none
/// when that is too little to send it.
fn post_wait(left: Option<u64>) -> Option<Duration> {
    let wait = match left {
        Some(left) => POST_WAIT_MS.min(left.saturating_sub(MARGIN_MS)),
        None => POST_WAIT_MS,
    };
    (wait >= MIN_POST_WAIT_MS).then(|| Duration::from_millis(wait))
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

/// Undoes `snapshot:ID`: deletes the snapshot, trying again while it is
/// still being made (the server refuses to delete it then).
pub fn undo_snapshot(id: &str) -> Result<String> {
    let lifecycle = Lifecycle::new()?;
    undo::find_and_remove(
        &undo::Wasi,
        request::time_left_ms(),
        || Ok(vec![id.to_string()]),
        |id| removal(&lifecycle, id),
        |_| unreachable!("the snapshot is named"),
    )
}

/// Undoes `build:SANDBOX:NAME:MS`: removes the snapshots of that sandbox with
/// that name made since MS, looking for a while when none is listed yet.
pub fn undo_build(sandbox: &str, name: &str, since_ms: u64) -> Result<String> {
    let lifecycle = Lifecycle::new()?;
    undo::find_and_remove(
        &undo::Wasi,
        request::time_left_ms(),
        || {
            let listed = lifecycle.snapshots(Some(name), Some(sandbox))?;
            Ok(listed
                .into_iter()
                .filter(|s| made_since(s, since_ms))
                .map(|s| s.id)
                .collect())
        },
        |id| removal(&lifecycle, id),
        |secs| {
            format!(
                "no snapshot named `{name}` of sandbox {sandbox} appeared within {secs} s; if one \
                 appears later, remove it with templates.remove (templates.list shows it)"
            )
        },
    )
}

/// Whether a snapshot found by a build's sandbox and name can be the build's
/// own: made since it began (the server's clock may be a little behind), and
/// neither failed nor being deleted (older ones of the same name are, or
/// were checked not to exist when the build began).
fn made_since(s: &Snapshot, since_ms: u64) -> bool {
    let made_ms = s
        .created_at
        .as_deref()
        .and_then(parse)
        .map(|(secs, nanos)| secs.saturating_mul(1000) + i64::from(nanos / 1_000_000));
    let since = i64::try_from(since_ms.saturating_sub(CLOCK_SKEW_MS)).unwrap_or(i64::MAX);
    made_ms.is_some_and(|ms| ms >= since)
        && !matches!(s.status.state.as_str(), "Failed" | "Deleting")
}

/// One try at deleting snapshot `id` for an undo: a snapshot still being
/// made (409 `SNAPSHOT::INVALID_STATE`) may be deleted later; any other
/// refusal (409 `SNAPSHOT::DELETE_CONFLICT`: sandboxes use it) will not
/// change while the undo waits.
fn removal(lifecycle: &Lifecycle, id: &str) -> Removal {
    match lifecycle.delete_snapshot(id) {
        Ok(()) => Removal::Done(format!("removed snapshot {id}")),
        Err(e) if e.is(Kind::NotFound) => Removal::Done(format!("snapshot {id} was already gone")),
        Err(e) => {
            let not_yet = e
                .upstream_code()
                .is_some_and(|c| c == "SNAPSHOT::INVALID_STATE");
            let message = format!(
                "snapshot {id} is left: remove it with templates.remove {{\"name\": \"{id}\"}}{} \
                 ({})",
                if not_yet { " once it is made" } else { "" },
                e.message
            );
            let kind = e.kind;
            let e = e.reworded(kind, message);
            if not_yet {
                Removal::NotYet(e)
            } else {
                Removal::Failed(e)
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

    fn snap(id: &str, state: &str, at: Option<&str>) -> Snapshot {
        Snapshot {
            id: id.into(),
            sandbox_id: "sb".into(),
            name: Some("t".into()),
            status: crate::models::Status {
                state: state.into(),
                reason: None,
                message: None,
            },
            created_at: at.map(str::to_string),
        }
    }

    #[test]
    fn an_unanswered_build_owns_only_snapshots_made_since_it_began() {
        // Began at 2026-11-18T11:06:40.250Z.
        let since = 1_795_000_000_250;
        for (at, state, own) in [
            (Some("2026-11-18T11:06:41Z"), "Creating", true),
            (Some("2026-11-18T11:06:41Z"), "Ready", true),
            // The server's clock may be a little behind ours.
            (Some("2026-11-18T11:06:20.250Z"), "Creating", true),
            (Some("2026-11-18T11:06:10.249Z"), "Creating", false),
            // An older one of the same name, failed or being deleted.
            (Some("2026-11-18T11:06:41Z"), "Failed", false),
            (Some("2026-11-18T11:06:41Z"), "Deleting", false),
            (Some("2026-11-18T10:00:00Z"), "Ready", false),
            (None, "Creating", false),
            (Some("yesterday"), "Creating", false),
        ] {
            assert_eq!(
                made_since(&snap("s", state, at), since),
                own,
                "{at:?} {state}"
            );
        }
    }

    #[test]
    fn of_two_builds_of_one_name_the_later_gives_way() {
        let first = snap("b-first", "Creating", Some("2026-11-18T11:06:40.1Z"));
        let second = snap("a-second", "Creating", Some("2026-11-18T11:06:40.2Z"));
        let named = [first.clone(), second.clone()];
        assert_eq!(
            earlier_rival(&second, &named).map(|s| &s.id),
            Some(&first.id)
        );
        assert!(earlier_rival(&first, &named).is_none());
        // In one second (Kubernetes' times), the smaller id wins.
        let a = snap("a", "Creating", Some("2026-11-18T11:06:40Z"));
        let b = snap("b", "Ready", Some("2026-11-18T11:06:40Z"));
        let named = [a.clone(), b.clone()];
        assert_eq!(earlier_rival(&b, &named).map(|s| &s.id), Some(&a.id));
        assert!(earlier_rival(&a, &named).is_none());
        // A failed or going one is no rival; neither is the build's own.
        let failed = snap("f", "Failed", Some("2026-11-18T11:06:39Z"));
        let going = snap("g", "Deleting", Some("2026-11-18T11:06:39Z"));
        assert!(earlier_rival(&a, &[failed, going, a.clone()]).is_none());
    }

    #[test]
    fn the_post_fits_in_the_hosts_deadline() {
        assert_eq!(post_wait(None), Some(Duration::from_secs(60)));
        assert_eq!(post_wait(Some(600_000)), Some(Duration::from_secs(60)));
        assert_eq!(post_wait(Some(20_000)), Some(Duration::from_secs(15)));
        assert_eq!(post_wait(Some(6_000)), Some(Duration::from_secs(1)));
        assert_eq!(post_wait(Some(5_999)), None);
        assert_eq!(post_wait(Some(0)), None);
    }

    #[test]
    fn the_wait_fits_in_the_hosts_deadline() {
        assert_eq!(wait_budget(Some(65_000), Some(60)), 60_000);
        assert_eq!(wait_budget(Some(1_000), None), 0);
        assert_eq!(wait_budget(None, Some(60)), 360_000);
        assert_eq!(wait_budget(None, None), DEFAULT_WAIT_MS);
    }
}
