//! execd's command event stream. Real execd writes each event as one line of
//! compact JSON followed by a blank line (no `data:` prefix); standard SSE
//! `data:` lines are accepted too. A bare `{code,message}` object appended to
//! the stream is a terminal error; a last frame may lack its blank line.

use crate::http::{BodyReader, Transport};
use crate::models::ExecEvent;

/// One frame of the stream.
#[derive(Debug)]
pub enum Frame {
    Event(ExecEvent),
    /// A bare error object (execd appends one when a command fails to start).
    Error {
        code: String,
        message: String,
    },
}

/// Where a stream's frames come from: execd's response body
/// ([`FrameReader`]), or a test's list.
pub trait Frames {
    /// The next non-empty frame; none at the end of the stream.
    fn next(&mut self) -> Result<Option<Result<Frame, String>>, Transport>;
    /// Whether a complete frame is waiting (so `next` will not block).
    fn has_buffered(&mut self) -> bool;
    /// Stops reading and closes the connection.
    fn close(&mut self);
}

/// Splits a byte stream into frames (reads execd's response body).
pub struct FrameReader {
    body: Option<BodyReader>,
    split: Splitter,
}

/// The byte-level half of `FrameReader`, without I/O.
///
/// Frames are handed out in place: `start` moves past each one and the
/// consumed prefix is dropped only before more bytes are added, so a read
/// holding a few hundred small events costs one pass over its bytes (not one
/// move of the rest of the buffer per event), and every byte is searched once.
#[derive(Default)]
struct Splitter {
    buf: Vec<u8>,
    /// Where the next frame starts in `buf`.
    start: usize,
    /// Searched up to here (from `start`) without finding the frame's end.
    scanned: usize,
    /// The next frame's end (its `\n\n`), once found.
    ready: Option<usize>,
    /// The next frame has a `\n` of its own (so it is not one line of JSON).
    multiline: bool,
}

/// The first `\n` or `\r` in `buf` at or after `from`, a word at a time:
/// wasm32 has no SIMD here, and byte-by-byte searches (plus a separate pass
/// for CRs) led the profile of a 64 MiB stream.
fn find_break(buf: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS != 0;
    let mut i = from;
    // chunks_exact lets the compiler load each word at once (a copy_from_slice
    // here stayed a call per word in the profile).
    for chunk in buf.get(from..)?.chunks_exact(8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks of 8"));
        if has_zero(word ^ (ONES * u64::from(b'\n'))) || has_zero(word ^ (ONES * u64::from(b'\r')))
        {
            break;
        }
        i += 8;
    }
    buf.get(i..)?
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .map(|p| i + p)
}

/// Removes every `\r` from `buf[from..]` (CRLF framing becomes LF framing).
fn strip_cr(buf: &mut Vec<u8>, from: usize) {
    let mut kept = from;
    for i in from..buf.len() {
        if buf[i] != b'\r' {
            buf[kept] = buf[i];
            kept += 1;
        }
    }
    buf.truncate(kept);
}

/// Parses one frame's text; none for empty or comment-only frames.
pub fn parse_frame(raw: &[u8]) -> Option<Result<Frame, String>> {
    parse_scanned(raw, raw.contains(&b'\n'))
}

/// `parse_frame` for a frame whose search already told whether it has a `\n`.
fn parse_scanned(raw: &[u8], multiline: bool) -> Option<Result<Frame, String>> {
    // Fast path for what execd writes: one line of compact JSON with a `type`.
    // Anything else (SSE fields, comments, error objects, bad bytes) takes the
    // general path below, which gives the same answer for these frames too.
    // (A hand-written decoder for output events on top saved ~3 % CPU on a
    // 64 MiB stream, within the noise: not kept.)
    if !multiline && raw.first() == Some(&b'{') {
        if let Ok(event) = serde_json::from_slice::<ExecEvent>(raw) {
            return Some(Ok(Frame::Event(event)));
        }
    }
    let text = String::from_utf8_lossy(raw);
    let mut json = String::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        if let Some(rest) = line.strip_prefix("data:") {
            json.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        } else if line.starts_with("event:")
            || line.starts_with("id:")
            || line.starts_with("retry:")
        {
            continue;
        } else {
            json.push_str(line);
        }
    }
    let json = json.trim();
    if json.is_empty() {
        return None;
    }
    let value: serde_json::Value = match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => {
            return Some(Err(format!(
                "an event is not JSON ({e}): {}",
                json.chars().take(200).collect::<String>()
            )));
        }
    };
    if value.get("type").is_some() {
        // From the text again, not the Value: a result's bundle keeps its
        // values' JSON text (models::Bundle). This path is not the hot one.
        return Some(
            serde_json::from_str(json)
                .map(Frame::Event)
                .map_err(|e| format!("an event has an unexpected shape ({e})")),
        );
    }
    if value.get("code").is_some() || value.get("message").is_some() {
        let s = |k: &str| {
            value
                .get(k)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string()
        };
        return Some(Ok(Frame::Error {
            code: s("code"),
            message: s("message"),
        }));
    }
    Some(Err(format!(
        "an event has no type: {}",
        json.chars().take(200).collect::<String>()
    )))
}

