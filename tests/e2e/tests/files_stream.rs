//! Streamed file content over stdio: `files.write {stream: true}` fed by
//! `files.write_chunk` notifications, and `files.read {stream: true}` answered
//! in `files.data` notifications.

use epp_e2e::{Host, HostBuilder, Mode, b64d, b64e, both_modes, wait_until, workdir};
use serde_json::{Value, json};
use std::time::Duration;

const MIB: usize = 1 << 20;

/// Bytes of every value, in an order that repeats only every 251 × 256.
fn binary(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 256) as u8 ^ (i / 251) as u8)
        .collect()
}

/// Starts a streamed write of `content` in chunks of `chunk` bytes (base64)
/// and returns the request id, without waiting for the answer.
fn send_write(host: &Host, id: &str, path: &str, content: &[u8], chunk: usize) -> Value {
    let req = host.send(
        "files.write",
        json!({"sandbox_id": id, "path": path, "size": content.len(),
               "encoding": "base64", "mode": "0600", "stream": true}),
    );
    for piece in content.chunks(chunk) {
        host.notify(
            "files.write_chunk",
            json!({"request_id": req, "content": b64e(piece)}),
        );
    }
    req
}

/// A streamed read: the answer, and the `files.data` notifications' offsets
/// and contents (decoded when base64) in arrival order.
fn read_streamed(host: &Host, params: Value) -> (Value, Vec<(u64, Vec<u8>)>) {
    let base64 = params["encoding"] == "base64";
    let req = host.send("files.read", params);
    let answer = host
        .wait(&req, Duration::from_secs(120))
        .expect("streamed read");
    let data = host
        .notes_for("files.data", &req)
        .into_iter()
        .map(|(_, n)| {
            let content = n["params"]["content"].as_str().expect("content");
            let bytes = match base64 {
                true => b64d(content),
                false => content.as_bytes().to_vec(),
            };
            (n["params"]["offset"].as_u64().expect("offset"), bytes)
        })
        .collect();
    (answer, data)
}

/// The pieces in order, checking that each starts where the last ended.
fn joined(start: u64, data: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut all = Vec::new();
    for (offset, bytes) in data {
        assert_eq!(*offset, start + all.len() as u64, "pieces are contiguous");
        assert!(!bytes.is_empty(), "no empty piece");
        all.extend_from_slice(bytes);
    }
    all
}

fn binary_round_trip(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let path = format!("{}/stream ü dir/all bytes ñ.bin", workdir(&host, &id));
    let content = binary(3 * MIB + 5);
    // Uneven chunks: the host must not care where the client cuts.
    let req = send_write(&host, &id, &path, &content, 700_001);
    let info = host
        .wait(&req, Duration::from_secs(120))
        .expect("streamed write");
    assert_eq!(info["size"], content.len(), "{info}");
    assert_eq!(info["path"], path.as_str());
    assert_eq!(info["mode"], "0600", "{info}");

    let (answer, data) = read_streamed(
        &host,
        json!({"sandbox_id": id, "path": path, "encoding": "base64", "stream": true}),
    );
    assert_eq!(
        answer,
        json!({"size": content.len(), "encoding": "base64"}),
        "the answer carries no content"
    );
    assert!(data.len() >= 3, "{} pieces for 3 MiB", data.len());
    assert!(
        data.iter().all(|(_, b)| b.len() <= MIB),
        "pieces of ≤ 1 MiB"
    );
    assert!(joined(0, &data) == content, "read back what was written");

    // A range: offsets are the file's, and only the range is sent.
    let (answer, data) = read_streamed(
        &host,
        json!({"sandbox_id": id, "path": path, "encoding": "base64", "stream": true,
               "offset": MIB - 3, "length": 10}),
    );
    assert_eq!(answer["size"], 10, "{answer}");
    assert_eq!(joined((MIB - 3) as u64, &data), &content[MIB - 3..MIB + 7]);
}
both_modes!(binary_content_streams_both_ways, super::binary_round_trip);

