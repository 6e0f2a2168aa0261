//! The one shape of an error inside the host ([`RpcError`]): an EPP code, what
//! went wrong, what to do about it, whether the same request may simply be
//! sent again, and what the backend said. It becomes a JSON-RPC error object
//! only when it is written out (`rpc::outbox`), as docs/epp-1.md §6 says.

use crate::contract::bindings::{EppError, ErrorCode};
use crate::runtime::CallError;
use crate::runtime::limits::LimitHit;
use std::borrow::Cow;

pub use epp_protocol::EppCode;
pub use epp_protocol::jsonrpc::*;

/// For an `E1001` the host finds in a request before any method runs: which
/// JSON-RPC error it is. Every other `E1001` (bad params, the provider's
/// `invalid-argument`) is `-32602`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Not JSON (`-32700`).
    Parse,
    /// Not a JSON-RPC 2.0 request (`-32600`).
    Request,
    /// No such method (`-32601`).
    Method,
}

/// An error answer, before it is written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} ({}): {}", self.jsonrpc_code(), self.wire_message())]
pub struct RpcError {
    pub code: EppCode,
    /// Set only with `code` `InvalidArgument` (the constructors keep it so).
    malformed: Option<Malformed>,
    /// What went wrong.
    pub message: String,
    /// What to do next; written after the message, as `MESSAGE; HINT`.
    pub hint: Option<Cow<'static, str>>,
    /// Whether sending the same request again, unchanged, may succeed.
    pub retryable: bool,
    /// The backend's HTTP status, when a backend answer caused this.
    pub http_status: Option<u16>,
    /// The backend's own error code (e.g. `DOCKER::SANDBOX_NOT_FOUND`).
    pub upstream_code: Option<String>,
    /// The answer would have held more content than the host returns at
    /// once (`--max-output-bytes`): its size when known (an MCP server then
    /// answers a link to the content instead).
    pub too_large: Option<Option<u64>>,
}

impl From<ErrorCode> for EppCode {
    fn from(code: ErrorCode) -> EppCode {
        match code {
            ErrorCode::InvalidArgument => EppCode::InvalidArgument,
            ErrorCode::Configuration => EppCode::Configuration,
            ErrorCode::CredentialsRejected => EppCode::CredentialsRejected,
            ErrorCode::NotFound => EppCode::NotFound,
            ErrorCode::Conflict => EppCode::Conflict,
            ErrorCode::Upstream => EppCode::Upstream,
            ErrorCode::Unreachable => EppCode::Unreachable,
            ErrorCode::TimedOut => EppCode::TimedOut,
            ErrorCode::DeniedByPolicy => EppCode::DeniedByPolicy,
            ErrorCode::Unsupported => EppCode::Unsupported,
            ErrorCode::ProviderFault => EppCode::ProviderFault,
        }
    }
}

/// Whether a provider error with `code` may go away on its own: the backend
/// failed or could not be reached. Anything else needs a change first (the
/// request, a setting, the sandbox's state, a timeout).
fn transient(code: EppCode) -> bool {
    matches!(code, EppCode::Upstream | EppCode::Unreachable)
}

