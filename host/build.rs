//! Derives the EPP/1 method table from the WIT world (docs/epp-1.md §8), so
//! the contract is written once, in `wit/`: every function of `interface infra`
//! with `/// epp: ...` doc lines is a wire method, and the cases of the event
//! variants its streams carry say what each event is. Writes
//! `$OUT_DIR/methods.rs` (included by `src/contract/table.rs`) and
//! `$OUT_DIR/tools.rs` (every method as an MCP tool, `src/contract/tools.rs`),
//! and fails the build, naming the function or case, on a tag the host could
//! not honour or a param without a description.

use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use wit_parser::{
    Function, FunctionKind, Handle, IndexMap, Resolve, Type, TypeDefKind, TypeId, TypeOwner,
    Variant,
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
    let (code, typed, calls, tools) = match generate(&wit) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: the EPP/1 method table and tools cannot be derived from wit/: {e}");
            std::process::exit(1);
        }
    };
    let dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    for (file, text) in [
        ("methods.rs", code),
        ("typed_events.rs", typed),
        ("typed_next.rs", calls),
        ("tools.rs", tools),
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
    /// `title=TEXT`: its tool's title, instead of the one its name gives.
    title: Option<String>,
    /// `tool=named`: an MCP server lists its tool only when asked for it by name.
    named: bool,
    /// `fed.PARAM=METHOD`: with the `when.` flag PARAM the call is fed by
    /// METHOD requests while it runs (a tool cannot, so it has no PARAM).
    fed: Vec<(String, String)>,
    /// `resource=TEMPLATE`: it reads the resource at URIs of this RFC 6570
    /// template, whose variables are its params.
    resource: Option<String>,
    /// `resource.PARAM=JSON`: what a resource read passes besides the URI's.
    resource_params: Vec<(String, String)>,
    /// `watches=METHOD`: its events are changes of METHOD's resources.
    watches: Option<String>,
}

/// The stream tags of a method and the functions that may serve it.
#[derive(Default)]
struct Stream {
    id: Option<String>,
    /// `resume=METHOD`: a call may be answered before its stream ends while
    /// the host reads on (an MCP server's wait); a METHOD call with the
    /// stream's id picks it up.
    resume: Option<String>,
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
    via: Via,
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
        read_into: Option<String>,
    },
    Writer {
        write: String,
        finish: String,
        write_from: Option<String>,
    },
}

struct Case {
    wit: String,
    wire: String,
    role: Role,
    note: Option<String>,
    /// Its payload as a Rust type of the typed mirror (`typed_events`), when
    /// it has a simple one: `Some("")` for no payload.
    rust: Option<String>,
    /// Its payload is `list<u8>`.
    bytes: bool,
    /// Its payload's type.
    ty: Option<Type>,
}

/// Why a callee is called (the host's `Via`).
#[derive(Clone, PartialEq, Eq)]
enum Via {
    Main,
    Prefer,
    When { param: String, is_param: bool },
}

impl Via {
    /// As Rust source of `contract::table::Via`.
    fn rust(&self) -> String {
        match self {
            Via::Main => "Via::Main".into(),
            Via::Prefer => "Via::Prefer".into(),
            Via::When { param, is_param } => {
                format!("Via::When {{ param: {param:?}, is_param: {is_param} }}")
            }
        }
    }
}

/// What an event is (the host's `Role`).
#[derive(Clone, PartialEq, Eq)]
enum Role {
    Id,
    Text,
    Item(String),
    Keep(String),
    End(Option<String>),
    Forward,
}

impl Role {
    /// As Rust source of `contract::table::Role`.
    fn rust(&self) -> String {
        match self {
            Role::Id => "Role::Id".into(),
            Role::Text => "Role::Text".into(),
            Role::Item(key) => format!("Role::Item({key:?})"),
            Role::Keep(key) => format!("Role::Keep({key:?})"),
            Role::End(key) => format!("Role::End({key:?})"),
            Role::Forward => "Role::Forward".into(),
        }
    }
}

