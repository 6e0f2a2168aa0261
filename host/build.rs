//! Derives the EPP/1 method table from the WIT world (docs/epp-1.md §8), so
//! the contract is written once, in `wit/`: every function of `interface infra`
//! with `/// epp: ...` doc lines is a wire method, and the cases of the event
//! variants its streams carry say what each event is. Writes
//! `$OUT_DIR/methods.rs` (included by `src/contract/table.rs`) and fails the
//! build, naming the function or case, on a tag the host could not honour.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use wit_parser::{
    Function, FunctionKind, Handle, IndexMap, Resolve, Type, TypeDefKind, TypeId, Variant,
};

#[allow(dead_code, reason = "the codec uses the rest of the naming rule")]
#[path = "src/contract/names.rs"]
mod names;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let wit = manifest.join("../wit");
    println!("cargo:rerun-if-changed={}", wit.display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/contract/names.rs");
    let (code, typed, calls) = match generate(&wit) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: the EPP/1 method table cannot be derived from wit/: {e}");
            std::process::exit(1);
        }
    };
    let dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    for (file, text) in [
        ("methods.rs", code),
        ("typed_events.rs", typed),
        ("typed_next.rs", calls),
    ] {
        let out = dir.join(file);
        if let Err(e) = std::fs::write(&out, text) {
            eprintln!("error: writing {}: {e}", out.display());
            std::process::exit(1);
        }
    }
}

/// What the WIT gives every check: the parsed world and a few type ids.
struct Ctx<'a> {
    resolve: &'a Resolve,
    functions: &'a IndexMap<String, Function>,
    capabilities: Vec<String>,
    epp_error: TypeId,
}

/// One wire method, as read from its function and its `epp:` lines.
struct Method {
    wire: String,
    function: String,
    capability: String,
    result: Option<String>,
    params: Vec<String>,
    seconds: Vec<String>,
    defaults: Vec<(String, String)>,
    aliases: Vec<(String, String)>,
    ranges: Vec<(String, Option<i64>, Option<i64>)>,
    extends: Option<String>,
    /// `None`: no `wait`; `Some(None)`: until the end; `Some(Some(f))`: field f.
    wait: Option<Option<String>>,
    stream: Option<Stream>,
}

/// The stream tags of a method and the functions that may serve it.
#[derive(Default)]
struct Stream {
    id: Option<String>,
    forward: Option<String>,
    note: Option<String>,
    input: Option<String>,
    detach: bool,
    prefer: Option<String>,
    when: Vec<(String, String)>,
    callees: Vec<Callee>,
}

/// A function that serves a stream method, and how.
struct Callee {
    function: String,
    /// `Main`, `Prefer` or `When { param, is_param }` as Rust source.
    via: String,
    answer: Answer,
}

enum Answer {
    Plain,
    Events {
        next: String,
        batched: bool,
        tuple: bool,
        cases: Option<Vec<Case>>,
    },
    Reader {
        read: String,
        size: Option<String>,
    },
    Writer {
        write: String,
        finish: String,
    },
}

struct Case {
    wit: String,
    wire: String,
    /// The `Role` as Rust source.
    role: String,
    note: Option<String>,
    /// Its payload as a Rust type of the typed mirror (`typed_events`), when
    /// it has a simple one: `Some("")` for no payload.
    rust: Option<String>,
    /// Its payload is `list<u8>`.
    bytes: bool,
}

/// The method table, the typed mirrors of event variants that carry bytes,
/// and the typed `next` calls that use them.
fn generate(wit: &Path) -> Result<(String, String, String), String> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve
        .push_dir(wit)
        .map_err(|e| format!("parsing {}: {e:#}", wit.display()))?;
    let interface = |name: &str| {
        resolve.packages[package]
            .interfaces
            .get(name)
            .copied()
            .ok_or_else(|| format!("the package has no interface `{name}`"))
    };
    let (infra, types) = (interface("infra")?, interface("types")?);
    let export = resolve
        .id_of(infra)
        .ok_or("interface `infra` has no package name")?;
    let epp_error = *resolve.interfaces[types]
        .types
        .get("epp-error")
        .ok_or("interface `types` has no `epp-error`")?;
    let cx = Ctx {
        resolve: &resolve,
        functions: &resolve.interfaces[infra].functions,
        capabilities: capabilities(&resolve, types)?,
        epp_error,
    };

    let mut methods = Vec::new();
    for func in cx.functions.values() {
        let located = |e: String| format!("wit/infra.wit, function `{}`: {e}", func.name);
        let Some(line) = epp_line(&func.docs, &func.name).map_err(located)? else {
            continue;
        };
        if func.kind != FunctionKind::Freestanding {
            return Err(located(
                "it has `epp:` lines but is not a plain function".into(),
            ));
        }
        methods.push(method(&cx, func, &line).map_err(located)?);
    }
    if methods.is_empty() {
        return Err("no function of `infra` has an `epp:` doc line".into());
    }
    let (typed, calls) = typed_events(&methods);
    Ok((render(&export, &cx.capabilities, &methods), typed, calls))
}

