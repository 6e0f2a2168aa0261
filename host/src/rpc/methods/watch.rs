//! files.watch: file events become `files.event` notifications until the
//! provider ends the stream or the client cancels the request.

use super::{CallCtx, Method, codec, drop_resource, guest_res, resource};
use crate::rpc::errors::RpcError;
use crate::runtime::bindings::infra::FileEventKind;
use serde_json::{Map, Value, json};

pub async fn watch(
    ctx: &CallCtx,
    method: &Method,
    params: Map<String, Value>,
) -> Result<Value, RpcError> {
    let (mut inst, ok) = codec::invoke(ctx, method, method.function, params, &[]).await?;
    let stream = resource(method, ok)?;
    let result = loop {
        match guest_res!(inst, watch_stream.call_next, stream) {
            Ok(Some(event)) => {
                let kind = match event.kind {
                    FileEventKind::Create => "create",
                    FileEventKind::Write => "write",
                    FileEventKind::Remove => "remove",
                    FileEventKind::Rename => "rename",
                    FileEventKind::Chmod => "chmod",
                };
                ctx.notify("files.event", json!({"kind": kind, "path": event.path}))
                    .await;
            }
            Ok(None) => break Ok(json!({})),
            Err(e) => break Err(e),
        }
    };
    drop_resource(&mut inst, stream).await;
    result
}
