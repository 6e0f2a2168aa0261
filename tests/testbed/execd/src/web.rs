//! HTTP plumbing shared by all handlers: body types, execd's response shapes (Gin's
//! `c.JSON` output, `{code,message}` errors), query parsing and Go-compatible formatting.

use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use serde::Serialize;
use tokio::sync::mpsc;

pub type Body = UnsyncBoxBody<Bytes, io::Error>;
pub type Resp = Response<Body>;

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

pub fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A streaming body fed by a channel; the body ends when every sender is dropped.
pub fn channel_body(mut rx: mpsc::Receiver<io::Result<Bytes>>) -> Body {
    StreamBody::new(futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data)))
    }))
    .boxed_unsync()
}

/// Same for an unbounded channel (SSE: producers must never block on a slow client, or a
/// command's timeout could not fire).
pub fn unbounded_body(mut rx: mpsc::UnboundedReceiver<Bytes>) -> Body {
    StreamBody::new(futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }))
    .boxed_unsync()
}

pub fn response(status: StatusCode, content_type: Option<&'static str>, body: Body) -> Resp {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    if let Some(ct) = content_type {
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    }
    r
}

/// `c.Status(200)`: the empty success answer of most execd endpoints.
pub fn ok() -> Resp {
    response(StatusCode::OK, None, empty())
}

/// JSON exactly as Go's `encoding/json` writes it: compact and HTML-escaped (`<`, `>`, `&`,
/// U+2028 and U+2029 as `\uXXXX`). serde_json already matches Go for everything else,
/// and those characters can only occur inside strings, so escaping them afterwards is safe.
pub fn go_json<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    let s = serde_json::to_string(v).expect("serialisable");
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.into_bytes()
}

pub fn json<T: Serialize + ?Sized>(status: StatusCode, v: &T) -> Resp {
    response(
        status,
        Some("application/json; charset=utf-8"),
        full(go_json(v)),
    )
}

#[derive(Serialize)]
pub struct ErrorBody<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    pub code: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub message: &'a str,
}

/// execd's `RespondError`: `{"code","message"}`, both omitted when empty.
/// execd's 500 `RUNTIME_ERROR` answer.
pub fn runtime_error(message: impl AsRef<str>) -> Resp {
    error(StatusCode::INTERNAL_SERVER_ERROR, RUNTIME_ERROR, message)
}

pub fn error(status: StatusCode, code: &str, message: impl AsRef<str>) -> Resp {
    json(
        status,
        &ErrorBody {
            code,
            message: message.as_ref(),
        },
    )
}

/// Go's `http.Error`: plain text plus a newline.
pub fn text_error(status: StatusCode, msg: &str) -> Resp {
    let mut r = response(
        status,
        Some("text/plain; charset=utf-8"),
        full(format!("{msg}\n")),
    );
    r.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

pub const INVALID_REQUEST: &str = "INVALID_REQUEST_BODY";
pub const MISSING_QUERY: &str = "MISSING_QUERY";
pub const RUNTIME_ERROR: &str = "RUNTIME_ERROR";
pub const FILE_NOT_FOUND: &str = "FILE_NOT_FOUND";
pub const CONTEXT_NOT_FOUND: &str = "CONTEXT_NOT_FOUND";

pub async fn read_body(body: Incoming) -> Result<Bytes, String> {
    body.collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| e.to_string())
}

/// Decodes a JSON body the way Go's `json.NewDecoder(body).Decode(&v)` does: only the first
/// value counts, an empty body is the error "EOF", `null` leaves the target at its default.
pub fn decode_json<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, String> {
    let mut it = serde_json::Deserializer::from_slice(body).into_iter::<Option<T>>();
    match it.next() {
        None => Err("EOF".into()),
        Some(Ok(v)) => Ok(v.unwrap_or_default()),
        Some(Err(e)) if e.is_eof() => Err("unexpected EOF".into()),
        Some(Err(e)) => Err(e.to_string()),
    }
}

/// Parsed query string (`application/x-www-form-urlencoded`, repeated keys kept in order).
pub struct Query(Vec<(String, String)>);

