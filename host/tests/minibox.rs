//! A second provider under the same `epp-host`: minibox (`tests/components/minibox`)
//! declares its own id, settings, origin and secret header through the WIT world,
//! and the host grants it exactly that: its own settings in its environment, its
//! token injected host-side on requests to its origin only, and nothing else on
//! the network. Every assertion is on what the loopback servers actually received.

mod common;

use common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The operator's minibox token: recognisable, so a leak is easy to spot.
const TOKEN: &str = "mbx-tok-5e4d3c2b1a-NEVER-IN-GUEST";

/// The header that carries [`TOKEN`] to the origin.
const TOKEN_HEADER: &str = "x-minibox-token";

/// The file every box has (`files.exists`).
const BOX_FILE: &str = "/etc/minibox-release";

// ------------------------------------------------------------------ the minibox server

/// One request a server received, as the test (not the guest) sees it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    method: String,
    path: String,
    /// Every `x-minibox-token` value, in order (several if anyone appended one).
    tokens: Vec<String>,
}

#[derive(Default)]
struct Boxes {
    next: u32,
    boxes: BTreeMap<String, Value>,
}

/// A loopback minibox server: boxes in memory, JSON over HTTP, every connection
/// and request recorded. It answers 401 unless the request carries exactly
/// [`TOKEN`], as a real backend would.
struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Reply = hyper::Response<http_body_util::Full<bytes::Bytes>>;

fn reply(status: u16, body: Option<Value>) -> Reply {
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes.into()))
        .expect("response")
}

impl Server {
    /// Listens on `ip`:0 inside the lab.
    fn start(ip: &'static str) -> Server {
        let listener = in_lab(move || std::net::TcpListener::bind((ip, 0)))
            .unwrap_or_else(|e| panic!("binding {ip}:0: {e}"));
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let boxes = Arc::new(Mutex::new(Boxes::default()));
        let task = {
            let _guard = rt().enter();
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            let (seen, connections) = (seen.clone(), connections.clone());
            rt().spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    connections.fetch_add(1, Ordering::SeqCst);
                    let (seen, boxes) = (seen.clone(), boxes.clone());
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |req| {
                            let (seen, boxes) = (seen.clone(), boxes.clone());
                            async move {
                                Ok::<_, std::convert::Infallible>(serve(req, &seen, &boxes).await)
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    });
                }
            })
        };
        Server {
            addr,
            seen,
            connections,
            task,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }

    /// Fails unless nobody ever connected to this server.
    fn assert_untouched(&self, what: &str) {
        assert_eq!(
            self.connections.load(Ordering::SeqCst),
            0,
            "{what} ({}) was connected to; requests: {:?}",
            self.addr,
            self.seen()
        );
    }
}

async fn serve(
    req: hyper::Request<hyper::body::Incoming>,
    seen: &Mutex<Vec<Seen>>,
    boxes: &Mutex<Boxes>,
) -> Reply {
    use http_body_util::BodyExt;
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let tokens: Vec<String> = req
        .headers()
        .get_all(TOKEN_HEADER)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    seen.lock().expect("seen").push(Seen {
        method: method.clone(),
        path: path.clone(),
        tokens: tokens.clone(),
    });
    let body = match req.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return reply(400, None),
    };
    if tokens != [TOKEN] {
        return reply(401, Some(json!({"error": "bad token"})));
    }
    let input: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut state = boxes.lock().expect("boxes");
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let missing = || reply(404, Some(json!({"error": "no such box"})));
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["v1", "whoami"]) => reply(200, Some(json!({"user": "operator"}))),
        ("POST", ["v1", "boxes"]) => {
            state.next += 1;
            let id = format!("box-{}", state.next);
            let b = json!({"id": id, "template": input["template"], "state": "running",
                           "metadata": input["metadata"], "created_at": "2026-01-02T03:04:05Z"});
            state.boxes.insert(id, b.clone());
            reply(201, Some(b))
        }
        ("GET", ["v1", "boxes"]) => {
            reply(200, Some(json!(state.boxes.values().collect::<Vec<_>>())))
        }
        ("GET", ["v1", "boxes", id]) => match state.boxes.get(*id) {
            Some(b) => reply(200, Some(b.clone())),
            None => missing(),
        },
        ("DELETE", ["v1", "boxes", id]) => match state.boxes.remove(*id) {
            Some(_) => reply(204, None),
            None => missing(),
        },
        ("POST", ["v1", "boxes", id, "exists"]) if state.boxes.contains_key(*id) => {
            reply(200, Some(json!({"exists": input["path"] == BOX_FILE})))
        }
        _ => missing(),
    }
}

// ------------------------------------------------------------------ helpers

