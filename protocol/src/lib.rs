//! EPP/1's fixed vocabulary (docs/epp-1.md §1, §2, §6): what every party of
//! the protocol spells the same way. Methods of the provider contract are not
//! here: they come from `wit/`.

use std::fmt;

/// The protocol's name in `epp.hello`.
pub const PROTOCOL: &str = "EPP/1";

/// EPP/1's generic `provider_options` keys (docs/epp-1.md §2).
pub const GENERIC_KEYS: &[&str] = &["sandbox_base_url", "sandbox_api_key"];

/// The transport's own methods, served by the host, not by a provider.
pub mod transport {
    /// Says hello, and sets `provider_options`.
    pub const HELLO: &str = "epp.hello";
    /// Cancels the request `params.id` (a request or a notification).
    pub const CANCEL: &str = "epp.cancel";
    /// Ends the session as end of input does (a request or a notification).
    pub const SHUTDOWN: &str = "epp.shutdown";
}

/// JSON-RPC 2.0 error codes as EPP/1 uses them.
pub mod jsonrpc {
    /// The line is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The line is not a JSON-RPC 2.0 request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params are wrong (every other `E1001`).
    pub const INVALID_PARAMS: i64 = -32602;
    /// Cancelled by `epp.cancel` (`E4999`).
    pub const CANCELLED: i64 = -32800;
    /// Every other EPP error (`data.epp_code` says which).
    pub const EPP_ERROR: i64 = -32000;
}

/// An EPP error code (docs/epp-1.md §6), written as `data.epp_code` on the
/// wire. The host raises errors with it and clients read them back with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EppCode {
    /// `E1001`: the request or its params were wrong.
    InvalidArgument,
    /// `E2001`: a provider setting is invalid.
    Configuration,
    /// `E2002`: the backend rejected the credentials (HTTP 401/403).
    CredentialsRejected,
    /// `E4004`: no such sandbox, path, process, command or terminal.
    NotFound,
    /// `E4009`: wrong state, or a conflict.
    Conflict,
    /// `E4999`: cancelled by the client (`epp.cancel`).
    Cancelled,
    /// `E5001`: the backend failed (HTTP 5xx, an unexpected answer).
    Upstream,
    /// `E5003`: the backend cannot be reached (refused, DNS, reset).
    Unreachable,
    /// `E5004`: the backend, a readiness wait or a command timed out.
    TimedOut,
    /// `E6001`: the host's network policy refused a destination.
    DeniedByPolicy,
    /// `E8004`: the provider does not support the capability.
    Unsupported,
    /// `E9001`: a provider bug or trap, or a host limit.
    ProviderFault,
}

impl EppCode {
    /// Every code, in the order of docs/epp-1.md §6.
    pub const ALL: [EppCode; 12] = [
        EppCode::InvalidArgument,
        EppCode::Configuration,
        EppCode::CredentialsRejected,
        EppCode::NotFound,
        EppCode::Conflict,
        EppCode::Cancelled,
        EppCode::Upstream,
        EppCode::Unreachable,
        EppCode::TimedOut,
        EppCode::DeniedByPolicy,
        EppCode::Unsupported,
        EppCode::ProviderFault,
    ];

    /// The wire form, e.g. `E4004`.
    pub const fn as_str(self) -> &'static str {
        match self {
            EppCode::InvalidArgument => "E1001",
            EppCode::Configuration => "E2001",
            EppCode::CredentialsRejected => "E2002",
            EppCode::NotFound => "E4004",
            EppCode::Conflict => "E4009",
            EppCode::Cancelled => "E4999",
            EppCode::Upstream => "E5001",
            EppCode::Unreachable => "E5003",
            EppCode::TimedOut => "E5004",
            EppCode::DeniedByPolicy => "E6001",
            EppCode::Unsupported => "E8004",
            EppCode::ProviderFault => "E9001",
        }
    }

    /// The code written `text` on the wire; none for an unknown one.
    pub fn parse(text: &str) -> Option<EppCode> {
        EppCode::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

impl fmt::Display for EppCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
