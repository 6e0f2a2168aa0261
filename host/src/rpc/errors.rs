//! JSON-RPC error objects and the EPP codes they carry (docs/epp-1.md §6).

use crate::runtime::bindings::{EppError, ErrorCode};
use crate::runtime::limits::LimitHit;
use serde_json::{Map, Value, json};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const CANCELLED: i64 = -32800;
pub const EPP_ERROR: i64 = -32000;

/// An error answer, ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Map<String, Value>,
}

/// The wire form of an EPP error code.
pub fn epp_code(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::InvalidArgument => "E1001",
        ErrorCode::Configuration => "E2001",
        ErrorCode::CredentialsRejected => "E2002",
        ErrorCode::NotFound => "E4004",
        ErrorCode::Conflict => "E4009",
        ErrorCode::Upstream => "E5001",
        ErrorCode::Unreachable => "E5003",
        ErrorCode::TimedOut => "E5004",
        ErrorCode::DeniedByPolicy => "E6001",
        ErrorCode::Unsupported => "E8004",
        ErrorCode::ProviderFault => "E9001",
    }
}

/// An EPP error code by its WIT case name (`not-found`).
pub fn error_code(name: &str) -> Option<ErrorCode> {
    Some(match name {
        "invalid-argument" => ErrorCode::InvalidArgument,
        "configuration" => ErrorCode::Configuration,
        "credentials-rejected" => ErrorCode::CredentialsRejected,
        "not-found" => ErrorCode::NotFound,
        "conflict" => ErrorCode::Conflict,
        "upstream" => ErrorCode::Upstream,
        "unreachable" => ErrorCode::Unreachable,
        "timed-out" => ErrorCode::TimedOut,
        "denied-by-policy" => ErrorCode::DeniedByPolicy,
        "unsupported" => ErrorCode::Unsupported,
        "provider-fault" => ErrorCode::ProviderFault,
        _ => return None,
    })
}

impl RpcError {
    fn new(code: i64, epp: &str, message: impl Into<String>) -> RpcError {
        let mut data = Map::new();
        data.insert("epp_code".into(), json!(epp));
        RpcError {
            code,
            message: message.into(),
            data,
        }
    }

    pub fn parse_error(message: impl Into<String>) -> RpcError {
        RpcError::new(PARSE_ERROR, "E1001", message)
    }

    pub fn invalid_request(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_REQUEST, "E1001", message)
    }

    pub fn method_not_found(method: &str) -> RpcError {
        RpcError::new(
            METHOD_NOT_FOUND,
            "E1001",
            format!(
                "unknown method `{method}`; see docs/epp-1.md for the method list, or call epp.hello"
            ),
        )
    }

    pub fn invalid_params(method: &str, message: impl std::fmt::Display) -> RpcError {
        RpcError::new(
            INVALID_PARAMS,
            "E1001",
            format!("invalid params for {method}: {message}"),
        )
    }

    pub fn cancelled() -> RpcError {
        RpcError::new(CANCELLED, "E4999", "request cancelled by epp.cancel")
    }

    /// A host limit or a provider crash.
    pub fn fault(message: impl Into<String>) -> RpcError {
        RpcError::new(EPP_ERROR, "E9001", message)
    }

    pub fn unsupported(method: &str, capability: &str, provider: &str) -> RpcError {
        RpcError::new(
            EPP_ERROR,
            "E8004",
            format!(
                "{method} is not supported by the {provider} provider (capability {capability} is off); \
                 check epp.hello's capabilities before calling"
            ),
        )
    }

    /// An error the provider returned.
    pub fn from_epp(e: EppError) -> RpcError {
        let json_code = match e.code {
            ErrorCode::InvalidArgument => INVALID_PARAMS,
            _ => EPP_ERROR,
        };
        let mut err = RpcError::new(json_code, epp_code(e.code), e.message);
        if let Some(status) = e.http_status {
            err.data.insert("http_status".into(), json!(status));
        }
        if let Some(code) = e.upstream_code {
            err.data.insert("upstream_code".into(), json!(code));
        }
        err
    }

    /// A trap as an EPP error: the cause in one line for the client, the whole
    /// backtrace in the host log.
    pub fn from_trap(trap: &wasmtime::Error) -> RpcError {
        if let Some(hit) = trap.downcast_ref::<LimitHit>() {
            return RpcError::fault(hit.to_string());
        }
        eprintln!("epp-host: provider trap: {trap:?}");
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
            "the provider crashed ({cause}; details in the host log); this request failed, the host keeps serving"
        ))
    }

    pub fn to_json(&self) -> Value {
        json!({"code": self.code, "message": self.message, "data": self.data})
    }

    pub fn epp_code(&self) -> Option<&str> {
        self.data.get("epp_code").and_then(Value::as_str)
    }
}

impl From<EppError> for RpcError {
    fn from(e: EppError) -> RpcError {
        RpcError::from_epp(e)
    }
}