/// For every event stream whose variant carries `list<u8>` (terminal output),
/// a Rust mirror of the variant that wasmtime lifts typed, so its bytes are
/// never one `Val` each (host memory ~40× the payload), and the call of its
/// `next` through it. A variant with a payload the mirror cannot spell (a
/// record, a list of anything but bytes) keeps the dynamic path.
fn typed_events(methods: &[Method]) -> (String, String) {
    let mut types = String::from(
        "// Generated by host/build.rs from wit/: typed mirrors of event variants that carry bytes.\n\n",
    );
    let mut calls = String::from(
        "// Generated by host/build.rs from wit/: typed `next` calls of streams whose events carry bytes.\n\n\
         /// The next events of a stream whose `next` is `function`, through its typed mirror; none\n\
         /// when it has none.\n\
         async fn typed_next(\n    inst: &mut crate::runtime::Instance,\n    function: &str,\n    \
         stream: wasmtime::component::ResourceAny,\n    batched: bool,\n\
         ) -> Option<Result<Option<Vec<(&'static str, serde_json::Value)>>, crate::runtime::CallError>> {\n    \
         match function {\n",
    );
    let mut seen = BTreeSet::new();
    for m in methods {
        let Some(s) = &m.stream else { continue };
        for c in &s.callees {
            let Answer::Events {
                next,
                cases: Some(cases),
                ..
            } = &c.answer
            else {
                continue;
            };
            if !cases.iter().any(|c| c.bytes) || cases.iter().any(|c| c.rust.is_none()) {
                continue;
            }
            if !seen.insert(next.clone()) {
                continue;
            }
            let name = rust_name(
                next.trim_start_matches("[method]")
                    .replace('.', "-")
                    .as_str(),
            );
            let _ = writeln!(
                types,
                "/// The events of `{next}`, typed.\n\
                 #[derive(wasmtime::component::ComponentType, wasmtime::component::Lift)]\n\
                 #[component(variant)]\npub enum {name} {{"
            );
            let mut arms = String::new();
            for case in cases {
                let variant = rust_name(&case.wit);
                let rust = case.rust.as_deref().unwrap_or_default();
                if rust.is_empty() {
                    let _ = writeln!(
                        types,
                        "    #[component(name = {:?})]\n    {variant},",
                        case.wit
                    );
                    let _ = writeln!(
                        arms,
                        "            {name}::{variant} => ({:?}, serde_json::Value::Null),",
                        case.wit
                    );
                } else {
                    let _ = writeln!(
                        types,
                        "    #[component(name = {:?})]\n    {variant}({rust}),",
                        case.wit
                    );
                    let json = if case.bytes {
                        "bytes_json(v)"
                    } else {
                        "serde_json::Value::from(v)"
                    };
                    let _ = writeln!(
                        arms,
                        "            {name}::{variant}(v) => ({:?}, {json}),",
                        case.wit
                    );
                }
            }
            let _ = writeln!(
                types,
                "}}\n\nimpl TypedEvent for {name} {{\n    \
                 fn into_event(self) -> (&'static str, serde_json::Value) {{\n        \
                 match self {{\n{arms}        }}\n    }}\n}}\n"
            );
            let _ = writeln!(
                calls,
                "        {next:?} => Some(typed_call::<crate::contract::typed::{name}>(inst, function, \
                 stream, batched).await),"
            );
        }
    }
    calls.push_str("        _ => None,\n    }\n}\n");
    (types, calls)
}