/// epp-host running minibox against `server`, with the operator's token.
fn minibox(server: &Server) -> HostBuilder {
    HostBuilder::new()
        .wasm(MINIBOX.wasm())
        .env("MINIBOX_ENDPOINT", server.url(""))
        .env("MINIBOX_TOKEN", TOKEN)
}

/// Fails if the token showed up on the host's stdout or stderr.
fn assert_no_token(host: &Host) {
    assert!(
        !host.transcript().contains(TOKEN),
        "the minibox token appeared on epp-host's stdout"
    );
    assert!(
        !host.log().contains(TOKEN),
        "the minibox token appeared on epp-host's stderr"
    );
}

/// Runs a test hook (`sandbox.get_info` with it as the id).
fn hook(host: &mut Host, id: &str) -> Value {
    host.call("sandbox.get_info", json!({"sandbox_id": id}))
}

/// The EPP code of an error answer.
fn epp_code(resp: &Value) -> String {
    error(resp).1
}

// ------------------------------------------------------------------ (a) hello

#[test]
fn hello_names_minibox_with_its_own_settings_and_capabilities() {
    let server = Server::start("127.0.0.1");
    let mut host = minibox(&server)
        .env("ABX_OPENSANDBOX_BASE_URL", "http://127.0.0.1:9")
        .env("ABX_OPENSANDBOX_API_KEY", SECRET_KEY)
        .spawn();
    let resp = host.call("epp.hello", json!({"protocol": "EPP/1"}));
    let hello = result(&resp);
    assert_eq!(hello["provider"]["id"], "minibox", "{hello}");

    let settings = hello["settings"].as_array().expect("settings");
    let by_name = |name: &str| {
        settings
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no setting {name}: {hello}"))
    };
    assert_eq!(
        settings.iter().map(|s| &s["name"]).collect::<Vec<_>>(),
        ["endpoint", "token", "flavor"],
        "minibox's settings and nothing else: {hello}"
    );
    assert_eq!(by_name("endpoint")["env"], json!(["MINIBOX_ENDPOINT"]));
    assert_eq!(by_name("endpoint")["secret"], false);
    assert_eq!(by_name("endpoint")["default"], Value::Null);
    assert_eq!(by_name("token")["env"], json!(["MINIBOX_TOKEN"]));
    assert_eq!(by_name("token")["secret"], true);
    assert_eq!(by_name("flavor")["env"], json!(["MINIBOX_FLAVOR"]));
    assert_eq!(by_name("flavor")["default"], "plain");
    let text = hello.to_string();
    assert!(
        !text.to_ascii_lowercase().contains("opensandbox"),
        "hello mentions OpenSandbox: {hello}"
    );

    let caps = hello["capabilities"].as_object().expect("capabilities");
    assert_eq!(caps.len(), 18, "{hello}");
    let supported: Vec<&str> = caps
        .iter()
        .filter(|(_, on)| **on == json!(true))
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(supported, ["sandbox.lifecycle", "files.rw"], "{hello}");

    server.assert_untouched("hello must not touch the network: the minibox server");
    assert_no_token(&host);
}

// ------------------------------------------------------------------ (b) lifecycle

