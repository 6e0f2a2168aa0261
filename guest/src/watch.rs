//! files.watch: execd has no file-change API, so a watch polls one listing every
//! interval (setting `watch_interval_ms`, default 500 ms) and diffs it against the last one (path → type, size, mtime, mode).
//!
//! - A directory is listed with `GET /directories/list?path=…&depth=1` (recursive:
//!   `depth=`[`RECURSIVE_DEPTH`]); a file with `GET /files/info?path=…`. An idle watch
//!   costs exactly that one read per interval and nothing else.
//! - Events: `create`, `remove`, `write` (size or mtime of a non-directory changed),
//!   `chmod` (mode changed). A rename is a `remove` of the old path and a `create` of
//!   the new one (polling cannot tell it from a delete and a new file). A change undone
//!   within one interval is not seen, and several writes within one are one `write`.
//! - When the watched path itself goes away, its entries and then the path are
//!   reported removed and the stream ends. When the sandbox goes away the stream
//!   ends with E4004; when it stops or pauses, with E4009.
//!
//! The other design, `inotifywait -m` as a streamed `/command`, is not used: the
//! default images (`python:3.12-slim`, code-interpreter) do not have it, every watch
//! would first cost a probe command, and a cancelled watch would leave the
//! `inotifywait` running in the sandbox (the host drops the call; nothing kills it).

use crate::bindings::exports::abx::epp::infra::{FileEvent, FileEventKind};
use crate::broken_off::{self, Diagnosis};
use crate::error::{self, Error, Kind, Result, invalid, not_found};
use crate::execd::Execd;
use crate::http::{Timeouts, encode};
use crate::models::ExecdFileInfo;
use crate::time::{monotonic_ms, sleep_ms};
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// `depth` of a recursive listing (execd walks that many levels below the path).
pub const RECURSIVE_DEPTH: u32 = 1024;
/// Consecutive failed polls of a sandbox that still runs before the watch gives up.
const MAX_FAILURES: u32 = 6;
/// A poll that does not answer in this time counts as failed.
const POLL: Timeouts = Timeouts {
    connect: Duration::from_secs(5),
    first_byte: Duration::from_secs(10),
    between_bytes: Duration::from_secs(10),
};

#[derive(Clone, PartialEq, Debug)]
struct Entry {
    dir: bool,
    kind: Option<String>,
    size: u64,
    modified_at: Option<String>,
    mode: u32,
}

impl From<&ExecdFileInfo> for Entry {
    fn from(i: &ExecdFileInfo) -> Entry {
        Entry {
            dir: i.kind.as_deref() == Some("directory"),
            kind: i.kind.clone(),
            size: i.size,
            modified_at: i.modified_at.clone(),
            mode: i.mode,
        }
    }
}

type Snapshot = BTreeMap<String, Entry>;

/// What one poll found.
enum Seen {
    Now(Snapshot),
    /// The watched path is gone (404).
    Gone,
}

#[derive(Clone, Copy)]
enum Target {
    Dir { depth: u32 },
    File,
}

pub struct WatchStream {
    inner: RefCell<State>,
}

struct State {
    execd: Execd,
    path: String,
    target: Target,
    snapshot: Snapshot,
    pending: VecDeque<FileEvent>,
    last_poll_ms: u64,
    /// Time between two listings: a change is reported within this plus one request.
    interval_ms: u64,
    failures: u32,
    ended: bool,
}

fn event(kind: FileEventKind, path: &str) -> FileEvent {
    FileEvent {
        kind,
        path: path.to_string(),
    }
}

/// The events that turn `old` into `new`: removals first (children before their
/// directory), then creations (a directory before its children), writes and chmods.
fn diff(old: &Snapshot, new: &Snapshot) -> Vec<FileEvent> {
    let mut out = Vec::new();
    for (path, was) in old.iter().rev() {
        match new.get(path) {
            None => out.push(event(FileEventKind::Remove, path)),
            Some(now) if now.kind != was.kind => out.push(event(FileEventKind::Remove, path)),
            _ => {}
        }
    }
    for (path, now) in new {
        match old.get(path) {
            None => out.push(event(FileEventKind::Create, path)),
            Some(was) if was.kind != now.kind => out.push(event(FileEventKind::Create, path)),
            Some(was) => {
                if !now.dir && (was.size != now.size || was.modified_at != now.modified_at) {
                    out.push(event(FileEventKind::Write, path));
                }
                if was.mode != now.mode {
                    out.push(event(FileEventKind::Chmod, path));
                }
            }
        }
    }
    out
}

fn poll(execd: &mut Execd, path: &str, target: Target) -> Result<Seen> {
    let query = match target {
        Target::Dir { depth } => {
            format!("/directories/list?path={}&depth={depth}", encode(path))
        }
        Target::File => format!("/files/info?path={}", encode(path)),
    };
    let resp = execd.send(|e| Ok(e.request("GET", &query)?.timeouts(POLL)), &[])?;
    if resp.status == 404 {
        return Ok(Seen::Gone);
    }
    if resp.status == 400 && matches!(target, Target::Dir { .. }) {
        return Err(invalid(format!(
            "{path} is no longer a directory in sandbox {}",
            execd.sandbox_id
        )));
    }
    let resp = execd.check(resp, path)?;
    let entries: Vec<ExecdFileInfo> = match target {
        Target::Dir { .. } => execd.json(resp, path)?,
        Target::File => execd
            .json::<BTreeMap<String, ExecdFileInfo>>(resp, path)?
            .into_values()
            .collect(),
    };
    Ok(Seen::Now(
        entries.iter().map(|i| (i.path.clone(), i.into())).collect(),
    ))
}

