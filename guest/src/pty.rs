//! pty over execd's `POST /pty` and its WebSocket `/pty/{id}/ws`, through the
//! host's `websocket` import. `pty.connect` attaches from any process with
//! `?takeover=1&since=N`: execd closes the previous holder's connection with
//! 4001 `TAKEN_OVER`, replays what it kept (a `0x03` frame) and says
//! `connected`, which the call waits for ([`until_attached`]).
//!
//! Each connection of this process has a key of its own that no later one
//! reuses (`pty.create`'s is `pty:SANDBOX:PTY`, each `pty.connect` adds a
//! random part), so a stream only ever reads, and on its end closes, its own
//! connection, however late it gets to it. Which key holds the terminal now is
//! recorded host-wide ([`holder_key`]): input, resize and a connect's take-over
//! use that one, and a stream whose connection ended while another key holds
//! the terminal reports that a `pty.connect` here took it.
//!
//! A stream counts the bytes of output it delivered (absolute offsets, from
//! 0 or from a replay's), so a connection that drops while the shell runs is
//! attached again under the same key from where it stood
//! ([`PtyStream::reattach`]).

use crate::bindings::abx::epp::memo;
use crate::bindings::abx::epp::websocket::{self, Message};
use crate::bindings::exports::abx::epp::infra::{PtyEvent, PtyRequest};
use crate::error::{self, Error, Kind, Result, conflict, invalid, not_found};
use crate::execd::Execd;
use crate::files;
use crate::http::encode;
use crate::lifecycle::check_id;
use crate::models::PtyCreated;
use crate::shell;
use crate::time::{now_unix, sleep_ms};
use crate::users::{self, User};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

/// The key of `pty.create`'s connection: the terminal is new, so no other
/// connection of it ever had this key.
fn create_key(sandbox_id: &str, pty_id: &str) -> String {
    format!("pty:{sandbox_id}:{pty_id}")
}

/// A key for a `pty.connect`'s connection, never used before.
fn connect_key(sandbox_id: &str, pty_id: &str) -> String {
    format!(
        "{}:{:016x}",
        create_key(sandbox_id, pty_id),
        wasip2::random::random::get_random_u64()
    )
}

/// The memo entry naming the key that holds the terminal in this process, with
/// when it was written (`KEY SECONDS`). Written by create and connect, renewed
/// by input and by the holder's stream when it is [`RENEW_S`] old: the memo
/// keeps an entry an hour at most.
fn holder_key(sandbox_id: &str, pty_id: &str) -> String {
    format!("pty-holder:{sandbox_id}:{pty_id}")
}

const HOLDER_TTL_MS: u32 = 3_600_000;
const RENEW_S: u64 = 600;

fn record_holder(sandbox_id: &str, pty_id: &str, key: &str) {
    memo::put(
        &holder_key(sandbox_id, pty_id),
        &format!("{key} {}", now_unix()),
        HOLDER_TTL_MS,
    );
}

/// The recorded holder's key and the record's age in seconds.
fn recorded_holder(sandbox_id: &str, pty_id: &str) -> Option<(String, u64)> {
    let value = memo::get(&holder_key(sandbox_id, pty_id))?;
    let (key, at) = value.rsplit_once(' ')?;
    Some((key.to_string(), now_unix().saturating_sub(at.parse().ok()?)))
}

/// The open key this process holds the terminal under: the recorded one, or,
/// when the memo lost the record, `pty.create`'s.
fn holder(sandbox_id: &str, pty_id: &str) -> Option<(String, u64)> {
    recorded_holder(sandbox_id, pty_id)
        .into_iter()
        .chain([(create_key(sandbox_id, pty_id), u64::MAX)])
        .find(|(key, _)| websocket::is_open(key))
}

/// Set (host-wide) just before `pty.kill` asks execd to SIGKILL a terminal, so the
/// stream that reports its end knows the signal.
fn killed_key(sandbox_id: &str, pty_id: &str) -> String {
    format!("killed:pty:{sandbox_id}:{pty_id}")
}

/// Where `pty.kill` tells a holder in another process that the signal was its
/// own (root's alone, like the session markers).
const KILLED: &str = "/run/epp/pty-killed";

