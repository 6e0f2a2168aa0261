//! pty: a terminal's output is pumped into `pty.output` notifications by a
//! background task that owns the instance holding the output stream; input,
//! resize and kill are plain methods.

use super::{CallCtx, Method, codec, drop_resource, guest_res, sandbox_id};
use crate::rpc::errors::RpcError;
use crate::runtime::bindings::infra::PtyEvent;
use base64::Engine as _;
use serde_json::{Map, Value, json};
use wasmtime::component::Val;

pub async fn create(
    ctx: &CallCtx,
    method: &Method,
    params: Map<String, Value>,
) -> Result<Value, RpcError> {
    let sandbox_id = sandbox_id(&params);
    let (mut inst, ok) = codec::invoke(ctx, method, method.function, params, &[]).await?;
    let (pty_id, stream) = match ok {
        Some(Val::Tuple(pair)) => match <[Val; 2]>::try_from(pair) {
            Ok([Val::String(id), Val::Resource(stream)]) => (id, stream),
            _ => return Err(not_a_terminal(method)),
        },
        _ => return Err(not_a_terminal(method)),
    };
    let out = ctx.out.clone();
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
                Err(e) => break json!({"exit_code": null, "error": e.wire_message()}),
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

fn not_a_terminal(method: &Method) -> RpcError {
    RpcError::fault(format!(
        "`{}` did not answer a terminal id and its output stream",
        method.function
    ))
}
