//! What a provider is granted: its declared needs (`provider-needs`, wit/types.wit)
//! resolved against what the operator configured, which is the host's
//! environment and `--allow-host`. The network policy (`policy.rs`) enforces
//! the result, the guest's environment (`config.rs`) leaves out what it
//! withholds, and `epp-host inspect` prints it next to the request.
//!
//! Resolution is strict about the provider's declaration (a placeholder that
//! names no setting, a secret header from a setting that is not secret: the
//! provider is refused) and lenient about the operator's values, as the WIT
//! rule says: an origin candidate that does not resolve is skipped.

use super::destination::Destination;
use crate::contract::bindings::abx::epp::types::{
    HeaderScope, ProviderInfo, ProviderNeeds, Setting,
};
use http::{HeaderName, HeaderValue};
use std::fmt;
use wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS;

/// The agent framework's own API key (EPP/1). No provider gets it, whatever
/// it declares.
pub const FRAMEWORK_KEY_ENV: &str = "ABX_SANDBOX_API_KEY";

/// The host's own environment, as the operator set it.
pub fn host_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Looks an operator's environment variable up.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The operator's value of a setting: its first variable that is set and not
/// blank, with that variable's name.
pub fn setting_value(setting: &Setting, env: Env) -> Option<(String, String)> {
    setting.env.iter().find_map(|var| {
        env(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .map(|v| (var.clone(), v))
    })
}

/// The WIT case name of a header scope (as `inspect` and provider.json show it).
pub fn scope_name(scope: HeaderScope) -> &'static str {
    match scope {
        HeaderScope::Origin => "origin",
        HeaderScope::OriginHost => "origin-host",
    }
}

/// Where the operator listed more hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// One of the provider's `allow-hosts-env` variables.
    Env(String),
    /// `--allow-host`.
    Flag,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Env(var) => f.write_str(var),
            Source::Flag => f.write_str("--allow-host"),
        }
    }
}

/// Allow-list entries (separated by commas or spaces) and where they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntries {
    /// The variable or flag they came from.
    pub source: Source,
    /// As the operator wrote them.
    pub entries: String,
}

impl AllowEntries {
    /// Each entry: commas and white space separate them.
    pub fn each(&self) -> impl Iterator<Item = &str> {
        self.entries
            .split([',', ' ', '\n', '\t'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }
}

/// The backend origin: the first origin template that resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The template as the provider declared it.
    pub template: String,
    /// The template with its placeholders filled in.
    pub url: String,
    /// Scheme, host and port (the path is the provider's business).
    pub dest: Destination,
}

/// An origin template that did not give the origin, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The template as the provider declared it.
    pub template: String,
    /// Which placeholder was unset, or why the URL is not usable.
    pub why: String,
}

/// A secret setting the host sends as a request header. Its `Debug` (and so
/// a `Grant`'s) shows whether a value is set, never the value.
#[derive(Clone)]
pub struct SecretHeader {
    /// The setting's name.
    pub setting: String,
    /// The header that carries the value.
    pub header: HeaderName,
    /// Which requests get it: the origin, or any port on the origin's host.
    pub scope: HeaderScope,
    /// Every variable of the setting; the guest sees none of them.
    pub env: Vec<String>,
    /// The variable the value came from; `None` when the operator set none.
    pub var: Option<String>,
    /// Marked sensitive, so `Debug` shows no value.
    pub value: Option<HeaderValue>,
}

impl fmt::Debug for SecretHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretHeader")
            .field("setting", &self.setting)
            .field("header", &self.header)
            .field("scope", &self.scope)
            .field("env", &self.env)
            .field("var", &self.var)
            .field("value", &redacted(self.value.as_ref()))
            .finish()
    }
}

/// How a secret value shows in `Debug`.
pub fn redacted(value: Option<&HeaderValue>) -> &'static str {
    match value {
        Some(_) => "<redacted>",
        None => "<unset>",
    }
}

