//! minibox: a second, test-only EPP/1 provider (`host/tests/minibox.rs`).
//!
//! It exists to show that `epp-host` serves any provider that declares its needs
//! through the WIT world, not only OpenSandbox: it has its own id, settings,
//! backend origin and secret header, and it talks JSON over HTTP to a tiny
//! in-memory server that the test starts on loopback.
//!
//! | setting | environment | |
//! |---|---|---|
//! | `endpoint` | `MINIBOX_ENDPOINT` | the server's base URL (no default); also the origin |
//! | `token` | `MINIBOX_TOKEN` | secret; the host sends it as `x-minibox-token` to the origin |
//! | `flavor` | `MINIBOX_FLAVOR` | template of a new box when the request names none (default `plain`) |
//!
//! The server's API: `POST /v1/boxes` `{template, metadata}` → a box; `GET /v1/boxes`
//! → `[box]`; `GET`/`DELETE /v1/boxes/ID`; `POST /v1/boxes/ID/exists` `{path}` →
//! `{exists}`. A box is `{id, template, state, metadata, created_at}`.
//!
//! Capabilities: `sandbox.lifecycle` (`sandbox-connect` is not implemented) and
//! `files.rw` (`files-exists` only; no `files-write-many`). Every other function
//! answers `unsupported` at once, without I/O. minibox reports no tokens
//! (`request.made`), as before the contract had them: nothing it does is undone by
//! the host (a create cancelled while its POST is in flight may leave a box, which
//! `sandbox-list` shows), and `undo` refuses any token.
//!
//! Test hooks: `sandbox-get-info(id)` with one of these ids observes the guest
//! from inside instead of asking the server:
//!
//! | id | answer |
//! |---|---|
//! | `env` | metadata = the guest's whole environment (`wasi:cli/environment`) |
//! | `fetch:URL` | GET URL with no headers; metadata `status`, or the transport error mapped to an EPP error (`HTTP-request-denied` is E6001) |
//! | `smuggle` / `smuggle:URL` | GET `{endpoint}/v1/whoami` (or URL) after trying to set `x-minibox-token: forged` itself; metadata `set-header`, `from-list` (`ok` or why not) and `status` |

mod bindings;

use bindings::abx::epp::types::{
    Capabilities, Capability, EppError, ErrorCode, HeaderScope, ProviderInfo, ProviderNeeds,
    SecretHeader, Setting,
};
use bindings::exports::abx::epp::infra::{
    self, ByteRange, CodeContext, CodeEvent, CodeRequest, CodeResult, CommandEvent, CommandLogs,
    CommandRequest, CommandStatus, CreateRequest, FileEvent, FileInfo, Guest, ListRequest,
    MountRequest, PortUrl, ProcessInfo, PtyEvent, PtyRequest, SandboxInfo, TemplateBuildRequest,
    TemplateInfo, TransferUrl,
};
use serde_json::{Map, Value, json};
use std::io::{Read, Write};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode as HttpError, Fields, HeaderError, Method, OutgoingBody, OutgoingRequest, Scheme,
};
use wasip2::io::streams::{InputStream, OutputStream};

/// The secret header; the host owns it, the guest must not be able to set it.
const TOKEN_HEADER: &str = "x-minibox-token";

/// The environment variable of the backend's base URL.
const ENDPOINT_ENV: &str = "MINIBOX_ENDPOINT";

