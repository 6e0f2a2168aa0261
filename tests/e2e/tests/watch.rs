//! files.watch: events for created, written, chmod'ed and removed files within the
//! bound, recursive or not; a missing path; cancel; a sandbox killed under a watch;
//! and the figures (event latency, what an idle watch costs).

use epp_e2e::{FaultProxy, Host, HostBuilder, Mode, both_modes, unique, workdir};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

/// How late an event may be (the provider's bound is 1 s at its default interval).
const BOUND: Duration = Duration::from_secs(2);

/// The sandbox's working directory is a folder of this machine on the testbed: a
/// fresh subfolder, to change files in directly (so the change's instant is exact).
fn fresh_dir(host: &Host, id: &str) -> String {
    let dir = format!("{}/{}", workdir(host, id), unique("watch"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts a watch and waits until it sees changes (a marker file created until one
/// is reported), so what the test changes next is measured against a live watch.
fn start(host: &Host, id: &str, dir: &str, recursive: bool) -> Value {
    let req = host.send(
        "files.watch",
        json!({"sandbox_id": id, "path": dir, "recursive": recursive}),
    );
    until_live(host, &req, |n| {
        let marker = format!("{dir}/.ready-{n}");
        std::fs::write(&marker, b"").unwrap();
        ("create", marker)
    });
    req
}

/// Waits until watch `req` reports changes: `poke(n)` makes the n-th change and
/// says which event (kind, path) shows it, and is called again each time that
/// event does not come within 700 ms (a change made before the watch's first
/// listing is never reported).
fn until_live(host: &Host, req: &Value, mut poke: impl FnMut(u32) -> (&'static str, String)) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in 0.. {
        let (kind, path) = poke(n);
        if host
            .wait_note(Duration::from_millis(700), |m| {
                m["method"] == "files.event"
                    && m["params"]["request_id"] == *req
                    && m["params"]["kind"] == kind
                    && m["params"]["path"] == path.as_str()
            })
            .is_some()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the watch never reported a change; host log:\n{}",
            host.stderr()
        );
    }
}

/// Waits for the event `kind` on `path` of watch `req`; how long after `since` it came.
fn seen(host: &Host, req: &Value, kind: &str, path: &str, since: Instant) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = host
            .notes_for("files.event", req)
            .into_iter()
            .find(|(at, n)| {
                *at >= since && n["params"]["kind"] == kind && n["params"]["path"] == path
            });
        if let Some((at, _)) = found {
            return at - since;
        }
        assert!(
            Instant::now() < deadline,
            "no `{kind}` event for {path}; events: {:?}",
            host.notes_for("files.event", req)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn events_since(host: &Host, req: &Value, since: Instant) -> Vec<(String, String)> {
    host.notes_for("files.event", req)
        .into_iter()
        .filter(|(at, _)| *at >= since)
        .map(|(_, n)| {
            (
                n["params"]["kind"].as_str().unwrap().to_string(),
                n["params"]["path"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn cancel(host: &Host, req: &Value) {
    host.ok("epp.cancel", json!({"id": req}));
    let e = host
        .wait(req, Duration::from_secs(10))
        .expect_err("a cancelled watch");
    assert_eq!(e.epp.as_str(), "E4999", "{e:?}");
}

fn changes_are_reported(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let dir = fresh_dir(&host, &id);
    std::fs::create_dir(format!("{dir}/sub")).unwrap();
    let req = start(&host, &id, &dir, false);

    let file = format!("{dir}/a.txt");
    let t = Instant::now();
    std::fs::write(&file, b"one").unwrap();
    let created = seen(&host, &req, "create", &file, t);

    let t = Instant::now();
    std::fs::write(&file, b"one two").unwrap();
    let written = seen(&host, &req, "write", &file, t);

    let t = Instant::now();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let chmod = seen(&host, &req, "chmod", &file, t);

    // Not recursive: a change inside `sub` is not reported, nor is `sub` written.
    let t = Instant::now();
    let sub_changed = t;
    std::fs::write(format!("{dir}/sub/deep.txt"), b"x").unwrap();
    let renamed = format!("{dir}/b.txt");
    std::fs::rename(&file, &renamed).unwrap();
    let moved_in = seen(&host, &req, "create", &renamed, t);
    assert!(seen(&host, &req, "remove", &file, t) <= moved_in + BOUND);

    let t = Instant::now();
    std::fs::remove_file(&renamed).unwrap();
    let removed = seen(&host, &req, "remove", &renamed, t);
    // That removal comes from a listing taken after `sub/deep.txt` was written,
    // and a watch's events arrive in order: anything it had to say about `sub`
    // has arrived by now.
    let all = events_since(&host, &req, sub_changed);
    let sub = format!("{dir}/sub");
    assert!(
        all.iter()
            .all(|(_, p)| !p.starts_with(&format!("{sub}/")) && *p != sub),
        "a non-recursive watch reported inside a subdirectory: {all:?}"
    );

    for (what, took) in [
        ("create", created),
        ("write", written),
        ("chmod", chmod),
        ("rename (create)", moved_in),
        ("remove", removed),
    ] {
        assert!(took <= BOUND, "{what} reported after {took:?}");
    }
    cancel(&host, &req);
}
both_modes!(create_write_chmod_remove, super::changes_are_reported);

fn recursive_sees_subdirectories(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let dir = fresh_dir(&host, &id);
    let req = start(&host, &id, &dir, true);

    let t = Instant::now();
    std::fs::create_dir_all(format!("{dir}/x/y")).unwrap();
    std::fs::write(format!("{dir}/x/y/z.txt"), b"deep").unwrap();
    let took = seen(&host, &req, "create", &format!("{dir}/x/y/z.txt"), t);
    assert!(took <= BOUND, "{took:?}");
    seen(&host, &req, "create", &format!("{dir}/x"), t);
    seen(&host, &req, "create", &format!("{dir}/x/y"), t);

    let t = Instant::now();
    std::fs::write(format!("{dir}/x/y/z.txt"), b"deeper").unwrap();
    assert!(seen(&host, &req, "write", &format!("{dir}/x/y/z.txt"), t) <= BOUND);

    // Removing the tree: children before their directory.
    let t = Instant::now();
    std::fs::remove_dir_all(format!("{dir}/x")).unwrap();
    seen(&host, &req, "remove", &format!("{dir}/x"), t);
    let order: Vec<String> = events_since(&host, &req, t)
        .into_iter()
        .filter(|(k, _)| k == "remove")
        .map(|(_, p)| p)
        .collect();
    assert_eq!(
        order,
        [
            format!("{dir}/x/y/z.txt"),
            format!("{dir}/x/y"),
            format!("{dir}/x")
        ]
    );

    // The watched directory itself removed: reported, and the watch ends.
    let t = Instant::now();
    std::fs::remove_dir_all(&dir).unwrap();
    let answer = host.wait(&req, Duration::from_secs(10));
    assert_eq!(answer.expect("the watch ends"), json!({}));
    assert!(seen(&host, &req, "remove", &dir, t) <= BOUND);
}
both_modes!(recursive, super::recursive_sees_subdirectories);

fn missing_path_and_a_file(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let dir = fresh_dir(&host, &id);
    let t = Instant::now();
    let e = host.fails(
        "files.watch",
        json!({"sandbox_id": id, "path": format!("{dir}/nope")}),
        "E4004",
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(e.message.contains("does not exist"), "{e:?}");
    host.fails(
        "files.watch",
        json!({"sandbox_id": "no-such-sandbox", "path": "/tmp"}),
        "E4004",
    );
    host.fails(
        "files.watch",
        json!({"sandbox_id": id, "path": ""}),
        "E1001",
    );

    // A file can be watched too: its writes, then its removal end the watch.
    // Live once it reports a chmod (its mode flipped until one is), which the
    // write measured next cannot be mistaken for.
    let file = format!("{dir}/one.txt");
    std::fs::write(&file, b"1").unwrap();
    let req = host.send("files.watch", json!({"sandbox_id": id, "path": file}));
    until_live(&host, &req, |n| {
        let mode = if n % 2 == 0 { 0o600 } else { 0o644 };
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        ("chmod", file.clone())
    });
    let t = Instant::now();
    std::fs::write(&file, b"12").unwrap();
    assert!(seen(&host, &req, "write", &file, t) <= BOUND);
    let t = Instant::now();
    std::fs::remove_file(&file).unwrap();
    assert!(seen(&host, &req, "remove", &file, t) <= BOUND);
    assert_eq!(
        host.wait(&req, Duration::from_secs(10)).expect("ends"),
        json!({})
    );
}
both_modes!(missing_path_is_e4004, super::missing_path_and_a_file);

fn killed_sandbox_ends_the_watch(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let dir = fresh_dir(&host, &id);
    let req = start(&host, &id, &dir, false);
    host.ok("sandbox.kill", json!({"sandbox_id": id}));
    let t = Instant::now();
    let e = host
        .wait(&req, Duration::from_secs(20))
        .expect_err("a watch of a killed sandbox");
    let took = t.elapsed();
    assert_eq!(e.epp.as_str(), "E4004", "{e:?}");
    assert!(e.message.contains(&id), "{e:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}
both_modes!(killed_sandbox, super::killed_sandbox_ends_the_watch);

fn cancel_ends_the_watch(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let dir = fresh_dir(&host, &id);
    let req = start(&host, &id, &dir, true);
    let t = Instant::now();
    cancel(&host, &req);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // The host still serves, and a new watch works.
    let again = start(&host, &id, &dir, false);
    cancel(&host, &again);
}
both_modes!(cancel, super::cancel_ends_the_watch);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The figures for BENCHMARKS.md, through a proxy that counts what reaches execd
/// (server-proxy mode sends every execd request through it).
#[test]
fn figures() {
    let proxy = FaultProxy::testbed();
    let host = HostBuilder::new(Mode::Proxy).via(&proxy).spawn();
    let id = host.create_sandbox();
    let dir = fresh_dir(&host, &id);
    for n in 0..20 {
        std::fs::write(format!("{dir}/f{n}"), b"0").unwrap();
    }
    let req = start(&host, &id, &dir, false);

    // Idle: nothing changes for 6 s.
    let lists = || proxy.count("GET", "/directories/list");
    let all = || proxy.seen().len();
    let (l0, a0, t0) = (lists(), all(), Instant::now());
    std::thread::sleep(Duration::from_secs(6));
    let (l1, a1, secs) = (lists(), all(), t0.elapsed().as_secs_f64());
    let per_min = (l1 - l0) as f64 * 60.0 / secs;
    let others = a1 - a0 - (l1 - l0);
    assert_eq!(others, 0, "an idle watch sent other requests");
    assert!(per_min <= 130.0, "{per_min} listings a minute");

    // Latency of 20 writes, spaced so each lands in its own interval at a random phase.
    let mut took = Vec::new();
    for n in 0..20 {
        std::thread::sleep(Duration::from_millis(300 + (n * 37 % 500)));
        let path = format!("{dir}/f{n}");
        let t = Instant::now();
        std::fs::write(&path, format!("{n}{n}")).unwrap();
        took.push(seen(&host, &req, "write", &path, t));
    }
    took.sort();
    let (p50, p99) = (percentile(&took, 0.5), percentile(&took, 0.99));
    println!(
        "files.watch (polling, proxy mode, 21 entries): idle {per_min:.0} listings/min and nothing \
         else; write→event p50 {:.0} ms, p99 {:.0} ms (n = 20, max {:.0} ms)",
        p50.as_secs_f64() * 1000.0,
        p99.as_secs_f64() * 1000.0,
        took.last().unwrap().as_secs_f64() * 1000.0
    );
    assert!(p99 <= BOUND, "{took:?}");
    cancel(&host, &req);
}

/// The interval is a provider setting: a slower watch costs fewer listings and
/// still reports changes, and a bad value is E2001 naming the variable.
#[test]
fn interval_is_a_setting() {
    let proxy = FaultProxy::testbed();
    let host = HostBuilder::new(Mode::Proxy)
        .via(&proxy)
        .env("ABX_OPENSANDBOX_WATCH_INTERVAL_MS", "2000")
        .spawn();
    let id = host.create_sandbox();
    let dir = fresh_dir(&host, &id);
    let req = start(&host, &id, &dir, false);
    let lists = || proxy.count("GET", "/directories/list");
    let (l0, t0) = (lists(), Instant::now());
    std::thread::sleep(Duration::from_secs(6));
    let n = lists() - l0;
    assert!(
        (2..=4).contains(&n),
        "{n} listings in {:?} at a 2 s interval",
        t0.elapsed()
    );
    let path = format!("{dir}/late");
    let t = Instant::now();
    std::fs::write(&path, b"x").unwrap();
    let took = seen(&host, &req, "create", &path, t);
    assert!(took <= Duration::from_millis(3000), "{took:?}");
    cancel(&host, &req);

    let bad = HostBuilder::new(Mode::Direct)
        .env("ABX_OPENSANDBOX_WATCH_INTERVAL_MS", "5")
        .spawn();
    let e = bad.fails("sandbox.list", json!({}), "E2001");
    assert!(
        e.message.contains("ABX_OPENSANDBOX_WATCH_INTERVAL_MS"),
        "{e:?}"
    );
}