#[test]
fn text_is_cut_only_between_characters() {
    let host = Host::start(Mode::Direct);
    let id = host.create_sandbox();
    let dir = workdir(&host, &id);
    // A two-byte character across the first 1 MiB boundary, a four-byte one
    // across the second.
    let mut text = "a".repeat(MIB - 1);
    text.push('é');
    text.push_str(&"b".repeat(MIB - 3));
    text.push('🦀');
    text.push_str("\n\"quoted\" \\ end\n");
    let path = format!("{dir}/text.txt");
    let req = begin(&host, &id, &path, text.len());
    // Text chunks are JSON strings, so they are whole characters by nature.
    let (head, tail) = text.split_at(MIB - 1);
    for piece in [head, tail] {
        host.notify(
            "files.write_chunk",
            json!({"request_id": req, "content": piece}),
        );
    }
    let info = host.wait(&req, Duration::from_secs(60)).expect("write");
    assert_eq!(info["size"], text.len());

    let (answer, data) = read_streamed(
        &host,
        json!({"sandbox_id": id, "path": path, "stream": true}),
    );
    assert_eq!(answer, json!({"size": text.len(), "encoding": "utf8"}));
    assert!(data.len() >= 2, "{} pieces", data.len());
    assert_eq!(String::from_utf8(joined(0, &data)).unwrap(), text);

    // Invalid UTF-8 past the first piece: an error naming the file offset,
    // after the valid pieces before it.
    let mut bytes = vec![b'x'; MIB + MIB / 2];
    bytes[MIB + 1000] = 0xff;
    let bad = format!("{dir}/bad.txt");
    let req = send_write(&host, &id, &bad, &bytes, MIB);
    host.wait(&req, Duration::from_secs(60)).expect("write");
    let req = host.send(
        "files.read",
        json!({"sandbox_id": id, "path": bad, "stream": true}),
    );
    let err = host
        .wait(&req, Duration::from_secs(60))
        .expect_err("not text");
    assert_eq!(err.epp, "E1001", "{err:?}");
    assert!(
        err.message.contains(&format!("offset {}", MIB + 1000)) && err.message.contains("base64"),
        "{}",
        err.message
    );
    let sent: usize = host
        .notes_for("files.data", &req)
        .iter()
        .map(|(_, n)| n["params"]["content"].as_str().unwrap().len())
        .sum();
    assert!(
        sent <= MIB + 1000,
        "only valid text went out ({sent} bytes)"
    );
}

#[test]
fn a_streamed_read_is_not_bounded_by_max_output_bytes() {
    let host = HostBuilder::new(Mode::Direct)
        .arg("--max-output-bytes")
        .arg("1048576")
        .spawn();
    let id = host.create_sandbox();
    let path = format!("{}/big.bin", workdir(&host, &id));
    let content = binary(2 * MIB + 1);
    let req = send_write(&host, &id, &path, &content, MIB);
    host.wait(&req, Duration::from_secs(60)).expect("write");
    let err = host.fails(
        "files.read",
        json!({"sandbox_id": id, "path": path, "encoding": "base64"}),
        "E1001",
    );
    assert!(
        err.message.contains("--max-output-bytes"),
        "{}",
        err.message
    );
    let (answer, data) = read_streamed(
        &host,
        json!({"sandbox_id": id, "path": path, "encoding": "base64", "stream": true}),
    );
    assert_eq!(answer["size"], content.len());
    assert!(joined(0, &data) == content);
}

/// Reads a text file back whole.
fn text_of(host: &Host, id: &str, path: &str) -> String {
    host.ok("files.read", json!({"sandbox_id": id, "path": path}))["content"]
        .as_str()
        .expect("content")
        .to_string()
}