fn killed_file(pty_id: &str) -> String {
    format!("{KILLED}/{pty_id}")
}

/// Set (host-wide) while a `pty.connect` of the terminal attaches in this
/// process, to the nonce of that call.
fn connecting_key(sandbox_id: &str, pty_id: &str) -> String {
    format!("pty-connecting:{sandbox_id}:{pty_id}")
}

/// Longer than a connect can take (the host gives the dial and the handshake
/// 10 s each), so a call that died midway blocks others for this long at most.
const CONNECTING_TTL_MS: u32 = 30_000;

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

/// Terminal output in a binary frame.
#[derive(Debug, PartialEq)]
enum Output {
    /// 0x01 stdout, 0x02 stderr (pipe mode).
    Live(Vec<u8>),
    /// 0x03: what execd kept, from the absolute offset (8 bytes, big-endian)
    /// of its first byte.
    Replay(u64, Vec<u8>),
}

fn output_of(frame: &[u8]) -> Option<Output> {
    match frame.first() {
        Some(1) | Some(2) if frame.len() > 1 => Some(Output::Live(frame[1..].to_vec())),
        Some(3) if frame.len() > 9 => {
            let at = u64::from_be_bytes(frame[1..9].try_into().ok()?);
            Some(Output::Replay(at, frame[9..].to_vec()))
        }
        _ => None,
    }
}

/// execd's `{"type":"error","code","error"}` frame about a terminal.
fn frame_error(value: &serde_json::Value, sandbox_id: &str, pty_id: &str) -> Error {
    let code = value
        .get("code")
        .and_then(|c| c.as_str())
        .unwrap_or("ERROR");
    let message = value
        .get("error")
        .or(value.get("message"))
        .and_then(|m| m.as_str())
        .unwrap_or("");
    if code == "ALREADY_CONNECTED" {
        return conflict(format!(
            "terminal {pty_id} of sandbox {sandbox_id} is held by another client that did not \
             let go in time (execd: {message}); retry pty.connect"
        ));
    }
    error::upstream(format!("terminal {pty_id} reported {code}: {message}"))
}

pub struct PtyStream {
    sandbox_id: String,
    pty_id: String,
    /// This stream's own connection: no other ever has this key.
    key: String,
    /// Output that came before execd said the terminal was attached (the
    /// replay of a `pty.connect`), to go out first.
    early: RefCell<VecDeque<Vec<u8>>>,
    exited: Cell<bool>,
    /// The host forgot `key` already (the connection closed or failed), so
    /// dropping the stream must not close it again.
    gone: Cell<bool>,
    /// When this stream last looked whether its holder record needs renewing.
    renew_at: Cell<u64>,
    /// The absolute offset of the next byte of output (what a reattach asks
    /// execd to replay from); none when it is not known.
    offset: Cell<Option<u64>>,
    /// Reattaches since something last came over the connection.
    reattaches: Cell<u32>,
}

/// What became of a [`PtyStream::reattach`].
enum Reattach {
    Done,
    /// Not attached again: the stream ends with what ended its connection.
    No,
    /// A `pty.connect` took the terminal (execd's 4001 or a record here).
    TakenOver,
}

/// Reattaches in a row, with nothing received between them, before the
/// stream gives up ([`PtyStream::reattach`]).
const REATTACH_TRIES: u32 = 3;
/// The waits for execd to let go of a dropped connection: until it has, it
/// answers another attach 409.
const LET_GO_WAITS_MS: [u64; 4] = [50, 150, 300, 500];

impl PtyStream {
    fn new(
        sandbox_id: &str,
        pty_id: &str,
        key: String,
        early: Vec<Vec<u8>>,
        offset: Option<u64>,
    ) -> PtyStream {
        PtyStream {
            sandbox_id: sandbox_id.to_string(),
            pty_id: pty_id.to_string(),
            key,
            early: RefCell::new(early.into()),
            exited: Cell::new(false),
            gone: Cell::new(false),
            renew_at: Cell::new(now_unix() + RENEW_S),
            offset: Cell::new(offset),
            reattaches: Cell::new(0),
        }
    }

