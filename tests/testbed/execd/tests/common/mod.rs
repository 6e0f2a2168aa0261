//! Shared helpers: start the real `execd-standin` binary on a loopback port in a temporary
//! sandbox directory, and talk to it over plain HTTP/1.1 and WebSocket.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

pub const T: Duration = Duration::from_secs(20);

pub struct Execd {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Execd {
    pub fn start() -> Self {
        Self::start_with(&[], &[])
    }

    /// Starts the binary with extra arguments and environment; the sandbox directory is
    /// its working directory and `HOME` is `<dir>/home`.
    pub fn start_with(args: &[&str], envs: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let port_file = dir.path().join("port");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_execd-standin"));
        cmd.args(["--listen", "127.0.0.1:0", "--port-file"])
            .arg(&port_file)
            .args(args)
            .current_dir(dir.path())
            .env("HOME", &home)
            .env_remove("EXECD_ACCESS_TOKEN")
            .env_remove("EXECD_ENVS")
            .env_remove("JUPYTER_HOST")
            .env_remove("JUPYTER_TOKEN");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn execd-standin");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Ok(s) = std::fs::read_to_string(&port_file)
                && let Ok(p) = s.trim().parse()
            {
                break p;
            }
            assert!(Instant::now() < deadline, "execd-standin did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Execd { child, port, dir }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "execd-standin ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Execd {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    }
}

/// Sends one request on a fresh connection and returns the streaming response.
pub async fn send<B>(port: u16, req: Request<B>) -> Response<Incoming>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    tokio::time::timeout(T, sender.send_request(req))
        .await
        .expect("response in time")
        .expect("response")
}

pub async fn collect(resp: Response<Incoming>) -> Reply {
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(T, body.collect())
        .await
        .expect("body in time")
        .expect("body")
        .to_bytes()
        .to_vec();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

pub fn req(method: &str, path: &str, body: impl Into<Bytes>) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1")
        .body(Full::new(body.into()))
        .unwrap()
}

pub async fn call(port: u16, method: &str, path: &str, body: impl Into<Bytes>) -> Reply {
    collect(send(port, req(method, path, body)).await).await
}

pub async fn get(port: u16, path: &str) -> Reply {
    call(port, "GET", path, Bytes::new()).await
}

pub async fn post_json(port: u16, path: &str, v: Value) -> Reply {
    call(port, "POST", path, serde_json::to_vec(&v).unwrap()).await
}

/// Splits an execd event stream the way the SDKs do (blank-line separated JSON).
pub fn parse_events(raw: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(raw)
        .split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .map(|f| serde_json::from_str(f.trim()).unwrap_or_else(|e| panic!("bad frame {f:?}: {e}")))
        .collect()
}

/// Runs `POST /command` to completion; returns the raw body and the parsed events.
pub async fn run(port: u16, body: Value) -> (Reply, Vec<Value>) {
    let r = post_json(port, "/command", body).await;
    let events = if r.status == StatusCode::OK {
        parse_events(&r.body)
    } else {
        vec![]
    };
    (r, events)
}

pub fn texts(events: &[Value], kind: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .map(|e| e["text"].as_str().unwrap_or("").to_string())
        .collect()
}

pub fn last(events: &[Value]) -> &Value {
    events.last().expect("at least one event")
}

/// Deterministic pseudo-random bytes.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

pub const BOUNDARY: &str = "XyZ0123boundary";

/// One multipart metadata+file pair exactly as the Python SDK builds it.
pub fn multipart_pair(meta: &Value, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\nContent-Type: application/json\r\n\r\n{meta}\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"file\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    b.extend_from_slice(data);
    b.extend_from_slice(b"\r\n");
    b
}

pub fn multipart_end() -> &'static [u8] {
    b"--XyZ0123boundary--\r\n"
}

pub fn upload_request(body: Vec<u8>) -> Request<Full<Bytes>> {
    Request::builder()
        .method("POST")
        .uri("/files/upload")
        .header("host", "127.0.0.1")
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// Polls `f` until it returns true (bounded).
pub async fn eventually(mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !f().await {
        assert!(Instant::now() < deadline, "condition not met in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