/// `pty-stream-next` as `PtyStreamNext`.
fn rust_name(wit: &str) -> String {
    wit.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn render(export: &str, capabilities: &[String], methods: &[Method]) -> String {
    let mut code = String::new();
    let w = &mut code;
    let _ = writeln!(
        w,
        "// Generated by host/build.rs from wit/ (docs/epp-1.md §8). Do not edit.\n"
    );
    let _ = writeln!(
        w,
        "/// The provider's `infra` export, as this host was built against it."
    );
    let _ = writeln!(w, "pub const INFRA: &str = {export:?};\n");
    let _ = writeln!(
        w,
        "/// The EPP/1 capabilities, in the order of the `capabilities` flags."
    );
    let _ = writeln!(w, "pub const CAPABILITIES: &[&str] = &{capabilities:?};\n");
    // bindgen's flags type has no constructor from bits: name each constant
    // (`files.rw` is the case `files-rw`, the constant `FILES_RW`).
    let _ = writeln!(
        w,
        "/// The same capabilities as the WIT flags, in the same order."
    );
    let _ = writeln!(
        w,
        "pub const CAPABILITY_FLAGS: [crate::contract::bindings::Capabilities; {}] = [",
        capabilities.len()
    );
    for name in capabilities {
        let constant = name.replace(['.', '-'], "_").to_ascii_uppercase();
        let _ = writeln!(
            w,
            "    crate::contract::bindings::Capabilities::{constant},"
        );
    }
    let _ = writeln!(w, "];\n");
    let _ = writeln!(
        w,
        "/// Every wire method, in the order of `interface infra`."
    );
    let _ = writeln!(w, "pub const METHODS: &[Method] = &[");
    for m in methods {
        let wait = match &m.wait {
            None => "Wait::No".to_string(),
            Some(None) => "Wait::UntilEnd".to_string(),
            Some(Some(f)) => format!("Wait::Field({f:?})"),
        };
        let _ = writeln!(
            w,
            "    Method {{ name: {:?}, function: {:?}, capability: {:?}, result: {:?}, \
             params: &{:?}, seconds: &{:?}, defaults: &{:?}, aliases: &{:?}, ranges: &{:?}, \
             extends: {:?}, wait: {wait}, stream: {} }},",
            m.wire,
            m.function,
            m.capability,
            m.result,
            m.params,
            m.seconds,
            m.defaults,
            m.aliases,
            m.ranges,
            m.extends,
            render_stream(m.stream.as_ref()),
        );
    }
    let _ = writeln!(w, "];");
    code
}

fn render_stream(stream: Option<&Stream>) -> String {
    let Some(s) = stream else {
        return "None".into();
    };
    let callees: Vec<String> = s
        .callees
        .iter()
        .map(|c| {
            let answer = match &c.answer {
                Answer::Plain => "Answer::Plain".to_string(),
                Answer::Events {
                    next,
                    batched,
                    tuple,
                    cases,
                } => {
                    let items = match cases {
                        None => "Items::Records".to_string(),
                        Some(cases) => {
                            let cases: Vec<String> = cases
                                .iter()
                                .map(|c| {
                                    format!(
                                        "Case {{ wit: {:?}, wire: {:?}, role: {}, note: {:?}, \
                                         bytes: {} }}",
                                        c.wit, c.wire, c.role, c.note, c.bytes
                                    )
                                })
                                .collect();
                            format!("Items::Cases(&[{}])", cases.join(", "))
                        }
                    };
                    format!(
                        "Answer::Events {{ next: {next:?}, batched: {batched}, tuple: {tuple}, items: {items} }}"
                    )
                }
                Answer::Reader { read, size } => {
                    format!("Answer::Reader {{ read: {read:?}, size: {size:?} }}")
                }
                Answer::Writer { write, finish } => {
                    format!("Answer::Writer {{ write: {write:?}, finish: {finish:?} }}")
                }
            };
            format!(
                "Callee {{ function: {:?}, via: {}, answer: {answer} }}",
                c.function, c.via
            )
        })
        .collect();
    format!(
        "Some(&StreamTags {{ id: {:?}, forward: {:?}, note: {:?}, input: {:?}, detach: {}, \
         callees: &[{}] }})",
        s.id,
        s.forward,
        s.note,
        s.input,
        s.detach,
        callees.join(", ")
    )
}

/// The wire names of the `capabilities` flags, in order.
fn capabilities(resolve: &Resolve, types: wit_parser::InterfaceId) -> Result<Vec<String>, String> {
    let id = resolve.interfaces[types]
        .types
        .get("capabilities")
        .ok_or("interface `types` has no `capabilities` flags")?;
    match &resolve.types[*id].kind {
        TypeDefKind::Flags(flags) => Ok(flags
            .flags
            .iter()
            .map(|f| names::capability(&f.name))
            .collect()),
        other => Err(format!(
            "`capabilities` must be flags, not a {}",
            other.as_str()
        )),
    }
}

/// The tags of every `epp:` line of `docs`, joined with spaces, if it has one.
fn epp_line(docs: &wit_parser::Docs, _what: &str) -> Result<Option<String>, String> {
    let docs = docs.contents.as_deref().unwrap_or("");
    let lines: Vec<&str> = docs
        .lines()
        .filter_map(|l| l.trim().strip_prefix("epp:"))
        .map(str::trim)
        .collect();
    Ok((!lines.is_empty()).then(|| lines.join(" ")))
}

/// Splits a tag line at spaces outside JSON strings.
fn tags(line: &str) -> Result<Vec<String>, String> {
    let (mut tags, mut tag, mut quoted, mut escaped) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !tag.is_empty() {
                    tags.push(std::mem::take(&mut tag));
                }
                continue;
            }
            _ => {}
        }
        tag.push(c);
    }
    if quoted {
        return Err(format!("unterminated string in `epp: {line}`"));
    }
    if !tag.is_empty() {
        tags.push(tag);
    }
    Ok(tags)
}

const METHOD_TAGS: &str = "capability=NAME, result=KEY, default.FIELD=JSON, alias.WIRE=FIELD, \
     range.FIELD=MIN..MAX, extends=FIELD, wait[=FIELD], stream, id=KEY, forward=CAPABILITY, \
     note=NAME, input=NAME, detach, when.PARAM=FUNCTION or prefer=FUNCTION";