impl Splitter {
    /// Finds the end of the next frame in what has arrived, searching each byte once.
    fn seek(&mut self) -> Option<usize> {
        if self.ready.is_some() {
            return self.ready;
        }
        let mut from = self.scanned.max(self.start);
        while let Some(at) = find_break(&self.buf, from) {
            if self.buf[at] == b'\r' {
                // Normalise CRLF framing before looking further, so "\n\n"
                // finds every boundary (execd itself writes LF only).
                strip_cr(&mut self.buf, at);
                from = at;
                continue;
            }
            match self.buf.get(at + 1) {
                Some(b'\n') => {
                    self.ready = Some(at);
                    return self.ready;
                }
                Some(b'\r') => strip_cr(&mut self.buf, at + 1),
                Some(_) => {
                    self.multiline = true;
                    from = at + 1;
                }
                // The boundary may straddle the end of what has arrived.
                None => {
                    self.scanned = at;
                    return None;
                }
            }
        }
        self.scanned = self.buf.len();
        None
    }

    /// The next complete frame and whether it has a `\n` of its own, consumed.
    fn frame(&mut self) -> Option<(&[u8], bool)> {
        let end = self.seek()?;
        let (from, multiline) = (self.start, self.multiline);
        self.start = end + 2;
        self.scanned = self.start;
        self.ready = None;
        self.multiline = false;
        Some((&self.buf[from..end], multiline))
    }

    /// Adds bytes that arrived (dropping what was handed out before).
    fn push(&mut self, bytes: &[u8]) {
        self.buf.drain(..self.start);
        self.scanned = self.scanned.saturating_sub(self.start);
        self.start = 0;
        self.buf.extend_from_slice(bytes);
    }

    /// What is left at the end of the stream: a last frame without its blank line.
    fn rest(&mut self) -> Vec<u8> {
        // Searching to the end drops every CR, as for the frames before.
        while self.frame().is_some() {}
        let mut rest = std::mem::take(&mut self.buf);
        rest.drain(..self.start);
        *self = Splitter::default();
        rest
    }
}

impl FrameReader {
    pub fn new(body: BodyReader) -> FrameReader {
        FrameReader {
            body: Some(body),
            split: Splitter::default(),
        }
    }
}

impl Frames for FrameReader {
    fn has_buffered(&mut self) -> bool {
        self.split.seek().is_some()
    }

    fn next(&mut self) -> Result<Option<Result<Frame, String>>, Transport> {
        loop {
            while let Some((raw, multiline)) = self.split.frame() {
                if let Some(frame) = parse_scanned(raw, multiline) {
                    return Ok(Some(frame));
                }
            }
            let Some(body) = self.body.as_mut() else {
                return Ok(None);
            };
            match body.read(256 * 1024)? {
                Some(chunk) => self.split.push(&chunk),
                None => {
                    self.body = None;
                    return Ok(parse_frame(&self.split.rest()));
                }
            }
        }
    }

