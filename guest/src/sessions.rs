//! sessions over execd's bash sessions: `POST /session`, `POST /session/{id}/run`
//! (SSE, read like `/command`: crate::commands) and `DELETE /session/{id}`.
//!
//! execd keeps a session as an environment and a working directory, not as a live
//! shell: every run is a new `bash` that starts with the exported variables and the
//! directory the previous run ended with. Shell functions, aliases and unexported
//! variables do not carry over (execd 1.1.1). Output is line by line with stderr
//! merged into stdout and blank lines dropped. The session id is all a run needs, so
//! any process may run in a session another created.

use crate::commands::{self, CommandStream};
use crate::error::{self, Result, invalid, not_found};
use crate::execd::Execd;
use crate::http::encode;
use crate::lifecycle::check_id;
use crate::sse::FrameReader;
use crate::time::monotonic_ms;
use serde::{Deserialize, Serialize};

#[derive(Serialize)]
struct Create<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<&'a str>,
}

#[derive(Deserialize)]
struct Created {
    session_id: String,
}

#[derive(Serialize)]
struct Run<'a> {
    command: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<u64>,
}

fn gone(sandbox_id: &str, session_id: &str) -> crate::bindings::abx::epp::types::EppError {
    not_found(format!(
        "session {session_id} does not exist in sandbox {sandbox_id} (it was closed, or never \
         created there); create one with sessions.create"
    ))
}

pub fn create(sandbox_id: &str, cwd: Option<&str>) -> Result<String> {
    if cwd.is_some_and(|c| c.trim().is_empty()) {
        return Err(invalid(
            "`cwd` is empty; leave it out for the default directory",
        ));
    }
    let mut execd = Execd::connect(sandbox_id)?;
    let body = serde_json::to_vec(&Create { cwd }).expect("serialisable");
    let resp = execd.send(
        |e| {
            Ok(e.request("POST", "/session")?
                .header("content-type", "application/json"))
        },
        &body,
    )?;
    let subject = "a new bash session";
    let created: Created = execd.json(execd.check(resp, subject)?, subject)?;
    Ok(created.session_id)
}

pub fn run(
    sandbox_id: &str,
    session_id: &str,
    cmd: &str,
    timeout_ms: Option<u64>,
) -> Result<CommandStream> {
    check_id("session", session_id)?;
    if cmd.trim().is_empty() {
        return Err(invalid("`cmd` is empty; give a shell command line"));
    }
    if timeout_ms == Some(0) {
        return Err(invalid("`timeout` must be positive"));
    }
    let mut execd = Execd::connect(sandbox_id)?;
    let body = serde_json::to_vec(&Run {
        command: cmd,
        timeout: timeout_ms,
    })
    .expect("serialisable");
    let path = format!("/session/{}/run", encode(session_id));
    let timeouts = commands::command_timeouts(timeout_ms);
    let started_ms = monotonic_ms();
    let resp = execd.send(
        |e| {
            Ok(e.request("POST", &path)?
                .header("content-type", "application/json")
                .header("accept", "text/event-stream")
                .timeouts(timeouts))
        },
        &body,
    )?;
    if resp.status == 500 {
        let body = resp.read_all(64 * 1024).unwrap_or_default();
        if String::from_utf8_lossy(&body).contains("context not found") {
            return Err(gone(sandbox_id, session_id));
        }
        return Err(error::status(
            500,
            &body,
            execd.target(),
            &format!("session {session_id}"),
        ));
    }
    let resp = execd.check(resp, &format!("a run in session {session_id}"))?;
    Ok(commands::follow_session(
        FrameReader::new(resp.into_reader()),
        sandbox_id,
        session_id,
        execd.target().to_string(),
        timeout_ms,
        started_ms,
    ))
}

pub fn close(sandbox_id: &str, session_id: &str) -> Result<()> {
    check_id("session", session_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let path = format!("/session/{}", encode(session_id));
    let resp = execd.send(|e| e.request("DELETE", &path), &[])?;
    if resp.status == 404 {
        return Err(gone(sandbox_id, session_id));
    }
    execd
        .check(resp, &format!("session {session_id}"))
        .map(drop)
}
