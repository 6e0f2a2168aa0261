//! files.transfer: `files.upload_url` / `files.download_url` answer a URL,
//! method and headers that `curl` alone uses to move a file straight to or
//! from the sandbox's execd (docs/epp-1.md, files.transfer): the endpoint in
//! direct mode, the server's proxy path in server-proxy mode when the server
//! serves it without the API key, else refused; never with the key.

use epp_e2e::{Fault, FaultProxy, Host, HostBuilder, Mode, b64d, both_modes, testbed};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// `curl` with exactly the answered method, URL and headers, plus `extra`;
/// returns (HTTP status, body).
fn curl(answer: &Value, extra: &[&str], out: &Path) -> u16 {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-o"])
        .arg(out)
        .args(["-w", "%{http_code}"]);
    cmd.args(["-X", answer["method"].as_str().unwrap()]);
    for (k, v) in answer["headers"].as_object().unwrap() {
        cmd.arg("-H").arg(format!("{k}: {}", v.as_str().unwrap()));
    }
    cmd.args(extra).arg(answer["url"].as_str().unwrap());
    let output = cmd.output().expect("curl (apt-get install curl)");
    assert!(output.status.success(), "curl: {output:?}");
    String::from_utf8(output.stdout).unwrap().parse().unwrap()
}

/// All 256 byte values, then pseudo-random bytes: `len` in total.
fn content(len: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while bytes.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.push(x as u8);
    }
    bytes.truncate(len);
    bytes
}

fn read_back(host: &Host, id: &str, path: &str) -> Vec<u8> {
    let r = host.ok(
        "files.read",
        json!({"sandbox_id": id, "path": path, "encoding": "base64"}),
    );
    b64d(r["content"].as_str().unwrap())
}

fn curl_round_trip(mode: Mode) {
    let host = HostBuilder::new(mode).spawn();
    let id = host.create_sandbox();
    let dir = tempfile::tempdir().unwrap();
    // A path with spaces and Unicode, in a directory that does not exist yet.
    let path = "/tmp/e2e transfer/ünï côde 文件.bin";
    let data = content(6 << 20);
    let local = dir.path().join("data.bin");
    std::fs::write(&local, &data).unwrap();

    let up = host.ok("files.upload_url", json!({"sandbox_id": id, "path": path}));
    assert_eq!(up["method"], "POST", "{up}");
    let url = up["url"].as_str().unwrap();
    assert!(url.starts_with("http"), "{up}");
    // Through the server in proxy mode, straight to execd in direct mode.
    let through_server = url.contains(&format!("/sandboxes/{id}/proxy/44772/"));
    assert_eq!(through_server, mode == Mode::Proxy, "{up}");
    let info = host.ok("sandbox.get_info", json!({"sandbox_id": id}));
    assert_eq!(
        up["expires_at"], info["expires_at"],
        "valid as long as the sandbox"
    );
    // The documented request: multipart, a `metadata` file part holding
    // {"path", "mode"} and then the `file` part.
    let meta = dir.path().join("meta.json");
    std::fs::write(&meta, json!({"path": path, "mode": 640}).to_string()).unwrap();
    let status = curl(
        &up,
        &[
            "-F",
            &format!(
                "metadata=@{};filename=metadata;type=application/json",
                meta.display()
            ),
            "-F",
            &format!("file=@{}", local.display()),
        ],
        &dir.path().join("upload.out"),
    );
    assert_eq!(status, 200);
    let back = read_back(&host, &id, path);
    assert!(
        back == data,
        "{} bytes read back, {} sent",
        back.len(),
        data.len()
    );
    let info = host.ok("files.get_info", json!({"sandbox_id": id, "path": path}));
    assert_eq!(info["mode"], "0640");

    let down = host.ok(
        "files.download_url",
        json!({"sandbox_id": id, "path": path}),
    );
    assert_eq!(down["method"], "GET", "{down}");
    let got = dir.path().join("got.bin");
    assert_eq!(curl(&down, &[], &got), 200);
    assert!(std::fs::read(&got).unwrap() == data, "the download differs");
    // A byte range, as HTTP says: 206 and exactly those bytes.
    let part = dir.path().join("part.bin");
    let status = curl(&down, &["-H", "Range: bytes=1000-1099999"], &part);
    assert_eq!(status, 206);
    assert!(std::fs::read(&part).unwrap() == data[1000..1_100_000]);
    let status = curl(&down, &["-H", "Range: bytes=100-"], &part);
    assert_eq!(status, 206);
    assert!(std::fs::read(&part).unwrap() == data[100..]);

    // Neither answer carries the server's key.
    let key = &testbed().api_key;
    for answer in [&up, &down] {
        assert!(!answer.to_string().contains(key.as_str()), "{answer}");
    }
}