fn method(cx: &Ctx, func: &Function, line: &str) -> Result<Method, String> {
    let params = params(cx.resolve, func);
    let mut m = Method {
        wire: names::method(&func.name),
        function: func.name.clone(),
        capability: String::new(),
        result: None,
        params: params.iter().map(|p| p.wire.clone()).collect(),
        seconds: params
            .iter()
            .filter(|p| p.seconds)
            .map(|p| p.wire.clone())
            .collect(),
        defaults: Vec::new(),
        aliases: Vec::new(),
        ranges: Vec::new(),
        extends: None,
        wait: None,
        stream: None,
    };
    for (i, p) in params.iter().enumerate() {
        if params[..i].iter().any(|q| q.wire == p.wire) {
            return Err(format!("two params are `{}` on the wire", p.wire));
        }
    }
    let param_type = |name: &str| -> Result<Type, String> {
        params
            .iter()
            .find(|p| p.wire == name)
            .map(|p| p.ty)
            .ok_or_else(|| {
                let all: Vec<&str> = params.iter().map(|p| p.wire.as_str()).collect();
                format!(
                    "`{name}` is not a param of this method (its params: {})",
                    all.join(", ")
                )
            })
    };
    let mut stream = Stream::default();
    let mut tagged_stream = false;
    for tag in tags(line)? {
        let malformed = || format!("malformed tag `{tag}` (expected {METHOD_TAGS})");
        match tag.as_str() {
            "stream" => {
                tagged_stream = true;
                continue;
            }
            "detach" => {
                stream.detach = true;
                continue;
            }
            "wait" => {
                m.wait = Some(None);
                continue;
            }
            _ => {}
        }
        let (key, value) = tag.split_once('=').ok_or_else(malformed)?;
        if value.is_empty() {
            return Err(malformed());
        }
        match key {
            "capability" => {
                check_capability(cx, value)?;
                m.capability = value.to_string();
            }
            "result" => m.result = Some(value.to_string()),
            "id" => stream.id = Some(value.to_string()),
            "note" => stream.note = Some(value.to_string()),
            "input" => stream.input = Some(value.to_string()),
            "forward" => {
                check_capability(cx, value)?;
                stream.forward = Some(value.to_string());
            }
            "prefer" => stream.prefer = Some(value.to_string()),
            "extends" => {
                let ty = param_type(value).map_err(|e| format!("extends={value}: {e}"))?;
                if !is_integer(cx.resolve, ty) {
                    return Err(format!("extends={value}: `{value}` is not an integer"));
                }
                m.extends = Some(value.to_string());
            }
            "wait" => {
                if !m.seconds.iter().any(|s| s == value) {
                    return Err(format!(
                        "wait={value}: `{value}` is not a param in seconds (an integer `*-ms` param)"
                    ));
                }
                m.wait = Some(Some(value.to_string()));
            }
            _ => {
                if let Some(field) = key.strip_prefix("default.") {
                    let ty = param_type(field)?;
                    let json: serde_json::Value = serde_json::from_str(value)
                        .map_err(|e| format!("default.{field}: `{value}` is not JSON ({e})"))?;
                    fits(cx.resolve, ty, &json).map_err(|why| format!("default.{field}: {why}"))?;
                    m.defaults.push((field.to_string(), value.to_string()));
                } else if let Some(wire) = key.strip_prefix("alias.") {
                    param_type(value).map_err(|e| format!("alias.{wire}: {e}"))?;
                    if m.params.iter().any(|p| p == wire) {
                        return Err(format!("alias.{wire}: `{wire}` is already a param"));
                    }
                    m.aliases.push((wire.to_string(), value.to_string()));
                } else if let Some(field) = key.strip_prefix("range.") {
                    let ty = param_type(field)?;
                    if !is_integer(cx.resolve, ty) {
                        return Err(format!("range.{field}: `{field}` is not an integer"));
                    }
                    let (min, max) = value.split_once("..").ok_or_else(malformed)?;
                    let bound = |s: &str| -> Result<Option<i64>, String> {
                        if s.is_empty() {
                            return Ok(None);
                        }
                        s.parse().map(Some).map_err(|_| malformed())
                    };
                    let (min, max) = (bound(min)?, bound(max)?);
                    if min.is_none() && max.is_none() {
                        return Err(malformed());
                    }
                    m.ranges.push((field.to_string(), min, max));
                } else if let Some(param) = key.strip_prefix("when.") {
                    stream.when.push((param.to_string(), value.to_string()));
                } else {
                    return Err(malformed());
                }
            }
        }
    }
    if m.capability.is_empty() {
        return Err("its `epp:` line has no capability=NAME".into());
    }
    let result = check_result(cx, func)?;
    let answers_stream = handle(cx.resolve, result.unwrap_or(Type::Bool)).is_some();
    let has_stream_tags = stream.id.is_some()
        || stream.forward.is_some()
        || stream.note.is_some()
        || stream.input.is_some()
        || stream.detach
        || stream.prefer.is_some()
        || !stream.when.is_empty();
    if !tagged_stream {
        if m.wait == Some(None) {
            return Err(
                "`wait` (no deadline) is for a stream that ends by itself; a plain call takes \
                 wait=FIELD, its own timeout"
                    .into(),
            );
        }
        if has_stream_tags {
            return Err(
                "it has stream tags (id, forward, note, input, detach, when., prefer) but no \
                 `stream` tag"
                    .into(),
            );
        }
        check_plain(cx, func, &m, result)?;
        return Ok(m);
    }
    stream.callees = callees(cx, func, &m, &stream)?;
    if !answers_stream
        && !stream
            .callees
            .iter()
            .any(|c| !matches!(c.answer, Answer::Plain))
    {
        return Err(
            "it is tagged `stream` but neither it nor a `prefer=`/`when.` function \
                    answers a resource"
                .into(),
        );
    }
    check_stream(&stream)?;
    m.stream = Some(stream);
    Ok(m)
}

fn check_capability(cx: &Ctx, value: &str) -> Result<(), String> {
    if !cx.capabilities.iter().any(|c| c == value) {
        return Err(format!(
            "unknown capability `{value}` (the `capabilities` flags name: {})",
            cx.capabilities.join(", ")
        ));
    }
    Ok(())
}