/// Everything a provider is granted.
#[derive(Debug, Clone)]
pub struct Grant {
    /// `None` when no template resolved (or the provider declared none).
    pub origin: Option<Origin>,
    /// Templates tried before the origin, or all of them when there is none.
    pub skipped: Vec<Skipped>,
    /// The settings the origin templates need (placeholders without a
    /// fallback), with their variables: what the operator can set when no
    /// origin resolves.
    pub origin_settings: Vec<(String, Vec<String>)>,
    /// Any port on the origin's host may be reached too.
    pub origin_host_any_port: bool,
    /// More hosts, from the provider's `allow-hosts-env` variables and `--allow-host`.
    pub allow: Vec<AllowEntries>,
    /// The provider's `allow-hosts-env` variables, set or not (for messages).
    pub allow_hosts_env: Vec<String>,
    /// The secret headers the host sends (and strips from what the guest sends).
    pub secret_headers: Vec<SecretHeader>,
}

/// One piece of an origin template.
#[derive(Debug, PartialEq, Eq)]
enum Piece<'t> {
    Text(&'t str),
    /// `{name}` or `{name=fallback}`.
    Setting {
        name: &'t str,
        fallback: Option<&'t str>,
    },
}

fn parse_template(template: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(i) = rest.find(['{', '}']) {
        if rest.as_bytes()[i] == b'}' {
            return Err("a `}` without its `{`".into());
        }
        if i > 0 {
            pieces.push(Piece::Text(&rest[..i]));
        }
        let after = &rest[i + 1..];
        let end = after.find('}').ok_or("a `{` without its `}`")?;
        let inner = &after[..end];
        if inner.contains('{') {
            return Err("placeholders do not nest".into());
        }
        let (name, fallback) = match inner.split_once('=') {
            Some((name, fallback)) => (name, Some(fallback)),
            None => (inner, None),
        };
        if name.is_empty() {
            return Err("a placeholder without a setting name".into());
        }
        pieces.push(Piece::Setting { name, fallback });
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    Ok(pieces)
}

/// Parses `http(s)://host[:port][/path]` into the destination it names.
pub fn parse_origin_url(url: &str) -> Result<Destination, String> {
    let (scheme, rest) = url.split_once("://").ok_or("it has no scheme")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(format!("scheme `{scheme}` is not http or https"));
    }
    if rest.contains(['?', '#']) {
        return Err("it has a query or fragment".into());
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err("it has no host".into());
    }
    Destination::parse(&scheme, authority).map_err(|denied| denied.0)
}

/// The declared setting `name`.
fn setting<'i>(info: &'i ProviderInfo, name: &str) -> Option<&'i Setting> {
    info.settings.iter().find(|s| s.name == name)
}

impl Grant {
    /// Resolves `needs` against the operator's environment and `--allow-host`
    /// entries. An error is a declaration the host refuses (or a secret value
    /// that cannot be sent as a header); it never contains a secret value.
    pub fn resolve(
        info: &ProviderInfo,
        needs: &ProviderNeeds,
        env: Env,
        allow_flags: &[String],
    ) -> Result<Grant, String> {
        for s in &info.settings {
            if s.env.iter().any(|v| v == FRAMEWORK_KEY_ENV) {
                return Err(format!(
                    "describe() reads setting `{}` from {FRAMEWORK_KEY_ENV}, the agent \
                     framework's own key, which epp-host never hands to a provider",
                    s.name
                ));
            }
        }
        for (i, (key, name)) in needs.generic_settings.iter().enumerate() {
            if !epp_protocol::GENERIC_KEYS.contains(&key.as_str()) {
                return Err(format!(
                    "needs() maps `{key}`, which is not an EPP/1 generic key (those are {})",
                    epp_protocol::GENERIC_KEYS.join(", ")
                ));
            }
            if setting(info, name).is_none() {
                return Err(format!(
                    "needs() maps `{key}` to `{name}`, which describe() does not declare"
                ));
            }
            if needs.generic_settings[..i].iter().any(|(k, _)| k == key) {
                return Err(format!("needs() maps `{key}` twice"));
            }
        }
        let (origin, skipped, origin_settings) = resolve_origin(info, &needs.origin, env)?;
        let secret_headers = secret_headers(info, needs, env)?;
        let mut allow = Vec::new();
        for var in &needs.allow_hosts_env {
            let secret = var == FRAMEWORK_KEY_ENV
                || info
                    .settings
                    .iter()
                    .any(|s| s.secret && s.env.contains(var));
            if secret {
                return Err(format!(
                    "needs() asks the host to read hosts from {var}, which holds a secret"
                ));
            }
            if let Some(entries) = env(var).filter(|v| !v.trim().is_empty()) {
                allow.push(AllowEntries {
                    source: Source::Env(var.clone()),
                    entries,
                });
            }
        }
        allow.extend(allow_flags.iter().map(|entries| AllowEntries {
            source: Source::Flag,
            entries: entries.clone(),
        }));
        Ok(Grant {
            origin,
            skipped,
            origin_settings,
            origin_host_any_port: needs.origin_host_any_port,
            allow,
            allow_hosts_env: needs.allow_hosts_env.clone(),
            secret_headers,
        })
    }

