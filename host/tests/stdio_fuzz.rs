//! Fuzzing the whole stdio edge of a real `epp-host run` (line reader,
//! JSON-RPC classification, dispatcher, concurrency, outbox) with the probe
//! provider behind it: random bytes, over-long lines, deep nesting, wrong
//! types, duplicate ids, ids of every JSON type, unknown notifications and
//! responses, all mixed in one session. Properties: the host never crashes
//! (exit 0 at end of input), every stdout line is one well-formed JSON-RPC
//! message, and every request-shaped line gets exactly one answer, under its
//! own id, and nothing else does.
//!
//! The expected answers come from the host's own `wire::parse` (property-tested
//! on its own in wire_props.rs); this test checks that the process around it
//! keeps the promise. Cases: `PROPTEST_CASES` (default 64, about 3 s);
//! `just fuzz` runs thousands.

#![allow(dead_code, unused_imports)]

mod common;
mod strategies;

use common::*;
use epp_host::rpc::wire::{Incoming, id_from_head, parse};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use strategies::{config, json_leaf as leaf, json_value as value};

/// `--max-line-bytes` of the host under test.
const CAP: usize = 8192;
/// Bytes of an over-long line kept to look for its id (`wire::HEAD_KEEP`).
const HEAD_KEEP: usize = 4096;

/// Ids from small pools (so duplicates in flight are common) and of every type.
fn id() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (0i64..4).prop_map(|n| json!(n)),
        3 => prop_oneof![Just("a"), Just("b"), Just("0"), Just("")].prop_map(|s| json!(s)),
        1 => any::<i64>().prop_map(|n| json!(n)),
        1 => any::<u64>().prop_map(|n| json!(n)),
        1 => (-1000i32..1000).prop_map(|n| json!(f64::from(n) / 8.0)),
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => prop::collection::vec(leaf(), 0..3).prop_map(Value::Array),
        1 => Just(json!({"id": 1})),
    ]
}

/// Methods: the real ones (but never `epp.shutdown`, which ends the session
/// at a point the oracle cannot know), unknown ones, and non-strings.
fn method() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => prop_oneof![
            Just("epp.hello"),
            Just("epp.cancel"),
            Just("sandbox.get_info"),
            Just("sandbox.list"),
            Just("sandbox.create"),
            Just("commands.run"),
            Just("commands.kill"),
            Just("files.read"),
            Just("files.write"),
            Just("pty.create"),
            Just("files.watch"),
            Just("code.run"),
        ]
        .prop_map(|m| json!(m)),
        2 => "[a-z._]{0,16}".prop_map(|m| json!(m)),
        1 => leaf(),
    ]
}

/// Params that fit the method (quick probe behaviour) or anything at all.
fn params(method: &Value) -> BoxedStrategy<Value> {
    let fitting = match method.as_str() {
        Some("epp.hello") => Some(Just(json!({"protocol": "EPP/1"})).boxed()),
        Some("epp.cancel") => Some(id().prop_map(|id| json!({"id": id})).boxed()),
        Some("sandbox.get_info") => Some(
            "[ -~]{0,20}"
                .prop_map(|t| json!({"sandbox_id": format!("echo {t}")}))
                .boxed(),
        ),
        Some("commands.run") => Some(Just(json!({"sandbox_id": "s", "cmd": "stream 2 0"})).boxed()),
        Some("files.read") => Some(Just(json!({"sandbox_id": "s", "path": "chunks 2 16"})).boxed()),
        _ => None,
    };
    let any = prop_oneof![
        3 => value(),
        1 => Just(Value::Null),
    ];
    match fitting {
        Some(f) => prop_oneof![2 => f, 1 => any].boxed(),
        None => any.boxed(),
    }
}

/// A JSON-RPC-shaped object, right or wrong in any part.
fn message() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![6 => Just(Some(json!("2.0"))), 1 => leaf().prop_map(Some), 1 => Just(None)],
        prop_oneof![5 => id().prop_map(Some), 1 => Just(None)],
        method(),
    )
        .prop_flat_map(|(jsonrpc, id, method)| {
            let params = params(&method);
            (
                Just(jsonrpc),
                Just(id),
                Just(method),
                prop::option::weighted(0.85, params),
            )
        })
        .prop_map(|(jsonrpc, id, method, params)| {
            let mut obj = Map::new();
            if let Some(v) = jsonrpc {
                obj.insert("jsonrpc".into(), v);
            }
            if let Some(v) = id {
                obj.insert("id".into(), v);
            }
            obj.insert("method".into(), method);
            if let Some(v) = params {
                obj.insert("params".into(), v);
            }
            Value::Object(obj).to_string().into_bytes()
        })
}