/// The 18 capabilities in EPP/1 order, by wire name.
const CAPABILITIES: [(&str, Capabilities); 18] = [
    ("sandbox.lifecycle", Capabilities::SANDBOX_LIFECYCLE),
    ("sandbox.timeout", Capabilities::SANDBOX_TIMEOUT),
    ("sandbox.pause", Capabilities::SANDBOX_PAUSE),
    ("exec.run", Capabilities::EXEC_RUN),
    ("exec.stream", Capabilities::EXEC_STREAM),
    ("process.manage", Capabilities::PROCESS_MANAGE),
    ("pty", Capabilities::PTY),
    ("files.rw", Capabilities::FILES_RW),
    ("ports.url", Capabilities::PORTS_URL),
    ("files.watch", Capabilities::FILES_WATCH),
    ("files.transfer", Capabilities::FILES_TRANSFER),
    ("code.interpret", Capabilities::CODE_INTERPRET),
    ("templates.read", Capabilities::TEMPLATES_READ),
    ("templates.build", Capabilities::TEMPLATES_BUILD),
    ("ports.domain", Capabilities::PORTS_DOMAIN),
    ("storage.mount", Capabilities::STORAGE_MOUNT),
    ("network.vpc", Capabilities::NETWORK_VPC),
    ("sessions", Capabilities::SESSIONS),
];

/// What minibox implements.
fn supported() -> Capabilities {
    Capabilities::SANDBOX_LIFECYCLE | Capabilities::FILES_RW
}

/// Largest answer minibox reads from its server.
const MAX_BODY: u64 = 1 << 20;

type R<T> = Result<T, EppError>;
type Kv = Vec<(String, String)>;

fn error(code: ErrorCode, message: impl Into<String>) -> EppError {
    EppError {
        code,
        message: message.into(),
        http_status: None,
        upstream_code: None,
    }
}

fn unsupported(function: &str) -> EppError {
    error(
        ErrorCode::Unsupported,
        format!("minibox does not implement {function}"),
    )
}

fn kv(key: &str, value: impl Into<String>) -> (String, String) {
    (key.to_string(), value.into())
}

fn setting(name: &str, env: &str, default: Option<&str>, secret: bool, help: &str) -> Setting {
    Setting {
        name: name.into(),
        env: vec![env.into()],
        default_value: default.map(str::to_string),
        secret,
        description: help.into(),
    }
}

fn env_var(name: &str) -> Option<String> {
    wasip2::cli::environment::get_environment()
        .into_iter()
        .find(|(k, v)| k == name && !v.is_empty())
        .map(|(_, v)| v)
}

/// The server's base URL, without a trailing `/`.
fn endpoint() -> R<String> {
    env_var(ENDPOINT_ENV)
        .map(|url| url.trim_end_matches('/').to_string())
        .ok_or_else(|| {
            error(
                ErrorCode::Configuration,
                format!("{ENDPOINT_ENV} is not set; set it to the minibox server's URL"),
            )
        })
}

// ------------------------------------------------------------------ HTTP

/// The WIT name of a `wasi:http` error code (its Debug form for the rare ones).
fn http_error_name(e: &HttpError) -> String {
    match e {
        HttpError::HttpRequestDenied => "HTTP-request-denied".into(),
        HttpError::ConnectionRefused => "connection-refused".into(),
        HttpError::DestinationUnavailable => "destination-unavailable".into(),
        HttpError::DnsError(_) => "DNS-error".into(),
        other => format!("{other:?}"),
    }
}

/// A transport failure as an EPP error, classified by its type.
fn transport_error(url: &str, e: &HttpError) -> EppError {
    let code = match e {
        HttpError::HttpRequestDenied => ErrorCode::DeniedByPolicy,
        HttpError::ConnectionRefused
        | HttpError::DestinationUnavailable
        | HttpError::DestinationIpUnroutable
        | HttpError::DnsError(_) => ErrorCode::Unreachable,
        HttpError::ConnectionTimeout | HttpError::ConnectionReadTimeout => ErrorCode::TimedOut,
        _ => ErrorCode::Upstream,
    };
    error(code, format!("minibox: {url}: {}", http_error_name(e)))
}

fn header_error_name(e: HeaderError) -> &'static str {
    match e {
        HeaderError::Forbidden => "forbidden",
        HeaderError::InvalidSyntax => "invalid-syntax",
        HeaderError::Immutable => "immutable",
    }
}

