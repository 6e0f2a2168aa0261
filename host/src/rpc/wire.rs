//! The stdio edge: reading bounded lines and classifying JSON-RPC 2.0 messages.
//! Nothing here can panic on input; every request-shaped line yields exactly one
//! thing to answer.

use super::errors::RpcError;
use serde_json::{Map, Value};
use std::io::{BufRead, Read};
use tokio::sync::mpsc;

/// One input line, or what is left of one that was too long.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Complete(Vec<u8>),
    /// A binary frame: an input notification's line whose params say
    /// `"bytes": N`, and the N raw bytes that followed it (fewer only when
    /// the input ended first).
    Framed {
        line: Vec<u8>,
        tail: Vec<u8>,
    },
    /// Longer than the cap; `head` holds its first bytes for id recovery.
    TooLong {
        head: Vec<u8>,
        len: usize,
    },
}

/// Bytes read from the input at once by `read_lines`.
const READ_BUFFER: usize = 1 << 20;

/// What stdin's and stdout's pipes are asked to hold: a whole 1 MiB binary
/// frame of a streamed write or read.
const PIPE_BYTES: usize = 1 << 20;

/// Asks for 1 MiB pipes on stdin and stdout when they are pipes. A pipe holds
/// 64 KiB by default, so a 1 MiB frame crosses in sixteen hand-offs between
/// this process and its client, each waking the other. With room for a whole
/// frame a streamed read ran at 600–860 MiB/s against 490–540 (fifth pass) and,
/// once the host's own copies and a slow execd no longer hid it, a streamed
/// 32 MiB write at ~520–620 MiB/s against ~390–560 (sixth pass, both on the same
/// testbed; bench/profiling.md). Best effort: the kernel says no for a pipe over
/// the user's pipe budget (`/proc/sys/fs/pipe-user-pages-soft`, `pipe-max-size`;
/// README, "Pipes"), and anything but a pipe ignores it.
pub fn widen_pipes() {
    #[cfg(target_os = "linux")]
    for fd in [0, 1] {
        // SAFETY: fcntl with an integer argument on the process's own stdin
        // or stdout; it changes only a pipe's capacity, and fails harmlessly
        // for anything else.
        unsafe {
            libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_BYTES as libc::c_int);
        }
    }
}

/// Whether stdout can take a line of `len` bytes at once without blocking,
/// when stdout is a pipe (none otherwise: a terminal or a socket can block on
/// flow control, so their lines always go through the writer thread). A pipe
/// is asked whether anything is still unread in it (`FIONREAD`): an empty pipe
/// takes any write up to its capacity at once. Its free room in bytes would
/// not say as much (a pipe fills by pages, not bytes).
pub fn stdout_room() -> Option<super::outbox::Room> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: fstat and fcntl on the process's own stdout, into a local.
        let capacity = unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            if libc::fstat(1, &mut stat) != 0 || stat.st_mode & libc::S_IFMT != libc::S_IFIFO {
                return None;
            }
            libc::fcntl(1, libc::F_GETPIPE_SZ)
        };
        let capacity = usize::try_from(capacity).ok().filter(|c| *c > 0)?;
        Some(Box::new(move |len| {
            let mut unread: libc::c_int = 0;
            // SAFETY: FIONREAD on stdout writes one int into the local.
            let asked = unsafe { libc::ioctl(1, libc::FIONREAD, &mut unread) };
            asked == 0 && unread == 0 && len <= capacity
        }))
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Reads lines from `input` on the calling thread and hands each to `each`
/// until it says stop (false), the input ends or a read fails (the error is
/// the last item): plain blocking reads of up to 1 MiB straight into the line
/// buffer (tokio's stdin would read 64 KiB at a time on its blocking pool and
/// copy each read once more). A binary frame's header comes with its bytes
/// (`Line::Framed`).
pub fn read_lines<R: Read>(
    input: R,
    cap: usize,
    mut each: impl FnMut(std::io::Result<Line>) -> bool,
) {
    let buffered = std::io::BufReader::with_capacity(READ_BUFFER, input);
    let mut reader = LineReader::new(buffered, cap);
    loop {
        let item = match reader.next_line() {
            Ok(Some(Line::Complete(line))) => match frame_length(&line) {
                Some(n) => reader.tail(line, n),
                None => Ok(Line::Complete(line)),
            },
            Ok(Some(line)) => Ok(line),
            Ok(None) => return,
            Err(e) => Err(e),
        };
        let failed = item.is_err();
        if !each(item) || failed {
            return;
        }
    }
}

