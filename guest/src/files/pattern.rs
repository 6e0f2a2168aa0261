//! files.search patterns: refused here when execd's matcher would refuse them.

use crate::error::{Result, invalid};

/// Refuses what execd's matcher would refuse (an unclosed or empty `[`, unbalanced braces,
/// a trailing `\\`, a `!` that does not open `!(…)`), so a bad pattern is E1001 even in a
/// directory without files, where execd would answer `[]`, and elsewhere not E5001 (execd's
/// 500). A `/` is refused too: execd matches names only, so the pattern would find nothing.
pub fn check_pattern(pattern: &str) -> Result<()> {
    if pattern.is_empty() {
        return Err(invalid(
            "`pattern` is empty; leave it out to find every file (`**`)",
        ));
    }
    if pattern.contains('\0') {
        return Err(invalid("`pattern` contains a NUL byte"));
    }
    let bad = |why: &str| {
        Err(invalid(format!(
            "`pattern` {pattern:?} is not a valid glob: {why}"
        )))
    };
    let mut name = pattern;
    while let Some(rest) = name.strip_prefix("**/") {
        name = rest;
    }
    if name.contains('/') {
        return Err(invalid(format!(
            "`pattern` {pattern:?} has a directory part, but only file names are matched, so it \
             would find nothing; put the directory in `path` and keep the name in `pattern` \
             (e.g. `*.py`)"
        )));
    }
    let p = pattern.as_bytes();
    let mut braces = 0usize;
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            b'\\' if i + 1 == p.len() => return bad("it ends with a lone `\\`"),
            b'\\' => i += 1,
            b'[' => {
                i += 1;
                if matches!(p.get(i), Some(b'!' | b'^')) {
                    i += 1;
                }
                if matches!(p.get(i), None | Some(b']')) {
                    return bad("a `[` class is empty or not closed");
                }
                while i < p.len() && p[i] != b']' {
                    i += if p[i] == b'\\' { 2 } else { 1 };
                }
                if i >= p.len() {
                    return bad("a `[` has no closing `]`");
                }
            }
            b'{' => braces += 1,
            b'}' if braces == 0 => return bad("a `}` has no opening `{`"),
            b'}' => braces -= 1,
            b'!' if p.get(i + 1) != Some(&b'(') || !closes(&p[i + 1..]) => {
                return bad("a `!` must open a negation `!(…)`; write a literal `!` as `\\!`");
            }
            _ => {}
        }
        i += 1;
    }
    if braces > 0 {
        return bad("a `{` has no closing `}`");
    }
    Ok(())
}

/// Whether the `(` that `p` starts with has its `)` (nested pairs counted, `\\` escapes).
fn closes(p: &[u8]) -> bool {
    let mut depth = 0;
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            b'\\' => i += 1,
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return true;
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;

    #[test]
    fn patterns_execd_refuses_are_refused_here() {
        for ok in [
            "**",
            "*.py",
            "**/*.py",
            "**/**/x",
            "a?.txt",
            "[a-c]x",
            "[!a]*",
            "[^a]",
            "*.{py,rs}",
            "{a,{b,c}}",
            "\\*",
            "\\!",
            "!(*.py)",
            "test_!(*.{py,rs})",
            "!((a))",
            "x[\\]]",
            "ü*",
        ] {
            assert!(check_pattern(ok).is_ok(), "{ok}: {:?}", check_pattern(ok));
        }
        for (bad, says) in [
            ("", "empty"),
            ("[", "class"),
            ("[]", "class"),
            ("[!]", "class"),
            ("[]a]", "class"),
            ("[ab", "closing `]`"),
            ("x[\\]", "closing `]`"),
            ("{a,b", "closing `}`"),
            ("a}", "opening `{`"),
            ("a\\", "lone"),
            ("a!b", "`!(…)`"),
            ("!(a", "`!(…)`"),
            ("!", "`!(…)`"),
            ("src/*.py", "directory part"),
            ("**/src/*.py", "directory part"),
            ("*.py/**", "directory part"),
        ] {
            let e = check_pattern(bad).expect_err(bad);
            assert_eq!(e.kind, Kind::Invalid);
            assert!(e.message.contains(says), "{bad}: {}", e.message);
        }
    }
}
