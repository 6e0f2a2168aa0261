//! A kernel's channels WebSocket (`/api/kernels/{id}/channels`, Jupyter's JSON message
//! form, no subprotocol: what execd's gorilla dialer gets). execd dials it for every run;
//! the stand-in keeps one per code context (dialled when the context is made) so a run
//! costs no handshake and no jupyter_server "nudge", and routes the messages that arrive
//! while a run is active to that run.

use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::SystemTime;

use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::code_events::KernelMsg;

type Route = Arc<Mutex<Option<mpsc::UnboundedSender<KernelMsg>>>>;

pub struct KernelChannel {
    outgoing: mpsc::UnboundedSender<Message>,
    /// The active run's inbox; `None` between runs (messages are then dropped, as execd
    /// is not connected between runs).
    route: Route,
    /// Jupyter session id of our messages (execd: a uuid per client).
    session: String,
    counter: AtomicU64,
    closed: Arc<std::sync::atomic::AtomicBool>,
}

impl KernelChannel {
    /// Dials `url` (`ws://host:port/...`); the error text is execd's.
    pub async fn connect(authority: &str, url: &str) -> Result<Arc<KernelChannel>, String> {
        let fail = |e: &dyn std::fmt::Display| format!("failed to connect to kernel: {e}");
        let tcp = TcpStream::connect(authority).await.map_err(|e| {
            fail(&format!(
                "dial tcp {authority}: {}",
                crate::sys::errno_text(&e)
            ))
        })?;
        let _ = tcp.set_nodelay(true);
        // Large outputs come as one message each; do not cap them below what Jupyter sends.
        let config = WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let (ws, _) = tokio_tungstenite::client_async_with_config(url, QuickAck(tcp), Some(config))
            .await
            .map_err(|e| fail(&e))?;
        let (mut sink, mut stream) = ws.split();

        let (outgoing, mut to_send) = mpsc::unbounded_channel::<Message>();
        tokio::spawn(async move {
            while let Some(m) = to_send.recv().await {
                if sink.send(m).await.is_err() {
                    break;
                }
            }
            let _ = sink.close().await;
        });

        let route: Route = Arc::default();
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (route2, closed2) = (route.clone(), closed.clone());
        tokio::spawn(async move {
            while let Some(frame) = stream.next().await {
                let data = match frame {
                    Ok(Message::Text(t)) => t.as_bytes().to_vec(),
                    Ok(Message::Binary(b)) => b.to_vec(),
                    Ok(Message::Close(_)) | Err(_) => break,
                    Ok(_) => continue,
                };
                let Ok(msg) = serde_json::from_slice::<KernelMsg>(&data) else {
                    continue;
                };
                if let Some(tx) = route2.lock().unwrap().as_ref() {
                    let _ = tx.send(msg);
                }
            }
            // Connection gone (kernel shut down, server stopped): end the active run.
            closed2.store(true, Ordering::SeqCst);
            route2.lock().unwrap().take();
        });

        Ok(Arc::new(KernelChannel {
            outgoing,
            route,
            session: crate::web::new_uuid(true),
            counter: AtomicU64::new(0),
            closed,
        }))
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst) || self.outgoing.is_closed()
    }

    /// Routes every message from now on to the returned inbox, until `end_run`.
    pub fn start_run(&self) -> mpsc::UnboundedReceiver<KernelMsg> {
        let (tx, rx) = mpsc::unbounded_channel();
        if !self.is_closed() {
            *self.route.lock().unwrap() = Some(tx);
        }
        rx
    }

    pub fn end_run(&self) {
        self.route.lock().unwrap().take();
    }

    /// Sends a shell request; returns its msg_id (`<session>-<n>`, as execd numbers them).
    pub fn send_shell(&self, msg_type: &str, content: serde_json::Value) -> Result<String, String> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let msg_id = format!("{}-{n}", self.session);
        let msg = json!({
            "header": {
                "msg_id": msg_id,
                "username": "go-client",
                "session": self.session,
                "date": crate::web::rfc3339_system(SystemTime::now()),
                "msg_type": msg_type,
                "version": "5.3",
            },
            "parent_header": {},
            "metadata": {},
            "content": content,
            "channel": "shell",
        });
        self.outgoing
            .send(Message::text(msg.to_string()))
            .map_err(|_| "failed to send execution request: websocket: close sent".to_string())?;
        Ok(msg_id)
    }

    /// execd's `execute_request` content.
    pub fn send_execute(&self, code: &str) -> Result<String, String> {
        self.send_shell(
            "execute_request",
            json!({
                "code": code,
                "silent": false,
                "store_history": true,
                "user_expressions": {},
                "allow_stdin": false,
                "stop_on_error": true,
            }),
        )
    }
}

/// The TCP connection to Jupyter with delayed ACKs off. jupyter_server (tornado) writes
/// each kernel message as its own small segment without TCP_NODELAY, so Nagle holds the
/// next one until ours is ACKed: a delayed ACK (40 ms) per run when runs follow each other.
/// Linux clears TCP_QUICKACK by itself, so it is set again after every read.
struct QuickAck(TcpStream);

impl QuickAck {
    fn ack_quickly(&self) {
        let one: libc::c_int = 1;
        // SAFETY: setsockopt on our own open socket with a valid int option value.
        unsafe {
            libc::setsockopt(
                self.0.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_QUICKACK,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

impl AsyncRead for QuickAck {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.0).poll_read(cx, buf);
        if r.is_ready() {
            this.ack_quickly();
        }
        r
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}