/// The functions of a stream method: its own first, then `prefer=`, then
/// each `when.`, each with the shape of its answer.
fn callees(cx: &Ctx, func: &Function, m: &Method, s: &Stream) -> Result<Vec<Callee>, String> {
    let mut callees = vec![Callee {
        function: func.name.clone(),
        via: "Via::Main".into(),
        answer: answer(cx, func, s)?,
    }];
    let same_params = |other: &Function| {
        other.params.len() == func.params.len()
            && other
                .params
                .iter()
                .zip(&func.params)
                .all(|(a, b)| a.name == b.name && a.ty == b.ty)
    };
    let find = |name: &str, tag: &str| {
        cx.functions
            .get(name)
            .filter(|f| f.kind == FunctionKind::Freestanding)
            .ok_or_else(|| format!("{tag}={name}: no function of `infra` has that name"))
    };
    if let Some(prefer) = &s.prefer {
        let other = find(prefer, "prefer")?;
        if !same_params(other) {
            return Err(format!(
                "prefer={prefer}: it must take the same params as `{}`",
                func.name
            ));
        }
        let answer = answer(cx, other, s).map_err(|e| format!("prefer={prefer}: {e}"))?;
        if matches!(answer, Answer::Plain) {
            return Err(format!("prefer={prefer}: it must answer a stream"));
        }
        callees.push(Callee {
            function: prefer.clone(),
            via: "Via::Prefer".into(),
            answer,
        });
    }
    for (param, name) in &s.when {
        let other = find(name, &format!("when.{param}"))?;
        let is_param = params(cx.resolve, other).iter().any(|p| &p.wire == param);
        if m.params.contains(param) {
            return Err(format!(
                "when.{param}: `{param}` is already a param of `{}`",
                func.name
            ));
        }
        if !is_param && !same_params(other) {
            return Err(format!(
                "when.{param}={name}: it must take the same params as `{}`, or `{param}` among \
                 its own",
                func.name
            ));
        }
        let answer = answer(cx, other, s).map_err(|e| format!("when.{param}={name}: {e}"))?;
        if let (Answer::Plain, Some(ok)) = (&answer, result_ok(cx, other)?) {
            let record = matches!(kind(cx.resolve, ok), Some(TypeDefKind::Record(_)));
            if !record && m.result.is_none() && s.id.is_none() {
                return Err(format!(
                    "when.{param}={name}: its answer is not a record: give the method \
                     result=KEY or id=KEY"
                ));
            }
        }
        callees.push(Callee {
            function: name.clone(),
            via: format!("Via::When {{ param: {param:?}, is_param: {is_param} }}"),
            answer,
        });
    }
    Ok(callees)
}

/// The `T` of a function's `result<T, epp-error>`.
fn result_ok(cx: &Ctx, func: &Function) -> Result<Option<Type>, String> {
    check_result(cx, func)
}

/// How a function's answer is served: by the shape of the resource it holds.
fn answer(cx: &Ctx, func: &Function, s: &Stream) -> Result<Answer, String> {
    let Some(ok) = check_result(cx, func)? else {
        return Ok(Answer::Plain);
    };
    let (resource, tuple) = match kind(cx.resolve, ok) {
        Some(TypeDefKind::Handle(Handle::Own(r))) => (*r, false),
        Some(TypeDefKind::Tuple(t)) => match t.types.as_slice() {
            [first, second] if dealias(cx.resolve, *first) == Type::String => {
                match kind(cx.resolve, *second) {
                    Some(TypeDefKind::Handle(Handle::Own(r))) => (*r, true),
                    _ => return plain_or_fail(cx, ok),
                }
            }
            _ => return plain_or_fail(cx, ok),
        },
        _ => return plain_or_fail(cx, ok),
    };
    let rname = cx.resolve.types[resource]
        .name
        .clone()
        .ok_or("its resource has no name")?;
    let method = |name: &str| {
        let export = format!("[method]{rname}.{name}");
        cx.functions.get(&export).map(|f| (export, f))
    };
    if let Some((next, f)) = method("next") {
        let (batched, item) = next_item(cx, f).map_err(|e| format!("`{next}`: {e}"))?;
        let cases = match kind(cx.resolve, item) {
            Some(TypeDefKind::Variant(v)) => Some(cases(cx, v, s).map_err(|e| {
                let vname = type_name(cx.resolve, item);
                format!("variant `{vname}`: {e}")
            })?),
            Some(TypeDefKind::Record(_)) => {
                if s.note.is_none() {
                    return Err(format!(
                        "`{next}` yields records: name their notification with note=NAME"
                    ));
                }
                None
            }
            _ => return Err(format!("`{next}` must yield a variant or a record")),
        };
        if tuple && s.id.is_none() {
            return Err("it answers an id beside its stream: name it with id=KEY".into());
        }
        return Ok(Answer::Events {
            next,
            batched,
            tuple,
            cases,
        });
    }
    if tuple {
        return Err(format!(
            "resource `{rname}` beside an id must be an event stream (have `next`)"
        ));
    }
    if let Some((read, f)) = method("read") {
        check_read(cx, f).map_err(|e| format!("`{read}`: {e}"))?;
        let size = method("size").map(|(name, _)| name);
        return Ok(Answer::Reader { read, size });
    }
    if let (Some((write, wf)), Some((finish, ff))) = (method("write"), method("finish")) {
        check_write(cx, wf).map_err(|e| format!("`{write}`: {e}"))?;
        let ok = check_result(cx, ff).map_err(|e| format!("`{finish}`: {e}"))?;
        if ok.is_some_and(|t| handle(cx.resolve, t).is_some()) {
            return Err(format!("`{finish}` must answer a value, not a resource"));
        }
        return Ok(Answer::Writer { write, finish });
    }
    Err(format!(
        "resource `{rname}` is neither an event stream (`next`), a reader (`read`) nor a \
         writer (`write` and `finish`)"
    ))
}

