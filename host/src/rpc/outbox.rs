//! Where answers and notifications go: whole lines on stdout, one at a time so
//! lines never interleave (`Outbox::wire`), or, for a front end that is not
//! EPP/1's wire (`epp-host mcp`), notifications handed over as values
//! (`Outbox::notes`). A small line goes out from the task that sends it when
//! nothing is queued and the pipe can take it at once; anything else goes
//! through the writer thread.

use super::errors::RpcError;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// Lines queued for stdout before senders wait (back-pressure for big streams).
const QUEUE: usize = 1024;
/// Bytes queued for stdout before senders wait: a client that reads slowly
/// holds back a streamed read or command output here, not in memory (1024
/// notifications of a streamed read would be hundreds of MiB). A longer line
/// takes the whole budget, so it waits for the queue to empty.
const QUEUE_BYTES: usize = 8 << 20;
/// Small lines are gathered into one write of up to this many bytes.
const GATHER: usize = 1 << 20;
/// Lines at least this long are written as they are, never copied into the
/// gathering buffer (a `files.read` answer can be hundreds of MiB).
const DIRECT: usize = 64 << 10;

/// The sending end of the writer: cheap to clone, one per request.
#[derive(Clone)]
pub struct Outbox {
    to: To,
}

#[derive(Clone)]
enum To {
    /// Lines on the wire, through the writer thread or written at once.
    Wire {
        tx: mpsc::Sender<Queued>,
        budget: Arc<Semaphore>,
        out: Arc<Out>,
    },
    /// Notifications as values, for another front end.
    Notes(mpsc::Sender<Note>),
}

/// Whether the output can take a line of this many bytes at once, without
/// blocking (`wire::stdout_room`).
pub type Room = Box<dyn Fn(usize) -> bool + Send + Sync>;

/// The output, shared by the writer thread and the senders that write a line
/// at once.
struct Out {
    writer: Mutex<Box<dyn Write + Send>>,
    /// Lines queued for the writer thread and not yet written. A sender writes
    /// at once only when there are none, under `writer`, and the thread takes
    /// its count down under `writer` after writing: so a line never overtakes
    /// one queued before it.
    queued: AtomicUsize,
    /// None: every line goes through the writer thread.
    room: Option<Room>,
}

impl Out {
    /// Writes `line` now if that keeps the order and cannot block: nothing
    /// queued, the output free and with room. False, with nothing written (or
    /// a write that failed, which the writer thread will find too), otherwise.
    fn write_now(&self, line: &[u8]) -> bool {
        let Some(room) = &self.room else {
            return false;
        };
        if line.len() >= DIRECT || self.queued.load(Ordering::Acquire) != 0 {
            return false;
        }
        let Ok(mut writer) = self.writer.try_lock() else {
            return false;
        };
        if self.queued.load(Ordering::Acquire) != 0 || !room(line.len()) {
            return false;
        }
        writer.write_all(line).and_then(|()| writer.flush()).is_ok()
    }
}

/// A notification handed over as a value (`Outbox::notes`).
#[derive(Debug)]
pub struct Note {
    pub method: String,
    pub params: Value,
}

/// A line, the raw bytes of a binary frame after it in pieces as they came
/// (none for a plain line), and their share of `QUEUE_BYTES`, given back
/// once written.
struct Queued {
    line: Vec<u8>,
    tail: Vec<Bytes>,
    permit: OwnedSemaphorePermit,
}

impl Queued {
    fn len(&self) -> usize {
        self.line.len() + tail_len(&self.tail)
    }
}

/// The bytes of a frame's pieces.
pub fn tail_len(tail: &[Bytes]) -> usize {
    tail.iter().map(Bytes::len).sum()
}

