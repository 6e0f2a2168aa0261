//! The provider's one error type, and how backend answers map onto it
//! (docs/epp-1.md §6). Every module returns [`Error`]; it becomes abx:epp's
//! `epp-error` once, at the export boundary (`lib.rs`, [`Error::into_epp`]),
//! where secrets are redacted with the settings in hand. Messages name the
//! sandbox, path or setting involved and say what to do next.

use crate::bindings::abx::epp::types::{EppError, ErrorCode};
use crate::http::Transport;
use opensandbox_settings::Settings;

pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong, as the provider tells failures apart. Each kind is one
/// EPP code ([`Kind::code`]), so the same situation gets the same code in
/// every module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The caller's input (E1001).
    Invalid,
    /// A provider setting (E2001).
    Configuration,
    /// The backend rejected the credentials (E2002).
    Credentials,
    /// The sandbox, file, command, context… does not exist (E4004).
    NotFound,
    /// Wrong state, conflict, or a refusal of the request as it stands (E4009).
    Conflict,
    /// The backend failed, or answered what it should not (E5001).
    Upstream,
    /// Nothing answered, or the connection broke (E5003).
    Unreachable,
    /// A wait ran out (E5004).
    TimedOut,
    /// The host's network policy refused the destination (E6001).
    Denied,
    /// Not available with this provider, or on this sandbox (E8004).
    Unsupported,
}

impl Kind {
    pub fn code(self) -> ErrorCode {
        match self {
            Kind::Invalid => ErrorCode::InvalidArgument,
            Kind::Configuration => ErrorCode::Configuration,
            Kind::Credentials => ErrorCode::CredentialsRejected,
            Kind::NotFound => ErrorCode::NotFound,
            Kind::Conflict => ErrorCode::Conflict,
            Kind::Upstream => ErrorCode::Upstream,
            Kind::Unreachable => ErrorCode::Unreachable,
            Kind::TimedOut => ErrorCode::TimedOut,
            Kind::Denied => ErrorCode::DeniedByPolicy,
            Kind::Unsupported => ErrorCode::Unsupported,
        }
    }

    fn of(code: ErrorCode) -> Kind {
        match code {
            ErrorCode::InvalidArgument => Kind::Invalid,
            ErrorCode::Configuration => Kind::Configuration,
            ErrorCode::CredentialsRejected => Kind::Credentials,
            ErrorCode::NotFound => Kind::NotFound,
            ErrorCode::Conflict => Kind::Conflict,
            ErrorCode::Unreachable => Kind::Unreachable,
            ErrorCode::TimedOut => Kind::TimedOut,
            ErrorCode::DeniedByPolicy => Kind::Denied,
            ErrorCode::Unsupported => Kind::Unsupported,
            _ => Kind::Upstream,
        }
    }
}

/// The HTTP answer behind an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http {
    pub status: u16,
    /// The backend's own code (e.g. `DOCKER::SANDBOX_NOT_FOUND`).
    pub code: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
    pub http: Option<Http>,
}

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            http: None,
        }
    }

    pub fn is(&self, kind: Kind) -> bool {
        self.kind == kind
    }

    pub fn status(&self) -> Option<u16> {
        self.http.as_ref().map(|h| h.status)
    }

    pub fn upstream_code(&self) -> Option<&str> {
        self.http.as_ref().and_then(|h| h.code.as_deref())
    }

    /// The same failure told in other words (the HTTP answer behind it kept).
    pub fn reworded(mut self, kind: Kind, message: impl Into<String>) -> Error {
        self.kind = kind;
        self.message = message.into();
        self
    }

    /// abx:epp's error, with every secret setting value redacted from the
    /// message (defence in depth: error texts can echo what a server saw).
    pub fn into_epp(self, settings: Option<&Settings>) -> EppError {
        let (status, upstream) = match self.http {
            Some(h) => (Some(h.status), h.code),
            None => (None, None),
        };
        EppError {
            code: self.kind.code(),
            message: redact(self.message, settings),
            http_status: status,
            upstream_code: upstream,
        }
    }
}