/// The method table, the typed mirrors of event variants that carry bytes,
/// the typed `next` calls that use them, and the MCP tools.
fn generate(wit: &Path) -> Result<(String, String, String, String), String> {
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
    let tools = render_tools(&cx, &resolve.interfaces[infra], &methods)?;
    Ok((
        render(&export, &cx.capabilities, &methods),
        typed,
        calls,
        tools,
    ))
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
             extends: {:?}, wait: {wait}, resource: {}, watches: {:?}, stream: {} }},",
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
            match &m.resource {
                None => "None".to_string(),
                Some(t) => format!(
                    "Some(Resource {{ template: {t:?}, params: &{:?} }})",
                    m.resource_params
                ),
            },
            m.watches,
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
                                        c.wit,
                                        c.wire,
                                        c.role.rust(),
                                        c.note,
                                        c.bytes
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
                Answer::Reader {
                    read,
                    size,
                    read_into,
                } => {
                    format!(
                        "Answer::Reader {{ read: {read:?}, size: {size:?}, read_into: {read_into:?} }}"
                    )
                }
                Answer::Writer {
                    write,
                    finish,
                    write_from,
                } => {
                    format!(
                        "Answer::Writer {{ write: {write:?}, finish: {finish:?}, write_from: {write_from:?} }}"
                    )
                }
            };
            format!(
                "Callee {{ function: {:?}, via: {}, answer: {answer} }}",
                c.function,
                c.via.rust()
            )
        })
        .collect();
    format!(
        "Some(&StreamTags {{ id: {:?}, resume: {:?}, forward: {:?}, note: {:?}, input: {:?}, \
         detach: {}, callees: &[{}] }})",
        s.id,
        s.resume,
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
     resume=METHOD, resource=TEMPLATE, resource.PARAM=JSON, watches=METHOD, note=NAME, input=NAME, detach, when.PARAM=FUNCTION, fed.PARAM=METHOD, \
     prefer=FUNCTION, title=TEXT or tool=named";

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
        title: None,
        named: false,
        fed: Vec::new(),
        resource: None,
        resource_params: Vec::new(),
        watches: None,
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
            "resume" => stream.resume = Some(value.to_string()),
            "note" => stream.note = Some(value.to_string()),
            "input" => stream.input = Some(value.to_string()),
            "forward" => {
                check_capability(cx, value)?;
                stream.forward = Some(value.to_string());
            }
            "prefer" => stream.prefer = Some(value.to_string()),
            "resource" => {
                for var in template_vars(value)? {
                    param_type(&var).map_err(|e| format!("resource={value}: {e}"))?;
                }
                m.resource = Some(value.to_string());
            }
            "watches" => m.watches = Some(value.to_string()),
            "tool" if value == "named" => m.named = true,
            "tool" => return Err(format!("tool={value}: the only form is tool=named")),
            "title" => {
                let title = match value.starts_with('"') {
                    true => serde_json::from_str::<String>(value)
                        .map_err(|e| format!("title={value}: not a JSON string ({e})"))?,
                    false => value.to_string(),
                };
                if title.trim().is_empty() {
                    return Err(malformed());
                }
                m.title = Some(title);
            }
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
                } else if let Some(param) = key.strip_prefix("resource.") {
                    let json: serde_json::Value = serde_json::from_str(value)
                        .map_err(|e| format!("resource.{param}: `{value}` is not JSON ({e})"))?;
                    // A reader's `encoding` is its adapter's param, not the function's.
                    if param == ENCODING {
                        if !ENCODINGS.iter().any(|e| json == *e) {
                            return Err(format!("resource.{param}: one of {ENCODINGS:?}"));
                        }
                    } else {
                        let ty = param_type(param)?;
                        fits(cx.resolve, ty, &json)
                            .map_err(|why| format!("resource.{param}: {why}"))?;
                    }
                    m.resource_params
                        .push((param.to_string(), value.to_string()));
                } else if let Some(param) = key.strip_prefix("fed.") {
                    m.fed.push((param.to_string(), value.to_string()));
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
        || stream.resume.is_some()
        || stream.forward.is_some()
        || stream.note.is_some()
        || stream.input.is_some()
        || stream.detach
        || stream.prefer.is_some()
        || !stream.when.is_empty()
        || !m.fed.is_empty();
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
                "it has stream tags (id, resume, forward, note, input, detach, when., fed., prefer) but \
                 no `stream` tag"
                    .into(),
            );
        }
        check_plain(cx, func, &m, result)?;
        return Ok(m);
    }
    for (param, _) in &m.fed {
        if !stream.when.iter().any(|(flag, _)| flag == param) {
            return Err(format!(
                "fed.{param}: `{param}` is not a `when.` flag of this method"
            ));
        }
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
        via: Via::Main,
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
            via: Via::Prefer,
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
            via: Via::When {
                param: param.clone(),
                is_param,
            },
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
    // A method the resource may have that borrows a `wasi:io` stream: its
    // name when it has it and the type is right.
    let stream_method = |name: &str, stream: &str, answers: bool| {
        method(name)
            .map(|(name, f)| {
                check_stream_method(cx, f, stream, answers)
                    .map(|()| name.clone())
                    .map_err(|e| format!("`{name}`: {e}"))
            })
            .transpose()
    };
    if let Some((read, f)) = method("read") {
        check_read(cx, f).map_err(|e| format!("`{read}`: {e}"))?;
        let size = method("size").map(|(name, _)| name);
        let read_into = stream_method("read-into", "output-stream", true)?;
        return Ok(Answer::Reader {
            read,
            size,
            read_into,
        });
    }
    if let (Some((write, wf)), Some((finish, ff))) = (method("write"), method("finish")) {
        check_write(cx, wf).map_err(|e| format!("`{write}`: {e}"))?;
        let ok = check_result(cx, ff).map_err(|e| format!("`{finish}`: {e}"))?;
        if ok.is_some_and(|t| handle(cx.resolve, t).is_some()) {
            return Err(format!("`{finish}` must answer a value, not a resource"));
        }
        let write_from = stream_method("write-from", "input-stream", false)?;
        return Ok(Answer::Writer {
            write,
            finish,
            write_from,
        });
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

/// A reader's `read-into` (`answers`: `option<u64>`) or a writer's
/// `write-from` (`_`): `func(STREAM: borrow<wasi:io/streams.STREAM>, N: u64)
/// -> result<…, epp-error>`.
fn check_stream_method(cx: &Ctx, f: &Function, stream: &str, answers: bool) -> Result<(), String> {
    let borrowed = f.params.get(1).is_some_and(|p| {
        let Type::Id(id) = dealias(cx.resolve, p.ty) else {
            return false;
        };
        let TypeDefKind::Handle(Handle::Borrow(r)) = cx.resolve.types[id].kind else {
            return false;
        };
        // The resource as `wasi:io/streams` defines it, not as `use` aliased it.
        let Type::Id(r) = dealias(cx.resolve, Type::Id(r)) else {
            return false;
        };
        let r = &cx.resolve.types[r];
        let interface = match r.owner {
            TypeOwner::Interface(i) => Some(&cx.resolve.interfaces[i]),
            _ => None,
        };
        let package = interface
            .and_then(|i| i.package)
            .map(|p| &cx.resolve.packages[p].name);
        r.name.as_deref() == Some(stream)
            && interface.and_then(|i| i.name.as_deref()) == Some("streams")
            && package.is_some_and(|p| p.namespace == "wasi" && p.name == "io")
    });
    let len = f.params.get(2).map(|p| dealias(cx.resolve, p.ty));
    let ok = check_result(cx, f)?;
    let ok_fits = match ok {
        None => !answers,
        Some(t) => {
            answers
                && matches!(kind(cx.resolve, t),
                    Some(TypeDefKind::Option(inner)) if dealias(cx.resolve, *inner) == Type::U64)
        }
    };
    if f.params.len() != 3 || !borrowed || len != Some(Type::U64) || !ok_fits {
        let answer = if answers { "option<u64>" } else { "_" };
        return Err(format!(
            "it must be func(_: borrow<wasi:io/streams.{stream}>, _: u64) -> result<{answer}, epp-error>"
        ));
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
            let set = |role: &mut Option<Role>, r: Role| {
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
                    set(&mut role, Role::Id)?;
                }
                None if tag == "text" => {
                    if payload.map(|t| dealias(cx.resolve, t)) != Some(Type::String) {
                        return Err(located("a `text` case carries a string".into()));
                    }
                    set(&mut role, Role::Text)?;
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
                    set(&mut role, Role::End(None))?;
                }
                Some(("end", key)) if !key.is_empty() => {
                    set(&mut role, Role::End(Some(key.to_string())))?
                }
                Some(("item", key)) if !key.is_empty() => {
                    set(&mut role, Role::Item(key.to_string()))?
                }
                Some(("keep", key)) if !key.is_empty() => {
                    set(&mut role, Role::Keep(key.to_string()))?
                }
                Some(("note", name)) if !name.is_empty() => note = Some(name.to_string()),
                _ => return Err(malformed()),
            }
        }
        let role = role.unwrap_or(Role::Forward);
        let forwarded = match role {
            Role::Forward | Role::Text | Role::Item(_) => true,
            Role::Id => s.forward.is_some() || s.detach,
            Role::Keep(_) | Role::End(_) => false,
        };
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
            ty: payload,
        });
    }
    let ends = out
        .iter()
        .filter(|c| matches!(c.role, Role::End(_)))
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
    let record = ok.and_then(|ty| record_of(cx.resolve, ty));
    let object = ok.is_none() || record.is_some();
    match (&m.result, object) {
        (None, false) => {
            Err("its result is neither a record nor nothing: name its key with result=KEY".into())
        }
        // A record that grew out of a bare value (sandbox.list's page, since
        // 1.2): KEY is the field that holds what an older contract answered
        // alone, so an older component's answer keeps its wire shape.
        (Some(key), true)
            if record.is_some_and(|r| {
                r.fields
                    .iter()
                    .any(|f| wire(cx.resolve, &f.name, f.ty) == *key)
            }) =>
        {
            Ok(())
        }
        (Some(key), true) => Err(format!(
            "result={key}: the result is already an object (a record or nothing); a record \
             takes result=KEY only when KEY is its field that older contracts answered alone"
        )),
        _ => Ok(()),
    }
}

