//! What one request carries through its handler ([`CallCtx`]): the runtime
//! and codec, where its notifications go, its deadline, its input, and the
//! tokens the provider reported for it, which [`CallCtx::undo`] hands back to
//! the provider when the request fails.

use super::errors::RpcError;
use super::outbox::Outbox;
use crate::codec::Codec;
use crate::runtime::state::{CallState, Tokens};
use crate::runtime::{Instance, Runtime};
use bytes::Bytes;
use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The notifications a request takes as input, as they arrived.
pub type Input = tokio::sync::mpsc::Receiver<InputItem>;

/// One input notification's params, or why one meant for this request could
/// not be read (a line too long or not JSON, the request's id reused): the
/// request then fails with it instead of waiting for bytes that never come.
pub struct InputItem {
    pub params: Result<Map<String, Value>, RpcError>,
    /// The raw bytes of a binary frame (docs/epp-1.md "Binary frames").
    pub tail: Option<Vec<u8>>,
    /// Its share of the request's input budget, given back once it is dropped
    /// (after its bytes are written).
    pub permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// How long the provider may take to undo one token (all of a request's are
/// undone side by side).
pub const UNDO_TIMEOUT: Duration = Duration::from_secs(30);

/// The function every provider exports to take a token back (wit/infra.wit).
const UNDO: &str = "undo";

/// What one request carries through its handler.
pub struct CallCtx {
    pub runtime: Arc<Runtime>,
    /// The runtime's plans for calling functions with JSON params.
    pub codec: Arc<Codec>,
    pub out: Outbox,
    /// The request's id, echoed in notifications as `request_id`.
    pub id: Value,
    pub max_output_bytes: usize,
    /// Where long-lived work (detached streams) is spawned.
    pub background: Arc<Mutex<tokio::task::JoinSet<()>>>,
    /// Fired once the answer to this request has been queued.
    answered: Mutex<Vec<tokio::sync::oneshot::Sender<()>>>,
    /// When the host stops this request, told to the provider (`request.time-left-ms`).
    pub deadline: Mutex<Option<Instant>>,
    /// What the provider set going for this request and has not settled.
    pub tokens: Tokens,
    /// The client's input to this request, for a request that takes some.
    input: Mutex<Option<Input>>,
}

impl CallCtx {
    pub fn new(
        runtime: Arc<Runtime>,
        codec: Arc<Codec>,
        out: Outbox,
        id: Value,
        max_output_bytes: usize,
        background: Arc<Mutex<tokio::task::JoinSet<()>>>,
    ) -> CallCtx {
        CallCtx {
            runtime,
            codec,
            out,
            id,
            max_output_bytes,
            background,
            answered: Mutex::new(Vec::new()),
            deadline: Mutex::new(None),
            tokens: Tokens::default(),
            input: Mutex::new(None),
        }
    }

    /// Gives this request the receiving end of its input (`Method::takes_input`).
    pub fn with_input(self, input: Option<Input>) -> CallCtx {
        *self.input.lock().expect("lock") = input;
        self
    }

    /// The request's input, taken once by the adapter that reads it.
    pub fn take_input(&self) -> Option<Input> {
        self.input.lock().expect("lock").take()
    }

    /// A fresh instance serving this request: it knows the request's deadline
    /// and reports its tokens to this context.
    pub async fn instance(&self) -> Result<Instance, RpcError> {
        let deadline = *self.deadline.lock().expect("lock");
        self.fresh(CallState {
            deadline,
            tokens: self.tokens.clone(),
        })
        .await
    }

    async fn fresh(&self, call: CallState) -> Result<Instance, RpcError> {
        let mut inst = self
            .runtime
            .instance()
            .await
            .map_err(|e| RpcError::fault(format!("could not start the provider: {e:#}")))?;
        inst.store.data_mut().call = call;
        Ok(inst)
    }

    /// Resolves once the answer to this request is queued for the client.
    pub fn after_response(&self) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.answered.lock().expect("lock").push(tx);
        rx
    }

    /// Called by the server right after it queued the answer.
    pub fn mark_answered(&self) {
        for tx in self.answered.lock().expect("lock").drain(..) {
            let _ = tx.send(());
        }
    }

    /// Sends a notification about this request (`request_id` added).
    pub async fn notify(&self, method: &str, mut params: Map<String, Value>) {
        params.insert("request_id".into(), self.id.clone());
        self.out.notify(method, Value::Object(params)).await
    }

    /// Sends a notification about this request followed by `tail` as raw
    /// bytes, a binary frame (`bytes` added to the params), or false when
    /// the client is not on the EPP/1 wire and cannot take one.
    pub async fn notify_framed(
        &self,
        method: &str,
        mut params: Map<String, Value>,
        tail: Vec<Bytes>,
    ) -> bool {
        params.insert("request_id".into(), self.id.clone());
        params.insert("bytes".into(), super::outbox::tail_len(&tail).into());
        self.out
            .notify_framed(method, Value::Object(params), tail)
            .await
    }

    /// Whether answers go out as lines on the EPP/1 wire (binary frames
    /// possible), not to another front end.
    pub fn on_wire(&self) -> bool {
        self.out.on_wire()
    }

    /// Hands every token the failed request left back to the provider
    /// (`undo`), each in a fresh instance of its own, side by side, and says
    /// in words what was undone and what was not, for the error answer; none
    /// when there was nothing to undo.
    pub async fn undo(&self) -> Option<String> {
        let (tokens, dropped) = self.tokens.take();
        if tokens.is_empty() && dropped == 0 {
            return None;
        }
        let outcomes = futures::future::join_all(tokens.iter().map(|t| self.undo_one(t))).await;
        let mut words = Vec::new();
        for (token, outcome) in tokens.into_iter().zip(outcomes) {
            match outcome {
                Ok(done) => {
                    tracing::info!(token, outcome = done, "undid what a failed request left");
                    words.push(format!("undone: {done}"));
                }
                Err(e) => {
                    tracing::warn!(token, outcome = %e.code, error = %e.wire_message(),
                        "undoing what a failed request left failed");
                    words.push(format!("not undone: {}", e.wire_message()));
                }
            }
        }
        if dropped > 0 {
            words.push(format!(
                "not undone: {dropped} more the provider reported past what the host keeps \
                 for one request"
            ));
        }
        Some(words.join("; "))
    }

    async fn undo_one(&self, token: &str) -> Result<String, RpcError> {
        if !self.runtime.exports(UNDO) {
            return Err(RpcError::fault(format!(
                "the provider reported `{token}` to undo but exports no `{UNDO}`"
            )));
        }
        let call = async {
            // Its own call state: this call is the host's, not the request's.
            let mut inst = self
                .fresh(CallState {
                    deadline: Some(Instant::now() + UNDO_TIMEOUT),
                    tokens: Tokens::default(),
                })
                .await?;
            let words: String = inst.call_typed(UNDO, (token,)).await?;
            Ok(words)
        };
        match tokio::time::timeout(UNDO_TIMEOUT, call).await {
            Ok(result) => result,
            Err(_) => Err(RpcError::fault(format!(
                "the provider did not undo `{token}` within {} s",
                UNDO_TIMEOUT.as_secs()
            ))),
        }
    }
}
