//! MCP over streamable HTTP (`--http ADDR`): rmcp's `StreamableHttpService`
//! at `/mcp`, behind the checks a local server owes its machine. `Origin` must
//! be a loopback origin (a web page elsewhere gets 403: no DNS-rebinding
//! attack on a local server), `Host` a loopback name (rmcp's default, or the
//! bound address), and, with `--bearer-env`, `Authorization: Bearer TOKEN`
//! must match (401 otherwise; the token is compared in constant time and
//! never logged). Every other path is 404.

use super::Handler;
use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tower_service::Service as _;

/// The one path MCP is served at.
pub const PATH: &str = "/mcp";

type Body = BoxBody<Bytes, Infallible>;

/// Where and how the HTTP server listens.
#[derive(Clone)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// The token clients must present, read from the operator's variable.
    pub bearer: Option<Arc<str>>,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("addr", &self.addr)
            .field("bearer", &self.bearer.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The origins a browser may call from: this machine's, on any port.
fn loopback_origins() -> Vec<String> {
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .flat_map(|h| [format!("http://{h}:*"), format!("https://{h}:*")])
        .collect()
}

fn respond(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *r.status_mut() = status;
    r
}

/// Whether `presented` (an `Authorization` value) carries `token`, compared
/// without an early exit.
fn bearer_matches(presented: Option<&[u8]>, token: &str) -> bool {
    let Some(value) = presented.and_then(|v| v.strip_prefix(b"Bearer ")) else {
        return false;
    };
    let want = token.as_bytes();
    value.len() == want.len() && value.iter().zip(want).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

/// Cancelled when the response to a request is dropped before its end: the
/// client closed the stream (a tool call then stops, as on
/// `notifications/cancelled`). In the request's extensions.
#[derive(Clone)]
pub struct StreamClosed(pub CancellationToken);

impl StreamClosed {
    /// The token of the HTTP request a call came in, if it came by HTTP.
    pub fn of(extensions: &rmcp::model::Extensions) -> Option<CancellationToken> {
        let parts = extensions.get::<http::request::Parts>()?;
        parts.extensions.get::<StreamClosed>().map(|c| c.0.clone())
    }
}

/// A response body that cancels its request's [`StreamClosed`] when it is
/// dropped before its end.
struct Guarded {
    inner: Body,
    guard: Option<tokio_util::sync::DropGuard>,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if let std::task::Poll::Ready(None) = polled
            && let Some(guard) = self.guard.take()
        {
            // Ended in full: nothing to cancel.
            guard.disarm();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Serves until the process ends.
pub async fn serve(handler: Handler, http: HttpOptions) -> Result<()> {
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    hosts.push(http.addr.ip().to_string());
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(loopback_origins())
        .enforce_origin_validation();
    if !http.addr.ip().is_loopback() {
        // Reached by other machines under names of their own (--http-any-address,
        // which requires the bearer token: that is what a DNS-rebinding page
        // lacks), so any Host is accepted; Origin is still checked.
        config = config.disable_allowed_hosts();
    }
    let service = StreamableHttpService::new(
        move || Ok(handler.for_session()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let listener = tokio::net::TcpListener::bind(http.addr)
        .await
        .with_context(|| format!("listening on {}", http.addr))?;
    let local = listener.local_addr()?;
    // The address on stderr, so a caller that asked for port 0 learns it.
    tracing::info!(address = %local, "serving MCP over HTTP at http://{local}{PATH}");
    eprintln!("epp-host mcp: listening on http://{local}{PATH}");
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                continue;
            }
        };
        let service = service.clone();
        let bearer = http.bearer.clone();
        tokio::spawn(async move {
            let serve = hyper::service::service_fn(move |req: Request<Incoming>| {
                let mut service = service.clone();
                let bearer = bearer.clone();
                async move {
                    if req.uri().path() != PATH {
                        return Ok::<_, Infallible>(respond(
                            StatusCode::NOT_FOUND,
                            "not found: MCP is served at /mcp",
                        ));
                    }
                    if let Some(token) = &bearer {
                        let presented = req
                            .headers()
                            .get(hyper::header::AUTHORIZATION)
                            .map(|v| v.as_bytes());
                        if !bearer_matches(presented, token) {
                            let mut r =
                                respond(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
                            // A static token: no OAuth metadata to discover.
                            r.headers_mut().insert(
                                hyper::header::WWW_AUTHENTICATE,
                                hyper::header::HeaderValue::from_static("Bearer"),
                            );
                            return Ok(r);
                        }
                    }
                    let mut req = req;
                    let closed = CancellationToken::new();
                    req.extensions_mut().insert(StreamClosed(closed.clone()));
                    let response = service.call(req).await?;
                    let (parts, body) = response.into_parts();
                    let body = Guarded {
                        inner: body,
                        guard: Some(closed.drop_guard()),
                    };
                    Ok(Response::from_parts(parts, body.boxed()))
                }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), serve)
                .await
            {
                tracing::debug!(%peer, error = %e, "an MCP connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_token_must_match_exactly() {
        assert!(bearer_matches(Some(b"Bearer s3cret"), "s3cret"));
        assert!(!bearer_matches(Some(b"Bearer s3cre"), "s3cret"));
        assert!(!bearer_matches(Some(b"bearer s3cret"), "s3cret"));
        assert!(!bearer_matches(Some(b"s3cret"), "s3cret"));
        assert!(!bearer_matches(None, "s3cret"));
    }
}
