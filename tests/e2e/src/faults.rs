//! A fault-injecting HTTP/1.1 proxy between `epp-host` and the testbed, on
//! loopback only.
//!
//! It listens on `127.0.0.1:0` and forwards each connection to the testbed,
//! one request per connection (it adds `Connection: close` both ways, so no
//! connection is ever reused and every request passes the rules afresh).
//! WebSocket upgrades are piped through untouched. Rules pick requests by
//! method and a substring of the path and say what goes wrong, a number of
//! times. The proxy can also go down (its port refuses connections) and come
//! back on the same port, and it can hold an answer the testbed gave until the
//! test lets it go ([`Fault::Hold`]).
//!
//! Point a host at it with `HostBuilder::via(&proxy)`. In direct mode only the
//! lifecycle API passes it (sandbox endpoints are `127.0.0.1:<execd port>`);
//! in server-proxy mode every request does, execd's included.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What goes wrong with a matching request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer this status at once (JSON error body), without the testbed.
    Status(u16),
    /// Answer this status and raw body at once (e.g. malformed JSON).
    Body(u16, String),
    /// Reset the connection (RST) before any answer, without the testbed.
    Reset,
    /// Say nothing for this long, then close without an answer.
    Stall(Duration),
    /// Forward; after the answer's head and this many body bytes, reset both
    /// connections (RST).
    ResetAfter(usize),
    /// Forward; after the answer's head and this many body bytes, close the
    /// client's connection cleanly (a truncated body).
    TruncateAnswer(usize),
    /// Forward the request's head and this many body bytes, then reset both
    /// connections (a truncated upload).
    TruncateRequest(usize),
    /// Forward the whole request, wait for the testbed's answer head, then reset
    /// the client's connection: the request was carried out, its answer lost.
    LoseAnswer,
    /// Forward the whole request, read the testbed's whole answer and hold it
    /// until the test lets it go ([`FaultProxy::release`]), or the client goes
    /// away first: the request was carried out, its answer is late.
    /// [`FaultProxy::wait_held`] waits until an answer is held.
    Hold,
    /// A WebSocket upgrade: forward the testbed's `101` head, then, instead of
    /// anything the testbed sends, a close frame with this code, as
    /// opensandbox-server's proxy sends when it gives up on a connection
    /// (1011): what came after the handshake is lost. Any other answer to the
    /// upgrade passes untouched.
    CloseFrame(u16),
}

/// An answer the proxy holds ([`Fault::Hold`]).
#[derive(Debug, Clone)]
pub struct Held {
    /// Which held answer this is (0 for the first the proxy held).
    pub n: usize,
    /// The request's method and path.
    pub method: String,
    pub path: String,
    /// The testbed's status code.
    pub status: u16,
    /// The testbed's whole answer body.
    pub body: Vec<u8>,
}

impl Held {
    /// The body as JSON (fails the test if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "the held answer to {} {} is not JSON ({e}): {}",
                self.method,
                self.path,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// How holding an answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEnd {
    /// Released, and written whole to the client.
    Delivered,
    /// The client closed its connection (or it broke) before the answer was written.
    ClientGone,
}

struct HoldSlot {
    held: Held,
    released: bool,
    end: Option<HoldEnd>,
}

impl HoldSlot {
    fn holding(&self) -> bool {
        !self.released && self.end.is_none()
    }
}

struct Rule {
    method: String,
    path: String,
    fault: Fault,
    left: usize,
}

/// One request the proxy saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// The request's header names, in lower case (values are not kept: they
    /// may be secrets).
    pub header_names: Vec<String>,
    pub fault: Option<Fault>,
    pub at: Instant,
}

struct Shared {
    upstream: SocketAddr,
    rules: Mutex<Vec<Rule>>,
    seen: Mutex<Vec<Seen>>,
    /// Every answer held so far; `holds_changed` is notified whenever one is
    /// held, released or ends, and whenever a client goes away.
    holds: Mutex<Vec<HoldSlot>>,
    holds_changed: Condvar,
    /// Both ends of each WebSocket being piped now, by a number of its own
    /// ([`FaultProxy::cut_websockets`]).
    upgraded: Mutex<Vec<(u64, TcpStream, TcpStream)>>,
    next_upgraded: std::sync::atomic::AtomicU64,
}

