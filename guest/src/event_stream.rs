//! execd's event streams (`POST /command`, `POST /session/{id}/run`,
//! `POST /code`), followed by one state machine: SSE frames become execd
//! events, each stream's [`Mapping`] turns those into its WIT events, and the
//! machine does the rest the same way for all of them:
//!
//! - batching: `next` waits for one event, then takes what is already buffered;
//! - the end: the mapping's last event, or execd's bare error frame, ends the
//!   stream (the connection is closed at once, not left to execd's grace period);
//! - breaks: a connection that broke, or a body that ended too soon, is said
//!   more precisely when the sandbox was deleted or stopped (crate::broken_off);
//! - events before a failure are handed out first, the failure on the next call;
//! - tokens: what the stream runs is reported to the host (`request.made`) when
//!   execd names it, and settled when it ended or a failure means it is gone,
//!   so that a failed request stops only what may still run (crate::undo).

use crate::broken_off;
use crate::error::{self, Error, Kind, Result};
use crate::http::{Timeouts, Transport};
use crate::models::ExecEvent;
use crate::sse::{Frame, FrameReader, Frames};
use crate::time::monotonic_ms;
use crate::undo::Token;
use std::time::Duration;

/// A stream of events of one kind, whichever way it is read (the export
/// boundary holds one of these behind each stream resource).
pub trait Source<E> {
    /// The next events (at least one), or none after the last.
    fn next(&mut self) -> Result<Option<Vec<E>>>;
}

/// What one execd event did to the stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Go,
    /// execd named what runs (`init`): a command's id, a code run's context.
    Started(String),
    /// The stream's last event.
    End,
}

/// A stream that failed, and whether what it ran is gone with it (then its
/// token needs no undoing).
#[derive(Debug)]
pub struct Failure {
    pub error: Error,
    pub gone: bool,
}

impl Failure {
    /// What ran ended with this failure (execd killed it, refused it, …).
    pub fn ended(error: Error) -> Failure {
        Failure { error, gone: true }
    }

    /// What ran may still run.
    pub fn open(error: Error) -> Failure {
        Failure { error, gone: false }
    }
}

/// How one kind of stream reads execd's events.
pub trait Mapping {
    type Event;
    /// What runs, in messages: "the command", "the code".
    const WHAT: &'static str;

    /// Where it runs, in messages ("sandbox 5c1f…", "code context … in sandbox …").
    fn target(&self) -> String;
    /// Turns one execd event into this stream's events (pings and unknown
    /// kinds into none).
    fn map(
        &mut self,
        event: ExecEvent,
        out: &mut Vec<Self::Event>,
    ) -> std::result::Result<Step, Failure>;
    /// execd's bare error frame: the mapping's own reading of it, if it has one.
    fn refused(&mut self, message: &str) -> Option<Failure>;
    /// The body ended: true when that ends the stream normally (after pushing
    /// its last events), false when the connection was lost.
    fn at_end(&mut self, out: &mut Vec<Self::Event>) -> bool;
    /// What a lost stream leaves to the caller ("check commands.status").
    fn lost(&self) -> String;
    /// The token of what execd named at `started`; none for a stream whose
    /// work must not be undone.
    fn token(&self, _started: &str) -> Option<Token> {
        None
    }
    /// A deadline of the mapping's own that passed, checked before each read
    /// and after a break (a code run's timeout: it interrupts the kernel).
    fn overdue(&mut self, _frames: &mut dyn Frames) -> Option<Failure> {
        None
    }
}

/// How long past its own timeout a run may stay silent: execd answers at
/// once (`init`), pings every 3 s and reports the kill right after the timeout.
const TIMEOUT_SLACK: Duration = Duration::from_secs(2);

/// The waits of a streamed request. Pings arrive every 3 s once the run
/// started, so a long silence means trouble; with a timeout, no wait (connect,
/// first byte, between bytes) is longer than that timeout plus a little slack,
/// so a sandbox that does not answer (e.g. paused) fails in about that time.
pub fn stream_timeouts(timeout_ms: Option<u64>) -> Timeouts {
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

/// A run's timeout, counted from before its request was sent (execd's clock
/// starts when it gets the request: a slow answer must not make a timeout look
/// like a kill).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub timeout_ms: Option<u64>,
    started_ms: u64,
}

impl Clock {
    pub fn start(timeout_ms: Option<u64>) -> Clock {
        Clock {
            timeout_ms,
            started_ms: monotonic_ms(),
        }
    }

    /// Whether the timeout has (about) passed: a kill now is the timeout's.
    pub fn passed(&self) -> bool {
        self.timeout_ms
            .is_some_and(|t| monotonic_ms().saturating_sub(self.started_ms) + 50 >= t)
    }

    /// The timeout, once it has fully passed.
    pub fn overdue(&self) -> Option<u64> {
        let t = self.timeout_ms?;
        (monotonic_ms().saturating_sub(self.started_ms) >= t).then_some(t)
    }