    pub fn next(&self) -> Result<Option<PtyEvent>> {
        if self.exited.get() {
            return Ok(None);
        }
        loop {
            if let Some(output) = self.early.borrow_mut().pop_front() {
                return Ok(Some(PtyEvent::Output(output)));
            }
            let message = match websocket::receive(&self.key) {
                Ok(Some(Message::Close((code, _)))) => {
                    self.on_end(Some(code), None)?;
                    continue;
                }
                Ok(Some(message)) => message,
                Ok(None) => {
                    self.on_end(None, None)?;
                    continue;
                }
                Err(e) => {
                    self.on_end(None, Some(e.into()))?;
                    continue;
                }
            };
            self.reattaches.set(0);
            self.renew();
            match message {
                Message::Binary(frame) => match output_of(&frame) {
                    Some(Output::Live(output)) => {
                        self.offset
                            .set(self.offset.get().map(|at| at + output.len() as u64));
                        return Ok(Some(PtyEvent::Output(output)));
                    }
                    // Before `connected` of `pty.create`'s connection: what
                    // the new shell printed before execd attached it.
                    Some(Output::Replay(at, output)) => {
                        let replay = Attached {
                            early: vec![output],
                            replay_at: Some(at),
                        };
                        let (early, next) = replay.from(self.offset.get().unwrap_or(at));
                        self.offset.set(self.offset.get().map(|_| next));
                        self.early.borrow_mut().extend(early);
                        continue;
                    }
                    None => continue,
                },
                Message::Text(text) => {
                    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
                        continue;
                    };
                    match value.get("type").and_then(|t| t.as_str()) {
                        Some("exit") => {
                            self.exited.set(true);
                            self.forget_holder();
                            let code = value
                                .get("exit_code")
                                .and_then(|c| c.as_i64())
                                .unwrap_or(-1);
                            let killed = code == -1 && self.killed();
                            return Ok(Some(PtyEvent::Exited(exit_code(code, killed))));
                        }
                        Some("error") => {
                            return Err(frame_error(&value, &self.sandbox_id, &self.pty_id));
                        }
                        _ => continue,
                    }
                }
                Message::Close(_) => continue,
            }
        }
    }

    /// The connection ended (closed with `code`, or failed with `cause`)
    /// without an exit frame: reattached, or the error that ends the stream.
    fn on_end(&self, code: Option<u16>, cause: Option<Error>) -> Result<()> {
        match self.reattach(code, cause.is_some()) {
            Reattach::Done => Ok(()),
            Reattach::No => Err(self.ended(code, cause)),
            Reattach::TakenOver => Err(self.ended(Some(4001), None)),
        }
    }

    /// Attaches the terminal to this stream's key again, from the byte it had
    /// reached, when the connection dropped while the shell runs: nothing is
    /// lost or repeated as long as execd still keeps it (its last 1 MiB). A
    /// plain attach, never a take-over, so a client that attached in between
    /// keeps the terminal; execd answers 409 until it lets go of the dropped
    /// connection, which [`LET_GO_WAITS_MS`] waits for. Not when a
    /// `pty.connect` took the terminal (4001, or another key of this process
    /// holds it), when the host forgot the key itself (it is shutting down),
    /// when where the stream stands is not known, or after
    /// [`REATTACH_TRIES`] in a row.
    fn reattach(&self, code: Option<u16>, failed: bool) -> Reattach {
        let taken_here = || {
            recorded_holder(&self.sandbox_id, &self.pty_id).is_some_and(|(key, _)| key != self.key)
        };
        if code == Some(4001) || taken_here() {
            return Reattach::TakenOver;
        }
        let Some(offset) = self.offset.get() else {
            return Reattach::No;
        };
        if (code.is_none() && !failed) || self.reattaches.get() >= REATTACH_TRIES {
            return Reattach::No;
        }
        self.reattaches.set(self.reattaches.get() + 1);
        let Ok(mut execd) = Execd::connect(&self.sandbox_id) else {
            return Reattach::No;
        };
        let url = execd.ws_url(&format!("/pty/{}/ws?since={offset}", self.pty_id));
        let mut waits = LET_GO_WAITS_MS.iter();
        loop {
            // Each time: attaching to a shell that ended starts a new one, and
            // a pty.connect here may have taken the terminal meanwhile.
            if !status(&mut execd, &self.pty_id).is_ok_and(|s| s.running) {
                return Reattach::No;
            }
            if taken_here() {
                return Reattach::TakenOver;
            }
            match websocket::connect(&self.key, &url, execd.headers()) {
                Ok(()) => break,
                Err(e) if e.http_status == Some(409) => match waits.next() {
                    Some(ms) => sleep_ms(*ms),
                    None => return Reattach::No,
                },
                Err(_) => return Reattach::No,
            }
        }
        match until_attached(&self.key, &self.sandbox_id, &self.pty_id) {
            Ok(attached) => {
                let (early, next) = attached.from(offset);
                self.offset.set(Some(next));
                self.early.borrow_mut().extend(early);
                Reattach::Done
            }
            Err(e) => {
                websocket::close(&self.key, 1000, "not attached");
                if e.is(Kind::Conflict) {
                    Reattach::TakenOver
                } else {
                    Reattach::No
                }
            }
        }
    }

    /// Whether the SIGKILL that ended the shell was a `pty.kill`'s: this
    /// process's (the memo), or another's (its file in the sandbox, removed
    /// once read).
    fn killed(&self) -> bool {
        if memo::get(&killed_key(&self.sandbox_id, &self.pty_id)).is_some() {
            return true;
        }
        let Ok(mut execd) = Execd::connect(&self.sandbox_id) else {
            return false;
        };
        let path = killed_file(&self.pty_id);
        let query = format!("/files/info?path={}", encode(&path));
        let found = execd
            .send(|e| e.request("GET", &query), &[])
            .is_ok_and(|resp| resp.status == 200);
        if found {
            files::remove_quietly(&mut execd, &[path]);
        }
        found
    }

    /// Renews the holder record while this stream holds the terminal and
    /// receives, at most every [`RENEW_S`].
    fn renew(&self) {
        if now_unix() < self.renew_at.get() {
            return;
        }
        self.renew_at.set(now_unix() + RENEW_S);
        if let Some((key, age)) = recorded_holder(&self.sandbox_id, &self.pty_id)
            && key == self.key
            && age >= RENEW_S
        {
            record_holder(&self.sandbox_id, &self.pty_id, &self.key);
        }
    }

    /// The terminal is over: its record goes, if it names this stream.
    fn forget_holder(&self) {
        if recorded_holder(&self.sandbox_id, &self.pty_id).is_some_and(|(key, _)| key == self.key) {
            memo::forget(&holder_key(&self.sandbox_id, &self.pty_id));
        }
    }

    /// The connection is over before execd said how the shell ended (closed
    /// with `code`, or gone with `cause`, or neither) and was not attached
    /// again ([`PtyStream::reattach`]): an error either way, since the exit
    /// code is lost. When a `pty.connect` took the terminal
    /// (another key of this process holds it now, or execd closed this one
    /// with 4001 `TAKEN_OVER`), the error says so; otherwise it says how the
    /// connection ended (`cause`) and what became of the shell. execd always sends the exit frame
    /// before its close, but opensandbox-server's proxy can drop it: a frame
    /// from the client that reaches the proxy after execd closed makes the
    /// proxy give up on the connection (1011) before passing the last frames on.
    fn ended(&self, code: Option<u16>, cause: Option<Error>) -> Error {
        self.gone.set(true);
        self.exited.set(true);
        let here =
            recorded_holder(&self.sandbox_id, &self.pty_id).is_some_and(|(key, _)| key != self.key);
        if code != Some(4001) && !here {
            self.forget_holder();
            return self.exit_lost(code, cause);
        }
        let by = if here {
            "a later pty.connect in this epp-host process"
        } else {
            self.forget_holder();
            "a pty.connect elsewhere (another epp-host process, or another client of execd)"
        };
        error::conflict(format!(
            "terminal {} of sandbox {} was taken over by {by}: its output now goes there, and \
             its input and resizes come from there; the shell keeps running. To use it from \
             here again, call pty.connect here (which takes it back)",
            self.pty_id, self.sandbox_id
        ))
    }

    /// The connection closed (with `code`) or failed (`cause`) without an exit
    /// frame: the error, with what became of the shell, asked of execd (one
    /// request, on this rare path). Not when the host forgot the connection
    /// itself (neither: it is shutting down).
    fn exit_lost(&self, code: Option<u16>, cause: Option<Error>) -> Error {
        let (kind, ended) = match (code, &cause) {
            (_, Some(cause)) => (cause.kind, format!("failed ({})", cause.message)),
            (Some(code), None) => (Kind::Upstream, format!("closed with code {code}")),
            (None, None) => (Kind::Upstream, "was closed by the host".to_string()),
        };
        let shell = if code.is_none() && cause.is_none() {
            String::new()
        } else {
            match Execd::connect(&self.sandbox_id)
                .and_then(|mut execd| check_running(&mut execd, &self.pty_id))
            {
                Ok(_) => ": its shell still runs; pty.connect attaches it again".to_string(),
                Err(e) => format!(": {}", e.message),
            }
        };
        Error::new(
            kind,
            format!(
                "the connection to terminal {} of sandbox {} {ended} before execd said how the \
                 shell ended, so its exit code is unknown{shell}",
                self.pty_id, self.sandbox_id
            ),
        )
    }
}