/// One param as the wire sees it.
struct Param {
    wire: String,
    wit: String,
    ty: Type,
    /// An integer `*-ms` param: seconds on the wire.
    seconds: bool,
    /// Its doc comment, when it is a field of a lone `req` record.
    doc: Option<String>,
}

/// The wire params; a lone `req` record is flattened into its fields.
fn params(resolve: &Resolve, func: &Function) -> Vec<Param> {
    let fields: Vec<(&str, Type, Option<&String>)> = match func.params.as_slice() {
        [param] if param.name == "req" => match kind(resolve, param.ty) {
            Some(TypeDefKind::Record(record)) => record
                .fields
                .iter()
                .map(|f| (f.name.as_str(), f.ty, f.docs.contents.as_ref()))
                .collect(),
            _ => vec![(param.name.as_str(), param.ty, None)],
        },
        params => params
            .iter()
            .map(|p| (p.name.as_str(), p.ty, None))
            .collect(),
    };
    fields
        .into_iter()
        .map(|(wit, ty, doc)| Param {
            wire: wire(resolve, wit, ty),
            wit: wit.to_string(),
            ty,
            seconds: is_integer(resolve, ty) && names::seconds(wit).is_some(),
            doc: doc.cloned(),
        })
        .collect()
}

/// The wire name of a field or param `wit` of type `ty` (`timeout-ms` of an
/// integer is `timeout`).
fn wire(resolve: &Resolve, wit: &str, ty: Type) -> String {
    match is_integer(resolve, ty) {
        true => names::integer_field(wit),
        false => names::field(wit),
    }
}

/// The record `ty` is, if it is one.
fn record_of(resolve: &Resolve, ty: Type) -> Option<&wit_parser::Record> {
    match kind(resolve, ty) {
        Some(TypeDefKind::Record(r)) => Some(r),
        _ => None,
    }
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

// ------------------------------------------------------------------ MCP tools

/// The stream adapter's own params that a tool takes (host/src/rpc/bytes.rs):
/// how a reader's or writer's content is encoded, and a writer's content.
/// Left out: `stream` (a tool streams by the MCP server's progress
/// notifications, never by EPP notifications) and a writer's `size` (its
/// content then follows in input notifications).
const ENCODING: &str = "encoding";
const ENCODINGS: [&str; 2] = ["utf8", "base64"];
const CONTENT: &str = "content";
const SIZE: &str = "size";
/// What a collected answer carries when output was dropped.
const TRUNCATED: &str = "truncated";

/// What a method does to its world, by the words of its name (docs/epp-1.md
/// §8, Tools): the MCP annotations `readOnlyHint`, `destructiveHint`,
/// `idempotentHint`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// Only looks: read-only (and so idempotent).
    Reads,
    /// Adds something new each time.
    Adds,
    /// Sets a state: again changes nothing more.
    Settles,
    /// Removes or replaces something; again changes nothing more.
    Destroys,
    /// May do anything (a command, a signal): MCP's defaults.
    Acts,
}

impl Effect {
    fn hints(self) -> (bool, bool, bool) {
        match self {
            Effect::Reads => (true, false, true),
            Effect::Adds => (false, false, false),
            Effect::Settles => (false, false, true),
            Effect::Destroys => (false, true, true),
            Effect::Acts => (false, true, false),
        }
    }
}

/// The words the rule knows: (word, whether it is a verb, its effect). The
/// first known word of the last part of a method's name decides; a name
/// with none gets MCP's defaults ([`Effect::Acts`]).
const WORDS: &[(&str, bool, Effect)] = &[
    ("list", true, Effect::Reads),
    ("get", true, Effect::Reads),
    ("read", true, Effect::Reads),
    ("search", true, Effect::Reads),
    ("watch", true, Effect::Reads),
    ("info", false, Effect::Reads),
    ("status", false, Effect::Reads),
    ("logs", false, Effect::Reads),
    ("metrics", false, Effect::Reads),
    ("languages", false, Effect::Reads),
    ("url", false, Effect::Reads),
    ("exists", false, Effect::Reads),
    ("create", true, Effect::Adds),
    ("start", true, Effect::Adds),
    ("build", true, Effect::Adds),
    ("set", true, Effect::Settles),
    ("make", true, Effect::Settles),
    ("pause", true, Effect::Settles),
    ("resume", true, Effect::Settles),
    ("resize", true, Effect::Settles),
    ("connect", true, Effect::Settles),
    ("attach", true, Effect::Settles),
    ("mount", true, Effect::Settles),
    ("kill", true, Effect::Destroys),
    ("remove", true, Effect::Destroys),
    ("delete", true, Effect::Destroys),
    ("unmount", true, Effect::Destroys),
    ("detach", true, Effect::Destroys),
    ("close", true, Effect::Destroys),
    ("write", true, Effect::Destroys),
    ("rename", true, Effect::Destroys),
    ("run", true, Effect::Acts),
    ("send", true, Effect::Acts),
    ("signal", true, Effect::Acts),
    ("interrupt", true, Effect::Acts),
    ("restart", true, Effect::Acts),
];

/// Verbs whose object, alone, is plural in a title (`List sandboxes`).
const PLURAL_VERBS: &[&str] = &["list", "search", "watch"];

/// A doc comment as tools read it: its paragraphs, without `epp:` lines and
/// param lines, and its param lines (`` `NAME`: text ``, running to the next
/// such line, an `epp:` line or a blank line). wit-parser counts the plain
/// comments above a doc comment in too: a section rule (`// ---- name`) is
/// no text.
#[derive(Default)]
struct Doc {
    paragraphs: Vec<String>,
    params: Vec<(String, String)>,
}

impl Doc {
    fn of(docs: Option<&str>) -> Doc {
        let mut doc = Doc::default();
        let (mut paragraph, mut in_param) = (String::new(), false);
        let join = |text: &mut String, line: &str| {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(line);
        };
        let lines = docs.unwrap_or("").lines().map(str::trim);
        for line in lines.filter(|l| !l.starts_with("---")) {
            if line.is_empty() || line.starts_with("epp:") {
                in_param = false;
                if line.is_empty() && !paragraph.is_empty() {
                    doc.paragraphs.push(std::mem::take(&mut paragraph));
                }
            } else if let Some((name, text)) = param_line(line) {
                in_param = true;
                doc.params.push((name.to_string(), text.to_string()));
            } else if in_param && let Some((_, text)) = doc.params.last_mut() {
                join(text, line);
            } else {
                join(&mut paragraph, line);
            }
        }
        if !paragraph.is_empty() {
            doc.paragraphs.push(paragraph);
        }
        doc
    }

    fn first(&self) -> &str {
        self.paragraphs.first().map_or("", String::as_str)
    }

    /// Its description of the param `wit` (WIT name) / `wire`, and the name it used.
    fn param(&self, wit: &str, wire: &str) -> Option<(&str, &str)> {
        self.params
            .iter()
            .find(|(name, _)| name == wit || names::field(name) == wire)
            .map(|(name, text)| (name.as_str(), text.as_str()))
    }
}