    /// The timeout in seconds, for messages.
    pub fn seconds(&self) -> String {
        crate::time::seconds(self.timeout_ms.unwrap_or_default())
    }
}

/// One execd event stream, read through its mapping.
pub struct EventStream<M: Mapping, F: Frames = FrameReader> {
    reader: F,
    sandbox_id: String,
    mapping: M,
    token: Option<Token>,
    /// A failure that came after events of the same batch: the next answer.
    pending: Option<Error>,
    finished: bool,
}

impl<M: Mapping, F: Frames> EventStream<M, F> {
    pub fn new(reader: F, sandbox_id: &str, mapping: M) -> EventStream<M, F> {
        EventStream {
            reader,
            sandbox_id: sandbox_id.to_string(),
            mapping,
            token: None,
            pending: None,
            finished: false,
        }
    }

    /// The stream broke off with `e` (a transport failure, or a body that
    /// ended too soon): said as what happened to the sandbox when it went away.
    fn broken(&self, e: Error) -> Failure {
        if e.is(Kind::TimedOut) {
            return Failure::open(e);
        }
        let diagnosis = broken_off::after_break(&self.sandbox_id);
        Failure {
            gone: diagnosis.processes_gone(),
            error: diagnosis.error(&self.sandbox_id, M::WHAT).unwrap_or(e),
        }
    }

    /// One step of the loop: the next frame, read and mapped.
    fn step(&mut self, out: &mut Vec<M::Event>) -> std::result::Result<Step, Failure> {
        if let Some(f) = self.mapping.overdue(&mut self.reader) {
            return Err(f);
        }
        let frame = match self.reader.next() {
            Ok(frame) => frame,
            Err(t) => return Err(self.transport(t)),
        };
        match frame {
            Some(Ok(Frame::Event(event))) => self.mapping.map(event, out),
            Some(Ok(Frame::Error { code, message })) => {
                Err(self.mapping.refused(&message).unwrap_or_else(|| {
                    // execd appends one when what it ran failed: it is over.
                    Failure::ended(error::upstream(format!(
                        "{} reported {code}: {message}",
                        self.mapping.target()
                    )))
                }))
            }
            Some(Err(bad)) => Err(Failure::open(error::upstream(format!(
                "{}: {bad}",
                self.mapping.target()
            )))),
            None if self.mapping.at_end(out) => Ok(Step::End),
            None => {
                let lost = error::upstream(self.mapping.lost());
                Err(self.broken(lost))
            }
        }
    }

    fn transport(&mut self, t: Transport) -> Failure {
        if let Some(f) = self.mapping.overdue(&mut self.reader) {
            return f;
        }
        let e = error::broken_body(t, &self.mapping.target());
        self.broken(e)
    }

    fn end(&mut self) {
        self.finished = true;
        // Don't wait for execd's grace period after the last event.
        self.reader.close();
    }

    fn settle(&mut self) {
        if let Some(token) = self.token.take() {
            token.settled();
        }
    }
}

impl<M: Mapping, F: Frames> Source<M::Event> for EventStream<M, F> {
    fn next(&mut self) -> Result<Option<Vec<M::Event>>> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        if self.finished {
            return Ok(None);
        }
        let mut out = Vec::new();
        // Block for the first event, then take what is already buffered.
        while out.is_empty() || self.reader.has_buffered() {
            match self.step(&mut out) {
                Ok(Step::Go) => {}
                Ok(Step::Started(id)) => {
                    self.token = self.mapping.token(&id);
                    if let Some(token) = &self.token {
                        token.made();
                    }
                }
                Ok(Step::End) => {
                    self.settle();
                    self.end();
                    break;
                }
                Err(failure) => {
                    if failure.gone {
                        self.settle();
                    }
                    self.end();
                    if out.is_empty() {
                        return Err(failure.error);
                    }
                    self.pending = Some(failure.error);
                    break;
                }
            }
        }
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_bounds_every_wait() {
        let t = stream_timeouts(None);
        assert_eq!(
            (t.connect, t.first_byte, t.between_bytes),
            (
                Duration::from_secs(10),
                Duration::from_secs(60),
                Duration::from_secs(120)
            )
        );
        let t = stream_timeouts(Some(5_000));
        assert_eq!(
            (t.connect, t.first_byte, t.between_bytes),
            (
                Duration::from_secs(7),
                Duration::from_secs(7),
                Duration::from_secs(7)
            )
        );
        let t = stream_timeouts(Some(3_600_000));
        assert_eq!(
            (t.connect, t.first_byte, t.between_bytes),
            (
                Duration::from_secs(10),
                Duration::from_secs(60),
                Duration::from_secs(120)
            )
        );
    }

    use std::collections::VecDeque;

    /// What a test stream holds, in order.
    enum Item {
        Frame(Frame),
        /// A frame that is not an event.
        Bad,
        /// The connection failed.
        Broken(Transport),
        /// The end of what has arrived so far (the batch ends here).
        Gap,
    }