/// A result that holds a resource somewhere else than where a stream may be.
fn plain_or_fail(cx: &Ctx, ok: Type) -> Result<Answer, String> {
    match handle(cx.resolve, ok) {
        Some(what) => Err(format!(
            "its result holds a {what} where the host cannot serve it (a stream is the result \
             itself, or the second item of a tuple<string, stream>)"
        )),
        None => Ok(Answer::Plain),
    }
}

/// `next: func() -> result<option<list<T>>, epp-error>` (batched) or
/// `-> result<option<T>, epp-error>`: whether batched, and T.
fn next_item(cx: &Ctx, f: &Function) -> Result<(bool, Type), String> {
    if f.params.len() != 1 {
        return Err("it must take no params".into());
    }
    let ok = check_result(cx, f)?.ok_or("it must answer result<option<…>, epp-error>")?;
    let Some(TypeDefKind::Option(inner)) = kind(cx.resolve, ok) else {
        return Err("it must answer result<option<…>, epp-error> (none at the end)".into());
    };
    match kind(cx.resolve, *inner) {
        Some(TypeDefKind::List(item)) => Ok((true, *item)),
        _ => Ok((false, *inner)),
    }
}

fn check_read(cx: &Ctx, f: &Function) -> Result<(), String> {
    let max = f.params.get(1).map(|p| dealias(cx.resolve, p.ty));
    let ok = check_result(cx, f)?;
    let bytes = ok.and_then(|t| match kind(cx.resolve, t) {
        Some(TypeDefKind::Option(inner)) => Some(is_bytes(cx.resolve, *inner)),
        _ => None,
    });
    if f.params.len() != 2 || max != Some(Type::U32) || bytes != Some(true) {
        return Err("it must be func(max: u32) -> result<option<list<u8>>, epp-error>".into());
    }
    Ok(())
}

fn check_write(cx: &Ctx, f: &Function) -> Result<(), String> {
    let chunk = f.params.get(1).map(|p| is_bytes(cx.resolve, p.ty));
    if f.params.len() != 2 || chunk != Some(true) || check_result(cx, f)?.is_some() {
        return Err("it must be func(chunk: list<u8>) -> result<_, epp-error>".into());
    }
    Ok(())
}

const CASE_TAGS: &str = "id, text, item=KEY, keep=KEY, end[=KEY], note=NAME";

/// What each case of an event variant is, from its `epp:` line.
fn cases(cx: &Ctx, v: &Variant, s: &Stream) -> Result<Vec<Case>, String> {
    let mut out = Vec::new();
    for case in &v.cases {
        let located = |e: String| format!("case `{}`: {e}", case.name);
        let line = epp_line(&case.docs, &case.name)
            .map_err(&located)?
            .ok_or_else(|| located("it has no `epp:` line".into()))?;
        let payload = case.ty;
        let (mut role, mut note) = (None, None);
        for tag in tags(&line).map_err(&located)? {
            let malformed = || located(format!("malformed tag `{tag}` (expected {CASE_TAGS})"));
            let set = |role: &mut Option<String>, r: String| {
                if role.replace(r).is_some() {
                    return Err(located("it has two roles".into()));
                }
                Ok(())
            };
            match tag.split_once('=') {
                None if tag == "id" => {
                    if payload.map(|t| dealias(cx.resolve, t)) != Some(Type::String) {
                        return Err(located("an `id` carries a string".into()));
                    }
                    if s.id.is_none() {
                        return Err(located("the method names no id: give it id=KEY".into()));
                    }
                    set(&mut role, "Role::Id".into())?;
                }
                None if tag == "text" => {
                    if payload.map(|t| dealias(cx.resolve, t)) != Some(Type::String) {
                        return Err(located("a `text` case carries a string".into()));
                    }
                    set(&mut role, "Role::Text".into())?;
                }
                None if tag == "end" => {
                    let record = payload.is_some_and(|t| {
                        matches!(kind(cx.resolve, t), Some(TypeDefKind::Record(_)))
                    });
                    if payload.is_some() && !record {
                        return Err(located(
                            "its payload is not a record: name its key with end=KEY".into(),
                        ));
                    }
                    set(&mut role, "Role::End(None)".into())?;
                }
                Some(("end", key)) if !key.is_empty() => {
                    set(&mut role, format!("Role::End(Some({key:?}))"))?
                }
                Some(("item", key)) if !key.is_empty() => {
                    set(&mut role, format!("Role::Item({key:?})"))?
                }
                Some(("keep", key)) if !key.is_empty() => {
                    set(&mut role, format!("Role::Keep({key:?})"))?
                }
                Some(("note", name)) if !name.is_empty() => note = Some(name.to_string()),
                _ => return Err(malformed()),
            }
        }
        let role = role.unwrap_or_else(|| "Role::Forward".into());
        let forwarded = role == "Role::Forward"
            || role == "Role::Text"
            || role.starts_with("Role::Item")
            || (role == "Role::Id" && (s.forward.is_some() || s.detach));
        if forwarded && note.is_none() {
            return Err(located(
                "it is forwarded: name its notification with note=NAME".into(),
            ));
        }
        if let Some(handle) = payload.and_then(|t| handle(cx.resolve, t)) {
            return Err(located(format!("its payload holds a {handle}")));
        }
        out.push(Case {
            wit: case.name.clone(),
            wire: names::field(&case.name),
            role,
            note,
            rust: payload.map_or(Some(String::new()), |t| rust_type(cx.resolve, t)),
            bytes: payload.is_some_and(|t| is_bytes(cx.resolve, t)),
        });
    }
    let ends = out
        .iter()
        .filter(|c| c.role.starts_with("Role::End"))
        .count();
    if ends != 1 {
        return Err(format!("it needs exactly one `end` case, not {ends}"));
    }
    Ok(out)
}

