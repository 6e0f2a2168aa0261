//! exec.run and exec.stream: foreground commands are read as a stream of events,
//! either forwarded as notifications (`stream: true`) or collected.

use super::{CallCtx, drop_resource, guest, guest_res, kv_in, secs_to_ms};
use crate::rpc::errors::RpcError;
use crate::runtime::Instance;
use crate::runtime::bindings::infra::{CommandEvent, CommandExit, CommandRequest};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use wasmtime::component::ResourceAny;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    sandbox_id: String,
    cmd: String,
    cwd: Option<String>,
    #[serde(default)]
    envs: BTreeMap<String, String>,
    timeout: Option<f64>,
    #[serde(default)]
    background: bool,
    #[serde(default)]
    stream: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandParams {
    sandbox_id: String,
    command_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsParams {
    sandbox_id: String,
    command_id: String,
    cursor: Option<u64>,
}

pub async fn run(ctx: &CallCtx, p: RunParams) -> Result<Value, RpcError> {
    let method = "commands.run";
    if p.background && p.stream {
        return Err(RpcError::invalid_params(
            method,
            "`background` and `stream` cannot both be true; follow a background command with commands.logs",
        ));
    }
    let req = CommandRequest {
        sandbox_id: p.sandbox_id,
        cmd: p.cmd,
        cwd: p.cwd,
        envs: kv_in(p.envs),
        timeout_ms: secs_to_ms(method, "timeout", p.timeout)?,
    };
    let mut inst = ctx.instance().await?;
    if p.background {
        let command_id = guest!(inst, call_commands_start, &req)?;
        return Ok(json!({"command_id": command_id}));
    }
    let stream = guest!(inst, call_commands_run, &req)?;
    let result = follow(ctx, &mut inst, stream, &req.sandbox_id, p.stream).await;
    drop_resource(&mut inst, stream).await;
    result
}

/// Output collected for a non-streaming run, bounded by `--max-output-bytes`.
struct Collected {
    stdout: String,
    stderr: String,
    room: usize,
    truncated: bool,
}

impl Collected {
    fn push(&mut self, to_stdout: bool, text: String) {
        let target = if to_stdout {
            &mut self.stdout
        } else {
            &mut self.stderr
        };
        if text.len() <= self.room {
            self.room -= text.len();
            target.push_str(&text);
            return;
        }
        let mut cut = self.room;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        target.push_str(&text[..cut]);
        self.room = 0;
        self.truncated = true;
    }
}

/// Drains a command stream until the command exits.
pub async fn follow(
    ctx: &CallCtx,
    inst: &mut Instance,
    stream: ResourceAny,
    sandbox_id: &str,
    forward: bool,
) -> Result<Value, RpcError> {
    let mut collected = Collected {
        stdout: String::new(),
        stderr: String::new(),
        room: ctx.max_output_bytes,
        truncated: false,
    };
    let mut command_id: Option<String> = None;
    loop {
        let batch = match guest_res!(*inst, command_stream.call_next, stream) {
            Ok(batch) => batch,
            Err(e) => {
                // The command may still run; don't leave it behind (unless it already
                // died of its own timeout).
                if e.epp_code() == Some("E5004") {
                    ctx.started.lock().expect("lock").take();
                }
                ctx.abandon().await;
                return Err(e);
            }
        };
        let Some(events) = batch else {
            ctx.abandon().await;
            return Err(RpcError::fault(
                "the provider ended the command's stream without an exit status; its outcome is unknown",
            ));
        };
        if events.is_empty() {
            // `next` must wait for at least one event: an empty batch would make
            // this loop spin, with no deadline when the command has no timeout.
            ctx.abandon().await;
            return Err(RpcError::fault(
                "the provider's command stream returned a batch with no event (it must wait for \
                 at least one); the command was stopped; report this provider bug",
            ));
        }
        // Consecutive output of one stream in a batch goes out as one notification.
        let mut pending: Option<(bool, String)> = None;
        for event in events {
            let (to_stdout, text) = match event {
                CommandEvent::Stdout(text) => (true, text),
                CommandEvent::Stderr(text) => (false, text),
                other => {
                    flush(ctx, &mut pending, forward, &mut collected).await;
                    match other {
                        CommandEvent::Started(id) => {
                            *ctx.started.lock().expect("lock") =
                                Some((sandbox_id.to_string(), id.clone()));
                            if forward {
                                ctx.notify("commands.started", json!({"command_id": id}))
                                    .await;
                            }
                            command_id = Some(id);
                        }
                        CommandEvent::Exited(CommandExit { exit_code, error }) => {
                            ctx.started.lock().expect("lock").take();
                            let mut result =
                                json!({"command_id": command_id, "exit_code": exit_code});
                            if let Some(error) = error {
                                result["error"] = json!(error);
                            }
                            if !forward {
                                result["stdout"] = json!(collected.stdout);
                                result["stderr"] = json!(collected.stderr);
                                if collected.truncated {
                                    result["truncated"] = json!(true);
                                }
                            }
                            return Ok(result);
                        }
                        CommandEvent::Stdout(_) | CommandEvent::Stderr(_) => {
                            unreachable!("handled above")
                        }
                    }
                    continue;
                }
            };
            match &mut pending {
                Some((stream, buf)) if *stream == to_stdout => buf.push_str(&text),
                _ => {
                    flush(ctx, &mut pending, forward, &mut collected).await;
                    pending = Some((to_stdout, text));
                }
            }
        }
        flush(ctx, &mut pending, forward, &mut collected).await;
    }
}

/// Sends (or collects) buffered output of one stream.
async fn flush(
    ctx: &CallCtx,
    pending: &mut Option<(bool, String)>,
    forward: bool,
    collected: &mut Collected,
) {
    let Some((to_stdout, text)) = pending.take() else {
        return;
    };
    if text.is_empty() {
        return;
    }
    if forward {
        let stream = if to_stdout { "stdout" } else { "stderr" };
        ctx.notify("commands.output", json!({"stream": stream, "data": text}))
            .await;
    } else {
        collected.push(to_stdout, text);
    }
}

pub async fn kill(ctx: &CallCtx, p: CommandParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_commands_kill, &p.sandbox_id, &p.command_id).map(|()| json!({}))
}

pub async fn status(ctx: &CallCtx, p: CommandParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    let s = guest!(inst, call_commands_status, &p.sandbox_id, &p.command_id)?;
    Ok(json!({
        "command_id": s.command_id,
        "running": s.running,
        "exit_code": s.exit_code,
        "error": s.error,
        "started_at": s.started_at,
        "finished_at": s.finished_at,
    }))
}

pub async fn logs(ctx: &CallCtx, p: LogsParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    let logs = guest!(
        inst,
        call_commands_logs,
        &p.sandbox_id,
        &p.command_id,
        p.cursor
    )?;
    Ok(json!({"output": logs.output, "cursor": logs.cursor}))
}
