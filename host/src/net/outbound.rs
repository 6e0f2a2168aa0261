//! Outbound HTTP for the guest: every request passes the [`NetPolicy`] before a
//! connection is made, the provider's secret headers are added here (and only
//! here: the guest cannot set them), and names are resolved
//! by the host so a DNS answer pointing at a forbidden address is refused too.
//!
//! Connections are pooled (keep-alive) per destination; redirects are never
//! followed (the guest sees the 3xx and decides, and every follow-up request is
//! checked again).

use super::policy::{Denied, Destination, NetPolicy};
use super::readahead::ReadAhead;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tracing::Instrument;
use wasmtime_wasi_http::{
    DEFAULT_FORBIDDEN_HEADERS, Error as HttpError, ForbiddenHeaderFilter, RequestOptions, WasiBody,
    WasiHttpHooks,
};

/// Longest time a connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may sit idle and still carry a request that is not
/// idempotent (`POST`): a host constant for any backend. A server may close an
/// idle connection at any moment after its keep-alive, and a `POST` sent into
/// a closing connection is lost without knowing whether it ran; 1 s is under
/// the keep-alive of every common HTTP server (their defaults are 2 s and
/// more), so such a race needs a server configured below that.
pub const POST_REUSE_IDLE: Duration = Duration::from_secs(1);
/// Upper bound for the guest's first-byte and between-bytes timeouts.
const MAX_IO_TIMEOUT: Duration = Duration::from_secs(3600);

type Connector = hyper_rustls::HttpsConnector<HttpConnector<CheckedResolver>>;

/// Resolves names for the HTTP client and refuses answers the policy forbids.
#[derive(Clone)]
pub struct CheckedResolver {
    policy: Arc<NetPolicy>,
}

impl tower_service::Service<Name> for CheckedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = ResolveError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = self.policy.clone();
        Box::pin(async move {
            let addrs = resolve_checked(&policy, name.as_str(), 0).await?;
            Ok(addrs.into_iter())
        })
    }
}

/// Why a name gave no address to connect to. It travels through the HTTP
/// client's error chain as itself, so the failure is told by its type.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// An answer the policy forbids (a rebinding answer mixes good and bad
    /// addresses: any bad one fails the lookup).
    #[error(transparent)]
    Denied(#[from] Denied),
    /// The name does not resolve.
    #[error(transparent)]
    Lookup(std::io::Error),
}

/// Looks `host` up and checks every address; any forbidden address fails the whole
/// lookup (a rebinding answer mixes good and bad addresses).
pub async fn resolve_checked(
    policy: &NetPolicy,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, ResolveError> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match host.parse() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(ResolveError::Lookup)?
            .collect(),
    };
    for addr in &addrs {
        policy.check_resolved(&host.to_ascii_lowercase(), addr.ip())?;
    }
    Ok(addrs)
}

/// The pooled HTTP client shared by all stores.
#[derive(Clone)]
pub struct HttpClient {
    /// Keeps idle connections: for requests that may be sent again.
    client: Client<Connector, WasiBody>,
    /// For requests that must not be lost (`POST`): a pool of its own, so a
    /// connection carries one only after an exchange of this kind that ended
    /// cleanly, and only within [`POST_REUSE_IDLE`] of it.
    posts: Client<Connector, WasiBody>,
    policy: Arc<NetPolicy>,
    /// wasi:http's forbidden headers and the host-owned ones, made once.
    forbidden: ForbiddenHeaderFilter,
}

impl HttpClient {
    pub fn new(policy: Arc<NetPolicy>) -> HttpClient {
        let mut http = HttpConnector::new_with_resolver(CheckedResolver {
            policy: policy.clone(),
        });
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        // The idle timeout needs a timer to run at all: without one, a pooled
        // connection to an endpoint that is never asked again (a killed
        // sandbox's endpoint, say) stays in the pool for good.
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(64)
            .build(https.clone());
        // A server may close an idle connection at any moment (its keep-alive
        // timeout; a reverse proxy after an upstream error). A request sent on
        // it just then fails with a reset, and whether the server acted on it
        // is unknown, so the guest cannot retry it. Requests that are not
        // idempotent therefore never take a connection a read or a delete used
        // (an upstream error ends those exchanges, and the proxy may close the
        // connection after), and take a pooled one only when its last exchange
        // (of their own kind) ended cleanly (hyper pools a connection only
        // after a complete, kept-alive response; a stream left early is not
        // drained, so its connection is dropped) and it has been idle for less
        // than POST_REUSE_IDLE; the pool checks that bound when it hands a
        // connection out. Anything older gets a new connection.
        let posts = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POST_REUSE_IDLE)
            .pool_max_idle_per_host(64)
            .build(https);
        let owner = policy.clone();
        let forbidden: ForbiddenHeaderFilter = Arc::new(move |name: &http::HeaderName| {
            DEFAULT_FORBIDDEN_HEADERS.contains(name) || owner.owns_header(name.as_str())
        });
        HttpClient {
            client,
            posts,
            policy,
            forbidden,
        }
    }
}

/// A request header by which a provider asks that one request go without the
/// host's secret headers: to find out what an anonymous user of a URL it is
/// about to hand out would get (docs/epp-1.md §7). The host removes it, so it
/// never leaves the host; it can only take secrets away.
pub const ANONYMOUS_HEADER: &str = "epp-anonymous";

/// The `WasiHttpHooks` of one store.
pub struct Outbound {
    pub client: HttpClient,
}

