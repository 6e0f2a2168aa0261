//! process.manage.

use super::{CallCtx, guest};
use crate::rpc::errors::RpcError;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    sandbox_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalParams {
    sandbox_id: String,
    pid: u32,
    #[serde(default = "default_signal")]
    signal: String,
}

fn default_signal() -> String {
    "SIGTERM".to_string()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputParams {
    sandbox_id: String,
    command_id: String,
    data: String,
}

/// Standard base64 of the EPP edge.
pub fn decode_b64(method: &str, field: &str, data: &str) -> Result<Vec<u8>, RpcError> {
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| {
            RpcError::invalid_params(method, format!("`{field}` is not valid base64 ({e})"))
        })
}

pub async fn list(ctx: &CallCtx, p: ListParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    let procs = guest!(inst, call_process_list, &p.sandbox_id)?;
    let procs: Vec<Value> = procs
        .into_iter()
        .map(|p| json!({"pid": p.pid, "ppid": p.ppid, "user": p.user, "cmdline": p.cmdline}))
        .collect();
    Ok(json!({"processes": procs}))
}

pub async fn signal(ctx: &CallCtx, p: SignalParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_process_signal, &p.sandbox_id, p.pid, &p.signal).map(|()| json!({}))
}

pub async fn send_input(ctx: &CallCtx, p: InputParams) -> Result<Value, RpcError> {
    let data = decode_b64("commands.send_input", "data", &p.data)?;
    let mut inst = ctx.instance().await?;
    guest!(
        inst,
        call_commands_send_input,
        &p.sandbox_id,
        &p.command_id,
        &data
    )
    .map(|()| json!({}))
}
