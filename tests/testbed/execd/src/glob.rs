//! Doublestar-style glob matching for `/files/search` (execd matches the pattern against a
//! file's base name only): `*`, `**`, `?`, `[...]` / `[!...]` / `[^...]`, `{a,b}`, `\` escapes.

#[derive(Debug)]
pub struct BadPattern;

pub fn matches(pattern: &str, name: &str) -> Result<bool, BadPattern> {
    let name: Vec<char> = name.chars().collect();
    for alt in expand_braces(pattern)? {
        let p: Vec<char> = alt.chars().collect();
        if match_at(&p, &name, true)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Expands `{a,b}` alternatives (nested allowed) into plain patterns.
fn expand_braces(p: &str) -> Result<Vec<String>, BadPattern> {
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '{' => {
                let mut depth = 0;
                let mut commas = vec![];
                let mut j = i;
                let close = loop {
                    if j >= chars.len() {
                        return Err(BadPattern);
                    }
                    match chars[j] {
                        '\\' => j += 1,
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break j;
                            }
                        }
                        ',' if depth == 1 => commas.push(j),
                        _ => {}
                    }
                    j += 1;
                };
                let head: String = chars[..i].iter().collect();
                let tail: String = chars[close + 1..].iter().collect();
                let mut bounds = vec![i];
                bounds.extend(commas);
                bounds.push(close);
                let mut out = vec![];
                for w in bounds.windows(2) {
                    let alt: String = chars[w[0] + 1..w[1]].iter().collect();
                    out.extend(expand_braces(&format!("{head}{alt}{tail}"))?);
                }
                return Ok(out);
            }
            _ => i += 1,
        }
    }
    Ok(vec![p.to_string()])
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
        ] {
            assert_eq!(matches(p, n).unwrap(), want, "{p} vs {n}");
        }
        assert!(matches("[", "a").is_err());
        assert!(matches("{a,b", "a").is_err());
    }
}