/// An error a host import answered (the host's `websocket`).
impl From<EppError> for Error {
    fn from(e: EppError) -> Error {
        Error {
            kind: Kind::of(e.code),
            message: e.message,
            http: e.http_status.map(|status| Http {
                status,
                code: e.upstream_code,
            }),
        }
    }
}

fn redact(mut text: String, settings: Option<&Settings>) -> String {
    let Some(s) = settings else {
        return text;
    };
    let secrets = [
        s.api_key.as_deref(),
        s.registry_auth.as_ref().map(|a| a.password.as_str()),
    ];
    for secret in secrets.into_iter().flatten().filter(|s| s.len() >= 4) {
        text = text.replace(secret, "<redacted>");
    }
    text
}

pub fn invalid(message: impl Into<String>) -> Error {
    Error::new(Kind::Invalid, message)
}

pub fn configuration(message: impl Into<String>) -> Error {
    Error::new(Kind::Configuration, message)
}

pub fn not_found(message: impl Into<String>) -> Error {
    Error::new(Kind::NotFound, message)
}

pub fn conflict(message: impl Into<String>) -> Error {
    Error::new(Kind::Conflict, message)
}

pub fn upstream(message: impl Into<String>) -> Error {
    Error::new(Kind::Upstream, message)
}

pub fn timed_out(message: impl Into<String>) -> Error {
    Error::new(Kind::TimedOut, message)
}

pub fn unsupported(method: &str, why: &str) -> Error {
    Error::new(
        Kind::Unsupported,
        format!("{method} is not supported by the opensandbox provider: {why}"),
    )
}

/// A failure to talk to `target` (e.g. "the OpenSandbox server at http://…").
pub fn transport(t: Transport, target: &str) -> Error {
    match t {
        Transport::Denied => Error::new(
            Kind::Denied,
            format!(
                "the host's network policy refused the connection to {target}; if it is a sandbox \
                 endpoint you trust, add its host to ABX_OPENSANDBOX_ALLOW_HOSTS (or epp-host \
                 --allow-host), or set ABX_OPENSANDBOX_USE_SERVER_PROXY=true to reach sandboxes \
                 through the server"
            ),
        ),
        Transport::Refused(detail) => Error::new(
            Kind::Unreachable,
            format!(
                "cannot reach {target} ({detail}); check that it is running and that \
                 ABX_OPENSANDBOX_BASE_URL points at it"
            ),
        ),
        Transport::Timeout(detail) => Error::new(
            Kind::TimedOut,
            format!("{target} did not answer in time ({detail}); retry, or check its load"),
        ),
        Transport::Broken(detail) => Error::new(
            Kind::Unreachable,
            format!("the connection to {target} failed ({detail}); retry"),
        ),
        Transport::Invalid(detail) => invalid(format!("{target}: {detail}")),
    }
}

/// The host's network policy refused a sandbox's endpoint (`url`, as the
/// server handed it out). The message names the endpoint's host and the exact
/// setting that allows it, so the first error is enough to fix the setup;
/// `server` is the configured origin, `use_server_proxy` the setting.
pub fn endpoint_denied(
    sandbox_id: &str,
    url: &str,
    server: Option<&str>,
    use_server_proxy: bool,
) -> Error {
    Error::new(
        Kind::Denied,
        endpoint_denied_message(sandbox_id, url, server, use_server_proxy),
    )
}