#[test]
fn lifecycle_round_trip_carries_the_operators_token_on_every_request() {
    let server = Server::start("127.0.0.1");
    let mut host = minibox(&server).env("MINIBOX_FLAVOR", "tiny").spawn();

    let first = host.call("sandbox.create", json!({"metadata": {"owner": "test"}}));
    let first = result(&first).clone();
    assert_eq!(first["sandbox_id"], "box-1", "{first}");
    assert_eq!(
        first["template"], "tiny",
        "MINIBOX_FLAVOR picks the template"
    );
    assert_eq!(first["state"], "running");
    assert_eq!(first["metadata"], json!({"owner": "test"}));
    let second = host.call("sandbox.create", json!({"template": "big"}));
    assert_eq!(result(&second)["sandbox_id"], "box-2", "{second}");
    assert_eq!(result(&second)["template"], "big");

    let info = host.call("sandbox.get_info", json!({"sandbox_id": "box-1"}));
    assert_eq!(result(&info), &first);
    let all = host.call("sandbox.list", json!({}));
    let ids = |resp: &Value| -> Vec<String> {
        result(resp)["sandboxes"]
            .as_array()
            .unwrap_or_else(|| panic!("no sandboxes: {resp}"))
            .iter()
            .map(|b| b["sandbox_id"].as_str().expect("id").to_string())
            .collect()
    };
    assert_eq!(ids(&all), ["box-1", "box-2"]);
    let mine = host.call("sandbox.list", json!({"metadata": {"owner": "test"}}));
    assert_eq!(ids(&mine), ["box-1"]);

    let exists = host.call(
        "files.exists",
        json!({"sandbox_id": "box-1", "path": BOX_FILE}),
    );
    assert_eq!(result(&exists)["exists"], true, "{exists}");
    let absent = host.call(
        "files.exists",
        json!({"sandbox_id": "box-1", "path": "/nope"}),
    );
    assert_eq!(result(&absent)["exists"], false, "{absent}");

    let killed = host.call("sandbox.kill", json!({"sandbox_id": "box-1"}));
    result(&killed);
    let gone = host.call("sandbox.get_info", json!({"sandbox_id": "box-1"}));
    assert_eq!(epp_code(&gone), "E4004", "{gone}");
    let left = host.call("sandbox.list", json!({}));
    assert_eq!(ids(&left), ["box-2"]);

    let seen = server.seen();
    let calls: Vec<(&str, &str)> = seen
        .iter()
        .map(|s| (s.method.as_str(), s.path.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            ("POST", "/v1/boxes"),
            ("POST", "/v1/boxes"),
            ("GET", "/v1/boxes/box-1"),
            ("GET", "/v1/boxes"),
            ("GET", "/v1/boxes"),
            ("POST", "/v1/boxes/box-1/exists"),
            ("POST", "/v1/boxes/box-1/exists"),
            ("DELETE", "/v1/boxes/box-1"),
            ("GET", "/v1/boxes/box-1"),
            ("GET", "/v1/boxes"),
        ]
    );
    for s in &seen {
        assert_eq!(s.tokens, [TOKEN], "{s:?}");
    }
    assert_no_token(&host);
}

// ------------------------------------------------------------------ (c) environment

#[test]
fn guest_environment_holds_minibox_settings_only() {
    let server = Server::start("127.0.0.1");
    let mut host = minibox(&server)
        .env("MINIBOX_FLAVOR", "tiny")
        .env("MINIBOX_ALLOW_HOSTS", "127.0.0.3")
        .env("ABX_OPENSANDBOX_BASE_URL", "http://127.0.0.1:9")
        .env("ABX_OPENSANDBOX_API_KEY", SECRET_KEY)
        .env("ABX_OPENSANDBOX_DOMAIN", "127.0.0.1:9")
        .env("OPEN_SANDBOX_API_KEY", SECRET_KEY)
        .env("UNRELATED", "not-a-minibox-setting")
        .spawn();

    let resp = hook(&mut host, "env");
    let env = result(&resp)["metadata"]
        .as_object()
        .unwrap_or_else(|| panic!("no environment: {resp}"));
    let dump = format!("{env:?}");
    for hidden in [
        "MINIBOX_TOKEN",
        TOKEN,
        "MINIBOX_ALLOW_HOSTS",
        "OPENSANDBOX",
        "OPEN_SANDBOX",
        SECRET_KEY,
        "UNRELATED",
        "PATH",
    ] {
        assert!(
            !dump.contains(hidden),
            "guest environment shows {hidden:?}: {dump}"
        );
    }
    let expected = json!({"MINIBOX_ENDPOINT": server.url(""), "MINIBOX_FLAVOR": "tiny"});
    assert_eq!(&Value::Object(env.clone()), &expected);
    server.assert_untouched("reading the environment is no request: the minibox server");
    assert_no_token(&host);
}

// ------------------------------------------------------------------ (d) denied

#[test]
fn destinations_not_granted_are_denied_and_never_connected() {
    let origin = Server::start("127.0.0.1");
    let other_ip = Server::start("127.0.0.2");
    let other_port = Server::start("127.0.0.1");
    let mut host = minibox(&origin).spawn();

    // The hook itself works: the origin is reachable (and gets the token).
    let resp = hook(&mut host, &format!("fetch:{}", origin.url("/v1/whoami")));
    assert_eq!(result(&resp)["metadata"]["status"], "200", "{resp}");

    for (what, server) in [("127.0.0.2", &other_ip), ("another port", &other_port)] {
        let resp = hook(&mut host, &format!("fetch:{}", server.url("/v1/whoami")));
        assert_eq!(epp_code(&resp), "E6001", "{what}: {resp}");
        server.assert_untouched(what);
    }
    let seen = origin.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].tokens, [TOKEN], "{seen:?}");
    assert_no_token(&host);
}