impl RpcError {
    fn new(code: EppCode, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            malformed: None,
            message: message.into(),
            hint: None,
            retryable: false,
            http_status: None,
            upstream_code: None,
            too_large: None,
        }
    }

    fn malformed(kind: Malformed, message: impl Into<String>) -> RpcError {
        RpcError {
            malformed: Some(kind),
            ..RpcError::new(EppCode::InvalidArgument, message)
        }
    }

    /// Adds what to do next.
    pub fn hint(mut self, hint: impl Into<Cow<'static, str>>) -> RpcError {
        self.hint = Some(hint.into());
        self
    }

    /// Marks the error as an answer too large to return at once (`size`
    /// bytes of content, when known).
    pub fn too_large(mut self, size: Option<u64>) -> RpcError {
        self.too_large = Some(size);
        self
    }

    /// Marks the error as one a plain retry may cure.
    pub fn retryable(mut self) -> RpcError {
        self.retryable = true;
        self
    }

    /// The line is not JSON.
    pub fn parse_error(message: impl Into<String>) -> RpcError {
        RpcError::malformed(Malformed::Parse, message)
    }

    /// The line is not a JSON-RPC 2.0 request.
    pub fn invalid_request(message: impl Into<String>) -> RpcError {
        RpcError::malformed(Malformed::Request, message)
    }

    pub fn method_not_found(method: &str) -> RpcError {
        RpcError::malformed(Malformed::Method, format!("unknown method `{method}`"))
            .hint("see docs/epp-1.md for the method list, or call epp.hello")
    }

    pub fn invalid_params(method: &str, message: impl std::fmt::Display) -> RpcError {
        RpcError::new(
            EppCode::InvalidArgument,
            format!("invalid params for {method}: {message}"),
        )
    }

    pub fn cancelled() -> RpcError {
        RpcError::new(EppCode::Cancelled, "request cancelled by epp.cancel")
    }

    /// The request conflicts with the host's state (E4009).
    pub fn conflict(message: impl Into<String>) -> RpcError {
        RpcError::new(EppCode::Conflict, message)
    }

    /// A setting cannot be used (E2001).
    pub fn configuration(message: impl Into<String>) -> RpcError {
        RpcError::new(EppCode::Configuration, message)
    }

    /// A host limit or a provider crash.
    pub fn fault(message: impl Into<String>) -> RpcError {
        RpcError::new(EppCode::ProviderFault, message)
    }

    /// `--max-concurrent` requests (`limit`) are running already (retryable).
    pub fn too_many(limit: usize) -> RpcError {
        RpcError::fault(format!(
            "too many requests in flight (limit {limit}, --max-concurrent)"
        ))
        .hint("retry when some have finished")
        .retryable()
    }

    pub fn unsupported(method: &str, capability: &str, provider: &str) -> RpcError {
        RpcError::new(
            EppCode::Unsupported,
            format!(
                "{method} is not supported by the {provider} provider (capability {capability} is off)"
            ),
        )
        .hint("check epp.hello's capabilities before calling")
    }

    /// The provider's component lacks the function that serves `what`: it
    /// was built against an older contract.
    pub fn unsupported_by_contract(
        what: &str,
        provider: &str,
        version: &str,
        function: &str,
    ) -> RpcError {
        RpcError::new(
            EppCode::Unsupported,
            format!(
                "{what} is not supported by the {provider} provider: its component, built \
                 against abx:epp@{version}, does not export `{function}`"
            ),
        )
        .hint("use a provider built against a newer abx:epp, or check epp.hello's capabilities")
    }

    /// E8004: `param` of `method` is newer than the contract the component
    /// was built against.
    pub fn unsupported_by_contract_param(
        method: &str,
        param: &str,
        provider: &str,
        version: &str,
    ) -> RpcError {
        RpcError::new(
            EppCode::Unsupported,
            format!(
                "{method} with `{param}` is not supported by the {provider} provider: its \
                 component, built against abx:epp@{version}, does not take `{param}` (a later \
                 abx:epp added it)"
            ),
        )
        .hint("leave the param out, or use a provider built against a newer abx:epp")
    }

    /// An error the provider returned.
    pub fn from_epp(e: EppError) -> RpcError {
        let code = EppCode::from(e.code);
        RpcError {
            retryable: transient(code),
            http_status: e.http_status,
            upstream_code: e.upstream_code,
            ..RpcError::new(code, e.message)
        }
    }

    /// A trap as an EPP error: the cause in one line for the client, the whole
    /// backtrace in the host log.
    pub fn from_trap(trap: &wasmtime::Error) -> RpcError {
        if let Some(hit) = trap.downcast_ref::<LimitHit>() {
            return RpcError::fault(hit.to_string());
        }
        tracing::error!(trap = ?trap, "provider trap");
        let cause = match trap.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::UnreachableCodeReached) => "it panicked or aborted".to_string(),
            Some(code) => format!("wasm trap: {code}"),
            None => trap
                .to_string()
                .lines()
                .next()
                .unwrap_or("unknown")
                .to_string(),
        };
        RpcError::fault(format!(
            "the provider crashed ({cause}; details in the host log)"
        ))
        .hint("this request failed, the host keeps serving")
        .retryable()
    }

    /// The JSON-RPC `code` of the answer.
    pub fn jsonrpc_code(&self) -> i64 {
        match (self.code, self.malformed) {
            (_, Some(Malformed::Parse)) => PARSE_ERROR,
            (_, Some(Malformed::Request)) => INVALID_REQUEST,
            (_, Some(Malformed::Method)) => METHOD_NOT_FOUND,
            (EppCode::InvalidArgument, None) => INVALID_PARAMS,
            (EppCode::Cancelled, None) => CANCELLED,
            (_, None) => EPP_ERROR,
        }
    }

    /// The answer's `message`: what went wrong, then what to do.
    pub fn wire_message(&self) -> Cow<'_, str> {
        match &self.hint {
            None => Cow::Borrowed(&self.message),
            Some(hint) => Cow::Owned(format!("{}; {hint}", self.message)),
        }
    }
}

