//! exec.run and exec.stream: foreground commands are read as a stream of events,
//! either forwarded as notifications (`stream: true`) or collected. The params
//! are decoded by the codec like any method's; `background`, `stream` and
//! `stdin` (a command whose stdin `commands.send_input` writes) are this
//! adapter's own.

use super::{
    CallCtx, Method, Running, Started, codec, drop_resource, guest_res, resource, sandbox_id,
    take_flag,
};
use crate::rpc::errors::{EppCode, RpcError};
use crate::runtime::Instance;
use crate::runtime::bindings::infra::{CommandEvent, CommandExit};
use serde_json::{Map, Value, json};
use wasmtime::component::{ResourceAny, Val};

/// This adapter's own params (not in WIT).
const OWN: [&str; 3] = ["background", "stream", "stdin"];
/// The function behind `commands.run` with `background: true`.
const START: &str = "commands-start";
/// The function behind `commands.run` with `stdin: true` (abx:epp 1.1).
const RUN_STDIN: &str = "commands-run-stdin";

/// `commands.run`: in the foreground (collected or streamed), or in the background.
pub async fn run(
    ctx: &CallCtx,
    method: &Method,
    mut params: Map<String, Value>,
) -> Result<Value, RpcError> {
    let background = take_flag(method.name, &mut params, "background")?;
    let forward = take_flag(method.name, &mut params, "stream")?;
    let stdin = take_flag(method.name, &mut params, "stdin")?;
    if stdin && background {
        return Err(RpcError::invalid_params(
            method.name,
            "`stdin` needs a foreground command: leave out `background`",
        ));
    }
    if stdin {
        return follow_function(ctx, method, RUN_STDIN, params, forward, Kind::Command).await;
    }
    if background && forward {
        return Err(RpcError::invalid_params(
            method.name,
            "`background` and `stream` cannot both be true; follow a background command with commands.logs",
        ));
    }
    if !background {
        return follow_call(ctx, method, params, forward, Kind::Command).await;
    }
    match codec::invoke(ctx, method, START, params, &OWN).await?.1 {
        Some(Val::String(command_id)) => Ok(json!({"command_id": command_id})),
        _ => Err(RpcError::fault(format!(
            "`{START}` did not answer a command id"
        ))),
    }
}

/// `sessions.run`: a command in a session, as `commands.run` in the foreground.
/// The stream's id is the session's: it is reported as `session_id` and never
/// passed to `commands.kill` (execd would close the session); an abandoned run
/// ends when its connection drops with the provider instance (execd kills it).
pub async fn session_run(
    ctx: &CallCtx,
    method: &Method,
    mut params: Map<String, Value>,
) -> Result<Value, RpcError> {
    let forward = take_flag(method.name, &mut params, "stream")?;
    follow_call(ctx, method, params, forward, Kind::Session).await
}

/// What the id in a stream's `started` event names.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// A command: `command_id`, stopped with `commands.kill` if abandoned.
    Command,
    /// A run in a session: `session_id`.
    Session,
}

impl Kind {
    fn id_key(self) -> &'static str {
        match self {
            Kind::Command => "command_id",
            Kind::Session => "session_id",
        }
    }
}

/// Calls a function that answers a command stream, and follows it.
async fn follow_call(
    ctx: &CallCtx,
    method: &Method,
    params: Map<String, Value>,
    forward: bool,
    kind: Kind,
) -> Result<Value, RpcError> {
    follow_function(ctx, method, method.function, params, forward, kind).await
}

/// Calls `function` (answering a command stream) with `method`'s params, and follows it.
async fn follow_function(
    ctx: &CallCtx,
    method: &Method,
    function: &str,
    params: Map<String, Value>,
    forward: bool,
    kind: Kind,
) -> Result<Value, RpcError> {
    let sandbox_id = sandbox_id(&params);
    let (mut inst, ok) = codec::invoke(ctx, method, function, params, &OWN).await?;
    let stream = resource(method, ok)?;
    let result = follow(ctx, &mut inst, stream, &sandbox_id, forward, kind).await;
    drop_resource(&mut inst, stream).await;
    result
}

/// Output collected for a non-streaming run, bounded by `--max-output-bytes`
/// (code runs keep their rich results within the same bound: `code::follow`).
pub(super) struct Collected {
    pub stdout: String,
    pub stderr: String,
    room: usize,
    pub truncated: bool,
}

impl Collected {
    pub fn new(room: usize) -> Collected {
        Collected {
            stdout: String::new(),
            stderr: String::new(),
            room,
            truncated: false,
        }
    }

    /// Takes `n` bytes of room, or says there is not enough (and marks the cut).
    pub fn take(&mut self, n: usize) -> bool {
        if n <= self.room {
            self.room -= n;
            return true;
        }
        self.truncated = true;
        false
    }

    /// Keeps `text` of stdout or stderr, cut at a character boundary when the
    /// room runs out.
    pub fn push(&mut self, to_stdout: bool, text: String) {
        let cut = if self.take(text.len()) {
            text.len()
        } else {
            let mut cut = std::mem::take(&mut self.room);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            cut
        };
        let target = if to_stdout {
            &mut self.stdout
        } else {
            &mut self.stderr
        };
        target.push_str(&text[..cut]);
    }
}

/// Drains a command stream until the command exits.
async fn follow(
    ctx: &CallCtx,
    inst: &mut Instance,
    stream: ResourceAny,
    sandbox_id: &str,
    forward: bool,
    kind: Kind,
) -> Result<Value, RpcError> {
    let mut collected = Collected::new(ctx.max_output_bytes);
    let mut command_id: Option<String> = None;
    loop {
        let batch = match guest_res!(*inst, command_stream.call_next, stream) {
            Ok(batch) => batch,
            Err(e) => {
                // The command may still run; don't leave it behind (unless it already
                // died of its own timeout).
                if e.code == EppCode::TimedOut {
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
                            if kind == Kind::Command {
                                *ctx.started.lock().expect("lock") = Some(Started {
                                    sandbox_id: sandbox_id.to_string(),
                                    id: id.clone(),
                                    kind: Running::Command,
                                });
                            }
                            if forward {
                                let mut started = Map::new();
                                started.insert(kind.id_key().into(), json!(id));
                                ctx.notify("commands.started", Value::Object(started)).await;
                            }
                            command_id = Some(id);
                        }
                        CommandEvent::Exited(CommandExit { exit_code, error }) => {
                            ctx.started.lock().expect("lock").take();
                            let mut result = json!({"exit_code": exit_code});
                            result[kind.id_key()] = json!(command_id);
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

#[cfg(test)]
mod tests {
    use super::Collected;

    #[test]
    fn collected_output_stops_at_its_room_on_a_character_boundary() {
        let mut c = Collected::new(6);
        c.push(true, "abc".into());
        c.push(false, "éé".into()); // 4 bytes, only 3 left: one é fits
        assert_eq!((c.stdout.as_str(), c.stderr.as_str()), ("abc", "é"));
        assert!(c.truncated);
        assert!(!c.take(1), "no room left");
        c.push(true, "x".into());
        assert_eq!(c.stdout, "abc");
    }

    #[test]
    fn room_is_taken_whole_or_not_at_all() {
        let mut c = Collected::new(10);
        assert!(c.take(10));
        assert!(!c.truncated);
        assert!(!c.take(1));
        assert!(c.truncated);
    }
}
