//! Interactive shells over WebSocket (execd's `pty_controller.go`, `pty_ws.go`,
//! `pty_session.go`, `replay_buffer.go`).
//!
//! A session is created by `POST /pty`; its shell (`bash --norc --noprofile [-c cmd]`) starts
//! on the first WebSocket attach, on a real pseudo-terminal (80x24) or, with `?pty=0`,
//! on plain pipes. Output goes to a 1 MiB replay ring and to the one attached client.
//! Closing the socket only detaches; the shell keeps running until it exits or the
//! session is deleted.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStdin, Command};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, sleep, timeout};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

use crate::paths;
use crate::sys;
use crate::web::{self as h, CONTEXT_NOT_FOUND, INVALID_REQUEST, Query, RUNTIME_ERROR, Resp};

const REPLAY_SIZE: usize = 1 << 20;
const CHUNK: usize = 32 * 1024;
const PING_INTERVAL: Duration = Duration::from_secs(30);
const READ_DEADLINE: Duration = Duration::from_secs(60);
const WRITE_DEADLINE: Duration = Duration::from_secs(10);
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to keep draining output after the shell exited (descendants may still hold
/// the terminal open).
const DRAIN_TIMEOUT: Duration = Duration::from_millis(500);

/// Fixed-size ring with a monotonic byte counter (`replayBuffer`).
#[derive(Default)]
struct Replay {
    buf: VecDeque<u8>,
    total: i64,
}

impl Replay {
    fn write(&mut self, p: &[u8]) {
        self.total += p.len() as i64;
        let p = &p[p.len().saturating_sub(REPLAY_SIZE)..];
        let overflow = (self.buf.len() + p.len()).saturating_sub(REPLAY_SIZE);
        self.buf.drain(..overflow);
        self.buf.extend(p);
    }

    /// Bytes from absolute `offset` on (clamped to the oldest retained byte) and the
    /// offset of the first returned byte.
    fn read_from(&self, offset: i64) -> (Vec<u8>, i64) {
        if offset >= self.total {
            return (Vec::new(), self.total);
        }
        let oldest = self.total - self.buf.len() as i64;
        let offset = offset.max(oldest);
        let skip = (offset - oldest) as usize;
        (self.buf.iter().skip(skip).copied().collect(), offset)
    }
}

enum Stdin {
    Pty(Arc<AsyncFd<OwnedFd>>),
    Pipe(Arc<tokio::sync::Mutex<ChildStdin>>),
}

struct Proc {
    pid: i32,
    stdin: Stdin,
    master: Option<Arc<AsyncFd<OwnedFd>>>,
}

/// Output for the attached client: (is_stderr, bytes).
type Chunk = (bool, Bytes);

/// What a newly attached client gets: missed output, its live feed and the exit signal.
struct Attachment {
    replay: Vec<u8>,
    /// Absolute offset of `replay[0]`.
    offset: i64,
    output: mpsc::UnboundedReceiver<Chunk>,
    exit: Option<watch::Receiver<Option<i32>>>,
}

#[derive(Default)]
struct SessionState {
    closing: bool,
    proc: Option<Proc>,
    /// Exit signal of the most recent shell; kept after it exits so a client attaching
    /// late still gets the exit frame (execd's `Done()` channel).
    exit: Option<watch::Receiver<Option<i32>>>,
    is_pty: bool,
    replay: Replay,
    /// The attached client's output channel, tagged with its attach generation.
    sink: Option<(u64, mpsc::UnboundedSender<Chunk>)>,
    /// The WebSocket lock holder and its eviction trigger (for `?takeover=1`).
    holder: Option<(u64, Option<oneshot::Sender<()>>)>,
    generation: u64,
}

pub struct Session {
    id: String,
    cwd: String,
    command: String,
    st: Mutex<SessionState>,
}

impl Session {
    fn lock(&self) -> std::sync::MutexGuard<'_, SessionState> {
        self.st.lock().unwrap()
    }

    fn try_lock_ws(&self) -> Option<u64> {
        let mut st = self.lock();
        if st.holder.is_some() {
            return None;
        }
        st.generation += 1;
        let g = st.generation;
        st.holder = Some((g, None));
        Some(g)
    }

    fn unlock_ws(&self, g: u64) {
        let mut st = self.lock();
        if st.holder.as_ref().is_some_and(|(hg, _)| *hg == g) {
            st.holder = None;
        }
    }

    fn set_evict(&self, g: u64, tx: oneshot::Sender<()>) {
        if let Some((hg, evict)) = self.lock().holder.as_mut()
            && *hg == g
        {
            *evict = Some(tx);
        }
    }

    /// Evicts the current holder until the lock is ours (`TakeoverWS`).
    async fn takeover_ws(&self) -> Option<u64> {
        let deadline = Instant::now() + TAKEOVER_TIMEOUT;
        loop {
            if let Some(g) = self.try_lock_ws() {
                return Some(g);
            }
            let evict = self.lock().holder.as_mut().and_then(|(_, e)| e.take());
            if let Some(tx) = evict {
                let _ = tx.send(());
            }
            if Instant::now() > deadline {
                return self.try_lock_ws();
            }
            sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn running(&self) -> bool {
        self.lock().proc.is_some()
    }

    fn output(&self, data: &[u8], stderr: bool) {
        let mut st = self.lock();
        st.replay.write(data);
        if let Some((_, tx)) = &st.sink {
            let _ = tx.send((stderr, Bytes::copy_from_slice(data)));
        }
    }

    /// Snapshot of the replay from `since` and a fresh output channel, atomically, so no
    /// byte is lost or duplicated between replay and live output.
    fn attach(&self, g: u64, since: i64) -> Attachment {
        let mut st = self.lock();
        let (replay, offset) = st.replay.read_from(since);
        let (tx, output) = mpsc::unbounded_channel();
        st.sink = Some((g, tx));
        let exit = st.exit.clone();
        Attachment {
            replay,
            offset,
            output,
            exit,
        }
    }

    fn detach(&self, g: u64) {
        let mut st = self.lock();
        if st.sink.as_ref().is_some_and(|(sg, _)| *sg == g) {
            st.sink = None;
        }
    }

    async fn write_stdin(&self, data: &[u8]) -> std::io::Result<()> {
        let stdin = match &self.lock().proc {
            Some(Proc {
                stdin: Stdin::Pty(fd),
                ..
            }) => Stdin::Pty(fd.clone()),
            Some(Proc {
                stdin: Stdin::Pipe(p),
                ..
            }) => Stdin::Pipe(p.clone()),
            None => return Err(std::io::Error::other("session not started")),
        };
        match stdin {
            Stdin::Pty(fd) => {
                let mut rest = data;
                while !rest.is_empty() {
                    let mut guard = fd.writable().await?;
                    match guard.try_io(|fd| sys::write_fd(fd.as_raw_fd(), rest)) {
                        Ok(Ok(n)) => rest = &rest[n..],
                        Ok(Err(e)) => return Err(e),
                        Err(_would_block) => continue,
                    }
                }
                Ok(())
            }
            Stdin::Pipe(p) => p.lock().await.write_all(data).await,
        }
    }

    /// Only SIGINT, SIGTERM, SIGKILL, SIGQUIT and SIGHUP; others are ignored.
    fn signal(&self, name: &str) {
        let sig = match name {
            "SIGINT" => libc::SIGINT,
            "SIGTERM" => libc::SIGTERM,
            "SIGKILL" => libc::SIGKILL,
            "SIGQUIT" => libc::SIGQUIT,
            "SIGHUP" => libc::SIGHUP,
            _ => return,
        };
        if let Some(p) = &self.lock().proc {
            let _ = sys::kill_group(p.pid, sig);
        }
    }

    fn resize(&self, cols: u16, rows: u16) {
        if let Some(Proc {
            master: Some(m), ..
        }) = &self.lock().proc
        {
            let _ = sys::set_winsize(m.as_raw_fd(), cols, rows);
        }
    }

    /// Starts the shell (PTY or pipe mode). Called with the WebSocket lock held.
    fn start(self: &Arc<Self>, pipe: bool) -> Result<(), String> {
        let mut st = self.lock();
        if st.proc.is_some() {
            return Err("pty session already started".into());
        }
        if st.closing {
            return Err("pty session is closing".into());
        }
        let mut cmd = Command::new("bash");
        cmd.args(["--norc", "--noprofile"]);
        if !self.command.is_empty() {
            cmd.arg("-c").arg(&self.command);
        }
        // The stand-in's own environment only (no EXECD_ENVS, no per-request env).
        if !self.cwd.is_empty() {
            cmd.current_dir(&self.cwd);
        }
        cmd.kill_on_drop(false);
        let (exit_tx, exit_rx) = watch::channel(None);
        let mut readers = Vec::new();
        let proc = if pipe {
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0);
            let mut child = cmd.spawn().map_err(|e| format!("cmd.Start: {e}"))?;
            let stdin = child.stdin.take().expect("piped");
            let out = child.stdout.take().expect("piped");
            let err = child.stderr.take().expect("piped");
            let pid = child.id().unwrap_or(0) as i32;
            readers.push(self.spawn_pipe_reader(out, false));
            readers.push(self.spawn_pipe_reader(err, true));
            self.spawn_waiter(child, readers, exit_tx);
            Proc {
                pid,
                stdin: Stdin::Pipe(Arc::new(tokio::sync::Mutex::new(stdin))),
                master: None,
            }
        } else {
            let (master, slave) =
                sys::open_pty(80, 24).map_err(|e| format!("pty.StartWithSize: {e}"))?;
            let dup = |fd: &OwnedFd| {
                fd.try_clone()
                    .map_err(|e| format!("pty.StartWithSize: {e}"))
            };
            cmd.stdin(Stdio::from(dup(&slave)?))
                .stdout(Stdio::from(dup(&slave)?))
                .stderr(Stdio::from(slave));
            // SAFETY: setsid/ioctl are async-signal-safe.
            unsafe {
                cmd.pre_exec(sys::become_tty_session_leader);
            }
            let child = cmd.spawn().map_err(|e| format!("pty.StartWithSize: {e}"))?;
            // Drop our copies of the slave side, or the master would never see EOF.
            drop(cmd);
            sys::set_nonblocking(master.as_raw_fd()).map_err(|e| e.to_string())?;
            // SAFETY: the OwnedFd is moved in, so the fd stays open and unchanged for the
            // AsyncFd's whole lifetime.
            let master = unsafe { AsyncFd::register(master) }.map_err(|e| e.to_string())?;
            let master = Arc::new(master);
            let pid = child.id().unwrap_or(0) as i32;
            readers.push(self.spawn_pty_reader(master.clone()));
            self.spawn_waiter(child, readers, exit_tx);
            Proc {
                pid,
                stdin: Stdin::Pty(master.clone()),
                master: Some(master),
            }
        };
        st.is_pty = !pipe;
        st.proc = Some(proc);
        st.exit = Some(exit_rx);
        Ok(())
    }

    fn spawn_pty_reader(
        self: &Arc<Self>,
        master: Arc<AsyncFd<OwnedFd>>,
    ) -> tokio::task::JoinHandle<()> {
        let s = self.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; CHUNK];
            loop {
                let Ok(mut guard) = master.readable().await else {
                    return;
                };
                match guard.try_io(|fd| sys::read_fd(fd.as_raw_fd(), &mut buf)) {
                    Ok(Ok(0)) | Ok(Err(_)) => return, // EIO once every slave fd is closed
                    Ok(Ok(n)) => s.output(&buf[..n], false),
                    Err(_would_block) => continue,
                }
            }
        })
    }

    fn spawn_pipe_reader(
        self: &Arc<Self>,
        mut r: impl tokio::io::AsyncRead + Unpin + Send + 'static,
        stderr: bool,
    ) -> tokio::task::JoinHandle<()> {
        let s = self.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; CHUNK];
            while let Ok(n) = r.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                s.output(&buf[..n], stderr);
            }
        })
    }

    fn spawn_waiter(
        self: &Arc<Self>,
        mut child: tokio::process::Child,
        readers: Vec<tokio::task::JoinHandle<()>>,
        exit_tx: watch::Sender<Option<i32>>,
    ) {
        let s = self.clone();
        tokio::spawn(async move {
            let code = match child.wait().await {
                Ok(st) => st.code().unwrap_or(-1),
                Err(_) => -1,
            };
            // Let the readers deliver what the shell wrote before it exited.
            for r in readers {
                let abort = r.abort_handle();
                if timeout(DRAIN_TIMEOUT, r).await.is_err() {
                    abort.abort();
                }
            }
            s.lock().proc = None; // closes the master / stdin pipe
            let _ = exit_tx.send(Some(code));
        });
    }

    /// `close()`: kill the process group and detach the client.
    fn close(&self) {
        let mut st = self.lock();
        st.closing = true;
        if let Some(p) = &st.proc {
            let _ = sys::kill_group(p.pid, libc::SIGKILL);
        }
        st.sink = None;
    }
}

