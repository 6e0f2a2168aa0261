//! A test-only EPP/1 provider for epp-host's integration tests (`host/tests/`).
//!
//! It does nothing useful: each call does exactly what its arguments say, so a
//! test can make a guest misbehave in one precise way and watch how the host copes.
//!
//! `sandbox-get-info(id)` reads `id` as an instruction:
//!
//! | instruction | what the probe does |
//! |---|---|
//! | `echo TEXT` | answers a sandbox-info whose `sandbox-id` is TEXT |
//! | `env` | fails (`upstream`) with its whole environment as the message, one `NAME=value` a line |
//! | `fetch URL` | GET with `wasi:http`; metadata `status`, `location`, `body`, or `error` = the `error-code` it got (`HTTP-request-denied`, …) |
//! | `fetch-with-key URL` | as `fetch`, after trying to set its secret header `X-PROBE-TOKEN: guest-forged` itself (metadata `set-header`, `from-list`) |
//! | `ws URL` | opens a WebSocket (with a forged key header), sends `hello`, answers the first reply (metadata `reply`) or `error` and `message` |
//! | `memo` | put, get, forget, get again: metadata `after-put`, `after-forget` |
//! | `memo-get KEY` | metadata `value`, when the memo holds KEY |
//! | `begin KEY THEN` | puts `started:KEY` in the memo, then does the instruction THEN: a test waits for that key (`memo-get started:KEY`) to know the call has begun |
//! | `sleep MS` | blocks on a monotonic-clock pollable for MS milliseconds |
//! | `spin` | loops forever |
//! | `alloc` | allocates memory without bound |
//! | `trap` | panics |
//! | `garbage` | answers strings full of control characters, quotes, NULs and non-ASCII, a 1 MiB string and 5000 metadata pairs (duplicate keys included) |
//! | `bad-utf8` | answers a `string` that is not UTF-8 (breaks the canonical ABI on purpose) |
//! | `huge MIB` | answers a sandbox id of MIB MiB |
//! | `memo-flood N SIZE` | puts N memo entries of SIZE bytes each under fresh keys |
//! | `time-left` | answers a sandbox-info whose `sandbox-id` is the host's `request.time-left-ms`, or `none` |
//!
//! Tokens (`request.made`, `request.settled`, `undo`):
//!
//! | token | reported by | settled by | `undo(token)` |
//! |---|---|---|---|
//! | `sandbox:ID` | `sandbox-create` with template `made ID THEN` | the create itself when THEN is `fail` | records `undone:ID` in the memo, answers `killed sandbox ID` |
//! | `stuck:ID` | `sandbox-create` with template `stuck ID THEN` | the same | fails (`upstream`): `sandbox ID could not be killed; kill it with sandbox.kill ID` |
//! | `command:ID` | a command stream, at `started(ID)` | the stream, at `exited` | records `killed:ID` in the memo, answers `killed command ID` |
//!
//! Any other token fails `undo` with `invalid-argument`.
//!
//! `sandbox-create` with template `made ID THEN` (or `stuck ID THEN`): reports its
//! token, puts `started:ID` in the memo, then does the instruction THEN (`sleep MS`,
//! `spin`, `trap`, `echo ID`, …), or for `fail` cleans up after itself: settles its
//! token and fails (`upstream`), so there is nothing for the host to undo.
//!
//! `commands-run` with `cmd` = `stream N DELAY_MS`: `started("cmd-" + sandbox-id)`, then N
//! stdout events `line I\n` DELAY_MS apart, then `exited(0)`; `empty-batches`: batches with
//! no event, forever (the contract says at least one); `after-exit`: one batch of
//! `started`, `exited(3)`, `stdout("late\n")`, `exited(4)`, then more output instead of none.
//! A stream reports `command:ID` when it hands out `started` and settles it with the first
//! `exited`, so a command whose request fails before its exit is stopped through `undo`.
//! `commands-kill` records `killed:COMMAND_ID` in the memo as `undo` does. `files-read` with
//! `path` = `chunks N SIZE`: N chunks of SIZE bytes, the first all `a`, the next all `b`,
//! and so on; `empty-chunks`: empty chunks forever; `liar N SIZE`: says its size is 1
//! byte, then delivers N chunks of SIZE bytes.
//!
//! `describe` declares all 18 capabilities supported, and three settings:
//! `base_url` (`EPP_PROBE_BASE_URL`), `label` (`EPP_PROBE_LABEL`) and the secret
//! `token` (`EPP_PROBE_TOKEN`, `EPP_PROBE_TOKEN_ALT`). `needs` asks for the origin
//! `{base_url}` (any port on its host), more hosts from `EPP_PROBE_ALLOW_HOSTS`,
//! and `token` sent by the host as `X-PROBE-TOKEN` to the origin only: the same
//! shape as a real provider's, so the host's tests exercise the generic grant.
//! Every function not listed above fails with `unsupported`.