/// One exchange: the status and the whole body. Never follows redirects.
fn exchange(method: Method, url: &str, headers: Fields, body: Option<&[u8]>) -> R<(u16, Vec<u8>)> {
    let invalid = |what: &str| error(ErrorCode::InvalidArgument, format!("{what}: {url}"));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("not a URL"))?;
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        _ => return Err(invalid("not an http(s) URL")),
    };
    if body.is_some() {
        headers
            .append("content-type", b"application/json")
            .map_err(|_| invalid("content-type"))?;
    }
    let request = OutgoingRequest::new(headers);
    if request.set_method(&method).is_err()
        || request.set_scheme(Some(&scheme)).is_err()
        || request.set_authority(Some(authority)).is_err()
        || request.set_path_with_query(Some(path)).is_err()
    {
        return Err(invalid("cannot build a request for"));
    }
    let outgoing = request.body().map_err(|_| invalid("no request body for"))?;
    let future = outgoing_handler::handle(request, None).map_err(|e| transport_error(url, &e))?;
    if let Some(bytes) = body {
        let mut stream = outgoing
            .write()
            .map_err(|_| invalid("no request body stream for"))?;
        stream
            .write_all(bytes)
            .and_then(|()| Write::flush(&mut stream))
            .map_err(|e| error(ErrorCode::Upstream, format!("sending to {url}: {e}")))?;
    }
    OutgoingBody::finish(outgoing, None).map_err(|e| transport_error(url, &e))?;
    future.subscribe().block();
    let response = match future.get() {
        Some(Ok(result)) => result.map_err(|e| transport_error(url, &e))?,
        _ => return Err(error(ErrorCode::Upstream, format!("{url}: response lost"))),
    };
    let status = response.status();
    let mut bytes = Vec::new();
    // Children before parents: the stream, then the body, then the response.
    {
        let incoming = response
            .consume()
            .map_err(|()| error(ErrorCode::Upstream, format!("{url}: no response body")))?;
        let stream = incoming
            .stream()
            .map_err(|()| error(ErrorCode::Upstream, format!("{url}: no response body")))?;
        stream.take(MAX_BODY).read_to_end(&mut bytes).map_err(|e| {
            error(
                ErrorCode::Upstream,
                format!("{url}: reading the answer: {e}"),
            )
        })?;
    }
    Ok((status, bytes))
}

/// A call to the minibox server: JSON in, JSON out, HTTP errors as EPP errors.
fn api(method: Method, path: &str, body: Option<Value>) -> R<Value> {
    let url = format!("{}{path}", endpoint()?);
    let body = body.map(|b| b.to_string().into_bytes());
    let (status, bytes) = exchange(method, &url, Fields::new(), body.as_deref())?;
    let text = String::from_utf8_lossy(&bytes);
    let code = match status {
        200..=299 if bytes.is_empty() => return Ok(Value::Null),
        200..=299 => {
            return serde_json::from_slice(&bytes).map_err(|e| {
                error(
                    ErrorCode::Upstream,
                    format!("minibox answered {path} with bad JSON: {e}"),
                )
            });
        }
        401 | 403 => ErrorCode::CredentialsRejected,
        404 => ErrorCode::NotFound,
        409 => ErrorCode::Conflict,
        _ => ErrorCode::Upstream,
    };
    Err(EppError {
        http_status: Some(status),
        ..error(
            code,
            format!("minibox answered {path} with {status}: {text}"),
        )
    })
}

// ------------------------------------------------------------------ boxes

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_string()
}

