//! Checking of individual setting values. Every error names the variable and
//! says what a good value looks like.

use crate::{DEFAULT_BASE_URL, Env, SettingError, first_set, spec};
pub use epp_authority::split_host_port;
use std::collections::BTreeMap;
use std::fmt;

fn bad(var: &str, message: impl Into<String>) -> SettingError {
    SettingError {
        var: var.to_string(),
        message: message.into(),
    }
}

/// `true`/`false` and the usual spellings.
pub(crate) fn flag(var: &str, value: &str) -> Result<bool, SettingError> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(bad(
            var,
            format!("`{value}` is not a boolean; use true or false"),
        )),
    }
}

/// A whole number of seconds, at least 1.
pub(crate) fn seconds(var: &str, value: &str) -> Result<u32, SettingError> {
    match value.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(bad(
            var,
            format!("`{value}` is not a number of seconds; use a whole number such as 60"),
        )),
    }
}

/// A whole number of milliseconds within `min..=max`.
pub(crate) fn millis(var: &str, value: &str, min: u32, max: u32) -> Result<u32, SettingError> {
    match value.parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(
            var,
            format!("`{value}` is not a whole number of milliseconds from {min} to {max}"),
        )),
    }
}

/// A JSON array of strings, or space-separated words.
pub(crate) fn words(var: &str, value: &str) -> Result<Vec<String>, SettingError> {
    let words: Vec<String> = if value.starts_with('[') {
        serde_json::from_str(value).map_err(|e| {
            bad(
                var,
                format!(
                    "is not a JSON array of strings ({e}); use e.g. [\"tail\",\"-f\",\"/dev/null\"]"
                ),
            )
        })?
    } else {
        value.split_whitespace().map(str::to_string).collect()
    };
    if words.is_empty() || words[0].is_empty() {
        return Err(bad(var, "is empty; give the program to run first"));
    }
    Ok(words)
}

/// `name=image,name2=image2`.
pub(crate) fn aliases(var: &str, value: &str) -> Result<BTreeMap<String, String>, SettingError> {
    let mut map = BTreeMap::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((name, image)) = item.split_once('=') else {
            return Err(bad(
                var,
                format!(
                    "`{item}` is not name=image; use e.g. code=opensandbox/code-interpreter:v1.1.0"
                ),
            ));
        };
        let (name, image) = (name.trim(), image.trim());
        if name.is_empty() || image.is_empty() || name.contains(':') || name.contains('/') {
            return Err(bad(
                var,
                format!("`{item}`: the name must be plain (no `:` or `/`) and the image non-empty"),
            ));
        }
        map.insert(name.to_string(), image.to_string());
    }
    Ok(map)
}

/// A JSON object in OpenSandbox's `networkPolicy` shape, checked by
/// [`crate::policy::check`].
pub(crate) fn network_policy(var: &str, value: &str) -> Result<String, SettingError> {
    let parsed: serde_json::Value =
        serde_json::from_str(value).map_err(|e| bad(var, format!("is not valid JSON ({e})")))?;
    crate::policy::check(&parsed).map_err(|e| bad(var, e))?;
    Ok(parsed.to_string())
}

/// Target platform of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Platform {
    pub os: &'static str,
    pub arch: &'static str,
}

impl Platform {
    pub(crate) fn parse(var: &str, value: &str) -> Result<Platform, SettingError> {
        let lower = value.to_ascii_lowercase();
        let (os, arch) = lower.split_once('/').unwrap_or((lower.as_str(), ""));
        let os = match os {
            "linux" => "linux",
            "windows" => "windows",
            _ => "",
        };
        let arch = match arch {
            "amd64" => "amd64",
            "arm64" => "arm64",
            _ => "",
        };
        if os.is_empty() || arch.is_empty() {
            return Err(bad(
                var,
                format!(
                    "`{value}` is not a platform; use linux/amd64, linux/arm64, windows/amd64 or windows/arm64"
                ),
            ));
        }
        Ok(Platform { os, arch })
    }
}

/// Where the lifecycle server listens: scheme, host, port and an optional path prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `http` or `https`.
    pub scheme: String,
    /// Lower-case host name or IP address, without brackets or trailing dot.
    pub host: String,
    pub port: u16,
    /// Path before `/v1`, without a trailing slash (usually empty).
    pub path_prefix: String,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}{}",
            self.scheme,
            self.authority(),
            self.path_prefix
        )
    }
}

impl Origin {
    /// Reads base_url, else domain + protocol, else the default.
    pub fn from_env(env: &dyn Env) -> Result<Origin, SettingError> {
        if let Some((var, value)) = first_set(env, spec("base_url").env) {
            return Origin::parse_url(&var, &value);
        }
        if let Some((var, domain)) = first_set(env, spec("domain").env) {
            if domain.contains("://") {
                return Origin::parse_url(&var, &domain);
            }
            let (pvar, protocol) = first_set(env, spec("protocol").env)
                .unwrap_or_else(|| ("ABX_OPENSANDBOX_PROTOCOL".into(), "http".into()));
            let protocol = protocol.to_ascii_lowercase();
            if protocol != "http" && protocol != "https" {
                return Err(bad(&pvar, format!("`{protocol}` is not http or https")));
            }
            return Origin::parse_url(&var, &format!("{protocol}://{domain}"));
        }
        Origin::parse_url("ABX_OPENSANDBOX_BASE_URL", DEFAULT_BASE_URL)
    }

    /// Parses `scheme://host[:port][/prefix][/v1][/]`.
    pub fn parse_url(var: &str, value: &str) -> Result<Origin, SettingError> {
        let example = "use e.g. http://127.0.0.1:8080";
        let Some((scheme, rest)) = value.split_once("://") else {
            return Err(bad(var, format!("`{value}` has no scheme; {example}")));
        };
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(bad(var, format!("scheme `{scheme}` is not http or https")));
        }
        if rest.contains('?') || rest.contains('#') {
            return Err(bad(var, "must not contain a query or fragment"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(bad(
                var,
                "must not contain user:password@; put the key in ABX_OPENSANDBOX_API_KEY",
            ));
        }
        let default_port = if scheme == "https" { 443 } else { 80 };
        let (host, port) = split_host_port(authority, default_port)
            .ok_or_else(|| bad(var, format!("`{authority}` is not host[:port]; {example}")))?;
        let mut path_prefix = path.trim_end_matches('/').to_string();
        if let Some(stripped) = path_prefix.strip_suffix("/v1") {
            path_prefix = stripped.to_string();
        }
        Ok(Origin {
            scheme,
            host,
            port,
            path_prefix,
        })
    }

    /// `host:port`, with brackets around an IPv6 address.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The API root the SDKs use, `…/v1`.
    pub fn api_base(&self) -> String {
        format!("{self}/v1")
    }
}