mod bindings;

use bindings::abx::epp::types::{
    Capabilities, Capability, EppError, ErrorCode, HeaderScope, ProviderInfo, ProviderNeeds,
    SecretHeader, Setting,
};
use bindings::abx::epp::{memo, request, websocket};
use bindings::exports::abx::epp::infra::{
    self, ByteRange, CodeContext, CodeEvent, CodeRequest, CodeResult, CommandEvent, CommandExit,
    CommandLogs, CommandRequest, CommandStatus, CreateRequest, FileEvent, FileInfo, Guest,
    ListRequest, MountRequest, PortUrl, ProcessInfo, PtyEvent, PtyRequest, SandboxInfo,
    TemplateBuildRequest, TemplateInfo, TransferUrl,
};
use std::cell::Cell;
use std::io::Read;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode as HttpError, Fields, HeaderError, Method, OutgoingRequest, Scheme,
};
use wasip2::io::streams::{InputStream, OutputStream, StreamError};

/// Every capability, by wire name and flag: the probe claims them all.
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

/// The probe's secret header: the host owns it, so the guest must never be able to set it.
const KEY_HEADER: &str = "X-PROBE-TOKEN";

fn setting(name: &str, env: &[&str], secret: bool, description: &str) -> Setting {
    Setting {
        name: name.into(),
        env: env.iter().map(|v| v.to_string()).collect(),
        default_value: None,
        secret,
        description: description.into(),
    }
}

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
        format!("the probe does not implement {function}"),
    )
}

fn kv(key: &str, value: impl Into<String>) -> (String, String) {
    (key.to_string(), value.into())
}

/// An instruction's result, carried in a sandbox-info's metadata.
fn answer(sandbox_id: &str, metadata: Kv) -> SandboxInfo {
    SandboxInfo {
        sandbox_id: sandbox_id.to_string(),
        template: "probe".into(),
        image: None,
        state: "ok".into(),
        metadata,
        created_at: None,
        expires_at: None,
    }
}

fn number(what: &str, text: &str) -> R<u64> {
    text.trim().parse().map_err(|_| {
        error(
            ErrorCode::InvalidArgument,
            format!("{what}: `{text}` is not a number"),
        )
    })
}

/// Puts `key` in the memo (value `1`, for ten minutes): a mark a test reads back.
fn put_flag(key: &str) {
    memo::put(key, "1", 600_000);
}

fn sleep_ms(ms: u64) {
    wasip2::clocks::monotonic_clock::subscribe_duration(ms.saturating_mul(1_000_000)).block();
}