#[derive(Default)]
pub struct Registry {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

impl Registry {
    fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions.lock().unwrap().get(id).cloned()
    }

    /// For shutdown: kill every shell.
    pub fn shutdown(&self) {
        for s in self.sessions.lock().unwrap().values() {
            s.close();
        }
    }
}

#[derive(Deserialize, Default)]
struct CreateRequest {
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    command: Option<String>,
}

#[derive(Serialize)]
struct CreateResponse<'a> {
    session_id: &'a str,
}

/// POST /pty — 201 `{"session_id"}`; the shell starts on first attach.
pub async fn create(reg: &Registry, req: Request<Incoming>) -> Resp {
    let body = match h::read_body(req.into_body()).await {
        Ok(b) => b,
        Err(e) => {
            return h::error(
                StatusCode::BAD_REQUEST,
                INVALID_REQUEST,
                format!("error parsing request: {e}"),
            );
        }
    };
    let r: CreateRequest = match h::decode_json(&body) {
        Ok(r) => r,
        Err(e) if e == "EOF" => CreateRequest::default(),
        Err(e) => {
            return h::error(
                StatusCode::BAD_REQUEST,
                INVALID_REQUEST,
                format!("error parsing request: {e}"),
            );
        }
    };
    let id = h::new_uuid(true);
    let created = (|| -> Result<String, String> {
        let cwd = paths::expand(r.cwd.as_deref().unwrap_or(""))
            .map_err(|e| format!("error resolving PTY session work directory: {e}"))?;
        if !cwd.is_empty() {
            crate::files::mkdir_all(&cwd)
                .map_err(|(m, _)| format!("error creating PTY session work directory: {m}"))?;
        }
        Ok(cwd)
    })();
    let ok_body = h::go_json(&CreateResponse { session_id: &id });
    match created {
        Ok(cwd) => {
            let s = Arc::new(Session {
                id: id.clone(),
                cwd,
                command: r.command.unwrap_or_default(),
                st: Mutex::new(SessionState::default()),
            });
            reg.sessions.lock().unwrap().insert(id.clone(), s);
            h::response(
                StatusCode::CREATED,
                Some("application/json; charset=utf-8"),
                h::full(ok_body),
            )
        }
        Err(msg) => {
            // execd writes the error and then, missing a `return`, the 201 JSON as well:
            // status 500 with both objects in the body. The session is not stored.
            let mut body = h::go_json(&h::ErrorBody {
                code: RUNTIME_ERROR,
                message: &format!("error creating pty session: {msg}"),
            });
            body.extend_from_slice(&ok_body);
            h::response(
                StatusCode::INTERNAL_SERVER_ERROR,
                Some("application/json; charset=utf-8"),
                h::full(body),
            )
        }
    }
}