impl Drop for PtyStream {
    fn drop(&mut self) {
        // Detach only: the shell keeps running until it exits or pty.kill. The
        // key is this stream's alone, so no other connection is touched.
        if !self.gone.get() {
            websocket::close(&self.key, 1000, "detached");
        }
    }
}

/// `GET /pty/{id}`'s answer.
#[derive(serde::Deserialize)]
struct Status {
    running: bool,
    /// How many bytes the terminal has printed since it started.
    #[serde(default)]
    output_offset: Option<u64>,
}

/// `GET /pty/{id}`: the terminal's state (a 404 in plain words).
fn status(execd: &mut Execd, pty_id: &str) -> Result<Status> {
    let path = format!("/pty/{pty_id}");
    let resp = execd.send(|e| e.request("GET", &path), &[])?;
    let subject = format!("terminal {pty_id}");
    execd.json(
        execd
            .check(resp, &subject)
            .map_err(|e| unknown(e, &execd.sandbox_id, pty_id))?,
        &subject,
    )
}

/// Whether the terminal exists and its shell still runs (attaching to one
/// whose shell ended would make execd start a new shell); its state if so.
fn check_running(execd: &mut Execd, pty_id: &str) -> Result<Status> {
    let status = status(execd, pty_id)?;
    if !status.running {
        return Err(not_found(format!(
            "terminal {pty_id} of sandbox {} has exited (its shell ended); open a new one \
             with pty.create",
            execd.sandbox_id
        )));
    }
    Ok(status)
}