/// [`read_lines`] on a thread of its own, one line ahead of the receiver. The
/// channel closes at end of input; an error is the last item.
pub fn spawn_reader<R: Read + Send + 'static>(
    input: R,
    cap: usize,
) -> mpsc::Receiver<std::io::Result<Line>> {
    let (tx, rx) = mpsc::channel(1);
    std::thread::Builder::new()
        .name("epp-stdin".into())
        .spawn(move || read_lines(input, cap, |item| tx.blocking_send(item).is_ok()))
        .expect("spawning the stdin reader thread");
    rx
}

/// Bytes of an over-long line kept to look for its id.
const HEAD_KEEP: usize = 4096;

/// Reads `\n`-terminated lines of at most `cap` bytes without ever buffering more.
pub struct LineReader<R> {
    inner: R,
    cap: usize,
}

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R, cap: usize) -> Self {
        LineReader { inner, cap }
    }

    /// The next line without its terminator, or none at end of input.
    pub fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        let mut line = Vec::new();
        let mut too_long: Option<usize> = None;
        loop {
            let available = self.inner.fill_buf()?;
            if available.is_empty() {
                // End of input: a last line without a terminator still counts.
                return Ok(match (too_long, line.is_empty()) {
                    (Some(len), _) => Some(Line::TooLong { head: line, len }),
                    (None, true) => None,
                    (None, false) => Some(Line::Complete(strip_cr(line))),
                });
            }
            // memchr: a byte-at-a-time search showed up in profiles of large lines.
            let (chunk, done) = match memchr::memchr(b'\n', available) {
                Some(i) => (&available[..i], Some(i + 1)),
                None => (available, None),
            };
            let chunk_len = chunk.len();
            match too_long.as_mut() {
                Some(len) => {
                    *len += chunk_len;
                    // Keep filling the head: the cap may have been crossed near
                    // the end of a read, with few of its bytes kept yet.
                    let keep = HEAD_KEEP.saturating_sub(line.len()).min(chunk_len);
                    line.extend_from_slice(&chunk[..keep]);
                }
                None if line.len() + chunk_len > self.cap => {
                    let total = line.len() + chunk_len;
                    let keep = HEAD_KEEP.saturating_sub(line.len()).min(chunk_len);
                    line.extend_from_slice(&chunk[..keep]);
                    line.truncate(HEAD_KEEP);
                    too_long = Some(total);
                }
                None => line.extend_from_slice(chunk),
            }
            let consumed = done.unwrap_or(chunk_len);
            self.inner.consume(consumed);
            if done.is_some() {
                return Ok(Some(match too_long {
                    Some(len) => Line::TooLong { head: line, len },
                    None => Line::Complete(strip_cr(line)),
                }));
            }
        }
    }
}

impl<R: BufRead> LineReader<R> {
    /// The `n` raw bytes of a binary frame after its `line`: read whole when
    /// they fit the line cap, else read and thrown away (memory stays
    /// bounded) and the frame reported as too long, so the next line is still
    /// found where it starts.
    pub fn tail(&mut self, line: Vec<u8>, n: u64) -> std::io::Result<Line> {
        if n > self.cap as u64 {
            let skipped = std::io::copy(&mut (&mut self.inner).take(n), &mut std::io::sink())?;
            let len = line.len().saturating_add(skipped as usize);
            let mut head = line;
            head.truncate(HEAD_KEEP);
            return Ok(Line::TooLong { head, len });
        }
        let mut tail = Vec::with_capacity(n as usize);
        (&mut self.inner).take(n).read_to_end(&mut tail)?;
        Ok(Line::Framed { line, tail })
    }
}

/// Lines longer than this are never a frame's header.
const FRAME_HEADER: usize = 1024;

