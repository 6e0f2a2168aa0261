//! A hostile provider that breaks the contract rather than the limits (those are
//! limits.rs, the network gate is network.rs): garbage answers, streams that
//! never deliver or go on after the end, readers that lie about their size,
//! flooding the host's memo, DNS names that lead to forbidden addresses. Each is
//! contained: one well-formed answer, bounded time and memory, and the host
//! keeps serving.

mod common;

use common::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn still_serving(host: &mut Host) {
    assert_eq!(result(&host.probe("echo ok"))["sandbox_id"], "ok");
    assert!(host.alive());
}

#[test]
fn garbage_answers_come_out_as_one_valid_json_line_or_a_fault() {
    let mut host = HostBuilder::new().args(["--max-memory-mib", "64"]).spawn();

    let resp = host.probe("garbage");
    let info = result(&resp);
    let mut nasty: String = (0u8..0x20).map(char::from).collect();
    nasty.push_str("\"\\/\u{7f}\u{2028}\u{2029}\u{feff}\u{fffd}é中😀</script>");
    assert_eq!(info["sandbox_id"], nasty.as_str());
    assert_eq!(info["state"], "\u{0}\u{1}");
    // Duplicate keys collapse (a JSON object has one value per key); the 1 MiB
    // value arrives whole.
    let metadata = info["metadata"].as_object().expect("metadata");
    assert_eq!(metadata[&nasty].as_str().map(str::len), Some(1 << 20));
    assert!(metadata.len() >= 2500, "{}", metadata.len());
    // Every line on stdout is one JSON value (the reader thread would have
    // flagged anything else); the raw line has no control characters.
    for line in host.transcript().lines() {
        assert!(
            !line.bytes().any(|b| b < 0x20),
            "a raw control byte on stdout"
        );
    }

    // A string that is not UTF-8 cannot cross the component boundary.
    let (code, epp, message) = error(&host.probe("bad-utf8"));
    assert_eq!((code, epp.as_str()), (-32000, "E9001"), "{message}");

    // An answer bigger than the guest's memory cap: stopped by the cap.
    let (_, epp, message) = error(&host.probe("huge 100"));
    assert_eq!(epp, "E9001");
    assert!(message.contains("--max-memory-mib"), "{message}");
    // A big but allowed one arrives whole.
    let resp = host.probe("huge 8");
    assert_eq!(
        result(&resp)["sandbox_id"].as_str().map(str::len),
        Some(8 << 20)
    );
    still_serving(&mut host);
}

#[test]
fn a_stream_without_events_is_stopped() {
    let mut host = HostBuilder::new().spawn();
    // No `timeout`: without the contract check nothing would ever end this.
    for stream in [false, true] {
        let began = Instant::now();
        let resp = host.call(
            "commands.run",
            json!({"sandbox_id": "s", "cmd": "empty-batches", "stream": stream}),
        );
        let (code, epp, message) = error(&resp);
        assert_eq!((code, epp.as_str()), (-32000, "E9001"), "{resp}");
        assert!(message.contains("no event"), "{message}");
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{:?}",
            began.elapsed()
        );
    }
    // The same for a reader that hands out nothing, forever.
    let began = Instant::now();
    let resp = host.call(
        "files.read",
        json!({"sandbox_id": "s", "path": "empty-chunks"}),
    );
    let (code, epp, message) = error(&resp);
    assert_eq!((code, epp.as_str()), (-32000, "E9001"), "{resp}");
    assert!(message.contains("empty"), "{message}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    still_serving(&mut host);
}

#[test]
fn events_after_the_exit_are_ignored() {
    let mut host = HostBuilder::new().spawn();
    let resp = host.call(
        "commands.run",
        json!({"sandbox_id": "s", "cmd": "after-exit"}),
    );
    let out = result(&resp);
    assert_eq!(out["exit_code"], 3, "{resp}");
    assert_eq!(out["stdout"], "", "{resp}");

    let run = host.request(
        "commands.run",
        json!({"sandbox_id": "s", "cmd": "after-exit", "stream": true}),
    );
    let seen = host.collect_until("the streamed run's answer", |m| {
        is_response(m) && m["id"] == run
    });
    assert_eq!(result(seen.last().expect("answer"))["exit_code"], 3);
    assert!(
        !seen.iter().any(|m| m["method"] == "commands.output"),
        "output after the exit was forwarded: {seen:?}"
    );
    // Nothing for that request once it is answered.
    let late = host.wait_for_within(Duration::from_millis(300), |m| {
        m["params"]["request_id"] == run
    });
    assert!(late.is_none(), "{late:?}");
    still_serving(&mut host);
}

#[test]
fn a_reader_that_lies_about_its_size_is_still_capped() {
    let mut host = HostBuilder::new()
        .args(["--max-output-bytes", &(2 << 20).to_string()])
        .spawn();
    // Says 1 byte, delivers 3 MiB: the cap counts what arrives.
    let resp = host.call(
        "files.read",
        json!({"sandbox_id": "s", "path": "liar 3 1048576"}),
    );
    let (code, _, message) = error(&resp);
    assert_eq!(code, -32602, "{resp}");
    assert!(message.contains("--max-output-bytes"), "{message}");
    // Says 1 byte, delivers 10: fine, the content is what arrived.
    let resp = host.call("files.read", json!({"sandbox_id": "s", "path": "liar 2 5"}));
    assert_eq!(result(&resp)["content"], "aaaaabbbbb");
    still_serving(&mut host);
}