/// A 404 about a terminal, in plain words (the HTTP answer kept).
fn unknown(e: Error, sandbox_id: &str, pty_id: &str) -> Error {
    if e.is(Kind::NotFound) || e.status() == Some(404) {
        return e.reworded(
            Kind::NotFound,
            format!(
                "terminal {pty_id} does not exist in sandbox {sandbox_id} (it was killed, or \
                 never opened there); open a new one with pty.create"
            ),
        );
    }
    e
}

/// This process's turn to attach a terminal: one `pty.connect` of a terminal
/// at a time per process, since two would race in execd (the one that
/// finishes its handshake last holds the terminal, whichever recorded itself
/// last here). Given back on drop, only if it is still this call's.
struct Turn {
    key: String,
    nonce: String,
}

impl Turn {
    fn take(sandbox_id: &str, pty_id: &str) -> Result<Turn> {
        let key = connecting_key(sandbox_id, pty_id);
        let nonce = format!("{:016x}", wasip2::random::random::get_random_u64());
        let busy = || {
            conflict(format!(
                "another pty.connect of terminal {pty_id} of sandbox {sandbox_id} is under way in \
                 this epp-host process; retry when it has answered"
            ))
        };
        if memo::get(&key).is_some() {
            return Err(busy());
        }
        memo::put(&key, &nonce, CONNECTING_TTL_MS);
        // Read back: of two calls that both found no turn, the later writer
        // wins and the other stops here.
        if memo::get(&key).as_deref() != Some(nonce.as_str()) {
            return Err(busy());
        }
        Ok(Turn { key, nonce })
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if memo::get(&self.key).as_deref() == Some(self.nonce.as_str()) {
            memo::forget(&self.key);
        }
    }
}

