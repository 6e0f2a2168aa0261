//! EPP/1 methods. The table (`table`, derived from `wit/`) says which methods
//! exist; plain ones are served by the generic codec (`rpc::codec`), those
//! tagged `stream` by the hand-written adapters here, one module per kind of
//! stream.

mod code;
mod commands;
mod files;
mod pty;
pub mod table;
mod watch;

use super::codec::{self, Codec};
use super::errors::RpcError;
use super::outbox::Outbox;
use crate::runtime::bindings::EppError;
use crate::runtime::state::CallState;
use crate::runtime::{Instance, Runtime};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
pub use table::{CAPABILITIES, CAPABILITY_FLAGS, METHODS, Method};
use wasmtime::component::{ResourceAny, Val};

/// Calls an `infra` function on a fresh budget and settles its result.
macro_rules! guest {
    ($inst:expr, $func:ident $(, $arg:expr)* $(,)?) => {{
        let inst = &mut $inst;
        inst.store.data_mut().cpu_ticks = 0;
        let r = inst.provider.abx_epp_infra().$func(&mut inst.store $(, $arg)*).await;
        $crate::rpc::methods::settle(r)
    }};
}
pub(crate) use guest;

/// Calls a method of an exported resource (`$res` is the accessor, e.g. `command_stream`).
macro_rules! guest_res {
    ($inst:expr, $res:ident . $func:ident $(, $arg:expr)* $(,)?) => {{
        let inst = &mut $inst;
        inst.store.data_mut().cpu_ticks = 0;
        let r = inst.provider.abx_epp_infra().$res().$func(&mut inst.store $(, $arg)*).await;
        $crate::rpc::methods::settle(r)
    }};
}
pub(crate) use guest_res;

/// What one request carries through its handler.
pub struct CallCtx {
    pub runtime: Arc<Runtime>,
    /// The runtime's plans for calling functions with JSON params.
    pub codec: Arc<Codec>,
    pub out: Outbox,
    /// The request's id, echoed in notifications as `request_id`.
    pub id: Value,
    pub max_output_bytes: usize,
    /// What this request set running in a sandbox, stopped if the request is abandoned.
    pub started: Mutex<Option<Started>>,
    /// Where long-lived work (terminal output pumps) is spawned.
    pub background: Arc<Mutex<tokio::task::JoinSet<()>>>,
    /// Fired once the answer to this request has been queued.
    pub answered: Mutex<Vec<tokio::sync::oneshot::Sender<()>>>,
    /// When the host stops this request, told to the provider (`request.time-left-ms`).
    pub deadline: Mutex<Option<std::time::Instant>>,
    /// What the provider reported it made during a call that has not returned
    /// (`request.made`): undone if the request is abandoned.
    pub made: Arc<Mutex<Vec<String>>>,
    /// The client's input to this request (`files.write_chunk` notifications),
    /// in arrival order, for a request that takes some (`takes_input`).
    pub input: Mutex<Option<Input>>,
}

/// The notifications a request takes as input, as they arrived.
pub type Input = tokio::sync::mpsc::Receiver<InputItem>;

/// One input notification's params, or why one meant for this request could
/// not be read (a line too long or not JSON, the request's id reused): the
/// request then fails with it instead of waiting for bytes that never come.
pub struct InputItem {
    pub params: Result<Map<String, Value>, RpcError>,
    /// Its share of the request's input budget, given back once it is dropped
    /// (after its bytes are written).
    pub permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl CallCtx {
    pub fn new(
        runtime: Arc<Runtime>,
        codec: Arc<Codec>,
        out: Outbox,
        id: Value,
        max_output_bytes: usize,
        background: Arc<Mutex<tokio::task::JoinSet<()>>>,
    ) -> CallCtx {
        CallCtx {
            runtime,
            codec,
            out,
            id,
            max_output_bytes,
            started: Mutex::new(None),
            background,
            answered: Mutex::new(Vec::new()),
            deadline: Mutex::new(None),
            made: Arc::new(Mutex::new(Vec::new())),
            input: Mutex::new(None),
        }
    }

    /// Gives this request the receiving end of its input (see `takes_input`).
    pub fn with_input(self, input: Option<Input>) -> CallCtx {
        *self.input.lock().expect("lock") = input;
        self
    }

    /// The request's input, taken once by the method that reads it.
    pub fn take_input(&self) -> Option<Input> {
        self.input.lock().expect("lock").take()
    }

    /// A fresh instance serving this request: it knows the request's deadline
    /// and reports what it makes to this context.
    pub async fn instance(&self) -> Result<Instance, RpcError> {
        let mut inst = self
            .runtime
            .instance()
            .await
            .map_err(|e| RpcError::fault(format!("could not start the provider: {e:#}")))?;
        inst.store.data_mut().call = CallState {
            deadline: *self.deadline.lock().expect("lock"),
            made: self.made.clone(),
        };
        Ok(inst)
    }

    /// Resolves once the answer to this request is queued for the client.
    pub fn after_response(&self) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.answered.lock().expect("lock").push(tx);
        rx
    }