/// Calls of `count` this instance has served.
static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn instruction(id: &str) -> R<SandboxInfo> {
    let (verb, arg) = id.split_once(' ').unwrap_or((id, ""));
    match verb {
        "echo" => Ok(answer(arg, Vec::new())),
        // State that lives as long as the instance: 1 on a fresh one.
        "count" => {
            let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            Ok(answer(&n.to_string(), Vec::new()))
        }
        // Leaves a host resource (a pollable) behind and answers.
        "leak" => {
            std::mem::forget(wasip2::clocks::monotonic_clock::subscribe_duration(1));
            Ok(answer(id, Vec::new()))
        }
        "env" => {
            let dump: String = wasip2::cli::environment::get_environment()
                .into_iter()
                .map(|(name, value)| format!("{name}={value}\n"))
                .collect();
            Err(error(ErrorCode::Upstream, dump))
        }
        "fetch" => Ok(answer(id, fetch(arg, false, Method::Get))),
        "fetch-with-key" => Ok(answer(id, fetch(arg, true, Method::Get))),
        "post" => Ok(answer(id, fetch(arg, false, Method::Post))),
        "ws" => Ok(answer(id, ws(arg))),
        "memo" => Ok(answer(id, memo_round_trip())),
        "memo-get" => Ok(answer(
            id,
            memo::get(arg)
                .map(|v| vec![kv("value", v)])
                .unwrap_or_default(),
        )),
        "begin" => {
            let (key, then) = arg.split_once(' ').unwrap_or((arg, ""));
            put_flag(&format!("started:{key}"));
            instruction(then)
        }
        "sleep" => {
            sleep_ms(number("sleep", arg)?);
            Ok(answer(id, Vec::new()))
        }
        "spin" => spin(),
        "alloc" => alloc(),
        "trap" => panic!("probe: trap requested"),
        "garbage" => Ok(garbage()),
        "bad-utf8" => {
            // SAFETY: deliberately not UTF-8: the string is only handed to the
            // canonical ABI, which must refuse it (the point of this instruction).
            let id = unsafe { String::from_utf8_unchecked(vec![b'o', b'k', 0xff, 0xfe, 0xc0]) };
            Ok(answer(&id, Vec::new()))
        }
        "huge" => {
            let mib = number("huge", arg)? as usize;
            Ok(answer(&"x".repeat(mib << 20), Vec::new()))
        }
        "time-left" => Ok(answer(
            &request::time_left_ms().map_or("none".to_string(), |ms| ms.to_string()),
            Vec::new(),
        )),
        "memo-flood" => {
            let (n, size) = arg.split_once(' ').unwrap_or((arg, "0"));
            let (n, size) = (number("n", n)?, number("size", size)? as usize);
            let value = "v".repeat(size);
            let salt = wasip2::random::random::get_random_u64();
            for i in 0..n {
                memo::put(&format!("flood-{salt:x}-{i}"), &value, 3_600_000);
            }
            Ok(answer(id, Vec::new()))
        }
        _ => Err(error(
            ErrorCode::InvalidArgument,
            format!("unknown probe instruction `{id}`"),
        )),
    }
}

/// Everything awkward a JSON encoder must escape, and a lot of it.
fn garbage() -> SandboxInfo {
    let mut nasty: String = (0u8..0x20).map(char::from).collect();
    nasty.push_str("\"\\/\u{7f}\u{2028}\u{2029}\u{feff}\u{fffd}é中😀</script>");
    let mut metadata: Kv = (0..5000)
        .map(|i| kv(&format!("k{}", i % 2500), format!("{nasty}{i}")))
        .collect();
    metadata.push(kv("", ""));
    metadata.push(kv(&nasty, "x".repeat(1 << 20)));
    SandboxInfo {
        sandbox_id: nasty.clone(),
        template: "\0".into(),
        image: Some(nasty.clone()),
        state: "\u{0}\u{1}".into(),
        metadata,
        created_at: Some("not a time".into()),
        expires_at: Some(nasty),
    }
}

fn spin() -> ! {
    let mut n = 0u64;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

fn alloc() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(vec![0x5a; 1 << 20]);
        std::hint::black_box(&hoard);
    }
}

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

fn header_error_name(e: HeaderError) -> &'static str {
    match e {
        HeaderError::Forbidden => "forbidden",
        HeaderError::InvalidSyntax => "invalid-syntax",
        HeaderError::Immutable => "immutable",
    }
}

