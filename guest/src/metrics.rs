//! sandbox.metrics over execd's `GET /metrics`: CPU (sampled by execd over
//! one second, so the answer takes at least that) and memory of the sandbox,
//! as execd sees them.

use crate::bindings::exports::abx::epp::infra::MetricsSample;
use crate::error::{Result, upstream};
use crate::execd::Execd;
use crate::http::Timeouts;
use crate::time::rfc3339;
use serde::Deserialize;
use std::time::Duration;

/// execd answers after its one-second CPU sample: ten seconds leave room for
/// a loaded sandbox without hiding one that does not answer at all.
const METRICS: Timeouts = Timeouts {
    connect: Duration::from_secs(10),
    first_byte: Duration::from_secs(10),
    between_bytes: Duration::from_secs(10),
};

/// `GET /metrics`; `timestamp` in Unix milliseconds.
#[derive(Deserialize)]
struct Metrics {
    cpu_count: f64,
    cpu_used_pct: f64,
    mem_total_mib: f64,
    mem_used_mib: f64,
    timestamp: i64,
}

pub fn get(sandbox_id: &str) -> Result<MetricsSample> {
    let mut execd = Execd::connect(sandbox_id)?;
    let resp = execd.send(|e| Ok(e.request("GET", "/metrics")?.timeouts(METRICS)), &[])?;
    let subject = format!("the metrics of sandbox {sandbox_id}");
    let m: Metrics = execd.json(execd.check(resp, &subject)?, &subject)?;
    sample(m).ok_or_else(|| {
        upstream(format!(
            "{} sent metrics that cannot be right (a negative or non-finite number, or a time \
             before 1970); retry, and report it if it persists",
            execd.target()
        ))
    })
}

/// The WIT sample of execd's answer, if its numbers make sense.
fn sample(m: Metrics) -> Option<MetricsSample> {
    let numbers = [m.cpu_count, m.cpu_used_pct, m.mem_total_mib, m.mem_used_mib];
    if numbers.iter().any(|n| !n.is_finite() || *n < 0.0) || m.timestamp < 0 {
        return None;
    }
    Some(MetricsSample {
        cpu_count: m.cpu_count,
        cpu_used_pct: m.cpu_used_pct,
        memory_total_mib: m.mem_total_mib,
        memory_used_mib: m.mem_used_mib,
        timestamp: rfc3339_ms(m.timestamp as u64),
    })
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`: execd measures in milliseconds.
fn rfc3339_ms(ms: u64) -> String {
    let seconds = rfc3339(ms / 1000);
    format!("{}.{:03}Z", seconds.trim_end_matches('Z'), ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execd_metrics_become_a_sample() {
        let m: Metrics = serde_json::from_str(
            r#"{"cpu_count":2,"cpu_used_pct":12.5,"mem_total_mib":3933.2,"mem_used_mib":512,"timestamp":1795000000123}"#,
        )
        .unwrap();
        let s = sample(m).unwrap();
        assert_eq!((s.cpu_count, s.cpu_used_pct), (2.0, 12.5));
        assert_eq!((s.memory_total_mib, s.memory_used_mib), (3933.2, 512.0));
        assert_eq!(s.timestamp, "2026-11-18T11:06:40.123Z");
        let bad: Metrics = serde_json::from_str(
            r#"{"cpu_count":2,"cpu_used_pct":-1,"mem_total_mib":1,"mem_used_mib":1,"timestamp":1}"#,
        )
        .unwrap();
        assert!(sample(bad).is_none());
    }
}