fn endpoint_denied_message(
    sandbox_id: &str,
    url: &str,
    server: Option<&str>,
    use_server_proxy: bool,
) -> String {
    let authority = crate::http::Url::parse(url)
        .map(|u| u.authority)
        .unwrap_or_else(|_| url.to_string());
    // What an allow-list entry takes: the host alone (an IPv6 address bare).
    let host = opensandbox_settings::split_host_port(&authority, 80)
        .map(|(host, _)| host)
        .unwrap_or_else(|| authority.clone());
    let server = server.map(|s| format!(" ({s})")).unwrap_or_default();
    // Through the server's proxy, pod addresses need no grant at all.
    let proxy = if use_server_proxy {
        ""
    } else {
        " or set ABX_OPENSANDBOX_USE_SERVER_PROXY=true to reach sandboxes through the server"
    };
    format!(
        "epp-host's network policy refused sandbox {sandbox_id}'s endpoint {authority}: the \
         server hands out its sandbox endpoints on `{host}`, which is not the server's own \
         host{server}. If you trust it, set ABX_OPENSANDBOX_ALLOW_HOSTS={host} for epp-host (add \
         it to the comma-separated list if the variable is already set, or pass --allow-host \
         {host}); when every sandbox gets an address of its own (Kubernetes pod IPs), list their \
         network instead (e.g. 10.0.0.0/8){proxy}"
    )
}

/// A failure while reading an answer whose head already arrived.
pub fn broken_body(t: Transport, target: &str) -> Error {
    match t {
        Transport::Timeout(d) => timed_out(format!("{target} stopped sending data ({d})")),
        Transport::Broken(d) | Transport::Refused(d) | Transport::Invalid(d) => {
            upstream(format!("the answer from {target} broke off ({d}); retry"))
        }
        Transport::Denied => transport(Transport::Denied, target),
    }
}