/// One request without a body; never follows redirects (a test follows them
/// by asking again).
fn fetch(url: &str, forge_key: bool, method: Method) -> Kv {
    let mut out = Vec::new();
    let Some((scheme, rest)) = url.split_once("://") else {
        return vec![kv("error", "not-a-url")];
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    let headers = Fields::new();
    if forge_key {
        let outcome = headers.append(KEY_HEADER, b"guest-forged");
        out.push(kv(
            "set-header",
            outcome.map_or_else(header_error_name, |()| "ok"),
        ));
        let list =
            Fields::from_list(&[(KEY_HEADER.to_ascii_lowercase(), b"guest-forged".to_vec())]);
        out.push(kv(
            "from-list",
            list.map_or_else(header_error_name, |_| "ok"),
        ));
    }
    let request = OutgoingRequest::new(headers);
    if request.set_method(&method).is_err() {
        out.push(kv("error", "invalid-method"));
        return out;
    }
    let scheme = if scheme == "https" {
        Scheme::Https
    } else {
        Scheme::Http
    };
    if request.set_scheme(Some(&scheme)).is_err()
        || request.set_authority(Some(authority)).is_err()
        || request.set_path_with_query(Some(path)).is_err()
    {
        out.push(kv("error", "invalid-url"));
        return out;
    }
    let response = outgoing_handler::handle(request, None).and_then(|future| {
        future.subscribe().block();
        match future.get() {
            Some(Ok(result)) => result,
            _ => Err(HttpError::InternalError(Some("response lost".into()))),
        }
    });
    match response {
        Err(e) => out.push(kv("error", http_error_name(&e))),
        Ok(response) => {
            out.push(kv("status", response.status().to_string()));
            for location in response.headers().get("location") {
                out.push(kv("location", String::from_utf8_lossy(&location)));
            }
            // Children before parents: the stream, then the body, then the response.
            let mut body = Vec::new();
            let incoming = response.consume();
            if let Ok(incoming) = &incoming
                && let Ok(mut stream) = incoming.stream()
                && let Err(e) = stream.read_to_end(&mut body)
            {
                out.push(kv("body-error", e.to_string()));
            }
            out.push(kv("body", String::from_utf8_lossy(&body)));
        }
    }
    out
}

fn ws(url: &str) -> Kv {
    let key = format!("probe-{:016x}", wasip2::random::random::get_random_u64());
    let forged = [(KEY_HEADER.to_string(), "guest-forged".to_string())];
    if let Err(e) = websocket::connect(&key, url, &forged) {
        return vec![
            kv("error", format!("{:?}", e.code)),
            kv("message", e.message),
        ];
    }
    let mut out = vec![kv("connect", "ok")];
    let sent = websocket::send(&key, &websocket::Message::Text("hello".into()));
    match sent.and_then(|()| websocket::receive(&key)) {
        Ok(Some(websocket::Message::Text(text))) => out.push(kv("reply", text)),
        other => out.push(kv("reply-error", format!("{other:?}"))),
    }
    websocket::close(&key, 1000, "probe done");
    out
}

fn memo_round_trip() -> Kv {
    let absent = || "absent".to_string();
    memo::put("probe-memo", "remembered", 60_000);
    let after_put = memo::get("probe-memo").unwrap_or_else(absent);
    memo::forget("probe-memo");
    let after_forget = memo::get("probe-memo").unwrap_or_else(absent);
    vec![kv("after-put", after_put), kv("after-forget", after_forget)]
}

/// How a probe command misbehaves (or not).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lines,
    EmptyBatches,
    AfterExit,
}

/// The token of a command: reported at `started`, settled at `exited`.
fn command_token(id: &str) -> String {
    format!("command:{id}")
}

/// `stream N DELAY_MS`: a command that prints N lines, DELAY_MS apart.
pub struct CommandStream {
    kind: Kind,
    id: String,
    lines: u64,
    delay_ms: u64,
    /// 0 = `started` not sent yet; then the number of the next line.
    next: Cell<u64>,
    done: Cell<bool>,
    /// Whether its token was settled (at its first `exited`).
    settled: Cell<bool>,
}

impl infra::GuestCommandStream for CommandStream {
    fn next(&self) -> R<Option<Vec<CommandEvent>>> {
        let events = self.events()?;
        // What a provider does with a real command: a token once its id is
        // handed out, settled once it has exited (the first exit counts).
        for event in events.iter().flatten() {
            match event {
                CommandEvent::Started(id) => request::made(&command_token(id)),
                CommandEvent::Exited(_) if !self.settled.replace(true) => {
                    request::settled(&command_token(&self.id))
                }
                _ => {}
            }
        }
        Ok(events)
    }
}