impl Outbox {
    /// Starts the writer on a thread of its own; it ends when every `Outbox`
    /// clone is dropped. A thread with plain blocking writes, not a task on
    /// tokio's stdout: that would hop once more (to its blocking pool) and copy
    /// every line once more for each answer.
    ///
    /// With `room` (stdout is a pipe), a small line is written by the task
    /// that sends it when nothing is queued and the pipe can take it at once:
    /// an answer then needs no hand-over to this thread (one thread switch
    /// fewer per call; bench/profiling.md, issue 24).
    pub fn wire<W: Write + Send + 'static>(
        out: W,
        room: Option<Room>,
    ) -> (Outbox, std::thread::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<Queued>(QUEUE);
        let shared = Arc::new(Out {
            writer: Mutex::new(Box::new(out)),
            queued: AtomicUsize::new(0),
            room,
        });
        let out = shared.clone();
        let writer = move || {
            let mut buf = Vec::new();
            let mut next = rx.blocking_recv();
            while let Some(Queued { line, tail, permit }) = next.take() {
                // Gather what is queued behind this line into one write; a long
                // line (or a frame) goes out by itself, without a copy.
                // Permits go back once their bytes are written.
                let mut big = None;
                let mut permits = vec![permit];
                if line.len() >= DIRECT || !tail.is_empty() {
                    big = Some((line, tail));
                } else {
                    buf.extend_from_slice(&line);
                    while buf.len() < GATHER {
                        match rx.try_recv() {
                            Ok(more) if more.len() >= DIRECT || !more.tail.is_empty() => {
                                next = Some(more);
                                break;
                            }
                            Ok(more) => {
                                buf.extend_from_slice(&more.line);
                                permits.push(more.permit);
                            }
                            Err(_) => break,
                        }
                    }
                }
                let mut writer = out.writer.lock().unwrap_or_else(|e| e.into_inner());
                let mut written = || {
                    writer.write_all(&buf)?;
                    if let Some((line, tail)) = &big {
                        writer.write_all(line)?;
                        for piece in tail {
                            writer.write_all(piece)?;
                        }
                    }
                    writer.flush()
                };
                let failed = written().is_err();
                if !failed {
                    out.queued.fetch_sub(permits.len(), Ordering::Release);
                }
                drop(writer);
                if failed {
                    // Nobody reads our answers any more; drain so senders don't
                    // block (every permit given back, the held-over line's too:
                    // kept, it could hold the whole budget and stall them all).
                    drop(permits);
                    drop(next.take());
                    while rx.blocking_recv().is_some() {}
                    return;
                }
                drop(permits);
                buf.clear();
                if buf.capacity() > GATHER {
                    buf = Vec::new();
                }
                if next.is_none() {
                    next = rx.blocking_recv();
                }
            }
        };
        let thread = std::thread::Builder::new()
            .name("epp-stdout".into())
            .spawn(writer)
            .expect("spawning the stdout writer thread");
        let budget = Arc::new(Semaphore::new(QUEUE_BYTES));
        (
            Outbox {
                to: To::Wire {
                    tx,
                    budget,
                    out: shared,
                },
            },
            thread,
        )
    }

    /// An outbox whose notifications arrive at the receiver as values, at most
    /// `capacity` of them waiting (a slow receiver holds the sender back);
    /// answers are the caller's to deliver.
    pub fn notes(capacity: usize) -> (Outbox, mpsc::Receiver<Note>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Outbox { to: To::Notes(tx) }, rx)
    }

    async fn send(&self, message: Value, tail: Vec<Bytes>) {
        let To::Wire { tx, budget, out } = &self.to else {
            return;
        };
        // to_vec, not to_string: no fmt::Write detour, no copy per line.
        let mut line = serde_json::to_vec(&message).expect("a JSON value always serialises");
        line.push(b'\n');
        if tail.is_empty() && out.write_now(&line) {
            return;
        }
        let share = (line.len() + tail_len(&tail)).min(QUEUE_BYTES) as u32;
        let Ok(permit) = budget.clone().acquire_many_owned(share).await else {
            return; // never closed
        };
        // Counted before it is queued: from here no line may go out at once
        // until the writer thread has written this one.
        out.queued.fetch_add(1, Ordering::AcqRel);
        if tx.send(Queued { line, tail, permit }).await.is_err() {
            out.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Whether this outbox writes the EPP/1 wire (where binary frames go).
    pub fn on_wire(&self) -> bool {
        matches!(self.to, To::Wire { .. })
    }

    /// A notification followed by `tail` as raw bytes (a binary frame); false,
    /// with nothing sent, when this outbox is not the wire.
    pub async fn notify_framed(&self, method: &str, params: Value, tail: Vec<Bytes>) -> bool {
        if !self.on_wire() {
            return false;
        }
        let message = envelope(("method", method.into()), ("params", params));
        self.send(message, tail).await;
        true
    }

    pub async fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        let (key, value) = match result {
            Ok(result) => ("result", result),
            Err(error) => ("error", error_object(&error)),
        };
        self.send(envelope(("id", id), (key, value)), Vec::new())
            .await;
    }

    pub async fn notify(&self, method: &str, params: Value) {
        if let To::Notes(tx) = &self.to {
            let note = Note {
                method: method.to_string(),
                params,
            };
            // A receiver that is gone wants nothing more.
            let _ = tx.send(note).await;
            return;
        }
        self.send(
            envelope(("method", method.into()), ("params", params)),
            Vec::new(),
        )
        .await;
    }
}

