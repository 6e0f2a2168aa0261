//! execd's path handling (`pkg/util/pathutil`): `$NAME`/`${NAME}` expansion from the
//! process environment (an undefined name is an error), a leading `~` from `$HOME`, and
//! Go's lexical `filepath.Abs`/`Clean`.

use std::collections::{BTreeSet, HashMap};

/// The process environment, optionally overlaid (e.g. by a command's `EXECD_ENVS` + `envs`).
pub fn env_map(overrides: Option<&HashMap<String, String>>) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    if let Some(o) = overrides {
        env.extend(o.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    env
}

fn is_name_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Names matched by execd's `\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`.
fn referenced_names(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            i += 1;
            continue;
        }
        let braced = b.get(i + 1) == Some(&b'{');
        let start = i + 1 + usize::from(braced);
        if start < b.len() && is_name_start(b[start]) {
            let mut end = start + 1;
            while end < b.len() && is_name_char(b[end]) {
                end += 1;
            }
            if !braced {
                out.push(&s[start..end]);
                i = end;
                continue;
            }
            if b.get(end) == Some(&b'}') {
                out.push(&s[start..end]);
                i = end + 1;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// Go's `os.Expand`, including its handling of special one-character names and bad syntax.
pub fn go_expand(s: &str, lookup: impl Fn(&str) -> String) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let mut j = 0;
    while j < b.len() {
        if b[j] == b'$' && j + 1 < b.len() {
            out.push_str(&s[i..j]);
            let rest = &s[j + 1..];
            let (name, width) = shell_name(rest);
            if name.is_empty() && width > 0 {
                // Invalid syntax such as "${}": Go eats it.
            } else if name.is_empty() {
                out.push('$');
            } else {
                out.push_str(&lookup(name));
            }
            j += width;
            i = j + 1;
        }
        j += 1;
    }
    out.push_str(&s[i.min(s.len())..]);
    out
}

fn is_special(c: u8) -> bool {
    matches!(c, b'*' | b'#' | b'$' | b'@' | b'!' | b'?' | b'-') || c.is_ascii_digit()
}

fn shell_name(s: &str) -> (&str, usize) {
    let b = s.as_bytes();
    if b[0] == b'{' {
        if b.len() > 2 && is_special(b[1]) && b[2] == b'}' {
            return (&s[1..2], 3);
        }
        for i in 1..b.len() {
            if b[i] == b'}' {
                if i == 1 {
                    return ("", 2);
                }
                return (&s[1..i], i + 1);
            }
        }
        return ("", 1);
    }
    if is_special(b[0]) {
        return (&s[0..1], 1);
    }
    let n = b.iter().take_while(|&&c| is_name_char(c)).count();
    (&s[..n], n)
}

/// `pathutil.ExpandPathWithEnv`.
pub fn expand_with(
    path: &str,
    overrides: Option<&HashMap<String, String>>,
) -> Result<String, String> {
    if path.is_empty() {
        return Ok(String::new());
    }
    let env = env_map(overrides);
    let missing: BTreeSet<&str> = referenced_names(path)
        .into_iter()
        .filter(|n| !env.contains_key(*n))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "path references undefined environment variables: {}",
            missing.into_iter().collect::<Vec<_>>().join(",")
        ));
    }
    let expanded = go_expand(path, |k| env.get(k).cloned().unwrap_or_default());
    if expanded == "~" || expanded.starts_with("~/") {
        let home = std::env::var("HOME")
            .ok()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| "$HOME is not defined".to_string())?;
        if expanded == "~" {
            return Ok(home);
        }
        return Ok(clean(&format!("{home}/{}", &expanded[2..])));
    }
    Ok(expanded)
}

/// `pathutil.ExpandPath`.
pub fn expand(path: &str) -> Result<String, String> {
    expand_with(path, None)
}

/// `pathutil.ExpandAbsPath`: expand, then `filepath.Abs`.
pub fn expand_abs(path: &str) -> Result<String, String> {
    Ok(abs(&expand(path)?))
}

/// Go's `filepath.Abs` (lexical, against the process working directory).
pub fn abs(path: &str) -> String {
    if path.starts_with('/') {
        return clean(path);
    }
    let cwd = std::env::current_dir()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "/".into());
    clean(&format!("{cwd}/{path}"))
}

/// Go's `filepath.Clean`.
pub fn clean(path: &str) -> String {
    if path.is_empty() {
        return ".".into();
    }
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// Go's `filepath.Base`.
pub fn base(path: &str) -> String {
    let t = path.trim_end_matches('/');
    if t.is_empty() {
        return if path.is_empty() {
            ".".into()
        } else {
            "/".into()
        };
    }
    t.rsplit('/').next().unwrap_or(t).to_string()
}

/// Go's `filepath.Dir`.
pub fn dir(path: &str) -> String {
    match path.rfind('/') {
        Some(i) => clean(&path[..=i]),
        None => ".".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleaning() {
        assert_eq!(clean("/a/../b//c/."), "/b/c");
        assert_eq!(clean("../a/.."), "..");
        assert_eq!(clean("/.."), "/");
        assert_eq!(clean(""), ".");
        assert_eq!(base("/a/b/"), "b");
        assert_eq!(dir("/a/b"), "/a");
        assert_eq!(dir("b"), ".");
    }

    #[test]
    fn expansion_follows_go() {
        let lookup = |k: &str| match k {
            "A" => "x".to_string(),
            _ => String::new(),
        };
        assert_eq!(go_expand("$A/${A}/$$/$", lookup), "x/x//$");
        assert_eq!(go_expand("a${}b", lookup), "ab");
        assert_eq!(referenced_names("$A ${B} $1 ${C"), vec!["A", "B"]);
        let mut o = HashMap::new();
        o.insert("MYDIR".to_string(), "/d".to_string());
        assert_eq!(expand_with("$MYDIR/x", Some(&o)).unwrap(), "/d/x");
        assert!(
            expand("$NO_SUCH_VAR_EXECD_TEST/x")
                .unwrap_err()
                .contains("NO_SUCH_VAR_EXECD_TEST")
        );
    }
}
