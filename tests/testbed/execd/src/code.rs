//! Code contexts (`/code*`), following execd 1.1.1 (`controller/codeinterpreting.go`,
//! `runtime/context.go`, `runtime/jupyter.go`, `runtime/ctrl.go`), backed by the sandbox's
//! real Jupyter server (see `jupyter.rs`):
//!
//! * a context is a Jupyter session (its id is the session's id) with its own kernel;
//!   `POST /code` with a language and no context id runs in that language's default
//!   context, made on first use; a context's `cwd` is the session's path directory, which
//!   Jupyter resolves below its root (relative paths work; see README);
//! * making a context retries every failure with execd's backoff (0.5 s × 1.5ⁿ, 60 steps,
//!   no cap): with no or no reachable Jupyter, or an unknown language, it never answers;
//! * `POST /code` without a language runs `code` as a shell command (`/command`'s
//!   events), `background-command` as a background one; other languages than execd's
//!   Jupyter ones are "unknown language" (`sql`, which needs a MySQL, is not modelled);
//! * errors before the first event are JSON 500s (`context not found`, `language runtime
//!   server not configured, …`); after `init` (busy context, kernel unreachable) a bare
//!   `{"code","message"}` object ends the 200 stream, as Gin writes it;
//! * a client that goes away does not stop the run (execd's run context is not the
//!   request's); the context stays busy until the kernel is done;
//! * `DELETE /code?id=` interrupts a context's kernel (SIGINT: KeyboardInterrupt), or
//!   else a command like `DELETE /command`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::{self, UnboundedSender};

use crate::State;
use crate::code_events::{CodeEvent, RunState};
use crate::command::{late_error, spawn_pinger, sse_response};
use crate::jupyter::Jupyter;
use crate::kernel_channel::KernelChannel;
use crate::paths;
use crate::web::{self as h, CONTEXT_NOT_FOUND, INVALID_REQUEST, Query, Resp};

/// Languages execd hands to Jupyter (`Execute`'s switch).
const JUPYTER_LANGUAGES: [&str; 6] = ["bash", "python", "java", "javascript", "typescript", "go"];
/// Languages whose contexts cannot be listed (`ListContext`).
const NOT_CONTEXT_LANGUAGES: [&str; 3] = ["command", "background-command", "sql"];

struct Context {
    id: String,
    language: String,
    kernel_id: String,
    /// execd's `jupyterKernel.mu`: one run at a time (`TryLock`, else "session is busy").
    busy: Arc<tokio::sync::Mutex<()>>,
    /// The kernel connection, dialled when the context is made and again after it broke.
    channel: tokio::sync::Mutex<Option<Arc<KernelChannel>>>,
}

#[derive(Default)]
struct Contexts {
    /// In creation order (execd lists a Go map; any order is faithful).
    all: Vec<Arc<Context>>,
    defaults: HashMap<String, String>,
}

pub struct Registry {
    jupyter: Option<Arc<Jupyter>>,
    contexts: Mutex<Contexts>,
}

impl Registry {
    pub fn from_env() -> Registry {
        Registry {
            jupyter: Jupyter::from_env().map(Arc::new),
            contexts: Mutex::default(),
        }
    }

    fn get(&self, id: &str) -> Option<Arc<Context>> {
        let c = self.contexts.lock().unwrap();
        c.all.iter().find(|x| x.id == id).cloned()
    }

    fn default_for(&self, language: &str) -> Option<String> {
        self.contexts
            .lock()
            .unwrap()
            .defaults
            .get(language)
            .cloned()
    }

    fn insert(&self, ctx: Arc<Context>, default: bool) {
        let mut c = self.contexts.lock().unwrap();
        if default {
            c.defaults.insert(ctx.language.clone(), ctx.id.clone());
        }
        c.all.push(ctx);
    }

    fn remove(&self, id: &str) {
        let mut c = self.contexts.lock().unwrap();
        c.all.retain(|x| x.id != id);
        c.defaults.retain(|_, v| v != id);
    }

    fn list(&self, language: Option<&str>) -> Vec<Arc<Context>> {
        let c = self.contexts.lock().unwrap();
        c.all
            .iter()
            .filter(|x| language.is_none_or(|l| x.language == l))
            .cloned()
            .collect()
    }
}

#[derive(Deserialize, Serialize, Default, Clone)]
struct ContextRequest {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    language: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    cwd: String,
}

/// `model.CodeContext`: the id, then the request's (omitempty) fields.
#[derive(Serialize, Deserialize, Default)]
struct ContextBody {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    id: String,
    #[serde(flatten)]
    request: ContextRequest,
}

#[derive(Deserialize, Default)]
struct RunCodeRequest {
    #[serde(default)]
    context: ContextBody,
    #[serde(default)]
    code: String,
}

/// `runtime.CodeContext` as listed: `{"id","language"}`.
#[derive(Serialize)]
struct Listed<'a> {
    id: &'a str,
    language: &'a str,
}

fn runtime_error(msg: String) -> Resp {
    h::runtime_error(msg)
}