/// `{"jsonrpc": "2.0", first, second}`, the values moved in: `json!` would
/// serialise them into copies (a `files.read` answer holds the whole file).
fn envelope(first: (&str, Value), second: (&str, Value)) -> Value {
    let mut message = Map::with_capacity(3);
    message.insert("jsonrpc".into(), Value::from("2.0"));
    message.insert(first.0.into(), first.1);
    message.insert(second.0.into(), second.1);
    Value::Object(message)
}

/// An error as the JSON-RPC error object of docs/epp-1.md §6: `code`,
/// `message` (with the hint), and `data` with `epp_code`, then `http_status`
/// and `upstream_code` when the backend gave them.
pub fn error_object(error: &RpcError) -> Value {
    let mut data = Map::with_capacity(3);
    data.insert("epp_code".into(), json!(error.code.as_str()));
    if let Some(status) = error.http_status {
        data.insert("http_status".into(), json!(status));
    }
    if let Some(code) = &error.upstream_code {
        data.insert("upstream_code".into(), json!(code));
    }
    json!({"code": error.jsonrpc_code(), "message": error.wire_message(), "data": data})
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::mpsc as std_mpsc;

    /// A stdout that holds every flush until the test lets it go.
    struct Gated {
        release: std_mpsc::Receiver<()>,
        written: Arc<Mutex<usize>>,
    }

    impl Write for Gated {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            *self.written.lock().unwrap() += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            let _ = self.release.recv();
            Ok(())
        }
    }

    /// A stdout whose first write waits for the test, and whose later writes fail.
    struct Breaking {
        release: std_mpsc::Receiver<()>,
        writes: usize,
    }

    impl Write for Breaking {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.writes += 1;
            if self.writes == 1 {
                let _ = self.release.recv();
                return Ok(buf.len());
            }
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A stdout that keeps what it is given; its first flush waits for the
    /// test.
    struct Kept {
        seen: Arc<Mutex<Vec<u8>>>,
        gate: Option<std_mpsc::Receiver<()>>,
    }

    impl Write for Kept {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.seen.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            if let Some(gate) = self.gate.take() {
                let _ = gate.recv();
            }
            Ok(())
        }
    }

    /// An outbox onto a [`Kept`] stdout that always has room.
    struct KeptOut {
        out: Outbox,
        thread: std::thread::JoinHandle<()>,
        seen: Arc<Mutex<Vec<u8>>>,
        release: std_mpsc::Sender<()>,
    }

    fn kept(gated: bool) -> KeptOut {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (release, gate) = std_mpsc::channel();
        let writer = Kept {
            seen: seen.clone(),
            gate: gated.then_some(gate),
        };
        let (out, thread) = Outbox::wire(writer, Some(Box::new(|_| true)));
        KeptOut {
            out,
            thread,
            seen,
            release,
        }
    }

    #[tokio::test]
    async fn a_small_line_goes_out_from_its_sender_when_nothing_is_queued() {
        let KeptOut { out, seen, .. } = kept(false);
        out.notify("n", json!({"k": 1})).await;
        // Written before notify returned: no hand-over to the writer thread.
        let seen = String::from_utf8(seen.lock().unwrap().clone()).unwrap();
        assert!(seen.contains(r#""k":1"#), "{seen:?}");
    }

    #[tokio::test]
    async fn a_line_never_overtakes_one_queued_before_it() {
        let KeptOut {
            out,
            thread,
            seen,
            release,
        } = kept(true);
        // A big line always goes through the thread, which holds it in its
        // first flush; the small lines after it must wait behind it.
        out.notify("n", json!({"big": "x".repeat(DIRECT)})).await;
        out.notify("n", json!({"small": 1})).await;
        out.notify("n", json!({"small": 2})).await;
        release.send(()).unwrap();
        out.notify("n", json!({"small": 3})).await;
        drop(out);
        tokio::task::spawn_blocking(move || thread.join().unwrap())
            .await
            .unwrap();
        let seen = String::from_utf8(seen.lock().unwrap().clone()).unwrap();
        let at = |needle: &str| seen.find(needle).unwrap_or_else(|| panic!("{needle}"));
        assert!(at(r#""big""#) < at(r#""small":1"#));
        assert!(at(r#""small":1"#) < at(r#""small":2"#));
        assert!(at(r#""small":2"#) < at(r#""small":3"#));
    }

    #[tokio::test]
    async fn a_broken_stdout_gives_the_whole_budget_back() {
        let (release, gate) = std_mpsc::channel();
        let (out, _writer) = Outbox::wire(
            Breaking {
                release: gate,
                writes: 0,
            },
            None,
        );
        let line = |bytes: usize| json!({"data": "x".repeat(bytes)});
        // The writer takes the first line and waits in its write; behind it, a
        // small line and a big one (6 MiB of the 8), which the writer will
        // hold over while it writes the small one, and that write fails.
        out.notify("n", line(10)).await;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        out.notify("n", line(10)).await;
        out.notify("n", line(6 << 20)).await;
        release.send(()).unwrap();
        // 3 MiB more fits only once the held-over line's share is back.
        let late = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            out.notify("n", line(3 << 20)),
        )
        .await;
        assert!(
            late.is_ok(),
            "a sender waited forever for budget a dead writer held"
        );
    }

    #[tokio::test]
    async fn a_slow_reader_holds_senders_back_by_bytes() {
        let (release, gate) = std_mpsc::channel();
        let written = Arc::new(Mutex::new(0));
        let (out, writer) = Outbox::wire(
            Gated {
                release: gate,
                written: written.clone(),
            },
            None,
        );
        let big = || json!({"data": "x".repeat(QUEUE_BYTES / 2 + 1)});
        // The first line is taken by the writer, which stays in flush.
        out.notify("n", big()).await;
        let second = tokio::spawn({
            let out = out.clone();
            async move { out.notify("n", big()).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(
            !second.is_finished(),
            "a second half-budget line waits while the first is unwritten"
        );
        release.send(()).unwrap();
        second.await.unwrap();
        release.send(()).unwrap();
        drop(out);
        tokio::task::spawn_blocking(move || writer.join().unwrap())
            .await
            .unwrap();
        assert!(
            *written.lock().unwrap() > QUEUE_BYTES,
            "both lines went out"
        );
    }
}
