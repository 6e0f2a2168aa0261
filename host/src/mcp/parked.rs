//! Calls that outlived `--mcp-wait` (docs/mcp.md, Long work). A tool whose
//! method has `resume=METHOD` answers at the wait with what it has so far and
//! `running: true`; the call itself goes on here, its stream read into a
//! [`Parked`] until it ends. A later call of METHOD's tool with the stream's
//! id is served from it: it waits (again at most `--mcp-wait`) for more
//! output or the end, and answers the output from the start, as a provider's
//! own follow would. An ended call stays (a follow again gets the same end)
//! until its room is needed.

use super::answer::{self, Forwarded};
use crate::contract::table::Method;
use crate::rpc::errors::RpcError;
use crate::rpc::outbox::Note;
use rmcp::model::CallToolResult;
use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Calls parked at once at most: each holds an instance and up to
/// `--max-output-bytes` of output. Past it a call waits for its end, as
/// without `--mcp-wait`; ended calls nobody picked up make room first.
pub const PARKED: usize = 32;

/// The parked calls of one server.
#[derive(Default)]
pub struct Lot {
    calls: Mutex<Vec<Arc<Parked>>>,
}

impl Lot {
    /// Whether one more call can be parked (forgetting an ended one that
    /// nobody picked up, the oldest, when that makes room).
    pub fn has_room(&self) -> bool {
        let mut calls = self.calls.lock().expect("lock");
        if calls.len() < PARKED {
            return true;
        }
        match calls.iter().position(|p| p.ended()) {
            Some(i) => {
                calls.remove(i);
                true
            }
            None => false,
        }
    }

    /// Parks `parked`.
    pub fn park(&self, parked: Arc<Parked>) {
        self.calls.lock().expect("lock").push(parked);
    }

    /// The parked call a call of `method` with `params` picks up, if any:
    /// one parked for `method` under the id `params` give (the key `id=` of
    /// `method`'s stream), whose own params agree with every one of `params`
    /// both have (`sandbox_id`).
    pub fn picks_up(&self, method: &Method, params: &Map<String, Value>) -> Option<Arc<Parked>> {
        let key = method.stream?.id?;
        let id = params.get(key)?.as_str()?;
        let calls = self.calls.lock().expect("lock");
        calls
            .iter()
            .find(|p| {
                p.resume == method.name
                    && p.id == id
                    && params
                        .iter()
                        .all(|(k, v)| k == key || p.asked.get(k).is_none_or(|mine| mine == v))
            })
            .cloned()
    }
}

/// One call going on after its answer: what it forwarded, and its end.
pub struct Parked {
    /// The method that picks it up, and the id it goes by.
    resume: &'static str,
    id: String,
    /// The params it was called with.
    asked: Map<String, Value>,
    state: Mutex<State>,
    /// Bumped on every change, for followers to wait on.
    version: watch::Sender<u64>,
}

struct State {
    forwarded: Forwarded,
    end: Option<Result<Value, RpcError>>,
}

/// What a follower sees at one moment.
pub enum Seen {
    /// Still going: the answer so far (with `running: true`).
    Running(Value),
    /// Ended: the call's result.
    Ended(CallToolResult),
}

impl Parked {
    pub fn new(
        resume: &'static str,
        id: String,
        asked: Map<String, Value>,
        forwarded: Forwarded,
    ) -> Arc<Parked> {
        Arc::new(Parked {
            resume,
            id,
            asked,
            state: Mutex::new(State {
                forwarded,
                end: None,
            }),
            version: watch::Sender::new(0),
        })
    }

    /// Takes one more notification of the call.
    pub fn take(&self, note: Note) {
        self.state.lock().expect("lock").forwarded.take(note);
        self.version.send_modify(|v| *v += 1);
    }

    /// The call ended with `result`.
    pub fn end(&self, result: Result<Value, RpcError>) {
        self.state.lock().expect("lock").end = Some(result);
        self.version.send_modify(|v| *v += 1);
    }

    /// The params it was called with.
    pub fn asked(&self) -> &Map<String, Value> {
        &self.asked
    }

    /// Whether the call has ended.
    pub fn ended(&self) -> bool {
        self.state.lock().expect("lock").end.is_some()
    }

    /// A receiver that changes with the call.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Where the call is now.
    pub fn seen(&self) -> Seen {
        let state = self.state.lock().expect("lock");
        match &state.end {
            Some(Ok(value)) => {
                let mut value = value.clone();
                state.forwarded.fill(&mut value);
                Seen::Ended(answer::success(value))
            }
            Some(Err(e)) => Seen::Ended(answer::failure(e)),
            None => Seen::Running(state.forwarded.running()),
        }
    }

    /// Output text past `seen` (bytes per stream, updated), and the bytes of
    /// output so far: a follower's progress.
    pub fn news(&self, seen: &mut Vec<(String, usize)>) -> (String, u64) {
        let state = self.state.lock().expect("lock");
        (state.forwarded.text_since(seen), state.forwarded.bytes)
    }
}