impl From<EppError> for RpcError {
    fn from(e: EppError) -> RpcError {
        RpcError::from_epp(e)
    }
}

/// The one conversion of a failed call into the provider.
impl From<CallError> for RpcError {
    fn from(e: CallError) -> RpcError {
        match e {
            CallError::Provider(e) => RpcError::from_epp(e),
            CallError::Trap(trap) => RpcError::from_trap(&trap),
            CallError::Contract(message) => RpcError::fault(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wit_code_has_its_epp_code() {
        let cases = [
            ("invalid-argument", "E1001", INVALID_PARAMS),
            ("configuration", "E2001", EPP_ERROR),
            ("credentials-rejected", "E2002", EPP_ERROR),
            ("not-found", "E4004", EPP_ERROR),
            ("conflict", "E4009", EPP_ERROR),
            ("upstream", "E5001", EPP_ERROR),
            ("unreachable", "E5003", EPP_ERROR),
            ("timed-out", "E5004", EPP_ERROR),
            ("denied-by-policy", "E6001", EPP_ERROR),
            ("unsupported", "E8004", EPP_ERROR),
            ("provider-fault", "E9001", EPP_ERROR),
        ];
        for (name, epp, jsonrpc) in cases {
            let code = crate::runtime::call::error_code(name).expect(name);
            let e = RpcError::from_epp(EppError {
                code,
                message: "m".into(),
                http_status: Some(503),
                upstream_code: Some("X".into()),
            });
            assert_eq!(e.code.as_str(), epp, "{name}");
            assert_eq!(e.jsonrpc_code(), jsonrpc, "{name}");
            assert_eq!(e.retryable, matches!(name, "upstream" | "unreachable"));
            assert_eq!(
                (e.http_status, e.upstream_code.as_deref()),
                (Some(503), Some("X"))
            );
        }
    }

    #[test]
    fn host_errors_carry_their_jsonrpc_code_and_hint() {
        let cases = [
            (
                RpcError::parse_error("p"),
                PARSE_ERROR,
                EppCode::InvalidArgument,
            ),
            (
                RpcError::invalid_request("r"),
                INVALID_REQUEST,
                EppCode::InvalidArgument,
            ),
            (
                RpcError::method_not_found("x.y"),
                METHOD_NOT_FOUND,
                EppCode::InvalidArgument,
            ),
            (
                RpcError::invalid_params("x.y", "no"),
                INVALID_PARAMS,
                EppCode::InvalidArgument,
            ),
            (RpcError::cancelled(), CANCELLED, EppCode::Cancelled),
            (RpcError::fault("f"), EPP_ERROR, EppCode::ProviderFault),
            (
                RpcError::unsupported("x.y", "pty", "p"),
                EPP_ERROR,
                EppCode::Unsupported,
            ),
        ];
        for (e, jsonrpc, code) in cases {
            assert_eq!((e.jsonrpc_code(), e.code), (jsonrpc, code), "{e}");
        }
        let e = RpcError::method_not_found("x.y");
        assert_eq!(e.message, "unknown method `x.y`");
        assert_eq!(
            e.wire_message(),
            "unknown method `x.y`; see docs/epp-1.md for the method list, or call epp.hello"
        );
        assert_eq!(RpcError::fault("f").wire_message(), "f");
    }
}
