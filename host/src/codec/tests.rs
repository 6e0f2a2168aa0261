//! The projection rule (docs/epp-1.md §8) on shapes built as wasmtime reports
//! them for wit/infra.wit, and the cost of the codec next to the typed path it
//! replaced.

use super::decode::{self, decode};
use super::encode::{encode, record};
use super::shape::{Case, Field, Int, Name, Shape, Unit};
use crate::contract::table::{self, Method};
use serde_json::{Map, Value, json};
use std::time::Instant;
use wasmtime::component::Val;

/// The params as `Val`s, under generous byte bounds.
fn decoded(
    method: &Method,
    fields: &[Field],
    params: Map<String, Value>,
    taken: &[&str],
) -> Result<Vec<Val>, String> {
    let limits = decode::Limits {
        top: 1 << 20,
        nested: 1 << 20,
    };
    let args = decode::params(method, fields, params, taken, &limits)?;
    Ok(args.into_iter().map(decode::Arg::into_val).collect())
}

fn opt(shape: Shape) -> Shape {
    Shape::Option(Box::new(shape))
}

fn fields(list: &[(&str, Shape)]) -> Vec<Field> {
    list.iter()
        .map(|(name, shape)| Field::new(name, shape.clone()))
        .collect()
}

fn names(list: &[&str]) -> Vec<Name> {
    list.iter()
        .map(|n| Name {
            wit: n.to_string(),
            wire: n.replace('-', "_"),
        })
        .collect()
}

fn sandbox_info() -> Vec<Field> {
    fields(&[
        ("sandbox-id", Shape::String),
        ("template", Shape::String),
        ("image", opt(Shape::String)),
        ("state", Shape::String),
        ("metadata", Shape::KeyValues),
        ("created-at", opt(Shape::String)),
        ("expires-at", opt(Shape::String)),
    ])
}

fn file_info() -> Vec<Field> {
    fields(&[
        ("path", Shape::String),
        ("name", Shape::String),
        (
            "type",
            Shape::Enum(names(&["file", "directory", "symlink", "other"])),
        ),
        ("size", Shape::Int(Int::U64)),
        ("mode", Shape::Int(Int::U32)),
        ("owner", opt(Shape::String)),
        ("group", opt(Shape::String)),
        ("modified-at", opt(Shape::String)),
    ])
}

fn create_request() -> Vec<Field> {
    fields(&[
        ("template", opt(Shape::String)),
        ("timeout", opt(Shape::Int(Int::U32))),
        ("env", Shape::KeyValues),
        ("metadata", Shape::KeyValues),
        (
            "resources",
            opt(Shape::Record(fields(&[
                ("cpu", opt(Shape::String)),
                ("memory", opt(Shape::String)),
            ]))),
        ),
        ("entrypoint", opt(Shape::List(Box::new(Shape::String)))),
        ("ready-timeout", opt(Shape::Int(Int::U32))),
    ])
}

fn s(text: &str) -> Val {
    Val::String(text.into())
}

fn some(v: Val) -> Val {
    Val::Option(Some(Box::new(v)))
}

fn kv(pairs: &[(&str, &str)]) -> Val {
    Val::List(
        pairs
            .iter()
            .map(|(k, v)| Val::Tuple(vec![s(k), s(v)]))
            .collect(),
    )
}

fn info_val(i: usize) -> Vec<(String, Val)> {
    vec![
        ("sandbox-id".into(), s(&format!("sbx-{i}"))),
        ("template".into(), s("base")),
        ("image".into(), some(s("python:3.12-slim"))),
        ("state".into(), s("running")),
        ("metadata".into(), kv(&[("owner", "me"), ("team", "x")])),
        ("created-at".into(), some(s("2025-01-01T00:00:00Z"))),
        ("expires-at".into(), Val::Option(None)),
    ]
}

