//! EPP errors the provider returns, and how backend answers map onto them
//! (docs/epp-1.md §6). Messages name the sandbox, path or setting involved, say
//! what to do next, and never carry a secret.

use crate::bindings::abx::epp::types::{EppError, ErrorCode};
use crate::config;
use crate::http::Transport;

pub type Result<T> = std::result::Result<T, EppError>;

pub fn err(code: ErrorCode, message: impl Into<String>) -> EppError {
    EppError {
        code,
        message: config::redact(message.into()),
        http_status: None,
        upstream_code: None,
    }
}

pub fn invalid(message: impl Into<String>) -> EppError {
    err(ErrorCode::InvalidArgument, message)
}

pub fn not_found(message: impl Into<String>) -> EppError {
    err(ErrorCode::NotFound, message)
}

pub fn conflict(message: impl Into<String>) -> EppError {
    err(ErrorCode::Conflict, message)
}

pub fn upstream(message: impl Into<String>) -> EppError {
    err(ErrorCode::Upstream, message)
}

pub fn timed_out(message: impl Into<String>) -> EppError {
    err(ErrorCode::TimedOut, message)
}

pub fn unsupported(method: &str, why: &str) -> EppError {
    err(
        ErrorCode::Unsupported,
        format!("{method} is not supported by the opensandbox provider: {why}"),
    )
}

/// A failure to talk to `target` (e.g. "the OpenSandbox server at http://…").
pub fn transport(t: Transport, target: &str) -> EppError {
    match t {
        Transport::Denied => err(
            ErrorCode::DeniedByPolicy,
            format!(
                "the host's network policy refused the connection to {target}; if it is a sandbox \
                 endpoint you trust, add its host to ABX_OPENSANDBOX_ALLOW_HOSTS (or epp-host \
                 --allow-host), or set ABX_OPENSANDBOX_USE_SERVER_PROXY=true to reach sandboxes \
                 through the server"
            ),
        ),
        Transport::Refused(detail) => err(
            ErrorCode::Unreachable,
            format!(
                "cannot reach {target} ({detail}); check that it is running and that \
                 ABX_OPENSANDBOX_BASE_URL points at it"
            ),
        ),
        Transport::Timeout(detail) => err(
            ErrorCode::TimedOut,
            format!("{target} did not answer in time ({detail}); retry, or check its load"),
        ),
        Transport::Broken(detail) => err(
            ErrorCode::Unreachable,
            format!("the connection to {target} failed ({detail}); retry"),
        ),
        Transport::Invalid(detail) => {
            err(ErrorCode::InvalidArgument, format!("{target}: {detail}"))
        }
    }
}

/// The host's network policy refused a sandbox's endpoint (`url`, as the
/// server handed it out). The message names the endpoint's host and the exact
/// setting that allows it, so the first error is enough to fix the setup.
pub fn endpoint_denied(sandbox_id: &str, url: &str) -> EppError {
    let settings = config::settings().ok();
    let server = settings.map(|s| s.origin.to_string());
    let proxy = settings.is_some_and(|s| s.use_server_proxy);
    err(
        ErrorCode::DeniedByPolicy,
        endpoint_denied_message(sandbox_id, url, server.as_deref(), proxy),
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
pub fn broken_body(t: Transport, target: &str) -> EppError {
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
pub fn status(status: u16, body: &[u8], target: &str, subject: &str) -> EppError {
    let (upstream_code, message) = body_message(body);
    let detail = match &upstream_code {
        Some(code) => format!("HTTP {status} {code}: {message}"),
        None => format!("HTTP {status}: {message}"),
    };
    let refusal = status == 403
        && upstream_code
            .as_deref()
            .is_some_and(|c| !is_credential_code(c));
    let (code, text) = match status {
        403 if refusal
            && upstream_code
                .as_deref()
                .is_some_and(|c| c.contains("QUOTA")) =>
        {
            (
                ErrorCode::Conflict,
                format!(
                    "{target} refused {subject}: a quota is used up ({detail}); kill sandboxes you \
                 no longer need (sandbox.list shows them), or ask the server's operator to \
                 raise the quota"
                ),
            )
        }
        403 if refusal => (
            ErrorCode::Conflict,
            format!(
                "{target} refused the request about {subject} ({detail}); this is the \
                 deployment's policy or state, not a credentials problem: ask the server's \
                 operator"
            ),
        ),
        401 | 403 => (
            ErrorCode::CredentialsRejected,
            format!(
                "{target} rejected the credentials ({detail}); set ABX_OPENSANDBOX_API_KEY to the \
                 server's API key"
            ),
        ),
        404 => (
            ErrorCode::NotFound,
            format!("{subject} not found ({detail})"),
        ),
        409 => (
            ErrorCode::Conflict,
            format!("{subject} is in the wrong state for this ({detail})"),
        ),
        400 | 422 => (
            ErrorCode::InvalidArgument,
            format!("{target} rejected the request about {subject}: {detail}"),
        ),
        429 => (
            ErrorCode::Upstream,
            format!("{target} is busy ({detail}); retry later"),
        ),
        s if s >= 500 => (
            ErrorCode::Upstream,
            format!("{target} failed ({detail}); retry later"),
        ),
        _ => (
            ErrorCode::Upstream,
            format!("{target} gave an unexpected answer about {subject} ({detail})"),
        ),
    };
    let mut e = err(code, text);
    e.http_status = Some(status);
    e.upstream_code = upstream_code;
    e
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
        assert_eq!(e.code, ErrorCode::NotFound);
        assert_eq!(
            e.upstream_code.as_deref(),
            Some("DOCKER::SANDBOX_NOT_FOUND")
        );
        assert!(e.message.contains("sandbox x not found") && e.message.contains("gone"));
        let e = status(
            422,
            br#"{"detail":[{"type":"x","loc":["body","timeout"],"msg":"must be >= 60","input":"s3cret"}]}"#,
            "server",
            "new sandbox",
        );
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert!(
            e.message.contains("body.timeout: must be >= 60"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("s3cret"));
        let e = status(401, br#"{"error":"Unauthorized"}"#, "execd", "sandbox");
        assert_eq!(e.code, ErrorCode::CredentialsRejected);
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
            assert_eq!(e.code, ErrorCode::CredentialsRejected, "{http} {e:?}");
            assert!(e.message.contains("ABX_OPENSANDBOX_API_KEY"), "{e:?}");
        }
        // A quota is not a credentials problem: E4009 with the server's message.
        let e = status(
            403,
            br#"{"code":"KUBERNETES::QUOTA_EXCEEDED","message":"Namespace ResourceQuota exceeded: exceeded quota: q, requested: pods=1, used: pods=10, limited: pods=10"}"#,
            "the OpenSandbox server",
            "the new sandbox",
        );
        assert_eq!(e.code, ErrorCode::Conflict);
        assert_eq!(e.http_status, Some(403));
        assert_eq!(
            e.upstream_code.as_deref(),
            Some("KUBERNETES::QUOTA_EXCEEDED")
        );
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
        assert_eq!(e.code, ErrorCode::Conflict);
        assert!(e.message.contains("denied log access"), "{}", e.message);
        assert_eq!(status(503, b"oops", "s", "x").code, ErrorCode::Upstream);
        assert_eq!(status(409, b"{}", "s", "x").code, ErrorCode::Conflict);
    }
}