/// The number of raw bytes that follow `line` on the input: `params.bytes`
/// of a notification of an input method (`input=` in the contract, e.g.
/// `files.write_chunk`), docs/epp-1.md "Binary frames". Any other line,
/// or a header without a whole non-negative `bytes`, has none (it is then
/// parsed and answered as a line).
pub fn frame_length(line: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Header<'a> {
        #[serde(borrow)]
        method: std::borrow::Cow<'a, str>,
        id: Option<serde::de::IgnoredAny>,
        params: HeaderParams,
    }
    #[derive(serde::Deserialize)]
    struct HeaderParams {
        bytes: Option<u64>,
    }
    // Cheap tests first: every line of the input passes here.
    if line.len() > FRAME_HEADER || memchr::memmem::find(line, b"\"bytes\"").is_none() {
        return None;
    }
    let header: Header = serde_json::from_slice(line).ok()?;
    if header.id.is_some() || !crate::contract::table::is_input(&header.method) {
        return None;
    }
    header.params.bytes
}

fn strip_cr(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    line
}

/// A classified message.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Map<String, Value>,
    },
    Notification {
        method: String,
        params: Map<String, Value>,
    },
    /// A response object from the client; nothing to do.
    Response,
    /// Answer `error` to `id` (null when no id could be read).
    Invalid { id: Value, error: RpcError },
    /// Blank line.
    Empty,
}

fn valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_) | Value::Number(_) | Value::Null)
}

/// Classifies one complete line.
pub fn parse(line: &[u8]) -> Incoming {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Incoming::Empty;
    }
    let Ok(text) = std::str::from_utf8(line) else {
        return Incoming::Invalid {
            id: Value::Null,
            error: RpcError::parse_error(
                "the line is not valid UTF-8; send one JSON-RPC object per line",
            ),
        };
    };
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                id: Value::Null,
                error: RpcError::parse_error(format!(
                    "the line is not valid JSON ({e}); send one JSON-RPC object per line"
                )),
            };
        }
    };
    let Value::Object(mut obj) = value else {
        return Incoming::Invalid {
            id: Value::Null,
            error: RpcError::invalid_request(
                "expected a JSON-RPC 2.0 object; batches are not supported",
            ),
        };
    };
    let id = obj.remove("id");
    let reply_id = id.clone().filter(valid_id).unwrap_or(Value::Null);
    let invalid = |message: &str| Incoming::Invalid {
        id: reply_id.clone(),
        error: RpcError::invalid_request(message.to_string()),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("`jsonrpc` must be \"2.0\"");
    }
    if id.as_ref().is_some_and(|id| !valid_id(id)) {
        return invalid("`id` must be a string, a number or null");
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => return invalid("`method` must be a string"),
        None if obj.contains_key("result") || obj.contains_key("error") => {
            return Incoming::Response;
        }
        None => return invalid("`method` is missing"),
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            let error = RpcError::invalid_params(
                &method,
                "`params` must be an object (by-name parameters)",
            );
            return match id {
                Some(_) => Incoming::Invalid {
                    id: reply_id,
                    error,
                },
                None => Incoming::Notification {
                    method,
                    params: Map::new(),
                },
            };
        }
    };
    match id {
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method, params },
    }
}

/// Finds the id of an over-long request in its first bytes, when it comes
/// before `params` as most clients write it.
pub fn id_from_head(head: &[u8]) -> Value {
    let text = String::from_utf8_lossy(head);
    let Some(text) = text.trim_start().strip_prefix('{') else {
        return Value::Null;
    };
    let cut = text.find("\"params\"").unwrap_or(text.len());
    // Only the top level: an `"id"` inside a nested object is not the request's.
    let cut = text[..cut].find(['{', '[']).unwrap_or(cut);
    let Some(pos) = text[..cut].find("\"id\"") else {
        return Value::Null;
    };
    let rest = text[pos + 4..].trim_start();
    let Some(rest) = rest.strip_prefix(':') else {
        return Value::Null;
    };
    let mut stream = serde_json::Deserializer::from_str(rest.trim_start()).into_iter::<Value>();
    match stream.next() {
        Some(Ok(v)) if valid_id(&v) => v,
        _ => Value::Null,
    }
}

