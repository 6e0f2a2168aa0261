//! `sandbox.list`: the sandboxes in order of creation (oldest first), the
//! whole list or pages of `limit` with a cursor.
//!
//! The server pages by offset (`page`, `pageSize`, newest first), so a page
//! read after a sandbox was created or killed starts one item off: some
//! sandboxes come twice, others never. Its pages are not handed on. Every
//! call reads the whole filtered list (all of the server's pages), sorts it by
//! (created_at, id) and answers the `limit` sandboxes after the cursor, which
//! is the last answered sandbox's place in that order. A sandbox that exists
//! from the first page to the last is answered exactly once; one made while
//! paging is answered when it sorts after the cursor (new ones do), one killed
//! is not answered after it is gone. The cost: each page costs as much as the
//! whole list (one server request per 200 sandboxes, and their JSON in memory).

use super::info;
use super::order::Key;
use crate::bindings::exports::abx::epp::infra::{ListRequest, SandboxPage};
use crate::error::{Error, Result, invalid};
use crate::lifecycle::Lifecycle;
use crate::models::Sandbox;

/// Cursors begin with this, so that a later form can be told apart.
const CURSOR_VERSION: &str = "c1";

pub fn list(req: ListRequest) -> Result<SandboxPage> {
    let after = req.cursor.as_deref().map(Cursor::parse).transpose()?;
    let states: Vec<String> = req.states.iter().map(|s| super::server_state(s)).collect();
    let mut keyed: Vec<(Key, Sandbox)> = Lifecycle::new()?
        .list(&states, &req.metadata)?
        .into_iter()
        .map(|s| (Key::new(s.created_at.as_deref(), &s.id), s))
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let (keys, sandboxes): (Vec<Key>, Vec<Sandbox>) = keyed.into_iter().unzip();
    let (start, end, more) = window(&keys, after.as_ref().map(|c| &c.0), req.limit);
    let next_cursor = more.then(|| Cursor(keys[end - 1].clone()).text());
    let sandboxes = sandboxes
        .into_iter()
        .skip(start)
        .take(end - start)
        .map(|sandbox| info(sandbox, None))
        .collect::<Result<Vec<_>>>()?;
    Ok(SandboxPage {
        sandboxes,
        next_cursor,
    })
}

/// The items of the page in sorted `keys`: `start..end`, and whether more
/// follow. It begins after `after` (which need not be in the list any more:
/// its sandbox may be gone) and holds at most `limit` items.
fn window(keys: &[Key], after: Option<&Key>, limit: Option<u32>) -> (usize, usize, bool) {
    let start = after.map_or(0, |after| keys.partition_point(|k| k <= after));
    let end = match limit {
        Some(limit) => start.saturating_add(limit as usize).min(keys.len()),
        None => keys.len(),
    };
    (start, end, end < keys.len() && end > start)
}

/// A place in the order: after the sandbox with this key.
#[derive(Debug, PartialEq, Eq)]
struct Cursor(Key);

impl Cursor {
    /// `c1` and hex of `SECONDS.NANOS/ID` (`-/ID` without a time): opaque to
    /// clients, and URL- and shell-safe.
    fn text(&self) -> String {
        let at = match self.0.at {
            Some((secs, nanos)) => format!("{secs}.{nanos:09}"),
            None => "-".to_string(),
        };
        let plain = format!("{at}/{}", self.0.id);
        let hex: String = plain.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{CURSOR_VERSION}{hex}")
    }

    fn parse(text: &str) -> Result<Cursor> {
        Cursor::decode(text).ok_or_else(|| bad_cursor(text))
    }

    fn decode(text: &str) -> Option<Cursor> {
        let hex = text.strip_prefix(CURSOR_VERSION)?;
        if hex.len() % 2 != 0 || hex.len() > 1024 {
            return None;
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        let plain = String::from_utf8(bytes).ok()?;
        let (at, id) = plain.split_once('/')?;
        let at = match at {
            "-" => None,
            _ => {
                let (secs, nanos) = at.split_once('.')?;
                Some((secs.parse().ok()?, nanos.parse().ok()?))
            }
        };
        crate::lifecycle::check_id("sandbox", id).ok()?;
        Some(Cursor(Key {
            at,
            id: id.to_string(),
        }))
    }
}

fn bad_cursor(text: &str) -> Error {
    let shown: String = text.chars().take(40).collect();
    invalid(format!(
        "`cursor` `{shown}` is not a cursor sandbox.list gave out; pass the `next_cursor` of \
         the page before, or no cursor to start at the oldest sandbox"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(at: i64, id: &str) -> Key {
        Key {
            at: Some((at, 0)),
            id: id.into(),
        }
    }

    #[test]
    fn cursors_round_trip_and_strangers_are_refused() {
        for k in [
            key(1_795_000_000, "7da48665-f404"),
            Key {
                at: Some((-5, 990_724_000)),
                id: "a.b_c".into(),
            },
            Key {
                at: None,
                id: "x".into(),
            },
        ] {
            let text = Cursor(k.clone()).text();
            assert!(text.bytes().all(|b| b.is_ascii_alphanumeric()), "{text}");
            assert_eq!(Cursor::parse(&text).unwrap(), Cursor(k));
        }
        let good = Cursor(key(1, "sb")).text();
        for bad in [
            "",
            "c1",
            "c2",
            &good[2..],
            &good[..good.len() - 1],
            "c1zz",
            // "1/a/b": an id with a slash.
            "c1312f612f62",
            // "x/sb": no time.
            "c1782f7362",
        ] {
            let e = Cursor::parse(bad).unwrap_err();
            assert!(e.message.contains("next_cursor"), "{bad}: {e:?}");
        }
    }

    #[test]
    fn pages_follow_each_other_while_the_list_changes() {
        let keys = |ids: &[(i64, &str)]| ids.iter().map(|(t, id)| key(*t, id)).collect::<Vec<_>>();
        let first = keys(&[(1, "a"), (2, "b"), (3, "c"), (4, "d")]);
        assert_eq!(window(&first, None, Some(2)), (0, 2, true));
        // Before the second page, `b` (the cursor's own) is killed and `e` made.
        let now = keys(&[(1, "a"), (3, "c"), (4, "d"), (5, "e")]);
        let cursor = key(2, "b");
        assert_eq!(window(&now, Some(&cursor), Some(2)), (1, 3, true));
        assert_eq!(window(&now, Some(&key(4, "d")), Some(2)), (3, 4, false));
        // The last page exactly: no cursor after it.
        assert_eq!(window(&now, Some(&key(3, "c")), Some(2)), (2, 4, false));
        assert_eq!(window(&now, Some(&key(5, "e")), Some(2)), (4, 4, false));
        // Without a limit: everything after the cursor.
        assert_eq!(window(&now, None, None), (0, 4, false));
        assert_eq!(window(&now, Some(&cursor), None), (1, 4, false));
        // One second, two sandboxes: the id decides.
        let tie = keys(&[(7, "a"), (7, "b")]);
        assert_eq!(window(&tie, Some(&key(7, "a")), Some(1)), (1, 2, false));
    }
}
