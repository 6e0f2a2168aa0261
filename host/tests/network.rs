//! The network gate and the secret header: the provider (the probe, which
//! declares its needs as any provider does) reaches only what the operator
//! granted of what it asked for, every denial happens before a connection is
//! attempted, and its secret is added by the host to requests for the origin
//! only, never visible to the guest.

mod common;

use common::*;

/// What the host logs (at WARN) when its policy refuses a request before
/// connecting (`send_request`), as opposed to after a DNS lookup.
const PRE_CONNECT_DENIAL: &str = "outbound request denied by policy ";
/// What it logs when a name resolved to an address the policy refuses.
const POST_DNS_DENIAL: &str = "outbound request denied after name resolution";

/// How the host warns (at WARN) that the provider's origin resolves to nothing.
const ORIGIN_WARNING: &str = "none of the provider's origin templates";

fn denial_count(log: &str) -> usize {
    log_events(log, "WARN", PRE_CONNECT_DENIAL).len()
}

#[test]
fn log_lines_are_read_past_spans() {
    let log = "2026-01-01T00:00:00.000001Z  WARN request{id=1 method=x.y sandbox_id=a b}: \
               epp_host::net::outbound: outbound request denied by policy reason=no\n\
               2026-01-01T00:00:00.000002Z  INFO epp_host: compile cache: hit, loaded it\n\
               backtrace line\n";
    assert_eq!(
        log_lines(log),
        [
            LogLine {
                level: "WARN",
                spans: "request{id=1 method=x.y sandbox_id=a b}:",
                target: "epp_host::net::outbound",
                text: "outbound request denied by policy reason=no",
            },
            LogLine {
                level: "INFO",
                spans: "",
                target: "epp_host",
                text: "compile cache: hit, loaded it",
            },
        ]
    );
    assert_eq!(log_events(log, "INFO", "compile cache: ").len(), 1);
    assert_eq!(log_events(log, "WARN", "compile cache: ").len(), 0);
}

fn assert_no_secret(host: &Host) {
    assert!(
        !host.transcript().contains(SECRET_KEY),
        "the secret appeared on epp-host's stdout"
    );
    assert!(
        !host.log().contains(SECRET_KEY),
        "the secret appeared on epp-host's stderr"
    );
}

#[test]
fn guest_environment_holds_only_provider_settings() {
    let origin = Echo::start("origin", "127.0.0.1");
    let mut host = HostBuilder::new()
        .origin(&origin)
        .env(TOKEN_ENV_ALT, "sk-second-spelling-of-the-key")
        .env("ABX_SANDBOX_API_KEY", "sk-the-frameworks-own-key")
        .env(ALLOW_HOSTS_ENV, "hosts-only-the-host-reads.example")
        .env("UNRELATED_TOKEN", "tok-not-a-provider-setting")
        .env(LABEL_ENV, "visible label")
        .env("HANDED_OVER", "yes-by-pass-env")
        .args(["--pass-env", "HANDED_OVER"])
        .spawn();

    let (_, epp, dump) = error(&host.probe("env"));
    assert_eq!(
        epp, "E5001",
        "the probe reports its environment as an error"
    );
    let vars: Vec<&str> = dump.lines().collect();
    let base_url = format!("{BASE_URL_ENV}={}", origin.url(""));
    assert!(vars.contains(&base_url.as_str()), "{dump}");
    let label = format!("{LABEL_ENV}=visible label");
    assert!(vars.contains(&label.as_str()), "{dump}");
    assert!(vars.contains(&"HANDED_OVER=yes-by-pass-env"), "{dump}");
    for hidden in [
        SECRET_KEY,
        "sk-second-spelling-of-the-key",
        "sk-the-frameworks-own-key",
        "tok-not-a-provider-setting",
        "hosts-only-the-host-reads",
        TOKEN_ENV,
        ALLOW_HOSTS_ENV,
        "API_KEY",
        "UNRELATED_TOKEN",
        "PATH=",
    ] {
        assert!(
            !dump.contains(hidden),
            "guest environment shows {hidden:?}:\n{dump}"
        );
    }
    assert_eq!(
        vars.len(),
        3,
        "exactly the three expected variables: {dump}"
    );
    assert_no_secret(&host);
}