/// Why polling `sandbox_id` failed, when the sandbox itself is the reason: it was
/// deleted (E4004) or is no longer running (E4009). `None`: it still runs.
fn sandbox_gone(sandbox_id: &str) -> Option<Error> {
    match broken_off::diagnose(sandbox_id) {
        Diagnosis::Deleted => Some(not_found(format!(
            "sandbox {sandbox_id} was deleted (or expired); the watch ends here"
        ))),
        Diagnosis::Stopped { state, .. } => Some(error::conflict(format!(
            "sandbox {sandbox_id} is {} and no longer answers; the watch ends here (start a \
             new one once it runs again)",
            state.to_ascii_lowercase()
        ))),
        Diagnosis::Running => None,
    }
}

pub fn watch(sandbox_id: &str, path: &str, recursive: bool) -> Result<WatchStream> {
    if path.is_empty() {
        return Err(invalid("`path` is empty"));
    }
    if path.contains('\0') {
        return Err(invalid("`path` contains a NUL byte"));
    }
    let mut execd = Execd::connect(sandbox_id)?;
    let depth = if recursive { RECURSIVE_DEPTH } else { 1 };
    let mut target = Target::Dir { depth };
    let started = monotonic_ms();
    let first = match poll(&mut execd, path, target) {
        // Not a directory (a file, or a symlink): watch the path itself.
        Err(e) if e.is(Kind::Invalid) => {
            target = Target::File;
            poll(&mut execd, path, target)?
        }
        other => other?,
    };
    let Seen::Now(snapshot) = first else {
        return Err(not_found(format!(
            "{path} does not exist in sandbox {sandbox_id}"
        )));
    };
    Ok(WatchStream {
        inner: RefCell::new(State {
            execd,
            path: path.to_string(),
            target,
            snapshot,
            pending: VecDeque::new(),
            last_poll_ms: started,
            interval_ms: u64::from(crate::config::settings()?.watch_interval_ms),
            failures: 0,
            ended: false,
        }),
    })
}

impl State {
    fn next(&mut self) -> Result<Option<FileEvent>> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Ok(Some(e));
            }
            if self.ended {
                return Ok(None);
            }
            let due = self.last_poll_ms + self.interval_ms;
            let now = monotonic_ms();
            if due > now {
                sleep_ms(due - now);
            }
            self.last_poll_ms = monotonic_ms();
            match poll(&mut self.execd, &self.path, self.target) {
                Ok(Seen::Now(snapshot)) => {
                    self.failures = 0;
                    self.pending.extend(diff(&self.snapshot, &snapshot));
                    self.snapshot = snapshot;
                }
                Ok(Seen::Gone) => {
                    // A server proxy answers 404 for a sandbox it no longer knows.
                    if let Some(e) = sandbox_gone(&self.execd.sandbox_id) {
                        self.ended = true;
                        return Err(e);
                    }
                    let mut gone = diff(&self.snapshot, &Snapshot::new());
                    if matches!(self.target, Target::Dir { .. }) {
                        gone.push(event(FileEventKind::Remove, &self.path));
                    }
                    self.pending.extend(gone);
                    self.snapshot.clear();
                    self.ended = true;
                }
                Err(e) => {
                    if let Some(gone) = sandbox_gone(&self.execd.sandbox_id) {
                        self.ended = true;
                        return Err(gone);
                    }
                    self.failures += 1;
                    if self.failures >= MAX_FAILURES || e.is(Kind::Invalid) {
                        self.ended = true;
                        return Err(e);
                    }
                }
            }
        }
    }
}

impl WatchStream {
    pub fn next(&self) -> Result<Option<FileEvent>> {
        self.inner.borrow_mut().next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(kind: Option<&str>, size: u64, mtime: &str, mode: u32) -> Entry {
        Entry {
            dir: kind == Some("directory"),
            kind: kind.map(str::to_string),
            size,
            modified_at: Some(mtime.to_string()),
            mode,
        }
    }

    fn kinds(events: &[FileEvent]) -> Vec<(String, String)> {
        events
            .iter()
            .map(|e| {
                let kind = format!("{:?}", e.kind).to_lowercase();
                let kind = kind.rsplit(':').next().unwrap_or_default().to_string();
                (kind, e.path.clone())
            })
            .collect()
    }

    #[test]
    fn diffs_become_events() {
        let f = |m| e(Some("file"), 1, m, 644);
        let d = |m| e(Some("directory"), 4096, m, 755);
        let old: Snapshot = [
            ("/w/a".to_string(), f("t1")),
            ("/w/gone".to_string(), d("t1")),
            ("/w/gone/x".to_string(), f("t1")),
            ("/w/keep".to_string(), d("t1")),
            ("/w/mode".to_string(), f("t1")),
            ("/w/swap".to_string(), f("t1")),
        ]
        .into();
        let new: Snapshot = [
            ("/w/a".to_string(), f("t2")),
            // A directory's mtime changes with its entries: not a write.
            ("/w/keep".to_string(), d("t2")),
            ("/w/mode".to_string(), e(Some("file"), 1, "t1", 600)),
            ("/w/new".to_string(), d("t2")),
            ("/w/new/y".to_string(), f("t2")),
            ("/w/swap".to_string(), d("t2")),
        ]
        .into();
        let got = kinds(&diff(&old, &new));
        let want: Vec<(String, String)> = [
            ("remove", "/w/swap"),
            ("remove", "/w/gone/x"),
            ("remove", "/w/gone"),
            ("write", "/w/a"),
            ("chmod", "/w/mode"),
            ("create", "/w/new"),
            ("create", "/w/new/y"),
            ("create", "/w/swap"),
        ]
        .iter()
        .map(|(k, p)| (k.to_string(), p.to_string()))
        .collect();
        assert_eq!(got, want);
        assert!(diff(&new, &new).is_empty());
    }
}