both_modes!(
    curl_uploads_and_downloads_through_the_answered_urls,
    super::curl_round_trip
);

fn killed(mode: Mode) {
    let host = HostBuilder::new(mode).spawn();
    let id = host.create_sandbox();
    host.ok("sandbox.kill", json!({"sandbox_id": id}));
    for method in ["files.upload_url", "files.download_url"] {
        host.fails(method, json!({"sandbox_id": id, "path": "/tmp/x"}), "E4004");
    }
}
both_modes!(a_killed_sandbox_has_no_transfer_urls, super::killed);

/// A server that wants its API key on the proxy path (multi-tenant): the fault
/// proxy answers 401 to the anonymous `/ping` the provider sends first.
#[test]
fn server_proxy_mode_is_refused_where_the_proxy_wants_the_key() {
    let proxy = FaultProxy::testbed();
    let host = HostBuilder::new(Mode::Proxy).via(&proxy).spawn();
    let id = host.create_sandbox();
    let key = &testbed().api_key;
    let ping = format!("/sandboxes/{id}/proxy/44772/ping");
    // (The create's readiness check pings execd through the proxy too, with the key.)
    let before = proxy.seen().len();
    for method in ["files.upload_url", "files.download_url"] {
        proxy.fault("GET", &ping, Fault::Status(401), 1);
        let e = host.fails(method, json!({"sandbox_id": id, "path": "/tmp/x"}), "E4009");
        assert!(e.message.contains(method), "{e:?}");
        assert!(
            e.message.contains("API key") && e.message.contains("HTTP 401"),
            "says why: {e:?}"
        );
        assert!(
            e.message.contains("ABX_OPENSANDBOX_USE_SERVER_PROXY"),
            "says what to do: {e:?}"
        );
        assert!(!format!("{e:?}").contains(key.as_str()), "{e:?}");
    }
    // Without the fault the same server's proxy path is open; every probe
    // went without the key (and without the marker, which the host removes),
    // while the provider's other requests to the server carried it.
    let up = host.ok(
        "files.upload_url",
        json!({"sandbox_id": id, "path": "/tmp/x"}),
    );
    assert!(!up.to_string().contains(key.as_str()), "{up}");
    let seen = proxy.seen().split_off(before);
    let probes: Vec<_> = seen.iter().filter(|s| s.path.ends_with(&ping)).collect();
    let paths: Vec<_> = seen.iter().map(|s| &s.path).collect();
    assert_eq!(probes.len(), 3, "one probe per call: {paths:?}");
    for probe in probes {
        assert!(
            !probe
                .header_names
                .iter()
                .any(|h| h == "open-sandbox-api-key" || h == "epp-anonymous"),
            "{:?}",
            probe.header_names
        );
    }
    let endpoint = seen
        .iter()
        .find(|s| s.path.contains(&format!("/sandboxes/{id}/endpoints/44772")))
        .expect("the endpoint was asked through the proxy");
    assert!(
        endpoint
            .header_names
            .iter()
            .any(|h| h == "open-sandbox-api-key"),
        "the key still goes with the provider's own requests: {:?}",
        endpoint.header_names
    );
    // The safe path still works in this mode.
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": "/tmp/x", "content": "ok"}),
    );
}