    fn close(&mut self) {
        self.body = None;
        self.split = Splitter::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(raw: &str) -> Vec<String> {
        raw.split("\n\n")
            .filter_map(|f| parse_frame(f.as_bytes()))
            .map(|f| match f.unwrap() {
                Frame::Event(e) => e.kind,
                Frame::Error { code, .. } => format!("error:{code}"),
            })
            .collect()
    }

    #[test]
    fn bare_json_and_sse_frames() {
        let raw = "{\"type\":\"init\",\"text\":\"abc\",\"timestamp\":1}\n\n{\"type\":\"ping\",\"text\":\"pong\"}\n\ndata: {\"type\":\"stdout\",\"text\":\"hi\"}\n\n: comment\n\n{\"code\":\"RUNTIME_ERROR\",\"message\":\"x\"}";
        assert_eq!(
            kinds(raw),
            ["init", "ping", "stdout", "error:RUNTIME_ERROR"]
        );
    }

    #[test]
    fn a_result_keeps_its_json_text_on_either_path() {
        let bundle = r#"{"application/json":{"n":1180591620717411303424,"x":0.1}}"#;
        let event = format!(r#"{{"type":"result","results":{bundle}}}"#);
        for frame in [event.clone(), format!("event: result\ndata: {event}")] {
            let Some(Ok(Frame::Event(e))) = parse_frame(frame.as_bytes()) else {
                panic!("{frame}: not an event");
            };
            let results = e.results.expect("a bundle");
            assert_eq!(results.0.len(), 1);
            assert_eq!(results.0[0].0, "application/json");
            assert_eq!(
                results.0[0].1.get(),
                r#"{"n":1180591620717411303424,"x":0.1}"#
            );
        }
    }

    #[test]
    fn breaks_are_found_from_any_offset() {
        let buf = b"0123456789abcdef\n012\r4567890123456789\n";
        for from in 0..=buf.len() + 2 {
            let want = buf
                .iter()
                .skip(from)
                .position(|&b| b == b'\n' || b == b'\r')
                .map(|p| from + p);
            assert_eq!(find_break(buf, from), want, "from {from}");
        }
        // Bytes that differ from '\n' or '\r' by one bit or by a borrow do not match.
        let near = [
            b'\n' ^ 0x80,
            b'\n' + 1,
            b'\n' - 1,
            0x8a,
            0xff,
            0,
            0x0b,
            b'\r' + 1,
            b'\n',
        ];
        assert_eq!(find_break(&near, 0), Some(8));
    }

    /// Frames (as text) that `Splitter` makes of `input` fed in pieces of `size`.
    fn split(input: &[u8], size: usize) -> Vec<String> {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        for piece in input.chunks(size) {
            s.push(piece);
            while let Some((raw, multiline)) = s.frame() {
                assert_eq!(multiline, raw.contains(&b'\n'));
                out.push(String::from_utf8(raw.to_vec()).unwrap());
            }
        }
        let rest = s.rest();
        if !rest.is_empty() {
            out.push(format!("rest:{}", String::from_utf8(rest).unwrap()));
        }
        out
    }

    #[test]
    fn frames_are_the_same_however_the_bytes_arrive() {
        let input = b"{\"a\":1}\n\n{\"b\":\n2}\r\n\r\ndata: x\r\n\r\n\n\n: c\n\n{\"last\":3}\r";
        let want = [
            "{\"a\":1}",
            "{\"b\":\n2}",
            "data: x",
            "",
            ": c",
            "rest:{\"last\":3}",
        ];
        for size in 1..=input.len() {
            assert_eq!(split(input, size), want, "pieces of {size}");
        }
        // The old way (CRs removed first, then split at every "\n\n") agrees.
        let plain: Vec<u8> = input.iter().copied().filter(|&b| b != b'\r').collect();
        let text = String::from_utf8(plain).unwrap();
        let parts: Vec<&str> = text.split("\n\n").collect();
        assert_eq!(parts.len(), want.len());
        assert_eq!(split(b"", 1), Vec::<String>::new());
        assert_eq!(split(b"\r\r\n\r\n", 1), [""]);
    }

    #[test]
    fn crs_are_stripped_from_an_offset() {
        let mut buf = b"a\r\nb\r\n\r\nc\r".to_vec();
        strip_cr(&mut buf, 2);
        assert_eq!(buf, b"a\r\nb\n\nc");
    }

    #[test]
    fn fast_and_general_paths_agree() {
        let frame = br#"{"type":"stdout","text":"a \u003c b\n","timestamp":7}"#;
        let Some(Ok(Frame::Event(e))) = parse_frame(frame) else {
            panic!("not an event");
        };
        assert_eq!(
            (e.kind.as_str(), e.text.as_deref()),
            ("stdout", Some("a < b\n"))
        );
        // Not what execd writes: the general path still reads it.
        let Some(Ok(Frame::Event(e))) = parse_frame(b"{\"type\":\n\"init\"}") else {
            panic!("not an event");
        };
        assert_eq!(e.kind, "init");
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        assert!(parse_frame(b"{nope").unwrap().is_err());
        assert!(parse_frame(b"[1]").unwrap().is_err());
        assert!(parse_frame(b"\n \n").is_none());
    }
}