pub fn connect(sandbox_id: &str, pty_id: &str, since: Option<u64>) -> Result<(String, PtyStream)> {
    check_id("terminal", pty_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let status = check_running(&mut execd, pty_id)?;
    let _turn = Turn::take(sandbox_id, pty_id)?;
    let old = holder(sandbox_id, pty_id).map(|(key, _)| key);
    let key = connect_key(sandbox_id, pty_id);
    let mut path = format!("/pty/{pty_id}/ws?takeover=1");
    if let Some(since) = since {
        path.push_str(&format!("&since={since}"));
    }
    // Recorded before the handshake: execd closes the old connection (4001)
    // as soon as this one attaches, and its stream must find it was replaced
    // here.
    record_holder(sandbox_id, pty_id, &key);
    let attached = websocket::connect(&key, &execd.ws_url(&path), execd.headers())
        .map_err(|e| unknown(e.into(), sandbox_id, pty_id))
        .and_then(|()| {
            until_attached(&key, sandbox_id, pty_id).inspect_err(|_| {
                websocket::close(&key, 1000, "not attached");
            })
        });
    let attached = match attached {
        Ok(attached) => attached,
        Err(e) => {
            // A failed attach leaves the old holder attached, and recorded.
            match &old {
                Some(old) => record_holder(sandbox_id, pty_id, old),
                None => memo::forget(&holder_key(sandbox_id, pty_id)),
            }
            return Err(e);
        }
    };
    // The old connection goes at once, so input and resizes from now on find
    // only the new one; its stream ends reading its own, closed, key.
    if let Some(old) = &old {
        websocket::close(old, 1000, "taken over by pty.connect");
    }
    // Again, after the close: a renewal that read the old record before this
    // call changed it is overwritten.
    record_holder(sandbox_id, pty_id, &key);
    // Where the stream stands, for a reattach: known from a replay, or,
    // without one, when execd had printed exactly up to where it was asked to
    // start (an offset past the end would be taken for the end).
    let from = since.unwrap_or(0);
    let known = attached.replay_at.is_some() || status.output_offset == Some(from);
    let (early, next) = attached.from(from);
    Ok((
        pty_id.to_string(),
        PtyStream::new(sandbox_id, pty_id, key, early, known.then_some(next)),
    ))
}

/// What a connection brought before execd said it was attached: the replay
/// (from `replay_at`, the absolute offset of its first byte) and any live
/// output.
#[derive(Default, Debug, PartialEq)]
struct Attached {
    early: Vec<Vec<u8>>,
    replay_at: Option<u64>,
}

impl Attached {
    /// The output from offset `from` on (without a replay, it starts there),
    /// and the offset after it. What a replay repeats before `from` is cut
    /// off; a replay that starts after `from` (execd no longer kept those
    /// bytes) is taken as it is.
    fn from(self, from: u64) -> (Vec<Vec<u8>>, u64) {
        let start = self.replay_at.unwrap_or(from);
        let mut skip = from.saturating_sub(start);
        let mut next = start.max(from);
        let mut early = Vec::with_capacity(self.early.len());
        for mut output in self.early {
            let cut = skip.min(output.len() as u64);
            skip -= cut;
            output.drain(..cut as usize);
            next += output.len() as u64;
            if !output.is_empty() {
                early.push(output);
            }
        }
        (early, next)
    }
}

/// Reads `key`'s connection until execd says the terminal is attached to it
/// (`connected`, or live output), and answers the output before that (the
/// replay). execd evicts the holder only after the handshake, waits for it to
/// let go (5 s at most, then an error frame), replays and says `connected`:
/// waiting for it makes a `pty.connect` answer once the terminal is this
/// connection's, so a later one replaces this one, and not a connection still
/// waiting for its turn (which, once it got it, would evict the later one).
fn until_attached(key: &str, sandbox_id: &str, pty_id: &str) -> Result<Attached> {
    let mut attached = Attached::default();
    loop {
        match websocket::receive(key)? {
            Some(Message::Binary(frame)) => match output_of(&frame) {
                Some(Output::Replay(at, output)) => {
                    attached.replay_at.get_or_insert(at);
                    attached.early.push(output);
                }
                Some(Output::Live(output)) => {
                    attached.early.push(output);
                    return Ok(attached);
                }
                None => {}
            },
            Some(Message::Text(text)) => {
                let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
                    continue;
                };
                match value.get("type").and_then(|t| t.as_str()) {
                    Some("connected") => return Ok(attached),
                    Some("error") => return Err(frame_error(&value, sandbox_id, pty_id)),
                    _ => continue,
                }
            }
            Some(Message::Close((4001, _))) => {
                return Err(conflict(format!(
                    "terminal {pty_id} of sandbox {sandbox_id} was taken over by another client \
                     while this one attached it; retry pty.connect"
                )));
            }
            Some(Message::Close((code, reason))) => {
                return Err(error::upstream(format!(
                    "execd closed the connection to terminal {pty_id} of sandbox {sandbox_id} \
                     ({code} {reason}) before attaching it; retry pty.connect"
                )));
            }
            None => {
                return Err(error::upstream(format!(
                    "the connection to terminal {pty_id} of sandbox {sandbox_id} ended before \
                     execd attached it; retry pty.connect"
                )));
            }
        }
    }
}