/// A WebSocket's place in [`Shared::upgraded`], given up when its piping ends
/// (the clones there would otherwise keep its sockets open).
struct Upgraded<'a> {
    shared: &'a Shared,
    n: u64,
}

impl Drop for Upgraded<'_> {
    fn drop(&mut self) {
        self.shared
            .upgraded
            .lock()
            .unwrap()
            .retain(|(n, _, _)| *n != self.n);
    }
}

impl Shared {
    /// Waits until `done` finds what it looks for in the held answers, or
    /// `timeout` passes (then `None`).
    fn wait_holds<T>(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&mut MutexGuard<'_, Vec<HoldSlot>>) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let mut holds = self.holds.lock().unwrap();
        loop {
            if let Some(found) = done(&mut holds) {
                return Some(found);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            holds = self.holds_changed.wait_timeout(holds, left).unwrap().0;
        }
    }
}

struct Acceptor {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

/// A running fault proxy.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Mutex<Option<Acceptor>>,
}

impl FaultProxy {
    /// A proxy in front of `upstream` (`http://127.0.0.1:PORT`), up and passing
    /// everything through.
    pub fn start(upstream: &str) -> FaultProxy {
        let upstream: SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("the testbed URL is http://IP:PORT");
        assert!(upstream.ip().is_loopback(), "loopback only: {upstream}");
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the fault proxy");
        let proxy = FaultProxy {
            addr: listener.local_addr().expect("local addr"),
            shared: Arc::new(Shared {
                upstream,
                rules: Mutex::new(Vec::new()),
                seen: Mutex::new(Vec::new()),
                holds: Mutex::new(Vec::new()),
                holds_changed: Condvar::new(),
                upgraded: Mutex::new(Vec::new()),
                next_upgraded: Default::default(),
            }),
            acceptor: Mutex::new(None),
        };
        proxy.serve(listener);
        proxy
    }

    /// A proxy in front of the shared testbed.
    pub fn testbed() -> FaultProxy {
        FaultProxy::start(&crate::testbed().url)
    }

    /// Breaks every WebSocket being piped now, both ways, without a close
    /// frame (a dropped connection): the client and the testbed each see
    /// their connection end.
    pub fn cut_websockets(&self) -> usize {
        let cut = std::mem::take(&mut *self.shared.upgraded.lock().unwrap());
        for (_, client, upstream) in &cut {
            let _ = client.shutdown(Shutdown::Both);
            let _ = upstream.shutdown(Shutdown::Both);
        }
        cut.len()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Applies `fault` to the next `times` requests whose method is `method`
    /// (`*` for any) and whose path contains `path`. Rules are tried in the
    /// order they were added.
    pub fn fault(&self, method: &str, path: &str, fault: Fault, times: usize) -> &Self {
        self.shared.rules.lock().unwrap().push(Rule {
            method: method.to_string(),
            path: path.to_string(),
            fault,
            left: times,
        });
        self
    }

    /// Removes every rule.
    pub fn heal(&self) {
        self.shared.rules.lock().unwrap().clear();
    }

    /// Requests seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// How many requests with `method` and a path containing `path` were seen.
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| (method == "*" || s.method == method) && s.path.contains(path))
            .count()
    }

    /// Waits until the proxy holds an answer ([`Fault::Hold`]): one read whole
    /// from the testbed, not released and not ended yet; returns the first such.
    /// Fails the test after `timeout`.
    pub fn wait_held(&self, timeout: Duration) -> Held {
        self.shared
            .wait_holds(timeout, |holds| {
                holds.iter().find(|h| h.holding()).map(|h| h.held.clone())
            })
            .unwrap_or_else(|| {
                panic!(
                    "the fault proxy held no answer within {timeout:?}; requests seen: {:?}",
                    self.seen()
                )
            })
    }

    /// Lets every answer held now go to its client (an answer whose client
    /// went away is dropped). Returns how many were still held.
    pub fn release(&self) -> usize {
        let mut holds = self.shared.holds.lock().unwrap();
        let mut n = 0;
        for slot in holds.iter_mut().filter(|h| h.holding()) {
            slot.released = true;
            n += 1;
        }
        self.shared.holds_changed.notify_all();
        n
    }

