//! `/proxy/{port}/...`: port 44772 is the stand-in itself, other ports are reverse-proxied.

mod common;

use bytes::Bytes;
use common::*;
use futures::{SinkExt, StreamExt};
use http::StatusCode;
use http_body_util::BodyExt;
use serde_json::json;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test]
async fn port_44772_is_served_in_process() {
    let x = Execd::start();
    let r = get(x.port, "/proxy/44772/ping").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.is_empty());

    let r = post_json(
        x.port,
        "/proxy/44772/command",
        json!({"command": "echo via-proxy"}),
    )
    .await;
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    let ev = parse_events(&r.body);
    assert_eq!(texts(&ev, "stdout"), ["via-proxy\n"]);

    // Query strings survive the prefix strip.
    std::fs::write(x.path("q.txt"), "abc").unwrap();
    let r = get(
        x.port,
        &format!(
            "/proxy/44772/files/download?path={}",
            x.path("q.txt").display()
        ),
    )
    .await;
    assert_eq!(r.body, b"abc");

    // The PTY WebSocket works through the prefix too.
    let id = post_json(x.port, "/proxy/44772/pty", json!({}))
        .await
        .json()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let stream = TcpStream::connect(("127.0.0.1", x.port)).await.unwrap();
    let url = format!("ws://127.0.0.1:{}/proxy/44772/pty/{id}/ws", x.port);
    let (mut ws, _) = tokio_tungstenite::client_async(url, stream).await.unwrap();
    ws.send(Message::binary(b"\x00echo $((40+2))\n".to_vec()))
        .await
        .unwrap();
    let mut out = String::new();
    while !out.contains("42\r\n") {
        let m = tokio::time::timeout(T, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Message::Binary(b) = m {
            out.push_str(&String::from_utf8_lossy(&b[1..]));
        }
    }
}

#[tokio::test]
async fn other_ports_are_reverse_proxied_with_streaming_and_websockets() {
    let front = Execd::start();
    let back = Execd::start();
    let p = back.port;

    let r = get(front.port, &format!("/proxy/{p}/ping")).await;
    assert_eq!(r.status, StatusCode::OK);

    // Streaming response (SSE) arrives incrementally through the proxy.
    let resp = send(
        front.port,
        req(
            "POST",
            &format!("/proxy/{p}/command"),
            r#"{"command":"echo one; sleep 1.5; echo two"}"#,
        ),
    )
    .await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    let mut raw = String::new();
    let start = std::time::Instant::now();
    while !raw.contains(r#""one\n""#) {
        let f = body.frame().await.unwrap().unwrap();
        raw.push_str(&String::from_utf8_lossy(f.data_ref().unwrap()));
    }
    assert!(
        start.elapsed() < std::time::Duration::from_millis(1400),
        "not streamed"
    );
    while let Some(f) = body.frame().await {
        raw.push_str(&String::from_utf8_lossy(f.unwrap().data_ref().unwrap()));
    }
    assert_eq!(
        texts(&parse_events(raw.as_bytes()), "stdout"),
        ["one\n", "two\n"]
    );

    // Request bodies stream through (upload), responses keep their status and headers.
    let target = back.path("through-proxy.bin");
    let data = noise(3 * 1024 * 1024, 3);
    let mut body = multipart_pair(&json!({"path": target}), &data);
    body.extend_from_slice(multipart_end());
    let mut rq = upload_request(body);
    *rq.uri_mut() = format!("/proxy/{p}/files/upload").parse().unwrap();
    let r = collect(send(front.port, rq).await).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(std::fs::read(&target).unwrap() == data);
    let r = get(front.port, &format!("/proxy/{p}/files/info?path=/no/such")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["code"], "FILE_NOT_FOUND");

    // WebSocket upgrade relayed to the backend's PTY.
    let id = post_json(front.port, &format!("/proxy/{p}/pty"), json!({}))
        .await
        .json()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let stream = TcpStream::connect(("127.0.0.1", front.port)).await.unwrap();
    let url = format!("ws://127.0.0.1:{}/proxy/{p}/pty/{id}/ws", front.port);
    let (mut ws, _) = tokio_tungstenite::client_async(url, stream).await.unwrap();
    ws.send(Message::binary(b"\x00echo $((40+2))\n".to_vec()))
        .await
        .unwrap();
    let mut out = String::new();
    while !out.contains("42\r\n") {
        let m = tokio::time::timeout(T, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match m {
            Message::Binary(b) => out.push_str(&String::from_utf8_lossy(&b[1..])),
            Message::Text(t) => out.push_str(t.as_str()),
            _ => {}
        }
    }
    assert!(out.contains(&format!(r#""session_id":"{id}""#)));
}

#[tokio::test]
async fn proxy_errors() {
    let x = Execd::start();
    // A port nobody listens on.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = get(x.port, &format!("/proxy/{free}/anything")).await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY);
    assert_eq!(r.text(), "Bad Gateway\n");
    let r = get(x.port, "/proxy/notaport/x").await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY);
    let r = call(x.port, "GET", "/proxy/", Bytes::new()).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.text(), "port is required\n");
}