fn not_found(id: &str) -> Resp {
    h::error(
        StatusCode::NOT_FOUND,
        CONTEXT_NOT_FOUND,
        format!("pty session {id} not found"),
    )
}

#[derive(Serialize)]
struct StatusResponse<'a> {
    session_id: &'a str,
    running: bool,
    output_offset: i64,
}

/// GET /pty/{id}
pub fn status(reg: &Registry, id: &str) -> Resp {
    let Some(s) = reg.get(id) else {
        return not_found(id);
    };
    let st = s.lock();
    h::json(
        StatusCode::OK,
        &StatusResponse {
            session_id: id,
            running: st.proc.is_some(),
            output_offset: st.replay.total,
        },
    )
}

/// DELETE /pty/{id}
pub fn delete(reg: &Registry, id: &str) -> Resp {
    let Some(s) = reg.sessions.lock().unwrap().remove(id) else {
        return not_found(id);
    };
    s.close();
    h::ok()
}

fn header_has_token(req: &Request<Incoming>, name: header::HeaderName, token: &str) -> bool {
    req.headers().get_all(name).iter().any(|v| {
        v.to_str()
            .is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

/// Checks the handshake like gorilla's Upgrader; returns the `Sec-WebSocket-Key`.
pub fn handshake_key(req: &Request<Incoming>) -> Result<String, &'static str> {
    if !header_has_token(req, header::CONNECTION, "upgrade") {
        return Err(
            "websocket: the client is not using the websocket protocol: 'upgrade' token not found in 'Connection' header",
        );
    }
    if !header_has_token(req, header::UPGRADE, "websocket") {
        return Err(
            "websocket: the client is not using the websocket protocol: 'websocket' token not found in 'Upgrade' header",
        );
    }
    if req.method() != http::Method::GET {
        return Err(
            "websocket: the client is not using the websocket protocol: request method is not GET",
        );
    }
    if !header_has_token(req, header::SEC_WEBSOCKET_VERSION, "13") {
        return Err(
            "websocket: unsupported version: 13 not found in 'Sec-Websocket-Version' header",
        );
    }
    match req
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
    {
        Some(k) if !k.trim().is_empty() => Ok(k.trim().to_string()),
        _ => Err(
            "websocket: not a websocket handshake: 'Sec-WebSocket-Key' header must be Base64 encoded value of 16-byte in length",
        ),
    }
}

pub fn switching_protocols(key: &str) -> Resp {
    let mut r = Response::new(h::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let hd = r.headers_mut();
    hd.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    hd.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        hd.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    r
}

/// Go's `fmt.Sscanf("%d")`: a leading decimal number, anything after it ignored.
fn leading_int(s: &str) -> Option<i64> {
    let t = s.trim_start();
    let end = t
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && (c == '+' || c == '-'))))
        .map_or(t.len(), |(i, _)| i);
    t[..end].parse().ok()
}