    /// Waits until holding answer `n` ended; fails the test after `timeout`.
    pub fn wait_hold_end(&self, n: usize, timeout: Duration) -> HoldEnd {
        self.shared
            .wait_holds(timeout, |holds| holds.get(n).and_then(|h| h.end))
            .unwrap_or_else(|| panic!("held answer {n} did not end within {timeout:?}"))
    }

    /// Stops listening: connections to the port are refused until [`up`].
    ///
    /// [`up`]: FaultProxy::up
    pub fn down(&self) {
        if let Some(acceptor) = self.acceptor.lock().unwrap().take() {
            acceptor.stop.store(true, Ordering::SeqCst);
            // Wake the blocked accept; it sees the flag and drops the listener.
            let _ = TcpStream::connect(self.addr);
            let _ = acceptor.thread.join();
        }
    }

    /// Listens again on the same port.
    pub fn up(&self) {
        if self.acceptor.lock().unwrap().is_some() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(self.addr) {
                Ok(l) => break l,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("rebinding the fault proxy on {}: {e}", self.addr),
            }
        };
        self.serve(listener);
    }

    fn serve(&self, listener: TcpListener) {
        let stop = Arc::new(AtomicBool::new(false));
        let shared = self.shared.clone();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if flag.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let shared = shared.clone();
                    std::thread::spawn(move || handle(shared, conn));
                }
            })
            .expect("spawning the fault proxy");
        *self.acceptor.lock().unwrap() = Some(Acceptor { stop, thread });
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.down();
        // No connection thread waits for a test that is gone.
        self.release();
    }
}

