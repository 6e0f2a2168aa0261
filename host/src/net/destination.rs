//! A destination as the policy sees it: scheme, host and port, normalised
//! (lower case, no trailing dot, explicit port, IPv6 without brackets), and
//! why one was refused. Shared by the grant, which parses the origin, and the
//! policy, which checks every request.

use epp_authority::split_host_port;
use std::fmt;
use std::net::IpAddr;

/// A destination after normalisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// `http` or `https` (`ws`/`wss` are mapped to these).
    pub scheme: &'static str,
    /// Lower case, no brackets, no trailing dot.
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{}", self.scheme, self.host, self.port)
        } else {
            write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
        }
    }
}

impl Destination {
    /// Normalises `scheme` + `authority` as sent by the guest.
    pub fn parse(scheme: &str, authority: &str) -> Result<Destination, Denied> {
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" | "ws" => "http",
            "https" | "wss" => "https",
            other => {
                return Err(Denied(format!(
                    "scheme `{other}` is not allowed; only http(s) and ws(s) are"
                )));
            }
        };
        if authority.contains('@') {
            return Err(Denied(
                "a user name or password in the URL (`user@host`) is not allowed".to_string(),
            ));
        }
        let default_port = if scheme == "https" { 443 } else { 80 };
        let (host, port) = split_host_port(authority, default_port)
            .ok_or_else(|| Denied(format!("`{authority}` is not a valid host[:port]")))?;
        Ok(Destination { scheme, host, port })
    }

    /// The IP address, when the host is a literal one.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

/// Why a destination was refused; the text is shown to the EPP client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denied(pub String);
