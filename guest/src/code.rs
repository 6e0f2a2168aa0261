//! code.interpret over execd's `/code` routes: a Jupyter server runs behind
//! execd on code-interpreter images (template `code`), one kernel per context.
//!
//! Whether a sandbox has that server is asked of execd, not guessed from the
//! image: execd answers a run in a context that does not exist with "context
//! not found" when it has a Jupyter server and with "language runtime server
//! not configured" when it has none, at once and without side effects. The
//! answer is remembered per sandbox (`memo`).
//!
//! execd needs a run's language even when it names a context (without one it
//! runs the code as a shell command), so a context's language and cwd are
//! remembered when it is created here and asked of execd otherwise.

use crate::bindings::abx::epp::memo;
use crate::bindings::exports::abx::epp::infra::{
    CodeContext, CodeError, CodeEvent, CodeOutput, CodeRequest, CodeResult,
};
use crate::commands;
use crate::config;
use crate::error::{self, Error, Result, invalid, not_found};
use crate::execd::Execd;
use crate::http::{Response, Timeouts, encode};
use crate::lifecycle::check_id;
use crate::models::ExecEvent;
use crate::refusal::{self, Refusal};
use crate::sse::{Frame, FrameReader};
use crate::time::monotonic_ms;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::cell::RefCell;

/// The language of a run or context that names none (execd's default kernel).
const DEFAULT_LANGUAGE: &str = "python";
/// A sandbox keeps its execd, and a context its kernel, for their lifetime.
const MEMO_TTL_MS: u32 = 24 * 3600 * 1000;
/// How long a timed-out run may take to end after its kernel is interrupted.
const INTERRUPT_GRACE_MS: u64 = 10_000;
/// The context id of the probe run: never a real one (execd's are hex).
const PROBE_CONTEXT: &str = "epp-probe-no-such-context";

#[derive(Serialize)]
struct NewContext<'a> {
    language: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<&'a str>,
}

/// execd's CodeContext.
#[derive(Deserialize, Serialize, Clone)]
struct ExecdContext {
    #[serde(default)]
    id: String,
    #[serde(default)]
    language: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cwd: Option<String>,
}

impl ExecdContext {
    fn into_wit(self) -> CodeContext {
        CodeContext {
            context_id: self.id,
            language: self.language,
            cwd: self.cwd.filter(|c| !c.is_empty()),
        }
    }
}

#[derive(Serialize)]
struct RunCode<'a> {
    context: RunContext<'a>,
    code: &'a str,
}

#[derive(Serialize)]
struct RunContext<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    language: &'a str,
}

// ------------------------------------------------------------------ memo

fn memo_key(what: &str, sandbox_id: &str, id: &str) -> Option<String> {
    let s = config::settings().ok()?;
    Some(format!("code-{what}:{}:{sandbox_id}:{id}", s.origin))
}

/// What is known about the sandbox's Jupyter server.
fn remembered_kernels(sandbox_id: &str) -> Option<bool> {
    match memo::get(&memo_key("kernels", sandbox_id, "")?).as_deref() {
        Some("yes") => Some(true),
        Some("no") => Some(false),
        _ => None,
    }
}

fn remember_kernels(sandbox_id: &str, present: bool) {
    if let Some(key) = memo_key("kernels", sandbox_id, "") {
        memo::put(&key, if present { "yes" } else { "no" }, MEMO_TTL_MS);
    }
}

fn remember_context(sandbox_id: &str, context: &ExecdContext) {
    if let (Some(key), Ok(json)) = (
        memo_key("context", sandbox_id, &context.id),
        serde_json::to_string(context),
    ) {
        memo::put(&key, &json, MEMO_TTL_MS);
    }
}

fn remembered_context(sandbox_id: &str, context_id: &str) -> Option<ExecdContext> {
    let json = memo::get(&memo_key("context", sandbox_id, context_id)?)?;
    serde_json::from_str(&json).ok()
}

fn forget_context(sandbox_id: &str, context_id: &str) {
    if let Some(key) = memo_key("context", sandbox_id, context_id) {
        memo::forget(&key);
    }
}

// ------------------------------------------------------------------ errors

fn no_kernels(sandbox_id: &str) -> Error {
    error::unsupported(
        "code.interpret",
        &format!(
            "sandbox {sandbox_id} has no code interpreter: its execd has no Jupyter server \
             behind it, so it was not made from a code-interpreter image. Create the sandbox \
             with template `code` (image opensandbox/code-interpreter) to run code in kernels, \
             or run code here with commands.run"
        ),
    )
}

