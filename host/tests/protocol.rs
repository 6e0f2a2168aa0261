//! EPP/1 on stdio against a real provider: requests overlap, cancel stops work
//! in the sandbox, and no input, however malformed or plentiful, crashes the
//! host or costs another request its answer.

mod common;

use common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

fn is_output_for(msg: &Value, id: &Value) -> bool {
    msg["method"] == "commands.output" && msg["params"]["request_id"] == *id
}

#[test]
fn hello_and_the_probe_answer() {
    let mut host = Host::start();
    let hello = host.call(
        "epp.hello",
        json!({"protocol": "EPP/1", "client": {"name": "t"}}),
    );
    let hello = result(&hello);
    assert_eq!(hello["protocol"], "EPP/1");
    assert_eq!(hello["provider"]["id"], "probe");
    let caps = hello["capabilities"].as_object().expect("capabilities");
    assert_eq!(caps.len(), 18);
    assert!(caps.values().all(|v| v == true), "{caps:?}");

    let (code, epp, _) = error(&host.call("epp.hello", json!({"protocol": "EPP/2"})));
    assert_eq!((code, epp.as_str()), (-32602, "E1001"));

    let resp = host.probe("echo hi there");
    assert_eq!(result(&resp)["sandbox_id"], "hi there");
    // A function the probe does not implement: its own E8004.
    let (code, epp, _) = error(&host.call("sandbox.list", json!({})));
    assert_eq!((code, epp.as_str()), (-32000, "E8004"));
    // The memo import works across calls of one instance.
    let resp = host.probe("memo");
    assert_eq!(meta(&resp, "after-put"), Some("remembered"), "{resp}");
    assert_eq!(meta(&resp, "after-forget"), Some("absent"), "{resp}");
}

/// Both stdio pipes are asked to hold a whole 1 MiB binary frame (README,
/// "Pipes"). Only root is sure to get it: anyone else's pipe budget may say no.
#[test]
fn stdin_and_stdout_pipes_hold_a_whole_frame() {
    let mut host = Host::start();
    assert_eq!(
        result(&host.call("epp.hello", json!({})))["protocol"],
        "EPP/1"
    );
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    for fd in [0, 1] {
        // Another open file of the same pipe, to ask its size.
        let path = format!("/proc/{}/fd/{fd}", host.pid());
        let pipe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .expect("opening the host's pipe");
        // SAFETY: F_GETPIPE_SZ on a file this test owns; it only reads.
        let size = unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_GETPIPE_SZ) };
        assert_eq!(size, 1 << 20, "fd {fd}");
    }
}

#[test]
fn a_stream_and_a_file_read_overlap() {
    let mut host = Host::start();
    let run = json!("run");
    host.request_with_id(
        run.clone(),
        "commands.run",
        json!({"sandbox_id": "sbx", "cmd": "stream 6 250", "stream": true}),
    );
    let started = host.notification("commands.started", &run);
    assert_eq!(started["params"]["command_id"], "cmd-sbx");
    let first = host.notification("commands.output", &run);
    assert_eq!(first["params"]["data"], "line 1\n");

    // The command is mid-stream (five more lines, 250 ms apart): read a file now.
    let read = host.request(
        "files.read",
        json!({"sandbox_id": "sbx", "path": "chunks 3 100000"}),
    );
    let messages = host.collect_until("the end of the stream", |m| {
        is_response(m) && m["id"] == run
    });
    let read_at = messages
        .iter()
        .position(|m| is_response(m) && m["id"] == read)
        .unwrap_or_else(|| {
            panic!("files.read was not answered before the stream ended: {messages:?}")
        });
    let file = result(&messages[read_at]);
    assert_eq!(file["size"], 300_000);
    let content = file["content"].as_str().expect("content");
    let want: String = ["a", "b", "c"].iter().map(|c| c.repeat(100_000)).collect();
    assert!(content == want, "chunks arrived out of order or incomplete");
    // The stream went on after the read was answered: they overlapped.
    let later = messages[read_at..]
        .iter()
        .filter(|m| is_output_for(m, &run))
        .count();
    assert!(later >= 1, "no output after the read: {messages:?}");

    let lines: Vec<&str> = messages
        .iter()
        .filter(|m| is_output_for(m, &run))
        .filter_map(|m| m["params"]["data"].as_str())
        .collect();
    assert_eq!(
        lines,
        ["line 2\n", "line 3\n", "line 4\n", "line 5\n", "line 6\n"]
    );
    let done = result(messages.last().expect("end"));
    assert_eq!(done["exit_code"], 0);
    assert_eq!(done["command_id"], "cmd-sbx");
    assert!(
        done.get("stdout").is_none(),
        "streamed runs carry no stdout"
    );
}