/// The testbed execd's temporary upload files beside `path` (name, size).
fn upload_temps(host: &Host, id: &str, path: &str) -> Vec<(String, u64)> {
    let dir = path.rsplit_once('/').expect("an absolute path").0;
    let list = host.ok("files.list", json!({"sandbox_id": id, "path": dir}));
    list["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| {
            let name = e["name"].as_str().expect("name");
            name.contains(".execd-upload-")
                .then(|| (name.to_string(), e["size"].as_u64().expect("size")))
        })
        .collect()
}

/// Starts a streamed text write of `size` bytes (its chunks are the
/// caller's) and returns its request id.
fn begin(host: &Host, id: &str, path: &str, size: usize) -> Value {
    host.send(
        "files.write",
        json!({"sandbox_id": id, "path": path, "size": size, "stream": true}),
    )
}

/// A sandbox with a file that holds "old": (sandbox id, path).
fn with_old_file(host: &Host, name: &str) -> (String, String) {
    let id = host.create_sandbox();
    let path = format!("{}/{name}", workdir(host, &id));
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": path, "content": "old"}),
    );
    (id, path)
}

#[test]
fn a_failed_or_cancelled_streamed_write_leaves_the_old_file() {
    let host = Host::start(Mode::Direct);
    let (id, path) = with_old_file(&host, "keep.txt");
    let start = |size: usize| begin(&host, &id, &path, size);
    let chunk = |req: &Value, content: Value| {
        host.notify(
            "files.write_chunk",
            json!({"request_id": req, "content": content}),
        )
    };
    let wait_err = |req: &Value| {
        host.wait(req, Duration::from_secs(60))
            .expect_err("the write must fail")
    };

    // More bytes than announced.
    let req = start(10);
    chunk(&req, json!("0123456"));
    chunk(&req, json!("789ab"));
    let err = wait_err(&req);
    assert_eq!(err.epp, "E1001");
    assert!(
        err.message.contains("more than `size` (10)"),
        "{}",
        err.message
    );
    assert_eq!(text_of(&host, &id, &path), "old");

    // A chunk that is not a chunk.
    let req = start(10);
    chunk(&req, json!(12));
    let err = wait_err(&req);
    assert_eq!(err.epp, "E1001");
    assert!(err.message.contains("files.write_chunk"), "{}", err.message);
    assert_eq!(text_of(&host, &id, &path), "old");

    // Bad base64.
    let req = host.send(
        "files.write",
        json!({"sandbox_id": id, "path": path, "size": 3, "encoding": "base64", "stream": true}),
    );
    chunk(&req, json!("not base64!"));
    let err = wait_err(&req);
    assert_eq!(err.epp, "E1001");
    assert!(err.message.contains("not valid base64"), "{}", err.message);
    assert_eq!(text_of(&host, &id, &path), "old");

    // Cancelled halfway: the upload is dropped before its end. The testbed's
    // execd streams an upload into a temporary file beside its target, so the
    // first five bytes are under way once a new such file holds them.
    let before = upload_temps(&host, &id, &path);
    let req = start(10);
    chunk(&req, json!("01234"));
    wait_until(
        "the first chunk in a temporary upload file of execd's",
        Duration::from_secs(30),
        || {
            upload_temps(&host, &id, &path)
                .into_iter()
                .find(|(name, size)| *size == 5 && !before.iter().any(|(old, _)| old == name))
        },
    );
    host.notify("epp.cancel", json!({"id": req}));
    let err = wait_err(&req);
    assert_eq!(err.epp, "E4999", "{err:?}");
    assert_eq!(text_of(&host, &id, &path), "old");

    // Chunks for a request that ended are dropped, and the host goes on.
    chunk(&req, json!("56789"));
    assert_eq!(text_of(&host, &id, &path), "old");
}