/// One input line (never containing `\n`).
fn line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        10 => message(),
        // Random bytes, often not UTF-8.
        2 => prop::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..300),
        // Over --max-line-bytes, with the id first (answered under it) or last.
        1 => (id(), any::<bool>(), CAP..3 * CAP).prop_map(|(id, id_first, len)| {
            let filler = "A".repeat(len);
            if id_first {
                format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"files.write","params":{{"content":"{filler}"}}}}"#)
            } else {
                format!(r#"{{"jsonrpc":"2.0","method":"files.write","params":{{"content":"{filler}"}},"id":{id}}}"#)
            }
            .into_bytes()
        }),
        // Deep nesting, inside and outside the id's reach.
        1 => (id(), 50usize..3000, any::<bool>()).prop_map(|(id, depth, arrays)| {
            let (open, close) = if arrays { ("[", "]") } else { (r#"{"a":"#, "}") };
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"epp.hello","params":{{"client":{}1{}}}}}"#,
                open.repeat(depth),
                close.repeat(depth)
            )
            .into_bytes()
        }),
        // Unknown notifications, responses from the client, blank lines, CRLF.
        1 => "[a-z.]{1,12}".prop_map(|m| json!({"jsonrpc": "2.0", "method": m, "params": {}}).to_string().into_bytes()),
        1 => id().prop_map(|id| json!({"jsonrpc": "2.0", "id": id, "result": {}}).to_string().into_bytes()),
        1 => Just(Vec::new()),
        1 => message().prop_map(|mut m| { m.push(b'\r'); m }),
    ]
}

/// The id the host must answer a line under, or `None` when it must stay silent.
fn expected_answer(raw: &[u8]) -> Option<Value> {
    if raw.len() > CAP {
        return Some(id_from_head(&raw[..raw.len().min(HEAD_KEEP)]));
    }
    let line = raw.strip_suffix(b"\r").unwrap_or(raw);
    match parse(line) {
        Incoming::Request { id, .. } | Incoming::Invalid { id, .. } => Some(id),
        Incoming::Notification { .. } | Incoming::Response | Incoming::Empty => None,
    }
}

fn check_message(m: &Value) -> Result<(), String> {
    if m.get("__not_json__").is_some() {
        return Err(format!("a line that is not JSON: {m}"));
    }
    if m["jsonrpc"] != "2.0" {
        return Err(format!("not JSON-RPC 2.0: {m}"));
    }
    if m.get("method").is_some() {
        return Ok(()); // a notification (streamed output)
    }
    let has_result = m.get("result").is_some();
    let error = m.get("error");
    if has_result == error.is_some() || m.get("id").is_none() {
        return Err(format!("not one response: {m}"));
    }
    if let Some(e) = error {
        if !e["code"].is_i64() || !e["message"].is_string() || !e["data"]["epp_code"].is_string() {
            return Err(format!("malformed error: {m}"));
        }
        if e["message"].as_str().is_some_and(|t| t.contains("crashed")) {
            return Err(format!("the provider crashed: {m}"));
        }
    }
    Ok(())
}

fn run_session(lines: &[Vec<u8>]) -> Result<(), TestCaseError> {
    let mut host = HostBuilder::new()
        .args([
            "--max-line-bytes",
            &CAP.to_string(),
            "--shutdown-grace",
            "10",
        ])
        .spawn();
    let mut input = Vec::new();
    let mut want: Vec<String> = Vec::new();
    for line in lines {
        input.extend_from_slice(line);
        input.push(b'\n');
        if let Some(id) = expected_answer(line) {
            want.push(id.to_string());
        }
    }
    host.send_raw(&input);
    let (status, messages) = host.finish();
    prop_assert!(status.success(), "epp-host exited with {status}");
    let mut got: Vec<String> = Vec::new();
    for m in &messages {
        check_message(m).map_err(TestCaseError::fail)?;
        if m.get("method").is_none() {
            got.push(m["id"].to_string());
        }
    }
    got.sort();
    want.sort();
    prop_assert_eq!(
        got,
        want,
        "answers (by id) differ from request-shaped lines"
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn every_request_shaped_line_gets_exactly_one_answer(
        lines in prop::collection::vec(line(), 1..60)
    ) {
        run_session(&lines)?;
    }
}

/// Totals for docs/reliability.md (printed with `--nocapture`): how the lines
/// of a fixed-seed sample spread over the kinds the strategy makes.
#[test]
fn strategy_mix() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut requests, mut invalid, mut silent, mut long) = (0, 0, 0, 0);
    for _ in 0..2000 {
        let raw = line().new_tree(&mut runner).expect("tree").current();
        if raw.len() > CAP {
            long += 1;
        }
        let line = raw.strip_suffix(b"\r").unwrap_or(&raw);
        match parse(line) {
            Incoming::Request { .. } => requests += 1,
            Incoming::Invalid { .. } => invalid += 1,
            _ => silent += 1,
        }
    }
    eprintln!(
        "2000 sample lines: {requests} requests, {invalid} invalid (answered with an error), \
         {silent} silent (notifications, responses, blank), {long} over --max-line-bytes"
    );
    assert!(requests > 200 && invalid > 200 && silent > 50 && long > 20);
}
