//! pty: a terminal's output is pumped into `pty.output` notifications by a
//! background task that owns the instance holding the output stream; input,
//! resize and kill are ordinary requests.

use super::process::decode_b64;
use super::{CallCtx, drop_resource, guest, guest_res, kv_in};
use crate::rpc::errors::RpcError;
use crate::runtime::bindings::infra::{PtyEvent, PtyRequest};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    sandbox_id: String,
    #[serde(default = "default_cols")]
    cols: u16,
    #[serde(default = "default_rows")]
    rows: u16,
    cwd: Option<String>,
    #[serde(default)]
    envs: BTreeMap<String, String>,
    cmd: Option<String>,
}

fn default_cols() -> u16 {
    80
}

fn default_rows() -> u16 {
    24
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputParams {
    sandbox_id: String,
    pty_id: String,
    data: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeParams {
    sandbox_id: String,
    pty_id: String,
    cols: u16,
    rows: u16,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PtyParams {
    sandbox_id: String,
    pty_id: String,
}

fn check_size(method: &str, cols: u16, rows: u16) -> Result<(), RpcError> {
    if cols == 0 || rows == 0 || cols > 1000 || rows > 1000 {
        return Err(RpcError::invalid_params(
            method,
            "cols and rows must be between 1 and 1000",
        ));
    }
    Ok(())
}

pub async fn create(ctx: &CallCtx, p: CreateParams) -> Result<Value, RpcError> {
    check_size("pty.create", p.cols, p.rows)?;
    let req = PtyRequest {
        sandbox_id: p.sandbox_id.clone(),
        cols: p.cols,
        rows: p.rows,
        cwd: p.cwd,
        envs: kv_in(p.envs),
        cmd: p.cmd,
    };
    let mut inst = ctx.instance().await?;
    let (pty_id, stream) = guest!(inst, call_pty_create, &req)?;
    let out = ctx.out.clone();
    let sandbox_id = p.sandbox_id;
    let id = pty_id.clone();
    let released = ctx.after_response();
    ctx.background.lock().expect("lock").spawn(async move {
        // Output must not overtake the answer that tells the client the pty id.
        let _ = released.await;
        let exit_code = loop {
            match guest_res!(inst, pty_stream.call_next, stream) {
                Ok(Some(PtyEvent::Output(bytes))) => {
                    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
                    out.notify(
                        "pty.output",
                        json!({"sandbox_id": sandbox_id, "pty_id": id, "data": data}),
                    )
                    .await;
                }
                Ok(Some(PtyEvent::Exited(code))) => break json!({"exit_code": code}),
                Ok(None) => {
                    break json!({"exit_code": null, "error": "the terminal connection closed"});
                }
                Err(e) => break json!({"exit_code": null, "error": e.message}),
            }
        };
        drop_resource(&mut inst, stream).await;
        let mut params = json!({"sandbox_id": sandbox_id, "pty_id": id});
        if let (Value::Object(p), Value::Object(e)) = (&mut params, exit_code) {
            p.extend(e);
        }
        out.notify("pty.exit", params).await;
    });
    Ok(json!({"pty_id": pty_id}))
}

pub async fn send_input(ctx: &CallCtx, p: InputParams) -> Result<Value, RpcError> {
    let data = decode_b64("pty.send_input", "data", &p.data)?;
    let mut inst = ctx.instance().await?;
    guest!(inst, call_pty_send_input, &p.sandbox_id, &p.pty_id, &data).map(|()| json!({}))
}

pub async fn resize(ctx: &CallCtx, p: ResizeParams) -> Result<Value, RpcError> {
    check_size("pty.resize", p.cols, p.rows)?;
    let mut inst = ctx.instance().await?;
    guest!(
        inst,
        call_pty_resize,
        &p.sandbox_id,
        &p.pty_id,
        p.cols,
        p.rows
    )
    .map(|()| json!({}))
}

pub async fn kill(ctx: &CallCtx, p: PtyParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_pty_kill, &p.sandbox_id, &p.pty_id).map(|()| json!({}))
}
