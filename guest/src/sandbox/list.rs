//! `sandbox.list`: the sandboxes in order of creation (oldest first), the
//! whole list or pages of `limit` with a cursor.
//!
//! The server pages by offset (`page`, `pageSize`, newest first), so a page
//! read after a sandbox was created or killed starts one item off: some
//! sandboxes come twice, others never. Its pages are not handed on. Every
//! call reads the whole filtered list (all of the server's pages, read again
//! when it changed meanwhile: crate::lifecycle's `all_pages`), sorts it by
//! (created_at, id) and answers the `limit` sandboxes after the cursor. The
//! cost: each page costs as much as the whole list (one server request per
//! 200 sandboxes, and their JSON in memory).
//!
//! The cursor is the creation time of the last sandbox answered and the ids
//! of every sandbox of that time answered so far. A page holds the sandboxes
//! made later, and those of that very time not answered yet: a time is only
//! as fine as the server's clock (Kubernetes: whole seconds), so a sandbox
//! made in the second of the cursor after the page was answered has the
//! cursor's time, and may have a smaller id than the last one answered; by
//! (time, id) alone it would sort before the cursor and never be answered.
//! So a sandbox that exists from the first page to the last is answered
//! exactly once; one made while paging is answered on a later page (it is
//! as new as the cursor or newer); one killed is not answered after it is
//! gone.

use super::info;
use super::order::Key;
use crate::bindings::exports::abx::epp::infra::{ListRequest, SandboxPage};
use crate::error::{Error, Result, invalid};
use crate::lifecycle::Lifecycle;
use crate::models::Sandbox;

/// Cursors begin with this, so that a later form can be told apart.
const CURSOR_VERSION: &str = "c2";
/// The longest cursor read: ids of 256 bytes at most, as hex, for a few
/// thousand sandboxes made in one clock tick.
const MAX_CURSOR: usize = 4 << 20;

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
    let (page, next) = window(&keys, after.as_ref(), req.limit);
    let next_cursor = next.map(|c| c.text());
    let mut sandboxes: Vec<Option<Sandbox>> = sandboxes.into_iter().map(Some).collect();
    let sandboxes = page
        .into_iter()
        .filter_map(|i| sandboxes[i].take())
        .map(|sandbox| info(sandbox, None))
        .collect::<Result<Vec<_>>>()?;
    Ok(SandboxPage {
        sandboxes,
        next_cursor,
    })
}

/// The page in sorted `keys`: the indexes of its items, and the cursor for
/// the next page when more follow. It holds at most `limit` of the items
/// after `after` (whose own sandboxes need not be in the list any more).
fn window(
    keys: &[Key],
    after: Option<&Cursor>,
    limit: Option<u32>,
) -> (Vec<usize>, Option<Cursor>) {
    let rest: Vec<usize> = (0..keys.len())
        .filter(|&i| after.is_none_or(|c| c.is_before(&keys[i])))
        .collect();
    let limit = limit.map_or(rest.len(), |l| l as usize);
    if rest.len() <= limit || limit == 0 {
        return (rest.into_iter().take(limit).collect(), None);
    }
    let page: Vec<usize> = rest[..limit].to_vec();
    let last = &keys[page[limit - 1]];
    // The ids answered at the last one's time: those of the cursor before
    // (when its time is the same) and those of this page.
    let mut ids: Vec<String> = match after {
        Some(c) if c.at == last.at => c.ids.clone(),
        _ => Vec::new(),
    };
    ids.extend(
        page.iter()
            .map(|&i| &keys[i])
            .filter(|k| k.at == last.at)
            .map(|k| k.id.clone()),
    );
    ids.sort();
    (page, Some(Cursor { at: last.at, ids }))
}

/// A place in the order: after the sandboxes made before `at`, and those
/// made at `at` whose ids are in `ids` (sorted).
#[derive(Debug, PartialEq, Eq)]
struct Cursor {
    at: Option<(i64, u32)>,
    ids: Vec<String>,
}

impl Cursor {
    /// Whether the sandbox at `key` comes after this place (is not answered yet).
    fn is_before(&self, key: &Key) -> bool {
        key.at > self.at || (key.at == self.at && self.ids.binary_search(&key.id).is_err())
    }

    /// `c2` and hex of `SECONDS.NANOS/ID,ID…` (`-/…` without a time):
    /// opaque to clients, and URL- and shell-safe.
    fn text(&self) -> String {
        let at = match self.at {
            Some((secs, nanos)) => format!("{secs}.{nanos:09}"),
            None => "-".to_string(),
        };
        let plain = format!("{at}/{}", self.ids.join(","));
        let hex: String = plain.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{CURSOR_VERSION}{hex}")
    }

    fn parse(text: &str) -> Result<Cursor> {
        Cursor::decode(text).ok_or_else(|| bad_cursor(text))
    }

