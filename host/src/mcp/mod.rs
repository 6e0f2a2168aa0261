//! `epp-host mcp`: the same component served as a Model Context Protocol
//! server (rmcp), beside EPP/1 (`rpc`). Every EPP method the provider serves
//! is a tool (`catalog`, from the tools `contract::tools` derives from
//! `wit/`); a tool call runs the method through the request path of `rpc`
//! (`rpc::server::run_request`: deadline, cancellation, undo), its stream
//! events become `notifications/progress` when the client asked for progress,
//! and its answer becomes the tool result (`answer`). Nothing here names an
//! EPP method: a method added to `wit/` is a tool by itself.
//!
//! Both protocol eras are served: 2025-11-25 (the `initialize` handshake) and
//! 2026-07-28 (stateless, `server/discover`), as rmcp negotiates them.

mod answer;
mod catalog;
mod handler;
pub mod http;
mod parked;
mod requests;
mod resources;
mod template;

use crate::rpc::server::ServeOptions;
use crate::runtime::Runtime;
use anyhow::{Context, Result};
use rmcp::ServiceExt;
use std::sync::Arc;
use std::time::Duration;

pub use handler::Handler;

/// How the MCP server behaves; see `epp-host mcp --help`.
#[derive(Debug, Clone)]
pub struct McpOptions {
    pub serve: ServeOptions,
    /// Tools to list (by name); none = every tool the provider serves.
    pub tools: Option<Vec<String>>,
    /// Only tools that change nothing (`readOnlyHint`).
    pub read_only: bool,
    /// How long a resumable tool call may run before it answers with what it
    /// has so far.
    pub wait: Duration,
    /// Most bytes of output or file content in one tool result.
    pub inline_bytes: usize,
    /// Who is serving: `serverInfo` and the server's `_meta`.
    pub identity: Identity,
    /// Streamable HTTP instead of stdio.
    pub http: Option<http::HttpOptions>,
}

/// What `serverInfo` says about the host and the component it serves.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// The component's provider id and version (`describe()`).
    pub provider: String,
    pub provider_version: String,
    /// sha256 of the component's bytes, hex.
    pub sha256: String,
    /// The key ids of the signatures that were trusted.
    pub signers: Vec<String>,
}

/// Serves MCP on stdin/stdout until the client closes them, or over HTTP.
pub async fn serve(runtime: Arc<Runtime>, opts: McpOptions) -> Result<()> {
    let http = opts.http.clone();
    let handler = Handler::new(runtime, opts)?;
    if let Some(http) = http {
        return http::serve(handler, http).await;
    }
    let background = handler.background();
    let (stdin, stdout) = rmcp::transport::stdio();
    let stdin = UntilEnd {
        inner: stdin,
        ended: handler.closing(),
    };
    let running = handler
        .serve((stdin, stdout))
        .await
        .context("starting the MCP session on stdio")?;
    let _ = running.waiting().await;
    // Detached work (terminal pumps) ends with the session.
    background.lock().expect("lock").abort_all();
    Ok(())
}

/// The client's input, which says when it ends: a client that exits with
/// calls in flight has them cancelled and undone (their commands killed), as
/// `epp-host run` does at end of input, instead of dropped with the process
/// (rmcp gives running handlers 5 s after end of input, then ends them).
struct UntilEnd<R> {
    inner: R,
    ended: tokio_util::sync::CancellationToken,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for UntilEnd<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            std::task::Poll::Ready(Ok(()))
                if buf.filled().len() == before && buf.remaining() > 0 =>
            {
                self.ended.cancel()
            }
            std::task::Poll::Ready(Err(_)) => self.ended.cancel(),
            _ => {}
        }
        polled
    }
}
