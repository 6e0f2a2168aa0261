//! The MCP server (rmcp's `ServerHandler`): lists the catalog's tools, and
//! runs a tool call as an EPP request through `rpc::server::run_request`
//! (its deadline, cancellation from `notifications/cancelled` or a closed
//! HTTP stream, the undo of what a failed call left behind), forwarding its
//! stream as `notifications/progress` when the client sent a progress token.

use super::McpOptions;
use super::answer::{self, Forwarded};
use super::catalog;
use super::catalog::Catalog;
use super::http::StreamClosed;
use super::parked::{Lot, Parked, Seen};
use super::requests::Requests;
use super::resources::Resources;
use crate::contract::table::{Answer, Method, Via};
use crate::contract::tools::INSTRUCTIONS;
use crate::rpc::errors::RpcError;
use crate::rpc::outbox::Note;
use crate::rpc::server::run_request;
use crate::runtime::Runtime;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation,
    ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Map, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// The EPP param that forwards a stream's events as notifications.
const STREAM: &str = "stream";

/// One MCP server over one loaded provider.
#[derive(Clone)]
pub struct Handler {
    requests: Arc<Requests>,
    catalog: Arc<Catalog>,
    /// Calls that outlived `--mcp-wait`, read on in the background.
    lot: Arc<Lot>,
    /// Resource templates and this session's subscriptions.
    resources: Arc<Resources>,
    /// Ends the session's subscriptions when the last clone is dropped.
    _session: Arc<SessionEnd>,
}

/// Stops a session's subscriptions when its handler is gone.
struct SessionEnd(Arc<Resources>);

impl Drop for SessionEnd {
    fn drop(&mut self) {
        self.0.end_session();
    }
}

impl Handler {
    pub fn new(runtime: Arc<Runtime>, opts: McpOptions) -> anyhow::Result<Handler> {
        let catalog = Catalog::new(&runtime, opts.tools.as_deref(), opts.read_only)?;
        // Resources of listed tools only (`--tools`, `--read-only` narrow them too).
        let listed = |m: &Method| catalog.lists(m.name);
        let resources = Arc::new(Resources::new(&listed, &|m| catalog::serves(&runtime, m)));
        tracing::info!(
            tools = catalog.listed.len(),
            "serving MCP: one tool per method the provider serves"
        );
        Ok(Handler {
            requests: Arc::new(Requests::new(runtime, opts)),
            catalog: Arc::new(catalog),
            lot: Arc::new(Lot::default()),
            _session: Arc::new(SessionEnd(resources.clone())),
            resources,
        })
    }

    /// The handler of another session (over HTTP): the same tools, held calls
    /// and requests; subscriptions of its own, stopped when it is dropped.
    pub fn for_session(&self) -> Handler {
        let resources = Arc::new(self.resources.for_session());
        Handler {
            requests: self.requests.clone(),
            catalog: self.catalog.clone(),
            lot: self.lot.clone(),
            _session: Arc::new(SessionEnd(resources.clone())),
            resources,
        }
    }

    /// Cancelled when the client's input ends: the calls in flight stop.
    pub fn closing(&self) -> CancellationToken {
        self.requests.closing.clone()
    }

    /// Where detached work of calls runs (ended with the session).
    pub fn background(&self) -> Arc<Mutex<tokio::task::JoinSet<()>>> {
        self.requests.background.clone()
    }