    fn decode(text: &str) -> Option<Cursor> {
        let hex = text.strip_prefix(CURSOR_VERSION)?;
        if hex.len() % 2 != 0 || hex.len() > MAX_CURSOR {
            return None;
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        let plain = String::from_utf8(bytes).ok()?;
        let (at, ids) = plain.split_once('/')?;
        let at = match at {
            "-" => None,
            _ => {
                let (secs, nanos) = at.split_once('.')?;
                Some((secs.parse().ok()?, nanos.parse().ok()?))
            }
        };
        let ids: Vec<String> = ids.split(',').map(str::to_string).collect();
        let sorted = ids.windows(2).all(|w| w[0] < w[1]);
        let valid = ids
            .iter()
            .all(|id| crate::lifecycle::check_id("sandbox", id).is_ok());
        (sorted && valid).then_some(Cursor { at, ids })
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

    fn keys(items: &[(i64, &str)]) -> Vec<Key> {
        let mut keys: Vec<Key> = items.iter().map(|(t, id)| key(*t, id)).collect();
        keys.sort();
        keys
    }

    /// The ids of one page of `items`, and its cursor.
    fn page(
        items: &[(i64, &str)],
        after: Option<&Cursor>,
        limit: Option<u32>,
    ) -> (Vec<String>, Option<Cursor>) {
        let keys = keys(items);
        let (page, next) = window(&keys, after, limit);
        (page.iter().map(|&i| keys[i].id.clone()).collect(), next)
    }

    fn cursor(at: i64, ids: &[&str]) -> Cursor {
        Cursor {
            at: Some((at, 0)),
            ids: ids.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn cursors_round_trip_and_strangers_are_refused() {
        for c in [
            cursor(1_795_000_000, &["7da48665-f404"]),
            Cursor {
                at: Some((-5, 990_724_000)),
                ids: vec!["a.b_c".into(), "b".into()],
            },
            Cursor {
                at: None,
                ids: vec!["x".into()],
            },
        ] {
            let text = c.text();
            assert!(text.bytes().all(|b| b.is_ascii_alphanumeric()), "{text}");
            assert_eq!(Cursor::parse(&text).unwrap(), c);
        }
        let good = cursor(1, &["sb"]).text();
        let hex = |plain: &str| {
            let hex: String = plain.bytes().map(|b| format!("{b:02x}")).collect();
            format!("c2{hex}")
        };
        for bad in [
            "",
            "c2",
            "c3",
            &good[2..],
            &good[..good.len() - 1],
            "c2zz",
            &hex("1.0/a/b"),
            &hex("x/sb"),
            &hex("1.0/"),
            &hex("1.0/b,a"),
            &hex("1.0/a,a"),
            // The form before the ids were kept: "1.000000000/sb".
            &format!("c1{}", &hex("1.000000000/sb")[2..]),
        ] {
            let e = Cursor::parse(bad).unwrap_err();
            assert!(e.message.contains("next_cursor"), "{bad}: {e:?}");
        }
    }

    #[test]
    fn pages_follow_each_other_while_the_list_changes() {
        let first = [(1, "a"), (2, "b"), (3, "c"), (4, "d")];
        let (ids, next) = page(&first, None, Some(2));
        assert_eq!(ids, ["a", "b"]);
        let next = next.unwrap();
        assert_eq!(next, cursor(2, &["b"]));
        // Before the second page, `b` (the cursor's own) is killed and `e` made.
        let now = [(1, "a"), (3, "c"), (4, "d"), (5, "e")];
        let (ids, next) = page(&now, Some(&next), Some(2));
        assert_eq!(ids, ["c", "d"]);
        let (ids, next) = page(&now, next.as_ref(), Some(2));
        assert_eq!((ids, next), (vec!["e".to_string()], None));
        // The last page exactly: no cursor after it; past it, an empty page.
        assert_eq!(
            page(&now, Some(&cursor(3, &["c"])), Some(2)),
            (vec!["d".to_string(), "e".to_string()], None)
        );
        assert_eq!(
            page(&now, Some(&cursor(5, &["e"])), Some(2)),
            (vec![], None)
        );
        // Without a limit: everything after the cursor.
        assert_eq!(page(&now, None, None).0, ["a", "c", "d", "e"]);
        assert_eq!(
            page(&now, Some(&cursor(2, &["b"])), None).0,
            ["c", "d", "e"]
        );
    }

    #[test]
    fn sandboxes_of_one_clock_tick_are_each_answered_once() {
        // Five sandboxes in one second (Kubernetes' creationTimestamp), pages
        // of two: the ids answered at that time accumulate in the cursor.
        let tick = [
            (6, "0"),
            (7, "b"),
            (7, "d"),
            (7, "f"),
            (7, "h"),
            (7, "k"),
            (8, "z"),
        ];
        let (ids, c1) = page(&tick, None, Some(2));
        assert_eq!(ids, ["0", "b"]);
        assert_eq!(c1, Some(cursor(7, &["b"])));
        // Later ones of the same second, with greater ids, come next.
        let (ids, c2) = page(&tick, c1.as_ref(), Some(2));
        assert_eq!(ids, ["d", "f"]);
        assert_eq!(c2, Some(cursor(7, &["b", "d", "f"])));
        // Made after that page in the same second: `a` and `e` sort before
        // the last one answered (`f`), by time and id, yet come on the next
        // page, and nothing answered comes again.
        let more = [
            (6, "0"),
            (7, "a"),
            (7, "b"),
            (7, "d"),
            (7, "e"),
            (7, "f"),
            (7, "h"),
            (7, "k"),
            (8, "z"),
        ];
        let (ids, c3) = page(&more, c2.as_ref(), Some(3));
        assert_eq!(ids, ["a", "e", "h"]);
        assert_eq!(c3, Some(cursor(7, &["a", "b", "d", "e", "f", "h"])));
        let (ids, c4) = page(&more, c3.as_ref(), Some(3));
        assert_eq!(
            (ids, c4.as_ref()),
            (vec!["k".to_string(), "z".to_string()], None)
        );
        // A page that ends on a new time starts a new list of ids.
        let (ids, c) = page(&more, c3.as_ref(), Some(1));
        assert_eq!(ids, ["k"]);
        let (ids, c) = page(&more, c.as_ref(), Some(1));
        assert_eq!((ids, c), (vec!["z".to_string()], None));
        let (_, c) = page(&[(7, "k"), (8, "y"), (8, "z")], c3.as_ref(), Some(2));
        assert_eq!(c, Some(cursor(8, &["y"])));
    }
}