/// `` `NAME`: text `` as (NAME, text).
fn param_line(line: &str) -> Option<(&str, &str)> {
    let (name, text) = line.strip_prefix('`')?.split_once("`:")?;
    let word = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
    (!name.is_empty() && name.chars().all(word)).then_some((name, text.trim()))
}

/// In descriptions, a method (`sandbox.create`, `sandbox-create`) in
/// backticks is named as its tool (`sandbox_create`), and a param or field
/// by its wire name (`sandbox-id` is `sandbox_id`). Also the words the
/// contract's docs write in capitals (`URL`), for titles.
struct Renames {
    names: std::collections::BTreeMap<String, String>,
    capitals: BTreeSet<String>,
}

impl Renames {
    fn new(cx: &Ctx, infra: &wit_parser::Interface, methods: &[Method]) -> Renames {
        let mut map = std::collections::BTreeMap::new();
        let mut name = |wit: &str, ty: Type| {
            if wit.contains('-') {
                map.entry(wit.to_string())
                    .or_insert_with(|| wire(cx.resolve, wit, ty));
            }
        };
        for func in cx.functions.values() {
            for p in &func.params {
                name(&p.name, p.ty);
            }
        }
        for id in infra.types.values() {
            if let TypeDefKind::Record(r) = &cx.resolve.types[*id].kind {
                for f in &r.fields {
                    name(&f.name, f.ty);
                }
            }
        }
        for m in methods {
            map.insert(m.function.clone(), tool_name(&m.wire));
            map.insert(m.wire.clone(), tool_name(&m.wire));
        }
        // Words written in capitals in the functions' docs (PTY, VPC, URL) keep
        // them in titles; the interface's doc is left out, as its capitals are
        // the tags' placeholders (TEMPLATE, KEY, NAME).
        let docs = cx.functions.values().map(|f| &f.docs);
        let capitals = docs
            .flat_map(|d| {
                d.contents
                    .as_deref()
                    .unwrap_or("")
                    .split(|c: char| !c.is_ascii_alphanumeric())
            })
            .filter(|w| w.len() > 1 && w.chars().all(|c| c.is_ascii_uppercase()))
            .map(str::to_string)
            .collect();
        Renames {
            names: map,
            capitals,
        }
    }

    fn apply(&self, text: &str) -> String {
        text.split('`')
            .enumerate()
            .map(|(i, part)| match (i % 2, self.names.get(part)) {
                (1, Some(name)) => name.as_str(),
                _ => part,
            })
            .collect::<Vec<_>>()
            .join("`")
    }
}

/// `sandbox.create` as a tool: `sandbox_create`.
fn tool_name(wire: &str) -> String {
    wire.replace('.', "_")
}

/// How a value is projected: as params take it, or as answers give it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    In,
    Out,
}

/// JSON Schemas of WIT types, by the codec's rule (docs/epp-1.md §8, Values).
struct Schemas<'a> {
    resolve: &'a Resolve,
    dir: Dir,
}

impl Schemas<'_> {
    /// A field or param named `wit` (the `*-ms` and `mode` rules read its name).
    fn field(&self, wit: &str, ty: Type) -> Result<Value, String> {
        let (option, inner) = match kind(self.resolve, ty) {
            Some(TypeDefKind::Option(inner)) => (true, dealias(self.resolve, *inner)),
            _ => (false, dealias(self.resolve, ty)),
        };
        if option && self.dir == Dir::In {
            // An optional param is left out for none: its schema needs no
            // null (the codec still takes one).
            return self.field(wit, inner);
        }
        let unit = match self.dir {
            _ if !is_integer(self.resolve, inner) => return self.of(ty),
            // Past the codec's bound of 1e9 s the call is refused by name.
            Dir::In if names::seconds(wit).is_some() => {
                json!({"type": "number", "exclusiveMinimum": 0})
            }
            Dir::Out if names::seconds(wit).is_some() => json!({"type": "number"}),
            Dir::In if inner == Type::U32 && names::is_mode(wit) => {
                json!({"type": ["string", "integer"], "pattern": "^(0o)?[0-7]+$", "minimum": 0})
            }
            Dir::Out if inner == Type::U32 && names::is_mode(wit) => json!({"type": "string"}),
            _ => return self.of(ty),
        };
        Ok(if option { nullable(unit) } else { unit })
    }

    fn of(&self, ty: Type) -> Result<Value, String> {
        let integer = |min: i64, max: Option<u64>| match (self.dir, max) {
            (Dir::Out, _) => json!({"type": "integer"}),
            (Dir::In, Some(max)) => json!({"type": "integer", "minimum": min, "maximum": max}),
            (Dir::In, None) => json!({"type": "integer", "minimum": min}),
        };
        Ok(match dealias(self.resolve, ty) {
            Type::Bool => json!({"type": "boolean"}),
            Type::U8 => integer(0, Some(u8::MAX.into())),
            Type::U16 => integer(0, Some(u16::MAX.into())),
            // Wider bounds than these say nothing a client needs.
            Type::U32 | Type::U64 => integer(0, None),
            Type::S8 => integer(i8::MIN.into(), Some(i8::MAX as u64)),
            Type::S16 => integer(i16::MIN.into(), Some(i16::MAX as u64)),
            Type::S32 | Type::S64 => json!({"type": "integer"}),
            // NaN and infinities are answered as null.
            Type::F32 | Type::F64 => match self.dir {
                Dir::In => json!({"type": "number"}),
                Dir::Out => json!({"type": ["number", "null"]}),
            },
            Type::Char => json!({"type": "string", "minLength": 1, "maxLength": 1}),
            Type::String => json!({"type": "string"}),
            Type::ErrorContext => return Err("an error-context has no JSON form".into()),
            Type::Id(id) => match &self.resolve.types[id].kind {
                TypeDefKind::Record(r) => self.record(&r.fields)?,
                TypeDefKind::Tuple(t) => {
                    let items = t
                        .types
                        .iter()
                        .map(|t| self.of(*t))
                        .collect::<Result<Vec<_>, _>>()?;
                    let n = items.len();
                    json!({"type": "array", "prefixItems": items, "minItems": n, "maxItems": n})
                }
                TypeDefKind::Flags(f) => {
                    let names: Vec<String> =
                        f.flags.iter().map(|f| names::field(&f.name)).collect();
                    json!({"type": "array", "items": {"enum": names}, "uniqueItems": true})
                }
                TypeDefKind::Enum(e) => {
                    let names: Vec<String> =
                        e.cases.iter().map(|c| names::field(&c.name)).collect();
                    json!({"enum": names})
                }
                TypeDefKind::Variant(v) => {
                    let cases = v
                        .cases
                        .iter()
                        .map(|c| {
                            let name = names::field(&c.name);
                            Ok(match c.ty {
                                None => json!({"const": name}),
                                Some(t) => one_key(&name, self.of(t)?),
                            })
                        })
                        .collect::<Result<Vec<_>, String>>()?;
                    json!({"oneOf": cases})
                }
                TypeDefKind::Option(t) => nullable(self.of(*t)?),
                TypeDefKind::Result(r) => {
                    let side = |name: &str, t: Option<Type>| -> Result<Value, String> {
                        let value = match t {
                            Some(t) => self.of(t)?,
                            None => json!({"type": "null"}),
                        };
                        Ok(one_key(name, value))
                    };
                    json!({"oneOf": [side("ok", r.ok)?, side("err", r.err)?]})
                }
                TypeDefKind::List(item) => match kind(self.resolve, *item) {
                    _ if dealias(self.resolve, *item) == Type::U8 => {
                        json!({"type": "string", "contentEncoding": "base64"})
                    }
                    Some(TypeDefKind::Tuple(t))
                        if t.types.len() == 2
                            && t.types
                                .iter()
                                .all(|t| dealias(self.resolve, *t) == Type::String) =>
                    {
                        json!({"type": "object", "additionalProperties": {"type": "string"}})
                    }
                    _ => json!({"type": "array", "items": self.of(*item)?}),
                },
                other => {
                    return Err(format!("a {} has no JSON form", other.as_str()));
                }
            },
        })
    }

    /// A record: an object of its fields. As params: fields described by
    /// their docs, required as the codec requires them, no others; as an
    /// answer: every field is there.
    fn record(&self, fields: &[wit_parser::Field]) -> Result<Value, String> {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for f in fields {
            let wire = wire(self.resolve, &f.name, f.ty);
            let mut schema = self.field(&f.name, f.ty)?;
            if self.dir == Dir::In
                && let Some(text) = Doc::of(f.docs.contents.as_deref()).paragraphs.first()
            {
                describe(&mut schema, text);
            }
            if self.dir == Dir::Out || needed(self.resolve, f.ty) {
                required.push(Value::String(wire.clone()));
            }
            properties.insert(wire, schema);
        }
        Ok(object(properties, required, self.dir))
    }
}