impl CommandStream {
    /// The next batch of events, as the instruction says.
    fn events(&self) -> R<Option<Vec<CommandEvent>>> {
        match self.kind {
            Kind::Lines => {}
            Kind::EmptyBatches => return Ok(Some(Vec::new())),
            Kind::AfterExit => {
                let first = self.next.get() == 0;
                self.next.set(1);
                return Ok(Some(if first {
                    vec![
                        CommandEvent::Started(self.id.clone()),
                        CommandEvent::Exited(CommandExit {
                            exit_code: 3,
                            error: None,
                        }),
                        CommandEvent::Stdout("late\n".into()),
                        CommandEvent::Exited(CommandExit {
                            exit_code: 4,
                            error: None,
                        }),
                    ]
                } else {
                    vec![CommandEvent::Stdout("later\n".into())]
                }));
            }
        }
        if self.done.get() {
            return Ok(None);
        }
        let i = self.next.get();
        self.next.set(i + 1);
        if i == 0 {
            return Ok(Some(vec![CommandEvent::Started(self.id.clone())]));
        }
        if i > self.lines {
            self.done.set(true);
            return Ok(Some(vec![CommandEvent::Exited(CommandExit {
                exit_code: 0,
                error: None,
            })]));
        }
        sleep_ms(self.delay_ms);
        Ok(Some(vec![CommandEvent::Stdout(format!("line {i}\n"))]))
    }
}

/// `chunks N SIZE`: N chunks of SIZE bytes (`claimed`: the size it admits to;
/// `empty`: only ever empty chunks).
pub struct FileReader {
    chunk: u64,
    total: u64,
    claimed: Option<u64>,
    empty: bool,
    overfill: bool,
    offset: Cell<u64>,
}

impl infra::GuestFileReader for FileReader {
    fn size(&self) -> Option<u64> {
        self.claimed
    }

    fn read(&self, max: u32) -> R<Option<Vec<u8>>> {
        if self.empty {
            return Ok(Some(Vec::new()));
        }
        let offset = self.offset.get();
        if offset >= self.total {
            return Ok(None);
        }
        let n = (self.chunk - offset % self.chunk).min(u64::from(max).max(1));
        let byte = b'a' + ((offset / self.chunk) % 26) as u8;
        self.offset.set(offset + n);
        Ok(Some(vec![byte; n as usize]))
    }

    fn read_into(&self, sink: &OutputStream, max: u64) -> R<Option<u64>> {
        let refused = |e: StreamError| {
            let what = match e {
                StreamError::LastOperationFailed(e) => e.to_debug_string(),
                StreamError::Closed => "closed".into(),
            };
            error(ErrorCode::Upstream, format!("the sink refused: {what}"))
        };
        if self.overfill {
            sink.write(&vec![b'x'; max as usize + 1]).map_err(refused)?;
            return Ok(Some(max + 1));
        }
        let Some(bytes) = self.read(max.min(u64::from(u32::MAX)) as u32)? else {
            return Ok(None);
        };
        if !bytes.is_empty() {
            sink.check_write().map_err(refused)?;
            sink.write(&bytes).map_err(refused)?;
        }
        Ok(Some(bytes.len() as u64))
    }
}

/// Never made: the probe has no terminals.
pub struct PtyStream;

impl infra::GuestPtyStream for PtyStream {
    fn next(&self) -> R<Option<PtyEvent>> {
        Err(unsupported("pty-stream.next"))
    }
}

/// Never made: the probe does not write files.
pub struct FileWriter;

impl infra::GuestFileWriter for FileWriter {
    fn write(&self, _: Vec<u8>) -> R<()> {
        Err(unsupported("file-writer.write"))
    }

    fn write_from(&self, _: &InputStream, _: u64) -> R<()> {
        Err(unsupported("file-writer.write-from"))
    }

