//! Wall-clock time as RFC 3339, without a date library.

/// Seconds since the Unix epoch, from `wasi:clocks/wall-clock`.
pub fn now_unix() -> u64 {
    wasip2::clocks::wall_clock::now().seconds
}

/// `YYYY-MM-DDTHH:MM:SSZ` for a Unix time.
pub fn rfc3339(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `ms` as seconds for a message: `30`, `1.5`, `0.25`, `0.001`, as `{}` of
/// an `f64` would print them. By integers: float formatting would add core's
/// float-printing tables to the data image every instance maps (profiling.md).
pub fn seconds(ms: u64) -> String {
    let (whole, milli) = (ms / 1000, ms % 1000);
    if milli == 0 {
        return whole.to_string();
    }
    let fraction = format!("{milli:03}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

/// A monotonic clock reading in milliseconds.
pub fn monotonic_ms() -> u64 {
    wasip2::clocks::monotonic_clock::now() / 1_000_000
}

/// Blocks for `ms` milliseconds.
pub fn sleep_ms(ms: u64) {
    wasip2::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
    }

    #[test]
    fn formats_seconds_as_a_float_would() {
        for ms in [
            0, 1, 10, 250, 999, 1000, 1500, 1234, 30_000, 86_400_001, 3_600_000,
        ] {
            assert_eq!(
                super::seconds(ms),
                (ms as f64 / 1000.0).to_string(),
                "{ms} ms"
            );
        }
    }
}
