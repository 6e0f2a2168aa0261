//! execd-standin: a local stand-in for OpenSandbox's in-sandbox daemon `execd`, speaking
//! its HTTP API byte for byte where clients can tell (see README.md for the differences).
//! It runs commands on THIS machine as the current user: there is no isolation.
//!
//! Usage: execd-standin --listen 127.0.0.1:<port|0> [--port-file PATH] [--access-token TOKEN]

mod code;
mod code_events;
mod command;
mod files;
mod glob;
mod jupyter;
mod kernel_channel;
mod metrics;
mod paths;
mod proxy;
mod pty;
mod session;
mod sys;
mod upload;
mod web;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, StatusCode, Uri};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::web::{Query, Resp};

/// The port real execd listens on inside a sandbox. The testbed's endpoints look like
/// `127.0.0.1:<our port>/proxy/44772`, so requests for it are served in-process.
const EXECD_PORT: &str = "44772";
const TOKEN_HEADER: &str = "x-execd-access-token";

pub struct Config {
    access_token: Option<String>,
    /// `EXECD_STANDIN_LEGACY_LINES=1`: command output split like execd ≤ 1.1.0
    /// (line terminators dropped), for testing clients' fallbacks.
    legacy_lines: bool,
}

pub struct State {
    cfg: Config,
    commands: command::Registry,
    ptys: pty::Registry,
    sessions: Arc<session::Registry>,
    /// Code contexts, on the Jupyter server named by `JUPYTER_HOST`/`JUPYTER_TOKEN`.
    code: code::Registry,
}

struct Args {
    listen: SocketAddr,
    port_file: Option<String>,
    access_token: Option<String>,
}

fn usage(msg: &str) -> ! {
    eprintln!("execd-standin: {msg}");
    eprintln!(
        "usage: execd-standin --listen 127.0.0.1:<port|0> [--port-file PATH] [--access-token TOKEN]"
    );
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut listen = None;
    let mut port_file = None;
    let mut access_token = std::env::var("EXECD_ACCESS_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--listen" => {
                let v = value();
                listen = Some(
                    v.parse()
                        .unwrap_or_else(|_| usage(&format!("bad --listen address {v}"))),
                );
            }
            "--port-file" => port_file = Some(value()),
            "--access-token" => access_token = Some(value()).filter(|t| !t.is_empty()),
            "-h" | "--help" => usage("help"),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    Args {
        listen: listen.unwrap_or_else(|| usage("--listen is required")),
        port_file,
        access_token,
    }
}

/// Writes the port atomically (temp file + rename) so a launcher never reads half of it.
fn write_port_file(path: &str, port: u16) -> std::io::Result<()> {
    let tmp = format!("{path}.tmp.{}", std::process::id());
    std::fs::write(&tmp, format!("{port}\n"))?;
    std::fs::rename(&tmp, path)
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    let legacy_lines = match std::env::var("EXECD_STANDIN_LEGACY_LINES").as_deref() {
        Ok("1") => true,
        Ok("" | "0") | Err(_) => false,
        Ok(v) => usage(&format!(
            "EXECD_STANDIN_LEGACY_LINES must be 0 or 1, not {v}"
        )),
    };
    let listener = match TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("execd-standin: cannot listen on {}: {e}", args.listen);
            std::process::exit(1);
        }
    };
    let addr = listener.local_addr().expect("bound socket has an address");
    if let Some(pf) = &args.port_file
        && let Err(e) = write_port_file(pf, addr.port())
    {
        eprintln!("execd-standin: cannot write port file {pf}: {e}");
        std::process::exit(1);
    }
    eprintln!("execd-standin listening on {addr}");

    let state = Arc::new(State {
        cfg: Config {
            access_token: args.access_token,
            legacy_lines,
        },
        commands: command::Registry::default(),
        ptys: pty::Registry::default(),
        sessions: Arc::default(),
        code: code::Registry::from_env(),
    });

    let st = state.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        // Take every command and shell down with us.
        st.commands.shutdown();
        st.ptys.shutdown();
        st.sessions.shutdown();
        std::process::exit(0);
    });

    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(_) => {
                // e.g. EMFILE: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let st = state.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let st = st.clone();
                async move { Ok::<_, Infallible>(handle(st, req, peer).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades()
                .await;
        });
    }
}

/// Access-token check (it guards everything, `/ping` and `/proxy` included), then routing.
async fn handle(st: Arc<State>, req: Request<Incoming>, peer: SocketAddr) -> Resp {
    if let Some(token) = &st.cfg.access_token {
        let given = req.headers().get(TOKEN_HEADER).map(|v| v.as_bytes());
        if given != Some(token.as_bytes()) {
            return web::json(
                StatusCode::UNAUTHORIZED,
                &serde_json::json!({
                    "error": "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"
                }),
            );
        }
    }
    dispatch(st, req, peer).await
}

