//! The label every `sandbox.create` puts on its sandbox, so that a create
//! abandoned while the server still answers `POST /sandboxes` (it pulls the
//! image inside that call, minutes on a cold pull: API.md P3) can be undone
//! although no id came back: the token `create:LABEL` is reported before the
//! POST, and `undo` finds the sandbox by its metadata and kills it.
//!
//! The label is metadata under a key of the provider's own, a random value
//! per request. OpenSandbox takes metadata under Kubernetes label rules (keys
//! with the `opensandbox.io/` prefix are the server's); a label value is at
//! most 63 characters of letters, digits, `-`, `_` and `.`, starting and
//! ending with a letter or digit. Users never see the key in a sandbox's
//! metadata, may not set it themselves, and may still list by it.

use crate::bindings::abx::epp::request;
use crate::error::{Error, Kind, Result, invalid};
use crate::lifecycle::Lifecycle;
use crate::undo::{self, Removal};
use std::collections::BTreeMap;

/// The metadata key of the label.
pub const KEY: &str = "epp-request";

/// A new request's label: 128 random bits as 32 hex digits.
pub fn new() -> String {
    use wasip2::random::random::get_random_u64;
    format!("{:016x}{:016x}", get_random_u64(), get_random_u64())
}

/// E1001 when a user's metadata key (set at create, set or removed later) is
/// the label's.
pub fn check_user_keys<'a>(mut keys: impl Iterator<Item = &'a str>) -> Result<()> {
    if keys.any(|k| k == KEY) {
        return Err(invalid(format!(
            "metadata key `{KEY}` is the provider's own: it labels each sandbox.create so that \
             an abandoned create can be found and undone; use another key"
        )));
    }
    Ok(())
}

/// The metadata of a create: the user's, and the label.
pub fn labelled(metadata: &[(String, String)], label: &str) -> Result<BTreeMap<String, String>> {
    check_user_keys(metadata.iter().map(|(k, _)| k.as_str()))?;
    let mut all: BTreeMap<String, String> = metadata.iter().cloned().collect();
    all.insert(KEY.to_string(), label.to_string());
    Ok(all)
}

/// A sandbox's metadata as users see it: without the label.
pub fn hidden(metadata: BTreeMap<String, String>) -> Vec<(String, String)> {
    metadata.into_iter().filter(|(k, _)| k != KEY).collect()
}

/// How to find the sandbox of a create whose answer never came.
pub fn may_exist(e: Error, label: &str) -> Error {
    let mut message = e.message.clone();
    if let Some(cut) = message.strip_suffix("; retry").map(str::len) {
        message.truncate(cut);
    }
    message.push_str(&format!(
        ". Before retrying: the request may have reached the server, so the sandbox may exist; \
         it carries the metadata {KEY}={label}: find it with sandbox.list {{\"metadata\": \
         {{\"{KEY}\": \"{label}\"}}}} and kill it (unless this answer says it was undone), or it \
         expires after its timeout (sandbox.create is never retried automatically)"
    ));
    let kind = e.kind;
    e.reworded(kind, message)
}

/// Undoes `create:LABEL`: kills every sandbox with the label. The server may
/// still be creating it, so while none is listed it looks again, for a while
/// (crate::undo's one loop).
pub fn undo_create(label: &str) -> Result<String> {
    let lifecycle = Lifecycle::new()?;
    let filter = [(KEY.to_string(), label.to_string())];
    undo::find_and_remove(
        &undo::Wasi,
        request::time_left_ms(),
        || lifecycle.list(&[], &filter),
        |sandbox| match lifecycle.delete(&sandbox.id) {
            Ok(()) => Removal::Done(format!("killed sandbox {}", sandbox.id)),
            Err(e) if e.is(Kind::NotFound) => {
                Removal::Done(format!("sandbox {} was already gone", sandbox.id))
            }
            Err(e) => {
                let message = format!(
                    "sandbox {} (metadata {KEY}={label}) is left: kill it with sandbox.kill, or \
                     it expires after its timeout ({})",
                    sandbox.id, e.message
                );
                let kind = e.kind;
                Removal::Failed(e.reworded(kind, message))
            }
        },
        |secs| {
            format!(
                "no sandbox with the metadata {KEY}={label} appeared within {secs} s; if one \
                 appears later, find it with sandbox.list by that metadata and kill it"
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_is_ours_and_hidden() {
        let user = vec![("team".to_string(), "ml".to_string())];
        let all = labelled(&user, "abc").unwrap();
        assert_eq!(all.get(KEY).map(String::as_str), Some("abc"));
        assert_eq!(all.get("team").map(String::as_str), Some("ml"));
        assert_eq!(hidden(all), user);
        let e = labelled(&[(KEY.to_string(), "mine".to_string())], "abc").unwrap_err();
        assert_eq!(e.kind, Kind::Invalid);
        assert!(
            e.message.contains("`epp-request` is the provider's own"),
            "{e:?}"
        );
    }

    #[test]
    fn a_lost_answer_says_how_to_find_the_sandbox() {
        let e = crate::error::upstream("the connection to the server failed (Reset); retry");
        let e = may_exist(e, "f00d");
        assert_eq!(e.kind, Kind::Upstream);
        assert!(!e.message.contains("; retry"), "{e:?}");
        for words in ["epp-request=f00d", "sandbox.list", "never retried"] {
            assert!(e.message.contains(words), "{words}: {e:?}");
        }
    }
}