/// An object schema of `properties`; params take no others. An answer's
/// schema does not list what is `required` (its fields are always there, or
/// `null` as an `option`): those lists would be a sixth of `tools/list`.
fn object(properties: Map<String, Value>, required: Vec<Value>, dir: Dir) -> Value {
    let mut schema = Map::new();
    schema.insert("type".into(), "object".into());
    if !properties.is_empty() {
        schema.insert("properties".into(), Value::Object(properties));
    }
    if !required.is_empty() && dir == Dir::In {
        schema.insert("required".into(), Value::Array(required));
    }
    if dir == Dir::In {
        schema.insert("additionalProperties".into(), false.into());
    }
    Value::Object(schema)
}

/// `{"name": value}` and nothing else.
fn one_key(name: &str, value: Value) -> Value {
    json!({"type": "object", "properties": {name: value}, "required": [name], "additionalProperties": false})
}

/// `schema`, or null.
fn nullable(mut schema: Value) -> Value {
    let composite = ["oneOf", "anyOf", "allOf", "const", "$ref"];
    let Some(map) = schema.as_object_mut() else {
        return schema;
    };
    if composite.iter().any(|k| map.contains_key(*k)) {
        return json!({"anyOf": [schema, {"type": "null"}]});
    }
    match map.get_mut("type") {
        Some(Value::String(t)) => {
            let t = std::mem::take(t);
            map.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(types)) => types.push("null".into()),
        _ => {}
    }
    if let Some(Value::Array(cases)) = map.get_mut("enum") {
        cases.push(Value::Null);
    }
    schema
}

/// Adds `text`, a description, to `schema`.
fn describe(schema: &mut Value, text: &str) {
    if let Some(map) = schema.as_object_mut() {
        map.insert("description".into(), text.into());
    }
}

/// Whether the codec refuses a param or field of this type when it is
/// absent: it is not an option, a list, key-values, bytes or a bool.
fn needed(resolve: &Resolve, ty: Type) -> bool {
    dealias(resolve, ty) != Type::Bool
        && !matches!(
            kind(resolve, ty),
            Some(TypeDefKind::Option(_) | TypeDefKind::List(_))
        )
}

/// One param of a tool.
struct ToolParam {
    wire: String,
    wit: String,
    schema: Value,
    required: bool,
    /// An integer `*-ms` param: seconds on the wire.
    seconds: bool,
    /// The doc of the record field it is, if it is one.
    field_doc: Option<String>,
    /// The params of each object of a list param (a writer's `when.` list).
    items: Option<Vec<ToolParam>>,
}

impl ToolParam {
    /// A param or field `wit` of type `ty`, with `m`'s default and range of it.
    fn of(
        cx: &Ctx,
        m: Option<&Method>,
        wit: &str,
        ty: Type,
        doc: Option<&String>,
    ) -> Result<ToolParam, String> {
        let integer = is_integer(cx.resolve, ty);
        let wire = wire(cx.resolve, wit, ty);
        let schemas = Schemas {
            resolve: cx.resolve,
            dir: Dir::In,
        };
        let mut schema = schemas.field(wit, ty)?;
        let default = m.and_then(|m| m.defaults.iter().find(|(f, _)| *f == wire));
        let range = m.and_then(|m| m.ranges.iter().find(|(f, ..)| *f == wire));
        if let Some(map) = schema.as_object_mut() {
            if let Some((_, json)) = default {
                let value: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
                map.insert("default".into(), value);
            }
            if let Some((_, min, max)) = range {
                for (key, bound) in [("minimum", min), ("maximum", max)] {
                    if let Some(bound) = bound {
                        map.insert(key.into(), (*bound).into());
                    }
                }
            }
        }
        Ok(ToolParam {
            required: needed(cx.resolve, ty) && default.is_none(),
            seconds: integer && names::seconds(wit).is_some(),
            wire,
            wit: wit.to_string(),
            schema,
            field_doc: doc.cloned(),
            items: None,
        })
    }

    /// One of the stream adapter's own params.
    fn adapter(name: &str, schema: Value, required: bool) -> ToolParam {
        ToolParam {
            wire: name.to_string(),
            wit: name.to_string(),
            schema,
            required,
            seconds: false,
            field_doc: None,
            items: None,
        }
    }

    fn encoding() -> ToolParam {
        let schema = json!({"enum": ENCODINGS, "default": ENCODINGS[0]});
        ToolParam::adapter(ENCODING, schema, false)
    }
}

/// A writer's params as the adapter takes them: `content` and `encoding`
/// where its `size` was (after the others when it has none).
fn writer_params(params: Vec<ToolParam>) -> Vec<ToolParam> {
    let at = params
        .iter()
        .position(|p| p.wire == SIZE)
        .unwrap_or(params.len());
    let mut out: Vec<ToolParam> = params.into_iter().filter(|p| p.wire != SIZE).collect();
    let content = ToolParam::adapter(CONTENT, json!({"type": "string"}), true);
    out.splice(at..at, [content, ToolParam::encoding()]);
    out
}

/// The record inside an `option<record>` or a `list<record>`.
fn inner_record(resolve: &Resolve, ty: Type) -> Option<&wit_parser::Record> {
    match kind(resolve, ty) {
        Some(TypeDefKind::Option(inner) | TypeDefKind::List(inner)) => record_of(resolve, *inner),
        _ => None,
    }
}