    /// A grant of nothing: no origin, no hosts, no headers.
    pub fn nothing() -> Grant {
        Grant {
            origin: None,
            skipped: Vec::new(),
            origin_settings: Vec::new(),
            origin_host_any_port: false,
            allow: Vec::new(),
            allow_hosts_env: Vec::new(),
            secret_headers: Vec::new(),
        }
    }

    /// The operator's variables the guest never sees: those of injected secret
    /// settings, the allow-list variables, and the framework's key.
    pub fn withheld(&self) -> impl Iterator<Item = &str> {
        self.secret_headers
            .iter()
            .flat_map(|h| h.env.iter())
            .chain(&self.allow_hosts_env)
            .map(String::as_str)
            .chain([FRAMEWORK_KEY_ENV])
    }

    /// Why there is no origin and what to set, when the provider declared
    /// origin templates and none resolved.
    pub fn missing_origin(&self) -> Option<String> {
        if self.origin.is_some() || self.skipped.is_empty() {
            return None;
        }
        let why: Vec<String> = self
            .skipped
            .iter()
            .map(|s| format!("`{}`: {}", s.template, s.why))
            .collect();
        let set: Vec<String> = self
            .origin_settings
            .iter()
            .map(|(name, vars)| format!("{name} ({})", vars.join(", ")))
            .collect();
        let set = if set.is_empty() {
            String::new()
        } else {
            format!("; set {}", set.join(" or "))
        };
        Some(format!(
            "none of the provider's origin templates resolves ({}){set}",
            why.join("; ")
        ))
    }

    /// What the provider may reach by its own declaration, in words.
    pub fn reach(&self) -> String {
        match &self.origin {
            Some(origin) if self.origin_host_any_port => {
                format!("its origin {} (any port on that host)", origin.dest)
            }
            Some(origin) => format!("its origin {}", origin.dest),
            None if self.skipped.is_empty() => "no origin (it declares none)".to_string(),
            None => "no origin (its origin settings are not set; see `epp-host inspect`)".into(),
        }
    }

    /// Where the operator lists more hosts, in words: the provider's variables
    /// and `--allow-host`.
    pub fn allow_hint(&self) -> String {
        let mut places = self.allow_hosts_env.clone();
        places.push("--allow-host".into());
        places.join(" or ")
    }
}

type Resolved = (Option<Origin>, Vec<Skipped>, Vec<(String, Vec<String>)>);

