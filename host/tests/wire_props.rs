//! Property tests of the stdio edge, the host library's `rpc::wire`: reading
//! and classifying arbitrary input never panics, lines are split and bounded
//! exactly, and a request-shaped line always yields something to answer under
//! its own id. Bounded to a few hundred cases each (well under a second);
//! `PROPTEST_CASES` raises it.

mod strategies;

use epp_host::rpc::wire::{Incoming, Line, LineReader, id_from_head, parse, spawn_reader};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use strategies::{config, json_leaf, json_value};

/// Bytes of an over-long line kept to look for its id (`wire::HEAD_KEEP`).
const HEAD_KEEP: usize = 4096;

/// Ids a client may use: strings and numbers. Fractions are binary ones here:
/// serde_json (without its `float_roundtrip` feature) may read a float such as
/// `-1.5627545248614354e-152` one ulp off, so the host would answer under an id
/// the client never sent (reported; JSON-RPC discourages fractional ids).
fn valid_id() -> impl Strategy<Value = Value> {
    prop_oneof![
        ".{0,16}".prop_map(Value::String),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        (-1_000_000i32..1_000_000).prop_map(|n| json!(f64::from(n) / 1024.0)),
    ]
}

fn invalid_id() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        prop::collection::vec(json_leaf(), 0..4).prop_map(Value::Array),
        prop::collection::btree_map("[a-z]{0,4}", json_leaf(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
    ]
}