#[test]
fn cancel_answers_e4999_and_kills_the_command() {
    let mut host = Host::start();

    // A streaming command: cancelled mid-stream.
    let run = json!("to-cancel");
    host.request_with_id(
        run.clone(),
        "commands.run",
        json!({"sandbox_id": "sbx-c", "cmd": "stream 1000 20", "stream": true}),
    );
    host.notification("commands.started", &run);
    host.notification("commands.output", &run);
    let cancel = host.call("epp.cancel", json!({"id": "to-cancel"}));
    assert_eq!(result(&cancel), &json!({"cancelled": true}));
    let (code, epp, _) = error(&host.response(&run));
    assert_eq!((code, epp.as_str()), (-32800, "E4999"));
    // Nothing more for that request once it is answered.
    host.take_pending();
    let late = host.wait_for_within(Duration::from_millis(300), |m| {
        m["params"]["request_id"] == run
    });
    assert!(late.is_none(), "output after the cancel answer: {late:?}");
    // The host stopped the command in the sandbox with the id from commands.started.
    let killed = host.probe("memo-get killed:cmd-sbx-c");
    assert_eq!(meta(&killed, "value"), Some("1"), "{killed}");

    // A plain call, cancelled by a notification (no answer to the cancel itself).
    let sleep = host.request(
        "sandbox.get_info",
        json!({"sandbox_id": "begin plain sleep 30000"}),
    );
    host.wait_memo("started:plain");
    let began = Instant::now();
    host.send(&json!({"jsonrpc": "2.0", "method": "epp.cancel", "params": {"id": sleep}}));
    let (code, epp, _) = error(&host.response(&sleep));
    assert_eq!((code, epp.as_str()), (-32800, "E4999"));
    assert!(began.elapsed() < Duration::from_secs(5));

    // Cancelling what is not in flight.
    let stale = host.call("epp.cancel", json!({"id": "to-cancel"}));
    assert_eq!(result(&stale), &json!({"cancelled": false}));
    let unknown = host.call("epp.cancel", json!({"id": 987_654}));
    assert_eq!(result(&unknown), &json!({"cancelled": false}));
    let (code, _, _) = error(&host.call("epp.cancel", json!({})));
    assert_eq!(code, -32602);

    let (status, rest) = host.finish();
    assert!(status.success());
    assert!(rest.iter().all(|m| !is_response(m)), "{rest:?}");
}

/// What one input line must produce.
enum Expect {
    /// One answer with this id: a result (`None`) or an error code.
    Answer(Value, Option<i64>),
    /// One error answer with id null.
    NullError(i64),
    /// No answer at all.
    Silence,
}

fn req(id: Value, method: &str, params: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

/// Deterministic pseudo-random bytes (no `\n`, so each blob is one line).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match (x >> 24) as u8 {
                b'\n' => b'x',
                b => b,
            }
        })
        .collect()
}