    /// Called by the server right after it queued the answer.
    pub fn mark_answered(&self) {
        for tx in self.answered.lock().expect("lock").drain(..) {
            let _ = tx.send(());
        }
    }

    pub async fn notify(&self, method: &str, mut params: Value) {
        if let Value::Object(map) = &mut params {
            map.insert("request_id".into(), self.id.clone());
        }
        self.out.notify(method, params).await
    }

    /// Undoes what a call of `method` that never returned reported it made
    /// (`request.made`), with the method's `undo=` function, each id in a fresh
    /// instance. Returns what was undone, or is left to undo, in words for the
    /// error message; none when there was nothing.
    pub async fn undo(&self, method: &str) -> Option<String> {
        let made = std::mem::take(&mut *self.made.lock().expect("lock"));
        let method = table::find(method)?;
        let Some(undo) = method.undo else {
            if !made.is_empty() {
                tracing::debug!(
                    method = method.name,
                    "the provider reported ids but the method has no undo"
                );
            }
            return None;
        };
        if made.is_empty() {
            return None;
        }
        let wire = codec::names::method(undo);
        let mut done = Vec::new();
        let mut failed = Vec::new();
        for id in made {
            let call = async {
                // Not `self.instance()`: this call is the host's, not the request's.
                let mut inst =
                    self.runtime.instance().await.map_err(|e| {
                        RpcError::fault(format!("could not start the provider: {e:#}"))
                    })?;
                self.codec
                    .call(&mut inst, undo, &[Val::String(id.clone())])
                    .await
            };
            match tokio::time::timeout(Duration::from_secs(30), call).await {
                Ok(Ok(_)) => {
                    tracing::info!(
                        method = method.name,
                        id,
                        undo = wire,
                        "undid what an abandoned request made"
                    );
                    done.push(id);
                }
                Ok(Err(e)) => {
                    tracing::warn!(method = method.name, id, undo = wire, outcome = %e.code,
                        error = %e.wire_message(), "undoing what an abandoned request made failed");
                    failed.push(format!("{id} ({})", e.wire_message()));
                }
                Err(_) => {
                    tracing::warn!(
                        method = method.name,
                        id,
                        undo = wire,
                        "undoing what an abandoned request made timed out"
                    );
                    failed.push(format!("{id} (no answer within 30 s)"));
                }
            }
        }
        let mut words = Vec::new();
        if !done.is_empty() {
            words.push(format!(
                "what it had made was undone ({wire} {})",
                done.join(", ")
            ));
        }
        if !failed.is_empty() {
            words.push(format!(
                "it had made {}, which could not be undone: call {wire} with it yourself",
                failed.join(", ")
            ));
        }
        Some(words.join("; "))
    }

    /// Stops in the sandbox what this request started (after cancel or timeout).
    pub async fn abandon(&self) {
        let Some(Started {
            sandbox_id,
            id,
            kind,
        }) = self.started.lock().expect("lock").take()
        else {
            return;
        };
        let stop = async {
            let mut inst = self.instance().await?;
            match kind {
                Running::Command => guest!(inst, call_commands_kill, &sandbox_id, &id),
                Running::Code => guest!(inst, call_code_interrupt, &sandbox_id, &id),
            }
        };
        let what = kind.what();
        match tokio::time::timeout(Duration::from_secs(10), stop).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(
                sandbox_id,
                id,
                outcome = %e.code,
                error = %e.wire_message(),
                "stopping an abandoned {what} failed"
            ),
            Err(_) => tracing::warn!(sandbox_id, id, "stopping an abandoned {what} timed out"),
        }
    }
}

/// Work a request set running in a sandbox, to stop if the request is abandoned.
pub struct Started {
    pub sandbox_id: String,
    /// The command's id, or the context a code run runs in.
    pub id: String,
    pub kind: Running,
}

/// What kind of work `Started` names, and so how to stop it.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Running {
    /// A command: `commands-kill`.
    Command,
    /// A code run: `code-interrupt` on its context (the context stays).
    Code,
}

impl Running {
    fn what(self) -> &'static str {
        match self {
            Running::Command => "command",
            Running::Code => "code run",
        }
    }
}