#[test]
fn streamed_write_params_are_checked() {
    let host = Host::start(Mode::Direct);
    let id = host.create_sandbox();
    let path = format!("{}/p.txt", workdir(&host, &id));
    for (params, needle) in [
        (
            json!({"sandbox_id": id, "path": path, "stream": true}),
            "`size`",
        ),
        (
            json!({"sandbox_id": id, "path": path, "size": 1, "content": "x", "stream": true}),
            "no `content`",
        ),
        (
            json!({"sandbox_id": id, "path": path, "size": 1, "content": "x"}),
            "`size` goes with `stream: true`",
        ),
        (
            json!({"sandbox_id": id, "files": [{"path": path, "content": "x"}], "stream": true}),
            "stream one file at a time",
        ),
    ] {
        let err = host.fails("files.write", params, "E1001");
        assert!(err.message.contains(needle), "{needle}: {}", err.message);
    }
    // Nothing was written by any of them.
    assert_eq!(
        host.ok("files.exists", json!({"sandbox_id": id, "path": path}))["exists"],
        false
    );
}

#[test]
fn interleaved_streamed_writes_and_stray_chunks() {
    let mut host = Host::start(Mode::Direct);
    let id = host.create_sandbox();
    let dir = workdir(&host, &id);
    let (a, b) = (format!("{dir}/a.txt"), format!("{dir}/b.txt"));
    let (ra, rb) = (begin(&host, &id, &a, 6), begin(&host, &id, &b, 6));
    // A chunk naming no request in flight is ignored (and logged).
    host.notify(
        "files.write_chunk",
        json!({"request_id": "nobody", "content": "zzz"}),
    );
    for (req, piece) in [(&ra, "aaa"), (&rb, "bbb"), (&ra, "AAA"), (&rb, "BBB")] {
        host.notify(
            "files.write_chunk",
            json!({"request_id": req, "content": piece}),
        );
    }
    for req in [&ra, &rb] {
        host.wait(req, Duration::from_secs(60)).expect("write");
    }
    assert_eq!(text_of(&host, &id, &a), "aaaAAA");
    assert_eq!(text_of(&host, &id, &b), "bbbBBB");
    // An empty file needs no chunk at all.
    let empty = format!("{dir}/empty");
    let info = host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": empty, "size": 0, "stream": true}),
    );
    assert_eq!(info["size"], 0);
    // stderr is complete once the host has exited.
    host.finish(Duration::from_secs(30));
    let log = host.stderr();
    assert!(
        log.contains("ignoring input for a request that is not in flight")
            && log.contains("request_id=\"nobody\""),
        "the stray chunk is logged: {log}"
    );
}

#[test]
fn chunks_that_cannot_be_read_fail_their_write_at_once() {
    let host = HostBuilder::new(Mode::Direct)
        .arg("--max-line-bytes")
        .arg("65536")
        .spawn();
    let (id, path) = with_old_file(&host, "lost.txt");
    let start = |size: usize| begin(&host, &id, &path, size);
    let quick = Duration::from_secs(20);
    // A chunk line longer than --max-line-bytes, and one that is not JSON.
    let too_long = |req: &Value| {
        json!({"jsonrpc": "2.0", "method": "files.write_chunk",
               "params": {"request_id": req, "content": "x".repeat(70_000)}})
        .to_string()
    };
    let broken = |req: &Value| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"files.write_chunk","params":{{"request_id":{req},"content":"abc"#
        )
    };
    type Line<'a> = &'a dyn Fn(&Value) -> String;
    let cases: [(&str, Line); 2] = [
        ("more than this host accepts", &too_long),
        ("could not be read", &broken),
    ];
    for (needle, line) in cases {
        let req = start(100);
        host.raw(format!("{}\n", line(&req)).as_bytes());
        let err = host.wait(&req, quick).expect_err("the write fails");
        assert_eq!(err.epp, "E1001", "{err:?}");
        assert!(
            err.message.contains("could not be read") && err.message.contains(needle),
            "{needle}: {}",
            err.message
        );
        assert_eq!(text_of(&host, &id, &path), "old");
    }

    // A second streamed write under the id of one in flight: both fail.
    let req = start(10);
    host.send_duplicate(
        req.clone(),
        "files.write",
        json!({"sandbox_id": id, "path": path, "size": 10, "stream": true}),
    );
    let answers: Vec<_> = (0..2)
        .map(|_| host.wait(&req, quick).expect_err("both fail"))
        .collect();
    assert!(
        answers.iter().any(|e| e.message.contains("already used")),
        "{answers:?}"
    );
    assert!(
        answers
            .iter()
            .any(|e| e.message.contains("reused this write's id")),
        "{answers:?}"
    );
    assert_eq!(text_of(&host, &id, &path), "old");
}