    fn server_info(&self) -> Implementation {
        let id = &self.requests.opts.identity;
        let mut info = Implementation::new("epp-host", env!("CARGO_PKG_VERSION"));
        info.title = Some(format!(
            "epp-host serving {} {}",
            id.provider, id.provider_version
        ));
        info.description = Some(format!(
            "provider {} {} (component sha256 {}, signed by {})",
            id.provider,
            id.provider_version,
            id.sha256,
            match id.signers.is_empty() {
                true => "no trusted key".to_string(),
                false => id.signers.join(", "),
            }
        ));
        info
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(listed) = self.catalog.get(&request.name) else {
            return Err(McpError::invalid_params(
                format!("unknown tool `{}`; tools/list names them", request.name),
                None,
            ));
        };
        let mut params = answer::params(request.arguments);
        if let Some(e) = unlisted(listed, &params) {
            return Ok(answer::failure(&e).into());
        }
        let progress = context.meta.get_progress_token();
        if let Some(parked) = self.lot.picks_up(listed.method, &params) {
            return Ok(self
                .follow(listed.method, parked, progress, &context)
                .await
                .into());
        }
        // Held at the wait only when the call that picks it up is a tool here.
        let resume =
            resumable(listed.method, &params).filter(|(resume, _)| self.catalog.lists(resume));
        let forward = resume.is_some() || (progress.is_some() && forwards(listed.method));
        if forward {
            params.insert(STREAM.into(), Value::Bool(true));
        }
        let slot = match self.requests.slot() {
            Ok(slot) => slot,
            Err(e) => return Ok(answer::failure(&e).into()),
        };
        let (ctx, mut notes) = self.requests.ctx(self.requests.opts.inline_bytes);
        let span = tracing::info_span!("tool", id = %ctx.id, tool = %listed.tool.name);
        // The call's own token: a parked call outlives the request's.
        let stop = CancellationToken::new();
        // Over HTTP, a response stream the client closed stops the call too.
        let closed = StreamClosed::of(&context.extensions).unwrap_or_default();
        let method = listed.method.name;
        let timeout = self.requests.opts.serve.call_timeout;
        let asked = params.clone();
        let work = {
            let stop = stop.clone();
            async move {
                let _slot = slot;
                run_request(&ctx, method, params, timeout, stop.cancelled_owned()).await
            }
        }
        .instrument(span);
        let mut work = Box::pin(work);
        let mut forwarded = Forwarded::new(self.requests.opts.inline_bytes);
        let progress_of = |forwarded: &mut Forwarded, note| {
            let message = forwarded.take(note)?;
            Some(
                ProgressNotificationParam::new(progress.clone()?, forwarded.bytes as f64)
                    .with_message(message),
            )
        };
        let mut wait = Box::pin(tokio::time::sleep(self.requests.opts.wait));
        let mut waiting = resume.is_some();
        let mut overdue = false;
        let result = loop {
            tokio::select! {
                // Notes first: each goes out before the answer it precedes.
                biased;
                Some(note) = notes.recv() => {
                    if let Some(param) = progress_of(&mut forwarded, note) {
                        notify(&context, param).await;
                    }
                    if overdue && forwarded.id().is_some() && self.lot.has_room() {
                        break None;
                    }
                }
                result = &mut work => break Some(result),
                () = context.ct.cancelled(), if !stop.is_cancelled() => stop.cancel(),
                () = closed.cancelled(), if !stop.is_cancelled() => stop.cancel(),
                () = self.requests.closing.cancelled(), if !stop.is_cancelled() => stop.cancel(),
                () = &mut wait, if waiting => {
                    waiting = false;
                    overdue = true;
                    if forwarded.id().is_some() && self.lot.has_room() {
                        break None;
                    }
                }
            }
        };
        let Some(result) = result else {
            let (resume, _) = resume.expect("only a resumable call waits");
            return Ok(self.park(resume, asked, forwarded, notes, work).into());
        };
        // What the call sent before it answered is in the channel already.
        while let Ok(note) = notes.try_recv() {
            if let Some(param) = progress_of(&mut forwarded, note) {
                notify(&context, param).await;
            }
        }
        Ok(match result {
            Ok(mut value) => {
                if forward {
                    forwarded.fill(&mut value);
                }
                answer::success(value)
            }
            // Too large to carry: a link to it as a resource, when it is one.
            Err(e) => match e
                .too_large
                .and_then(|size| Some((size, self.resources.link(listed.method, &asked, size)?)))
            {
                Some((size, (uri, link))) => {
                    answer::linked(&uri, link, size, self.requests.opts.inline_bytes)
                }
                None => answer::failure(&e),
            },
        }
        .into())
    }

    /// Answers a call that outlived the wait with what it has so far, and
    /// reads the rest of it into the lot, where its `resume` method finds it.
    fn park(
        &self,
        resume: &'static str,
        asked: Map<String, Value>,
        forwarded: Forwarded,
        mut notes: mpsc::Receiver<Note>,
        mut work: Pin<Box<dyn Future<Output = Result<Value, RpcError>> + Send>>,
    ) -> CallToolResult {
        let id = match forwarded.id() {
            Some(Value::String(id)) => id.clone(),
            Some(other) => other.to_string(),
            None => unreachable!("parked only with its id"),
        };
        let running = answer::running(forwarded.running(), self.requests.opts.wait, resume, &asked);
        let parked = Parked::new(resume, id.clone(), asked, forwarded);
        self.lot.park(parked.clone());
        tracing::info!(%id, "the call outlived --mcp-wait: answered, and read on in the background");
        self.requests
            .background
            .lock()
            .expect("lock")
            .spawn(async move {
                let result = loop {
                    tokio::select! {
                        biased;
                        Some(note) = notes.recv() => parked.take(note),
                        result = &mut work => break result,
                    }
                };
                while let Ok(note) = notes.try_recv() {
                    parked.take(note);
                }
                parked.end(result);
            });
        running
    }

