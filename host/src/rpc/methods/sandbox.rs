//! sandbox.lifecycle, sandbox.timeout, sandbox.pause.

use super::{CallCtx, guest, kv_in, kv_out};
use crate::rpc::errors::RpcError;
use crate::runtime::bindings::infra::{CreateRequest, ListRequest, Resources, SandboxInfo};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourcesParams {
    cpu: Option<String>,
    memory: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    template: Option<String>,
    timeout: Option<u32>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    resources: Option<ResourcesParams>,
    entrypoint: Option<Vec<String>>,
    ready_timeout: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxParams {
    sandbox_id: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    state: Option<OneOrMany>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutParams {
    sandbox_id: String,
    timeout: u32,
}

pub fn info_json(info: SandboxInfo) -> Value {
    json!({
        "sandbox_id": info.sandbox_id,
        "template": info.template,
        "image": info.image,
        "state": info.state,
        "metadata": kv_out(info.metadata),
        "created_at": info.created_at,
        "expires_at": info.expires_at,
    })
}

pub async fn create(ctx: &CallCtx, p: CreateParams) -> Result<Value, RpcError> {
    let req = CreateRequest {
        template: p.template,
        timeout: p.timeout,
        env: kv_in(p.env),
        metadata: kv_in(p.metadata),
        resources: p.resources.map(|r| Resources {
            cpu: r.cpu,
            memory: r.memory,
        }),
        entrypoint: p.entrypoint,
        ready_timeout: p.ready_timeout,
    };
    let mut inst = ctx.instance().await?;
    guest!(inst, call_sandbox_create, &req).map(info_json)
}

pub async fn connect(ctx: &CallCtx, p: SandboxParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_sandbox_connect, &p.sandbox_id).map(info_json)
}

pub async fn get_info(ctx: &CallCtx, p: SandboxParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_sandbox_get_info, &p.sandbox_id).map(info_json)
}

pub async fn list(ctx: &CallCtx, p: ListParams) -> Result<Value, RpcError> {
    let req = ListRequest {
        states: match p.state {
            None => Vec::new(),
            Some(OneOrMany::One(s)) => vec![s],
            Some(OneOrMany::Many(v)) => v,
        },
        metadata: kv_in(p.metadata),
    };
    let mut inst = ctx.instance().await?;
    let sandboxes = guest!(inst, call_sandbox_list, &req)?;
    Ok(json!({"sandboxes": sandboxes.into_iter().map(info_json).collect::<Vec<_>>()}))
}

pub async fn kill(ctx: &CallCtx, p: SandboxParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_sandbox_kill, &p.sandbox_id).map(|()| json!({}))
}

pub async fn set_timeout(ctx: &CallCtx, p: TimeoutParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_sandbox_set_timeout, &p.sandbox_id, p.timeout)
        .map(|expires_at| json!({"expires_at": expires_at}))
}

pub async fn pause(ctx: &CallCtx, p: SandboxParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_sandbox_pause, &p.sandbox_id).map(|()| json!({}))
}

pub async fn resume(ctx: &CallCtx, p: SandboxParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_sandbox_resume, &p.sandbox_id).map(info_json)
}
