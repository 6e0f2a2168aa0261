//! code.interpret: `code.run` reads a run's events (`code-run-events`, abx:epp
//! 1.1), forwarded as notifications (`stream: true`: `code.started`,
//! `code.output`, `code.result`) or collected into one answer. The run's own
//! exception is part of the answer (`error`), not an error answer: the call
//! worked, the code raised. A component built against abx:epp 1.0 has only the
//! collected `code-run`, served as a plain method.

use super::commands::Collected;
use super::{
    CallCtx, Method, Running, Started, codec, drop_resource, guest_res, resource, sandbox_id,
    take_flag,
};
use crate::rpc::errors::{EppCode, RpcError};
use crate::runtime::Instance;
use crate::runtime::bindings::infra::{CodeError, CodeEvent, CodeOutput};
use serde_json::{Map, Value, json};
use wasmtime::component::ResourceAny;

/// This adapter's own param.
const OWN: [&str; 1] = ["stream"];
/// The function behind `code.run` since abx:epp 1.1.
const RUN_EVENTS: &str = "code-run-events";

/// `code.run`: collected, or streamed with `stream: true`.
pub async fn run(
    ctx: &CallCtx,
    method: &Method,
    mut params: Map<String, Value>,
) -> Result<Value, RpcError> {
    let forward = take_flag(method.name, &mut params, "stream")?;
    if !ctx.codec.exports(RUN_EVENTS) {
        if forward {
            return Err(RpcError::unsupported(
                "code.run with `stream: true`",
                "exec.stream",
                &ctx.runtime.info.id,
            ));
        }
        return codec::serve(ctx, method, params).await;
    }
    let sandbox_id = sandbox_id(&params);
    let (mut inst, ok) = codec::invoke(ctx, method, RUN_EVENTS, params, &OWN).await?;
    let stream = resource(method, ok)?;
    let result = follow(ctx, &mut inst, stream, &sandbox_id, forward).await;
    drop_resource(&mut inst, stream).await;
    result
}

fn output_json(output: CodeOutput) -> (Value, usize) {
    let size = output.data.iter().map(|(k, v)| k.len() + v.len()).sum();
    let data: Map<String, Value> = output
        .data
        .into_iter()
        .map(|(mime, data)| (mime, Value::String(data)))
        .collect();
    (
        json!({"data": data, "is_main_result": output.is_main_result}),
        size,
    )
}

fn error_json(error: CodeError) -> Value {
    json!({"name": error.name, "value": error.value, "traceback": error.traceback})
}

/// Drains a run's stream until it finishes.
async fn follow(
    ctx: &CallCtx,
    inst: &mut Instance,
    stream: ResourceAny,
    sandbox_id: &str,
    forward: bool,
) -> Result<Value, RpcError> {
    let mut collected = Collected::new(ctx.max_output_bytes);
    let mut results = Vec::new();
    let mut context_id: Option<String> = None;
    let mut error: Option<Value> = None;
    loop {
        let events = match guest_res!(*inst, code_stream.call_next, stream) {
            Ok(Some(events)) if !events.is_empty() => events,
            Ok(batch) => {
                ctx.abandon().await;
                return Err(RpcError::fault(if batch.is_none() {
                    "the provider ended the code run's stream before it finished; its outcome is unknown"
                } else {
                    "the provider's code stream returned a batch with no event (it must wait for \
                     at least one); the run was interrupted; report this provider bug"
                }));
            }
            Err(e) => {
                // A run that hit its own timeout was interrupted by the provider;
                // one refused as busy never ran (execd says so after `started`),
                // and the code its context is running is someone else's.
                if matches!(e.code, EppCode::TimedOut | EppCode::Conflict) {
                    ctx.started.lock().expect("lock").take();
                }
                ctx.abandon().await;
                return Err(e);
            }
        };
        for event in events {
            match event {
                CodeEvent::Started(id) => {
                    *ctx.started.lock().expect("lock") = Some(Started {
                        sandbox_id: sandbox_id.to_string(),
                        id: id.clone(),
                        kind: Running::Code,
                    });
                    if forward {
                        ctx.notify("code.started", json!({"context_id": id})).await;
                    }
                    context_id = Some(id);
                }
                CodeEvent::Stdout(text) | CodeEvent::Stderr(text) if text.is_empty() => {}
                CodeEvent::Stdout(text) if forward => {
                    ctx.notify("code.output", json!({"stream": "stdout", "data": text}))
                        .await
                }
                CodeEvent::Stderr(text) if forward => {
                    ctx.notify("code.output", json!({"stream": "stderr", "data": text}))
                        .await
                }
                CodeEvent::Stdout(text) => collected.push(true, text),
                CodeEvent::Stderr(text) => collected.push(false, text),
                CodeEvent::Rich(output) => {
                    let (result, size) = output_json(output);
                    if forward {
                        ctx.notify("code.result", result).await;
                    } else {
                        // Kept whole or not at all: half an image is no image.
                        if collected.take(size) {
                            results.push(result);
                        }
                    }
                }
                CodeEvent::Error(e) => error = Some(error_json(e)),
                CodeEvent::Finished(execution_count) => {
                    ctx.started.lock().expect("lock").take();
                    let mut answer = json!({
                        "context_id": context_id,
                        "execution_count": execution_count,
                    });
                    if let Some(error) = error {
                        answer["error"] = error;
                    }
                    if !forward {
                        answer["stdout"] = json!(collected.stdout);
                        answer["stderr"] = json!(collected.stderr);
                        answer["results"] = Value::Array(results);
                        if collected.truncated {
                            answer["truncated"] = json!(true);
                        }
                    }
                    return Ok(answer);
                }
            }
        }
    }
}
