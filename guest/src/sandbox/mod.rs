//! sandbox.lifecycle, sandbox.timeout and sandbox.pause: `create` (with its
//! `volumes` and `policy`, and the label that lets an abandoned create be
//! undone, `label`), the wait until a sandbox answers (`ready`), pages of the
//! list (`list`, in the order `order` keeps), `metadata`, and the rest of a
//! sandbox's life here.

mod create;
mod label;
mod list;
mod metadata;
pub mod order;
mod policy;
mod ready;
mod volumes;

pub use create::create;
pub use label::undo_create;
pub use list::list;
pub use metadata::set_metadata;

use crate::bindings::exports::abx::epp::infra::SandboxInfo;
use crate::config;
use crate::error::{Result, conflict, invalid};
use crate::execd::Execd;
use crate::lifecycle::Lifecycle;
use crate::models::Sandbox;
use crate::templates;
use crate::time::{now_unix, rfc3339};
use ready::ensure_ready;

/// Converts the server's sandbox into EPP's. A sandbox made from a snapshot
/// has no image; its template is the snapshot's name (crate::templates).
pub fn info(sandbox: Sandbox, image_hint: Option<&str>) -> Result<SandboxInfo> {
    let settings = config::settings()?;
    let image = sandbox
        .image
        .and_then(|i| i.uri)
        .or_else(|| image_hint.map(str::to_string));
    let template = match (&sandbox.snapshot_id, &image) {
        (Some(snapshot), _) => templates::snapshot_name(snapshot),
        (None, Some(image)) => settings.template_for(image),
        (None, None) => String::new(),
    };
    Ok(SandboxInfo {
        template,
        image,
        sandbox_id: sandbox.id,
        state: sandbox.status.state.to_ascii_lowercase(),
        metadata: label::hidden(sandbox.metadata.unwrap_or_default()),
        created_at: sandbox.created_at,
        expires_at: sandbox.expires_at,
    })
}

/// The server's state names are capitalised (`Running`).
fn server_state(state: &str) -> String {
    let mut chars = state.trim().chars();
    match chars.next() {
        Some(first) => {
            first.to_ascii_uppercase().to_string() + &chars.as_str().to_ascii_lowercase()
        }
        None => String::new(),
    }
}

pub fn connect(id: &str) -> Result<SandboxInfo> {
    let lifecycle = Lifecycle::new()?;
    let sandbox = lifecycle.get(id)?;
    // Like E2B, connecting to a paused sandbox resumes it.
    if sandbox.status.state == "Paused" {
        return resume(id);
    }
    if !matches!(
        sandbox.status.state.as_str(),
        "Running" | "Pending" | "Resuming"
    ) {
        return Err(conflict(format!(
            "sandbox {id} is {} and cannot be connected to",
            sandbox.status.state
        )));
    }
    ensure_ready(&lifecycle, id, None)?;
    info(lifecycle.get(id)?, None)
}

pub fn get_info(id: &str) -> Result<SandboxInfo> {
    info(Lifecycle::new()?.get(id)?, None)
}

pub fn kill(id: &str) -> Result<()> {
    let result = Lifecycle::new()?.delete(id);
    Execd::forget(id);
    result
}

pub fn set_timeout(id: &str, timeout: u32) -> Result<String> {
    if timeout == 0 {
        return Err(invalid("`timeout` must be at least 1 second from now"));
    }
    Lifecycle::new()?.renew(id, rfc3339(now_unix() + u64::from(timeout)))
}

pub fn pause(id: &str) -> Result<()> {
    let result = Lifecycle::new()?.pause(id);
    Execd::forget(id);
    result
}

pub fn resume(id: &str) -> Result<SandboxInfo> {
    let lifecycle = Lifecycle::new()?;
    lifecycle.resume(id)?;
    // The endpoint may change after a resume (Kubernetes): resolve it again.
    Execd::forget(id);
    ensure_ready(&lifecycle, id, None)?;
    info(lifecycle.get(id)?, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states() {
        assert_eq!(server_state("running"), "Running");
        assert_eq!(server_state("PAUSED"), "Paused");
    }
}