fn file_val(i: usize) -> Val {
    Val::Record(vec![
        ("path".into(), s(&format!("/tmp/dir/file-{i}.txt"))),
        ("name".into(), s(&format!("file-{i}.txt"))),
        ("type".into(), Val::Enum("file".into())),
        ("size".into(), Val::U64(1234 + i as u64)),
        ("mode".into(), Val::U32(0o644)),
        ("owner".into(), some(s("root"))),
        ("group".into(), some(s("root"))),
        ("modified-at".into(), some(s("2025-01-01T00:00:00Z"))),
    ])
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(map) => map,
        _ => unreachable!("test params are objects"),
    }
}

fn method(name: &str) -> &'static Method {
    table::find(name).expect("a method of wit/infra.wit")
}

#[test]
fn answers_are_byte_for_byte_what_the_hand_written_builders_wrote() {
    let info = record(&sandbox_info(), info_val(7)).unwrap();
    assert_eq!(
        serde_json::to_string(&info).unwrap(),
        r#"{"sandbox_id":"sbx-7","template":"base","image":"python:3.12-slim","state":"running","metadata":{"owner":"me","team":"x"},"created_at":"2025-01-01T00:00:00Z","expires_at":null}"#
    );
    let file = encode(&Shape::Record(file_info()), file_val(3)).unwrap();
    assert_eq!(
        serde_json::to_string(&file).unwrap(),
        r#"{"path":"/tmp/dir/file-3.txt","name":"file-3.txt","type":"file","size":1237,"mode":"0644","owner":"root","group":"root","modified_at":"2025-01-01T00:00:00Z"}"#
    );
    let status = fields(&[
        ("command-id", Shape::String),
        ("running", Shape::Bool),
        ("exit-code", opt(Shape::Int(Int::S32))),
        ("error", opt(Shape::String)),
        ("started-at", opt(Shape::String)),
        ("finished-at", opt(Shape::String)),
    ]);
    let answer = record(
        &status,
        vec![
            ("command-id".into(), s("c1")),
            ("running".into(), Val::Bool(false)),
            ("exit-code".into(), some(Val::S32(-1))),
            ("error".into(), Val::Option(None)),
            ("started-at".into(), Val::Option(None)),
            ("finished-at".into(), some(s("t"))),
        ],
    )
    .unwrap();
    assert_eq!(
        serde_json::to_string(&answer).unwrap(),
        r#"{"command_id":"c1","running":false,"exit_code":-1,"error":null,"started_at":null,"finished_at":"t"}"#
    );
    // Duplicate keys: the last value wins, at the first key's place (as before).
    let dup = encode(&Shape::KeyValues, kv(&[("a", "1"), ("b", "2"), ("a", "3")])).unwrap();
    assert_eq!(dup.to_string(), r#"{"a":"3","b":"2"}"#);
}

#[test]
fn params_follow_the_rule() {
    let create = method("sandbox.create");
    let got = decoded(
        create,
        &create_request(),
        object(json!({"template": "base", "metadata": {"owner": "me"}, "resources": {"cpu": "1"}, "entrypoint": "/bin/sh"})),
        &[],
    )
    .unwrap();
    assert_eq!(got.len(), 7);
    assert!(matches!(&got[0], Val::Option(Some(v)) if **v == s("base")));
    assert!(matches!(&got[1], Val::Option(None)), "absent option");
    assert!(
        matches!(&got[2], Val::List(v) if v.is_empty()),
        "absent key-values"
    );
    assert_eq!(got[3], kv(&[("owner", "me")]));
    assert_eq!(
        got[4],
        some(Val::Record(vec![
            ("cpu".into(), some(s("1"))),
            ("memory".into(), Val::Option(None)),
        ]))
    );
    // One value where a list is expected is a list of one.
    assert_eq!(got[5], some(Val::List(vec![s("/bin/sh")])));

    let err = |m: &Method, f: &[Field], p: Value| decoded(m, f, object(p), &[]).unwrap_err();
    assert_eq!(
        err(create, &create_request(), json!({"tmplate": "x"})),
        "unknown field `tmplate`, expected one of `template`, `timeout`, `env`, `metadata`, \
         `resources`, `entrypoint`, `ready_timeout`"
    );
    assert_eq!(
        err(create, &create_request(), json!({"resources": {"gpu": 1}})),
        "unknown field `gpu` in `resources`, expected `cpu` or `memory`"
    );
    assert_eq!(
        err(create, &create_request(), json!({"timeout": -5})),
        "`timeout` must be an integer from 0 to 4294967295, got -5"
    );
    assert_eq!(
        err(create, &create_request(), json!({"timeout": 1.5})),
        "`timeout` must be an integer from 0 to 4294967295, got 1.5"
    );
    assert_eq!(
        err(create, &create_request(), json!({"env": {"A": 1}})),
        "`env.A` must be a string, got 1"
    );
    assert_eq!(
        err(create, &create_request(), json!({"entrypoint": ["a", 2]})),
        "`entrypoint[1]` must be a string, got 2"
    );

    let info = method("sandbox.get_info");
    let id = fields(&[("sandbox-id", Shape::String)]);
    assert_eq!(err(info, &id, json!({})), "missing field `sandbox_id`");
    assert_eq!(
        err(info, &id, json!({"sandbox_id": null})),
        "missing field `sandbox_id`"
    );
    assert_eq!(
        err(info, &id, json!({"sandboxId": "x"})),
        "unknown field `sandboxId`, expected `sandbox_id`"
    );
}

#[test]
fn aliases_defaults_and_ranges_come_from_the_table() {
    let list = method("sandbox.list");
    let request = fields(&[
        ("states", Shape::List(Box::new(Shape::String))),
        ("metadata", Shape::KeyValues),
    ]);
    let one = decoded(list, &request, object(json!({"state": "running"})), &[]).unwrap();
    assert_eq!(one[0], Val::List(vec![s("running")]));
    let many = decoded(list, &request, object(json!({"state": ["a", "b"]})), &[]).unwrap();
    assert_eq!(many[0], Val::List(vec![s("a"), s("b")]));
    let canonical = decoded(list, &request, object(json!({"states": ["a"]})), &[]).unwrap();
    assert_eq!(canonical[0], Val::List(vec![s("a")]));
    assert!(decoded(list, &request, object(json!({"state": null})), &[]).is_ok());
    assert_eq!(
        decoded(list, &request, object(json!({"state": 5})), &[]).unwrap_err(),
        "`state` must be a string, got 5",
        "named as the client wrote it"
    );
    assert!(
        decoded(
            list,
            &request,
            object(json!({"state": "a", "states": "b"})),
            &[]
        )
        .unwrap_err()
        .contains("name the same field")
    );

    let files = method("files.list");
    let params = fields(&[
        ("sandbox-id", Shape::String),
        ("path", Shape::String),
        ("depth", Shape::Int(Int::U32)),
    ]);
    let got = decoded(
        files,
        &params,
        object(json!({"sandbox_id": "s", "path": "/"})),
        &[],
    )
    .unwrap();
    assert_eq!(got[2], Val::U32(1), "default.depth=1");
    assert_eq!(
        decoded(
            files,
            &params,
            object(json!({"sandbox_id": "s", "path": "/", "depth": 0})),
            &[],
        )
        .unwrap_err(),
        "`depth` must be at least 1, got 0"
    );

    let signal = method("process.signal");
    let params = fields(&[
        ("sandbox-id", Shape::String),
        ("pid", Shape::Int(Int::U32)),
        ("signal", Shape::String),
    ]);
    let got = decoded(
        signal,
        &params,
        object(json!({"sandbox_id": "s", "pid": 7})),
        &[],
    )
    .unwrap();
    assert_eq!(got[2], s("SIGTERM"));
}

#[test]
fn units_seconds_modes_and_bytes() {
    let run = method("commands.run");
    let request = fields(&[
        ("sandbox-id", Shape::String),
        ("cmd", Shape::String),
        ("timeout-ms", opt(Shape::Int(Int::U64))),
    ]);
    assert_eq!(request[2].wire, "timeout");
    assert_eq!(request[2].unit, Unit::Seconds);
    let p = |t: Value| {
        decoded(
            run,
            &request,
            object(json!({"sandbox_id": "s", "cmd": "c", "timeout": t})),
            &[],
        )
    };
    assert_eq!(p(json!(1.5)).unwrap()[2], some(Val::U64(1500)));
    assert_eq!(
        p(json!(0.0001)).unwrap()[2],
        some(Val::U64(1)),
        "rounded up"
    );
    for bad in [json!(0), json!(-1), json!(1e10), json!("5")] {
        assert!(
            p(bad.clone())
                .unwrap_err()
                .starts_with("`timeout` must be a positive number of seconds"),
            "{bad}"
        );
    }
    let out = record(
        &request,
        vec![
            ("sandbox-id".into(), s("s")),
            ("cmd".into(), s("c")),
            ("timeout-ms".into(), some(Val::U64(2500))),
        ],
    )
    .unwrap();
    assert_eq!(out["timeout"], json!(2.5));

    let mode = Field::new("mode", opt(Shape::Int(Int::U32)));
    assert_eq!(mode.unit, Unit::Mode);
    let m = |v: Value| decode::mode(&v, "mode");
    assert_eq!(m(json!("644")), Ok(0o644));
    assert_eq!(m(json!("0755")), Ok(0o755));
    assert_eq!(m(json!("0o600")), Ok(0o600));
    assert_eq!(m(json!(644)), Ok(0o644));
    assert_eq!(m(json!(4755)), Ok(0o4755));
    assert_eq!(
        m(json!(648)),
        Err("mode `648` is not octal; use digits 0-7 such as \"0644\"".into())
    );
    assert!(m(json!(-1)).is_err());
    assert!(m(json!("9")).is_err());
    assert_eq!(m(json!("77777")), Err("mode 77777 is beyond 7777".into()));
    assert!(m(json!(true)).is_err());

    let data = Field::new("data", Shape::Bytes);
    let input = method("commands.send_input");
    let params = vec![data];
    let got = decoded(input, &params, object(json!({"data": "aGk="})), &[]).unwrap();
    assert_eq!(got[0], Val::List(vec![Val::U8(b'h'), Val::U8(b'i')]));
    assert!(
        decoded(input, &params, object(json!({"data": "%%%"})), &[])
            .unwrap_err()
            .starts_with("`data` is not valid base64")
    );
    assert_eq!(
        encode(&Shape::Bytes, Val::List(vec![Val::U8(b'h'), Val::U8(b'i')])).unwrap(),
        json!("aGk=")
    );
}

#[test]
fn enums_variants_flags_and_tuples() {
    let kind = Shape::Enum(names(&["create", "dir-made"]));
    assert_eq!(
        decode(&kind, &json!("dir_made"), "k").unwrap(),
        Val::Enum("dir-made".into())
    );
    assert!(
        decode(&kind, &json!("dir-made"), "k").is_err(),
        "wire names use `_`"
    );
    assert_eq!(
        encode(&kind, Val::Enum("dir-made".into())).unwrap(),
        json!("dir_made")
    );

    let event = Shape::Variant(vec![
        Case {
            name: Name {
                wit: "started".into(),
                wire: "started".into(),
            },
            payload: Some(Shape::String),
        },
        Case {
            name: Name {
                wit: "timed-out".into(),
                wire: "timed_out".into(),
            },
            payload: None,
        },
    ]);
    let started = Val::Variant("started".into(), Some(Box::new(s("c1"))));
    assert_eq!(
        encode(&event, started.clone()).unwrap(),
        json!({"started": "c1"})
    );
    assert_eq!(
        decode(&event, &json!({"started": "c1"}), "e").unwrap(),
        started
    );
    let bare = Val::Variant("timed-out".into(), None);
    assert_eq!(encode(&event, bare.clone()).unwrap(), json!("timed_out"));
    assert_eq!(decode(&event, &json!("timed_out"), "e").unwrap(), bare);
    assert!(
        decode(&event, &json!("started"), "e")
            .unwrap_err()
            .contains("needs a payload")
    );

    let caps = Shape::Flags(names(&["files-rw", "pty"]));
    assert_eq!(
        encode(&caps, Val::Flags(vec!["files-rw".into()])).unwrap(),
        json!(["files_rw"])
    );
    assert_eq!(
        decode(&caps, &json!(["pty", "files_rw"]), "c").unwrap(),
        Val::Flags(vec!["pty".into(), "files-rw".into()])
    );

    let pair = Shape::Tuple(vec![Shape::String, Shape::Int(Int::U16)]);
    assert_eq!(
        decode(&pair, &json!(["a", 8]), "t").unwrap(),
        Val::Tuple(vec![s("a"), Val::U16(8)])
    );
    assert!(decode(&pair, &json!(["a"]), "t").is_err());
    assert!(decode(&Shape::Opaque("resource"), &json!(1), "r").is_err());
}

/// Today's typed path, as the deleted `files.rs` wrote it: the baseline.
fn typed_file_json(info: &crate::contract::bindings::infra::FileInfo) -> Value {
    use crate::contract::bindings::infra::FileType;
    let kind = match info.type_ {
        FileType::File => "file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Other => "other",
    };
    json!({
        "path": info.path.clone(),
        "name": info.name.clone(),
        "type": kind,
        "size": info.size,
        "mode": format!("{:04o}", info.mode),
        "owner": info.owner.clone(),
        "group": info.group.clone(),
        "modified_at": info.modified_at.clone(),
    })
}

/// Cost of the codec per call next to the typed path it replaced, without the
/// guest (lifting and lowering are measured end to end in
/// host/tests/protocol.rs `codec_cost_end_to_end`). Prints; asserts only
/// that both paths produce the same text.
#[test]
fn codec_cost_next_to_the_typed_path() {
    use crate::contract::bindings::infra::{FileInfo, FileType};
    let typed: Vec<FileInfo> = (0..1000)
        .map(|i| FileInfo {
            path: format!("/tmp/dir/file-{i}.txt"),
            name: format!("file-{i}.txt"),
            type_: FileType::File,
            size: 1234 + i as u64,
            mode: 0o644,
            owner: Some("root".into()),
            group: Some("root".into()),
            modified_at: Some("2025-01-01T00:00:00Z".into()),
        })
        .collect();
    let entries = Shape::List(Box::new(Shape::Record(file_info())));
    let vals = || Val::List((0..1000).map(file_val).collect());
    let via_codec = encode(&entries, vals()).unwrap();
    let via_types = Value::Array(typed.iter().map(typed_file_json).collect());
    assert_eq!(via_codec.to_string(), via_types.to_string());

    let rounds = 50;
    let time = |f: &mut dyn FnMut()| {
        let began = Instant::now();
        for _ in 0..rounds {
            f();
        }
        began.elapsed() / rounds
    };
    let list_codec = time(&mut || {
        std::hint::black_box(encode(&entries, vals()).unwrap());
    });
    let list_typed = time(&mut || {
        let list = typed.clone();
        std::hint::black_box(Value::Array(list.iter().map(typed_file_json).collect()));
    });
    let info_fields = sandbox_info();
    let info_codec = time(&mut || {
        for i in 0..1000 {
            std::hint::black_box(record(&info_fields, info_val(i)).unwrap());
        }
    }) / 1000;
    let create = method("sandbox.create");
    let shape = create_request();
    let params = object(
        json!({"template": "base", "timeout": 600, "metadata": {"owner": "me"}, "env": {"A": "1"}}),
    );
    let decode_codec = time(&mut || {
        for _ in 0..1000 {
            std::hint::black_box(decoded(create, &shape, params.clone(), &[]).unwrap());
        }
    }) / 1000;
    eprintln!(
        "codec cost (debug={}): files.list 1000 entries: Val->JSON {list_codec:?} (typed {list_typed:?}, \
         both including building the values); sandbox-info Val->JSON {info_codec:?}; \
         sandbox.create params JSON->Val {decode_codec:?}",
        cfg!(debug_assertions)
    );
}