fn no_context(sandbox_id: &str, context_id: &str) -> Error {
    not_found(format!(
        "code context {context_id} does not exist in sandbox {sandbox_id} (it was removed or \
         restarted, or never created there); code.list_contexts shows the sandbox's contexts"
    ))
}

fn busy(sandbox_id: &str, what: &str) -> Error {
    let what = what.trim_end_matches(&format!(" in sandbox {sandbox_id}"));
    error::conflict(format!(
        "{what} in sandbox {sandbox_id} is running other code (execd refuses a second run \
         rather than queueing it); wait for that run to finish, interrupt it with \
         code.interrupt, or use another context"
    ))
}

/// execd's answer to a `/code` request that failed before it started.
fn refused(execd: &Execd, resp: Response, context: Option<&str>, language: &str) -> Error {
    let status = resp.status;
    let body = resp.read_all(64 * 1024).unwrap_or_default();
    let sandbox_id = &execd.sandbox_id;
    match refusal::of_answer(status, &body) {
        Refusal::NoKernels => {
            remember_kernels(sandbox_id, false);
            no_kernels(sandbox_id)
        }
        Refusal::NoContext => no_context(sandbox_id, context.unwrap_or("(the default one)")),
        Refusal::Busy => {
            let what = match context {
                Some(id) => format!("code context {id}"),
                None => format!("the default {language} context"),
            };
            busy(sandbox_id, &what)
        }
        Refusal::UnknownLanguage => invalid(format!(
            "sandbox {sandbox_id} does not know the language `{language}`; code.languages lists \
             the languages its kernels serve"
        )),
        _ => error::status(status, &body, execd.target(), "a code run"),
    }
}

/// `POST /code` with `body`, asking for execd's event stream.
fn post_code(execd: &mut Execd, body: &[u8], timeouts: Timeouts) -> Result<Response> {
    execd.send(
        |e| {
            Ok(e.request("POST", "/code")?
                .header("content-type", "application/json")
                .header("accept", "text/event-stream")
                .timeouts(timeouts))
        },
        body,
    )
}

// ------------------------------------------------------------------ kernels

/// Fails with `unsupported` unless the sandbox's execd has a Jupyter server.
fn require_kernels(execd: &mut Execd) -> Result<()> {
    match remembered_kernels(&execd.sandbox_id) {
        Some(true) => return Ok(()),
        Some(false) => return Err(no_kernels(&execd.sandbox_id)),
        None => {}
    }
    let body = serde_json::to_vec(&RunCode {
        context: RunContext {
            id: Some(PROBE_CONTEXT),
            language: DEFAULT_LANGUAGE,
        },
        code: "0",
    })
    .expect("serialisable");
    let resp = post_code(execd, &body, Timeouts::API)?;
    let status = resp.status;
    let body = resp.read_all(64 * 1024).unwrap_or_default();
    match refusal::of_answer(status, &body) {
        Refusal::NoContext => {
            remember_kernels(&execd.sandbox_id, true);
            Ok(())
        }
        Refusal::NoKernels => {
            remember_kernels(&execd.sandbox_id, false);
            Err(no_kernels(&execd.sandbox_id))
        }
        _ => Err(error::upstream(format!(
            "{} gave an unexpected answer (HTTP {status}) when asked whether it has a Jupyter \
             server: {}",
            execd.target(),
            String::from_utf8_lossy(&body)
                .chars()
                .take(200)
                .collect::<String>()
        ))),
    }
}

fn check_language(language: Option<&str>) -> Result<&str> {
    match language {
        None => Ok(DEFAULT_LANGUAGE),
        Some(l) if l.trim().is_empty() => Err(invalid(
            "`language` is empty; leave it out for Python, or give one of code.languages",
        )),
        Some(l) => Ok(l),
    }
}

