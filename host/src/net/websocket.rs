//! The `abx:epp/websocket` import: WebSocket connections owned by the host
//! process and named by the guest's keys, so one request can write to a
//! connection another request reads from (a terminal's input and output).
//!
//! The handshake goes through the same policy as HTTP: the destination is
//! checked, names are resolved by the host and checked again, the guest cannot
//! set host-owned headers, and the provider's secret headers are added only to
//! destinations in their scope.

use super::outbound::{CONNECT_TIMEOUT, ResolveError, resolve_checked};
use super::policy::{Destination, NetPolicy};
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// Connections one host process may hold open at once.
pub const MAX_CONNECTIONS: usize = 256;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Ws = WebSocketStream<Box<dyn Io>>;

struct Conn {
    sink: tokio::sync::Mutex<SplitSink<Ws, WsMessage>>,
    stream: tokio::sync::Mutex<SplitStream<Ws>>,
}

/// A message as the guest sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Text(String),
    Binary(Vec<u8>),
    Close(u16, String),
}

/// Why a WebSocket operation failed, mapped to an EPP error by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsError {
    Denied(String),
    InvalidArgument(String),
    Conflict(String),
    NotFound(String),
    Unreachable(String),
    Upstream {
        status: Option<u16>,
        message: String,
    },
    TimedOut(String),
    Limit(String),
}

/// All open connections of this host process.
pub struct Sockets {
    policy: Arc<NetPolicy>,
    conns: Mutex<HashMap<String, Arc<Conn>>>,
    tls: Arc<rustls::ClientConfig>,
}