/// Tags that fit only some kinds of stream.
fn check_stream(s: &Stream) -> Result<(), String> {
    let any = |f: &dyn Fn(&Answer) -> bool| s.callees.iter().any(|c| f(&c.answer));
    let events = any(&|a| matches!(a, Answer::Events { .. }));
    let writer = any(&|a| matches!(a, Answer::Writer { .. }));
    let reader = any(&|a| matches!(a, Answer::Reader { .. }));
    let records = any(&|a| matches!(a, Answer::Events { cases: None, .. }));
    if s.input.is_some() && !writer {
        return Err("input=NAME needs a writer (a resource with `write` and `finish`)".into());
    }
    if s.detach && !events {
        return Err("detach needs an event stream (a resource with `next`)".into());
    }
    if s.note.is_some() && !reader && !records {
        return Err(
            "note=NAME names the notification of a reader's chunks or of a stream of \
                    records; an event variant names its own in its cases"
                .into(),
        );
    }
    if s.forward.is_some() && s.detach {
        return Err("a detached stream is always forwarded: forward= does not apply".into());
    }
    Ok(())
}

/// The answer must be `result<T, epp-error>`; answers T.
fn check_result(cx: &Ctx, func: &Function) -> Result<Option<Type>, String> {
    let result = func
        .result
        .and_then(|ty| match kind(cx.resolve, ty) {
            Some(TypeDefKind::Result(r)) => Some(r),
            _ => None,
        })
        .ok_or("it must return result<T, epp-error>")?;
    if result.err.map(|e| dealias(cx.resolve, e)) != Some(Type::Id(cx.epp_error)) {
        return Err("its error type must be epp-error".into());
    }
    Ok(result.ok)
}

/// A plain method's params and T must have a JSON form (no resources), and T
/// be a record or nothing unless `result=KEY` names it.
fn check_plain(cx: &Ctx, func: &Function, m: &Method, ok: Option<Type>) -> Result<(), String> {
    for p in params(cx.resolve, func) {
        if let Some(handle) = handle(cx.resolve, p.ty) {
            return Err(format!(
                "param `{}` holds a {handle}, which has no JSON form",
                p.wire
            ));
        }
    }
    if let Some(handle) = ok.and_then(|ty| handle(cx.resolve, ty)) {
        return Err(format!(
            "its result holds a {handle}, which has no JSON form; tag the method `stream`"
        ));
    }
    let object = ok.is_none_or(|ty| matches!(kind(cx.resolve, ty), Some(TypeDefKind::Record(_))));
    match (&m.result, object) {
        (None, false) => {
            Err("its result is neither a record nor nothing: name its key with result=KEY".into())
        }
        (Some(key), true) => Err(format!(
            "result={key}: the result is already an object (a record or nothing)"
        )),
        _ => Ok(()),
    }
}

/// One param as the wire sees it.
struct Param {
    wire: String,
    ty: Type,
    /// An integer `*-ms` param: seconds on the wire.
    seconds: bool,
}

/// The wire params; a lone `req` record is flattened into its fields.
fn params(resolve: &Resolve, func: &Function) -> Vec<Param> {
    let fields: Vec<(&str, Type)> = match func.params.as_slice() {
        [param] if param.name == "req" => match kind(resolve, param.ty) {
            Some(TypeDefKind::Record(record)) => record
                .fields
                .iter()
                .map(|f| (f.name.as_str(), f.ty))
                .collect(),
            _ => vec![(param.name.as_str(), param.ty)],
        },
        params => params.iter().map(|p| (p.name.as_str(), p.ty)).collect(),
    };
    fields
        .into_iter()
        .map(|(wit, ty)| {
            let integer = is_integer(resolve, ty);
            Param {
                wire: if integer {
                    names::integer_field(wit)
                } else {
                    names::field(wit)
                },
                ty,
                seconds: integer && names::seconds(wit).is_some(),
            }
        })
        .collect()
}