#[test]
fn opensandbox_settings_grant_minibox_nothing() {
    let origin = Server::start("127.0.0.1");
    let opensandbox = Server::start("127.0.0.1");
    let listed_for_opensandbox = Server::start("127.0.0.5");
    let mut host = minibox(&origin)
        .env("ABX_OPENSANDBOX_BASE_URL", opensandbox.url(""))
        .env("ABX_OPENSANDBOX_API_KEY", SECRET_KEY)
        .env(
            "ABX_OPENSANDBOX_ALLOW_HOSTS",
            listed_for_opensandbox.addr.ip().to_string(),
        )
        .spawn();

    let resp = hook(&mut host, &format!("fetch:{}", origin.url("/v1/whoami")));
    assert_eq!(result(&resp)["metadata"]["status"], "200", "{resp}");
    for (what, server) in [
        ("ABX_OPENSANDBOX_BASE_URL", &opensandbox),
        ("ABX_OPENSANDBOX_ALLOW_HOSTS", &listed_for_opensandbox),
    ] {
        let resp = hook(&mut host, &format!("fetch:{}", server.url("/v1/whoami")));
        assert_eq!(epp_code(&resp), "E6001", "{what}: {resp}");
        server.assert_untouched(what);
    }
    assert!(!host.log().contains(SECRET_KEY), "OpenSandbox key logged");
    assert_no_token(&host);
}

// ------------------------------------------------------------------ (e) the token

#[test]
fn a_forged_token_never_reaches_the_origin() {
    let origin = Server::start("127.0.0.1");
    let mut host = minibox(&origin).spawn();

    let resp = hook(&mut host, "smuggle");
    let meta = &result(&resp)["metadata"];
    // Refused by the header API, or accepted and then replaced by the host: either
    // way the origin must see the operator's token alone.
    for how in ["set-header", "from-list"] {
        assert!(
            meta[how] == "forbidden" || meta[how] == "ok",
            "{how}: {resp}"
        );
    }
    assert_eq!(
        meta["status"], "200",
        "the origin accepted the request: {resp}"
    );
    let seen = origin.seen();
    assert_eq!(
        seen,
        [Seen {
            method: "GET".into(),
            path: "/v1/whoami".into(),
            tokens: vec![TOKEN.into()],
        }]
    );
    assert_no_token(&host);
}

#[test]
fn the_token_goes_to_the_origin_only_not_to_other_granted_hosts() {
    let origin = Server::start("127.0.0.1");
    let by_env = Server::start("127.0.0.3");
    let by_flag = Server::start("127.0.0.4");
    let same_host = Server::start("127.0.0.1");
    let mut host = minibox(&origin)
        .env("MINIBOX_ALLOW_HOSTS", "127.0.0.3")
        .args(["--allow-host", "127.0.0.4"])
        .arg("--allow-host")
        .arg(same_host.addr.to_string())
        .spawn();

    for (what, server) in [
        ("MINIBOX_ALLOW_HOSTS", &by_env),
        ("--allow-host", &by_flag),
        ("--allow-host on the origin's host", &same_host),
    ] {
        // Reachable, but without the token: the server turns it away.
        let resp = hook(&mut host, &format!("fetch:{}", server.url("/v1/whoami")));
        assert_eq!(result(&resp)["metadata"]["status"], "401", "{what}: {resp}");
        let resp = hook(&mut host, &format!("smuggle:{}", server.url("/v1/whoami")));
        assert_eq!(result(&resp)["metadata"]["status"], "401", "{what}: {resp}");
        let seen = server.seen();
        assert_eq!(seen.len(), 2, "{what}: {seen:?}");
        for s in &seen {
            assert!(
                !s.tokens.iter().any(|t| t == TOKEN || t == "forged"),
                "{what} got a token: {s:?}"
            );
        }
    }
    origin.assert_untouched("nothing was meant for the origin");
    assert_no_token(&host);
}

// ------------------------------------------------------------------ (f) unsupported

#[test]
fn unsupported_methods_answer_e8004_without_network_traffic() {
    let server = Server::start("127.0.0.1");
    let mut host = minibox(&server).spawn();
    let id = "box-1";
    for (method, params) in [
        // Capabilities minibox does not declare: the host answers.
        ("commands.run", json!({"sandbox_id": id, "cmd": "true"})),
        (
            "sandbox.set_timeout",
            json!({"sandbox_id": id, "timeout": 60}),
        ),
        ("pty.kill", json!({"sandbox_id": id, "pty_id": "p"})),
        ("templates.list", json!({})),
        // Declared capabilities, functions minibox leaves out: the guest answers.
        ("sandbox.connect", json!({"sandbox_id": id})),
        ("files.list", json!({"sandbox_id": id, "path": "/"})),
        ("files.remove", json!({"sandbox_id": id, "path": "/tmp/x"})),
    ] {
        let resp = host.call(method, params);
        assert_eq!(epp_code(&resp), "E8004", "{method}: {resp}");
    }
    server.assert_untouched("the minibox server");
    assert_no_token(&host);
}