/// The params of a method's tool: its function's, as its stream adapter
/// takes them (a reader's range as its fields, and `encoding`; a writer's
/// `content` and `encoding` for its `size`), and its `when.` params (a flag
/// as a boolean, unless it is `fed.`; a list param of a writer as a list of
/// objects made of the writer's params). With a `when.` list, the params it
/// stands for are required only without it: those sets come second.
fn tool_params(
    cx: &Ctx,
    m: &Method,
    func: &Function,
) -> Result<(Vec<ToolParam>, Vec<Vec<String>>), String> {
    let shape = m.stream.as_ref().map(|s| &s.callees[0].answer);
    let reader = matches!(shape, Some(Answer::Reader { .. }));
    let mut out = Vec::new();
    for p in params(cx.resolve, func) {
        let range = matches!(kind(cx.resolve, p.ty), Some(TypeDefKind::Option(_)))
            .then(|| inner_record(cx.resolve, p.ty))
            .flatten();
        match range {
            Some(range) if reader => {
                for f in &range.fields {
                    let doc = f.docs.contents.as_ref();
                    let mut field = ToolParam::of(cx, None, &f.name, f.ty, doc)?;
                    field.required = false;
                    out.push(field);
                }
            }
            _ => out.push(ToolParam::of(cx, Some(m), &p.wit, p.ty, p.doc.as_ref())?),
        }
    }
    if reader {
        out.push(ToolParam::encoding());
    }
    if matches!(shape, Some(Answer::Writer { .. })) {
        out = writer_params(out);
    }
    let own: Vec<String> = out
        .iter()
        .filter(|p| p.required)
        .map(|p| p.wire.clone())
        .collect();
    let mut required = own.clone();
    let mut alternatives = Vec::new();
    for c in m.stream.iter().flat_map(|s| &s.callees) {
        let Via::When { param, is_param } = &c.via else {
            continue;
        };
        let fed = m.fed.iter().any(|(p, _)| p == param);
        match (is_param, fed) {
            (false, true) => continue,
            (true, true) => {
                return Err(format!(
                    "fed.{param}: `{param}` is a param of `{}`, not a flag",
                    c.function
                ));
            }
            (false, false) => {
                out.push(ToolParam::adapter(param, json!({"type": "boolean"}), false));
                continue;
            }
            (true, false) => {}
        }
        let mut alternative = Vec::new();
        for q in params(cx.resolve, &cx.functions[&c.function]) {
            if &q.wire != param {
                if !out.iter().any(|p| p.wire == q.wire) {
                    return Err(format!(
                        "when.{param}={}: its param `{}` is not a param of the method, so one \
                         tool cannot take both",
                        c.function, q.wire
                    ));
                }
                if needed(cx.resolve, q.ty) {
                    alternative.push(q.wire);
                }
                continue;
            }
            let mut list = ToolParam::of(cx, None, &q.wit, q.ty, q.doc.as_ref())?;
            if matches!(c.answer, Answer::Writer { .. })
                && matches!(kind(cx.resolve, q.ty), Some(TypeDefKind::List(_)))
                && let Some(record) = inner_record(cx.resolve, q.ty)
            {
                let fields = record
                    .fields
                    .iter()
                    .map(|f| ToolParam::of(cx, None, &f.name, f.ty, f.docs.contents.as_ref()))
                    .collect::<Result<Vec<_>, _>>()?;
                list.items = Some(writer_params(fields));
            }
            alternative.push(q.wire);
            out.push(list);
        }
        required.retain(|r| alternative.contains(r));
        alternatives.push(alternative);
    }
    if !alternatives.is_empty() {
        alternatives.insert(0, own);
        for set in &mut alternatives {
            set.retain(|p| !required.contains(p));
        }
    }
    for p in &mut out {
        p.required = required.contains(&p.wire);
    }
    Ok((out, alternatives))
}

/// An answer object: its properties, and which are always there.
#[derive(Default)]
struct Fields {
    properties: Vec<(String, Value)>,
    required: Vec<String>,
}

impl Fields {
    fn push(&mut self, key: &str, schema: Value, required: bool) {
        self.properties.push((key.to_string(), schema));
        if required {
            self.required.push(key.to_string());
        }
    }

    fn append(&mut self, other: Fields) {
        self.properties.extend(other.properties);
        self.required.extend(other.required);
    }

    /// Both answers' properties; required only when always there.
    fn merge(mut self, other: Fields) -> Result<Fields, String> {
        for (key, schema) in other.properties {
            match self.properties.iter().find(|(k, _)| *k == key) {
                Some((_, mine)) if *mine != schema => {
                    return Err(format!(
                        "its functions answer `{key}` in two forms, which one schema cannot say"
                    ));
                }
                Some(_) => {}
                None => self.properties.push((key, schema)),
            }
        }
        self.required.retain(|k| other.required.contains(k));
        Ok(self)
    }

    fn schema(self) -> Value {
        let required = self.required.into_iter().map(Value::String).collect();
        object(self.properties.into_iter().collect(), required, Dir::Out)
    }
}

/// The answer of a value: a record's fields, nothing as no fields, any
/// other value under `key`.
fn plain_answer(cx: &Ctx, key: Option<&str>, ok: Option<Type>) -> Result<Fields, String> {
    let out = Schemas {
        resolve: cx.resolve,
        dir: Dir::Out,
    };
    let mut fields = Fields::default();
    let Some(ty) = ok else {
        return Ok(fields);
    };
    match record_of(cx.resolve, ty) {
        Some(r) => {
            for f in &r.fields {
                let name = wire(cx.resolve, &f.name, f.ty);
                fields.push(&name, out.field(&f.name, f.ty)?, true);
            }
        }
        None => {
            let key = key.ok_or("its answer is not a record and has no key")?;
            fields.push(key, out.of(ty)?, true);
        }
    }
    Ok(fields)
}

/// What a stream method answers through `callee` (docs/epp-1.md §8, How a
/// stream is served), collected when it streams events.
fn callee_answer(cx: &Ctx, m: &Method, s: &Stream, c: &Callee) -> Result<Fields, String> {
    let out = Schemas {
        resolve: cx.resolve,
        dir: Dir::Out,
    };
    let key = m.result.as_deref().or(s.id.as_deref()).or(Some("result"));
    let string = json!({"type": "string"});
    let mut fields = Fields::default();
    match &c.answer {
        Answer::Plain => {
            return plain_answer(cx, key, result_ok(cx, &cx.functions[&c.function])?);
        }
        Answer::Writer { finish, .. } => {
            return plain_answer(cx, key, result_ok(cx, &cx.functions[finish])?);
        }
        Answer::Reader { .. } => {
            fields.push(CONTENT, string.clone(), true);
            fields.push(ENCODING, json!({"enum": ENCODINGS}), true);
            fields.push(SIZE, json!({"type": "integer"}), true);
        }
        // A stream of records answers `{}` when it ends.
        Answer::Events { cases: None, .. } => {}
        Answer::Events {
            cases: Some(cases), ..
        } => {
            if let Some(id) = &s.id {
                fields.push(id, string.clone(), true);
            }
            if s.detach {
                return Ok(fields);
            }
            let payload = |c: &Case| c.ty.map(|t| out.of(t)).transpose();
            let mut texts = Vec::new();
            let mut lists = Fields::default();
            let mut kept = Fields::default();
            for case in cases {
                match &case.role {
                    Role::End(Some(key)) => {
                        fields.push(key, payload(case)?.unwrap_or(Value::Null), true);
                    }
                    // Its record's fields, an absent option left out.
                    Role::End(None) => {
                        let record = case.ty.and_then(|t| record_of(cx.resolve, t));
                        for f in record.iter().flat_map(|r| &r.fields) {
                            let (ty, always) = match kind(cx.resolve, f.ty) {
                                Some(TypeDefKind::Option(inner)) => (*inner, false),
                                _ => (f.ty, true),
                            };
                            let name = wire(cx.resolve, &f.name, ty);
                            fields.push(&name, out.field(&f.name, ty)?, always);
                        }
                    }
                    Role::Keep(key) => kept.push(key, payload(case)?.unwrap_or(Value::Null), false),
                    Role::Text => texts.push(case.wire.clone()),
                    Role::Item(key) => {
                        let items = payload(case)?.unwrap_or(Value::Null);
                        lists.push(key, json!({"type": "array", "items": items}), true);
                    }
                    Role::Id | Role::Forward => {}
                }
            }
            fields.append(kept);
            for text in texts {
                fields.push(&text, string.clone(), true);
            }
            fields.append(lists);
            fields.push(TRUNCATED, json!({"type": "boolean"}), false);
        }
    }
    Ok(fields)
}