fn read_lines(input: &[u8], cap: usize, buffer: usize) -> Vec<Line> {
    let mut reader = LineReader::new(std::io::BufReader::with_capacity(buffer, input), cap);
    let mut lines = Vec::new();
    while let Some(line) = reader.next_line().expect("reading from memory") {
        lines.push(line);
    }
    lines
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn parse_never_panics_on_bytes(line in prop::collection::vec(any::<u8>(), 0..2000)) {
        let _ = parse(&line);
        let id = id_from_head(&line);
        prop_assert!(matches!(id, Value::Null | Value::String(_) | Value::Number(_)));
    }

    #[test]
    fn parse_never_panics_on_json(value in json_value()) {
        let _ = parse(value.to_string().as_bytes());
    }

    /// A line with a method and a valid id is a request, or an error answered
    /// under that same id: it is never lost and never answered under another id.
    #[test]
    fn request_shaped_lines_keep_their_id(
        id in valid_id(),
        method in ".{0,16}",
        params in json_value(),
        jsonrpc in prop_oneof![3 => Just(json!("2.0")), 1 => json_value()],
        extra in prop::collection::btree_map("[a-z]{1,6}", json_value(), 0..3),
    ) {
        let mut obj: Map<String, Value> = extra.into_iter().collect();
        obj.insert("jsonrpc".into(), jsonrpc.clone());
        obj.insert("id".into(), id.clone());
        obj.insert("method".into(), json!(method));
        obj.insert("params".into(), params.clone());
        let line = Value::Object(obj).to_string();
        match parse(line.as_bytes()) {
            Incoming::Request { id: got, method: m, .. } => {
                prop_assert_eq!(got, id);
                prop_assert_eq!(m, method);
                prop_assert_eq!(jsonrpc, json!("2.0"));
                prop_assert!(params.is_object() || params.is_null());
            }
            Incoming::Invalid { id: got, error } => {
                prop_assert_eq!(got, id);
                prop_assert!(matches!(error.jsonrpc_code(), -32600 | -32602), "{:?}", error);
            }
            other => prop_assert!(false, "{line} -> {other:?}"),
        }
    }

    /// Ids of other JSON types are refused, answered under id null.
    #[test]
    fn other_id_types_are_refused(id in invalid_id(), method in "[a-z.]{1,12}") {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method}).to_string();
        match parse(line.as_bytes()) {
            Incoming::Invalid { id, error } => {
                prop_assert_eq!(id, Value::Null);
                prop_assert_eq!(error.jsonrpc_code(), -32600);
            }
            other => prop_assert!(false, "{line} -> {other:?}"),
        }
    }

    /// Lines come out exactly as they went in (less a `\r` before `\n`), and a
    /// line over the cap comes out as `TooLong` with its true length and a head
    /// that is its beginning; whatever the read buffer's size.
    #[test]
    fn lines_are_split_and_bounded_exactly(
        input in prop::collection::vec(
            prop_oneof![6 => any::<u8>(), 1 => Just(b'\n'), 1 => Just(b'\r')],
            0..3000,
        ),
        cap in 1usize..300,
        buffer in 1usize..64,
    ) {
        let mut segments: Vec<&[u8]> = input.split(|b| *b == b'\n').collect();
        if segments.last().is_some_and(|s| s.is_empty()) {
            segments.pop();
        }
        let lines = read_lines(&input, cap, buffer);
        prop_assert_eq!(lines.len(), segments.len());
        for (line, segment) in lines.iter().zip(segments) {
            match line {
                Line::Complete(bytes) => {
                    prop_assert!(segment.len() <= cap);
                    let want = segment.strip_suffix(b"\r").unwrap_or(segment);
                    prop_assert_eq!(bytes.as_slice(), want);
                }
                Line::TooLong { head, len } => {
                    prop_assert!(segment.len() > cap);
                    prop_assert_eq!(*len, segment.len());
                    prop_assert_eq!(head.as_slice(), &segment[..segment.len().min(HEAD_KEEP)]);
                }
                Line::Framed { .. } => prop_assert!(false, "only the stdin reader takes frames"),
            }
        }
    }

    /// Binary frames (a `files.write_chunk` line with `bytes: N`, then N raw
    /// bytes of any value, newlines included) between ordinary lines: the
    /// reader hands out every line and every frame whole, in order, and a
    /// frame over the cap as too long without losing the line after it.
    #[test]
    fn frames_and_lines_come_out_as_they_went_in(
        items in prop::collection::vec(
            prop_oneof![
                1 => "[a-z{}\":, ]{0,40}".prop_map(|l| (l.into_bytes(), None)),
                1 => prop::collection::vec(any::<u8>(), 0..300)
                    .prop_map(|tail| (Vec::new(), Some(tail))),
            ],
            0..20,
        ),
    ) {
        let cap = 200;
        let mut input = Vec::new();
        let mut want = Vec::new();
        for (line, tail) in items {
            match tail {
                None => {
                    input.extend_from_slice(&line);
                    input.push(b'\n');
                    want.push(Line::Complete(line));
                }
                Some(tail) => {
                    let header = format!(
                        r#"{{"jsonrpc":"2.0","method":"files.write_chunk","params":{{"request_id":1,"bytes":{}}}}}"#,
                        tail.len()
                    )
                    .into_bytes();
                    input.extend_from_slice(&header);
                    input.push(b'\n');
                    input.extend_from_slice(&tail);
                    want.push(match tail.len() > cap {
                        true => Line::TooLong { len: header.len() + tail.len(), head: header },
                        false => Line::Framed { line: header, tail },
                    });
                }
            }
        }
        let mut rx = spawn_reader(std::io::Cursor::new(input), cap);
        let mut got = Vec::new();
        while let Some(item) = rx.blocking_recv() {
            got.push(item.expect("reading from memory"));
        }
        prop_assert_eq!(got, want);
    }

    /// The id of an over-long request is found in its head when it comes before
    /// `params`, and only the top-level id is ever reported.
    #[test]
    fn over_long_requests_keep_a_leading_id(
        id in valid_id(),
        nested_id in valid_id(),
        nested_first in any::<bool>(),
        cut in 0usize..200,
    ) {
        let nested = json!({"id": nested_id}).to_string();
        let front = if nested_first {
            format!(r#"{{"jsonrpc":"2.0","meta":{nested},"id":{id},"method":"files.write","#)
        } else {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"meta":{nested},"method":"files.write","#)
        };
        let line = format!(r#"{front}"params":{{"id":{nested_id},"content":"{}"}}}}"#, "x".repeat(300));
        let head = &line.as_bytes()[..(front.len() + cut).min(line.len())];
        let found = id_from_head(head);
        if nested_first {
            // The right id or none (a nested value stops the cheap search), never
            // the nested one: that could answer a request still in flight.
            prop_assert!(found == id || found == Value::Null, "{} -> {}", front, found);
        } else {
            prop_assert_eq!(found, id);
        }
    }
}