    /// Serves a call that picks up a parked one: waits at most `--mcp-wait`
    /// for its end, forwarding new output as progress, and answers it (the
    /// end, once) or what it has so far.
    async fn follow(
        &self,
        method: &'static Method,
        parked: Arc<Parked>,
        progress: Option<ProgressToken>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut seen = Vec::new();
        parked.news(&mut seen);
        let mut changes = parked.watch();
        let wait = tokio::time::sleep(self.requests.opts.wait);
        tokio::pin!(wait);
        loop {
            if parked.ended() {
                break;
            }
            tokio::select! {
                biased;
                () = context.ct.cancelled() => return answer::failure(&RpcError::cancelled()),
                _ = changes.changed() => {
                    let (text, bytes) = parked.news(&mut seen);
                    if let (Some(token), false) = (&progress, text.is_empty()) {
                        let param = ProgressNotificationParam::new(token.clone(), bytes as f64)
                            .with_message(text);
                        notify(context, param).await;
                    }
                }
                () = &mut wait => break,
            }
        }
        match parked.seen() {
            Seen::Running(value) => {
                answer::running(value, self.requests.opts.wait, method.name, parked.asked())
            }
            // Kept: a follow again (a lost answer, a retry) gets the same end.
            Seen::Ended(result) => result,
        }
    }
}

/// An argument the tool's `inputSchema` does not have, refused naming it (as
/// EPP refuses an unknown field): a mistyped name, `stream` (progress comes
/// with a progress token) or a flag left out of the schema because it needs
/// EPP input notifications (`stdin`), whose call would wait for input no
/// tool can send.
fn unlisted(listed: &catalog::Listed, params: &Map<String, Value>) -> Option<RpcError> {
    let properties = listed.mcp.input_schema.get("properties")?.as_object()?;
    let name = params
        .keys()
        .find(|k| !properties.contains_key(k.as_str()))?;
    let known: Vec<String> = properties.keys().map(|k| format!("`{k}`")).collect();
    let mut message = format!(
        "unknown field `{name}`, expected one of {}",
        known.join(", ")
    );
    if name == STREAM {
        message.push_str(
            "; this server streams output as notifications/progress when the call carries a \
             progress token",
        );
    }
    Some(RpcError::invalid_params(listed.tool.name, message))
}

/// The method that picks up a call of `method` that outlived the wait, and
/// the key of the id it goes by: `resume=` and `id=` of its stream, unless a
/// `when.` flag in `params` picks another function (whose answer is not the
/// stream, as `background`'s).
fn resumable(method: &Method, params: &Map<String, Value>) -> Option<(&'static str, &'static str)> {
    let tags = method.stream?;
    let other = tags.callees.iter().any(|c| match c.via {
        Via::When { param, .. } => params
            .get(param)
            .is_some_and(|v| !v.is_null() && *v != Value::Bool(false)),
        _ => false,
    });
    match other {
        true => None,
        false => Some((tags.resume?, tags.id?)),
    }
}

async fn notify(context: &RequestContext<RoleServer>, param: ProgressNotificationParam) {
    if let Err(e) = context.peer.notify_progress(param).await {
        tracing::debug!(error = %e, "a progress notification could not be sent");
    }
}

/// Whether a method forwards events with `stream: true` (output, items) that
/// a tool call can pass on as progress; a reader's or writer's chunks are not
/// (a tool answers a file whole).
fn forwards(method: &Method) -> bool {
    let events = method.stream.is_some_and(|s| {
        s.callees
            .iter()
            .any(|c| matches!(c.answer, Answer::Events { .. }))
    });
    events && crate::rpc::streams::forwards_stream(method)
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        let capabilities = match self.resources.any() {
            (false, _) => ServerCapabilities::builder().enable_tools().build(),
            (true, false) => ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
            (true, true) => ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        };
        ServerConfig::new(capabilities)
            .with_server_info(self.server_info())
            .with_instructions(INSTRUCTIONS.to_string())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(
            self.resources.templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let result = self
            .resources
            .read(&self.requests, &request.uri, context.ct.cancelled())
            .await?;
        Ok(result.into())
    }

    #[allow(deprecated)] // resources/subscribe is the 2025-11-25 way, still served
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.resources
            .subscribe(&self.requests, request.uri, context.peer)
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.resources.unsubscribe(&request.uri);
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(self.resources.accepted(requested))
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), McpError> {
        self.resources.listen(&self.requests, subscription).await;
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self.catalog.listed.iter().map(|l| l.mcp.clone()).collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, context).await
    }
}
