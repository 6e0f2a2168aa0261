//! How a sandbox's execd cuts command output into `stdout`/`stderr` events.
//!
//! - execd 1.1.1 and later keep every byte (upstream #2033): an event is a line with
//!   its `\n` or `\r`, or a last fragment without one. The events put together are
//!   the output exactly, and the provider passes them on unchanged.
//! - execd up to 1.1.0 (including the `opensandbox/execd:v1.1.0` image that
//!   `opensandbox-server init-config` still writes) drops the terminators: an event
//!   is a line without its `\n`/`\r`, or `"\n"` for a blank line. The provider adds
//!   one `\n` back per line; whether the last line had one is lost on the way.
//!
//! Which kind a sandbox has is known for sure from either side's evidence: an
//! event that holds a terminator next to other bytes (or a lone `\r`) exists only
//! in the raw form; a probe command (`echo x`, answered `"x\n"` or `"x"`) settles
//! the rest. The probe runs once per sandbox, only when an event without a
//! terminator arrives before the kind is known; the answer is memoised host-wide.

use crate::bindings::abx::epp::memo;
use crate::config;

/// How a sandbox's execd sends output lines.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lines {
    /// Not known yet.
    Unknown,
    /// execd ≥ 1.1.1: the text of the events is the output.
    Raw,
    /// execd ≤ 1.1.0: one event per line, terminators dropped.
    Stripped,
}

/// What one event's text tells about the kind of execd that sent it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Evidence {
    /// Only raw execd sends this (a terminator next to other text, or a lone `\r`).
    Raw,
    /// Text without any terminator: a stripped line, or a raw last fragment.
    Ambiguous,
    /// The same either way: empty, or `"\n"` (a blank line).
    Neutral,
}

pub fn evidence(text: &str) -> Evidence {
    if text.is_empty() || text == "\n" {
        Evidence::Neutral
    } else if text.bytes().any(|b| b == b'\n' || b == b'\r') {
        Evidence::Raw
    } else {
        Evidence::Ambiguous
    }
}

/// The output an event's text stands for, once the kind is known (not `Unknown`).
pub fn output(kind: Lines, text: String) -> String {
    match kind {
        Lines::Stripped if text != "\n" && !text.is_empty() => text + "\n",
        _ => text,
    }
}

/// What the probe `echo x` printed says about the kind (`None`: no conclusion).
pub fn from_probe(stdout: &str) -> Option<Lines> {
    match stdout {
        "x\n" => Some(Lines::Raw),
        "x" => Some(Lines::Stripped),
        _ => None,
    }
}

/// How long a learned kind is remembered (a sandbox keeps its execd).
const MEMO_TTL_MS: u32 = 24 * 3600 * 1000;

fn memo_key(sandbox_id: &str) -> Option<String> {
    let s = config::settings().ok()?;
    Some(format!("lines:{}:{sandbox_id}", s.origin))
}

/// The kind learned earlier for this sandbox, if any.
pub fn remembered(sandbox_id: &str) -> Lines {
    match memo_key(sandbox_id).and_then(|k| memo::get(&k)).as_deref() {
        Some("raw") => Lines::Raw,
        Some("stripped") => Lines::Stripped,
        _ => Lines::Unknown,
    }
}

pub fn remember(sandbox_id: &str, kind: Lines) {
    let value = match kind {
        Lines::Raw => "raw",
        Lines::Stripped => "stripped",
        Lines::Unknown => return,
    };
    if let Some(key) = memo_key(sandbox_id) {
        memo::put(&key, value, MEMO_TTL_MS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_of_events() {
        // Raw execd (1.1.1) keeps terminators: only it sends these.
        for raw in ["abc\n", "50%\r", "\r", "a\r\n", "\n\n", "x\ny"] {
            assert_eq!(evidence(raw), Evidence::Raw, "{raw:?}");
        }
        // Both send a blank line as "\n".
        assert_eq!(evidence("\n"), Evidence::Neutral);
        assert_eq!(evidence(""), Evidence::Neutral);
        // `printf abc` on 1.1.1, `echo abc` on 1.1.0.
        assert_eq!(evidence("abc"), Evidence::Ambiguous);
        assert_eq!(evidence("dir ü"), Evidence::Ambiguous);
    }

    #[test]
    fn output_is_exact_on_raw_execd() {
        for text in ["abc", "abc\n", "\n", "a\r", "\r\n", ""] {
            assert_eq!(output(Lines::Raw, text.into()), text);
        }
        // Events of `printf 'one\r\n\ntwo\n\n\nthree'` from execd 1.1.1.
        let events = ["one\r", "\n", "\n", "two\n", "\n", "\n", "three"];
        let joined: String = events
            .iter()
            .map(|e| output(Lines::Raw, e.to_string()))
            .collect();
        assert_eq!(joined, "one\r\n\ntwo\n\n\nthree");
    }

    #[test]
    fn stripped_lines_get_one_newline_back() {
        // Events of `printf 'a\n\nb\n'` from execd 1.1.0.
        let joined: String = ["a", "\n", "b"]
            .iter()
            .map(|e| output(Lines::Stripped, e.to_string()))
            .collect();
        assert_eq!(joined, "a\n\nb\n");
        assert_eq!(output(Lines::Stripped, "dir ü".into()), "dir ü\n");
        assert_eq!(output(Lines::Stripped, String::new()), "");
    }

    #[test]
    fn probe_answers() {
        assert_eq!(from_probe("x\n"), Some(Lines::Raw));
        assert_eq!(from_probe("x"), Some(Lines::Stripped));
        assert_eq!(from_probe(""), None);
        assert_eq!(from_probe("motd\nx\n"), None);
    }
}
