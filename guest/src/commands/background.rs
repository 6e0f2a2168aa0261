//! Background commands: `POST /command` with `background: true` answers
//! `init` (the id) and `execution_complete` at once, and the command runs on.
//! Between the two its token is out (crate::undo): a request that fails there
//! never handed out the id, so nobody else could stop the command.

use crate::bindings::exports::abx::epp::infra::CommandRequest;
use crate::error::{self, Result};
use crate::execd::Execd;
use crate::sse::{Frame, Frames};
use crate::undo::Token;

/// Starts a background command; answers its id.
pub fn start(req: CommandRequest) -> Result<String> {
    let mut execd = Execd::connect(&req.sandbox_id)?;
    let mut reader = super::run::post(&mut execd, &req, true)?;
    let mut id = None;
    let mut token = None;
    loop {
        match reader
            .next()
            .map_err(|t| error::broken_body(t, execd.target()))?
        {
            Some(Ok(Frame::Event(e))) if e.kind == "init" => {
                let started = e.text.unwrap_or_default();
                let t = Token::Command {
                    sandbox_id: req.sandbox_id.clone(),
                    command_id: started.clone(),
                };
                t.made();
                token = Some(t);
                id = Some(started);
            }
            Some(Ok(Frame::Event(e))) if e.kind == "execution_complete" => break,
            Some(Ok(Frame::Event(e))) if e.kind == "error" => {
                token.iter().for_each(Token::settled);
                let e = e.error.unwrap_or_default();
                return Err(error::upstream(format!(
                    "the background command failed to start: {} {}",
                    e.ename, e.evalue
                )));
            }
            Some(Ok(Frame::Event(_))) => {}
            Some(Ok(Frame::Error { code, message })) => {
                token.iter().for_each(Token::settled);
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