fn dispatch(
    st: Arc<State>,
    mut req: Request<Incoming>,
    peer: SocketAddr,
) -> Pin<Box<dyn Future<Output = Resp> + Send>> {
    Box::pin(async move {
        if let Some(rest) = req.uri().path().strip_prefix("/proxy/") {
            let (port, tail) = rest.split_once('/').unwrap_or((rest, ""));
            if port.is_empty() {
                return web::text_error(StatusCode::BAD_REQUEST, "port is required");
            }
            let path = format!("/{tail}");
            if port != EXECD_PORT {
                let port = port.to_string();
                return proxy::forward(req, &port, &path, peer).await;
            }
            let target = match req.uri().query() {
                Some(q) => format!("{path}?{q}"),
                None => path,
            };
            match target.parse::<Uri>() {
                Ok(uri) => *req.uri_mut() = uri,
                Err(_) => return web::text_error(StatusCode::BAD_REQUEST, "bad path"),
            }
            return dispatch(st, req, peer).await;
        }
        if matches!(*req.method(), Method::GET | Method::DELETE | Method::HEAD) {
            drain(req.body_mut()).await;
        }
        route(st, req).await
    })
}

/// Reads what a request that takes no body carries anyway, up to 256 KiB, as
/// Go's net/http does after a handler so the connection serves the next
/// request. hyper would close it instead when the body's end arrives after
/// the answer, and opensandbox-server's proxy sends DELETEs with a chunked
/// (empty) body: its pool could then reuse a connection being closed, and
/// answer 502 `BACKEND_RESPONSE_FAILED` ("Server disconnected without sending
/// a response") where the real execd answers.
async fn drain(body: &mut Incoming) {
    use http_body_util::BodyExt;
    let mut left: usize = 256 << 10;
    while let Some(Ok(frame)) = body.frame().await {
        let len = frame.data_ref().map_or(0, |d| d.len());
        if len >= left {
            return;
        }
        left -= len;
    }
}

/// execd's router (Gin answers unknown routes and wrong methods with a plain 404).
async fn route(st: Arc<State>, req: Request<Incoming>) -> Resp {
    let path = web::path_decode(req.uri().path());
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let q = Query::parse(req.uri().query());
    let m = req.method().clone();
    match (&m, segs.as_slice()) {
        (&Method::GET, ["ping"]) => web::ok(),

        (&Method::POST, ["command"]) => command::run(st, req).await,
        (&Method::DELETE, ["command"]) => command::interrupt(st, &q).await,
        (&Method::GET, ["command", "status", id]) => command::status(&st, id),
        (&Method::GET, ["command", id, "logs"]) => command::logs(&st, id, &q),

        (&Method::GET, ["files", "info"]) => files::info(&q),
        (&Method::DELETE, ["files"]) => files::remove_files(&q),
        (&Method::POST, ["files", "permissions"]) => files::chmod_files(req).await,
        (&Method::POST, ["files", "mv"]) => files::rename_files(req).await,
        (&Method::GET, ["files", "search"]) => files::search(&q),
        (&Method::POST, ["files", "replace"]) => files::replace(req).await,
        (&Method::POST, ["files", "upload"]) => upload::upload(req).await,
        (&Method::GET, ["files", "download"]) => files::download(&req),

        (&Method::GET, ["directories", "list"]) => files::list_directory(&q),
        (&Method::POST, ["directories"]) => files::make_dirs(req).await,
        (&Method::DELETE, ["directories"]) => files::remove_dirs(&q),

        (&Method::POST, ["pty"]) => pty::create(&st.ptys, req).await,
        (&Method::GET, ["pty", id]) => pty::status(&st.ptys, id),
        (&Method::DELETE, ["pty", id]) => pty::delete(&st.ptys, id),
        (&Method::GET, ["pty", id, "ws"]) => {
            let id = id.to_string();
            pty::websocket(&st.ptys, req, &id)
        }

        (&Method::GET, ["metrics"]) => metrics::get().await,
        (&Method::GET, ["metrics", "watch"]) => metrics::watch(),

        (&Method::POST, ["session"]) => session::create(&st.sessions, req).await,
        (&Method::POST, ["session", id, "run"]) => {
            let id = id.to_string();
            session::run(st.sessions.clone(), &id, req).await
        }
        (&Method::DELETE, ["session", id]) => session::delete(&st.sessions, id),

        (&Method::POST, ["code"]) => code::run(st, req).await,
        (&Method::DELETE, ["code"]) => code::interrupt(st, &q).await,
        (&Method::POST, ["code", "context"]) => code::create_context(st, req).await,
        (&Method::GET, ["code", "contexts"]) => code::list(&st, &q),
        (&Method::DELETE, ["code", "contexts"]) => code::delete_by_language(&st, &q).await,
        (&Method::GET, ["code", "contexts", id]) => code::get(&st, id),
        (&Method::DELETE, ["code", "contexts", id]) => code::delete(&st, id).await,
        _ => web::response(
            StatusCode::NOT_FOUND,
            Some("text/plain"),
            web::full("404 page not found"),
        ),
    }
}
