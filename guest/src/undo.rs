//! What a failed request leaves behind, named by tokens the provider reports
//! through `request.made` and takes back in `infra.undo` (abx:epp 1.1).
//!
//! A token is `KIND:ID…` with ids that `lifecycle::check_id` accepts (no `:`):
//! - `sandbox:ID`: a sandbox this request made; undone by killing it.

use crate::bindings::abx::epp::request;
use crate::error::{Kind, Result, invalid};
use crate::lifecycle::{Lifecycle, check_id};

/// Something a request set going that must not outlive the request if it fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    Sandbox(String),
}

impl Token {
    pub fn text(&self) -> String {
        match self {
            Token::Sandbox(id) => format!("sandbox:{id}"),
        }
    }

    pub fn parse(token: &str) -> Result<Token> {
        let bad = || {
            invalid(format!(
                "`{token}` is not a token of this provider (it reports `sandbox:ID`)"
            ))
        };
        let (kind, rest) = token.split_once(':').ok_or_else(bad)?;
        match kind {
            "sandbox" => {
                check_id("sandbox", rest).map_err(|_| bad())?;
                Ok(Token::Sandbox(rest.to_string()))
            }
            _ => Err(bad()),
        }
    }

    /// Reports the token to the host: undone if the request fails.
    pub fn made(&self) {
        request::made(&self.text());
    }

    /// Tells the host the token needs no undoing any more.
    pub fn settled(&self) {
        request::settled(&self.text());
    }
}

/// Undoes what `token` stands for; answers what was done, in words.
pub fn undo(token: &str) -> Result<String> {
    match Token::parse(token)? {
        Token::Sandbox(id) => match Lifecycle::new()?.delete(&id) {
            Ok(()) => Ok(format!("killed sandbox {id}")),
            Err(e) if e.is(Kind::NotFound) => Ok(format!("sandbox {id} was already gone")),
            Err(mut e) => {
                e.message = format!(
                    "sandbox {id} is left: kill it with sandbox.kill, or it expires after its \
                     timeout ({})",
                    e.message
                );
                Err(e)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_strangers_are_refused() {
        let t = Token::Sandbox("5c1f-a_b.c".into());
        assert_eq!(Token::parse(&t.text()).ok(), Some(t));
        for bad in [
            "",
            "sandbox",
            "sandbox:",
            "sandbox:a/b",
            "sandbox:a:b",
            "disk:x",
        ] {
            let e = Token::parse(bad).expect_err(bad);
            assert_eq!(e.kind, Kind::Invalid, "{bad}");
        }
    }
}