pub fn create(req: PtyRequest) -> Result<(String, PtyStream)> {
    if req.cols == 0 || req.rows == 0 {
        return Err(invalid("cols and rows must be at least 1"));
    }
    let mut execd = Execd::connect(&req.sandbox_id)?;
    let user = users::of_request(&mut execd, req.user.as_deref())?;
    let command = program(&req.envs, req.cmd.as_deref(), user.as_ref())?;
    let (command, resize) = sized(command, req.cols, req.rows);
    let pty_id = open(
        &mut execd,
        req.cwd.as_deref(),
        command,
        "terminal",
        "the new terminal",
    )?;
    let key = create_key(&req.sandbox_id, &pty_id);
    websocket::connect(
        &key,
        &execd.ws_url(&format!("/pty/{pty_id}/ws")),
        execd.headers(),
    )?;
    record_holder(&req.sandbox_id, &pty_id, &key);
    let stream = PtyStream::new(&req.sandbox_id, &pty_id, key.clone(), Vec::new(), Some(0));
    if resize {
        send_json(
            &key,
            serde_json::json!({"type": "resize", "cols": req.cols, "rows": req.rows}),
        )?;
    }
    Ok((pty_id, stream))
}

/// The size execd gives every terminal it starts.
const INITIAL_SIZE: (u16, u16) = (80, 24);