/// One tool, as `contract::tools::Tool` holds it.
struct ToolText {
    name: String,
    method: String,
    title: String,
    description: String,
    input: String,
    output: String,
    effect: Effect,
}

/// The callees whose answers a tool can get: `prefer=` in place of the
/// method's own function (which serves older components), and each `when.`
/// function but a `fed.` one.
fn tool_callees<'a>(m: &'a Method, s: &'a Stream) -> impl Iterator<Item = &'a Callee> {
    let prefer = s.callees.iter().any(|c| c.via == Via::Prefer);
    s.callees.iter().filter(move |c| match &c.via {
        Via::Main => !prefer,
        Via::Prefer => true,
        Via::When { param, .. } => !m.fed.iter().any(|(p, _)| p == param),
    })
}

fn tool(
    cx: &Ctx,
    m: &Method,
    shared: &Doc,
    renames: &Renames,
    used: &mut BTreeSet<String>,
) -> Result<ToolText, String> {
    let func = &cx.functions[&m.function];
    let own = Doc::of(func.docs.contents.as_deref());
    let description = renames.apply(own.first());
    if description.is_empty() {
        return Err("its doc comment has no first paragraph to describe its tool with".into());
    }
    // Param lines: the method's own, then its other functions'.
    let mut docs = vec![own];
    for c in m.stream.iter().flat_map(|s| &s.callees).skip(1) {
        docs.push(Doc::of(cx.functions[&c.function].docs.contents.as_deref()));
    }

    let (params, alternatives) = tool_params(cx, m, func)?;
    let wit_params = params_names(cx, func);
    for (name, _) in &docs[0].params {
        let known = |p: &ToolParam| p.wit == *name || p.wire == names::field(name);
        let nested = |p: &ToolParam| p.items.iter().flatten().any(known);
        let omitted = wit_params.iter().any(|n| n == name);
        if !params.iter().any(|p| known(p) || nested(p)) && !omitted {
            return Err(format!(
                "its doc describes `{name}`, which is not one of its params"
            ));
        }
    }
    let text_of = |p: &ToolParam, used: &mut BTreeSet<String>| -> Option<String> {
        let text = docs
            .iter()
            .find_map(|d| d.param(&p.wit, &p.wire))
            .map(|(_, text)| text.to_string())
            .or_else(|| {
                let doc = Doc::of(p.field_doc.as_deref());
                doc.paragraphs.into_iter().next()
            })
            .or_else(|| {
                let (name, text) = shared.param(&p.wit, &p.wire)?;
                used.insert(name.to_string());
                Some(text.to_string())
            })?;
        let text = match p.seconds {
            true => format!("{text} In seconds."),
            false => text,
        };
        Some(renames.apply(&text))
    };
    let mut properties = Map::new();
    let mut required = Vec::new();
    for p in params {
        let text = text_of(&p, used).ok_or_else(|| {
            format!(
                "param `{}` has no description: give the function a line `` `{}`: … ``, \
                 document the record field, or describe it once for all methods in the doc \
                 of `interface infra`",
                p.wire, p.wit
            )
        })?;
        let mut schema = p.schema.clone();
        if let Some(items) = &p.items {
            let mut props = Map::new();
            let mut needed = Vec::new();
            for item in items {
                let mut schema = item.schema.clone();
                if let Some(text) = text_of(item, used) {
                    describe(&mut schema, &text);
                }
                if item.required {
                    needed.push(Value::String(item.wire.clone()));
                }
                props.insert(item.wire.clone(), schema);
            }
            schema = json!({"type": "array", "items": object(props, needed, Dir::In)});
        }
        describe(&mut schema, &text);
        if p.required {
            required.push(Value::String(p.wire.clone()));
        }
        properties.insert(p.wire, schema);
    }
    let mut input = object(properties, required, Dir::In);
    // The server refuses an unknown argument naming it and the ones it
    // takes; saying so in every schema would be 1.1 KB of `tools/list`.
    if let Some(top) = input.as_object_mut() {
        top.remove("additionalProperties");
    }
    if !alternatives.is_empty() {
        let sets: Vec<Value> = alternatives
            .into_iter()
            .map(|set| json!({"required": set}))
            .collect();
        input["oneOf"] = Value::Array(sets);
    }

    let output = match &m.stream {
        None => plain_answer(cx, m.result.as_deref(), result_ok(cx, func)?)?,
        Some(s) => {
            let mut answers = tool_callees(m, s).map(|c| callee_answer(cx, m, s, c));
            let first = answers
                .next()
                .ok_or("it has no function a tool can call")??;
            let mut all = answers.try_fold(first, |all, next| all.merge(next?))?;
            if s.resume.is_some() {
                // Answered before the end (docs/mcp.md, Long work): still going.
                all.push("running", json!({"type": "boolean"}), false);
            }
            all
        }
    };

    let (title, effect) = title_and_effect(m, &renames.capitals);
    Ok(ToolText {
        name: tool_name(&m.wire),
        method: m.wire.clone(),
        title,
        description,
        input: input.to_string(),
        output: output.schema().to_string(),
        effect,
    })
}

/// `watches=METHOD` of `m`: METHOD reads resources, and `m` takes every
/// variable of their template.
fn check_watches(m: &Method, watched: &str, methods: &[Method]) -> Result<(), String> {
    let other = methods
        .iter()
        .find(|o| o.wire == watched)
        .ok_or_else(|| format!("no method is called `{watched}`"))?;
    let template = other
        .resource
        .as_ref()
        .ok_or_else(|| format!("`{watched}` has no resource=TEMPLATE"))?;
    for var in template_vars(template)? {
        if !m.params.contains(&var) {
            return Err(format!("it takes no `{var}` (a variable of {template})"));
        }
    }
    if m.stream.is_none() {
        return Err("it is not a stream method (its events are the changes)".into());
    }
    Ok(())
}