fn pairs(v: &Value) -> Kv {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

fn object(pairs: &[(String, String)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<Map<_, _>>(),
    )
}

fn sandbox_info(b: &Value) -> SandboxInfo {
    SandboxInfo {
        sandbox_id: text(b, "id"),
        template: text(b, "template"),
        image: None,
        state: text(b, "state"),
        metadata: pairs(&b["metadata"]),
        created_at: b["created_at"].as_str().map(str::to_string),
        expires_at: None,
    }
}

fn box_path(id: &str) -> R<String> {
    if id.is_empty() || !id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-') {
        return Err(error(
            ErrorCode::InvalidArgument,
            format!("`{id}` is not a minibox id (letters, digits and `-`)"),
        ));
    }
    Ok(format!("/v1/boxes/{id}"))
}

// ------------------------------------------------------------------ test hooks

fn hook_answer(id: &str, metadata: Kv) -> SandboxInfo {
    SandboxInfo {
        sandbox_id: id.to_string(),
        template: "hook".into(),
        image: None,
        state: "ok".into(),
        metadata,
        created_at: None,
        expires_at: None,
    }
}

/// A test hook's answer, or `None` when `id` names a box.
fn hook(id: &str) -> Option<R<SandboxInfo>> {
    let (verb, arg) = id.split_once(':').unwrap_or((id, ""));
    let metadata = match verb {
        "env" => Ok(wasip2::cli::environment::get_environment()),
        "fetch" => exchange(Method::Get, arg, Fields::new(), None)
            .map(|(status, _)| vec![kv("status", status.to_string())]),
        "smuggle" => smuggle(arg),
        _ => return None,
    };
    Some(metadata.map(|m| hook_answer(id, m)))
}

/// Tries every way to set the secret header, then sends what it could.
fn smuggle(url: &str) -> R<Kv> {
    let url = match url {
        "" => format!("{}/v1/whoami", endpoint()?),
        url => url.to_string(),
    };
    let headers = Fields::new();
    let set = headers.append(TOKEN_HEADER, b"forged");
    let listed = Fields::from_list(&[(TOKEN_HEADER.to_ascii_uppercase(), b"forged".to_vec())]);
    let mut out = vec![
        kv("set-header", set.map_or_else(header_error_name, |()| "ok")),
        kv(
            "from-list",
            listed
                .as_ref()
                .map_or_else(|e| header_error_name(*e), |_| "ok"),
        ),
    ];
    let headers = listed.unwrap_or(headers);
    let (status, _) = exchange(Method::Get, &url, headers, None)?;
    out.push(kv("status", status.to_string()));
    Ok(out)
}

// ------------------------------------------------------------------ never made

/// The type of every resource minibox never makes (none of its capabilities streams).
pub enum Never {}

impl infra::GuestCommandStream for Never {
    fn next(&self) -> R<Option<Vec<CommandEvent>>> {
        match *self {}
    }
}

impl infra::GuestPtyStream for Never {
    fn next(&self) -> R<Option<PtyEvent>> {
        match *self {}
    }
}

impl infra::GuestFileReader for Never {
    fn size(&self) -> Option<u64> {
        match *self {}
    }
    fn read(&self, _: u32) -> R<Option<Vec<u8>>> {
        match *self {}
    }
    fn read_into(&self, _: &OutputStream, _: u64) -> R<Option<u64>> {
        match *self {}
    }
}

impl infra::GuestFileWriter for Never {
    fn write(&self, _: Vec<u8>) -> R<()> {
        match *self {}
    }
    fn write_from(&self, _: &InputStream, _: u64) -> R<()> {
        match *self {}
    }
    fn finish(&self) -> R<FileInfo> {
        match *self {}
    }
}

impl infra::GuestBatchWriter for Never {
    fn write(&self, _: Vec<u8>) -> R<()> {
        match *self {}
    }
    fn finish(&self) -> R<Vec<FileInfo>> {
        match *self {}
    }
}

impl infra::GuestCodeStream for Never {
    fn next(&self) -> R<Option<Vec<CodeEvent>>> {
        match *self {}
    }
}

impl infra::GuestWatchStream for Never {
    fn next(&self) -> R<Option<FileEvent>> {
        match *self {}
    }
}

