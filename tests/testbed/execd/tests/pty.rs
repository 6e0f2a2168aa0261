//! Black-box tests of the PTY REST API and its WebSocket protocol.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use futures::{SinkExt, StreamExt};
use http::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::{self, Message};

type Ws = WebSocketStream<TcpStream>;

async fn connect(port: u16, path: &str) -> Result<Ws, tungstenite::Error> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let url = format!("ws://127.0.0.1:{port}{path}");
    tokio::time::timeout(T, tokio_tungstenite::client_async(url, stream))
        .await
        .expect("handshake in time")
        .map(|(ws, _)| ws)
}

async fn new_session(port: u16, body: Value) -> String {
    let r = post_json(port, "/pty", body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let id = r.json()["session_id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 36);
    id
}

async fn next(ws: &mut Ws) -> Message {
    tokio::time::timeout(T, ws.next())
        .await
        .expect("frame in time")
        .expect("stream open")
        .expect("frame")
}

fn json_of(m: &Message) -> Value {
    match m {
        Message::Text(t) => serde_json::from_str(t.as_str()).unwrap(),
        other => panic!("expected text, got {other:?}"),
    }
}

/// Reads frames until the accumulated output (0x01/0x02/0x03 payloads) contains `needle`.
async fn read_until(ws: &mut Ws, needle: &str) -> String {
    let mut out = String::new();
    while !out.contains(needle) {
        let m = match tokio::time::timeout(T, ws.next()).await {
            Ok(Some(Ok(m))) => m,
            other => panic!("no frame ({other:?}) before {needle:?}; got {out:?}"),
        };
        match m {
            Message::Binary(b) => {
                let skip = if b[0] == 0x03 { 9 } else { 1 };
                out.push_str(&String::from_utf8_lossy(&b[skip..]));
            }
            Message::Text(t) => out.push_str(t.as_str()),
            Message::Close(c) => panic!("closed ({c:?}) before {needle:?}; got {out:?}"),
            _ => {}
        }
    }
    out
}

async fn stdin(ws: &mut Ws, s: &str) {
    let mut f = vec![0x00];
    f.extend_from_slice(s.as_bytes());
    ws.send(Message::binary(f)).await.unwrap();
}

/// Expects the `connected` frame, optionally preceded by a replay frame (a shell that was
/// just started may already have printed its prompt). Returns the replayed text.
async fn expect_connected(ws: &mut Ws, id: &str, mode: &str) -> String {
    let mut m = next(ws).await;
    let mut replay = String::new();
    if let Message::Binary(f) = &m {
        assert_eq!(f[0], 0x03, "only a replay frame may precede `connected`");
        replay = String::from_utf8_lossy(&f[9..]).into_owned();
        m = next(ws).await;
    }
    assert_eq!(
        json_of(&m),
        json!({"type": "connected", "session_id": id, "mode": mode})
    );
    replay
}

#[tokio::test]
async fn shell_runs_on_a_real_terminal() {
    let x = Execd::start();
    let id = new_session(x.port, json!({"cwd": "~/work"})).await;
    assert!(x.path("home/work").is_dir(), "cwd is created");
    let st = get(x.port, &format!("/pty/{id}")).await.json();
    assert_eq!(
        st,
        json!({"session_id": id, "running": false, "output_offset": 0})
    );

    let mut ws = connect(x.port, &format!("/pty/{id}/ws")).await.unwrap();
    expect_connected(&mut ws, &id, "pty").await;
    stdin(&mut ws, "echo $((40+2)); tty; pwd\n").await;
    let out = read_until(&mut ws, "42\r\n").await;
    let out = out + &read_until(&mut ws, "/home/work").await;
    assert!(out.contains("/dev/pts/"), "{out:?}");

    // Initial size 80x24, then resize.
    stdin(&mut ws, "stty size\n").await;
    read_until(&mut ws, "24 80").await;
    ws.send(Message::text(r#"{"type":"resize","cols":120,"rows":40}"#))
        .await
        .unwrap();
    stdin(&mut ws, "stty size\n").await;
    read_until(&mut ws, "40 120").await;

    // Text stdin, app-level ping and an unknown frame type.
    ws.send(Message::text(
        r#"{"type":"stdin","data":"echo via-text\n"}"#,
    ))
    .await
    .unwrap();
    read_until(&mut ws, "\rvia-text\r\n").await;
    ws.send(Message::text(r#"{"type":"ping"}"#)).await.unwrap();
    read_until(&mut ws, r#"{"type":"pong"}"#).await;
    ws.send(Message::text(r#"{"type":"bogus"}"#)).await.unwrap();
    let out = read_until(&mut ws, "INVALID_FRAME").await;
    assert!(
        out.contains(
            r#"{"type":"error","error":"unknown frame type \"bogus\"","code":"INVALID_FRAME"}"#
        ),
        "{out}"
    );
    ws.send(Message::text("not json")).await.unwrap();

    let st = get(x.port, &format!("/pty/{id}")).await.json();
    assert_eq!(st["running"], true);
    assert!(st["output_offset"].as_i64().unwrap() > 0);

    // Exit: exit frame with the code, then close 1000 "process exited".
    stdin(&mut ws, "exit 7\n").await;
    loop {
        match next(&mut ws).await {
            Message::Text(t) if t.as_str().contains("\"exit\"") => {
                assert_eq!(t.as_str(), "{\"type\":\"exit\",\"exit_code\":7}\n");
                break;
            }
            Message::Close(c) => panic!("close before exit frame: {c:?}"),
            _ => {}
        }
    }
    match next(&mut ws).await {
        Message::Close(Some(c)) => {
            assert_eq!(u16::from(c.code), 1000);
            assert_eq!(c.reason.as_str(), "process exited");
        }
        other => panic!("expected close, got {other:?}"),
    }
    let st = get(x.port, &format!("/pty/{id}")).await.json();
    assert_eq!(st["running"], false);
}

#[tokio::test]
async fn one_client_at_a_time_takeover_and_replay() {
    let x = Execd::start();
    let id = new_session(x.port, json!({})).await;
    let mut a = connect(x.port, &format!("/pty/{id}/ws")).await.unwrap();
    expect_connected(&mut a, &id, "pty").await;
    stdin(&mut a, "echo marker-$((6*7))\n").await;
    read_until(&mut a, "marker-42").await;

    // A second client is refused before the upgrade.
    match connect(x.port, &format!("/pty/{id}/ws")).await {
        Err(tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), StatusCode::CONFLICT);
            let body: Value = serde_json::from_slice(resp.body().as_deref().unwrap()).unwrap();
            assert_eq!(body["code"], "ALREADY_CONNECTED");
        }
        other => panic!("expected 409, got {:?}", other.map(|_| ())),
    }

    // Takeover evicts the holder with 4001 and replays the scrollback to the new client.
    let mut b = connect(x.port, &format!("/pty/{id}/ws?takeover=1"))
        .await
        .unwrap();
    let m = next(&mut b).await;
    match &m {
        Message::Binary(f) => {
            assert_eq!(f[0], 0x03);
            assert_eq!(u64::from_be_bytes(f[1..9].try_into().unwrap()), 0);
            assert!(String::from_utf8_lossy(&f[9..]).contains("marker-42"));
        }
        other => panic!("expected replay, got {other:?}"),
    }
    expect_connected(&mut b, &id, "pty").await;
    loop {
        match next(&mut a).await {
            Message::Close(Some(c)) => {
                assert_eq!(u16::from(c.code), 4001);
                assert_eq!(c.reason.as_str(), "TAKEN_OVER");
                break;
            }
            Message::Close(None) => panic!("close without code"),
            _ => {}
        }
    }
    // Same shell: state survives the handoff.
    stdin(&mut b, "echo still-$((1+1))\n").await;
    read_until(&mut b, "still-2").await;

    // Detach, then reattach with `since`: replay (if any) starts exactly there.
    drop(b);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let st = get(x.port, &format!("/pty/{id}")).await.json();
    let offset = st["output_offset"].as_i64().unwrap();
    let mut c = None;
    // The lock is released once the server has noticed the disconnect.
    eventually(async || {
        c = connect(x.port, &format!("/pty/{id}/ws?since={offset}"))
            .await
            .ok();
        c.is_some()
    })
    .await;
    let mut c = c.unwrap();
    let first = next(&mut c).await;
    if let Message::Binary(f) = &first {
        assert_eq!(f[0], 0x03);
        assert_eq!(
            u64::from_be_bytes(f[1..9].try_into().unwrap()),
            offset as u64
        );
        expect_connected(&mut c, &id, "pty").await;
    } else {
        assert_eq!(json_of(&first)["type"], "connected");
    }

    // DELETE kills the shell: the client sees exit -1.
    let r = call(x.port, "DELETE", &format!("/pty/{id}"), Bytes::new()).await;
    assert_eq!(r.status, StatusCode::OK);
    let out = read_until(&mut c, "\"exit\"").await;
    assert!(out.contains(r#"{"type":"exit","exit_code":-1}"#), "{out}");
    assert_eq!(
        get(x.port, &format!("/pty/{id}")).await.status,
        StatusCode::NOT_FOUND
    );
    let r = call(x.port, "DELETE", &format!("/pty/{id}"), Bytes::new()).await;
    assert_eq!(r.json()["code"], "CONTEXT_NOT_FOUND");
}

#[tokio::test]
async fn pipe_mode_and_command_sessions() {
    let x = Execd::start();
    let id = new_session(x.port, json!({})).await;
    let mut ws = connect(x.port, &format!("/pty/{id}/ws?pty=0"))
        .await
        .unwrap();
    expect_connected(&mut ws, &id, "pipe").await;
    stdin(&mut ws, "echo out; echo err >&2\n").await;
    let (mut out, mut err) = (String::new(), String::new());
    while !(out.contains("out\n") && err.contains("err\n")) {
        if let Message::Binary(b) = next(&mut ws).await {
            match b[0] {
                0x01 => out.push_str(&String::from_utf8_lossy(&b[1..])),
                0x02 => err.push_str(&String::from_utf8_lossy(&b[1..])),
                t => panic!("unexpected channel {t}"),
            }
        }
    }
    assert_eq!(out, "out\n", "no echo without a terminal");

    // A session with a command exits by itself.
    let id = new_session(x.port, json!({"command": "echo from-command; exit 3"})).await;
    let mut ws = connect(x.port, &format!("/pty/{id}/ws")).await.unwrap();
    let out = read_until(&mut ws, "\"exit\"").await;
    assert!(out.contains("from-command"), "{out}");
    assert!(out.contains(r#"{"type":"exit","exit_code":3}"#), "{out}");
}

#[tokio::test]
async fn rest_errors() {
    let x = Execd::start();
    let r = get(x.port, "/pty/nope").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["code"], "CONTEXT_NOT_FOUND");
    match connect(x.port, "/pty/nope/ws").await {
        Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), StatusCode::NOT_FOUND),
        other => panic!("expected 404, got {:?}", other.map(|_| ())),
    }
    // An empty body is fine for POST /pty.
    let r = call(x.port, "POST", "/pty", Bytes::new()).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = call(x.port, "POST", "/pty", "{bad").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}