#[test]
fn malformed_input_gets_one_answer_per_request_line() {
    const CAP: usize = 64 << 10;
    let mut host = HostBuilder::new()
        .args(["--max-line-bytes", &CAP.to_string()])
        .spawn();
    let hello = |id: Value| req(id, "epp.hello", json!({}));
    let big = "A".repeat(CAP + 10);
    let mut lines: Vec<(Vec<u8>, Expect)> = vec![
        (hello(json!("first")), Expect::Answer(json!("first"), None)),
        // Random bytes (an invalid UTF-8 lead byte first) and ASCII garbage.
        ([&[0xff][..], &noise(1, 300)].concat(), Expect::NullError(-32700)),
        ([&[0xc3][..], &noise(2, 5000)].concat(), Expect::NullError(-32700)),
        (b"{\"jsonrpc\":\"2.0\",\"id\":\x01".to_vec(), Expect::NullError(-32700)),
        (b"\0\0\0".to_vec(), Expect::NullError(-32700)),
        (b"{nope".to_vec(), Expect::NullError(-32700)),
        // Invalid UTF-8 inside an otherwise fine request: stray byte, overlong
        // encoding, an encoded surrogate; and an escaped lone surrogate.
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":\"u1\",\"method\":\"epp.hello\",\"params\":{\"client\":\"\xff\"}}".to_vec(),
            Expect::NullError(-32700),
        ),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":\"u2\",\"method\":\"epp.hello\",\"params\":{\"client\":\"\xc0\xaf\"}}".to_vec(),
            Expect::NullError(-32700),
        ),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":\"u3\",\"method\":\"epp.hello\",\"params\":{\"client\":\"\xed\xa0\x80\"}}".to_vec(),
            Expect::NullError(-32700),
        ),
        (
            br#"{"jsonrpc":"2.0","id":"u4","method":"epp.hello","params":{"client":"\ud800"}}"#.to_vec(),
            Expect::NullError(-32700),
        ),
        // Over --max-line-bytes: rejected with the id when it comes first ...
        (
            req(json!("big"), "files.write", json!({"sandbox_id": "s", "path": "/p", "content": big})),
            Expect::Answer(json!("big"), Some(-32600)),
        ),
        // ... never with an id found inside params, nor one that comes last.
        (
            format!(r#"{{"params":{{"id":"trick","x":"{big}"}},"jsonrpc":"2.0","method":"m"}}"#).into_bytes(),
            Expect::NullError(-32600),
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","method":"m","params":{{"x":"{big}"}},"id":"late"}}"#).into_bytes(),
            Expect::NullError(-32600),
        ),
        // Deep nesting, arrays and objects: a parse error, not a stack overflow.
        (
            format!(
                r#"{{"jsonrpc":"2.0","id":"deep","method":"epp.hello","params":{{"client":{}{}}}}}"#,
                "[".repeat(20_000),
                "]".repeat(20_000)
            )
            .into_bytes(),
            Expect::NullError(-32700),
        ),
        (
            format!("{}1{}", r#"{"a":"#.repeat(10_000), "}".repeat(10_000)).into_bytes(),
            Expect::NullError(-32700),
        ),
        // Requests without an id are notifications: never answered, known or not.
        (
            br#"{"jsonrpc":"2.0","method":"sandbox.get_info","params":{"sandbox_id":"echo no-id"}}"#.to_vec(),
            Expect::Silence,
        ),
        (br#"{"jsonrpc":"2.0","method":"no.such.notification","params":{}}"#.to_vec(), Expect::Silence),
        (br#"{"jsonrpc":"2.0","method":"no.such.notification","params":[1]}"#.to_vec(), Expect::Silence),
        // Ids of every JSON type: strings and numbers (and null) are echoed ...
        (hello(json!("s")), Expect::Answer(json!("s"), None)),
        (hello(json!("")), Expect::Answer(json!(""), None)),
        (hello(json!(42)), Expect::Answer(json!(42), None)),
        (hello(json!(-7)), Expect::Answer(json!(-7), None)),
        (hello(json!(0)), Expect::Answer(json!(0), None)),
        (hello(json!(1.5)), Expect::Answer(json!(1.5), None)),
        (hello(json!(18_446_744_073_709_551_615u64)), Expect::Answer(json!(18_446_744_073_709_551_615u64), None)),
        (hello(Value::Null), Expect::Answer(Value::Null, None)),
        // ... booleans, objects and arrays are refused with id null.
        (hello(json!(true)), Expect::NullError(-32600)),
        (hello(json!(false)), Expect::NullError(-32600)),
        (hello(json!({"a": 1})), Expect::NullError(-32600)),
        (hello(json!([1])), Expect::NullError(-32600)),
        // 1 and "1" are different ids, in flight at the same time.
        (
            req(json!(1000), "sandbox.get_info", json!({"sandbox_id": "sleep 300"})),
            Expect::Answer(json!(1000), None),
        ),
        (
            req(json!("1000"), "sandbox.get_info", json!({"sandbox_id": "sleep 300"})),
            Expect::Answer(json!("1000"), None),
        ),
        // A duplicate of an id in flight: refused; the first one still answered.
        (
            req(json!("dup"), "sandbox.get_info", json!({"sandbox_id": "sleep 400"})),
            Expect::Answer(json!("dup"), None),
        ),
        (
            req(json!("dup"), "sandbox.get_info", json!({"sandbox_id": "echo dup"})),
            Expect::Answer(json!("dup"), Some(-32600)),
        ),
        // Not JSON-RPC 2.0.
        (br#"{"jsonrpc":"1.0","id":"v1","method":"epp.hello"}"#.to_vec(), Expect::Answer(json!("v1"), Some(-32600))),
        (br#"{"id":"v0","method":"epp.hello"}"#.to_vec(), Expect::Answer(json!("v0"), Some(-32600))),
        (br#"{"jsonrpc":"2.0","id":"m5","method":5}"#.to_vec(), Expect::Answer(json!("m5"), Some(-32600))),
        (br#"{"jsonrpc":"2.0","id":"nomethod"}"#.to_vec(), Expect::Answer(json!("nomethod"), Some(-32600))),
        (br#"[{"jsonrpc":"2.0","id":"batch","method":"epp.hello"}]"#.to_vec(), Expect::NullError(-32600)),
        (b"[]".to_vec(), Expect::NullError(-32600)),
        (b"42".to_vec(), Expect::NullError(-32600)),
        (b"\"text\"".to_vec(), Expect::NullError(-32600)),
        (b"null".to_vec(), Expect::NullError(-32600)),
        // Params that do not fit.
        (req(json!("pa"), "epp.hello", json!([1, 2])), Expect::Answer(json!("pa"), Some(-32602))),
        (req(json!("ps"), "sandbox.get_info", json!("x")), Expect::Answer(json!("ps"), Some(-32602))),
        (
            req(json!("uf"), "sandbox.get_info", json!({"sandbox_id": "echo x", "bogus": 1})),
            Expect::Answer(json!("uf"), Some(-32602)),
        ),
        (req(json!("missing"), "sandbox.get_info", json!({})), Expect::Answer(json!("missing"), Some(-32602))),
        (req(json!("unk"), "no.such.method", json!({})), Expect::Answer(json!("unk"), Some(-32601))),
        // Responses from the client, blank lines: nothing to answer.
        (br#"{"jsonrpc":"2.0","id":"r1","result":{}}"#.to_vec(), Expect::Silence),
        (br#"{"jsonrpc":"2.0","id":"r2","error":{"code":1,"message":"x"}}"#.to_vec(), Expect::Silence),
        (Vec::new(), Expect::Silence),
        (b" \t ".to_vec(), Expect::Silence),
        // CRLF endings are fine.
        ([hello(json!("crlf")), b"\r".to_vec()].concat(), Expect::Answer(json!("crlf"), None)),
        // And the guest still works at the end.
        (
            req(json!("last"), "sandbox.get_info", json!({"sandbox_id": "echo alive"})),
            Expect::Answer(json!("last"), None),
        ),
    ];
    // A last line without its newline still counts.
    lines.push((
        hello(json!("unterminated")),
        Expect::Answer(json!("unterminated"), None),
    ));

    let count = lines.len();
    let mut want: Vec<(String, i64)> = Vec::new();
    let mut input = Vec::new();
    for (i, (line, expect)) in lines.into_iter().enumerate() {
        input.extend_from_slice(&line);
        if i + 1 < count {
            input.push(b'\n');
        }
        match expect {
            Expect::Answer(id, code) => want.push((id.to_string(), code.unwrap_or(0))),
            Expect::NullError(code) => want.push(("null".into(), code)),
            Expect::Silence => {}
        }
    }
    host.send_raw(&input);
    let (status, messages) = host.finish();
    assert!(status.success(), "exit status {status}");

    let mut got: Vec<(String, i64)> = messages
        .iter()
        .map(|m| {
            assert!(is_response(m), "not a response: {m}");
            let code = m["error"]["code"].as_i64().unwrap_or(0);
            if code != 0 {
                assert_eq!(m["error"]["data"]["epp_code"], "E1001", "{m}");
            }
            (m["id"].to_string(), code)
        })
        .collect();
    got.sort();
    want.sort();
    let diff = |a: &[(String, i64)], b: &[(String, i64)]| -> Vec<(String, i64)> {
        let mut b = b.to_vec();
        a.iter()
            .filter(|x| match b.iter().position(|y| y == *x) {
                Some(i) => {
                    b.remove(i);
                    false
                }
                None => true,
            })
            .cloned()
            .collect()
    };
    assert!(
        got == want,
        "answers differ\nmissing: {:?}\nunexpected: {:?}",
        diff(&want, &got),
        diff(&got, &want)
    );
    let big = messages
        .iter()
        .find(|m| m["id"] == "big")
        .expect("answer to big");
    assert!(
        big["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("--max-line-bytes")),
        "{big}"
    );
}

#[test]
fn a_flood_of_requests_gets_exactly_one_answer_each() {
    const N: usize = 2000;
    let mut host = Host::start();
    let mut input = Vec::new();
    let mut garbage = 0;
    for i in 0..N {
        let id = json!(i);
        let line = match i % 5 {
            0 => req(id, "epp.hello", json!({})),
            1 => req(
                id,
                "sandbox.get_info",
                json!({"sandbox_id": format!("echo n{i}")}),
            ),
            2 => req(id, "no.such.method", json!({})),
            3 => req(id, "sandbox.get_info", json!({"wrong": true})),
            _ => req(
                id,
                "files.read",
                json!({"sandbox_id": "s", "path": "chunks 2 64"}),
            ),
        };
        input.extend_from_slice(&line);
        input.push(b'\n');
        if i % 10 == 9 {
            input.extend_from_slice(&noise(i as u64, 64));
            input.extend_from_slice(b"\xff\n");
            garbage += 1;
        }
    }
    let began = Instant::now();
    host.send_raw(&input);
    let (status, messages) = host.finish();
    assert!(status.success(), "exit status {status}");

    let mut answers: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    let mut null_errors = 0;
    for m in &messages {
        assert!(is_response(m), "not a response: {m}");
        match m["id"].as_u64() {
            Some(id) => answers.entry(id).or_default().push(m),
            None => {
                assert_eq!(m["error"]["code"], -32700, "{m}");
                null_errors += 1;
            }
        }
    }
    assert_eq!(null_errors, garbage);
    assert_eq!(answers.len(), N, "some requests got no answer");
    let mut busy = 0;
    for (id, list) in &answers {
        assert_eq!(list.len(), 1, "request {id} got {} answers", list.len());
        let m = list[0];
        // Any request may be refused while too many are in flight (E9001,
        // --max-concurrent); any other answer must be the one for its kind.
        if m["error"]["data"]["epp_code"] == "E9001" {
            assert!(
                m["error"]["message"]
                    .as_str()
                    .is_some_and(|s| s.contains("--max-concurrent")),
                "{m}"
            );
            busy += 1;
            continue;
        }
        match id % 5 {
            0 => assert_eq!(result(m)["protocol"], "EPP/1"),
            1 => assert_eq!(result(m)["sandbox_id"], format!("n{id}")),
            2 => assert_eq!(m["error"]["code"], -32601, "{m}"),
            3 => assert_eq!(m["error"]["code"], -32602, "{m}"),
            _ => assert_eq!(result(m)["content"], "a".repeat(64) + &"b".repeat(64)),
        }
    }
    eprintln!(
        "{N} requests and {garbage} garbage lines answered in {:?} ({busy} refused as busy)",
        began.elapsed()
    );
}

#[test]
fn end_of_input_lets_requests_finish_then_cancels_stragglers() {
    // Within the grace period: answered normally.
    let mut host = Host::start();
    let quick = host.request("sandbox.get_info", json!({"sandbox_id": "sleep 300"}));
    let (status, rest) = host.finish();
    assert!(status.success());
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["id"], quick);
    assert_eq!(result(&rest[0])["state"], "ok");

    // Past the grace period: cancelled, and the host still exits 0.
    let mut host = HostBuilder::new().args(["--shutdown-grace", "1"]).spawn();
    let slow = host.request("sandbox.get_info", json!({"sandbox_id": "sleep 60000"}));
    let began = Instant::now();
    let (status, rest) = host.finish();
    assert!(status.success());
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["id"], slow);
    assert_eq!(error(&rest[0]).1, "E4999");

    // epp.shutdown ends the session while stdin stays open.
    let mut host = Host::start();
    let bye = host.call("epp.shutdown", json!({}));
    assert_eq!(result(&bye), &json!({}));
    assert!(host.wait_exit(PATIENCE).success());
}

#[test]
fn no_line_after_epp_shutdown_is_read() {
    // As at end of input: a request written right behind epp.shutdown gets no
    // answer (before, the server loop raced the line already read against the
    // shutdown, and could still serve it).
    let mut host = Host::start();
    host.send_raw(
        b"{\"jsonrpc\":\"2.0\",\"id\":\"bye\",\"method\":\"epp.shutdown\",\"params\":{}}\n\
          {\"jsonrpc\":\"2.0\",\"id\":\"late\",\"method\":\"sandbox.get_info\",\
          \"params\":{\"sandbox_id\":\"echo late\"}}\n",
    );
    let (status, rest) = host.finish();
    assert!(status.success());
    let answered: Vec<&Value> = rest.iter().filter_map(|m| m.get("id")).collect();
    assert_eq!(answered, [&json!("bye")], "{rest:?}");
}

#[test]
fn a_slot_and_an_id_are_free_once_answered() {
    // A client that sends each request as soon as the previous answer arrives
    // never has two in flight: neither the one slot of --max-concurrent 1 nor
    // an id used again may be refused (both once were, in 4-16 % of calls,
    // when they were freed only after the answer went out).
    let mut host = HostBuilder::new().args(["--max-concurrent", "1"]).spawn();
    for n in 0..2000 {
        let answer = host.call(
            "sandbox.get_info",
            json!({"sandbox_id": format!("echo n{n}")}),
        );
        assert_eq!(result(&answer)["sandbox_id"], format!("n{n}"), "{answer}");
        host.request_with_id(
            json!("again"),
            "sandbox.get_info",
            json!({"sandbox_id": "echo again"}),
        );
        let again = host.response(&json!("again"));
        assert_eq!(result(&again)["sandbox_id"], "again", "{again}");
    }
}

#[test]
fn the_concurrency_cap_refuses_with_e9001() {
    let mut host = HostBuilder::new().args(["--max-concurrent", "2"]).spawn();
    let a = host.request("sandbox.get_info", json!({"sandbox_id": "sleep 1000"}));
    let b = host.request("sandbox.get_info", json!({"sandbox_id": "sleep 1000"}));
    let c = host.request("sandbox.get_info", json!({"sandbox_id": "echo third"}));
    let (code, epp, message) = error(&host.response(&c));
    assert_eq!((code, epp.as_str()), (-32000, "E9001"));
    assert!(message.contains("--max-concurrent"), "{message}");
    for id in [a, b] {
        assert_eq!(result(&host.response(&id))["state"], "ok");
    }
    // Slots come back.
    assert_eq!(result(&host.probe("echo again"))["sandbox_id"], "again");
}

/// The wire name of a typed sandbox-info, as the hand-written builder the codec
/// replaced wrote it: the baseline of `codec_cost_end_to_end`.
fn typed_info_json(info: epp_host::contract::bindings::infra::SandboxInfo) -> Value {
    let metadata: serde_json::Map<String, Value> = info
        .metadata
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    json!({
        "sandbox_id": info.sandbox_id,
        "template": info.template,
        "image": info.image,
        "state": info.state,
        "metadata": metadata,
        "created_at": info.created_at,
        "expires_at": info.expires_at,
    })
}

/// The codec next to a typed call of the same export, in process, each call
/// on a fresh instance as the server does: a small sandbox-info (`echo x`)
/// and a big one (`garbage`: 5002 metadata pairs, 1 MiB strings). Both paths
/// must answer the same bytes; the medians are printed
/// (`cargo test -p epp-host --release --test protocol -- --nocapture codec_cost`).
#[test]
fn codec_cost_end_to_end() {
    use clap::Parser;
    use epp_host::cli::{Cli, Command};
    use epp_host::codec::Codec;
    use epp_host::contract::bindings::infra::SandboxInfo;
    use epp_host::contract::table;
    use epp_host::rpc::invoke::call_with;
    use epp_host::runtime::Runtime;
    let to_vec = |v: &Value| serde_json::to_vec(v).expect("JSON");

    let wasm = probe_wasm();
    let cli = Cli::try_parse_from([
        "epp-host".as_ref(),
        "run".as_ref(),
        wasm.as_os_str(),
        "--allow-unsigned".as_ref(),
        "--cache-dir".as_ref(),
        shared_cache_dir().as_os_str(),
    ])
    .expect("flags");
    let Command::Run { host, .. } = cli.command else {
        unreachable!("parsed a run command")
    };
    let bytes = std::fs::read(wasm).expect("the probe");
    let options =
        epp_host::config::load_options(&host, epp_host::runtime::cache::WasmBytes::new(bytes))
            .expect("options");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    rt.block_on(async {
        let runtime = Runtime::load(options).await.expect("the probe loads");
        let codec = Codec::new(&runtime.exports, 64 << 20);
        let method = table::find("sandbox.get_info").expect("sandbox.get_info");
        let median = |mut times: Vec<Duration>| {
            times.sort();
            times[times.len() / 2]
        };
        for (id, rounds) in [("echo x", 400), ("garbage", 30)] {
            let (mut typed, mut generic) = (Vec::new(), Vec::new());
            let (mut typed_out, mut generic_out) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                let began = Instant::now();
                let mut inst = runtime.instance().await.expect("instance");
                let info: SandboxInfo = inst
                    .call_typed(method.function, (id,))
                    .await
                    .expect("an answer");
                typed_out = to_vec(&typed_info_json(info));
                typed.push(began.elapsed());

                let began = Instant::now();
                let mut inst = runtime.instance().await.expect("instance");
                let params = json!({"sandbox_id": id});
                let Value::Object(params) = params else {
                    unreachable!()
                };
                let args = codec.args(method, method.function, params, &[]).expect("args");
                let ok = call_with(&mut inst, method.function, args)
                    .await
                    .expect("an answer");
                let answer = codec.answer(method.function, "result", ok).expect("json");
                generic_out = to_vec(&answer);
                generic.push(began.elapsed());
            }
            assert!(typed_out == generic_out, "{id}: the two paths differ");
            eprintln!(
                "sandbox.get_info `{id}` ({} bytes out): typed {:?}, codec {:?} (median of {rounds}, \
                 instance + call + JSON)",
                generic_out.len(),
                median(typed),
                median(generic)
            );
        }
    });
}

#[test]
fn plain_methods_are_projected_from_wit() {
    let mut host = Host::start();
    // A record answer, fields in WIT order, `-` as `_`, none as null.
    let resp = host.call("sandbox.get_info", json!({"sandbox_id": "echo wit"}));
    assert_eq!(
        serde_json::to_string(result(&resp)).unwrap(),
        r#"{"sandbox_id":"wit","template":"probe","image":null,"state":"ok","metadata":{},"created_at":null,"expires_at":null}"#
    );
    // Bad params never reach the provider; the message names the field.
    let bad = |host: &mut Host, method: &str, params: Value, says: &str| {
        let (code, epp, message) = error(&host.call(method, params));
        assert_eq!(
            (code, epp.as_str()),
            (-32602, "E1001"),
            "{method}: {message}"
        );
        assert!(message.contains(says), "{method}: {message}");
        assert!(
            message.starts_with(&format!("invalid params for {method}: ")),
            "{message}"
        );
    };
    bad(
        &mut host,
        "sandbox.get_info",
        json!({"sandbox_id": "echo x", "sandboxId": "y"}),
        "unknown field `sandboxId`, expected `sandbox_id`",
    );
    bad(
        &mut host,
        "files.list",
        json!({"sandbox_id": "s", "path": "/", "depth": 0}),
        "`depth` must be at least 1, got 0",
    );
    bad(
        &mut host,
        "pty.resize",
        json!({"sandbox_id": "s", "pty_id": "p", "cols": 0, "rows": 24}),
        "`cols` must be between 1 and 1000, got 0",
    );
    bad(
        &mut host,
        "pty.create",
        json!({"sandbox_id": "s", "rows": 1001}),
        "`rows` must be between 1 and 1000, got 1001",
    );
    bad(
        &mut host,
        "commands.send_input",
        json!({"sandbox_id": "s", "command_id": "c", "data": "%%%"}),
        "`data` is not valid base64",
    );
    bad(
        &mut host,
        "sandbox.set_timeout",
        json!({"sandbox_id": "s", "timeout": -5}),
        "`timeout` must be an integer from 0 to 4294967295, got -5",
    );
    bad(
        &mut host,
        "commands.run",
        json!({"sandbox_id": "s", "cmd": "c", "timeout": 0}),
        "`timeout` must be a positive number of seconds, got 0",
    );
    bad(
        &mut host,
        "commands.run",
        json!({"sandbox_id": "s", "cmd": "c", "background": true, "stream": true}),
        "cannot both be true",
    );
    bad(
        &mut host,
        "sandbox.list",
        json!({"state": 5}),
        "`state` must be a string",
    );
    // Good params reach the provider (which implements neither: its own E8004).
    for (method, params) in [
        (
            "sandbox.list",
            json!({"state": "running", "metadata": {"a": "b"}}),
        ),
        ("sandbox.list", json!({"state": ["running", "paused"]})),
        ("files.list", json!({"sandbox_id": "s", "path": "/"})),
        ("process.signal", json!({"sandbox_id": "s", "pid": 1})),
        ("pty.create", json!({"sandbox_id": "s"})),
        ("templates.list", json!({})),
    ] {
        let (code, epp, message) = error(&host.call(method, params));
        assert_eq!(
            (code, epp.as_str()),
            (-32000, "E8004"),
            "{method}: {message}"
        );
        assert!(
            message.contains("the probe does not implement"),
            "{method}: {message}"
        );
    }
}