/// The variables of an RFC 6570 template (`{name}` and `{+name}` only).
fn template_vars(template: &str) -> Result<Vec<String>, String> {
    let mut vars = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("{template}: an unclosed `{{`"))?;
        let var = &rest[open + 1..open + close];
        let name = var.strip_prefix('+').unwrap_or(var);
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "{template}: `{{{var}}}` is not `{{name}}` or `{{+name}}`"
            ));
        }
        vars.push(name.to_string());
        rest = &rest[open + close + 1..];
    }
    if rest.contains('}') {
        return Err(format!("{template}: a `}}` without `{{`"));
    }
    Ok(vars)
}

/// `resume=METHOD` of `m`: its stream has an id, and METHOD is a stream
/// method that takes that id.
fn check_resume(m: &Method, resume: &str, methods: &[Method]) -> Result<(), String> {
    let id = m
        .stream
        .as_ref()
        .and_then(|s| s.id.as_ref())
        .ok_or("its stream has no id=KEY to resume it by")?;
    let other = methods
        .iter()
        .find(|o| o.wire == resume)
        .ok_or_else(|| format!("no method is called `{resume}`"))?;
    if !other.params.contains(id) {
        return Err(format!("`{resume}` takes no `{id}`"));
    }
    if other.stream.is_none() {
        return Err(format!("`{resume}` is not a stream method"));
    }
    Ok(())
}

/// The names of a function's params, WIT and wire (those a tool leaves out
/// too, which its doc may describe for other clients).
fn params_names(cx: &Ctx, func: &Function) -> Vec<String> {
    params(cx.resolve, func)
        .into_iter()
        .flat_map(|p| [p.wit, p.wire])
        .collect()
}

/// A tool's title and what it does to its world, from its method's name
/// (docs/epp-1.md §8, Tools): the first word the rule knows decides the
/// effect, and a verb goes first (`sandbox.get_info` is "Get sandbox
/// info"); the group is the object, plural after `list`-like verbs alone
/// ("List sandboxes"), and a word the contract's docs write in capitals
/// (`capitals`) is so written ("Port URL"). `title=` gives another title.
fn title_and_effect(m: &Method, capitals: &BTreeSet<String>) -> (String, Effect) {
    let (group, last) = m.wire.split_once('.').unwrap_or(("", &m.wire));
    let words: Vec<&str> = last.split('_').collect();
    let known = words
        .iter()
        .find_map(|w| WORDS.iter().find(|(word, ..)| word == w));
    let effect = known.map_or(Effect::Acts, |(_, _, effect)| *effect);
    if let Some(title) = &m.title {
        return (title.clone(), effect);
    }
    let verb = known.filter(|(_, verb, _)| *verb).map(|(word, ..)| *word);
    let rest: Vec<&str> = words.iter().copied().filter(|w| Some(*w) != verb).collect();
    let noun = match verb {
        Some(v) if rest.is_empty() && PLURAL_VERBS.contains(&v) => plural(group),
        _ => singular(group),
    };
    let phrase: Vec<String> = verb
        .into_iter()
        .chain([noun.as_str()])
        .chain(rest)
        .filter(|w| !w.is_empty())
        .map(|w| match capitals.contains(&w.to_ascii_uppercase()) {
            true => w.to_ascii_uppercase(),
            false => w.to_string(),
        })
        .collect();
    let mut title = phrase.join(" ");
    if let Some(first) = title.get(..1) {
        title.replace_range(..1, &first.to_ascii_uppercase());
    }
    (title, effect)
}

/// `files` as `file` (a group named in the plural).
fn singular(group: &str) -> String {
    match group.strip_suffix('s') {
        Some(stem) if !stem.ends_with('s') => stem.to_string(),
        _ => group.to_string(),
    }
}

/// `sandbox` as `sandboxes`.
fn plural(group: &str) -> String {
    let one = singular(group);
    match ["s", "x", "sh", "ch"].iter().any(|end| one.ends_with(end)) {
        true => format!("{one}es"),
        false => format!("{one}s"),
    }
}

/// `$OUT_DIR/tools.rs`: every method as an MCP tool, and the instructions.
fn render_tools(
    cx: &Ctx,
    infra: &wit_parser::Interface,
    methods: &[Method],
) -> Result<String, String> {
    let shared = Doc::of(infra.docs.contents.as_deref());
    let renames = Renames::new(cx, infra, methods);
    let instructions = renames.apply(shared.first());
    if instructions.is_empty() {
        return Err("`interface infra` has no doc comment to instruct an MCP client with".into());
    }
    let mut used = BTreeSet::new();
    let mut code = String::from(
        "// Generated by host/build.rs from wit/ (docs/epp-1.md §8, Tools). Do not edit.\n\n\
         /// Every method as an MCP tool, in the order of `interface infra`.\n\
         pub const TOOLS: &[Tool] = &[\n",
    );
    for m in methods {
        if let Some((param, fed)) = m
            .fed
            .iter()
            .find(|(_, f)| !methods.iter().any(|o| o.wire == *f))
        {
            return Err(format!(
                "wit/infra.wit, function `{}`: fed.{param}={fed}: no method is called `{fed}`",
                m.function
            ));
        }
        if let Some(watched) = &m.watches {
            check_watches(m, watched, methods).map_err(|e| {
                format!(
                    "wit/infra.wit, function `{}`: watches={watched}: {e}",
                    m.function
                )
            })?;
        }
        if !m.resource_params.is_empty() && m.resource.is_none() {
            return Err(format!(
                "wit/infra.wit, function `{}`: resource.PARAM without resource=TEMPLATE",
                m.function
            ));
        }
        if let Some(resume) = m.stream.as_ref().and_then(|s| s.resume.as_ref()) {
            check_resume(m, resume, methods).map_err(|e| {
                format!(
                    "wit/infra.wit, function `{}`: resume={resume}: {e}",
                    m.function
                )
            })?;
        }
        let t = tool(cx, m, &shared, &renames, &mut used)
            .map_err(|e| format!("wit/infra.wit, function `{}`: {e}", m.function))?;
        let (read_only, destructive, idempotent) = t.effect.hints();
        let feeds = methods
            .iter()
            .any(|o| o.fed.iter().any(|(_, f)| *f == m.wire));
        let _ = writeln!(
            code,
            "    Tool {{ name: {:?}, method: {:?}, title: {:?}, description: {:?}, \
             input_schema: {:?}, output_schema: {:?}, read_only: {read_only}, \
             destructive: {destructive}, idempotent: {idempotent}, feeds: {feeds}, \
             named: {} }},",
            t.name, t.method, t.title, t.description, t.input, t.output, m.named
        );
    }
    if let Some((name, _)) = shared.params.iter().find(|(n, _)| !used.contains(n)) {
        return Err(format!(
            "wit/infra.wit, `interface infra`: its doc describes `{name}`, which no method's \
             tool takes without a description of its own"
        ));
    }
    let _ = writeln!(
        code,
        "];\n\n/// What an MCP server tells its clients (`instructions`): the first paragraph \
         of the doc of `interface infra`.\npub const INSTRUCTIONS: &str = {instructions:?};"
    );
    Ok(code)
}
