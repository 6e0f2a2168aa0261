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

/// Splits a byte stream into frames.
pub struct FrameReader {
    body: Option<BodyReader>,
    buf: Vec<u8>,
    scanned: usize,
}

/// Parses one frame's text; none for empty or comment-only frames.
pub fn parse_frame(raw: &[u8]) -> Option<Result<Frame, String>> {
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
        return Some(
            serde_json::from_value(value)
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

impl FrameReader {
    pub fn new(body: BodyReader) -> FrameReader {
        FrameReader {
            body: Some(body),
            buf: Vec::new(),
            scanned: 0,
        }
    }

    /// A complete frame already buffered, without reading.
    fn buffered(&mut self) -> Option<Vec<u8>> {
        let start = self.scanned.saturating_sub(1);
        let pos = self.buf[start..].windows(2).position(|w| w == b"\n\n")? + start;
        let frame: Vec<u8> = self.buf.drain(..pos + 2).collect();
        self.scanned = 0;
        Some(frame)
    }

    /// Whether a complete frame is waiting (so `next` will not block).
    pub fn has_buffered(&self) -> bool {
        self.buf.windows(2).any(|w| w == b"\n\n")
    }

    /// The next non-empty frame; none at the end of the stream.
    pub fn next(&mut self) -> Result<Option<Result<Frame, String>>, Transport> {
        loop {
            if let Some(raw) = self.buffered() {
                match parse_frame(&raw) {
                    Some(frame) => return Ok(Some(frame)),
                    None => continue,
                }
            }
            self.scanned = self.buf.len();
            let Some(body) = self.body.as_mut() else {
                return Ok(None);
            };
            match body.read(256 * 1024)? {
                Some(chunk) => {
                    // Normalise CRLF framing so "\n\n" finds every boundary.
                    if chunk.contains(&b'\r') {
                        self.buf.extend(chunk.iter().filter(|&&b| b != b'\r'));
                    } else {
                        self.buf.extend_from_slice(&chunk);
                    }
                }
                None => {
                    self.body = None;
                    let rest = std::mem::take(&mut self.buf);
                    if let Some(frame) = parse_frame(&rest) {
                        return Ok(Some(frame));
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// Stops reading and closes the connection.
    pub fn close(&mut self) {
        self.body = None;
        self.buf.clear();
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
    fn bad_frames_are_errors_not_panics() {
        assert!(parse_frame(b"{nope").unwrap().is_err());
        assert!(parse_frame(b"[1]").unwrap().is_err());
        assert!(parse_frame(b"\n \n").is_none());
    }
}