fn not_found(id: &str) -> Resp {
    h::error(
        StatusCode::NOT_FOUND,
        CONTEXT_NOT_FOUND,
        format!("context {id} not found"),
    )
}

/// execd's `kernelWaitingBackoff` (`retry.OnError`): 60 attempts, 0.5 s growing × 1.5
/// with 10 % jitter and no cap, so a lasting failure is, in practice, never reported.
async fn with_backoff<T, F, Fut>(mut attempt: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let mut delay = 0.5_f64;
    let mut last = String::new();
    for step in 0..60 {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                eprintln!("execd-standin: failed to create code context, retrying: {e}");
                last = e;
            }
        }
        if step < 59 {
            let jitter =
                1.0 + 0.1 * (h::unix_ms(std::time::SystemTime::now()) % 1000) as f64 / 1000.0;
            tokio::time::sleep(Duration::from_secs_f64(delay * jitter)).await;
            delay *= 1.5;
        }
    }
    Err(last)
}

impl Registry {
    /// `createJupyterContext`: kernelspec for the language, a session whose path is
    /// `<cwd>/<new id>.ipynb` (cwd expanded and created), and a check that its kernel runs.
    async fn make_context(&self, language: &str, cwd: &str) -> Result<Arc<Context>, String> {
        let Some(j) = &self.jupyter else {
            // What execd's HTTP client says for the empty base URL.
            return Err(
                "failed to send request: Get \"/api/kernelspecs\": unsupported protocol scheme \"\""
                    .into(),
            );
        };
        let kernel = j.kernel_for(language).await?;
        let name = h::new_uuid(false);
        let dir = paths::expand(cwd)?;
        if !cwd.is_empty() {
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("mkdir {dir}: {}", crate::sys::errno_text(&e)))?;
        }
        let path = if dir.is_empty() {
            format!("{name}.ipynb")
        } else {
            format!("{}/{name}.ipynb", dir.trim_end_matches('/'))
        };
        let session = j.create_session(&name, &path, &kernel).await?;
        if !j.kernel_ids().await?.contains(&session.kernel.id) {
            return Err("kernel not found".into());
        }
        let ctx = Arc::new(Context {
            id: session.id,
            language: language.to_string(),
            kernel_id: session.kernel.id,
            busy: Arc::default(),
            channel: tokio::sync::Mutex::new(None),
        });
        // Dial the kernel now so the first run finds the connection ready.
        let (jupyter, warm) = (j.clone(), ctx.clone());
        tokio::spawn(async move {
            let _ = connected(&jupyter, &warm).await;
        });
        Ok(ctx)
    }

    async fn create(&self, language: &str, cwd: &str) -> Result<Arc<Context>, String> {
        let ctx = with_backoff(|| self.make_context(language, cwd)).await?;
        self.insert(ctx.clone(), false);
        Ok(ctx)
    }

    /// `createDefaultLanguageJupyterContext`.
    async fn default_context(&self, language: &str) -> Result<String, String> {
        if let Some(id) = self.default_for(language) {
            return Ok(id);
        }
        let ctx = with_backoff(|| self.make_context(language, "")).await?;
        let id = ctx.id.clone();
        self.insert(ctx, true);
        Ok(id)
    }

    /// `deleteSessionAndCleanup`: the Jupyter session goes, and with it the kernel.
    async fn delete(&self, id: &str) -> Result<(), Option<String>> {
        let ctx = self.get(id).ok_or(None)?;
        let j = self.jupyter.as_ref().ok_or(None)?;
        j.delete_session(id).await.map_err(Some)?;
        self.remove(id);
        if let Some(ch) = ctx.channel.lock().await.take() {
            ch.end_run();
        }
        Ok(())
    }
}

/// The context's kernel connection, dialled if there is none or it broke.
async fn connected(j: &Jupyter, ctx: &Context) -> Result<Arc<KernelChannel>, String> {
    let mut slot = ctx.channel.lock().await;
    if let Some(ch) = slot.as_ref().filter(|c| !c.is_closed()) {
        return Ok(ch.clone());
    }
    let ch = KernelChannel::connect(j.authority(), &j.channels_url(&ctx.kernel_id)).await?;
    *slot = Some(ch.clone());
    Ok(ch)
}

/// POST /code/context
pub async fn create_context(st: Arc<State>, req: Request<Incoming>) -> Resp {
    let r: ContextRequest = match read_json(req).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    match st.code.create(&r.language, &r.cwd).await {
        Ok(ctx) => h::json(
            StatusCode::OK,
            &ContextBody {
                id: ctx.id.clone(),
                request: r,
            },
        ),
        Err(e) => runtime_error(format!("error creating code context. {e}")),
    }
}

async fn read_json<T: serde::de::DeserializeOwned + Default>(
    req: Request<Incoming>,
) -> Result<T, Resp> {
    let body = h::read_body(req.into_body()).await;
    body.and_then(|b| h::decode_json(&b)).map_err(|e| {
        h::error(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            format!("error parsing request, MAYBE invalid body format. {e}"),
        )
    })
}