    struct Listed(VecDeque<Item>);

    impl Frames for Listed {
        fn next(
            &mut self,
        ) -> std::result::Result<Option<std::result::Result<Frame, String>>, Transport> {
            loop {
                match self.0.pop_front() {
                    None => return Ok(None),
                    Some(Item::Gap) => {}
                    Some(Item::Frame(f)) => return Ok(Some(Ok(f))),
                    Some(Item::Bad) => return Ok(Some(Err("not JSON".into()))),
                    Some(Item::Broken(t)) => return Err(t),
                }
            }
        }
        fn has_buffered(&mut self) -> bool {
            !matches!(self.0.front(), None | Some(Item::Gap))
        }
        fn close(&mut self) {
            self.0.clear();
        }
    }

    fn event(kind: &str, text: &str) -> Item {
        Item::Frame(Frame::Event(ExecEvent {
            kind: kind.into(),
            text: Some(text.into()),
            error: None,
            execution_count: None,
            results: None,
        }))
    }

    fn refusal(message: &str) -> Item {
        Item::Frame(Frame::Error {
            code: "RUNTIME_ERROR".into(),
            message: message.into(),
        })
    }

    /// Texts of `stdout` events; `exit` ends the stream.
    struct Texts;

    impl Mapping for Texts {
        type Event = String;
        const WHAT: &'static str = "the test";
        fn target(&self) -> String {
            "sandbox t".into()
        }
        fn map(
            &mut self,
            e: ExecEvent,
            out: &mut Vec<String>,
        ) -> std::result::Result<Step, Failure> {
            match e.kind.as_str() {
                "stdout" => out.push(e.text.unwrap_or_default()),
                "exit" => {
                    out.push("exit".into());
                    return Ok(Step::End);
                }
                _ => {}
            }
            Ok(Step::Go)
        }
        fn refused(&mut self, message: &str) -> Option<Failure> {
            (message == "mine").then(|| Failure::ended(error::conflict("refused")))
        }
        fn at_end(&mut self, out: &mut Vec<String>) -> bool {
            out.push("end".into());
            true
        }
        fn lost(&self) -> String {
            "lost".into()
        }
    }

    fn stream(items: Vec<Item>) -> EventStream<Texts, Listed> {
        EventStream::new(Listed(items.into()), "t", Texts)
    }

    #[test]
    fn a_batch_is_the_first_event_and_what_is_buffered() {
        let mut s = stream(vec![
            event("ping", ""),
            event("stdout", "a"),
            event("stdout", "b"),
            Item::Gap,
            event("stdout", "c"),
            event("exit", ""),
            event("stdout", "after the end"),
        ]);
        assert_eq!(s.next().unwrap(), Some(vec!["a".to_string(), "b".into()]));
        assert_eq!(
            s.next().unwrap(),
            Some(vec!["c".to_string(), "exit".into()])
        );
        // Nothing after the last event, however much execd sent.
        assert_eq!(s.next().unwrap(), None);
        assert_eq!(s.next().unwrap(), None);
    }

    #[test]
    fn the_end_of_the_body_is_the_mappings_to_judge() {
        let mut s = stream(vec![event("stdout", "a")]);
        assert_eq!(s.next().unwrap(), Some(vec!["a".to_string()]));
        assert_eq!(s.next().unwrap(), Some(vec!["end".to_string()]));
        assert_eq!(s.next().unwrap(), None);
    }

    #[test]
    fn a_failure_comes_after_the_events_before_it() {
        let mut s = stream(vec![event("stdout", "a"), refusal("boom")]);
        assert_eq!(s.next().unwrap(), Some(vec!["a".to_string()]));
        let e = s.next().unwrap_err();
        assert_eq!(e.kind, Kind::Upstream);
        assert!(
            e.message.contains("sandbox t reported RUNTIME_ERROR: boom"),
            "{e:?}"
        );
        assert_eq!(s.next().unwrap(), None);
    }

    #[test]
    fn failures_are_read_the_same_way_for_every_stream() {
        // The mapping's own reading of a refusal wins.
        let mut s = stream(vec![refusal("mine")]);
        assert_eq!(s.next().unwrap_err().kind, Kind::Conflict);
        // A timeout while reading is that, without asking about the sandbox.
        let mut s = stream(vec![Item::Broken(Transport::Timeout("read".into()))]);
        let e = s.next().unwrap_err();
        assert_eq!(e.kind, Kind::TimedOut);
        assert!(
            e.message.contains("sandbox t stopped sending data"),
            "{e:?}"
        );
        // A frame that is no event fails the stream after what came before.
        let mut s = stream(vec![event("stdout", "a"), Item::Bad, event("stdout", "b")]);
        assert_eq!(s.next().unwrap(), Some(vec!["a".to_string()]));
        let e = s.next().unwrap_err();
        assert!(e.message.contains("sandbox t: not JSON"), "{e:?}");
        assert_eq!(s.next().unwrap(), None);
    }
}
