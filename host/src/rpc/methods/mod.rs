//! EPP/1 methods: JSON params in, a typed call into the provider, JSON out.
//! One module per capability; the table below is the single list of methods.

mod commands;
mod extra;
mod files;
mod ports;
mod process;
mod pty;
mod sandbox;

use super::errors::RpcError;
use super::outbox::Outbox;
use crate::runtime::bindings::EppError;
use crate::runtime::limits::LimitHit;
use crate::runtime::{Instance, Runtime};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Every method and the capability it belongs to (docs/epp-1.md §3).
pub const METHODS: &[(&str, &str)] = &[
    ("sandbox.create", "sandbox.lifecycle"),
    ("sandbox.connect", "sandbox.lifecycle"),
    ("sandbox.get_info", "sandbox.lifecycle"),
    ("sandbox.list", "sandbox.lifecycle"),
    ("sandbox.kill", "sandbox.lifecycle"),
    ("sandbox.set_timeout", "sandbox.timeout"),
    ("sandbox.pause", "sandbox.pause"),
    ("sandbox.resume", "sandbox.pause"),
    ("commands.run", "exec.run"),
    ("commands.kill", "exec.run"),
    ("commands.status", "exec.run"),
    ("commands.logs", "exec.run"),
    ("process.list", "process.manage"),
    ("process.signal", "process.manage"),
    ("commands.send_input", "process.manage"),
    ("pty.create", "pty"),
    ("pty.send_input", "pty"),
    ("pty.resize", "pty"),
    ("pty.kill", "pty"),
    ("files.read", "files.rw"),
    ("files.write", "files.rw"),
    ("files.list", "files.rw"),
    ("files.get_info", "files.rw"),
    ("files.exists", "files.rw"),
    ("files.make_dir", "files.rw"),
    ("files.remove", "files.rw"),
    ("files.rename", "files.rw"),
    ("ports.url", "ports.url"),
    ("files.watch", "files.watch"),
    ("files.upload_url", "files.transfer"),
    ("files.download_url", "files.transfer"),
    ("code.run", "code.interpret"),
    ("code.create_context", "code.interpret"),
    ("templates.list", "templates.read"),
    ("templates.get", "templates.read"),
    ("templates.build", "templates.build"),
    ("ports.domain", "ports.domain"),
    ("storage.mount", "storage.mount"),
    ("storage.unmount", "storage.mount"),
    ("network.vpc_attach", "network.vpc"),
    ("network.vpc_detach", "network.vpc"),
    ("sessions.create", "sessions"),
    ("sessions.run", "sessions"),
    ("sessions.close", "sessions"),
];

/// The 18 EPP/1 capability names, in documentation order.
pub const CAPABILITIES: &[&str] = &[
    "sandbox.lifecycle",
    "sandbox.timeout",
    "sandbox.pause",
    "exec.run",
    "exec.stream",
    "process.manage",
    "pty",
    "files.rw",
    "ports.url",
    "files.watch",
    "files.transfer",
    "code.interpret",
    "templates.read",
    "templates.build",
    "ports.domain",
    "storage.mount",
    "network.vpc",
    "sessions",
];

pub fn capability_of(method: &str) -> Option<&'static str> {
    METHODS.iter().find(|(m, _)| *m == method).map(|(_, c)| *c)
}

/// What one request carries through its handler.
pub struct CallCtx {
    pub runtime: Arc<Runtime>,
    pub out: Outbox,
    /// The request's id, echoed in notifications as `request_id`.
    pub id: Value,
    pub max_output_bytes: usize,
    /// A command this request started, interrupted if the request is abandoned.
    pub started: Mutex<Option<(String, String)>>,
    /// Where long-lived work (terminal output pumps) is spawned.
    pub background: Arc<Mutex<tokio::task::JoinSet<()>>>,
    /// Fired once the answer to this request has been queued.
    pub answered: Mutex<Vec<tokio::sync::oneshot::Sender<()>>>,
}