/// GET /code/contexts?language=
pub fn list(st: &State, q: &Query) -> Resp {
    let language = q.get("language");
    if NOT_CONTEXT_LANGUAGES.contains(&language) {
        return runtime_error(format!(
            "unsupported language context operation: {language}"
        ));
    }
    let contexts = st.code.list(Some(language).filter(|l| !l.is_empty()));
    let listed: Vec<Listed> = contexts
        .iter()
        .map(|c| Listed {
            id: &c.id,
            language: &c.language,
        })
        .collect();
    h::json(StatusCode::OK, &listed)
}

/// GET /code/contexts/{id}
pub fn get(st: &State, id: &str) -> Resp {
    match st.code.get(id) {
        Some(c) => h::json(
            StatusCode::OK,
            &Listed {
                id: &c.id,
                language: &c.language,
            },
        ),
        None => not_found(id),
    }
}

/// DELETE /code/contexts/{id}
pub async fn delete(st: &State, id: &str) -> Resp {
    match st.code.delete(id).await {
        Ok(()) => h::ok(),
        Err(None) => not_found(id),
        Err(Some(e)) => runtime_error(format!("error deleting code context {id}. {e}")),
    }
}

/// DELETE /code/contexts?language=
pub async fn delete_by_language(st: &State, q: &Query) -> Resp {
    let language = match q.required("language") {
        Ok(l) => l,
        Err(resp) => return resp,
    };
    for ctx in st.code.list(Some(language)) {
        match st.code.delete(&ctx.id).await {
            Ok(()) | Err(None) => {}
            Err(Some(e)) => {
                return runtime_error(format!(
                    "error deleting code context {language}. error deleting context {}: {e}",
                    ctx.id
                ));
            }
        }
    }
    h::ok()
}

/// DELETE /code?id= — a context's kernel, else a command (execd's shared `Interrupt`).
pub async fn interrupt(st: Arc<State>, q: &Query) -> Resp {
    let id = match q.required("id") {
        Ok(v) => v,
        Err(resp) => return resp,
    };
    let (Some(ctx), Some(j)) = (st.code.get(id), st.code.jupyter.clone()) else {
        return crate::command::interrupt(st, q).await;
    };
    match j.interrupt_kernel(&ctx.kernel_id).await {
        Ok(()) => h::ok(),
        Err(e) => runtime_error(format!("error interruptting code context. {e}")),
    }
}

/// POST /code
pub async fn run(st: Arc<State>, req: Request<Incoming>) -> Resp {
    let r: RunCodeRequest = match read_json(req).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    if r.code.is_empty() {
        return h::error(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            "invalid request, validation error Key: 'RunCodeRequest.Code' Error:Field validation for 'Code' failed on the 'required' tag",
        );
    }
    let language = r.context.request.language.as_str();
    match language {
        "" | "command" => return crate::command::run_code(st, r.code, false),
        "background-command" => return crate::command::run_code(st, r.code, true),
        l if JUPYTER_LANGUAGES.contains(&l) => {}
        l => return runtime_error(format!("error running codes unknown language: {l}")),
    }
    let Some(jupyter) = st.code.jupyter.clone() else {
        return runtime_error(
            "error running codes language runtime server not configured, please check your image runtime"
                .into(),
        );
    };
    let id = match r.context.id.as_str() {
        "" => match st.code.default_context(language).await {
            Ok(id) => id,
            Err(e) => return runtime_error(format!("error running codes {e}")),
        },
        id => id.to_string(),
    };
    let Some(ctx) = st.code.get(&id) else {
        return runtime_error("error running codes context not found".into());
    };

    let (tx, rx) = mpsc::unbounded_channel();
    let _ = tx.send(CodeEvent::Init(ctx.id.clone()).frame());
    let _ = tx.send(CodeEvent::Ping.frame());
    let Ok(guard) = ctx.busy.clone().try_lock_owned() else {
        let _ = tx.send(late_error("error running codes session is busy".into()));
        return sse_response(rx);
    };
    tokio::spawn(async move {
        let pinger = spawn_pinger(tx.clone());
        if let Err(e) = stream_run(&jupyter, &ctx, &r.code, &tx).await {
            let _ = tx.send(late_error(format!("error running codes {e}")));
        }
        pinger.abort();
        drop(guard);
    });
    sse_response(rx)
}

/// One run on the context's kernel: the "nudge" kernel_info request (see `code_events`),
/// the execute request, then events until the run is over or the connection is gone.
async fn stream_run(
    j: &Jupyter,
    ctx: &Context,
    code: &str,
    tx: &UnboundedSender<Bytes>,
) -> Result<(), String> {
    let channel = connected(j, ctx).await?;
    let mut inbox = channel.start_run();
    let started = Instant::now();
    let sent = channel
        .send_shell("kernel_info_request", serde_json::json!({}))
        .and_then(|_| channel.send_execute(code));
    let execute_id = match sent {
        Ok(id) => id,
        Err(e) => {
            channel.end_run();
            return Err(e);
        }
    };
    let mut state = RunState::new(execute_id, started);
    while let Some(msg) = inbox.recv().await {
        for event in state.on_message(&msg) {
            let _ = tx.send(event.frame());
        }
        if state.finished() {
            break;
        }
    }
    channel.end_run();
    Ok(())
}
