//! A fault-injecting HTTP/1.1 proxy between `epp-host` and the testbed, on
//! loopback only.
//!
//! It listens on `127.0.0.1:0` and forwards each connection to the testbed,
//! one request per connection (it adds `Connection: close` both ways, so no
//! connection is ever reused and every request passes the rules afresh).
//! WebSocket upgrades are piped through untouched. Rules pick requests by
//! method and a substring of the path and say what goes wrong, a number of
//! times. The proxy can also go down (its port refuses connections) and come
//! back on the same port.
//!
//! Point a host at it with `HostBuilder::via(&proxy)`. In direct mode only the
//! lifecycle API passes it (sandbox endpoints are `127.0.0.1:<execd port>`);
//! in server-proxy mode every request does, execd's included.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
                    std::thread::spawn(move || handle(&shared, conn));
                }
            })
            .expect("spawning the fault proxy");
        *self.acceptor.lock().unwrap() = Some(Acceptor { stop, thread });
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.down();
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

fn handle(shared: &Shared, mut client: TcpStream) {
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
        method,
        path,
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
                Ok(0) | Err(_) => return false,
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
    if client.write_all(&head).is_err() {
        reset(&upstream);
        return;
    }
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