// ------------------------------------------------------------------ the provider

struct Minibox;

impl Guest for Minibox {
    type CommandStream = Never;
    type PtyStream = Never;
    type FileReader = Never;
    type FileWriter = Never;
    type WatchStream = Never;
    type CodeStream = Never;
    type BatchWriter = Never;

    fn describe() -> ProviderInfo {
        ProviderInfo {
            id: "minibox".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            capabilities: CAPABILITIES
                .iter()
                .map(|(name, flag)| Capability {
                    name: name.to_string(),
                    supported: (supported() & *flag).bits() != 0,
                })
                .collect(),
            settings: vec![
                setting(
                    "endpoint",
                    ENDPOINT_ENV,
                    None,
                    false,
                    "Base URL of the minibox server, e.g. http://127.0.0.1:7070",
                ),
                setting(
                    "token",
                    "MINIBOX_TOKEN",
                    None,
                    true,
                    "API token; the host sends it as x-minibox-token",
                ),
                setting(
                    "flavor",
                    "MINIBOX_FLAVOR",
                    Some("plain"),
                    false,
                    "Template of a new box when the request names none",
                ),
            ],
        }
    }

    fn needs() -> ProviderNeeds {
        ProviderNeeds {
            capabilities: supported(),
            origin: vec!["{endpoint}".into()],
            origin_host_any_port: false,
            allow_hosts_env: vec!["MINIBOX_ALLOW_HOSTS".into()],
            secret_headers: vec![SecretHeader {
                setting: "token".into(),
                header: TOKEN_HEADER.into(),
                scope: HeaderScope::Origin,
            }],
            generic_settings: Vec::new(),
        }
    }

    fn reusable() -> bool {
        // Nothing outlives a call: every call reads its settings and talks
        // to the server afresh.
        true
    }

    fn check_settings() -> R<()> {
        Ok(())
    }

    fn undo(token: String) -> R<String> {
        Err(error(
            ErrorCode::InvalidArgument,
            format!("minibox reports no tokens; `{token}` is not one of its own"),
        ))
    }

    fn sandbox_create(req: CreateRequest) -> R<SandboxInfo> {
        let template = req
            .template
            .or_else(|| env_var("MINIBOX_FLAVOR"))
            .unwrap_or_else(|| "plain".into());
        let body = json!({"template": template, "metadata": object(&req.metadata)});
        api(Method::Post, "/v1/boxes", Some(body)).map(|b| sandbox_info(&b))
    }

    fn sandbox_get_info(sandbox_id: String) -> R<SandboxInfo> {
        if let Some(answer) = hook(&sandbox_id) {
            return answer;
        }
        api(Method::Get, &box_path(&sandbox_id)?, None).map(|b| sandbox_info(&b))
    }

    fn sandbox_list(req: ListRequest) -> R<infra::SandboxPage> {
        let boxes = api(Method::Get, "/v1/boxes", None)?;
        let sandboxes = boxes
            .as_array()
            .into_iter()
            .flatten()
            .map(sandbox_info)
            .filter(|b| req.states.is_empty() || req.states.contains(&b.state))
            .filter(|b| req.metadata.iter().all(|pair| b.metadata.contains(pair)))
            .collect();
        Ok(infra::SandboxPage {
            sandboxes,
            next_cursor: None,
        })
    }

    fn sandbox_kill(sandbox_id: String) -> R<()> {
        api(Method::Delete, &box_path(&sandbox_id)?, None).map(drop)
    }

    fn files_exists(sandbox_id: String, path: String) -> R<bool> {
        let url = format!("{}/exists", box_path(&sandbox_id)?);
        let answer = api(Method::Post, &url, Some(json!({"path": path})))?;
        answer["exists"].as_bool().ok_or_else(|| {
            error(
                ErrorCode::Upstream,
                format!("minibox answered {url} without `exists`"),
            )
        })
    }