impl CallCtx {
    pub async fn instance(&self) -> Result<Instance, RpcError> {
        self.runtime
            .instance()
            .await
            .map_err(|e| RpcError::fault(format!("could not start the provider: {e:#}")))
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

    /// Stops in the sandbox what this request started (after cancel or timeout).
    pub async fn abandon(&self) {
        let started = self.started.lock().expect("lock").take();
        if let Some((sandbox_id, command_id)) = started {
            let kill = async {
                let mut inst = self.instance().await?;
                guest!(inst, call_commands_kill, &sandbox_id, &command_id)
            };
            match tokio::time::timeout(Duration::from_secs(10), kill).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!(
                    "epp-host: stopping command {command_id} in {sandbox_id}: {}",
                    e.message
                ),
                Err(_) => {
                    eprintln!("epp-host: stopping command {command_id} in {sandbox_id} timed out")
                }
            }
        }
    }
}

/// A provider answer, a provider error, or a trap (a crash or a host limit).
pub fn settle<T>(r: wasmtime::Result<Result<T, EppError>>) -> Result<T, RpcError> {
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.into()),
        Err(trap) => Err(trap_error(&trap)),
    }
}

/// A trap as an EPP error: the cause in one line for the client, the whole
/// backtrace in the host log.
pub fn trap_error(trap: &wasmtime::Error) -> RpcError {
    if let Some(hit) = trap.downcast_ref::<LimitHit>() {
        return RpcError::fault(hit.to_string());
    }
    eprintln!("epp-host: provider trap: {trap:?}");
    let cause = match trap.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::UnreachableCodeReached) => "it panicked or aborted".to_string(),
        Some(code) => format!("wasm trap: {code}"),
        None => trap
            .to_string()
            .lines()
            .next()
            .unwrap_or("unknown")
            .to_string(),
    };
    RpcError::fault(format!(
        "the provider crashed ({cause}; details in the host log); this request failed, the host keeps serving"
    ))
}

/// Drops an exported resource, ignoring a trap in its destructor (logged).
pub async fn drop_resource(inst: &mut Instance, res: wasmtime::component::ResourceAny) {
    if let Err(e) = res.resource_drop_async(&mut inst.store).await {
        eprintln!("epp-host: provider failed to release a resource: {e}");
    }
}

/// Params of `method` into its typed form.
pub fn parse<T: DeserializeOwned>(method: &str, params: Map<String, Value>) -> Result<T, RpcError> {
    serde_json::from_value(Value::Object(params)).map_err(|e| RpcError::invalid_params(method, e))
}

/// A JSON object of strings as WIT key-values.
pub fn kv_in(map: BTreeMap<String, String>) -> Vec<(String, String)> {
    map.into_iter().collect()
}

