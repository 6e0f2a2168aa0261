//! Serving EPP/1 on a line stream: requests run concurrently, each in its own
//! provider instance; answers and notifications go through one writer; cancel,
//! concurrency cap, per-request deadline and a graceful end of input.

use super::context::{CallCtx, Input, InputItem};
use super::dispatch;
use super::errors::{EppCode, RpcError};
use super::outbox::Outbox;
use super::wire::{Incoming, Line, id_from_head, input_target_from_head, parse, read_lines};
use crate::codec::Codec;
use crate::contract::table;
use crate::runtime::Runtime;
use epp_protocol::transport;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tracing::Instrument;

/// How the server behaves; see `epp-host run --help`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub max_line_bytes: usize,
    pub max_concurrent: usize,
    pub call_timeout: Duration,
    pub shutdown_grace: Duration,
    pub max_output_bytes: usize,
    /// The most bytes one byte param (base64 on the wire) may carry.
    pub max_param_bytes: usize,
}

struct Inflight {
    cancel: Option<oneshot::Sender<()>>,
    /// Where the request's input notifications go (`Method::takes_input`).
    input: Option<InputSender>,
}

/// The sending end of a request's input, with its byte budget.
#[derive(Clone)]
struct InputSender {
    tx: mpsc::Sender<InputItem>,
    budget: Arc<Semaphore>,
}

/// Bytes of input lines queued for one request before the reader stops
/// reading stdin (back-pressure to the client, bounded memory: 8 chunks of
/// 1 MiB; a longer line takes the whole budget, so it waits for the queue to
/// empty).
const INPUT_BYTES: usize = 8 << 20;
/// Input items queued for one request at most, whatever their size.
const INPUT_QUEUE: usize = 64;
/// Bytes of big request lines (`BIG_LINE` and more) whose requests may be in
/// flight at once: their params are held several times on the way into the
/// provider (the JSON, the decoded bytes, the guest's copy), so without a bound
/// a client sending many of them at once could take all memory. Past it, a big
/// request is refused (E9001, retryable) as past `--max-concurrent`: waiting
/// instead would stop the reader, and with it `epp.cancel`, input chunks and
/// the end of input, behind requests that may never end.
const PARAMS_BYTES: usize = 256 << 20;
/// Lines shorter than this never wait for the budget.
const BIG_LINE: usize = 1 << 20;

impl InputSender {
    /// Queues `params` (from a line of `len` bytes), waiting for room.
    async fn send(&self, params: Map<String, Value>, tail: Option<Vec<u8>>, len: usize) -> bool {
        let share = len.clamp(1, INPUT_BYTES) as u32;
        let Ok(permit) = self.budget.clone().acquire_many_owned(share).await else {
            return false; // never closed
        };
        let item = InputItem {
            params: Ok(params),
            tail,
            permit: Some(permit),
        };
        self.tx.send(item).await.is_ok()
    }

    /// Tells the request that input meant for it was lost (it fails with `error`).
    async fn fail(&self, error: RpcError) {
        let item = InputItem {
            params: Err(error),
            tail: None,
            permit: None,
        };
        let _ = self.tx.send(item).await;
    }
}

/// State shared by the reader loop and the request tasks.
pub struct Server {
    runtime: Arc<Runtime>,
    codec: Arc<Codec>,
    out: Outbox,
    opts: ServeOptions,
    inflight: Mutex<HashMap<String, Inflight>>,
    /// Signalled whenever a request finishes.
    finished: Notify,
    slots: Arc<Semaphore>,
    /// Bytes of big request lines whose requests are in flight (`PARAMS_BYTES`).
    params: Arc<Semaphore>,
    background: Arc<Mutex<tokio::task::JoinSet<()>>>,
    shutdown: Notify,
    /// Set with `shutdown`: the reader reads no further line.
    stopping: AtomicBool,
}

/// The id as a map key: its JSON text, so `1` and `"1"` differ.
fn id_key(id: &Value) -> String {
    id.to_string()
}

