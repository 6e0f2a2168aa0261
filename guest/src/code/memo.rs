//! What the provider remembers host-wide (`abx:epp/memo`) about code: whether
//! a sandbox's execd has a Jupyter server, and the language and cwd of the
//! contexts made here (execd needs a run's language even when it names a
//! context, and does not report a context's cwd).

use crate::bindings::abx::epp::memo;
use crate::config;
use crate::models::ExecdContext;

/// A sandbox keeps its execd, and a context its kernel, for their lifetime.
const MEMO_TTL_MS: u32 = 24 * 3600 * 1000;

fn key(what: &str, sandbox_id: &str, id: &str) -> Option<String> {
    let s = config::settings().ok()?;
    Some(format!("code-{what}:{}:{sandbox_id}:{id}", s.origin))
}

/// What is known about the sandbox's Jupyter server.
pub fn kernels(sandbox_id: &str) -> Option<bool> {
    match memo::get(&key("kernels", sandbox_id, "")?).as_deref() {
        Some("yes") => Some(true),
        Some("no") => Some(false),
        _ => None,
    }
}

pub fn remember_kernels(sandbox_id: &str, present: bool) {
    if let Some(key) = key("kernels", sandbox_id, "") {
        memo::put(&key, if present { "yes" } else { "no" }, MEMO_TTL_MS);
    }
}

pub fn remember_context(sandbox_id: &str, context: &ExecdContext) {
    if let (Some(key), Ok(json)) = (
        key("context", sandbox_id, &context.id),
        serde_json::to_string(context),
    ) {
        memo::put(&key, &json, MEMO_TTL_MS);
    }
}

pub fn context(sandbox_id: &str, context_id: &str) -> Option<ExecdContext> {
    let json = memo::get(&key("context", sandbox_id, context_id)?)?;
    serde_json::from_str(&json).ok()
}

pub fn forget_context(sandbox_id: &str, context_id: &str) {
    if let Some(key) = key("context", sandbox_id, context_id) {
        memo::forget(&key);
    }
}
