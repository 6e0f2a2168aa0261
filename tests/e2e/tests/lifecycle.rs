//! sandbox.lifecycle, sandbox.timeout, sandbox.pause and ports.url against the
//! real server, in direct and server-proxy mode.

use epp_e2e::{Host, Mode, both_modes, sh, unique, workdir};
use serde_json::json;
use std::io::{Read, Write};
use std::time::Duration;

fn lifecycle(mode: Mode) {
    let host = Host::start(mode);
    let tag = unique("tag");
    let info = host.create_info(
        json!({"metadata": {"e2e-tag": tag}, "timeout": 120, "env": {"FOO": "bar baz"}}),
    );
    let id = info["sandbox_id"].as_str().unwrap();
    assert_eq!(info["state"], "running", "{info}");
    assert_eq!(info["template"], "base");
    assert_eq!(info["image"], "python:3.12-slim");
    assert_eq!(info["metadata"]["e2e-tag"], tag.as_str());
    assert!(
        info["created_at"].is_string() && info["expires_at"].is_string(),
        "{info}"
    );

    let got = host.ok("sandbox.get_info", json!({"sandbox_id": id}));
    assert_eq!(got["sandbox_id"], id);
    assert_eq!(got["state"], "running");

    // The metadata filter finds exactly this sandbox; a state filter narrows it.
    let listed = host.ok("sandbox.list", json!({"metadata": {"e2e-tag": tag}}));
    let ids: Vec<&str> = listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sandbox_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id]);
    let paused = host.ok(
        "sandbox.list",
        json!({"state": "paused", "metadata": {"e2e-tag": tag}}),
    );
    assert!(paused["sandboxes"].as_array().unwrap().is_empty());

    // Create-time env reaches commands.
    assert_eq!(sh(&host, id, "echo \"$FOO\""), "bar baz\n");

    let renewed = host.ok(
        "sandbox.set_timeout",
        json!({"sandbox_id": id, "timeout": 900}),
    );
    assert!(
        renewed["expires_at"].as_str().unwrap() > info["expires_at"].as_str().unwrap(),
        "{renewed} vs {info}"
    );

    host.ok("sandbox.pause", json!({"sandbox_id": id}));
    assert_eq!(
        host.ok("sandbox.get_info", json!({"sandbox_id": id}))["state"],
        "paused"
    );
    let paused = host.ok(
        "sandbox.list",
        json!({"state": ["paused"], "metadata": {"e2e-tag": tag}}),
    );
    assert_eq!(paused["sandboxes"].as_array().unwrap().len(), 1);
    host.fails("sandbox.pause", json!({"sandbox_id": id}), "E4009");

    let resumed = host.ok("sandbox.resume", json!({"sandbox_id": id}));
    assert_eq!(resumed["state"], "running");
    assert_eq!(sh(&host, id, "echo back"), "back\n");

    host.ok("sandbox.kill", json!({"sandbox_id": id}));
    let e = host.fails("sandbox.get_info", json!({"sandbox_id": id}), "E4004");
    assert_eq!(e.data["http_status"], 404);
    host.fails("sandbox.kill", json!({"sandbox_id": id}), "E4004");
    host.fails(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "true"}),
        "E4004",
    );
}
both_modes!(create_get_list_renew_pause_resume_kill, super::lifecycle);

/// `connect` in another process learns the endpoint from the server, not from memory.
fn connect_from_second_process(mode: Mode) {
    let first = Host::start(mode);
    let id = first.create_sandbox();
    let dir = workdir(&first, &id);
    let second = Host::start(mode);
    let info = second.ok("sandbox.connect", json!({"sandbox_id": id}));
    assert_eq!(info["state"], "running");
    let path = format!("{dir}/from-second.txt");
    second.ok(
        "files.write",
        json!({"sandbox_id": id, "path": path, "content": "hello from 2"}),
    );
    let read = first.ok("files.read", json!({"sandbox_id": id, "path": path}));
    assert_eq!(read["content"], "hello from 2");
    second.fails(
        "sandbox.connect",
        json!({"sandbox_id": "no-such-sandbox"}),
        "E4004",
    );
}
both_modes!(
    connect_from_a_second_host,
    super::connect_from_second_process
);

/// Connecting to a paused sandbox resumes it (as E2B does).
fn connect_resumes(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    host.ok("sandbox.pause", json!({"sandbox_id": id}));
    let info = host.ok("sandbox.connect", json!({"sandbox_id": id}));
    assert_eq!(info["state"], "running");
    assert_eq!(sh(&host, &id, "echo ok"), "ok\n");
}
both_modes!(connect_resumes_a_paused_sandbox, super::connect_resumes);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET over plain HTTP/1.0 with extra headers; returns (status, body).
fn http_get(url: &str, headers: &serde_json::Value) -> (u16, String) {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (authority, path) = rest
        .split_once('/')
        .map(|(a, p)| (a, format!("/{p}")))
        .unwrap_or((rest, "/".into()));
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\n");
    for (k, v) in headers.as_object().unwrap() {
        req.push_str(&format!("{k}: {}\r\n", v.as_str().unwrap()));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .unwrap_or("0")
        .parse()
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn ports_url(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let port = free_port();
    let marker = unique("served");
    sh(
        &host,
        &id,
        &format!("mkdir -p site && echo {marker} > site/hello.txt"),
    );
    let started = host.ok(
        "commands.run",
        json!({"sandbox_id": id, "background": true, "cmd": format!("cd site && exec python3 -m http.server {port} --bind 127.0.0.1")}),
    );
    assert!(started["command_id"].is_string());
    let url = host.ok("ports.url", json!({"sandbox_id": id, "port": port}));
    let base = url["url"].as_str().unwrap().to_string();
    assert!(base.starts_with("http://"), "{url}");
    let mut last = (0, String::new());
    for _ in 0..50 {
        last = http_get(&format!("{base}/hello.txt"), &url["headers"]);
        if last.0 == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(last.0, 200, "GET {base}/hello.txt: {last:?}");
    assert_eq!(last.1.trim(), marker);
    host.fails("ports.url", json!({"sandbox_id": id, "port": 0}), "E1001");
}
both_modes!(ports_url_reaches_a_server_in_the_sandbox, super::ports_url);
