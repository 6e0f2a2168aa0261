//! `/metrics` and `/metrics/watch`: host CPU (sampled over 1 s from /proc/stat) and memory
//! (/proc/meminfo, "used" = total − free − buffers − cached as gopsutil computes it).

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::web::{self as h, RUNTIME_ERROR, Resp};

#[derive(Serialize)]
struct Metrics {
    #[serde(serialize_with = "go_float")]
    cpu_count: f64,
    #[serde(serialize_with = "go_float")]
    cpu_used_pct: f64,
    #[serde(serialize_with = "go_float")]
    mem_total_mib: f64,
    #[serde(serialize_with = "go_float")]
    mem_used_mib: f64,
    timestamp: i64,
}

/// Go writes integral floats without a fraction (`2`, not `2.0`).
fn go_float<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).unwrap_or(&0);
    Some((total, idle))
}

fn meminfo() -> Option<(f64, f64)> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<f64> {
        info.lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse::<f64>()
            .ok()
    };
    let total = field("MemTotal:")?;
    let used = total - field("MemFree:")? - field("Buffers:")? - field("Cached:")?;
    Some((total / 1024.0, used / 1024.0))
}

async fn read_metrics() -> Result<Metrics, String> {
    let timestamp = h::unix_ms(SystemTime::now());
    let a = cpu_times().ok_or("failed to get CPU percent: cannot read /proc/stat")?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let b = cpu_times().ok_or("failed to get CPU percent: cannot read /proc/stat")?;
    let (dt, di) = (b.0.saturating_sub(a.0), b.1.saturating_sub(a.1));
    let pct = if dt == 0 {
        0.0
    } else {
        100.0 * (dt - di.min(dt)) as f64 / dt as f64
    };
    let (total, used) = meminfo().ok_or("failed to get memory info: cannot read /proc/meminfo")?;
    Ok(Metrics {
        cpu_count: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
        cpu_used_pct: pct,
        mem_total_mib: total,
        mem_used_mib: used,
        timestamp,
    })
}

/// GET /metrics (takes about a second, like execd).
pub async fn get() -> Resp {
    match read_metrics().await {
        Ok(m) => h::json(StatusCode::OK, &m),
        Err(e) => h::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            RUNTIME_ERROR,
            format!("error reading runtime metrics. {e}"),
        ),
    }
}

/// GET /metrics/watch: one JSON object + `\n` roughly every 2 s until the client leaves.
pub fn watch() -> Resp {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut line = match read_metrics().await {
                Ok(m) => h::go_json(&m),
                Err(e) => h::go_json(&std::collections::BTreeMap::from([("error", e)])),
            };
            line.push(b'\n');
            if tx.send(Ok(Bytes::from(line))).await.is_err() {
                return;
            }
        }
    });
    let mut r = h::response(
        StatusCode::OK,
        Some("text/event-stream"),
        h::channel_body(rx),
    );
    let hd = r.headers_mut();
    hd.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    hd.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}