/// The `request_id` of what looks like an input notification (a method
/// that some method takes as `input=`) from the first bytes of a line that
/// could not be read whole: a guess, used only to fail the request it names,
/// which would otherwise wait for bytes that never come.
/// Answers the notification's method and the id.
pub fn input_target_from_head(head: &[u8]) -> Option<(String, Value)> {
    let text = String::from_utf8_lossy(head);
    let Value::String(method) = value_after(&text, "\"method\"")? else {
        return None;
    };
    if !crate::contract::table::is_input(&method) {
        return None;
    }
    let id = value_after(&text, "\"request_id\"").filter(valid_id)?;
    Some((method, id))
}

/// The JSON value after the first `key:` in `text`, if it is whole there.
fn value_after(text: &str, key: &str) -> Option<Value> {
    let pos = text.find(key)?;
    let rest = text[pos + key.len()..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
    stream.next()?.ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::errors::EppCode;
    use serde_json::json;

    fn lines(input: &[u8], cap: usize) -> Vec<Line> {
        let mut reader = LineReader::new(std::io::BufReader::with_capacity(7, input), cap);
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            out.push(line);
        }
        out
    }

    #[test]
    fn splits_lines_and_bounds_them() {
        let out = lines(b"abc\r\n\nlong-line-here\nlast", 8);
        assert_eq!(
            out,
            vec![
                Line::Complete(b"abc".to_vec()),
                Line::Complete(vec![]),
                Line::TooLong {
                    head: b"long-line-here".to_vec(),
                    len: 14
                },
                Line::Complete(b"last".to_vec()),
            ]
        );
    }

    #[test]
    fn huge_line_keeps_only_a_head() {
        let mut input = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"params\":{\"x\":\"".to_vec();
        input.extend(std::iter::repeat_n(b'a', 100_000));
        input.extend_from_slice(b"\"}}\n{}\n");
        let out = lines(&input, 1000);
        match &out[0] {
            Line::TooLong { head, len } => {
                assert_eq!(head.len(), HEAD_KEEP);
                assert_eq!(*len, input.len() - 4);
                assert_eq!(id_from_head(head), json!(7));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(out[1], Line::Complete(b"{}".to_vec()));
    }

    #[test]
    fn classifies_messages() {
        let req = parse(br#"{"jsonrpc":"2.0","id":"a","method":"m","params":{"k":1}}"#);
        assert!(
            matches!(req, Incoming::Request { ref id, ref method, .. } if id == "a" && method == "m")
        );
        let note = parse(br#"{"jsonrpc":"2.0","method":"m"}"#);
        assert!(matches!(note, Incoming::Notification { .. }));
        assert_eq!(parse(b"  "), Incoming::Empty);
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Incoming::Response
        );
        let cases: [(&[u8], i64, Value); 9] = [
            (b"\xff\xfe", -32700, Value::Null),
            (b"{nope", -32700, Value::Null),
            (b"[1,2]", -32600, Value::Null),
            (br#"{"id":1,"method":"m"}"#, -32600, json!(1)),
            (
                br#"{"jsonrpc":"2.0","id":{"a":1},"method":"m"}"#,
                -32600,
                Value::Null,
            ),
            (
                br#"{"jsonrpc":"2.0","id":true,"method":"m"}"#,
                -32600,
                Value::Null,
            ),
            (br#"{"jsonrpc":"2.0","id":2,"method":5}"#, -32600, json!(2)),
            (br#"{"jsonrpc":"2.0","id":3}"#, -32600, json!(3)),
            (
                br#"{"jsonrpc":"2.0","id":4,"method":"m","params":[1]}"#,
                -32602,
                json!(4),
            ),
        ];
        for (line, code, want_id) in cases {
            match parse(line) {
                Incoming::Invalid { id, error } => {
                    assert_eq!(
                        error.jsonrpc_code(),
                        code,
                        "{}",
                        String::from_utf8_lossy(line)
                    );
                    assert_eq!(id, want_id, "{}", String::from_utf8_lossy(line));
                    assert_eq!(error.code, EppCode::InvalidArgument);
                }
                other => panic!("{}: {other:?}", String::from_utf8_lossy(line)),
            }
        }
    }

    #[test]
    fn deep_nesting_is_a_parse_error_not_a_crash() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(parse(deep.as_bytes()), Incoming::Invalid { .. }));
    }

    #[test]
    fn input_targets_are_found_near_the_start() {
        let chunk = br#"{"jsonrpc":"2.0","method":"files.write_chunk","params":{"request_id":7,"content":"abc"#;
        let chunk_of = |id: Value| Some(("files.write_chunk".to_string(), id));
        assert_eq!(input_target_from_head(chunk), chunk_of(json!(7)));
        let named = br#"{"method": "files.write_chunk", "params": {"request_id": "w-1", "content": "\ud800"}}"#;
        assert_eq!(input_target_from_head(named), chunk_of(json!("w-1")));
        // Not a chunk, or no usable id: nothing to fail.
        assert_eq!(
            input_target_from_head(br#"{"method":"files.write","params":{"request_id":7}}"#),
            None
        );
        assert_eq!(
            input_target_from_head(
                br#"{"method":"files.write_chunk","params":{"request_id":[1]}}"#
            ),
            None
        );
        assert_eq!(
            input_target_from_head(br#"{"method":"files.write_chunk","params":{"content":"x"#),
            None
        );
    }

    #[test]
    fn frame_headers_are_input_notifications_with_bytes() {
        let header = br#"{"jsonrpc":"2.0","method":"files.write_chunk","params":{"request_id":7,"bytes":5}}"#;
        assert_eq!(frame_length(header), Some(5));
        // Not input, a request, no whole `bytes`, or too long to be a header.
        for line in [
            br#"{"jsonrpc":"2.0","method":"files.read","params":{"bytes":5}}"#.as_slice(),
            br#"{"jsonrpc":"2.0","id":1,"method":"files.write_chunk","params":{"bytes":5}}"#,
            br#"{"jsonrpc":"2.0","method":"files.write_chunk","params":{"bytes":-1}}"#,
            br#"{"jsonrpc":"2.0","method":"files.write_chunk","params":{"bytes":"5"}}"#,
            br#"{"jsonrpc":"2.0","method":"files.write_chunk","params":{"content":""bytes""}}"#,
        ] {
            assert_eq!(
                frame_length(line),
                None,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        let mut long = header[..header.len() - 2].to_vec();
        long.extend_from_slice(format!(",\"pad\":\"{}\"}}}}", "x".repeat(2000)).as_bytes());
        assert_eq!(frame_length(&long), None);
    }

    #[test]
    fn a_frame_is_read_by_length_and_the_next_line_found_after_it() {
        let header = br#"{"jsonrpc":"2.0","method":"files.write_chunk","params":{"request_id":1,"bytes":4}}"#;
        let mut input = header.to_vec();
        input.extend_from_slice(b"\n\n\0\xff\nnext\n");
        let mut reader = LineReader::new(std::io::BufReader::with_capacity(7, &input[..]), 100);
        let Some(Line::Complete(line)) = reader.next_line().unwrap() else {
            panic!("a header line")
        };
        let n = frame_length(&line).expect("a header");
        let framed = reader.tail(line, n).unwrap();
        assert_eq!(
            framed,
            Line::Framed {
                line: header.to_vec(),
                tail: b"\n\0\xff\n".to_vec()
            }
        );
        assert_eq!(
            reader.next_line().unwrap(),
            Some(Line::Complete(b"next".to_vec()))
        );
        // Over the cap: skipped, reported as too long, the next line intact.
        let header = br#"{"jsonrpc":"2.0","method":"files.write_chunk","params":{"request_id":1,"bytes":200}}"#;
        let mut input = header.to_vec();
        input.push(b'\n');
        input.extend_from_slice(&[b'\n'; 200]);
        input.extend_from_slice(b"{}\n");
        let mut reader = LineReader::new(std::io::BufReader::with_capacity(7, &input[..]), 100);
        let Some(Line::Complete(line)) = reader.next_line().unwrap() else {
            panic!("a header line")
        };
        assert_eq!(
            reader.tail(line, 200).unwrap(),
            Line::TooLong {
                head: header.to_vec(),
                len: header.len() + 200
            }
        );
        assert_eq!(
            reader.next_line().unwrap(),
            Some(Line::Complete(b"{}".to_vec()))
        );
    }

    #[test]
    fn id_recovery() {
        assert_eq!(
            id_from_head(br#"{"jsonrpc":"2.0","id": "x-1","method":"#),
            json!("x-1")
        );
        assert_eq!(id_from_head(br#"{"params":{"id":5}"#), Value::Null);
        assert_eq!(id_from_head(br#"{"id":{"#), Value::Null);
    }
}