#[test]
fn a_reader_that_overfills_the_hosts_sink_is_refused() {
    let mut host = HostBuilder::new().spawn();
    // `read-into` writes one byte more than the `max` it was given: the sink
    // refuses the write (the host's memory per call stays at `max`) and the
    // provider's error says so, for the collected and the streamed read alike.
    let resp = host.call("files.read", json!({"sandbox_id": "s", "path": "overfill"}));
    let (code, epp, message) = error(&resp);
    assert_eq!((code, epp.as_str()), (-32000, "E5001"), "{resp}");
    assert!(
        message.contains("sink is full") && message.contains("at most `max` bytes"),
        "{message}"
    );
    let read = host.request(
        "files.read",
        json!({"sandbox_id": "s", "path": "overfill", "stream": true, "encoding": "base64"}),
    );
    let seen = host.collect_until("the streamed read's answer", |m| {
        is_response(m) && m["id"] == read
    });
    assert!(
        !seen.iter().any(|m| m["method"] == "files.data"),
        "bytes of a refused read were forwarded: {seen:?}"
    );
    let (_, epp, message) = error(seen.last().expect("answer"));
    assert_eq!(epp, "E5001", "{message}");
    still_serving(&mut host);
}

#[test]
fn flooding_the_memo_costs_the_host_little_memory() {
    let mut host = HostBuilder::new().spawn();
    still_serving(&mut host);
    let before = rss_kib(host.pid());
    // 5000 entries of 64 KiB: 320 MiB if the memo kept them all.
    for _ in 0..5 {
        let resp = host.probe("memo-flood 1000 65536");
        result(&resp);
    }
    let after = rss_kib(host.pid());
    let grew_mib = after.saturating_sub(before) / 1024;
    eprintln!("memo flood: host RSS {before} KiB -> {after} KiB (+{grew_mib} MiB)");
    assert!(
        grew_mib < 64,
        "the memo flood grew the host by {grew_mib} MiB"
    );
    // The memo still works for ordinary entries.
    let resp = host.probe("memo");
    assert_eq!(meta(&resp, "after-put"), Some("remembered"), "{resp}");
    still_serving(&mut host);
}

/// DNS answers are checked too: a name the policy allows by a wildcard cannot
/// lead to a link-local or metadata address, however it resolves; a name that
/// is not allowed is refused whatever it resolves to.
#[test]
fn names_that_resolve_to_forbidden_addresses_are_refused() {
    if !can_unshare() {
        return cannot_run(
            "cannot make network + mount namespaces here (`unshare --net --mount` needs root \
             or CAP_SYS_ADMIN)",
        );
    }
    let hosts = "\
127.0.0.1 localhost
169.254.169.254 meta.sandboxes.test
fe80::1 ll6.sandboxes.test
127.0.0.1 mixed.sandboxes.test
169.254.1.1 mixed.sandboxes.test
127.0.0.1 fine.sandboxes.test
127.0.0.2 loop.test
169.254.169.254 exact.test
";
    let mut host = HostBuilder::new()
        .private_hosts(hosts)
        .env(BASE_URL_ENV, "http://127.0.0.1:9")
        .args(["--allow-host", "*.sandboxes.test"])
        .spawn();
    let fetch = |host: &mut Host, url: &str| -> Value { host.probe(&format!("fetch {url}")) };

    // Allowed by the wildcard, refused once resolved (after DNS, before connecting).
    for name in ["meta", "ll6", "mixed"] {
        let resp = fetch(&mut host, &format!("http://{name}.sandboxes.test:8080/"));
        assert_eq!(
            meta(&resp, "error"),
            Some("HTTP-request-denied"),
            "{name}: {resp}"
        );
    }
    // Logged as the policy's refusal of a resolved address, naming the destination.
    let denied = |log: &str| {
        log_events(log, "WARN", "outbound request denied after name resolution")
            .into_iter()
            .filter(|l| l.text.contains(".sandboxes.test:8080"))
            .count()
    };
    let log = host.wait_log_until(|l| denied(l) >= 3);
    assert_eq!(denied(&log), 3, "{log}");
    assert!(log.contains("resolves to the link-local address"), "{log}");
    // Terminals (WebSocket) follow the same rule.
    let resp = host.probe("ws ws://meta.sandboxes.test:8080/ws");
    assert_eq!(
        meta(&resp, "error"),
        Some("ErrorCode::DeniedByPolicy"),
        "{resp}"
    );
    // Resolving to loopback is fine for an allowed name: the request goes out
    // (and finds nothing listening in this empty network).
    let resp = fetch(&mut host, "http://fine.sandboxes.test:8080/");
    assert_ne!(meta(&resp, "error"), Some("HTTP-request-denied"), "{resp}");
    // Names not allowed are refused before resolution, loopback or not.
    for url in [
        "http://loop.test:8080/",
        "http://exact.test/",
        "http://ip6-localhost:9/",
    ] {
        let resp = fetch(&mut host, url);
        assert_eq!(
            meta(&resp, "error"),
            Some("HTTP-request-denied"),
            "{url}: {resp}"
        );
    }
    // `localhost` is the origin's host (127.0.0.1), any port: the request goes
    // out and finds nothing listening.
    let resp = fetch(&mut host, "http://localhost:10/");
    assert_ne!(meta(&resp, "error"), Some("HTTP-request-denied"), "{resp}");
    still_serving(&mut host);
}
