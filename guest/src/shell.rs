//! Shell text the provider writes for execd to run: terminals and stdin
//! commands (crate::pty, execd's PTY API takes no environment), and runs as
//! another user (crate::users, crate::sessions). Everything a caller gives
//! goes in single-quoted or as a checked variable name, never as shell code.

use crate::error::{Result, invalid};

/// Single-quotes a value for bash.
pub fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// Refuses a variable name bash would not take (`export 1A=x` is an error,
/// `env 'A B=x'` would set a variable no shell can read).
pub fn check_names(envs: &[(String, String)]) -> Result<()> {
    for (k, _) in envs {
        if k.is_empty()
            || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            || k.as_bytes()[0].is_ascii_digit()
        {
            return Err(invalid(format!(
                "`{k}` is not a valid environment variable name"
            )));
        }
    }
    Ok(())
}

/// `export K='V'; ` for each (checked) variable.
pub fn exports(envs: &[(String, String)]) -> String {
    envs.iter()
        .map(|(k, v)| format!("export {k}={}; ", quote(v)))
        .collect()
}

/// ` K='V'` for each (checked) variable: arguments of `env`.
pub fn assignments<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    vars.into_iter()
        .map(|(k, v)| format!(" {k}={}", quote(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_quoted_and_names_checked() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        let envs = vec![("A".to_string(), "x y".to_string())];
        assert_eq!(exports(&envs), "export A='x y'; ");
        assert_eq!(assignments([("A", "$x")]), " A='$x'");
        assert!(check_names(&envs).is_ok());
        for bad in ["", "1A", "A B", "A=B", "É"] {
            let e = check_names(&[(bad.to_string(), String::new())]).unwrap_err();
            assert!(e.message.contains("not a valid environment"), "{bad}");
        }
    }
}
