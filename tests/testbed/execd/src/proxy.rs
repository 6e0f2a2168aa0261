//! `/proxy/{port}/...` (execd's `ProxyMiddleware`): a reverse proxy to
//! `http://127.0.0.1:{port}/...` that streams both ways and relays WebSocket upgrades.
//! Requests for execd's own port are served in-process by the caller (see `main.rs`).

use std::net::SocketAddr;

use http::{HeaderMap, HeaderValue, Request, StatusCode, Uri, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::web::{self as h, Resp};

/// Hop-by-hop headers (RFC 7230 §6.1) that a proxy must not forward.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    let listed: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    for name in HOP_BY_HOP.iter().map(|s| s.to_string()).chain(listed) {
        if keep_upgrade && (name == "connection" || name == "upgrade") {
            continue;
        }
        headers.remove(name.as_str());
    }
    if !keep_upgrade {
        headers.remove(header::UPGRADE);
    }
}

fn bad_gateway() -> Resp {
    h::text_error(StatusCode::BAD_GATEWAY, "Bad Gateway")
}

fn is_websocket(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Forwards `req` to `127.0.0.1:{port}{path}` keeping the original query string.
pub async fn forward(mut req: Request<Incoming>, port: &str, path: &str, peer: SocketAddr) -> Resp {
    let Ok(port) = port.parse::<u16>() else {
        return bad_gateway();
    };
    let Ok(stream) = TcpStream::connect(("127.0.0.1", port)).await else {
        return bad_gateway();
    };
    let Ok((mut sender, conn)) =
        hyper::client::conn::http1::handshake::<_, Incoming>(TokioIo::new(stream)).await
    else {
        return bad_gateway();
    };
    tokio::spawn(conn.with_upgrades());

    let ws = is_websocket(&req);
    let client_upgrade = ws.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let target = match parts.uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    };
    let Ok(uri) = target.parse::<Uri>() else {
        return bad_gateway();
    };
    let mut out = Request::new(body);
    *out.method_mut() = parts.method;
    *out.uri_mut() = uri;
    *out.headers_mut() = parts.headers;
    let hd = out.headers_mut();
    strip_hop_by_hop(hd, ws);
    if ws {
        hd.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        hd.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    }
    // The original Host is kept (execd's Director never rewrites it).
    if !hd.contains_key(header::HOST)
        && let Ok(v) = HeaderValue::from_str(&format!("127.0.0.1:{port}"))
    {
        hd.insert(header::HOST, v);
    }
    let client_ip = hd
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').next().unwrap_or("").trim().to_string())
        .filter(|v| !v.is_empty())
        .or_else(|| {
            hd.get("x-real-ip")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_else(|| peer.to_string());
    if let Ok(v) = HeaderValue::from_str(&client_ip) {
        hd.insert("x-forwarded-for", v);
    }
    hd.insert("x-forwarded-proto", HeaderValue::from_static("http"));
    hd.remove("x-forwarded-host");

    let Ok(mut resp) = sender.send_request(out).await else {
        return bad_gateway();
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let backend_upgrade = hyper::upgrade::on(&mut resp);
        if let Some(client_upgrade) = client_upgrade {
            tokio::spawn(async move {
                if let (Ok(client), Ok(backend)) = tokio::join!(client_upgrade, backend_upgrade) {
                    let _ = tokio::io::copy_bidirectional(
                        &mut TokioIo::new(client),
                        &mut TokioIo::new(backend),
                    )
                    .await;
                }
            });
        }
        let (parts, _) = resp.into_parts();
        return http::Response::from_parts(parts, h::empty());
    }
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers, false);
    http::Response::from_parts(parts, body.map_err(std::io::Error::other).boxed_unsync())
}