/// The first template that resolves, the ones skipped before it, and the
/// settings the templates read.
fn resolve_origin(info: &ProviderInfo, templates: &[String], env: Env) -> Result<Resolved, String> {
    let mut parsed = Vec::new();
    let mut settings: Vec<(String, Vec<String>)> = Vec::new();
    for template in templates {
        let pieces = parse_template(template)
            .map_err(|e| format!("needs() origin template `{template}`: {e}"))?;
        for piece in &pieces {
            let Piece::Setting { name, fallback } = piece else {
                continue;
            };
            let s = setting(info, name).ok_or_else(|| {
                format!(
                    "needs() origin template `{template}` reads `{name}`, which describe() \
                     does not declare"
                )
            })?;
            if s.secret {
                return Err(format!(
                    "needs() origin template `{template}` reads the secret setting `{name}`; \
                     an origin is not secret"
                ));
            }
            // A placeholder with a fallback never keeps a template from resolving.
            if fallback.is_none() && !settings.iter().any(|(n, _)| n == name) {
                settings.push((s.name.clone(), s.env.clone()));
            }
        }
        parsed.push((template, pieces));
    }
    let mut skipped = Vec::new();
    for (template, pieces) in parsed {
        match expand(info, &pieces, env).and_then(|url| {
            parse_origin_url(&url)
                .map(|dest| (url.clone(), dest))
                .map_err(|e| format!("`{url}` is not an http(s)://host[:port][/path] URL: {e}"))
        }) {
            Ok((url, dest)) => {
                let origin = Origin {
                    template: template.clone(),
                    url,
                    dest,
                };
                return Ok((Some(origin), skipped, settings));
            }
            Err(why) => skipped.push(Skipped {
                template: template.clone(),
                why,
            }),
        }
    }
    Ok((None, skipped, settings))
}

/// Fills a template's placeholders in; `Err` names the first that is unset.
fn expand(info: &ProviderInfo, pieces: &[Piece<'_>], env: Env) -> Result<String, String> {
    let mut url = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => url.push_str(text),
            Piece::Setting { name, fallback } => {
                let value = setting(info, name)
                    .and_then(|s| setting_value(s, env))
                    .map(|(_, v)| v)
                    .or_else(|| fallback.map(str::to_string))
                    .ok_or_else(|| format!("{name} is not set"))?;
                url.push_str(&value);
            }
        }
    }
    Ok(url)
}

fn secret_headers(
    info: &ProviderInfo,
    needs: &ProviderNeeds,
    env: Env,
) -> Result<Vec<SecretHeader>, String> {
    let mut out: Vec<SecretHeader> = Vec::new();
    for h in &needs.secret_headers {
        let what = format!(
            "needs() sends setting `{}` as header `{}`",
            h.setting, h.header
        );
        let s = setting(info, &h.setting)
            .ok_or_else(|| format!("{what}, but describe() declares no setting `{}`", h.setting))?;
        if !s.secret {
            return Err(format!(
                "{what}, but describe() does not declare `{}` secret; the host injects only \
                 secret settings",
                h.setting
            ));
        }
        let header = HeaderName::from_bytes(h.header.as_bytes())
            .map_err(|_| format!("{what}: `{}` is not a header name", h.header))?;
        if DEFAULT_FORBIDDEN_HEADERS.contains(&header) {
            return Err(format!("{what}: nobody may set `{header}` on a request"));
        }
        if out.iter().any(|o| o.header == header) {
            return Err(format!("{what}: that header is declared twice"));
        }
        let (var, value) = match setting_value(s, env) {
            None => (None, None),
            Some((var, value)) => {
                let mut value = HeaderValue::from_str(&value).map_err(|_| {
                    format!(
                        "{var} (setting `{}`) holds characters a `{header}` header cannot carry",
                        h.setting
                    )
                })?;
                value.set_sensitive(true);
                (Some(var), Some(value))
            }
        };
        out.push(SecretHeader {
            setting: s.name.clone(),
            header,
            scope: h.scope,
            env: s.env.clone(),
            var,
            value,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

/// An `example` provider with these settings (name, variables, secret) and no
/// capabilities, for the unit tests of the grant and of what builds on it
/// (configuration, provider options).
#[cfg(test)]
pub(crate) fn test_provider(settings: &[(&str, &[&str], bool)]) -> ProviderInfo {
    ProviderInfo {
        id: "example".into(),
        version: "1".into(),
        capabilities: Vec::new(),
        settings: settings
            .iter()
            .map(|(name, env, secret)| test_setting(name, env, *secret))
            .collect(),
    }
}

/// A setting with no default or description, for the unit tests of the grant
/// and of what builds on it (configuration, provider options).
#[cfg(test)]
pub(crate) fn test_setting(name: &str, env: &[&str], secret: bool) -> Setting {
    Setting {
        name: name.into(),
        env: env.iter().map(|s| s.to_string()).collect(),
        default_value: None,
        secret,
        description: String::new(),
    }
}