/// GET /pty/{id}/ws
pub fn websocket(reg: &Registry, mut req: Request<Incoming>, id: &str) -> Resp {
    let Some(sess) = reg.get(id) else {
        return not_found(id);
    };
    let q = Query::parse(req.uri().query());
    let locked = sess.try_lock_ws();
    let wants_takeover = locked.is_none()
        && q.get("takeover") == "1"
        && header_has_token(&req, header::CONNECTION, "upgrade")
        && header_has_token(&req, header::UPGRADE, "websocket");
    if locked.is_none() && !wants_takeover {
        return h::error(
            StatusCode::CONFLICT,
            "ALREADY_CONNECTED",
            format!("another client is already connected to pty session {id}"),
        );
    }
    let key = match handshake_key(&req) {
        Ok(k) => k,
        Err(msg) => {
            if let Some(g) = locked {
                sess.unlock_ws(g);
            }
            return h::text_error(StatusCode::BAD_REQUEST, msg);
        }
    };
    let pipe = q.get("pty") == "0";
    let since = leading_int(q.get("since")).unwrap_or(0);
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(up) => {
                let ws =
                    WebSocketStream::from_raw_socket(TokioIo::new(up), Role::Server, None).await;
                serve(sess, ws, locked, pipe, since).await;
            }
            Err(_) => {
                if let Some(g) = locked {
                    sess.unlock_ws(g);
                }
            }
        }
    });
    switching_protocols(&key)
}