/// Follows `type x = y` aliases.
fn dealias(resolve: &Resolve, mut ty: Type) -> Type {
    while let Type::Id(id) = ty {
        match resolve.types[id].kind {
            TypeDefKind::Type(inner) => ty = inner,
            _ => break,
        }
    }
    ty
}

fn kind(resolve: &Resolve, ty: Type) -> Option<&TypeDefKind> {
    match dealias(resolve, ty) {
        Type::Id(id) => Some(&resolve.types[id].kind),
        _ => None,
    }
}

fn type_name(resolve: &Resolve, ty: Type) -> String {
    match dealias(resolve, ty) {
        Type::Id(id) => resolve.types[id].name.clone().unwrap_or_default(),
        other => format!("{other:?}"),
    }
}

/// A payload's Rust type in a typed mirror, for the simple ones.
fn rust_type(resolve: &Resolve, ty: Type) -> Option<String> {
    Some(
        match dealias(resolve, ty) {
            Type::Bool => "bool",
            Type::U8 => "u8",
            Type::U16 => "u16",
            Type::U32 => "u32",
            Type::U64 => "u64",
            Type::S8 => "i8",
            Type::S16 => "i16",
            Type::S32 => "i32",
            Type::S64 => "i64",
            Type::String => "String",
            t if is_bytes(resolve, t) => "Vec<u8>",
            _ => return None,
        }
        .to_string(),
    )
}

/// `list<u8>`.
fn is_bytes(resolve: &Resolve, ty: Type) -> bool {
    matches!(kind(resolve, ty), Some(TypeDefKind::List(item)) if dealias(resolve, *item) == Type::U8)
}

/// An integer, or an option of one (the `*-ms`, `mode` and `range.` rules).
fn is_integer(resolve: &Resolve, ty: Type) -> bool {
    match dealias(resolve, ty) {
        Type::U8 | Type::U16 | Type::U32 | Type::U64 => true,
        Type::S8 | Type::S16 | Type::S32 | Type::S64 => true,
        Type::Id(id) => match &resolve.types[id].kind {
            TypeDefKind::Option(inner) => is_integer(resolve, *inner),
            _ => false,
        },
        _ => false,
    }
}

/// The first thing in `ty` that has no JSON form (a resource handle, future, stream).
fn handle(resolve: &Resolve, ty: Type) -> Option<&'static str> {
    let mut seen = BTreeSet::new();
    handle_in(resolve, ty, &mut seen)
}

fn handle_in(resolve: &Resolve, ty: Type, seen: &mut BTreeSet<TypeId>) -> Option<&'static str> {
    let Type::Id(id) = dealias(resolve, ty) else {
        return (ty == Type::ErrorContext).then_some("error-context");
    };
    if !seen.insert(id) {
        return None;
    }
    let mut any = |types: &mut dyn Iterator<Item = Type>| {
        for t in types {
            if let Some(found) = handle_in(resolve, t, seen) {
                return Some(found);
            }
        }
        None
    };
    match &resolve.types[id].kind {
        TypeDefKind::Resource | TypeDefKind::Handle(_) => Some("resource"),
        TypeDefKind::Future(_) => Some("future"),
        TypeDefKind::Stream(_) => Some("stream"),
        TypeDefKind::Record(r) => any(&mut r.fields.iter().map(|f| f.ty)),
        TypeDefKind::Tuple(t) => any(&mut t.types.iter().copied()),
        TypeDefKind::Variant(v) => any(&mut v.cases.iter().filter_map(|c| c.ty)),
        TypeDefKind::Option(t) | TypeDefKind::List(t) | TypeDefKind::FixedLengthList(t, _) => {
            any(&mut std::iter::once(*t))
        }
        TypeDefKind::Map(k, v) => any(&mut [*k, *v].into_iter()),
        TypeDefKind::Result(r) => any(&mut r.ok.into_iter().chain(r.err)),
        TypeDefKind::Flags(_) | TypeDefKind::Enum(_) => None,
        TypeDefKind::Type(t) => any(&mut std::iter::once(*t)),
        TypeDefKind::Unknown => Some("type of unknown shape"),
    }
}

/// Whether a default's JSON has the right kind for its param (the codec checks
/// the rest, such as ranges, when it uses it).
fn fits(resolve: &Resolve, ty: Type, json: &serde_json::Value) -> Result<(), String> {
    use serde_json::Value as J;
    let want = match dealias(resolve, ty) {
        Type::Bool => "a boolean",
        Type::String | Type::Char => "a string",
        Type::F32 | Type::F64 => "a number",
        t if is_integer(resolve, t) => "an integer",
        Type::Id(id) => match &resolve.types[id].kind {
            TypeDefKind::Option(inner) => return fits(resolve, *inner, json),
            TypeDefKind::Record(_) => "an object",
            TypeDefKind::Enum(_) => "a string",
            _ => return Ok(()),
        },
        _ => return Ok(()),
    };
    let ok = match json {
        J::Bool(_) => want == "a boolean",
        J::String(_) => want == "a string",
        J::Number(n) => want == "a number" || (want == "an integer" && !n.is_f64()),
        J::Object(_) => want == "an object",
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("`{json}` is not {want}"))
    }
}