    fn finish(&self) -> R<FileInfo> {
        Err(unsupported("file-writer.finish"))
    }
}

/// Never made: the probe does not watch files.
pub struct WatchStream;

impl infra::GuestWatchStream for WatchStream {
    fn next(&self) -> R<Option<FileEvent>> {
        Err(unsupported("watch-stream.next"))
    }
}

/// Never made: the probe does not write files, one or many.
pub enum NoBatch {}

impl infra::GuestBatchWriter for NoBatch {
    fn write(&self, _: Vec<u8>) -> R<()> {
        match *self {}
    }

    fn finish(&self) -> R<Vec<FileInfo>> {
        match *self {}
    }
}

/// The probe never makes a code stream (it has no code.interpret).
pub enum NoCode {}

impl infra::GuestCodeStream for NoCode {
    fn next(&self) -> R<Option<Vec<CodeEvent>>> {
        match *self {}
    }
}

struct Probe;

impl Guest for Probe {
    type CommandStream = CommandStream;
    type PtyStream = PtyStream;
    type FileReader = FileReader;
    type FileWriter = FileWriter;
    type WatchStream = WatchStream;
    type CodeStream = NoCode;
    type BatchWriter = NoBatch;

    fn describe() -> ProviderInfo {
        ProviderInfo {
            id: "probe".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            capabilities: CAPABILITIES
                .iter()
                .map(|(name, _)| Capability {
                    name: name.to_string(),
                    supported: true,
                })
                .collect(),
            settings: vec![
                setting(
                    "base_url",
                    &["EPP_PROBE_BASE_URL"],
                    false,
                    "The server the probe's tests aim at.",
                ),
                setting("label", &["EPP_PROBE_LABEL"], false, "Any text."),
                setting(
                    "token",
                    &["EPP_PROBE_TOKEN", "EPP_PROBE_TOKEN_ALT"],
                    true,
                    "Sent by the host as X-PROBE-TOKEN to the origin.",
                ),
            ],
        }
    }

    fn needs() -> ProviderNeeds {
        ProviderNeeds {
            capabilities: CAPABILITIES
                .iter()
                .fold(Capabilities::empty(), |all, (_, flag)| all | *flag),
            origin: vec!["{base_url}".into()],
            origin_host_any_port: true,
            allow_hosts_env: vec!["EPP_PROBE_ALLOW_HOSTS".into()],
            secret_headers: vec![SecretHeader {
                setting: "token".into(),
                header: KEY_HEADER.into(),
                scope: HeaderScope::Origin,
            }],
            generic_settings: vec![
                ("sandbox_base_url".into(), "base_url".into()),
                ("sandbox_api_key".into(), "token".into()),
            ],
        }
    }

    fn reusable() -> bool {
        // `count`'s static counter outlives a call (so that tests can see
        // which instance served one): an honest probe says no.
        false
    }

    fn check_settings() -> R<()> {
        // A label is any text but `invalid`, so a test can make a bad setting.
        let label = wasip2::cli::environment::get_environment()
            .into_iter()
            .find(|(name, _)| name == "EPP_PROBE_LABEL")
            .map(|(_, value)| value);
        match label.as_deref() {
            Some("invalid") => {
                let given = request::provider_options()
                    .into_iter()
                    .find(|(setting, _)| setting == "label")
                    .map(|(_, key)| format!("provider_options.{key}"))
                    .unwrap_or_else(|| "EPP_PROBE_LABEL".into());
                Err(error(
                    ErrorCode::Configuration,
                    format!("{given}: `invalid` is not a label"),
                ))
            }
            _ => Ok(()),
        }
    }

    fn sandbox_get_info(sandbox_id: String) -> R<SandboxInfo> {
        instruction(&sandbox_id)
    }