/// Server → client text frame (`model.ServerFrame`).
#[derive(Serialize, Default)]
struct ServerFrame<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    session_id: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    mode: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "str::is_empty")]
    error: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    code: &'a str,
}

/// gorilla's `WriteJSON` goes through `json.Encoder`, which appends a newline.
fn text_frame(f: &ServerFrame) -> Message {
    let mut b = h::go_json(f);
    b.push(b'\n');
    Message::text(String::from_utf8(b).expect("json is utf-8"))
}

fn error_frame(code: &str, error: &str) -> Message {
    text_frame(&ServerFrame {
        kind: "error",
        code,
        error,
        ..Default::default()
    })
}

#[derive(Deserialize, Default)]
struct ClientFrame {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    data: String,
    #[serde(default)]
    cols: i64,
    #[serde(default)]
    rows: i64,
    #[serde(default)]
    signal: String,
}

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

fn close_msg(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: reason.to_string().into(),
    }))
}

/// Runs one attached client until it leaves, is taken over, or the shell exits.
async fn serve(sess: Arc<Session>, ws: Ws, locked: Option<u64>, pipe: bool, since: i64) {
    let (mut tx, mut rx) = ws.split();
    let g = match locked {
        Some(g) => g,
        None => match sess.takeover_ws().await {
            Some(g) => g,
            None => {
                let msg = format!("takeover timed out for pty session {}", sess.id);
                send(&mut tx, error_frame("ALREADY_CONNECTED", &msg)).await;
                let _ = tx.close().await;
                return;
            }
        },
    };
    if !sess.running()
        && let Err(e) = sess.start(pipe)
    {
        send(&mut tx, error_frame("START_FAILED", &e)).await;
        let _ = tx.close().await;
        sess.unlock_ws(g);
        return;
    }
    let (evict_tx, mut evict_rx) = oneshot::channel();
    sess.set_evict(g, evict_tx);
    let Attachment {
        replay,
        offset,
        output: mut out_rx,
        exit,
    } = sess.attach(g, since);

    'conn: {
        if !replay.is_empty() {
            let mut f = Vec::with_capacity(9 + replay.len());
            f.push(0x03);
            f.extend_from_slice(&(offset as u64).to_be_bytes());
            f.extend_from_slice(&replay);
            if !send(&mut tx, Message::binary(f)).await {
                break 'conn;
            }
        }
        let mode = if sess.lock().is_pty { "pty" } else { "pipe" };
        let connected = ServerFrame {
            kind: "connected",
            session_id: &sess.id,
            mode,
            ..Default::default()
        };
        if !send(&mut tx, text_frame(&connected)).await {
            break 'conn;
        }
        let mut exit = exit;
        let mut out_open = true;
        let mut ping = tokio::time::interval_at(Instant::now() + PING_INTERVAL, PING_INTERVAL);
        let mut last_seen = Instant::now();
        loop {
            let exited = async {
                match exit.as_mut() {
                    Some(rx) => {
                        let code = rx.wait_for(|v| v.is_some()).await.map(|v| *v);
                        match code {
                            Ok(c) => c,
                            Err(_) => std::future::pending().await,
                        }
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut evict_rx => {
                    let _ = timeout(Duration::from_millis(200), tx.send(close_msg(4001, "TAKEN_OVER"))).await;
                    break 'conn;
                }
                chunk = out_rx.recv(), if out_open => match chunk {
                    Some((stderr, data)) => {
                        if !send(&mut tx, output_frame(stderr, &data)).await {
                            break 'conn;
                        }
                    }
                    None => out_open = false,
                },
                code = exited => {
                    // Deliver output that is already queued before the exit frame.
                    while let Ok((stderr, data)) = out_rx.try_recv() {
                        if !send(&mut tx, output_frame(stderr, &data)).await {
                            break 'conn;
                        }
                    }
                    let f = ServerFrame { kind: "exit", exit_code: code, ..Default::default() };
                    send(&mut tx, text_frame(&f)).await;
                    send(&mut tx, close_msg(1000, "process exited")).await;
                    break 'conn;
                }
                msg = rx.next() => {
                    let Some(Ok(msg)) = msg else { break 'conn };
                    last_seen = Instant::now();
                    match msg {
                        Message::Binary(b) => {
                            if b.first() == Some(&0x00)
                                && let Err(e) = sess.write_stdin(&b[1..]).await
                            {
                                send(&mut tx, error_frame("STDIN_WRITE_FAILED", &e.to_string())).await;
                                break 'conn;
                            }
                        }
                        Message::Text(t) if !handle_text(&sess, t.as_bytes(), &mut tx).await => {
                            break 'conn;
                        }
                        Message::Close(_) => break 'conn,
                        _ => {} // pings are answered by tungstenite; pongs just count as activity
                    }
                }
                _ = ping.tick() => {
                    if !send(&mut tx, Message::Ping(Bytes::new())).await {
                        break 'conn;
                    }
                }
                _ = tokio::time::sleep_until(last_seen + READ_DEADLINE) => break 'conn,
            }
        }
    }
    // Flush any close frame (ours, or tungstenite's reply to the client's) before the
    // socket goes away.
    let _ = timeout(Duration::from_millis(200), tx.close()).await;
    sess.detach(g);
    sess.unlock_ws(g);
}

/// Binary output frame: 0x01 stdout / 0x02 stderr (pipe mode) + payload (≤ 32 KiB, as
/// read from the terminal).
fn output_frame(stderr: bool, data: &[u8]) -> Message {
    let mut f = Vec::with_capacity(1 + data.len());
    f.push(if stderr { 0x02 } else { 0x01 });
    f.extend_from_slice(data);
    Message::binary(f)
}

type WsTx = futures::stream::SplitSink<Ws, Message>;

/// Every write has a 10 s deadline; false means the client is gone.
async fn send(tx: &mut WsTx, m: Message) -> bool {
    matches!(timeout(WRITE_DEADLINE, tx.send(m)).await, Ok(Ok(())))
}

/// Handles a client text frame; returns false when the connection must end.
async fn handle_text(sess: &Session, raw: &[u8], tx: &mut WsTx) -> bool {
    // Malformed JSON is silently ignored, as in execd.
    let Ok(f) = serde_json::from_slice::<ClientFrame>(raw) else {
        return true;
    };
    match f.kind.as_str() {
        "stdin" => {
            if let Err(e) = sess.write_stdin(f.data.as_bytes()).await {
                send(tx, error_frame("STDIN_WRITE_FAILED", &e.to_string())).await;
                return false;
            }
        }
        "signal" => sess.signal(&f.signal),
        "resize" => {
            if f.cols > 0 && f.rows > 0 {
                sess.resize(f.cols as u16, f.rows as u16);
            }
        }
        "ping" => {
            send(
                tx,
                text_frame(&ServerFrame {
                    kind: "pong",
                    ..Default::default()
                }),
            )
            .await;
        }
        other => {
            let msg = format!(
                "unknown frame type {}",
                serde_json::to_string(other).unwrap_or_default()
            );
            send(tx, error_frame("INVALID_FRAME", &msg)).await;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_ring() {
        let mut r = Replay::default();
        r.write(b"hello");
        assert_eq!(r.read_from(0), (b"hello".to_vec(), 0));
        assert_eq!(r.read_from(3), (b"lo".to_vec(), 3));
        assert_eq!(r.read_from(9), (Vec::new(), 5));
        let big = vec![7u8; REPLAY_SIZE + 10];
        r.write(&big);
        let (b, off) = r.read_from(0);
        assert_eq!(b.len(), REPLAY_SIZE);
        assert_eq!(off, r.total - REPLAY_SIZE as i64);
    }

    #[test]
    fn since_parsing() {
        assert_eq!(leading_int("12abc"), Some(12));
        assert_eq!(leading_int("-3"), Some(-3));
        assert_eq!(leading_int("x"), None);
    }
}