/// The useful parts of an error body: `{code,message}`, FastAPI's `{detail:[…]}`,
/// execd's token error `{error}`, or plain text. FastAPI's `input` echo is never
/// used (it can contain request secrets).
fn body_message(body: &[u8]) -> (Option<String>, String) {
    let text = String::from_utf8_lossy(body);
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        let t = text.trim();
        return (None, t.chars().take(300).collect());
    };
    let code = value
        .get("code")
        .and_then(|c| c.as_str())
        .map(str::to_string);
    if let Some(message) = value.get("message").and_then(|m| m.as_str()) {
        return (code, message.to_string());
    }
    if let Some(details) = value.get("detail").and_then(|d| d.as_array()) {
        let parts: Vec<String> = details
            .iter()
            .map(|d| {
                let loc: Vec<String> = d
                    .get("loc")
                    .and_then(|l| l.as_array())
                    .map(|l| {
                        l.iter()
                            .filter_map(|x| {
                                x.as_str()
                                    .map(str::to_string)
                                    .or_else(|| x.as_u64().map(|n| n.to_string()))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let msg = d.get("msg").and_then(|m| m.as_str()).unwrap_or("invalid");
                if loc.is_empty() {
                    msg.to_string()
                } else {
                    format!("{}: {msg}", loc.join("."))
                }
            })
            .collect();
        return (code, parts.join("; "));
    }
    if let Some(detail) = value.get("detail").and_then(|d| d.as_str()) {
        return (code, detail.to_string());
    }
    if let Some(error) = value.get("error").and_then(|e| e.as_str()) {
        return (code, error.to_string());
    }
    (code, text.chars().take(300).collect())
}

/// Whether an upstream error code says the credentials were missing or wrong
/// (OpenSandbox: `MISSING_API_KEY`, `INVALID_API_KEY`, `MISSING_OR_INVALID_SECURE_ACCESS`;
/// gateways: `…AUTH…`, `…TOKEN…`, `…CREDENTIAL…`).
fn is_credential_code(code: &str) -> bool {
    let code = code.to_ascii_uppercase();
    ["API_KEY", "SECURE_ACCESS", "AUTH", "TOKEN", "CREDENTIAL"]
        .iter()
        .any(|word| code.contains(word))
}

/// An HTTP error answer from `target` about `subject` (e.g. "sandbox 5c1f…").
///
/// 401, and 403 without a code or with a credentials code, are E2002. A 403 with
/// any other code is the deployment refusing the request as it stands (OpenSandbox
/// on Kubernetes: `KUBERNETES::QUOTA_EXCEEDED`, RBAC refusals): E4009 with the
/// server's message, since new credentials would not help and neither would
/// retrying unchanged.
pub fn status(status: u16, body: &[u8], target: &str, subject: &str) -> Error {
    let (upstream_code, message) = body_message(body);
    let detail = match &upstream_code {
        Some(code) => format!("HTTP {status} {code}: {message}"),
        None => format!("HTTP {status}: {message}"),
    };
    let refusal = status == 403
        && upstream_code
            .as_deref()
            .is_some_and(|c| !is_credential_code(c));
    let (kind, text) = match status {
        403 if refusal
            && upstream_code
                .as_deref()
                .is_some_and(|c| c.contains("QUOTA")) =>
        {
            (
                Kind::Conflict,
                format!(
                    "{target} refused {subject}: a quota is used up ({detail}); kill sandboxes you \
                 no longer need (sandbox.list shows them), or ask the server's operator to \
                 raise the quota"
                ),
            )
        }
        403 if refusal => (
            Kind::Conflict,
            format!(
                "{target} refused the request about {subject} ({detail}); this is the \
                 deployment's policy or state, not a credentials problem: ask the server's \
                 operator"
            ),
        ),
        401 | 403 => (
            Kind::Credentials,
            format!(
                "{target} rejected the credentials ({detail}); set ABX_OPENSANDBOX_API_KEY to the \
                 server's API key"
            ),
        ),
        404 => (Kind::NotFound, format!("{subject} not found ({detail})")),
        409 => (
            Kind::Conflict,
            format!("{subject} is in the wrong state for this ({detail})"),
        ),
        400 | 422 => (
            Kind::Invalid,
            format!("{target} rejected the request about {subject}: {detail}"),
        ),
        429 => (
            Kind::Upstream,
            format!("{target} is busy ({detail}); retry later"),
        ),
        s if s >= 500 => (
            Kind::Upstream,
            format!("{target} failed ({detail}); retry later"),
        ),
        _ => (
            Kind::Upstream,
            format!("{target} gave an unexpected answer about {subject} ({detail})"),
        ),
    };
    Error {
        kind,
        message: text,
        http: Some(Http {
            status,
            code: upstream_code,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_endpoint_names_the_exact_allow_entry() {
        let m = endpoint_denied_message(
            "sb-1",
            "http://127.0.0.2:40123/proxy/44772",
            Some("http://127.0.0.1:8080"),
            false,
        );
        assert!(m.contains("sandbox sb-1's endpoint 127.0.0.2:40123"), "{m}");
        assert!(m.contains("ABX_OPENSANDBOX_ALLOW_HOSTS=127.0.0.2 "), "{m}");
        assert!(m.contains("--allow-host 127.0.0.2)"), "{m}");
        assert!(m.contains("(http://127.0.0.1:8080)"), "{m}");
        assert!(m.contains("ABX_OPENSANDBOX_USE_SERVER_PROXY=true"), "{m}");
        // IPv6 endpoints: the entry is the bare address; a name is lower-cased.
        let m = endpoint_denied_message("sb-2", "http://[FD00::5]:44772", None, true);
        assert!(m.contains("ABX_OPENSANDBOX_ALLOW_HOSTS=fd00::5 "), "{m}");
        assert!(!m.contains("USE_SERVER_PROXY"), "{m}");
        let m = endpoint_denied_message("sb-3", "https://Sandbox.Example.COM/x", None, false);
        assert!(
            m.contains("ABX_OPENSANDBOX_ALLOW_HOSTS=sandbox.example.com "),
            "{m}"
        );
    }

    #[test]
    fn error_bodies() {
        let e = status(
            404,
            br#"{"code":"DOCKER::SANDBOX_NOT_FOUND","message":"gone"}"#,
            "server",
            "sandbox x",
        );
        assert_eq!(e.kind, Kind::NotFound);
        assert_eq!(e.upstream_code(), Some("DOCKER::SANDBOX_NOT_FOUND"));
        assert!(e.message.contains("sandbox x not found") && e.message.contains("gone"));
        let e = status(
            422,
            br#"{"detail":[{"type":"x","loc":["body","timeout"],"msg":"must be >= 60","input":"s3cret"}]}"#,
            "server",
            "new sandbox",
        );
        assert_eq!(e.kind, Kind::Invalid);
        assert!(
            e.message.contains("body.timeout: must be >= 60"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("s3cret"));
        let e = status(401, br#"{"error":"Unauthorized"}"#, "execd", "sandbox");
        assert_eq!(e.kind, Kind::Credentials);
        // 401 and credential codes are E2002 whatever the status; a bare 403 too.
        for (http, body) in [
            (
                401,
                &br#"{"code":"INVALID_API_KEY","message":"bad key"}"#[..],
            ),
            (
                401,
                br#"{"code":"MISSING_OR_INVALID_SECURE_ACCESS","message":"x"}"#,
            ),
            (403, br#"{"code":"INVALID_API_KEY","message":"bad key"}"#),
            (403, br#"{"code":"GATEWAY::AUTH_FAILED","message":"x"}"#),
            (403, b"Forbidden"),
            (403, br#"{"message":"forbidden"}"#),
        ] {
            let e = status(http, body, "the server", "new sandbox");
            assert_eq!(e.kind, Kind::Credentials, "{http} {e:?}");
            assert!(e.message.contains("ABX_OPENSANDBOX_API_KEY"), "{e:?}");
        }
        // A quota is not a credentials problem: E4009 with the server's message.
        let e = status(
            403,
            br#"{"code":"KUBERNETES::QUOTA_EXCEEDED","message":"Namespace ResourceQuota exceeded: exceeded quota: q, requested: pods=1, used: pods=10, limited: pods=10"}"#,
            "the OpenSandbox server",
            "the new sandbox",
        );
        assert_eq!(e.kind, Kind::Conflict);
        assert_eq!(e.status(), Some(403));
        assert_eq!(e.upstream_code(), Some("KUBERNETES::QUOTA_EXCEEDED"));
        assert!(
            e.message.contains("limited: pods=10") && e.message.contains("quota"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("ABX_OPENSANDBOX_API_KEY"));
        // Other refusals with a code are E4009 too.
        let e = status(
            403,
            br#"{"code":"KUBERNETES::API_ERROR","message":"Kubernetes denied log access"}"#,
            "the server",
            "sandbox x",
        );
        assert_eq!(e.kind, Kind::Conflict);
        assert!(e.message.contains("denied log access"), "{}", e.message);
        assert_eq!(status(503, b"oops", "s", "x").kind, Kind::Upstream);
        assert_eq!(status(409, b"{}", "s", "x").kind, Kind::Conflict);
    }

    #[test]
    fn the_boundary_maps_kinds_and_redacts_secrets() {
        let settings = Settings::from_env(&|name: &str| match name {
            "ABX_OPENSANDBOX_API_KEY" => Some("key-s3cret".into()),
            "ABX_OPENSANDBOX_REGISTRY_USERNAME" => Some("bot".into()),
            "ABX_OPENSANDBOX_REGISTRY_PASSWORD" => Some("pw-s3cret".into()),
            _ => None,
        })
        .unwrap();
        let e = status(
            409,
            br#"{"code":"X::Y","message":"saw key-s3cret and pw-s3cret"}"#,
            "the server",
            "sandbox x",
        );
        let wit = e.clone().into_epp(Some(&settings));
        assert_eq!(wit.code, ErrorCode::Conflict);
        assert_eq!(
            (wit.http_status, wit.upstream_code.as_deref()),
            (Some(409), Some("X::Y"))
        );
        assert!(
            wit.message.contains("saw <redacted> and <redacted>"),
            "{}",
            wit.message
        );
        // Without settings (they did not load) nothing is known to redact.
        assert!(e.into_epp(None).message.contains("key-s3cret"));
        // Every kind has its own code, and a host's code comes back as the same kind.
        for kind in [
            Kind::Invalid,
            Kind::Configuration,
            Kind::Credentials,
            Kind::NotFound,
            Kind::Conflict,
            Kind::Upstream,
            Kind::Unreachable,
            Kind::TimedOut,
            Kind::Denied,
            Kind::Unsupported,
        ] {
            let back: Error = Error::new(kind, "m").into_epp(None).into();
            assert_eq!(back.kind, kind);
        }
    }
}
