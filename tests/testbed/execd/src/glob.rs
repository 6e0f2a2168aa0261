//! Doublestar-style glob matching for `/files/search` (execd matches the pattern against a
//! file's base name only): `*`, `**`, `?`, `[...]` / `[!...]` / `[^...]`, `{a,b}`, `\` escapes,
//! and execd's own `!(x)`: the rest of the pattern, with `x` in place, must not match. Braces
//! and `!` are taken where the matcher reaches them, as execd does; execd negates from its
//! last `*`, the stand-in from the `!` (the same wherever no `*` comes before it).

#[derive(Debug)]
pub struct BadPattern;

pub fn matches(pattern: &str, name: &str) -> Result<bool, BadPattern> {
    let p: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    match_at(&p, &name, true)
}

/// Index in `p` of the `close` that brings `depth` (opens already counted) to 0; `\` escapes.
fn closing(p: &[char], open: char, close: char, mut depth: i32) -> Option<usize> {
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '\\' => i += 1,
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn match_at(p: &[char], n: &[char], seg_start: bool) -> Result<bool, BadPattern> {
    let Some(&c) = p.first() else {
        return Ok(n.is_empty());
    };
    match c {
        '*' => {
            if p.get(1) == Some(&'*') && seg_start {
                let rest = &p[2..];
                if rest.is_empty() {
                    return Ok(true);
                }
                if rest[0] == '/' {
                    // `**/` matches zero or more whole path segments.
                    if match_at(&rest[1..], n, true)? {
                        return Ok(true);
                    }
                    for (i, &ch) in n.iter().enumerate() {
                        if ch == '/' && match_at(&rest[1..], &n[i + 1..], true)? {
                            return Ok(true);
                        }
                    }
                    return Ok(false);
                }
            }
            // Any other run of stars is a single `*`: anything within one segment.
            let stars = p.iter().take_while(|&&x| x == '*').count();
            let rest = &p[stars..];
            for i in 0..=n.len() {
                if match_at(rest, &n[i..], false)? {
                    return Ok(true);
                }
                if i < n.len() && n[i] == '/' {
                    break;
                }
            }
            Ok(false)
        }
        '{' => {
            // `{a,b}`: each alternative in place, in order (nested braces allowed).
            let close = 1 + closing(&p[1..], '{', '}', 1).ok_or(BadPattern)?;
            let (mut start, mut depth, mut i) = (1, 0, 1);
            let mut alts = vec![];
            while i < close {
                match p[i] {
                    '\\' => i += 1,
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        alts.push(&p[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
                i += 1;
            }
            alts.push(&p[start..close]);
            for alt in alts {
                if match_at(&[alt, &p[close + 1..]].concat(), n, true)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        '!' => {
            // execd drops the `!`, the `(` after it and its `)`, and negates the rest.
            if n.is_empty() {
                return Ok(false);
            }
            let close = 1 + closing(&p[1..], '(', ')', 0).ok_or(BadPattern)?;
            let rest: Vec<char> = p[2..close].iter().chain(&p[close + 1..]).copied().collect();
            Ok(!match_at(&rest, n, true)?)
        }
        '?' => Ok(!n.is_empty() && n[0] != '/' && match_at(&p[1..], &n[1..], false)?),
        '[' => {
            let (matched, used) = class(&p[1..], n.first().copied())?;
            Ok(matched && match_at(&p[1 + used..], &n[1..], false)?)
        }
        '\\' => {
            let lit = *p.get(1).ok_or(BadPattern)?;
            Ok(n.first() == Some(&lit) && match_at(&p[2..], &n[1..], lit == '/')?)
        }
        c => Ok(n.first() == Some(&c) && match_at(&p[1..], &n[1..], c == '/')?),
    }
}

/// Matches one character class (the text after `[`); returns (matched, chars consumed
/// including the closing `]`). A missing name character never matches.
fn class(p: &[char], ch: Option<char>) -> Result<(bool, usize), BadPattern> {
    let mut i = 0;
    let negate = matches!(p.first(), Some('!' | '^'));
    if negate {
        i += 1;
    }
    if p.get(i).is_none_or(|&c| c == ']') {
        return Err(BadPattern);
    }
    let mut hit = false;
    while let Some(&c) = p.get(i) {
        if c == ']' {
            let ok = ch.is_some() && hit != negate;
            return Ok((ok, i + 1));
        }
        let lo = if c == '\\' {
            i += 1;
            *p.get(i).ok_or(BadPattern)?
        } else {
            c
        };
        i += 1;
        let mut hi = lo;
        if p.get(i) == Some(&'-') && p.get(i + 1).is_some_and(|&c| c != ']') {
            i += 1;
            hi = if p[i] == '\\' {
                i += 1;
                *p.get(i).ok_or(BadPattern)?
            } else {
                p[i]
            };
            i += 1;
        }
        if let Some(ch) = ch
            && lo <= ch
            && ch <= hi
        {
            hit = true;
        }
    }
    Err(BadPattern)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn base_name_patterns() {
        for (p, n, want) in [
            ("**", "a.py", true),
            ("*.py", "a.py", true),
            ("**/*.py", "a.py", true),
            ("src/*.py", "a.py", false),
            ("*.py", "a.pyc", false),
            ("a?.txt", "ab.txt", true),
            ("[a-c]x", "bx", true),
            ("[!a-c]x", "bx", false),
            ("*.{py,rs}", "m.rs", true),
            ("\\*", "*", true),
            ("*", "", true),
            ("!(*.py)", "a.py", false),
            ("!(*.py)", "a.rs", true),
            ("test_!(*.py)", "test_a.rs", true),
            ("test_!(*.py)", "test_a.py", false),
            ("test_!(*.py)", "test_", false),
            ("!(*.{py,rs})", "m.rs", false),
            ("!(*.{py,rs})", "m.go", true),
            ("{a,b{c,d}}.txt", "bd.txt", true),
            ("\\!", "!", true),
        ] {
            assert_eq!(matches(p, n).unwrap(), want, "{p} vs {n}");
        }
        assert!(matches("[", "a").is_err());
        assert!(matches("{a,b", "a").is_err());
        assert!(matches("a!b", "a!b").is_err(), "a `!` must open `!(…)`");
        assert!(matches("!(a", "x").is_err());
    }
}