impl Sockets {
    pub fn new(policy: Arc<NetPolicy>) -> Sockets {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.into(),
        };
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        Sockets {
            policy,
            conns: Mutex::new(HashMap::new()),
            tls: Arc::new(tls),
        }
    }

    fn get(&self, key: &str) -> Option<Arc<Conn>> {
        self.conns.lock().expect("lock").get(key).cloned()
    }

    fn forget(&self, key: &str) -> Option<Arc<Conn>> {
        self.conns.lock().expect("lock").remove(key)
    }

    /// Forgets `key` only while it still names `conn`: a connection that
    /// ended must not take with it a newer one opened under the same key
    /// meanwhile (a terminal reattached in this process).
    fn forget_ended(&self, key: &str, conn: &Arc<Conn>) {
        let mut conns = self.conns.lock().expect("lock");
        if conns.get(key).is_some_and(|c| Arc::ptr_eq(c, conn)) {
            conns.remove(key);
        }
    }

    pub fn is_open(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Opens `url` under `key`.
    pub async fn connect(
        &self,
        key: String,
        url: &str,
        headers: Vec<(String, String)>,
    ) -> Result<(), WsError> {
        if self.is_open(&key) {
            return Err(WsError::Conflict(format!(
                "WebSocket `{key}` is already open"
            )));
        }
        if self.conns.lock().expect("lock").len() >= MAX_CONNECTIONS {
            return Err(WsError::Limit(format!(
                "this host already holds {MAX_CONNECTIONS} WebSocket connections; close some first"
            )));
        }
        let uri: http::Uri = url
            .parse()
            .map_err(|_| WsError::InvalidArgument(format!("`{url}` is not a URL")))?;
        let scheme = uri.scheme_str().unwrap_or("");
        if scheme != "ws" && scheme != "wss" {
            return Err(WsError::InvalidArgument(format!(
                "`{url}` is not a ws:// or wss:// URL"
            )));
        }
        let dest = Destination::parse(scheme, uri.authority().map(|a| a.as_str()).unwrap_or(""))
            .map_err(|d| WsError::Denied(d.0))?;
        let allowed = self.policy.check(&dest).map_err(|d| WsError::Denied(d.0))?;

        let mut request = url
            .into_client_request()
            .map_err(|e| WsError::InvalidArgument(format!("`{url}`: {e}")))?;
        for (name, value) in headers {
            if self.policy.owns_header(&name) {
                continue;
            }
            let name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| WsError::InvalidArgument(format!("`{name}` is not a header name")))?;
            let value = http::HeaderValue::from_str(&value).map_err(|_| {
                WsError::InvalidArgument(format!("header `{name}` has an invalid value"))
            })?;
            request.headers_mut().insert(name, value);
        }
        for (name, value) in allowed.inject {
            request.headers_mut().insert(name, value);
        }

        let stream = tokio::time::timeout(CONNECT_TIMEOUT, self.dial(&dest))
            .await
            .map_err(|_| {
                WsError::TimedOut(format!(
                    "connecting to {dest} took longer than {CONNECT_TIMEOUT:?}"
                ))
            })??;
        let (ws, _response) = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio_tungstenite::client_async(request, stream),
        )
        .await
        .map_err(|_| WsError::TimedOut(format!("WebSocket handshake with {dest} timed out")))?
        .map_err(|e| handshake_error(&dest, e))?;
        let (sink, stream) = ws.split();
        let conn = Arc::new(Conn {
            sink: tokio::sync::Mutex::new(sink),
            stream: tokio::sync::Mutex::new(stream),
        });
        let mut conns = self.conns.lock().expect("lock");
        if conns.contains_key(&key) {
            return Err(WsError::Conflict(format!(
                "WebSocket `{key}` is already open"
            )));
        }
        conns.insert(key, conn);
        Ok(())
    }

    async fn dial(&self, dest: &Destination) -> Result<Box<dyn Io>, WsError> {
        let addrs = resolve_checked(&self.policy, &dest.host, dest.port)
            .await
            .map_err(|e| match e {
                ResolveError::Denied(denied) => WsError::Denied(denied.0),
                ResolveError::Lookup(e) => {
                    WsError::Unreachable(format!("cannot resolve {}: {e}", dest.host))
                }
            })?;
        let tcp = tokio::net::TcpStream::connect(&addrs[..])
            .await
            .map_err(|e| WsError::Unreachable(format!("cannot connect to {dest}: {e}")))?;
        tcp.set_nodelay(true).ok();
        if dest.scheme == "https" {
            let name =
                rustls::pki_types::ServerName::try_from(dest.host.clone()).map_err(|_| {
                    WsError::InvalidArgument(format!("`{}` is not a TLS server name", dest.host))
                })?;
            let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| WsError::Unreachable(format!("TLS with {dest} failed: {e}")))?;
            Ok(Box::new(tls))
        } else {
            Ok(Box::new(tcp))
        }
    }

    pub async fn send(&self, key: &str, msg: Message) -> Result<(), WsError> {
        let conn = self
            .get(key)
            .ok_or_else(|| WsError::NotFound(format!("WebSocket `{key}` is not open")))?;
        let msg = match msg {
            Message::Text(t) => WsMessage::Text(t.into()),
            Message::Binary(b) => WsMessage::Binary(b.into()),
            Message::Close(code, reason) => WsMessage::Close(Some(CloseFrame {
                code: CloseCode::from(code),
                reason: reason.into(),
            })),
        };
        let mut sink = conn.sink.lock().await;
        tokio::time::timeout(Duration::from_secs(30), sink.send(msg))
            .await
            .map_err(|_| WsError::TimedOut(format!("sending on WebSocket `{key}` timed out")))?
            // The key stays: its reader sees the connection end too, and says
            // how (a guest may attach its terminal again on that).
            .map_err(|e| WsError::Unreachable(format!("WebSocket `{key}` failed: {e}")))
    }

    /// The next data or close message; none once the connection is gone.
    pub async fn receive(&self, key: &str) -> Result<Option<Message>, WsError> {
        let Some(conn) = self.get(key) else {
            return Ok(None);
        };
        let mut stream = conn.stream.lock().await;
        loop {
            match stream.next().await {
                Some(Ok(WsMessage::Text(t))) => return Ok(Some(Message::Text(t.to_string()))),
                Some(Ok(WsMessage::Binary(b))) => return Ok(Some(Message::Binary(b.to_vec()))),
                Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_))) => continue,
                Some(Ok(WsMessage::Close(frame))) => {
                    self.forget_ended(key, &conn);
                    let (code, reason) = frame
                        .map(|f| (u16::from(f.code), f.reason.to_string()))
                        .unwrap_or((1005, String::new()));
                    return Ok(Some(Message::Close(code, reason)));
                }
                Some(Err(e)) => {
                    self.forget_ended(key, &conn);
                    return Err(WsError::Unreachable(format!(
                        "WebSocket `{key}` failed: {e}"
                    )));
                }
                None => {
                    self.forget_ended(key, &conn);
                    return Ok(None);
                }
            }
        }
    }

    /// Closes and forgets `key`; a no-op if it is not open.
    pub async fn close(&self, key: &str, code: u16, reason: String) {
        let Some(conn) = self.forget(key) else {
            return;
        };
        let frame = CloseFrame {
            code: CloseCode::from(code),
            reason: reason.into(),
        };
        let mut sink = conn.sink.lock().await;
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            sink.send(WsMessage::Close(Some(frame))),
        )
        .await;
    }

    /// Closes everything (host shutdown).
    pub async fn close_all(&self) {
        let keys: Vec<String> = self.conns.lock().expect("lock").keys().cloned().collect();
        for key in keys {
            self.close(&key, 1001, "host shutting down".into()).await;
        }
    }
}