/// Starts a streamed write of `content` in binary frames of `chunk` bytes
/// and returns the request id, without waiting for the answer.
fn send_frames(host: &Host, id: &str, path: &str, content: &[u8], chunk: usize) -> Value {
    let req = host.send(
        "files.write",
        json!({"sandbox_id": id, "path": path, "size": content.len(),
               "encoding": "binary", "stream": true}),
    );
    for piece in content.chunks(chunk) {
        host.notify_framed("files.write_chunk", json!({"request_id": req}), piece);
    }
    req
}

/// A streamed read in binary frames: the answer and (offset, bytes) of each
/// `files.data`, checking that every one is a frame of the length it says.
fn read_frames(host: &Host, params: Value) -> (Value, Vec<(u64, Vec<u8>)>) {
    let req = host.send("files.read", params);
    let answer = host
        .wait(&req, Duration::from_secs(120))
        .expect("framed read");
    let data = host
        .frames_for("files.data", &req)
        .into_iter()
        .map(|(note, bytes)| {
            let params = &note["params"];
            assert!(
                params.get("content").is_none(),
                "no content in a frame: {note}"
            );
            assert_eq!(
                params["bytes"],
                bytes.len(),
                "the frame is as long as it says"
            );
            (params["offset"].as_u64().expect("offset"), bytes)
        })
        .collect();
    (answer, data)
}

fn frames_round_trip(mode: Mode) {
    let host = Host::start(mode);
    let hello = host.ok("epp.hello", json!({}));
    assert_eq!(hello["wire"]["binary_frames"], true, "{hello}");
    let id = host.create_sandbox();
    let path = format!("{}/frames ü/every byte.bin", workdir(&host, &id));
    // Newlines, NULs and bytes that are not UTF-8 inside the frames: the
    // host must count, not look. Uneven chunks, and one of a single byte.
    let content = binary(3 * MIB + 7);
    let req = host.send(
        "files.write",
        json!({"sandbox_id": id, "path": path, "size": content.len(),
               "encoding": "binary", "mode": "0640", "stream": true}),
    );
    let (first, rest) = content.split_at(1);
    host.notify_framed("files.write_chunk", json!({"request_id": req}), first);
    for piece in rest.chunks(900_001) {
        host.notify_framed("files.write_chunk", json!({"request_id": req}), piece);
    }
    let info = host
        .wait(&req, Duration::from_secs(120))
        .expect("framed write");
    assert_eq!(info["size"], content.len(), "{info}");
    assert_eq!(info["mode"], "0640", "{info}");

    // The same bytes come back in frames, and as base64 in a JSON line.
    let (answer, data) = read_frames(
        &host,
        json!({"sandbox_id": id, "path": path, "encoding": "binary", "stream": true}),
    );
    assert_eq!(answer, json!({"size": content.len(), "encoding": "binary"}));
    assert!(data.len() >= 3, "{} frames for 3 MiB", data.len());
    assert!(joined(0, &data) == content, "frames carry the file");
    let whole = host.ok(
        "files.read",
        json!({"sandbox_id": id, "path": path, "encoding": "base64"}),
    );
    assert!(b64d(whole["content"].as_str().unwrap()) == content);

    // A range, and lines after the frames still parse: the host answers a
    // plain request that follows.
    let (answer, data) = read_frames(
        &host,
        json!({"sandbox_id": id, "path": path, "encoding": "binary", "stream": true,
               "offset": 2 * MIB - 1, "length": 3}),
    );
    assert_eq!(answer["size"], 3);
    assert_eq!(
        joined((2 * MIB - 1) as u64, &data),
        &content[2 * MIB - 1..2 * MIB + 2]
    );
    let exists = host.ok("files.exists", json!({"sandbox_id": id, "path": path}));
    assert_eq!(exists["exists"], true, "{exists}");
}
both_modes!(
    binary_frames_carry_content_both_ways,
    super::frames_round_trip
);

