//! Whether a sandbox's execd has a Jupyter server behind it, asked of execd
//! rather than guessed from the image: execd answers a run in a context that
//! does not exist with "context not found" when it has one and with "language
//! runtime server not configured" when it has none, at once and without side
//! effects. The answer is remembered per sandbox (crate::code::memo).
//! Also what execd's refusals of `/code` requests mean for the caller.

use super::{DEFAULT_LANGUAGE, memo};
use crate::error::{self, Error, Result, invalid, not_found};
use crate::execd::Execd;
use crate::http::{Response, Timeouts};
use crate::models::{RunCode, RunContext};
use crate::refusal::{self, Refusal};

/// The context id of the probe run: never a real one (execd's are hex).
const PROBE_CONTEXT: &str = "epp-probe-no-such-context";

pub fn no_kernels(sandbox_id: &str) -> Error {
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

pub fn no_context(sandbox_id: &str, context_id: &str) -> Error {
    not_found(format!(
        "code context {context_id} does not exist in sandbox {sandbox_id} (it was removed or \
         restarted, or never created there); code.list_contexts shows the sandbox's contexts"
    ))
}

/// `what` ("code context 3f…", "the default python context") runs other code.
pub fn busy(sandbox_id: &str, what: &str) -> Error {
    let what = what.trim_end_matches(&format!(" in sandbox {sandbox_id}"));
    error::conflict(format!(
        "{what} in sandbox {sandbox_id} is running other code (execd refuses a second run \
         rather than queueing it); wait for that run to finish, interrupt it with \
         code.interrupt, or use another context"
    ))
}

/// execd's answer to a `/code` request that failed before it started.
pub fn refused(execd: &Execd, resp: Response, context: Option<&str>, language: &str) -> Error {
    let status = resp.status;
    let body = resp.read_all(64 * 1024).unwrap_or_default();
    let sandbox_id = &execd.sandbox_id;
    match refusal::of_answer(status, &body) {
        Refusal::NoKernels => {
            memo::remember_kernels(sandbox_id, false);
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
pub fn post_code(execd: &mut Execd, body: &[u8], timeouts: Timeouts) -> Result<Response> {
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

/// Fails with `unsupported` unless the sandbox's execd has a Jupyter server.
pub fn require(execd: &mut Execd) -> Result<()> {
    match memo::kernels(&execd.sandbox_id) {
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
            memo::remember_kernels(&execd.sandbox_id, true);
            Ok(())
        }
        Refusal::NoKernels => {
            memo::remember_kernels(&execd.sandbox_id, false);
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