/// A new terminal's program set to `cols`×`rows`, and whether a resize frame
/// must still follow the connect. A program of ours (a `cmd`, variables, a
/// user) sets its size itself with `stty` before it starts, so it sees its
/// size from its first instruction, and no frame from us can reach
/// opensandbox-server's proxy as it exits (even at once: `setpriv` missing),
/// which makes the proxy drop the exit frame ([`PtyStream::ended`]). execd's
/// own shell (no program) waits for input, so a frame is safe. At execd's own
/// size nothing is sent or added.
fn sized(command: Option<String>, cols: u16, rows: u16) -> (Option<String>, bool) {
    match command {
        _ if (cols, rows) == INITIAL_SIZE => (command, false),
        Some(command) => (
            Some(format!(
                "stty cols {cols} rows {rows} 2>/dev/null; {command}"
            )),
            false,
        ),
        None => (None, true),
    }
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

/// The key this process holds the terminal under (its record renewed when
/// old).
fn attached(sandbox_id: &str, pty_id: &str) -> Result<String> {
    check_id("terminal", pty_id)?;
    let (key, age) = holder(sandbox_id, pty_id).ok_or_else(|| {
        not_found(format!(
            "terminal {pty_id} of sandbox {sandbox_id} is not attached to this host process \
             (it exited, another process holds it, or it was opened elsewhere); \
             pty.connect attaches it here"
        ))
    })?;
    if age >= RENEW_S {
        record_holder(sandbox_id, pty_id, &key);
    }
    Ok(key)
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

/// `DELETE /pty/{id}` (SIGKILL). The stream that reports the end turns execd's
/// -1 into 137 when it knows the signal was this: a holder in this process
/// from the memo, one in another process from a file written first into the
/// sandbox (left there if no process holds the terminal).
pub fn kill(sandbox_id: &str, pty_id: &str) -> Result<()> {
    check_id("terminal", pty_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let path = format!("/pty/{pty_id}");
    // Before the request: the exit frame may reach the stream before execd answers.
    let killed = killed_key(sandbox_id, pty_id);
    memo::put(&killed, "9", 60_000);
    let marked = holder(sandbox_id, pty_id).is_none()
        && files::create_dir(&mut execd, KILLED, 0o700)
            .and_then(|()| files::put_marker(&mut execd, &killed_file(pty_id), b"9\n", 0o600))
            .is_ok();
    let resp = execd.send(|e| e.request("DELETE", &path), &[]);
    let subject = format!("terminal {pty_id}");
    let outcome = resp.and_then(|resp| {
        execd
            .check(resp, &subject)
            .map(drop)
            .map_err(|e| unknown(e, sandbox_id, pty_id))
    });
    if outcome.is_err() {
        memo::forget(&killed);
        if marked {
            files::remove_quietly(&mut execd, &[killed_file(pty_id)]);
        }
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
    fn sizes() {
        let cmd = Some("top".to_string());
        assert_eq!(sized(cmd.clone(), 80, 24), (cmd.clone(), false));
        assert_eq!(
            sized(cmd, 100, 40),
            (
                Some("stty cols 100 rows 40 2>/dev/null; top".to_string()),
                false
            )
        );
        // execd's own shell: a resize frame, at another size only.
        assert_eq!(sized(None, 100, 40), (None, true));
        assert_eq!(sized(None, 80, 24), (None, false));
    }

    #[test]
    fn outputs() {
        assert_eq!(output_of(b"\x01ab"), Some(Output::Live(b"ab".to_vec())));
        assert_eq!(output_of(b"\x02e"), Some(Output::Live(b"e".to_vec())));
        let mut replay = vec![3, 0, 0, 0, 0, 0, 0, 1, 2];
        replay.extend_from_slice(b"xyz");
        assert_eq!(
            output_of(&replay),
            Some(Output::Replay(258, b"xyz".to_vec()))
        );
        assert_eq!(output_of(b"\x01"), None);
        assert_eq!(output_of(b"\x03short"), None);
        assert_eq!(output_of(b"\x00in"), None);
    }

    #[test]
    fn attached_from_an_offset() {
        let attached = |replay_at, early: &[&str]| Attached {
            early: early.iter().map(|o| o.as_bytes().to_vec()).collect(),
            replay_at,
        };
        let text = |early: Vec<Vec<u8>>| String::from_utf8(early.concat()).unwrap();
        // A replay from where the stream stood, then live output.
        let (early, next) = attached(Some(10), &["abc", "de"]).from(10);
        assert_eq!((text(early), next), ("abcde".into(), 15));
        // What the replay repeats is cut off, across frames.
        let (early, next) = attached(Some(8), &["ab", "cd", "e"]).from(11);
        assert_eq!((text(early), next), ("de".into(), 13));
        // Everything repeated: nothing new.
        let (early, next) = attached(Some(8), &["ab"]).from(10);
        assert_eq!((text(early), next), ("".into(), 10));
        // execd no longer kept bytes 10..20: the replay as it is.
        let (early, next) = attached(Some(20), &["xy"]).from(10);
        assert_eq!((text(early), next), ("xy".into(), 22));
        // No replay: from where it stood.
        let (early, next) = attached(None, &["live"]).from(7);
        assert_eq!((text(early), next), ("live".into(), 11));
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