impl Query {
    /// A parameter that must be present and non-empty; else execd's 400
    /// `MISSING_QUERY` answer (returned at once by the handler, so its size
    /// does not matter).
    #[allow(clippy::result_large_err)]
    pub fn required(&self, name: &str) -> Result<&str, Resp> {
        match self.get(name) {
            "" => Err(error(
                StatusCode::BAD_REQUEST,
                MISSING_QUERY,
                format!("missing query parameter '{name}'"),
            )),
            value => Ok(value),
        }
    }

    pub fn parse(raw: Option<&str>) -> Query {
        let pairs = raw
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .filter_map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                Some((form_decode(k)?, form_decode(v)?))
            })
            .collect();
        Query(pairs)
    }

    /// Gin's `c.Query`: the first value, "" when absent.
    pub fn get(&self, key: &str) -> &str {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    }

    /// Gin's `c.QueryArray`.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Percent-decoding; `+` means space in query strings but not in paths. Invalid escapes
/// make the value unusable, as Go's `url.ParseQuery` drops such pairs.
fn decode(s: &str, plus_is_space: bool) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

fn form_decode(s: &str) -> Option<String> {
    decode(s, true)
}

pub fn path_decode(s: &str) -> String {
    decode(s, false).unwrap_or_else(|| s.to_string())
}

/// Go's `url.PathEscape` (used by execd for non-ASCII download file names).
pub fn path_escape(s: &str) -> String {
    let mut out = String::new();
    for &c in s.as_bytes() {
        let keep = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'_' | b'.' | b'~' | b'$' | b'&' | b'+' | b':' | b'=' | b'@'
            );
        if keep {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

pub fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn split_time(secs: i64) -> (i64, u32, u32, i64, i64, i64) {
    let (y, mo, d) = civil(secs.div_euclid(86_400));
    let r = secs.rem_euclid(86_400);
    (y, mo, d, r / 3600, r % 3600 / 60, r % 60)
}

/// Go's `time.Time` JSON form (RFC 3339 with trailing-zero-trimmed nanoseconds), in UTC.
pub fn rfc3339(secs: i64, nanos: u32) -> String {
    let (y, mo, d, h, mi, s) = split_time(secs);
    let mut out = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}");
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

pub fn rfc3339_system(t: SystemTime) -> String {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => rfc3339(d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let (mut s, mut n) = (-(d.as_secs() as i64), d.subsec_nanos());
            if n > 0 {
                s -= 1;
                n = 1_000_000_000 - n;
            }
            rfc3339(s, n)
        }
    }
}

/// IMF-fixdate for `Last-Modified`.
pub fn http_date(secs: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, mo, d, h, mi, s) = split_time(secs);
    let wd = DAYS[secs.div_euclid(86_400).rem_euclid(7) as usize];
    format!(
        "{wd}, {d:02} {} {y:04} {h:02}:{mi:02}:{s:02} GMT",
        MONTHS[mo as usize - 1]
    )
}

/// Random 128-bit id as a v4 UUID: `dashed` for PTY sessions (uuid.String()), without
/// dashes (32 hex chars) for command ids, like execd.
pub fn new_uuid(dashed: bool) -> String {
    let mut b = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        // Never expected; fall back to time + counter so ids stay unique.
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        b[..8].copy_from_slice(&t.to_le_bytes());
        b[8..].copy_from_slice(
            &N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                .to_le_bytes(),
        );
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    if dashed {
        format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        )
    } else {
        hex
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_formats() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(1_764_430_000, 120_000_000),
            "2025-11-29T15:26:40.12Z"
        );
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
    }

    #[test]
    fn go_json_escapes_html() {
        assert_eq!(go_json("<a&b>"), br#""\u003ca\u0026b\u003e""#);
    }

    #[test]
    fn query_parsing() {
        let q = Query::parse(Some("path=%2Fa+b&path=/c&x"));
        assert_eq!(q.all("path"), vec!["/a b", "/c"]);
        assert_eq!(q.get("x"), "");
        assert_eq!(q.get("missing"), "");
    }

    #[test]
    fn uuid_shapes() {
        assert_eq!(new_uuid(false).len(), 32);
        assert_eq!(new_uuid(true).len(), 36);
    }
}
