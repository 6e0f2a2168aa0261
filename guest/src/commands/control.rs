//! What a running command is asked or told by its id: kill, status, logs.
//! Ids of commands with stdin (`stdin-…`) go to crate::commands::stdin.

use super::stdin;
use crate::bindings::exports::abx::epp::infra::{CommandLogs, CommandStatus};
use crate::error::{self, Result, not_found};
use crate::execd::Execd;
use crate::exit_code;
use crate::http::encode;
use crate::lifecycle::check_id;
use crate::models;
use crate::refusal::{self, Refusal};

pub fn kill(sandbox_id: &str, command_id: &str) -> Result<()> {
    if let Some(pty_id) = stdin::pty_of(command_id) {
        return stdin::kill(sandbox_id, pty_id);
    }
    check_id("command", command_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let path = format!("/command?id={}", encode(command_id));
    let subject = format!("command {command_id}");
    let resp = execd.send(|e| e.request("DELETE", &path), &[])?;
    if resp.status == 500 {
        let body = resp.read_all(64 * 1024).unwrap_or_default();
        // execd's words for a command that is unknown or already finished.
        if refusal::of_answer(500, &body) == Refusal::NotRunning {
            return Err(not_found(format!(
                "command {command_id} is not running in sandbox {sandbox_id} (it finished, or \
                 the id is unknown)"
            )));
        }
        return Err(error::status(500, &body, execd.target(), &subject));
    }
    execd.check(resp, &subject).map(drop)
}

pub fn status(sandbox_id: &str, command_id: &str) -> Result<CommandStatus> {
    if let Some(pty_id) = stdin::pty_of(command_id) {
        // execd keeps no exit code or times for a terminal.
        return Ok(CommandStatus {
            command_id: command_id.to_string(),
            running: stdin::running(sandbox_id, pty_id)?,
            exit_code: None,
            error: None,
            started_at: None,
            finished_at: None,
        });
    }
    check_id("command", command_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let path = format!("/command/status/{command_id}");
    let subject = format!("command {command_id}");
    let resp = execd.send(|e| e.request("GET", &path), &[])?;
    let s: models::CommandStatus = execd.json(execd.check(resp, &subject)?, &subject)?;
    let error = s.error.filter(|e| !e.is_empty());
    Ok(CommandStatus {
        command_id: s.id.unwrap_or_else(|| command_id.to_string()),
        running: s.running,
        exit_code: exit_code::of_status(s.exit_code, error.as_deref()),
        error,
        started_at: s.started_at,
        finished_at: s.finished_at,
    })
}

pub fn logs(sandbox_id: &str, command_id: &str, cursor: Option<u64>) -> Result<CommandLogs> {
    check_id("command", command_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let cursor = cursor.unwrap_or(0);
    let path = format!("/command/{command_id}/logs?cursor={cursor}");
    let subject = format!("command {command_id}");
    let resp = execd.send(|e| e.request("GET", &path), &[])?;
    if resp.status == 400 {
        return Err(not_found(format!(
            "no background command {command_id} in sandbox {sandbox_id} (logs exist only for \
             background commands)"
        )));
    }
    let resp = execd.check(resp, &subject)?;
    let next = resp
        .header("execd-commands-tail-cursor")
        .and_then(|c| c.trim().parse::<u64>().ok());
    let body = resp
        .read_all(64 << 20)
        .map_err(|t| error::broken_body(t, execd.target()))?;
    let next = next.unwrap_or(cursor + body.len() as u64);
    Ok(CommandLogs {
        output: String::from_utf8_lossy(&body).into_owned(),
        cursor: next,
    })
}