fn handshake_error(dest: &Destination, e: tokio_tungstenite::tungstenite::Error) -> WsError {
    use tokio_tungstenite::tungstenite::Error;
    match e {
        Error::Http(response) => {
            let status = response.status().as_u16();
            let body = response
                .body()
                .as_ref()
                .map(|b| {
                    String::from_utf8_lossy(b)
                        .chars()
                        .take(300)
                        .collect::<String>()
                })
                .unwrap_or_default();
            WsError::Upstream {
                status: Some(status),
                message: format!("WebSocket handshake with {dest} answered HTTP {status}: {body}"),
            }
        }
        Error::Io(io) => {
            WsError::Unreachable(format!("WebSocket connection to {dest} failed: {io}"))
        }
        other => WsError::Upstream {
            status: None,
            message: format!("WebSocket handshake with {dest} failed: {other}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::grant::{Grant, Origin, parse_origin_url};

    fn loopback(port: u16) -> Sockets {
        let url = format!("http://127.0.0.1:{port}");
        let grant = Grant {
            origin: Some(Origin {
                template: "{base_url}".into(),
                dest: parse_origin_url(&url).unwrap(),
                url,
            }),
            ..Grant::nothing()
        };
        Sockets::new(Arc::new(NetPolicy::new(&grant).unwrap()))
    }

    /// The connection a key named before it was closed and opened again
    /// (a terminal reattached in this process) ends later: the key keeps
    /// naming the new connection.
    #[tokio::test]
    async fn an_ended_connection_leaves_a_newer_one_under_its_key() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (end_first, ended) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut first = tokio_tungstenite::accept_async(tcp).await.unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            let _second = tokio_tungstenite::accept_async(tcp).await.unwrap();
            ended.await.ok();
            first.close(None).await.ok();
            std::future::pending::<()>().await;
        });
        let sockets = Arc::new(loopback(port));
        let url = format!("ws://127.0.0.1:{port}/");
        sockets.connect("k".into(), &url, Vec::new()).await.unwrap();
        let reader = {
            let sockets = sockets.clone();
            tokio::spawn(async move { sockets.receive("k").await })
        };
        // The reader holds the first connection; the key moves on.
        while sockets
            .get("k")
            .is_some_and(|c| c.stream.try_lock().is_ok())
        {
            tokio::task::yield_now().await;
        }
        sockets.forget("k");
        sockets.connect("k".into(), &url, Vec::new()).await.unwrap();
        end_first.send(()).unwrap();
        let got = reader.await.unwrap().unwrap();
        assert!(matches!(got, Some(Message::Close(..))), "{got:?}");
        assert!(sockets.is_open("k"), "the newer connection was forgotten");
    }
}