#[test]
fn pass_env_refuses_what_the_host_keeps() {
    for (name, why) in [
        (TOKEN_ENV, "is a secret the host keeps"),
        (TOKEN_ENV_ALT, "is a secret the host keeps"),
        ("ABX_SANDBOX_API_KEY", "is a secret the host keeps"),
        (ALLOW_HOSTS_ENV, "providers never see it"),
    ] {
        let out = run_host_once(
            &[
                "run",
                probe_wasm().to_str().expect("utf-8 path"),
                "--allow-unsigned",
                "--no-cache",
                "--trust-file",
                "/dev/null",
                "--pass-env",
                name,
            ],
            &[(name, SECRET_KEY)],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(why), "{name}: {stderr}");
        assert!(stderr.contains(&format!("--pass-env {name}")), "{stderr}");
        assert!(!stderr.contains(SECRET_KEY), "{stderr}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn secret_goes_to_the_origin_only_and_the_guest_cannot_forge_it() {
    let origin = Echo::start("origin", "127.0.0.1");
    let same_host = Echo::start("same-host", "127.0.0.1");
    let listed = Echo::start("listed", "127.0.0.3");
    let listed_env = Echo::start("listed-env", "127.0.0.4");
    let mut host = HostBuilder::new()
        .origin(&origin)
        .args(["--allow-host", "127.0.0.3"])
        .env(ALLOW_HOSTS_ENV, "127.0.0.4")
        .spawn();

    let body = |resp: &serde_json::Value| -> serde_json::Value {
        serde_json::from_str(meta(resp, "body").expect("body")).expect("JSON body")
    };

    // Origin: the host adds its key; the guest only learns that it was there.
    let resp = host.probe(&format!("fetch {}", origin.url("/v1/plain")));
    assert_eq!(meta(&resp, "status"), Some("200"), "{resp}");
    assert_eq!(body(&resp)["api_key"], "host-key");

    // The guest tries to set the key header itself: refused, and the origin
    // still gets the host's key, not the forged one.
    let resp = host.probe(&format!("fetch-with-key {}", origin.url("/v1/forged")));
    assert_eq!(meta(&resp, "set-header"), Some("forbidden"), "{resp}");
    assert_eq!(meta(&resp, "from-list"), Some("forbidden"), "{resp}");
    assert_eq!(meta(&resp, "status"), Some("200"), "{resp}");
    assert_eq!(body(&resp)["api_key"], "host-key");

    // Another port on the origin's host and allow-listed hosts (by flag and by
    // the provider's variable): allowed, no key.
    for (server, path) in [
        (&same_host, "/same-host"),
        (&listed, "/listed"),
        (&listed_env, "/listed-env"),
    ] {
        for verb in ["fetch", "fetch-with-key"] {
            let resp = host.probe(&format!("{verb} {}", server.url(path)));
            assert_eq!(meta(&resp, "status"), Some("200"), "{verb} {path}: {resp}");
            assert_eq!(body(&resp)["api_key"], "absent", "{verb} {path}");
        }
    }

    let origin_hits = origin.hits();
    assert_eq!(origin_hits.len(), 2, "{origin_hits:?}");
    for hit in &origin_hits {
        assert_eq!(hit.api_key.as_deref(), Some(SECRET_KEY), "{hit:?}");
    }
    for server in [&same_host, &listed, &listed_env] {
        let hits = server.hits();
        assert_eq!(hits.len(), 2, "{}: {hits:?}", server.name);
        assert!(
            hits.iter().all(|h| h.api_key.is_none()),
            "{}: {hits:?}",
            server.name
        );
    }
    assert_no_secret(&host);
}

/// A server may close an idle connection just as a request goes out on it;
/// for a `POST` nobody could then tell whether it was acted on. So a `POST`
/// never goes out on a connection a read used, and reuses a connection only
/// right after a clean `POST` exchange on it: once that connection has been
/// idle for `POST_REUSE_IDLE` (1 s, well under any server's keep-alive) the
/// next `POST` gets a new one. Reads reuse connections, for speed.
#[test]
fn only_idempotent_requests_reuse_connections() {
    let origin = Echo::start("origin", "127.0.0.1");
    let mut host = HostBuilder::new().origin(&origin).spawn();
    let mut send = |verb: &str, path: &str| {
        let resp = host.probe(&format!("{verb} {}", origin.url(path)));
        assert_eq!(meta(&resp, "status"), Some("200"), "{verb} {path}: {resp}");
    };
    send("fetch", "/get-1");
    send("fetch", "/get-2");
    send("post", "/post-1");
    send("post", "/post-2");
    send("fetch", "/get-3");
    std::thread::sleep(std::time::Duration::from_millis(1300));
    send("post", "/post-3");
    let hits = origin.hits();
    let conn = |path: &str| hits.iter().find(|h| h.path == path).expect(path).conn;
    assert_eq!(
        hits.iter().map(|h| h.method.as_str()).collect::<Vec<_>>(),
        ["GET", "GET", "POST", "POST", "GET", "POST"]
    );
    assert_eq!(conn("/get-1"), conn("/get-2"), "{hits:?}");
    assert_eq!(conn("/get-1"), conn("/get-3"), "{hits:?}");
    let posts = [conn("/post-1"), conn("/post-2"), conn("/post-3")];
    assert!(
        !posts.contains(&conn("/get-1")),
        "a POST went out on a connection a read used: {hits:?}"
    );
    assert!(
        posts[2] != posts[0],
        "a POST went out on a connection idle for longer than the bound: {hits:?}"
    );
    assert_eq!(
        posts[0], posts[1],
        "a POST right after a clean POST exchange reuses its connection: {hits:?}"
    );
}

#[test]
fn denied_destinations_are_refused_before_any_connection() {
    let origin = Echo::start("origin", "127.0.0.1");
    let other = Echo::start("other-host", "127.0.0.2");
    let mut host = HostBuilder::new().origin(&origin).spawn();
    let o = origin.port();
    let p = other.port();

    let cases = [
        // Another host, even on loopback, by address or by name.
        format!("http://127.0.0.2:{p}/other-host"),
        format!("https://127.0.0.2:{p}/other-host-tls"),
        format!("http://ip6-localhost:{o}/by-name"),
        format!("http://[::ffff:127.0.0.2]:{p}/mapped"),
        // Cloud metadata, by address (plain, IPv4-mapped, IPv6 link-local) and by name.
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://[::ffff:169.254.169.254]/latest/meta-data/".to_string(),
        "http://[fe80::1]/".to_string(),
        "http://metadata.google.internal/computeMetadata/v1/".to_string(),
        // Other spellings of this machine: the unspecified address and the
        // short, decimal and hex forms resolvers accept. (`localhost` and `::1`
        // are the origin's host, 127.0.0.1, by rule: see below.)
        format!("http://0.0.0.0:{o}/unspecified"),
        format!("http://127.1:{o}/short-form"),
        format!("http://2130706433:{o}/decimal-form"),
        format!("http://0x7f000001:{o}/hex-form"),
        // The userinfo trick: looks like the origin, goes to another host ...
        format!("http://127.0.0.1:{o}@127.0.0.2:{p}/userinfo"),
        // ... and credentials in front of the origin itself.
        format!("http://user:password@127.0.0.1:{o}/userinfo-origin"),
    ];
    for url in &cases {
        let resp = host.probe(&format!("fetch {url}"));
        assert_eq!(
            meta(&resp, "error"),
            Some("HTTP-request-denied"),
            "{url}: {resp}\nstderr:\n{}",
            host.log()
        );
    }
    // Each refusal was the policy's, before connecting (not a failed connection,
    // not a DNS answer that was checked afterwards).
    // (stderr is read by another thread: wait until it has caught up.)
    let log = host.wait_log_until(|log| denial_count(log) >= cases.len());
    assert_eq!(denial_count(&log), cases.len(), "stderr:\n{log}");
    assert!(
        !log.contains(POST_DNS_DENIAL),
        "a denial happened after name resolution:\n{log}"
    );
    assert!(log.contains("link-local or cloud-metadata"), "{log}");
    assert!(log.contains("user name or password"), "{log}");
    assert!(other.hits().is_empty(), "{:?}", other.hits());
    assert!(origin.hits().is_empty(), "{:?}", origin.hits());

    // The host keeps serving, and the origin is still reachable.
    let resp = host.probe(&format!("fetch {}", origin.url("/after")));
    assert_eq!(meta(&resp, "status"), Some("200"), "{resp}");
    assert_no_secret(&host);
    // The loopback interface is one host under its usual names: the request
    // goes out (and, on ::1, finds nothing listening).
    let resp = host.probe(&format!("fetch http://localhost:{o}/by-name"));
    assert_eq!(meta(&resp, "status"), Some("200"), "{resp}");
    // The secret goes to the origin as configured (127.0.0.1), not by another name.
    let hits = origin.hits();
    let by_name = hits.iter().find(|h| h.path == "/by-name").expect("hit");
    assert_eq!(by_name.api_key, None, "{hits:?}");
    assert!(
        hits.iter()
            .any(|h| h.path == "/after" && h.api_key.is_some()),
        "{hits:?}"
    );
    let resp = host.probe(&format!("fetch http://[::1]:{o}/v6-loopback"));
    assert_ne!(meta(&resp, "error"), Some("HTTP-request-denied"), "{resp}");
}

/// A listed name that does not resolve reaches the guest as a DNS error (the
/// resolver's own error, told by its type), and a terminal to it as
/// unreachable; neither is mistaken for a denial.
#[test]
fn a_name_that_does_not_resolve_is_a_dns_error() {
    // `.invalid` never resolves (RFC 6761).
    let mut host = HostBuilder::new()
        .args(["--allow-host", "no-such-host.invalid"])
        .spawn();
    let resp = host.probe("fetch http://no-such-host.invalid:8080/");
    assert_eq!(meta(&resp, "error"), Some("DNS-error"), "{resp}");
    let resp = host.probe("ws ws://no-such-host.invalid:8080/ws");
    assert_eq!(
        meta(&resp, "error"),
        Some("ErrorCode::Unreachable"),
        "{resp}"
    );
    assert!(
        meta(&resp, "message")
            .is_some_and(|m| m.starts_with("cannot resolve no-such-host.invalid")),
        "{resp}"
    );
    assert_eq!(result(&host.probe("echo ok"))["sandbox_id"], "ok");
}

/// `EPP_LOG=debug` adds one event per request, in the request's span (its
/// id, method and sandbox), with how long it took and its outcome; the secret
/// the host injected still appears nowhere.
#[test]
fn the_debug_log_shows_each_request_and_never_the_secret() {
    let origin = Echo::start("origin", "127.0.0.1");
    let mut host = HostBuilder::new()
        .origin(&origin)
        .env("EPP_LOG", "debug")
        .spawn();
    let ok = host.probe(&format!("fetch-with-key {}", origin.url("/logged")));
    assert_eq!(meta(&ok, "status"), Some("200"), "{ok}");
    assert_eq!(origin.hits()[0].api_key.as_deref(), Some(SECRET_KEY));
    let bad = host.probe("sleep soon");
    assert_eq!(error(&bad).1, "E1001", "{bad}");
    let log = host.wait_log_until(|l| log_events(l, "DEBUG", "answered").len() >= 2);
    let answered = log_events(&log, "DEBUG", "answered");
    assert_eq!(answered.len(), 2, "{log}");
    for (line, id, outcome) in [
        (answered[0], 1, "outcome=\"ok\""),
        (answered[1], 2, "outcome=E1001"),
    ] {
        assert!(
            line.spans.starts_with(&format!(
                "request{{id={id} method=sandbox.get_info sandbox_id="
            )),
            "{line:?}"
        );
        assert_eq!(line.target, "epp_host::rpc::server", "{line:?}");
        assert!(line.text.contains(outcome), "{line:?}");
        assert!(line.text.contains(" took="), "{line:?}");
    }
    assert!(answered[1].text.contains("retryable=false"), "{log}");
    assert_no_secret(&host);
}

#[test]
fn redirects_to_another_host_are_not_followed() {
    let origin = Echo::start("origin", "127.0.0.1");
    let elsewhere = Echo::start("elsewhere", "127.0.0.2");
    let mut host = HostBuilder::new().origin(&origin).spawn();

    let target = elsewhere.url("/landing");
    let resp = host.probe(&format!(
        "fetch {}",
        origin.url(&format!("/redirect?to={target}"))
    ));
    // The guest sees the 3xx itself; the host did not follow it.
    assert_eq!(meta(&resp, "status"), Some("302"), "{resp}");
    assert_eq!(meta(&resp, "location"), Some(target.as_str()), "{resp}");
    assert!(elsewhere.hits().is_empty());

    // Following it is a new request, checked like any other.
    let resp = host.probe(&format!("fetch {target}"));
    assert_eq!(meta(&resp, "error"), Some("HTTP-request-denied"), "{resp}");
    assert!(elsewhere.hits().is_empty(), "{:?}", elsewhere.hits());
    assert_eq!(origin.hits().len(), 1);
    assert_no_secret(&host);
}

#[test]
fn websocket_follows_the_same_policy_and_key_rules() {
    let origin = Echo::start("origin", "127.0.0.1");
    let same_host = Echo::start("same-host", "127.0.0.1");
    let other = Echo::start("other-host", "127.0.0.2");
    let mut host = HostBuilder::new().origin(&origin).spawn();

    // To the origin: the host's key, not the guest's forged header.
    let resp = host.probe(&format!("ws {}", origin.ws_url("/ws")));
    assert_eq!(meta(&resp, "connect"), Some("ok"), "{resp}");
    assert_eq!(
        meta(&resp, "reply"),
        Some("echo hello api-key=host-key"),
        "{resp}"
    );
    // Another port on the origin's host: allowed, neither key.
    let resp = host.probe(&format!("ws {}", same_host.ws_url("/ws")));
    assert_eq!(
        meta(&resp, "reply"),
        Some("echo hello api-key=absent"),
        "{resp}"
    );

    let o = origin.port();
    let p = other.port();
    for url in [
        format!("ws://127.0.0.2:{p}/ws"),
        "ws://169.254.169.254/ws".to_string(),
        format!("ws://127.0.0.1:{o}@127.0.0.2:{p}/ws"),
        format!("wss://user@127.0.0.1:{o}/ws"),
    ] {
        let resp = host.probe(&format!("ws {url}"));
        assert_eq!(
            meta(&resp, "error"),
            Some("ErrorCode::DeniedByPolicy"),
            "{url}: {resp}"
        );
    }
    assert!(other.hits().is_empty(), "{:?}", other.hits());

    let origin_hits = origin.hits();
    assert_eq!(origin_hits.len(), 1, "{origin_hits:?}");
    assert!(origin_hits[0].websocket);
    assert_eq!(origin_hits[0].api_key.as_deref(), Some(SECRET_KEY));
    let same_hits = same_host.hits();
    assert_eq!(same_hits.len(), 1);
    assert_eq!(same_hits[0].api_key, None);
    assert_no_secret(&host);
}

/// Without its origin set, the provider may reach only listed hosts, and the
/// host says once what to set. Its secret header stays the host's even when
/// the operator gave it no value.
#[test]
fn without_its_origin_the_provider_reaches_only_listed_hosts() {
    let server = Echo::start("server", "127.0.0.1");
    let listed = Echo::start("listed", "127.0.0.3");
    let mut host = HostBuilder::new()
        .env(TOKEN_ENV, SECRET_KEY)
        .env(ALLOW_HOSTS_ENV, "127.0.0.3")
        .spawn();
    let resp = host.probe(&format!("fetch {}", server.url("/no-origin")));
    assert_eq!(meta(&resp, "error"), Some("HTTP-request-denied"), "{resp}");
    let resp = host.probe(&format!("fetch-with-key {}", listed.url("/listed")));
    assert_eq!(meta(&resp, "set-header"), Some("forbidden"), "{resp}");
    assert_eq!(meta(&resp, "status"), Some("200"), "{resp}");
    assert!(server.hits().is_empty(), "{:?}", server.hits());
    assert_eq!(listed.hits().len(), 1);
    assert_eq!(listed.hits()[0].api_key, None);
    let log = host.wait_log("no origin");
    let warning = log_events(&log, "WARN", ORIGIN_WARNING);
    assert_eq!(warning.len(), 1, "{log}");
    assert!(warning[0].text.contains(BASE_URL_ENV), "{log}");
    assert!(warning[0].text.contains(ALLOW_HOSTS_ENV), "{log}");
    assert!(log.contains("may reach no origin"), "{log}");
    assert_no_secret(&host);

    // Origin set, secret not: nothing to send, and still nobody else's to set.
    let mut host = HostBuilder::new().env(BASE_URL_ENV, server.url("")).spawn();
    let resp = host.probe(&format!("fetch-with-key {}", server.url("/unset")));
    assert_eq!(meta(&resp, "set-header"), Some("forbidden"), "{resp}");
    assert_eq!(meta(&resp, "status"), Some("200"), "{resp}");
    assert_eq!(server.hits().len(), 1);
    assert_eq!(server.hits()[0].api_key, None);
    assert!(!host.log().contains(ORIGIN_WARNING), "{}", host.log());
}

#[test]
fn the_lab_has_loopback_only() {
    // Documents the safety net: when the tests run in their own namespace, its
    // only interface is loopback, so a broken policy could not send traffic out.
    if !isolated() {
        return cannot_run("no private network namespace (needs root or CAP_SYS_ADMIN)");
    }
    let dev = in_lab(|| std::fs::read_to_string("/proc/thread-self/net/dev")).expect("net/dev");
    let interfaces: Vec<&str> = dev
        .lines()
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .collect();
    assert_eq!(interfaces, ["lo"], "{dev}");
}