#[test]
fn binary_frames_refuse_what_they_cannot_carry() {
    let host = HostBuilder::new(Mode::Direct)
        .arg("--max-line-bytes")
        .arg("1048576")
        .spawn();
    let (id, path) = with_old_file(&host, "kept.txt");
    // Not streamed: raw bytes cannot ride in a JSON line.
    let err = host.fails(
        "files.read",
        json!({"sandbox_id": id, "path": path, "encoding": "binary"}),
        "E1001",
    );
    assert!(err.message.contains("stream: true"), "{}", err.message);
    let err = host.fails(
        "files.write",
        json!({"sandbox_id": id, "path": path, "content": "x", "encoding": "binary"}),
        "E1001",
    );
    assert!(err.message.contains("binary frames"), "{}", err.message);

    let wait_err = |req: &Value| {
        host.wait(req, Duration::from_secs(60))
            .expect_err("the write must fail")
    };
    // A text chunk for a binary write.
    let req = host.send(
        "files.write",
        json!({"sandbox_id": id, "path": path, "size": 3, "encoding": "binary", "stream": true}),
    );
    host.notify(
        "files.write_chunk",
        json!({"request_id": req, "content": "new"}),
    );
    let err = wait_err(&req);
    assert!(err.message.contains("binary frame"), "{}", err.message);
    // A frame for a base64 write.
    let req = host.send(
        "files.write",
        json!({"sandbox_id": id, "path": path, "size": 3, "encoding": "base64", "stream": true}),
    );
    host.notify_framed("files.write_chunk", json!({"request_id": req}), b"new");
    let err = wait_err(&req);
    assert!(
        err.message.contains("encoding \"binary\""),
        "{}",
        err.message
    );
    // A frame longer than --max-line-bytes: its bytes are skipped, not kept,
    // the write fails, and the next line is read where it starts.
    let big = vec![b'\n'; MIB + 1];
    let req = send_frames(&host, &id, &path, &big, MIB + 1);
    let err = wait_err(&req);
    assert!(err.message.contains("--max-line-bytes"), "{}", err.message);
    assert_eq!(
        text_of(&host, &id, &path),
        "old",
        "the file was not changed"
    );
}

#[test]
fn input_that_ends_inside_a_frame_leaves_the_old_file() {
    // The sandbox belongs to a host that stays; the one whose input ends writes.
    let keeper = Host::start(Mode::Direct);
    let (id, path) = with_old_file(&keeper, "cut.txt");
    let mut host = Host::start(Mode::Direct);
    let req = host.send(
        "files.write",
        json!({"sandbox_id": id, "path": path, "size": 10, "encoding": "binary", "stream": true}),
    );
    // The header promises 10 bytes; 4 come, then the input ends.
    host.raw(
        format!(
            "{}\nnew!",
            json!({"jsonrpc": "2.0", "method": "files.write_chunk",
                   "params": {"request_id": req, "bytes": 10}})
        )
        .as_bytes(),
    );
    assert!(host.finish(Duration::from_secs(60)).success());
    let err = host
        .wait(&req, Duration::from_secs(5))
        .expect_err("a cut frame fails the write");
    assert_eq!(err.epp, "E1001", "{err:?}");
    assert!(err.message.contains("4 of its 10 bytes"), "{}", err.message);
    assert_eq!(text_of(&keeper, &id, &path), "old");
}
