//! Where answers and notifications go: whole lines on stdout, written by one
//! thread so lines never interleave.

use super::errors::RpcError;
use serde_json::{Map, Value, json};
use std::io::Write;
use tokio::sync::mpsc;

/// Lines queued for stdout before senders wait (back-pressure for big streams).
const QUEUE: usize = 1024;
/// Small lines are gathered into one write of up to this many bytes.
const GATHER: usize = 1 << 20;
/// Lines at least this long are written as they are, never copied into the
/// gathering buffer (a `files.read` answer can be hundreds of MiB).
const DIRECT: usize = 64 << 10;

/// The sending end of the writer: cheap to clone, one per request.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::Sender<Vec<u8>>,
}

impl Outbox {
    /// Starts the writer on a thread of its own; it ends when every `Outbox`
    /// clone is dropped. A thread with plain blocking writes, not a task on
    /// tokio's stdout: that would hop once more (to its blocking pool) and copy
    /// every line once more for each answer.
    pub fn wire<W: Write + Send + 'static>(mut out: W) -> (Outbox, std::thread::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(QUEUE);
        let writer = move || {
            let mut buf = Vec::new();
            let mut next = rx.blocking_recv();
            while let Some(line) = next.take() {
                // Gather what is queued behind this line into one write; a long
                // line goes out by itself, without a copy.
                let mut big = None;
                if line.len() >= DIRECT {
                    big = Some(line);
                } else {
                    buf.extend_from_slice(&line);
                    while buf.len() < GATHER {
                        match rx.try_recv() {
                            Ok(more) if more.len() >= DIRECT => {
                                next = Some(more);
                                break;
                            }
                            Ok(more) => buf.extend_from_slice(&more),
                            Err(_) => break,
                        }
                    }
                }
                let mut written = || {
                    out.write_all(&buf)?;
                    if let Some(line) = &big {
                        out.write_all(line)?;
                    }
                    out.flush()
                };
                if written().is_err() {
                    // Nobody reads our answers any more; drain so senders don't block.
                    while rx.blocking_recv().is_some() {}
                    return;
                }
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
        (Outbox { tx }, thread)
    }

    async fn send(&self, message: Value) {
        // The same text serde_json writes, with a faster string escaper
        // (json_out); no fmt::Write detour, no copy per line.
        let mut line = super::json_out::to_vec(&message);
        line.push(b'\n');
        let _ = self.tx.send(line).await;
    }

    pub async fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        let (key, value) = match result {
            Ok(result) => ("result", result),
            Err(error) => ("error", error_object(&error)),
        };
        self.send(envelope(("id", id), (key, value))).await;
    }

    pub async fn notify(&self, method: &str, params: Value) {
        self.send(envelope(("method", method.into()), ("params", params)))
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