impl Server {
    pub fn new(runtime: Arc<Runtime>, out: Outbox, opts: ServeOptions) -> Arc<Server> {
        Arc::new(Server {
            codec: Arc::new(Codec::new(&runtime.exports, opts.max_param_bytes)),
            runtime,
            out,
            slots: Arc::new(Semaphore::new(opts.max_concurrent)),
            params: Arc::new(Semaphore::new(PARAMS_BYTES)),
            opts,
            inflight: Mutex::new(HashMap::new()),
            finished: Notify::new(),
            background: Arc::new(Mutex::new(tokio::task::JoinSet::new())),
            shutdown: Notify::new(),
            stopping: AtomicBool::new(false),
        })
    }

    /// Reads requests until end of input or `epp.shutdown`, then drains.
    ///
    /// `input` is read, and each line handled, on a thread of its own
    /// (`wire::read_lines`), which enters the runtime for each line: a request
    /// then reaches a runtime worker in one hand-off. With a thread between the
    /// reader and the server loop, every request woke one thread more, which on
    /// a machine with idle CPUs cost tens to hundreds of microseconds before
    /// its work began (bench/profiling.md, issue 24, seventh pass).
    pub async fn serve<R: std::io::Read + Send + 'static>(self: &Arc<Self>, input: R) {
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let server = self.clone();
        let runtime = tokio::runtime::Handle::current();
        let cap = self.opts.max_line_bytes;
        std::thread::Builder::new()
            .name("epp-stdin".into())
            .spawn(move || {
                read_lines(input, cap, |line| match line {
                    Ok(line) => {
                        runtime.block_on(server.handle_line(line));
                        !server.stopping.load(Ordering::Acquire)
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "reading stdin failed; shutting down");
                        false
                    }
                });
                let _ = done_tx.send(());
            })
            .expect("spawning the stdin reader thread");
        tokio::select! {
            done = done_rx => {
                // The reader dropped its sender without sending: a line's
                // handling panicked there (the message is on stderr). Fail as
                // that panic would have on this thread, not as end of input.
                if done.is_err() {
                    panic!("the stdin reader thread panicked");
                }
            }
            _ = self.shutdown.notified() => {}
        }
        self.drain().await;
    }

    /// `epp.shutdown`: no line after this one is read.
    fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.shutdown.notify_one();
    }

    async fn handle_line(self: &Arc<Self>, line: Line) {
        let (bytes, tail) = match line {
            Line::Complete(bytes) => (bytes, None),
            Line::Framed { line, tail } => (line, Some(tail)),
            Line::TooLong { head, len } => {
                let error = RpcError::invalid_request(format!(
                    "the line is {len} bytes, more than this host accepts ({} bytes, --max-line-bytes)",
                    self.opts.max_line_bytes
                ))
                .hint("send large files in parts");
                self.lost_input(&head, &error).await;
                self.out.respond(id_from_head(&head), Err(error)).await;
                return;
            }
        };
        match parse(&bytes) {
            Incoming::Request { id, method, params } => {
                let len = bytes.len();
                drop(bytes);
                match self.hold_params(len) {
                    Ok(held) => self.dispatch(id, method, params, held).await,
                    Err(error) => self.out.respond(id, Err(error)).await,
                }
            }
            Incoming::Notification { method, params } => match method.as_str() {
                transport::CANCEL => {
                    self.cancel(&params);
                }
                transport::SHUTDOWN => self.stop(),
                m if table::is_input(m) => {
                    let len = bytes.len() + tail.as_ref().map_or(0, Vec::len);
                    self.feed(m, params, tail, len).await
                }
                _ => tracing::warn!(
                    method,
                    "ignoring a notification (it has no id, so it gets no answer)"
                ),
            },
            Incoming::Invalid { id, error } => {
                self.lost_input(&bytes, &error).await;
                self.out.respond(id, Err(error)).await
            }
            Incoming::Response | Incoming::Empty => {}
        }
    }

    /// A line that could not be read but looks like input for a request in
    /// flight (an input notification and its `request_id` near its start)
    /// fails that request with the reason, instead of leaving it to wait for
    /// bytes that will never come.
    async fn lost_input(&self, head: &[u8], error: &RpcError) {
        let Some((method, target)) = input_target_from_head(head) else {
            return;
        };
        if let Some(Some(input)) = self.input_of(&id_key(&target)) {
            let reason = RpcError::invalid_params(
                &method,
                format!(
                    "a `{method}` for this request could not be read ({}); the file was not \
                     changed",
                    error.message
                ),
            );
            input.fail(reason).await;
        }
    }

    /// Where the input of the request in flight under `key` goes: none when no
    /// such request is in flight, `Some(None)` when it takes no input.
    fn input_of(&self, key: &str) -> Option<Option<InputSender>> {
        let inflight = self.inflight.lock().expect("lock");
        inflight.get(key).map(|entry| entry.input.clone())
    }

    /// Cancels the request named by `params.id`; true if it was in flight.
    fn cancel(&self, params: &Map<String, Value>) -> Option<bool> {
        let id = params.get("id")?;
        let mut inflight = self.inflight.lock().expect("lock");
        let cancelled = inflight
            .get_mut(&id_key(id))
            .and_then(|entry| entry.cancel.take())
            .map(|tx| tx.send(()).is_ok())
            .unwrap_or(false);
        Some(cancelled)
    }

    /// Hands an input notification to the request its `request_id` names,
    /// waiting while that request's queue is full (so stdin is read no faster
    /// than the request consumes it). Input for a request that is not in
    /// flight, or takes none, is dropped with a warning: a notification gets
    /// no answer, and the request it was meant for ends with its own.
    async fn feed(
        &self,
        method: &str,
        params: Map<String, Value>,
        tail: Option<Vec<u8>>,
        len: usize,
    ) {
        let Some(id) = params.get("request_id") else {
            tracing::warn!(
                method,
                "ignoring input without `request_id` (the request it is for)"
            );
            return;
        };
        let key = id_key(id);
        match self.input_of(&key) {
            Some(Some(input)) => {
                if !input.send(params, tail, len).await {
                    tracing::debug!(method, request_id = %key, "input for a request that no longer reads it; dropped");
                }
            }
            Some(None) => tracing::warn!(
                method,
                request_id = %key,
                "ignoring input for a request that takes none"
            ),
            None => tracing::warn!(
                method,
                request_id = %key,
                "ignoring input for a request that is not in flight"
            ),
        }
    }

    /// A big line's share of `PARAMS_BYTES` (none for a small one), or the
    /// refusal when the big lines in flight already hold it all.
    fn hold_params(
        &self,
        len: usize,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, RpcError> {
        if len < BIG_LINE {
            return Ok(None);
        }
        let share = len.min(PARAMS_BYTES) as u32;
        self.params
            .clone()
            .try_acquire_many_owned(share)
            .map(Some)
            .map_err(|_| {
                RpcError::fault(format!(
                    "too many big requests in flight (this one is {len} bytes; requests of 1 MiB \
                     and more may hold {} MiB at once)",
                    PARAMS_BYTES >> 20
                ))
                .hint("retry when some have finished")
                .retryable()
            })
    }

    async fn dispatch(
        self: &Arc<Self>,
        id: Value,
        method: String,
        params: Map<String, Value>,
        held: Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        match method.as_str() {
            transport::CANCEL => {
                let answer = match self.cancel(&params) {
                    Some(cancelled) => Ok(json!({"cancelled": cancelled})),
                    None => Err(RpcError::invalid_params(
                        transport::CANCEL,
                        "`id` (the request to cancel) is required",
                    )),
                };
                return self.out.respond(id, answer).await;
            }
            transport::SHUTDOWN => {
                self.out.respond(id, Ok(json!({}))).await;
                self.stop();
                return;
            }
            _ => {}
        }
        let key = id_key(&id);
        let (tx, rx) = oneshot::channel();
        let takes_input = table::find(&method).is_some_and(|m| m.takes_input(&params));
        let (input_tx, input_rx) = match takes_input {
            true => {
                let (tx, rx) = mpsc::channel(INPUT_QUEUE);
                let budget = Arc::new(Semaphore::new(INPUT_BYTES));
                (Some(InputSender { tx, budget }), Some(rx))
            }
            false => (None, None),
        };
        let (fresh, taken) = {
            let mut inflight = self.inflight.lock().expect("lock");
            match inflight.get(&key) {
                Some(entry) => (false, entry.input.clone()),
                None => {
                    let entry = Inflight {
                        cancel: Some(tx),
                        input: input_tx,
                    };
                    inflight.insert(key.clone(), entry);
                    (true, None)
                }
            }
        };
        if !fresh {
            let error = RpcError::invalid_request(format!(
                "id {key} is already used by a request in flight"
            ))
            .hint("use a new id per request");
            // Two streamed writes under one id: their chunks can no longer be
            // told apart, so the one in flight must not take them either.
            if let (true, Some(input)) = (takes_input, taken) {
                input
                    .fail(RpcError::invalid_request(format!(
                        "another streamed {method} reused this write's id {key}, so the \
                         chunks that follow cannot be told apart; the file was not changed"
                    )))
                    .await;
            }
            return self.out.respond(id, Err(error)).await;
        }
        let Ok(permit) = self.slots.clone().try_acquire_owned() else {
            self.inflight.lock().expect("lock").remove(&key);
            let error = RpcError::too_many(self.opts.max_concurrent);
            return self.out.respond(id, Err(error)).await;
        };
        let server = self.clone();
        // Every event of the request (and of what it starts) names it.
        let span = tracing::info_span!(
            "request",
            id = %key,
            method = %method,
            sandbox_id = tracing::field::Empty,
        );
        if let Some(sandbox) = params.get("sandbox_id").and_then(Value::as_str) {
            span.record("sandbox_id", sandbox);
        }
        let fut = async move {
            let (ctx, answer) = server.run(id.clone(), method, params, rx, input_rx).await;
            // For the client the request ends when it reads the answer, and it
            // may send the next one (or use the id again) at once: its slot
            // and its id are free before the answer goes out. Freed after it,
            // a client waiting for each answer saw E9001 at --max-concurrent 1
            // and E1001 for an id used again, in 4-16 % of calls.
            drop(permit);
            drop(held);
            server.inflight.lock().expect("lock").remove(&key);
            server.out.respond(id, answer).await;
            ctx.mark_answered();
            server.finished.notify_waiters();
        }
        .instrument(span);
        // Boxed: the request's future is ~13 KB, moved on every spawn and poll
        // state change otherwise.
        tokio::spawn(Box::pin(fut));
    }

    /// Runs a request to its answer, which the caller sends.
    async fn run(
        &self,
        id: Value,
        method: String,
        params: Map<String, Value>,
        cancel: oneshot::Receiver<()>,
        input: Option<Input>,
    ) -> (CallCtx, Result<Value, RpcError>) {
        let ctx = CallCtx::new(
            self.runtime.clone(),
            self.codec.clone(),
            self.out.clone(),
            id,
            self.opts.max_output_bytes,
            self.background.clone(),
        )
        .with_input(input);
        let cancelled = async {
            if cancel.await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let started = std::time::Instant::now();
        let result = run_request(&ctx, &method, params, self.opts.call_timeout, cancelled).await;
        let took = started.elapsed();
        match &result {
            Ok(_) => tracing::debug!(took = ?took, outcome = "ok", "answered"),
            // A fault is the provider's or a host limit's: worth the operator's eye.
            Err(e) if e.code == EppCode::ProviderFault => tracing::warn!(
                took = ?took,
                outcome = %e.code,
                retryable = e.retryable,
                error = %e.message,
                "answered with a fault"
            ),
            Err(e) => tracing::debug!(
                took = ?took,
                outcome = %e.code,
                retryable = e.retryable,
                http_status = e.http_status,
                upstream_code = e.upstream_code.as_deref(),
                "answered with an error"
            ),
        }
        (ctx, result)
    }

    /// Resolves when no request is in flight.
    async fn idle(&self) {
        loop {
            let notified = self.finished.notified();
            if self.inflight.lock().expect("lock").is_empty() {
                return;
            }
            notified.await;
        }
    }

    /// End of input: let requests finish within the grace period, cancel the rest,
    /// stop terminal pumps and close connections.
    async fn drain(&self) {
        if tokio::time::timeout(self.opts.shutdown_grace, self.idle())
            .await
            .is_err()
        {
            let pending: Vec<oneshot::Sender<()>> = self
                .inflight
                .lock()
                .expect("lock")
                .values_mut()
                .filter_map(|e| e.cancel.take())
                .collect();
            tracing::warn!(
                requests = pending.len(),
                "cancelling requests still running at shutdown"
            );
            for tx in pending {
                let _ = tx.send(());
            }
            // Long enough for the cancelled requests to be undone (their
            // tokens are undone side by side, each within UNDO_TIMEOUT).
            let undoing = super::context::UNDO_TIMEOUT + Duration::from_secs(5);
            let _ = tokio::time::timeout(undoing, self.idle()).await;
        }
        self.background.lock().expect("lock").abort_all();
        self.runtime.close_connections().await;
    }
}

/// The one path of every request (`epp-host call` is a client of `run`, and
/// `epp-host mcp` serves its tool calls through it): the method under its
/// deadline (`Method::deadline`) until it is done or `cancelled` resolves;
/// whatever a failed request left behind (the tokens the provider reported
/// for it) is undone before its answer goes out.
pub async fn run_request(
    ctx: &CallCtx,
    method: &str,
    params: Map<String, Value>,
    call_timeout: Duration,
    cancelled: impl Future<Output = ()>,
) -> Result<Value, RpcError> {
    let deadline = match table::find(method) {
        Some(m) => m.deadline(&params, call_timeout),
        None => Some(call_timeout),
    };
    // Boxed: passed by value into `run_work` and on into its timeout, an
    // unboxed call (~4 KB) was laid out three times in the request's future
    // (12 KB, a third of the heap of 256 requests at once).
    let work = Box::pin(dispatch::call(ctx, method, params));
    run_work(ctx, method, deadline, cancelled, work).await
}

/// `work` (one or more calls for the request of `ctx`) as a request: bounded
/// by `deadline`, ended by `cancelled`, what it set going undone when it
/// fails and dropped when it succeeds. `what` names it in a timeout's message.
pub async fn run_work(
    ctx: &CallCtx,
    what: &str,
    deadline: Option<Duration>,
    cancelled: impl Future<Output = ()>,
    work: impl Future<Output = Result<Value, RpcError>>,
) -> Result<Value, RpcError> {
    *ctx.deadline.lock().expect("lock") = deadline.map(|limit| std::time::Instant::now() + limit);
    let bounded = async {
        match deadline {
            Some(limit) => tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
                Err(RpcError::fault(format!(
                    "{what} took longer than {}s and was stopped (raise --call-timeout, or pass a timeout)",
                    limit.as_secs()
                )))
            }),
            None => work.await,
        }
    };
    let result = tokio::select! {
        result = bounded => result,
        () = cancelled => Err(RpcError::cancelled()),
    };
    match result {
        // What it set going is the client's now.
        Ok(value) => {
            ctx.tokens.take();
            Ok(value)
        }
        // Whatever this request set going must not outlive it; the answer
        // says what was undone (or what is left to undo).
        Err(mut error) => {
            if let Some(undone) = ctx.undo().await {
                error.message = format!("{}; {undone}", error.message);
            }
            Err(error)
        }
    }
}