    fn sandbox_connect(_: String) -> R<SandboxInfo> {
        Err(unsupported("sandbox-connect"))
    }
    fn sandbox_set_timeout(_: String, _: u32) -> R<String> {
        Err(unsupported("sandbox-set-timeout"))
    }
    fn sandbox_pause(_: String) -> R<()> {
        Err(unsupported("sandbox-pause"))
    }
    fn sandbox_resume(_: String) -> R<SandboxInfo> {
        Err(unsupported("sandbox-resume"))
    }
    fn commands_run(_: CommandRequest) -> R<infra::CommandStream> {
        Err(unsupported("commands-run"))
    }
    fn commands_start(_: CommandRequest) -> R<String> {
        Err(unsupported("commands-start"))
    }
    fn commands_run_stdin(_: CommandRequest) -> R<infra::CommandStream> {
        Err(unsupported("commands-run-stdin"))
    }
    fn commands_kill(_: String, _: String) -> R<()> {
        Err(unsupported("commands-kill"))
    }
    fn commands_status(_: String, _: String) -> R<CommandStatus> {
        Err(unsupported("commands-status"))
    }
    fn commands_logs(_: String, _: String, _: Option<u64>) -> R<CommandLogs> {
        Err(unsupported("commands-logs"))
    }
    fn commands_connect(_: String, _: String) -> R<infra::CommandStream> {
        Err(unsupported("commands-connect"))
    }
    fn process_list(_: String) -> R<Vec<ProcessInfo>> {
        Err(unsupported("process-list"))
    }
    fn process_signal(_: String, _: u32, _: String) -> R<()> {
        Err(unsupported("process-signal"))
    }
    fn commands_send_input(_: String, _: String, _: Vec<u8>) -> R<()> {
        Err(unsupported("commands-send-input"))
    }
    fn pty_create(_: PtyRequest) -> R<(String, infra::PtyStream)> {
        Err(unsupported("pty-create"))
    }
    fn pty_send_input(_: String, _: String, _: Vec<u8>) -> R<()> {
        Err(unsupported("pty-send-input"))
    }
    fn pty_resize(_: String, _: String, _: u16, _: u16) -> R<()> {
        Err(unsupported("pty-resize"))
    }
    fn pty_kill(_: String, _: String) -> R<()> {
        Err(unsupported("pty-kill"))
    }
    fn files_read(_: String, _: String, _: Option<ByteRange>) -> R<infra::FileReader> {
        Err(unsupported("files-read"))
    }
    fn files_write(
        _: String,
        _: String,
        _: u64,
        _: Option<u32>,
        _: Option<String>,
        _: Option<String>,
    ) -> R<infra::FileWriter> {
        Err(unsupported("files-write"))
    }
    fn files_write_many(_: String, _: Vec<infra::FileUpload>) -> R<infra::BatchWriter> {
        Err(unsupported("files-write-many"))
    }
    fn files_list(_: String, _: String, _: u32) -> R<Vec<FileInfo>> {
        Err(unsupported("files-list"))
    }
    fn files_get_info(_: String, _: String) -> R<FileInfo> {
        Err(unsupported("files-get-info"))
    }
    fn files_make_dir(_: String, _: String) -> R<bool> {
        Err(unsupported("files-make-dir"))
    }
    fn files_remove(_: String, _: String) -> R<()> {
        Err(unsupported("files-remove"))
    }
    fn files_rename(_: String, _: String, _: String) -> R<FileInfo> {
        Err(unsupported("files-rename"))
    }
    fn files_search(_: String, _: String, _: String) -> R<Vec<FileInfo>> {
        Err(unsupported("files-search"))
    }
    fn ports_url(_: String, _: u16) -> R<PortUrl> {
        Err(unsupported("ports-url"))
    }
    fn files_watch(_: String, _: String, _: bool) -> R<infra::WatchStream> {
        Err(unsupported("files-watch"))
    }
    fn files_upload_url(_: String, _: String) -> R<TransferUrl> {
        Err(unsupported("files-upload-url"))
    }
    fn files_download_url(_: String, _: String) -> R<TransferUrl> {
        Err(unsupported("files-download-url"))
    }
    fn code_run(_: CodeRequest) -> R<CodeResult> {
        Err(unsupported("code-run"))
    }
    fn code_create_context(_: String, _: Option<String>, _: Option<String>) -> R<String> {
        Err(unsupported("code-create-context"))
    }
    fn code_run_events(_: CodeRequest) -> R<infra::CodeStream> {
        Err(unsupported("code-run-events"))
    }
    fn code_list_contexts(_: String, _: Option<String>) -> R<Vec<CodeContext>> {
        Err(unsupported("code-list-contexts"))
    }
    fn code_get_context(_: String, _: String) -> R<CodeContext> {
        Err(unsupported("code-get-context"))
    }
    fn code_remove_context(_: String, _: String) -> R<()> {
        Err(unsupported("code-remove-context"))
    }
    fn code_interrupt(_: String, _: String) -> R<()> {
        Err(unsupported("code-interrupt"))
    }
    fn code_restart_context(_: String, _: String) -> R<CodeContext> {
        Err(unsupported("code-restart-context"))
    }
    fn code_languages(_: String) -> R<Vec<String>> {
        Err(unsupported("code-languages"))
    }
    fn templates_remove(_: String) -> R<()> {
        Err(unsupported("templates-remove"))
    }
    fn sandbox_set_metadata(_: String, _: Vec<(String, String)>, _: Vec<String>) -> R<SandboxInfo> {
        Err(unsupported("sandbox-set-metadata"))
    }
    fn sandbox_metrics(_: String) -> R<infra::MetricsSample> {
        Err(unsupported("sandbox-metrics"))
    }
    fn pty_connect(_: String, _: String, _: Option<u64>) -> R<(String, infra::PtyStream)> {
        Err(unsupported("pty-connect"))
    }
    fn files_chmod(
        _: String,
        _: String,
        _: Option<u32>,
        _: Option<String>,
        _: Option<String>,
    ) -> R<FileInfo> {
        Err(unsupported("files-chmod"))
    }
    fn files_replace(_: String, _: String, _: String, _: String) -> R<u32> {
        Err(unsupported("files-replace"))
    }
    fn templates_list() -> R<Vec<TemplateInfo>> {
        Err(unsupported("templates-list"))
    }
    fn templates_get(_: String) -> R<TemplateInfo> {
        Err(unsupported("templates-get"))
    }
    fn templates_build(_: TemplateBuildRequest) -> R<TemplateInfo> {
        Err(unsupported("templates-build"))
    }
    fn ports_domain(_: String, _: u16, _: String) -> R<PortUrl> {
        Err(unsupported("ports-domain"))
    }
    fn storage_mount(_: MountRequest) -> R<()> {
        Err(unsupported("storage-mount"))
    }
    fn storage_unmount(_: String, _: String) -> R<()> {
        Err(unsupported("storage-unmount"))
    }
    fn network_vpc_attach(_: String, _: String) -> R<()> {
        Err(unsupported("network-vpc-attach"))
    }
    fn network_vpc_detach(_: String, _: String) -> R<()> {
        Err(unsupported("network-vpc-detach"))
    }
    fn sessions_create(_: String, _: Option<String>, _: Option<String>) -> R<String> {
        Err(unsupported("sessions-create"))
    }
    fn sessions_run(_: String, _: String, _: String, _: Option<u64>) -> R<infra::CommandStream> {
        Err(unsupported("sessions-run"))
    }
    fn sessions_close(_: String, _: String) -> R<()> {
        Err(unsupported("sessions-close"))
    }
}

bindings::export!(Minibox with_types_in bindings);
