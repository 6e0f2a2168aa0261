//! ports.url.

use super::{CallCtx, guest, kv_out};
use crate::rpc::errors::RpcError;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UrlParams {
    sandbox_id: String,
    port: u16,
}

pub async fn url(ctx: &CallCtx, p: UrlParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    let url = guest!(inst, call_ports_url, &p.sandbox_id, p.port)?;
    Ok(json!({"url": url.url, "headers": kv_out(url.headers)}))
}