/// Reads until the end of an HTTP head; returns (head, bytes after it).
fn read_head(conn: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            let rest = buf.split_off(i + 4);
            return Some((buf, rest));
        }
        if buf.len() > 256 * 1024 {
            return None;
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The head with its `Connection` header replaced by `Connection: close`,
/// unless it is a protocol upgrade.
fn close_after(head: &[u8]) -> (Vec<u8>, bool) {
    let text = String::from_utf8_lossy(head);
    let mut lines: Vec<&str> = text.trim_end_matches("\r\n").split("\r\n").collect();
    let upgrade = lines
        .iter()
        .skip(1)
        .any(|l| l.to_ascii_lowercase().starts_with("upgrade:"));
    if upgrade {
        return (head.to_vec(), true);
    }
    lines.retain(|l| !l.to_ascii_lowercase().starts_with("connection:"));
    let mut out = lines.join("\r\n");
    out.push_str("\r\nConnection: close\r\n\r\n");
    (out.into_bytes(), false)
}

/// Closes with RST instead of FIN.
fn reset(conn: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own, with a pointer to a live local.
    unsafe {
        libc::setsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    let _ = conn.shutdown(Shutdown::Both);
}

/// Answers `status` with `body`, then closes after the client is done sending.
fn answer(mut conn: TcpStream, status: u16, body: &str) {
    let head = format!(
        "HTTP/1.1 {status} Injected\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(body.as_bytes());
    let _ = conn.flush();
    linger_close(conn);
}

/// Half-closes, reads what the client still sends (up to 2 s), then closes: no
/// RST from unread request bytes overtakes the answer.
fn linger_close(mut conn: TcpStream) {
    let _ = conn.shutdown(Shutdown::Write);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let mut sink = [0u8; 8192];
    while let Ok(n) = conn.read(&mut sink) {
        if n == 0 {
            break;
        }
    }
}

/// Reads the rest of an answer whose head is `head` and whose first body bytes
/// are `body`: `content-length` bytes, or up to the end of the connection.
fn read_body(upstream: &mut TcpStream, head: &[u8], mut body: Vec<u8>) -> Option<Vec<u8>> {
    let length = String::from_utf8_lossy(head).split("\r\n").find_map(|h| {
        let (name, value) = h.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    let mut chunk = [0u8; 64 * 1024];
    while length.is_none_or(|n| body.len() < n) {
        match upstream.read(&mut chunk) {
            Ok(0) if length.is_none() => break,
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    Some(body)
}

/// The status code of an answer head (0 when it has none).
fn status_of(head: &[u8]) -> u16 {
    String::from_utf8_lossy(head)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Holds `head` + `body` (the testbed's whole answer) until the test releases
/// it or `gone` says the client went away; then writes it, unless the client
/// is gone, and records how it ended.
fn hold(
    shared: &Shared,
    client: &mut TcpStream,
    gone: &AtomicBool,
    held: Held,
    head: &[u8],
) -> HoldEnd {
    let body = held.body.clone();
    let mut holds = shared.holds.lock().unwrap();
    let n = holds.len();
    holds.push(HoldSlot {
        held: Held { n, ..held },
        released: false,
        end: None,
    });
    shared.holds_changed.notify_all();
    // `gone` is set under this lock, so no wake-up is missed.
    while !holds[n].released && !gone.load(Ordering::SeqCst) {
        holds = shared.holds_changed.wait(holds).unwrap();
    }
    let released = holds[n].released;
    drop(holds);
    let end = if released
        && !gone.load(Ordering::SeqCst)
        && client.write_all(head).is_ok()
        && client.write_all(&body).is_ok()
        && client.flush().is_ok()
    {
        HoldEnd::Delivered
    } else {
        HoldEnd::ClientGone
    };
    shared.holds.lock().unwrap()[n].end = Some(end);
    shared.holds_changed.notify_all();
    end
}

fn handle(shared: Arc<Shared>, mut client: TcpStream) {
    let _ = client.set_nodelay(true);
    let Some((head, rest)) = read_head(&mut client) else {
        return;
    };
    let line =
        String::from_utf8_lossy(&head[..find(&head, b"\r\n").unwrap_or(head.len())]).into_owned();
    let mut words = line.split_whitespace();
    let method = words.next().unwrap_or("").to_string();
    let path = words.next().unwrap_or("").to_string();
    let fault = {
        let mut rules = shared.rules.lock().unwrap();
        rules
            .iter_mut()
            .find(|r| {
                r.left > 0 && (r.method == "*" || r.method == method) && path.contains(&r.path)
            })
            .map(|r| {
                r.left -= 1;
                r.fault.clone()
            })
    };
    let header_names = String::from_utf8_lossy(&head)
        .split("\r\n")
        .skip(1)
        .filter_map(|h| {
            h.split_once(':')
                .map(|(name, _)| name.trim().to_ascii_lowercase())
        })
        .collect();
    shared.seen.lock().unwrap().push(Seen {
        method: method.clone(),
        path: path.clone(),
        header_names,
        fault: fault.clone(),
        at: Instant::now(),
    });
    match &fault {
        Some(Fault::Status(code)) => {
            let body = format!(
                r#"{{"code":"FAULT::INJECTED","message":"HTTP {code} injected by the fault proxy"}}"#
            );
            return answer(client, *code, &body);
        }
        Some(Fault::Body(code, body)) => return answer(client, *code, body),
        Some(Fault::Reset) => return reset(&client),
        Some(Fault::Stall(d)) => {
            std::thread::sleep(*d);
            return reset(&client);
        }
        _ => {}
    }
    let Ok(mut upstream) = TcpStream::connect(shared.upstream) else {
        return reset(&client);
    };
    let _ = upstream.set_nodelay(true);
    let (head, upgrade) = close_after(&head);
    if upstream.write_all(&head).is_err() {
        return reset(&client);
    }

    // Request body: client → testbed, in its own thread.
    let request_limit = match &fault {
        Some(Fault::TruncateRequest(n)) => Some(*n),
        _ => None,
    };
    let (Ok(mut from_client), Ok(mut to_upstream)) = (client.try_clone(), upstream.try_clone())
    else {
        return;
    };
    // Set when the client closes its side (or the connection breaks): then an
    // answer held for it has no one to go to.
    let gone = Arc::new(AtomicBool::new(false));
    let client_gone = {
        let (shared, gone) = (shared.clone(), gone.clone());
        move || {
            // Under the lock, so that a hold's wait cannot miss it.
            let _holds = shared.holds.lock().unwrap();
            gone.store(true, Ordering::SeqCst);
            shared.holds_changed.notify_all();
        }
    };
    let pump = std::thread::spawn(move || {
        let mut sent = 0usize;
        let mut pending = rest;
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            if !pending.is_empty() {
                let take = match request_limit {
                    Some(limit) => pending.len().min(limit - sent),
                    None => pending.len(),
                };
                if to_upstream.write_all(&pending[..take]).is_err() {
                    return false;
                }
                sent += take;
                if request_limit.is_some_and(|limit| sent >= limit) {
                    return true; // truncated here
                }
            }
            match from_client.read(&mut chunk) {
                Ok(0) | Err(_) => {
                    client_gone();
                    return false;
                }
                Ok(n) => pending = chunk[..n].to_vec(),
            }
        }
    });
    if request_limit.is_some() {
        // Wait until the limit is reached (or the client stopped), then cut both.
        let _ = pump.join();
        reset(&upstream);
        reset(&client);
        return;
    }

    // Answer: testbed → client.
    let Some((head, mut body)) = read_head(&mut upstream) else {
        reset(&client);
        return;
    };
    if fault == Some(Fault::LoseAnswer) {
        reset(&client);
        return;
    }
    let head = if upgrade { head } else { close_after(&head).0 };
    if fault == Some(Fault::Hold) {
        let Some(body) = read_body(&mut upstream, &head, body) else {
            reset(&client);
            return;
        };
        let held = Held {
            n: 0,
            method,
            path,
            status: status_of(&head),
            body,
        };
        hold(&shared, &mut client, &gone, held, &head);
        let _ = client.shutdown(Shutdown::Both);
        let _ = upstream.shutdown(Shutdown::Both);
        let _ = pump.join();
        return;
    }
    if client.write_all(&head).is_err() {
        reset(&upstream);
        return;
    }
    if let Some(Fault::CloseFrame(code)) = fault
        && status_of(&head) == 101
    {
        let [high, low] = code.to_be_bytes();
        let _ = client.write_all(&[0x88, 2, high, low]);
        // Only our side ends: the client answers the close and hangs up, and
        // nothing it sent is left unread (which would reset its connection
        // before it read the frame).
        let _ = client.shutdown(Shutdown::Write);
        let _ = pump.join();
        let _ = upstream.shutdown(Shutdown::Both);
        return;
    }
    let upgraded = upgrade && status_of(&head) == 101;
    let _upgraded = match (upgraded, client.try_clone(), upstream.try_clone()) {
        (true, Ok(to_client), Ok(to_upstream)) => {
            let n = shared.next_upgraded.fetch_add(1, Ordering::SeqCst);
            let mut upgraded = shared.upgraded.lock().unwrap();
            upgraded.push((n, to_client, to_upstream));
            Some(Upgraded { shared: &shared, n })
        }
        _ => None,
    };
    let cut = match &fault {
        Some(Fault::ResetAfter(n)) | Some(Fault::TruncateAnswer(n)) => Some(*n),
        _ => None,
    };
    let mut forwarded = 0usize;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if !body.is_empty() {
            let take = cut.map_or(body.len(), |c| body.len().min(c - forwarded));
            if client.write_all(&body[..take]).is_err() {
                break;
            }
            forwarded += take;
            if cut.is_some_and(|c| forwarded >= c) {
                let _ = client.flush();
                if let Some(Fault::ResetAfter(_)) = fault {
                    reset(&client);
                } else {
                    // A clean end of the connection in the middle of the body.
                    std::thread::sleep(Duration::from_millis(50));
                    let _ = client.shutdown(Shutdown::Both);
                }
                reset(&upstream);
                return;
            }
        }
        match upstream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => body = chunk[..n].to_vec(),
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = upstream.shutdown(Shutdown::Both);
    let _ = pump.join();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    const BODY: &str = r#"{"id":"sb-1","status":{"state":"Pending"}}"#;
    const PATIENCE: Duration = Duration::from_secs(10);

    /// A server on loopback that reads each request whole, sends its head to
    /// the receiver, and answers 201 with [`BODY`].
    fn upstream() -> (String, mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let Some((head, rest)) = read_head(&mut conn) else {
                    continue;
                };
                let has_body = String::from_utf8_lossy(&head)
                    .to_ascii_lowercase()
                    .contains("content-length:");
                if has_body && read_body(&mut conn, &head, rest).is_none() {
                    continue;
                }
                let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
                let answer = format!(
                    "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{BODY}",
                    BODY.len()
                );
                let _ = conn.write_all(answer.as_bytes());
                linger_close(conn);
            }
        });
        (url, rx)
    }

    /// A client connection through `proxy` that has sent `POST /v1/sandboxes`.
    fn post(proxy: &FaultProxy) -> TcpStream {
        let mut conn = TcpStream::connect(proxy.addr).unwrap();
        conn.write_all(
            b"POST /v1/sandboxes HTTP/1.1\r\nhost: testbed\r\ncontent-length: 2\r\n\r\n{}",
        )
        .unwrap();
        conn
    }

    fn answer_of(mut conn: TcpStream) -> String {
        conn.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut answer = Vec::new();
        conn.read_to_end(&mut answer).unwrap();
        String::from_utf8(answer).unwrap()
    }

    #[test]
    fn a_held_answer_waits_for_its_release() {
        let (url, requests) = upstream();
        let proxy = FaultProxy::start(&url);
        proxy.fault("POST", "/v1/sandboxes", Fault::Hold, 1);
        let conn = post(&proxy);

        let held = proxy.wait_held(PATIENCE);
        assert_eq!(
            (held.method.as_str(), held.path.as_str()),
            ("POST", "/v1/sandboxes")
        );
        assert_eq!(held.status, 201);
        assert_eq!(held.json()["id"], "sb-1");
        // The testbed has carried the request out (its answer is whole)...
        let head = requests
            .try_recv()
            .expect("the request reached the testbed");
        assert!(head.starts_with("POST /v1/sandboxes "), "{head}");
        // ...and the client has nothing yet.
        conn.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let early = (&conn).read(&mut byte);
        assert!(
            early
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "the client got {early:?} before the release"
        );
        conn.set_nonblocking(false).unwrap();

        assert_eq!(proxy.release(), 1);
        let answer = answer_of(conn);
        assert!(answer.starts_with("HTTP/1.1 201 Created\r\n"), "{answer}");
        assert!(answer.contains("\r\nConnection: close\r\n"), "{answer}");
        assert!(answer.ends_with(&format!("\r\n\r\n{BODY}")), "{answer}");
        assert_eq!(proxy.wait_hold_end(held.n, PATIENCE), HoldEnd::Delivered);

        // The rule was for one request: the next passes at once.
        let answer = answer_of(post(&proxy));
        assert!(answer.ends_with(BODY), "{answer}");
        assert_eq!(proxy.release(), 0, "nothing else was held");
        assert_eq!(proxy.seen()[0].fault, Some(Fault::Hold));
        assert_eq!(proxy.seen()[1].fault, None);
    }

    #[test]
    fn a_held_answer_whose_client_went_away_is_dropped() {
        let (url, _requests) = upstream();
        let proxy = FaultProxy::start(&url);
        proxy.fault("POST", "/v1/sandboxes", Fault::Hold, 2);
        let first = post(&proxy);
        let held = proxy.wait_held(PATIENCE);
        drop(first);
        assert_eq!(proxy.wait_hold_end(held.n, PATIENCE), HoldEnd::ClientGone);
        assert_eq!(proxy.release(), 0, "an answer without a client is not held");

        // Another held answer is independent of the one that ended.
        let second = post(&proxy);
        let again = proxy.wait_held(PATIENCE);
        assert_eq!(again.n, held.n + 1);
        assert_eq!(proxy.release(), 1);
        assert!(answer_of(second).ends_with(BODY));
        assert_eq!(proxy.wait_hold_end(again.n, PATIENCE), HoldEnd::Delivered);
    }

    #[test]
    #[should_panic(expected = "held no answer")]
    fn waiting_for_a_hold_that_never_comes_fails() {
        let (url, _requests) = upstream();
        let proxy = FaultProxy::start(&url);
        proxy.wait_held(Duration::from_millis(50));
    }
}
