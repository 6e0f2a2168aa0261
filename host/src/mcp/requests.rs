//! What every MCP request of one server runs EPP requests with: the loaded
//! provider, its codec, the options, where detached work goes, and a counter
//! for the requests' ids. The handler (tools) and the resources share it.

use super::McpOptions;
use crate::codec::Codec;
use crate::rpc::context::CallCtx;
use crate::rpc::errors::RpcError;
use crate::rpc::outbox::{Note, Outbox};
use crate::runtime::Runtime;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// Notifications of one request waiting for their reader at most.
const NOTES: usize = 64;

pub struct Requests {
    pub runtime: Arc<Runtime>,
    codec: Arc<Codec>,
    pub opts: McpOptions,
    /// Detached work of requests (ended with the session).
    pub background: Arc<Mutex<tokio::task::JoinSet<()>>>,
    /// Ids of the EPP requests (for logs).
    calls: AtomicU64,
    /// `--max-concurrent`: EPP requests running at once, tool calls (held
    /// ones too), resource reads and subscriptions' watches alike.
    slots: Arc<Semaphore>,
    /// Cancelled when the client's input ends (stdio): calls in flight stop.
    pub closing: tokio_util::sync::CancellationToken,
}

impl Requests {
    pub fn new(runtime: Arc<Runtime>, opts: McpOptions) -> Requests {
        Requests {
            codec: Arc::new(Codec::new(&runtime.exports, opts.serve.max_param_bytes)),
            runtime,
            background: Arc::new(Mutex::new(tokio::task::JoinSet::new())),
            calls: AtomicU64::new(0),
            slots: Arc::new(Semaphore::new(opts.serve.max_concurrent)),
            closing: tokio_util::sync::CancellationToken::new(),
            opts,
        }
    }

    /// Room for one more EPP request, held until it ends; a retryable error
    /// when `--max-concurrent` are running, as `epp-host run` answers.
    pub fn slot(&self) -> Result<OwnedSemaphorePermit, RpcError> {
        self.slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| RpcError::too_many(self.opts.serve.max_concurrent))
    }

    /// The context of one EPP request (output kept up to `room` bytes), and
    /// the receiver of its notifications.
    pub fn ctx(&self, room: usize) -> (CallCtx, mpsc::Receiver<Note>) {
        let (out, notes) = Outbox::notes(NOTES);
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let ctx = CallCtx::new(
            self.runtime.clone(),
            self.codec.clone(),
            out,
            Value::String(format!("mcp-{n}")),
            room,
            self.background.clone(),
        );
        (ctx, notes)
    }
}