    fn commands_run(req: CommandRequest) -> R<infra::CommandStream> {
        let words: Vec<&str> = req.cmd.split_whitespace().collect();
        let (kind, lines, delay_ms) = match words[..] {
            ["stream", lines, delay_ms] => (
                Kind::Lines,
                number("lines", lines)?,
                number("delay", delay_ms)?,
            ),
            ["empty-batches"] => (Kind::EmptyBatches, 0, 0),
            ["after-exit"] => (Kind::AfterExit, 0, 0),
            _ => {
                return Err(error(
                    ErrorCode::InvalidArgument,
                    "the probe runs `stream N DELAY_MS`, `empty-batches` or `after-exit` only",
                ));
            }
        };
        Ok(infra::CommandStream::new(CommandStream {
            kind,
            id: format!("cmd-{}", req.sandbox_id),
            lines,
            delay_ms,
            next: Cell::new(0),
            done: Cell::new(false),
            settled: Cell::new(false),
        }))
    }

    fn commands_kill(_: String, command_id: String) -> R<()> {
        put_flag(&format!("killed:{command_id}"));
        Ok(())
    }

    fn files_read(_: String, path: String, _: Option<ByteRange>) -> R<infra::FileReader> {
        let words: Vec<&str> = path.split_whitespace().collect();
        let (kind, count, size) = match words[..] {
            [kind @ ("chunks" | "liar"), count, size] => {
                (kind, number("count", count)?, number("size", size)?.max(1))
            }
            [kind @ ("empty-chunks" | "overfill")] => (kind, 0, 1),
            _ => {
                return Err(error(
                    ErrorCode::NotFound,
                    "the probe reads `chunks N SIZE`, `liar N SIZE`, `empty-chunks` or `overfill` only",
                ));
            }
        };
        let total = count * size;
        Ok(infra::FileReader::new(FileReader {
            chunk: size,
            total,
            claimed: match kind {
                "chunks" => Some(total),
                "liar" => Some(1),
                _ => None,
            },
            empty: kind == "empty-chunks",
            overfill: kind == "overfill",
            offset: Cell::new(0),
        }))
    }

    fn sandbox_create(req: CreateRequest) -> R<SandboxInfo> {
        let template = req.template.unwrap_or_default();
        let (kind, rest) = template.split_once(' ').unwrap_or((&template, ""));
        if !matches!(kind, "made" | "stuck") {
            return Err(unsupported("sandbox-create"));
        }
        let (id, then) = rest.split_once(' ').unwrap_or((rest, "fail"));
        let token = format!("{}:{id}", if kind == "made" { "sandbox" } else { "stuck" });
        request::made(&token);
        put_flag(&format!("started:{id}"));
        match then {
            "fail" => {
                // Failed on its own: the provider cleans up itself, so the host
                // has nothing to undo.
                request::settled(&token);
                Err(error(ErrorCode::Upstream, format!("probe: {id} failed")))
            }
            then => instruction(then),
        }
    }

    fn undo(token: String) -> R<String> {
        match token.split_once(':') {
            Some(("sandbox", id)) => {
                put_flag(&format!("undone:{id}"));
                Ok(format!("killed sandbox {id}"))
            }
            Some(("stuck", id)) => Err(error(
                ErrorCode::Upstream,
                format!("sandbox {id} could not be killed; kill it with sandbox.kill {id}"),
            )),
            Some(("command", id)) => {
                put_flag(&format!("killed:{id}"));
                Ok(format!("killed command {id}"))
            }
            _ => Err(error(
                ErrorCode::InvalidArgument,
                format!("probe: `{token}` is not a token of the probe's"),
            )),
        }
    }
    fn sandbox_connect(_: String) -> R<SandboxInfo> {
        Err(unsupported("sandbox-connect"))
    }
    fn sandbox_list(_: ListRequest) -> R<infra::SandboxPage> {
        Err(unsupported("sandbox-list"))
    }
    fn sandbox_kill(_: String) -> R<()> {
        Err(unsupported("sandbox-kill"))
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
    fn commands_start(_: CommandRequest) -> R<String> {
        Err(unsupported("commands-start"))
    }
    fn commands_run_stdin(_: CommandRequest) -> R<infra::CommandStream> {
        Err(unsupported("commands-run-stdin"))
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
    fn files_exists(_: String, _: String) -> R<bool> {
        Err(unsupported("files-exists"))
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

bindings::export!(Probe with_types_in bindings);
