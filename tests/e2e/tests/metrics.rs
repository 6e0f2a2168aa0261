//! sandbox.metrics: execd's CPU and memory figures, checked against what the
//! sandbox itself says (`nproc`, /proc/meminfo), and the time it was measured.

use epp_e2e::{Host, Mode, both_modes, sh};
use serde_json::json;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Seconds since the epoch of an RFC 3339 UTC time with milliseconds
/// (`2026-12-02T03:24:06.123Z`).
fn unix_seconds(rfc3339: &str) -> f64 {
    let (date, time) = rfc3339.split_once('T').expect("a date and a time");
    let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let t = time.strip_suffix('Z').expect("UTC");
    let (hms, frac) = t.split_once('.').unwrap_or((t, "0"));
    let h: Vec<i64> = hms.split(':').map(|x| x.parse().unwrap()).collect();
    // Days from civil (Howard Hinnant's algorithm).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + h[0] * 3600 + h[1] * 60 + h[2]) as f64
        + format!("0.{frac}").parse::<f64>().unwrap()
}

fn metrics(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let asked = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = Instant::now();
    let m = host.ok("sandbox.metrics", json!({"sandbox_id": id}));
    let took = started.elapsed();
    // execd samples the CPU for a second before it answers.
    assert!(
        took >= Duration::from_millis(900),
        "answered in {took:?}: {m}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");

    // execd counts the CPUs it may use: at least one, at most all there are.
    let all: f64 = sh(&host, &id, "nproc --all").trim().parse().unwrap();
    let cpus = m["cpu_count"].as_f64().unwrap();
    assert!(
        cpus >= 1.0 && cpus <= all && cpus.fract() == 0.0,
        "{m} (nproc --all: {all})"
    );
    let pct = m["cpu_used_pct"].as_f64().unwrap();
    assert!((0.0..=100.0).contains(&pct), "{m}");
    let total_kib: f64 = sh(&host, &id, "awk '/^MemTotal:/ {print $2}' /proc/meminfo")
        .trim()
        .parse()
        .unwrap();
    let total = m["memory_total_mib"].as_f64().unwrap();
    assert!(
        (total - total_kib / 1024.0).abs() < 1.0,
        "{m} vs {total_kib} KiB"
    );
    let used = m["memory_used_mib"].as_f64().unwrap();
    assert!(used > 0.0 && used <= total, "{m}");
    let at = unix_seconds(m["timestamp"].as_str().unwrap());
    assert!(
        at >= asked - 5.0 && at <= asked + took.as_secs_f64() + 5.0,
        "measured at {at}, asked at {asked}: {m}"
    );

    let e = host.fails(
        "sandbox.metrics",
        json!({"sandbox_id": "no-such-sandbox"}),
        "E4004",
    );
    assert!(e.message.contains("no-such-sandbox"), "{e:?}");
}
both_modes!(cpu_memory_and_time, super::metrics);