impl WasiHttpHooks for Outbound {
    fn is_forbidden_header(&mut self, name: &http::HeaderName) -> bool {
        (self.client.forbidden)(name)
    }

    fn forbidden_header_filter(&mut self) -> ForbiddenHeaderFilter {
        self.client.forbidden.clone()
    }

    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (
                        http::Response<WasiBody>,
                        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                    ),
                    HttpError,
                >,
            > + Send,
    > {
        let uri = request.uri();
        let decision = Destination::parse(
            uri.scheme_str().unwrap_or("https"),
            uri.authority().map(|a| a.as_str()).unwrap_or(""),
        )
        .and_then(|dest| {
            self.client
                .policy
                .check(&dest)
                .map(|allowed| (dest, allowed))
        });
        let (dest, allowed) = match decision {
            Ok(ok) => ok,
            Err(denied) => {
                tracing::warn!(reason = %denied, "outbound request denied by policy");
                return Box::new(async { Err(HttpError::HttpRequestDenied) });
            }
        };
        // Strip anything the guest managed to smuggle in, then add what the host
        // owns, unless the guest asked for an anonymous request.
        let headers = request.headers_mut();
        let anonymous = headers.remove(ANONYMOUS_HEADER).is_some();
        for name in self.client.policy.owned_headers() {
            headers.remove(name);
        }
        if !anonymous {
            for (name, value) in allowed.inject {
                headers.insert(name, value);
            }
        }
        let first_byte = clamp(options.and_then(|o| o.first_byte_timeout));
        let between_bytes = clamp(options.and_then(|o| o.between_bytes_timeout));
        let reusable = request.method().is_idempotent();
        let client = if reusable {
            self.client.client.clone()
        } else {
            self.client.posts.clone()
        };
        // wasmtime-wasi-http runs this on a task of its own: keep the request's span.
        let span = tracing::Span::current();
        Box::new(
            async move {
                let response = match tokio::time::timeout(first_byte, client.request(request)).await
                {
                    Ok(Ok(response)) => response,
                    Ok(Err(err)) => return Err(map_client_error(&dest, err)),
                    Err(_) => return Err(HttpError::ConnectionReadTimeout),
                };
                // A body of unknown length is a stream (events, logs, output):
                // read it ahead so the guest gets many small chunks at once.
                let streamed = !response
                    .headers()
                    .contains_key(http::header::CONTENT_LENGTH)
                    && !http_body::Body::is_end_stream(response.body());
                let response = response.map(|body| {
                    let body = IdleTimeoutBody::new(body, between_bytes);
                    if streamed {
                        ReadAhead::new(body, reusable).boxed_unsync()
                    } else {
                        body.boxed_unsync()
                    }
                });
                Ok((
                    response,
                    Box::new(async { Ok(()) }) as Box<dyn Future<Output = _> + Send>,
                ))
            }
            .instrument(span),
        )
    }
}

fn has_hyper_error(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(e) = source {
        if e.is::<hyper::Error>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// An error and its sources, joined with ": ".
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

fn clamp(timeout: Option<Duration>) -> Duration {
    timeout.unwrap_or(MAX_IO_TIMEOUT).min(MAX_IO_TIMEOUT)
}

/// A failed request as the `wasi:http` error the guest sees, told by the
/// types in the client's error chain: the resolver's own error, the I/O error
/// kind of a connection, hyper's error kinds.
fn map_client_error(dest: &Destination, err: hyper_util::client::legacy::Error) -> HttpError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = source {
        if let Some(resolve) = e.downcast_ref::<ResolveError>() {
            return match resolve {
                ResolveError::Denied(denied) => {
                    tracing::warn!(
                        destination = %dest,
                        reason = %denied,
                        "outbound request denied after name resolution"
                    );
                    HttpError::HttpRequestDenied
                }
                ResolveError::Lookup(lookup) => {
                    tracing::debug!(destination = %dest, error = %lookup, "name lookup failed");
                    HttpError::DnsError {
                        rcode: None,
                        info_code: None,
                    }
                }
            };
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => HttpError::ConnectionRefused,
                std::io::ErrorKind::TimedOut => HttpError::ConnectionTimeout,
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe => {
                    HttpError::ConnectionTerminated
                }
                _ => HttpError::DestinationUnavailable,
            };
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_canceled())
        {
            return HttpError::ConnectionTerminated;
        }
        // Other hyper errors may wrap an I/O error (a reset): keep looking.
        source = e.source();
    }
    if has_hyper_error(&err) {
        // The guest sees only the code; the operator gets hyper's reason.
        tracing::warn!(destination = %dest, error = chain(&err), "outbound HTTP failed");
        return HttpError::HttpProtocolError;
    }
    if err.is_connect() {
        return HttpError::ConnectionRefused;
    }
    HttpError::HttpProtocolError
}

/// A response body that fails when no data arrives for `timeout`.
struct IdleTimeoutBody {
    inner: hyper::body::Incoming,
    timeout: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl IdleTimeoutBody {
    fn new(inner: hyper::body::Incoming, timeout: Duration) -> Self {
        IdleTimeoutBody {
            inner,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

impl http_body::Body for IdleTimeoutBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let deadline = tokio::time::Instant::now() + self.timeout;
                self.sleep.as_mut().reset(deadline);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => Poll::Ready(Some(Err(if err.is_incomplete_message() {
                HttpError::HttpResponseIncomplete
            } else {
                HttpError::from(err)
            }))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