fn check_cwd(cwd: Option<&str>) -> Result<()> {
    if cwd.is_some_and(|c| c.trim().is_empty()) {
        return Err(invalid(
            "`cwd` is empty; leave it out for the kernel's default directory",
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------ contexts

fn new_context(execd: &mut Execd, language: &str, cwd: Option<&str>) -> Result<ExecdContext> {
    let body = serde_json::to_vec(&NewContext { language, cwd }).expect("serialisable");
    let resp = execd.send(
        |e| {
            Ok(e.request("POST", "/code/context")?
                .header("content-type", "application/json"))
        },
        &body,
    )?;
    if !(200..300).contains(&resp.status) {
        return Err(refused(execd, resp, None, language));
    }
    let subject = format!("a new {language} code context");
    let mut context: ExecdContext = execd.json(resp, &subject)?;
    if context.language.is_empty() {
        context.language = language.to_string();
    }
    if context.cwd.is_none() {
        context.cwd = cwd.map(str::to_string);
    }
    remember_context(&execd.sandbox_id, &context);
    Ok(context)
}

pub fn create_context(
    sandbox_id: &str,
    language: Option<&str>,
    cwd: Option<&str>,
) -> Result<CodeContext> {
    let language = check_language(language)?;
    check_cwd(cwd)?;
    let mut execd = Execd::connect(sandbox_id)?;
    require_kernels(&mut execd)?;
    new_context(&mut execd, language, cwd).map(ExecdContext::into_wit)
}

/// execd's record of a context (language; cwd only as remembered here).
fn fetch_context(execd: &mut Execd, context_id: &str) -> Result<ExecdContext> {
    check_id("code context", context_id)?;
    let path = format!("/code/contexts/{}", encode(context_id));
    let resp = execd.send(|e| e.request("GET", &path), &[])?;
    if resp.status == 404 {
        forget_context(&execd.sandbox_id, context_id);
        return Err(no_context(&execd.sandbox_id, context_id));
    }
    let subject = format!("code context {context_id}");
    let resp = execd.check(resp, &subject)?;
    let mut context: ExecdContext = execd.json(resp, &subject)?;
    if let Some(known) = remembered_context(&execd.sandbox_id, context_id) {
        context.cwd = context.cwd.or(known.cwd);
    }
    Ok(context)
}

pub fn get_context(sandbox_id: &str, context_id: &str) -> Result<CodeContext> {
    let mut execd = Execd::connect(sandbox_id)?;
    require_kernels(&mut execd)?;
    fetch_context(&mut execd, context_id).map(ExecdContext::into_wit)
}

pub fn list_contexts(sandbox_id: &str, language: Option<&str>) -> Result<Vec<CodeContext>> {
    if language.is_some_and(|l| l.trim().is_empty()) {
        return Err(invalid(
            "`language` is empty; leave it out to list every context",
        ));
    }
    let mut execd = Execd::connect(sandbox_id)?;
    require_kernels(&mut execd)?;
    let path = match language {
        Some(l) => format!("/code/contexts?language={}", encode(l)),
        None => "/code/contexts".to_string(),
    };
    let resp = execd.send(|e| e.request("GET", &path), &[])?;
    let subject = "the code contexts";
    let resp = execd.check(resp, subject)?;
    let contexts: Option<Vec<ExecdContext>> = execd.json(resp, subject)?;
    Ok(contexts
        .unwrap_or_default()
        .into_iter()
        .map(|mut c| {
            if c.cwd.is_none() {
                c.cwd = remembered_context(sandbox_id, &c.id).and_then(|k| k.cwd);
            }
            c.into_wit()
        })
        .collect())
}

fn delete_context(execd: &mut Execd, context_id: &str) -> Result<()> {
    check_id("code context", context_id)?;
    let path = format!("/code/contexts/{}", encode(context_id));
    let resp = execd.send(|e| e.request("DELETE", &path), &[])?;
    forget_context(&execd.sandbox_id, context_id);
    if resp.status == 404 {
        return Err(no_context(&execd.sandbox_id, context_id));
    }
    execd
        .check(resp, &format!("code context {context_id}"))
        .map(drop)
}

pub fn remove_context(sandbox_id: &str, context_id: &str) -> Result<()> {
    let mut execd = Execd::connect(sandbox_id)?;
    require_kernels(&mut execd)?;
    delete_context(&mut execd, context_id)
}

/// execd has no restart: the context is replaced by a new one of the same
/// language and cwd (a new id; the old one is then not found).
pub fn restart_context(sandbox_id: &str, context_id: &str) -> Result<CodeContext> {
    let mut execd = Execd::connect(sandbox_id)?;
    require_kernels(&mut execd)?;
    let old = fetch_context(&mut execd, context_id)?;
    delete_context(&mut execd, context_id)?;
    new_context(&mut execd, &old.language, old.cwd.as_deref()).map(ExecdContext::into_wit)
}

/// Interrupts the context's kernel. `DELETE /code?id=` also takes command and
/// bash-session ids (it would kill or close them), so the id is first checked
/// to be a code context.
pub fn interrupt(sandbox_id: &str, context_id: &str) -> Result<()> {
    let mut execd = Execd::connect(sandbox_id)?;
    require_kernels(&mut execd)?;
    fetch_context(&mut execd, context_id)?;
    interrupt_kernel(&mut execd, context_id)
}

fn interrupt_kernel(execd: &mut Execd, context_id: &str) -> Result<()> {
    let path = format!("/code?id={}", encode(context_id));
    let resp = execd.send(|e| e.request("DELETE", &path), &[])?;
    execd
        .check(resp, &format!("the run in code context {context_id}"))
        .map(drop)
}

#[derive(Deserialize)]
struct KernelSpecs {
    kernelspecs: std::collections::BTreeMap<String, KernelSpecEntry>,
}

#[derive(Deserialize)]
struct KernelSpecEntry {
    spec: KernelSpec,
}

#[derive(Deserialize)]
struct KernelSpec {
    language: String,
}

/// The languages of the sandbox's installed Jupyter kernels (what execd
/// matches a context's language against), asked of `jupyter` in the sandbox.
pub fn languages(sandbox_id: &str) -> Result<Vec<String>> {
    let mut execd = Execd::connect(sandbox_id)?;
    require_kernels(&mut execd)?;
    let (code, stdout, stderr) =
        commands::run_to_end(sandbox_id, "jupyter kernelspec list --json", 30_000)?;
    if code != 0 {
        return Err(error::upstream(format!(
            "sandbox {sandbox_id} could not list its Jupyter kernels (`jupyter kernelspec list` \
             exited {code}: {})",
            stderr.trim().chars().take(300).collect::<String>()
        )));
    }
    parse_languages(&stdout).map_err(|e| {
        error::upstream(format!(
            "sandbox {sandbox_id}'s `jupyter kernelspec list --json` printed something \
             unexpected ({e})"
        ))
    })
}

fn parse_languages(json: &str) -> std::result::Result<Vec<String>, serde_json::Error> {
    let specs: KernelSpecs = serde_json::from_str(json)?;
    let mut languages: Vec<String> = specs
        .kernelspecs
        .into_values()
        .map(|k| k.spec.language.to_lowercase())
        .collect();
    languages.sort();
    languages.dedup();
    Ok(languages)
}

// ------------------------------------------------------------------ runs

/// A run's events, read from execd's `/code` stream.
pub struct CodeStream(RefCell<RunState>);

struct RunState {
    reader: FrameReader,
    execd: Execd,
    /// The context named by `init` (execd's default one when none was given).
    context_id: Option<String>,
    /// The run's execution count, once execd said.
    count: Option<u32>,
    /// An `execution_count` event came: the next result is the last expression's value.
    main_next: bool,
    /// The code raised (its `error` event came).
    raised: bool,
    /// execd said `execution_complete`. execd 1.1.1 says it when the kernel first
    /// reports idle, which its per-run connection makes happen before the output
    /// (testbed README, "Code-interpreter sandboxes"): the run's end is the end
    /// of the stream, and this only tells a finished run from a lost connection.
    completed: bool,
    finished: bool,
    timeout_ms: Option<u64>,
    started_ms: u64,
}

/// The language of a context, which a run in it must name (without one execd
/// runs the code as a shell command): remembered when this process made the
/// context, else asked of execd.
fn context_language(execd: &mut Execd, context_id: &str) -> Result<String> {
    let context = match remembered_context(&execd.sandbox_id, context_id) {
        Some(context) => context,
        None => {
            require_kernels(execd)?;
            fetch_context(execd, context_id)?
        }
    };
    Ok(if context.language.is_empty() {
        DEFAULT_LANGUAGE.to_string()
    } else {
        context.language
    })
}

pub fn run(req: CodeRequest) -> Result<CodeStream> {
    if req.code.is_empty() {
        return Err(invalid("`code` is empty; give the code to run"));
    }
    if req.timeout_ms == Some(0) {
        return Err(invalid("`timeout` must be positive"));
    }
    if let Some(id) = &req.context_id {
        check_id("code context", id)?;
    }
    check_language(req.language.as_deref())?;
    let mut execd = Execd::connect(&req.sandbox_id)?;
    if remembered_kernels(&req.sandbox_id) == Some(false) {
        return Err(no_kernels(&req.sandbox_id));
    }
    let language = match (&req.language, &req.context_id) {
        (Some(language), _) => language.clone(),
        (None, Some(id)) => context_language(&mut execd, id)?,
        (None, None) => DEFAULT_LANGUAGE.to_string(),
    };
    let language = language.as_str();
    let body = serde_json::to_vec(&RunCode {
        context: RunContext {
            id: req.context_id.as_deref(),
            language,
        },
        code: &req.code,
    })
    .expect("serialisable");
    let started_ms = monotonic_ms();
    let resp = post_code(
        &mut execd,
        &body,
        commands::command_timeouts(req.timeout_ms),
    )?;
    if !(200..300).contains(&resp.status) {
        return Err(refused(&execd, resp, req.context_id.as_deref(), language));
    }
    remember_kernels(&req.sandbox_id, true);
    Ok(CodeStream(RefCell::new(RunState {
        reader: FrameReader::new(resp.into_reader()),
        execd,
        context_id: req.context_id.clone(),
        count: None,
        main_next: false,
        raised: false,
        completed: false,
        finished: false,
        timeout_ms: req.timeout_ms,
        started_ms,
    })))
}

/// A Jupyter MIME bundle as execd sends it (`text/plain` renamed `text`):
/// every value as text, JSON values as JSON text.
fn mime_bundle(results: serde_json::Map<String, Value>) -> Vec<(String, String)> {
    results
        .into_iter()
        .map(|(mime, value)| {
            let mime = if mime == "text" {
                "text/plain".to_string()
            } else {
                mime
            };
            let data = match value {
                Value::String(s) => s,
                // nbformat's multi-line strings.
                Value::Array(lines) if lines.iter().all(Value::is_string) => {
                    lines.iter().filter_map(Value::as_str).collect::<String>()
                }
                other => other.to_string(),
            };
            (mime, data)
        })
        .collect()
}

impl RunState {
    fn target(&self) -> String {
        match &self.context_id {
            Some(id) => format!("code context {id} in sandbox {}", self.execd.sandbox_id),
            None => format!("a code run in sandbox {}", self.execd.sandbox_id),
        }
    }

    fn finish(&mut self, out: &mut Vec<CodeEvent>) {
        self.finished = true;
        out.push(CodeEvent::Finished(self.count));
    }

    fn convert(&mut self, event: ExecEvent, out: &mut Vec<CodeEvent>) {
        match event.kind.as_str() {
            "init" => {
                let id = event.text.unwrap_or_default();
                self.context_id = Some(id.clone());
                out.push(CodeEvent::Started(id));
            }
            "stdout" => out.push(CodeEvent::Stdout(event.text.unwrap_or_default())),
            "stderr" => out.push(CodeEvent::Stderr(event.text.unwrap_or_default())),
            "execution_count" => {
                self.count = event.execution_count.and_then(|c| u32::try_from(c).ok());
                self.main_next = true;
            }
            "result" => out.push(CodeEvent::Rich(CodeOutput {
                data: mime_bundle(event.results.unwrap_or_default()),
                is_main_result: std::mem::take(&mut self.main_next),
            })),
            "error" => {
                self.raised = true;
                let e = event.error.unwrap_or_default();
                out.push(CodeEvent::Error(CodeError {
                    name: e.ename,
                    value: e.evalue,
                    traceback: e.traceback,
                }));
            }
            "execution_complete" => self.completed = true,
            // status, ping, and kinds of later execd versions.
            _ => {}
        }
    }

    fn overdue(&self) -> Option<u64> {
        let t = self.timeout_ms?;
        (monotonic_ms().saturating_sub(self.started_ms) >= t).then_some(t)
    }

    /// The run passed its timeout: its kernel is interrupted (the context and its
    /// state stay) and the caller gets E5004.
    fn time_out(&mut self, timeout_ms: u64) -> Error {
        self.finished = true;
        let target = self.target();
        let interrupted = match self.context_id.clone() {
            Some(id) => interrupt_kernel(&mut self.execd, &id).is_ok(),
            None => false,
        };
        if interrupted {
            // Answer once the run has ended, so that the context takes the next run.
            let until = monotonic_ms() + INTERRUPT_GRACE_MS;
            while monotonic_ms() < until && matches!(self.reader.next(), Ok(Some(_))) {}
        }
        self.reader.close();
        error::timed_out(format!(
            "{target} ran longer than its timeout of {} s; {}",
            timeout_ms as f64 / 1000.0,
            if interrupted {
                "its kernel was interrupted (the context and its state remain)"
            } else {
                "interrupting its kernel failed: interrupt it with code.interrupt"
            }
        ))
    }

    fn next_batch(&mut self) -> Result<Option<Vec<CodeEvent>>> {
        if self.finished {
            return Ok(None);
        }
        let mut out = Vec::new();
        // Block for the first event, then take what is already buffered.
        while out.is_empty() || (!self.finished && self.reader.has_buffered()) {
            if let Some(t) = self.overdue() {
                return Err(self.time_out(t));
            }
            let frame = match self.reader.next() {
                Ok(frame) => frame,
                Err(t) => {
                    self.finished = true;
                    if let Some(t) = self.overdue() {
                        return Err(self.time_out(t));
                    }
                    let e = error::broken_body(t, &self.target());
                    return Err(commands::broken_off(&self.execd.sandbox_id, "the code", e));
                }
            };
            match frame {
                Some(Ok(Frame::Event(event))) => self.convert(event, &mut out),
                Some(Ok(Frame::Error { code, message })) => {
                    self.finished = true;
                    // execd starts the stream (`init`) before it tries the kernel.
                    if refusal::of_frame(&message) == Refusal::Busy {
                        return Err(busy(&self.execd.sandbox_id, &self.target()));
                    }
                    return Err(error::upstream(format!(
                        "{} reported {code}: {message}",
                        self.target()
                    )));
                }
                Some(Err(bad)) => {
                    self.finished = true;
                    return Err(error::upstream(format!("{}: {bad}", self.target())));
                }
                None if self.completed || self.raised => self.finish(&mut out),
                None => {
                    self.finished = true;
                    let e = error::upstream(format!(
                        "the output of {} ended before the run finished (connection lost); the \
                         code may still be running: interrupt it with code.interrupt",
                        self.target()
                    ));
                    return Err(commands::broken_off(&self.execd.sandbox_id, "the code", e));
                }
            }
            if self.finished {
                break;
            }
        }
        if self.finished {
            self.reader.close();
        }
        Ok(Some(out))
    }
}

impl CodeStream {
    pub fn next(&self) -> Result<Option<Vec<CodeEvent>>> {
        self.0.borrow_mut().next_batch()
    }
}

/// abx:epp 1.0's collected run: the events of `run`, gathered.
pub fn run_collected(req: CodeRequest) -> Result<CodeResult> {
    let stream = run(req)?;
    let mut result = CodeResult {
        stdout: String::new(),
        stderr: String::new(),
        results: Vec::new(),
        error: None,
    };
    while let Some(events) = stream.next()? {
        for event in events {
            match event {
                CodeEvent::Stdout(t) => result.stdout.push_str(&t),
                CodeEvent::Stderr(t) => result.stderr.push_str(&t),
                CodeEvent::Rich(output) => result.results.push(output.data),
                CodeEvent::Error(e) => result.error = Some(format!("{}: {}", e.name, e.value)),
                CodeEvent::Started(_) | CodeEvent::Finished(_) => {}
            }
        }
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mime_bundle_keeps_every_representation_as_text() {
        let results: serde_json::Map<String, Value> = serde_json::from_str(
            r#"{"text":"1","image/png":"iVBO","application/json":{"a":[1,2]},"text/html":["<b>","x</b>"]}"#,
        )
        .unwrap();
        let mut bundle = mime_bundle(results);
        bundle.sort();
        assert_eq!(
            bundle,
            vec![
                ("application/json".into(), r#"{"a":[1,2]}"#.into()),
                ("image/png".into(), "iVBO".into()),
                ("text/html".into(), "<b>x</b>".into()),
                ("text/plain".into(), "1".into()),
            ]
        );
    }

    #[test]
    fn languages_come_from_the_kernel_specs() {
        let json = r#"{"kernelspecs":{"python3":{"resource_dir":"/x","spec":{"language":"python","display_name":"Python 3"}},
            "tslab":{"resource_dir":"/y","spec":{"language":"typescript"}},
            "py2":{"resource_dir":"/z","spec":{"language":"Python"}}}}"#;
        assert_eq!(
            parse_languages(json).unwrap(),
            vec!["python".to_string(), "typescript".to_string()]
        );
        assert!(parse_languages("not json").is_err());
    }
}
