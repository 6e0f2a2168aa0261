//! The order of creation: sandboxes (pages of `sandbox.list`) and snapshots
//! (the newest of several with one name) sorted by when the server made them,
//! then by id. Times are compared as numbers, not as text: the server writes
//! `…:05Z` and `…:05.25Z` for two moments of one second, and `Z` sorts after
//! `.` as text.

/// Where an item stands: its creation time (seconds since the epoch and
/// nanoseconds; none first, for an item without one), then its id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub at: Option<(i64, u32)>,
    pub id: String,
}

impl Key {
    pub fn new(created_at: Option<&str>, id: &str) -> Key {
        Key {
            at: created_at.and_then(parse),
            id: id.to_string(),
        }
    }
}

/// An RFC 3339 time (`2026-12-02T03:29:36.990724Z`, `…+02:00`) as seconds
/// since the epoch and nanoseconds; none when it is not one.
pub fn parse(t: &str) -> Option<(i64, u32)> {
    let b = t.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let digits = b.get(from..from + len)?;
        digits
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| std::str::from_utf8(digits).ok()?.parse().ok())?
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let separators_ok = b[4] == b'-'
        && b[7] == b'-'
        && matches!(b[10], b'T' | b't' | b' ')
        && b[13] == b':'
        && b[16] == b':';
    if !separators_ok || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &t[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        // Nanoseconds: the first nine digits, padded.
        let kept: String = frac[..digits]
            .chars()
            .chain("000000000".chars())
            .take(9)
            .collect();
        nanos = kept.parse().ok()?;
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (h, m) = rest[1..].split_once(':')?;
            if h.len() != 2 || m.len() != 2 {
                return None;
            }
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60)
        }
    };
    let days = days_from_civil(year, month as u32, day as u32);
    Some((
        days * 86_400 + hour * 3600 + minute * 60 + second - offset,
        nanos,
    ))
}

/// Howard Hinnant's civil-to-days algorithm (proleptic Gregorian calendar).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_numbers() {
        assert_eq!(parse("1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(parse("2000-02-29T00:00:00Z"), Some((951_782_400, 0)));
        assert_eq!(
            parse("2026-11-18T11:06:40.25Z"),
            Some((1_795_000_000, 250_000_000))
        );
        assert_eq!(
            parse("2026-11-18T13:06:40.000000001+02:00"),
            Some((1_795_000_000, 1))
        );
        assert_eq!(parse("2026-11-18t11:06:40z"), Some((1_795_000_000, 0)));
        for bad in [
            "",
            "2026-11-18",
            "2026-13-18T11:06:40Z",
            "2026-11-18T11:06:40",
            "2026-11-18T11:06:40.Z",
            "2026-11-18T11:06:40+2",
            "2026/11/18T11:06:40Z",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn keys_sort_by_time_then_id() {
        // As text, "…:05Z" sorts after "…:05.25Z"; as a time it is before it.
        let a = Key::new(Some("2026-01-01T00:00:05Z"), "z");
        let b = Key::new(Some("2026-01-01T00:00:05.25Z"), "a");
        let c = Key::new(Some("2026-01-01T00:00:05.25Z"), "b");
        let none = Key::new(None, "zz");
        let mut keys = vec![c.clone(), b.clone(), none.clone(), a.clone()];
        keys.sort();
        assert_eq!(keys, [none, a, b, c]);
    }
}
