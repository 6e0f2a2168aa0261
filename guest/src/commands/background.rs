//! Background commands: `POST /command` with `background: true` answers
//! `init` (the id) and `execution_complete` at once, and the command runs on.

use crate::bindings::exports::abx::epp::infra::CommandRequest;
use crate::error::{self, Result};
use crate::execd::Execd;
use crate::sse::{Frame, Frames};

/// Starts a background command; answers its id.
pub fn start(req: CommandRequest) -> Result<String> {
    let mut execd = Execd::connect(&req.sandbox_id)?;
    let mut reader = super::run::post(&mut execd, &req, true)?;
    let mut id = None;
    loop {
        match reader
            .next()
            .map_err(|t| error::broken_body(t, execd.target()))?
        {
            Some(Ok(Frame::Event(e))) if e.kind == "init" => id = e.text,
            Some(Ok(Frame::Event(e))) if e.kind == "execution_complete" => break,
            Some(Ok(Frame::Event(e))) if e.kind == "error" => {
                let e = e.error.unwrap_or_default();
                return Err(error::upstream(format!(
                    "the background command failed to start: {} {}",
                    e.ename, e.evalue
                )));
            }
            Some(Ok(Frame::Event(_))) => {}
            Some(Ok(Frame::Error { code, message })) => {
                return Err(error::upstream(format!(
                    "the background command failed to start: {code}: {message}"
                )));
            }
            Some(Err(bad)) => return Err(error::upstream(bad)),
            None => break,
        }
    }
    reader.close();
    id.ok_or_else(|| {
        error::upstream(format!(
            "{} did not report the background command's id",
            execd.target()
        ))
    })
}