/// WIT key-values as a JSON object.
pub fn kv_out(kv: Vec<(String, String)>) -> Value {
    Value::Object(kv.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
}

/// Seconds (possibly fractional) as whole milliseconds.
pub fn secs_to_ms(method: &str, field: &str, secs: Option<f64>) -> Result<Option<u64>, RpcError> {
    match secs {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 && s <= 1e9 => Ok(Some((s * 1000.0).ceil() as u64)),
        Some(s) => Err(RpcError::invalid_params(
            method,
            format!("`{field}` must be a positive number of seconds, got {s}"),
        )),
    }
}

/// How long a request may take in total, or none for unbounded streams.
pub fn deadline(method: &str, params: &Map<String, Value>, default: Duration) -> Option<Duration> {
    let secs = |key: &str| params.get(key).and_then(Value::as_f64).filter(|s| *s > 0.0);
    let slack = Duration::from_secs(60);
    match method {
        "commands.run" | "sessions.run"
            if params.get("background").and_then(Value::as_bool) != Some(true) =>
        {
            secs("timeout").map(|s| Duration::from_secs_f64(s.min(1e9)) + slack)
        }
        "sandbox.create" | "sandbox.connect" | "sandbox.resume" => Some(
            default.max(
                secs("ready_timeout")
                    .map(Duration::from_secs_f64)
                    .unwrap_or_default()
                    + slack,
            ),
        ),
        "files.watch" => None,
        _ => Some(default),
    }
}

/// Routes one request.
pub async fn call(
    ctx: &CallCtx,
    method: &str,
    params: Map<String, Value>,
) -> Result<Value, RpcError> {
    if method == "epp.hello" {
        return hello(ctx, method, params);
    }
    let Some(capability) = capability_of(method) else {
        return Err(RpcError::method_not_found(method));
    };
    if !ctx.runtime.supports(capability) {
        return Err(RpcError::unsupported(
            method,
            capability,
            &ctx.runtime.info.id,
        ));
    }
    match method {
        "sandbox.create" => sandbox::create(ctx, parse(method, params)?).await,
        "sandbox.connect" => sandbox::connect(ctx, parse(method, params)?).await,
        "sandbox.get_info" => sandbox::get_info(ctx, parse(method, params)?).await,
        "sandbox.list" => sandbox::list(ctx, parse(method, params)?).await,
        "sandbox.kill" => sandbox::kill(ctx, parse(method, params)?).await,
        "sandbox.set_timeout" => sandbox::set_timeout(ctx, parse(method, params)?).await,
        "sandbox.pause" => sandbox::pause(ctx, parse(method, params)?).await,
        "sandbox.resume" => sandbox::resume(ctx, parse(method, params)?).await,
        "commands.run" => commands::run(ctx, parse(method, params)?).await,
        "commands.kill" => commands::kill(ctx, parse(method, params)?).await,
        "commands.status" => commands::status(ctx, parse(method, params)?).await,
        "commands.logs" => commands::logs(ctx, parse(method, params)?).await,
        "commands.send_input" => process::send_input(ctx, parse(method, params)?).await,
        "process.list" => process::list(ctx, parse(method, params)?).await,
        "process.signal" => process::signal(ctx, parse(method, params)?).await,
        "pty.create" => pty::create(ctx, parse(method, params)?).await,
        "pty.send_input" => pty::send_input(ctx, parse(method, params)?).await,
        "pty.resize" => pty::resize(ctx, parse(method, params)?).await,
        "pty.kill" => pty::kill(ctx, parse(method, params)?).await,
        "files.read" => files::read(ctx, parse(method, params)?).await,
        "files.write" => files::write(ctx, parse(method, params)?).await,
        "files.list" => files::list(ctx, parse(method, params)?).await,
        "files.get_info" => files::get_info(ctx, parse(method, params)?).await,
        "files.exists" => files::exists(ctx, parse(method, params)?).await,
        "files.make_dir" => files::make_dir(ctx, parse(method, params)?).await,
        "files.remove" => files::remove(ctx, parse(method, params)?).await,
        "files.rename" => files::rename(ctx, parse(method, params)?).await,
        "ports.url" => ports::url(ctx, parse(method, params)?).await,
        _ => extra::call(ctx, method, params).await,
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HelloParams {
    protocol: Option<String>,
    #[allow(dead_code)]
    client: Option<Value>,
}

fn hello(ctx: &CallCtx, method: &str, params: Map<String, Value>) -> Result<Value, RpcError> {
    let p: HelloParams = parse(method, params)?;
    if let Some(protocol) = p.protocol.filter(|p| p != "EPP/1") {
        return Err(RpcError::invalid_params(
            method,
            format!("this host speaks EPP/1, not {protocol}"),
        ));
    }
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
    Ok(json!({
        "protocol": "EPP/1",
        "provider": {"id": info.id, "version": info.version},
        "host": {"name": "epp-host", "version": env!("CARGO_PKG_VERSION")},
        "capabilities": capabilities,
        "settings": settings,
    }))
}