/// A provider answer, a provider error, or a trap (a crash or a host limit).
pub fn settle<T>(r: wasmtime::Result<Result<T, EppError>>) -> Result<T, RpcError> {
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.into()),
        Err(trap) => Err(RpcError::from_trap(&trap)),
    }
}

/// Drops an exported resource, ignoring a trap in its destructor (logged).
pub async fn drop_resource(inst: &mut Instance, res: wasmtime::component::ResourceAny) {
    if let Err(e) = res.resource_drop_async(&mut inst.store).await {
        tracing::warn!(error = %e, "the provider failed to release a resource");
    }
}

/// Params of `method` into a typed form (the adapters' own params).
pub fn parse<T: DeserializeOwned>(method: &str, params: Map<String, Value>) -> Result<T, RpcError> {
    serde_json::from_value(Value::Object(params)).map_err(|e| RpcError::invalid_params(method, e))
}

/// Removes an adapter's own boolean param (absent = false).
fn take_flag(method: &str, params: &mut Map<String, Value>, name: &str) -> Result<bool, RpcError> {
    match params.remove(name) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(b),
        Some(other) => Err(RpcError::invalid_params(
            method,
            format!("`{name}` must be true or false, got {other}"),
        )),
    }
}

/// The resource a stream method's function answered.
/// The `sandbox_id` param as sent (checked later by the codec), for the
/// notifications and clean-up of a stream.
fn sandbox_id(params: &Map<String, Value>) -> String {
    params
        .get("sandbox_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn resource(method: &Method, ok: Option<Val>) -> Result<ResourceAny, RpcError> {
    match ok {
        Some(Val::Resource(r)) => Ok(r),
        _ => Err(RpcError::fault(format!(
            "`{}` did not answer a resource",
            method.function
        ))),
    }
}

/// Stream methods answered only when their stream ends: a foreground command
/// (bounded by its own `timeout`, if any) and a watch (until cancelled).
fn runs_until_done(method: &Method, params: &Map<String, Value>) -> bool {
    match method.name {
        "commands.run" => params.get("background").and_then(Value::as_bool) != Some(true),
        "sessions.run" | "files.watch" | "code.run" => true,
        _ => false,
    }
}

/// How long a request may take in total, or none when it runs until its work
/// ends. Derived from the method table: `--call-timeout` (`default`), or the
/// request's own `timeout` (seconds, a `*-ms` param in WIT) plus a minute when
/// the answer waits for that work; a `ready_timeout` param (seconds) is a
/// wait on top of the rest of the work, so it is added to `default`.
pub fn deadline(name: &str, params: &Map<String, Value>, default: Duration) -> Option<Duration> {
    let secs = |key: &str| {
        params
            .get(key)
            .and_then(Value::as_f64)
            .filter(|s| *s > 0.0)
            .map(|s| Duration::from_secs_f64(s.min(1e9)))
    };
    let slack = Duration::from_secs(60);
    let Some(method) = table::find(name) else {
        return Some(default);
    };
    let until_done = runs_until_done(method, params);
    if (until_done || !method.stream)
        && method.seconds.contains(&"timeout")
        && let Some(own) = secs("timeout")
    {
        return Some(own + slack);
    }
    if until_done {
        return None;
    }
    if method.has_param("ready_timeout") {
        return Some(default + secs("ready_timeout").unwrap_or_default());
    }
    Some(default)
}

/// The notification that carries a streamed `files.write`'s content.
pub const WRITE_CHUNK: &str = "files.write_chunk";

/// Whether `method` is a notification that feeds an in-flight request
/// (`request_id` names it) rather than a request of its own.
pub fn is_input(method: &str) -> bool {
    method == WRITE_CHUNK
}

/// Whether this request reads input notifications while it runs: a
/// `files.write` with `stream: true` takes its content as `files.write_chunk`s.
/// The server decides this when it reads the request, so that chunks sent
/// right behind it are never lost.
pub fn takes_input(method: &str, params: &Map<String, Value>) -> bool {
    method == "files.write" && params.get("stream") == Some(&Value::Bool(true))
}

/// The capability a request needs that the provider lacks, if any, and what
/// to call the request in the E8004 message. Streaming a command's or code
/// run's output (`stream: true`) needs `exec.stream` besides the method's own
/// capability; streaming a file's content needs only `files.rw` (every file
/// reader and writer is already chunked).
fn missing_capability(
    method: &Method,
    params: &Map<String, Value>,
    supports: impl Fn(&str) -> bool,
) -> Option<(String, &'static str)> {
    if !supports(method.capability) {
        return Some((method.name.to_string(), method.capability));
    }
    if method.stream
        && method.capability != "files.rw"
        && params.get("stream") == Some(&Value::Bool(true))
        && !supports("exec.stream")
    {
        return Some((
            format!("{} with `stream: true`", method.name),
            "exec.stream",
        ));
    }
    None
}

/// Routes one request.
pub async fn call(
    ctx: &CallCtx,
    name: &str,
    params: Map<String, Value>,
) -> Result<Value, RpcError> {
    if name == "epp.hello" {
        return hello(ctx, name, params).await;
    }
    let Some(method) = table::find(name) else {
        return Err(RpcError::method_not_found(name));
    };
    if let Some((what, capability)) =
        missing_capability(method, &params, |c| ctx.runtime.supports(c))
    {
        return Err(RpcError::unsupported(
            &what,
            capability,
            &ctx.runtime.info.id,
        ));
    }
    if !method.stream {
        return codec::serve(ctx, method, params).await;
    }
    match method.name {
        "commands.run" => commands::run(ctx, method, params).await,
        "code.run" => code::run(ctx, method, params).await,
        "sessions.run" => commands::session_run(ctx, method, params).await,
        "files.read" => files::read(ctx, parse(name, params)?).await,
        "files.write" => files::write(ctx, parse(name, params)?).await,
        "pty.create" => pty::create(ctx, method, params).await,
        "files.watch" => watch::watch(ctx, method, params).await,
        _ => Err(RpcError::fault(format!(
            "{name} is tagged `stream` in wit/ but this host has no adapter for it; \
             add one in host/src/rpc/methods"
        ))),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HelloParams {
    protocol: Option<String>,
    #[allow(dead_code)]
    client: Option<Value>,
    provider_options: Option<Map<String, Value>>,
}

/// Applies an EPP client's `provider_options`: resolved against the
/// provider's settings, checked by the provider itself, then the grant is made
/// again. Answers (setting, key) of what was applied and what was ignored.
async fn configure(
    ctx: &CallCtx,
    method: &str,
    options: &Map<String, Value>,
) -> Result<(Vec<(String, String)>, Vec<String>), RpcError> {
    let framework_key = crate::config::host_env(crate::net::grant::FRAMEWORK_KEY_ENV);
    let resolved = crate::options::resolve(
        &ctx.runtime.info,
        &ctx.runtime.needs,
        options,
        framework_key.as_deref(),
    )
    .map_err(|e| RpcError::invalid_params(method, format!("provider_options: {e}")))?;
    use crate::runtime::Reconfigure;
    match ctx
        .runtime
        .reconfigure(&resolved.overlay, resolved.applied.clone())
        .await
    {
        Ok(()) => {
            let keys: Vec<&str> = resolved.applied.iter().map(|(_, k)| k.as_str()).collect();
            tracing::info!(options = ?keys, ignored = ?resolved.ignored, "provider_options applied");
            Ok((resolved.applied, resolved.ignored))
        }
        Err(Reconfigure::Sealed) => Err(RpcError::conflict(
            "provider_options can only be set before the first call to the provider: this \
             host has already served one with its settings",
        )
        .hint("send epp.hello with provider_options first, or start a new epp-host")),
        Err(Reconfigure::Invalid(e)) => Err(e.into()),
        Err(Reconfigure::Refused(e)) => Err(RpcError::configuration(format!(
            "provider_options cannot be used: {e:#}"
        ))),
    }
}

async fn hello(ctx: &CallCtx, method: &str, params: Map<String, Value>) -> Result<Value, RpcError> {
    let p: HelloParams = parse(method, params)?;
    if let Some(protocol) = p.protocol.filter(|p| p != "EPP/1") {
        return Err(RpcError::invalid_params(
            method,
            format!("this host speaks EPP/1, not {protocol}"),
        ));
    }
    let options = match &p.provider_options {
        Some(options) => Some(configure(ctx, method, options).await?),
        None => None,
    };
    let info = &ctx.runtime.info;
    let capabilities: Map<String, Value> = CAPABILITIES
        .iter()
        .map(|c| (c.to_string(), json!(ctx.runtime.supports(c))))
        .collect();
    let settings: Vec<Value> = info
        .settings
        .iter()
        .map(|s| {
            json!({"name": s.name, "env": s.env, "default": s.default_value,
                   "secret": s.secret, "description": s.description})
        })
        .collect();
    let mut answer = json!({
        "protocol": "EPP/1",
        "provider": {"id": info.id, "version": info.version},
        "host": {"name": "epp-host", "version": env!("CARGO_PKG_VERSION")},
        "capabilities": capabilities,
        "settings": settings,
    });
    if let Some((applied, ignored)) = options {
        let applied: Map<String, Value> = applied
            .into_iter()
            .map(|(setting, key)| (key, Value::String(setting)))
            .collect();
        answer["provider_options"] = json!({"applied": applied, "ignored": ignored});
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(map) => map,
            _ => unreachable!("test params are objects"),
        }
    }

    #[test]
    fn streaming_output_needs_exec_stream() {
        let run = table::find("commands.run").unwrap();
        let no_stream = |c: &str| c != "exec.stream";
        let streamed = params(json!({"sandbox_id": "s", "cmd": "ls", "stream": true}));
        assert_eq!(
            missing_capability(run, &streamed, no_stream),
            Some(("commands.run with `stream: true`".into(), "exec.stream"))
        );
        let collected = params(json!({"sandbox_id": "s", "cmd": "ls"}));
        assert_eq!(missing_capability(run, &collected, no_stream), None);
        assert_eq!(missing_capability(run, &streamed, |_| true), None);
        let session = table::find("sessions.run").unwrap();
        assert_eq!(
            missing_capability(session, &streamed, no_stream).map(|m| m.1),
            Some("exec.stream")
        );
        // The method's own capability is checked first.
        let no_exec = |c: &str| c != "exec.run" && c != "exec.stream";
        assert_eq!(
            missing_capability(run, &streamed, no_exec),
            Some(("commands.run".into(), "exec.run"))
        );
        // A plain method's `stream` field (none has one today) would not count.
        let info = table::find("sandbox.get_info").unwrap();
        assert_eq!(missing_capability(info, &streamed, no_stream), None);
        // A file's content streams through the reader and writer that every
        // files.rw provider has.
        let read = table::find("files.read").unwrap();
        assert_eq!(missing_capability(read, &streamed, no_stream), None);
        let no_files = |c: &str| c != "files.rw";
        assert_eq!(
            missing_capability(read, &streamed, no_files),
            Some(("files.read".into(), "files.rw"))
        );
    }

    #[test]
    fn only_a_streamed_write_takes_input() {
        let streamed = params(json!({"sandbox_id": "s", "path": "/a", "size": 1, "stream": true}));
        assert!(takes_input("files.write", &streamed));
        assert!(!takes_input("files.read", &streamed));
        assert!(!takes_input("commands.run", &streamed));
        let whole = params(json!({"sandbox_id": "s", "path": "/a", "content": "x"}));
        assert!(!takes_input("files.write", &whole));
        let odd = params(json!({"sandbox_id": "s", "path": "/a", "stream": "yes"}));
        assert!(!takes_input("files.write", &odd));
        assert!(is_input(WRITE_CHUNK));
        assert!(!is_input("epp.cancel"));
    }

    #[test]
    fn deadlines_follow_the_table() {
        let default = Duration::from_secs(300);
        let at = |name: &str, p: Value| deadline(name, &params(p), default);
        let secs = Duration::from_secs;
        // Foreground commands: their own timeout plus a minute, or none.
        assert_eq!(at("commands.run", json!({"timeout": 5})), Some(secs(65)));
        assert_eq!(at("commands.run", json!({})), None);
        assert_eq!(
            at("sessions.run", json!({"timeout": 0.5})),
            Some(Duration::from_millis(60_500))
        );
        // A background command answers at once: its timeout is the command's.
        assert_eq!(
            at("commands.run", json!({"background": true, "timeout": 5})),
            Some(default)
        );
        assert_eq!(at("files.watch", json!({})), None);
        assert_eq!(at("files.read", json!({})), Some(default));
        assert_eq!(at("pty.create", json!({})), Some(default));
        // A plain method with a timeout of its own.
        assert_eq!(at("code.run", json!({"timeout": 1000})), Some(secs(1060)));
        // ready_timeout is a wait on top of the server's part (the create
        // itself, with the image pull), which --call-timeout bounds; `timeout`
        // of sandbox.create is a lifetime.
        assert_eq!(
            at("sandbox.create", json!({"timeout": 3600})),
            Some(default)
        );
        assert_eq!(
            at("sandbox.create", json!({"ready_timeout": 600})),
            Some(secs(900))
        );
        assert_eq!(
            at("sandbox.create", json!({"ready_timeout": 10})),
            Some(secs(310))
        );
        assert_eq!(
            deadline("sandbox.create", &Map::new(), secs(10)),
            Some(secs(10))
        );
        assert_eq!(at("sandbox.get_info", json!({})), Some(default));
        assert_eq!(at("no.such", json!({})), Some(default));
        assert_eq!(at("commands.run", json!({"timeout": "5"})), None);
    }
}
