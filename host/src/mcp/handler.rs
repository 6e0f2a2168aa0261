//! The MCP server (rmcp's `ServerHandler`): lists the catalog's tools, and
//! runs a tool call as an EPP request through `rpc::server::run_request`
//! (its deadline, cancellation from `notifications/cancelled` or a closed
//! HTTP stream, the undo of what a failed call left behind), forwarding its
//! stream as `notifications/progress` when the client sent a progress token.

use super::McpOptions;
use super::answer::{self, Forwarded};
use super::catalog::Catalog;
use crate::codec::Codec;
use crate::contract::tools::INSTRUCTIONS;
use crate::rpc::context::CallCtx;
use crate::rpc::outbox::Outbox;
use crate::rpc::server::run_request;
use crate::runtime::Runtime;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tracing::Instrument;

/// Notifications of one call waiting for the progress pump at most.
const NOTES: usize = 64;
/// The EPP param that forwards a stream's events as notifications.
const STREAM: &str = "stream";

/// One MCP server over one loaded provider.
#[derive(Clone)]
pub struct Handler {
    runtime: Arc<Runtime>,
    codec: Arc<Codec>,
    catalog: Arc<Catalog>,
    opts: Arc<McpOptions>,
    background: Arc<Mutex<tokio::task::JoinSet<()>>>,
    /// Ids of the EPP requests calls run as (for logs and notifications).
    calls: Arc<AtomicU64>,
}

impl Handler {
    pub fn new(runtime: Arc<Runtime>, opts: McpOptions) -> anyhow::Result<Handler> {
        let catalog = Catalog::new(&runtime, opts.tools.as_deref(), opts.read_only)?;
        tracing::info!(
            tools = catalog.listed.len(),
            "serving MCP: one tool per method the provider serves"
        );
        Ok(Handler {
            codec: Arc::new(Codec::new(&runtime.exports, opts.serve.max_param_bytes)),
            runtime,
            catalog: Arc::new(catalog),
            opts: Arc::new(opts),
            background: Arc::new(Mutex::new(tokio::task::JoinSet::new())),
            calls: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Where detached work of calls runs (ended with the session).
    pub fn background(&self) -> Arc<Mutex<tokio::task::JoinSet<()>>> {
        self.background.clone()
    }

    fn server_info(&self) -> Implementation {
        let id = &self.opts.identity;
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
        if params.contains_key(STREAM) {
            // Streaming is the client's progress token, not a param.
            let e = crate::rpc::errors::RpcError::invalid_params(
                listed.method.name,
                "unknown field `stream`: this server streams output as notifications/progress \
                 when the call carries a progress token",
            );
            return Ok(answer::failure(&e).into());
        }
        let progress = context.meta.get_progress_token();
        let forward = progress.is_some() && forwards(listed.method);
        if forward {
            params.insert(STREAM.into(), Value::Bool(true));
        }
        let (out, mut notes) = Outbox::notes(NOTES);
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let ctx = CallCtx::new(
            self.runtime.clone(),
            self.codec.clone(),
            out,
            Value::String(format!("mcp-{n}")),
            self.opts.serve.max_output_bytes,
            self.background.clone(),
        );
        let span = tracing::info_span!("tool", call = n, tool = %listed.tool.name);
        let cancelled = context.ct.cancelled();
        let work = run_request(
            &ctx,
            listed.method.name,
            params,
            self.opts.serve.call_timeout,
            cancelled,
        )
        .instrument(span);
        let mut forwarded = Forwarded::new(self.opts.serve.max_output_bytes);
        let progress_of = |forwarded: &mut Forwarded, note| {
            let message = forwarded.take(note)?;
            Some(
                ProgressNotificationParam::new(progress.clone()?, forwarded.bytes as f64)
                    .with_message(message),
            )
        };
        let result = {
            tokio::pin!(work);
            loop {
                tokio::select! {
                    // Notes first: each goes out before the answer it precedes.
                    biased;
                    Some(note) = notes.recv() => {
                        if let Some(param) = progress_of(&mut forwarded, note) {
                            notify(&context, param).await;
                        }
                    }
                    result = &mut work => break result,
                }
            }
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
                    forwarded.into_answer(&mut value);
                }
                answer::success(value)
            }
            Err(e) => answer::failure(&e),
        }
        .into())
    }
}

async fn notify(context: &RequestContext<RoleServer>, param: ProgressNotificationParam) {
    if let Err(e) = context.peer.notify_progress(param).await {
        tracing::debug!(error = %e, "a progress notification could not be sent");
    }
}

/// Whether a method takes `stream: true` (forwards its events).
fn forwards(method: &crate::contract::table::Method) -> bool {
    crate::rpc::streams::forwards_stream(method)
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(self.server_info())
            .with_instructions(INSTRUCTIONS.to_string())
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
