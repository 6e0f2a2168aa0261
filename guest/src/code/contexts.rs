//! Code contexts (one kernel each, with its own state): create, list, get,
//! remove, restart, and interrupting the run in one.

use super::kernels::{self, no_context};
use super::{DEFAULT_LANGUAGE, memo};
use crate::bindings::exports::abx::epp::infra::CodeContext;
use crate::error::{Result, invalid};
use crate::execd::Execd;
use crate::http::encode;
use crate::lifecycle::check_id;
use crate::models::{ExecdContext, NewContext};
use crate::refusal::{self, Refusal};

fn into_wit(context: ExecdContext) -> CodeContext {
    CodeContext {
        context_id: context.id,
        language: context.language,
        cwd: context.cwd.filter(|c| !c.is_empty()),
    }
}

pub fn check_language(language: Option<&str>) -> Result<&str> {
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
        return Err(kernels::refused(execd, resp, None, language));
    }
    let subject = format!("a new {language} code context");
    let mut context: ExecdContext = execd.json(resp, &subject)?;
    if context.language.is_empty() {
        context.language = language.to_string();
    }
    if context.cwd.is_none() {
        context.cwd = cwd.map(str::to_string);
    }
    memo::remember_context(&execd.sandbox_id, &context);
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
    kernels::require(&mut execd)?;
    new_context(&mut execd, language, cwd).map(into_wit)
}

/// execd's record of a context (language; cwd only as remembered here).
fn fetch_context(execd: &mut Execd, context_id: &str) -> Result<ExecdContext> {
    check_id("code context", context_id)?;
    let path = format!("/code/contexts/{}", encode(context_id));
    let resp = execd.send(|e| e.request("GET", &path), &[])?;
    if resp.status == 404 {
        memo::forget_context(&execd.sandbox_id, context_id);
        return Err(no_context(&execd.sandbox_id, context_id));
    }
    let subject = format!("code context {context_id}");
    let resp = execd.check(resp, &subject)?;
    let mut context: ExecdContext = execd.json(resp, &subject)?;
    if let Some(known) = memo::context(&execd.sandbox_id, context_id) {
        context.cwd = context.cwd.or(known.cwd);
    }
    Ok(context)
}

pub fn get_context(sandbox_id: &str, context_id: &str) -> Result<CodeContext> {
    let mut execd = Execd::connect(sandbox_id)?;
    kernels::require(&mut execd)?;
    fetch_context(&mut execd, context_id).map(into_wit)
}

pub fn list_contexts(sandbox_id: &str, language: Option<&str>) -> Result<Vec<CodeContext>> {
    if language.is_some_and(|l| l.trim().is_empty()) {
        return Err(invalid(
            "`language` is empty; leave it out to list every context",
        ));
    }
    let mut execd = Execd::connect(sandbox_id)?;
    kernels::require(&mut execd)?;
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
                c.cwd = memo::context(sandbox_id, &c.id).and_then(|k| k.cwd);
            }
            into_wit(c)
        })
        .collect())
}

fn delete_context(execd: &mut Execd, context_id: &str) -> Result<()> {
    check_id("code context", context_id)?;
    let path = format!("/code/contexts/{}", encode(context_id));
    let resp = execd.send(|e| e.request("DELETE", &path), &[])?;
    memo::forget_context(&execd.sandbox_id, context_id);
    if resp.status == 404 {
        return Err(no_context(&execd.sandbox_id, context_id));
    }
    execd
        .check(resp, &format!("code context {context_id}"))
        .map(drop)
}

pub fn remove_context(sandbox_id: &str, context_id: &str) -> Result<()> {
    let mut execd = Execd::connect(sandbox_id)?;
    kernels::require(&mut execd)?;
    delete_context(&mut execd, context_id)
}

/// execd has no restart: the context is replaced by a new one of the same
/// language and cwd (a new id; the old one is then not found).
pub fn restart_context(sandbox_id: &str, context_id: &str) -> Result<CodeContext> {
    let mut execd = Execd::connect(sandbox_id)?;
    kernels::require(&mut execd)?;
    let old = fetch_context(&mut execd, context_id)?;
    delete_context(&mut execd, context_id)?;
    new_context(&mut execd, &old.language, old.cwd.as_deref()).map(into_wit)
}

/// Interrupts the context's kernel. `DELETE /code?id=` also takes command and
/// bash-session ids (it would kill or close them), so the id is first checked
/// to be a code context.
pub fn interrupt(sandbox_id: &str, context_id: &str) -> Result<()> {
    let mut execd = Execd::connect(sandbox_id)?;
    kernels::require(&mut execd)?;
    fetch_context(&mut execd, context_id)?;
    interrupt_kernel(&mut execd, context_id).map(drop)
}

/// `DELETE /code?id=`: the kernel's run ends as with Ctrl-C. Answers false
/// when execd says nothing runs under that id (any more).
pub fn interrupt_kernel(execd: &mut Execd, context_id: &str) -> Result<bool> {
    let path = format!("/code?id={}", encode(context_id));
    let subject = format!("the run in code context {context_id}");
    let resp = execd.send(|e| e.request("DELETE", &path), &[])?;
    if resp.status == 500 {
        let body = resp.read_all(64 * 1024).unwrap_or_default();
        if refusal::of_answer(500, &body) == Refusal::NotRunning {
            return Ok(false);
        }
        return Err(crate::error::status(500, &body, execd.target(), &subject));
    }
    execd.check(resp, &subject).map(|_| true)
}

/// The language of a context, which a run in it must name (without one execd
/// runs the code as a shell command): remembered when this process made the
/// context, else asked of execd.
pub fn context_language(execd: &mut Execd, context_id: &str) -> Result<String> {
    let context = match memo::context(&execd.sandbox_id, context_id) {
        Some(context) => context,
        None => {
            kernels::require(execd)?;
            fetch_context(execd, context_id)?
        }
    };
    Ok(if context.language.is_empty() {
        DEFAULT_LANGUAGE.to_string()
    } else {
        context.language
    })
}
