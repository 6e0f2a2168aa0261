//! Where the provider may connect, and which secret headers the host adds.
//!
//! The rule (docs/security.md has the reasoning):
//! - the configured OpenSandbox origin (scheme, host, port) is allowed, and only
//!   requests to it get the API key header, added here so the guest never holds it;
//! - any port on the origin's host is allowed without the key: in direct mode
//!   the server hands out sandbox endpoints on its own host (Docker publishes
//!   execd on a host port);
//! - hosts listed in `ABX_OPENSANDBOX_ALLOW_HOSTS` or `--allow-host` are allowed
//!   (names, `*.suffix` wildcards, `host:port`, IP addresses and CIDR ranges);
//! - everything else is denied, and so are link-local and cloud-metadata
//!   addresses (169.254.0.0/16, fe80::/10, metadata host names) unless an entry
//!   names them exactly, however they were reached (an IP literal or a DNS name
//!   resolving to one).
//!
//! Matching is done on a normalised destination: lower case, no trailing dot,
//! explicit port, IPv6 without brackets; a `user@` part is always refused.

use opensandbox_settings::{ALLOW_HOSTS_ENV, API_KEY_HEADER, Origin, split_host_port};
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied(pub String);

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One entry of the allow list.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    /// Exact host, any port or one port.
    Host { host: String, port: Option<u16> },
    /// `*.example.com`: any subdomain (not the bare domain).
    Suffix(String),
    /// An address range.
    Cidr { net: IpAddr, prefix: u8 },
}

impl Pattern {
    fn parse(entry: &str) -> Result<Pattern, String> {
        if let Some(suffix) = entry.strip_prefix("*.") {
            let suffix = suffix.trim_end_matches('.').to_ascii_lowercase();
            if suffix.is_empty() || suffix.contains(':') {
                return Err(format!(
                    "`{entry}`: a wildcard needs a domain, e.g. *.example.com"
                ));
            }
            return Ok(Pattern::Suffix(format!(".{suffix}")));
        }
        if let Some((net, prefix)) = entry.split_once('/') {
            let net: IpAddr = net
                .trim_matches(|c| c == '[' || c == ']')
                .parse()
                .map_err(|_| format!("`{entry}`: not an address range like 10.0.0.0/8"))?;
            let max = if net.is_ipv4() { 32 } else { 128 };
            let prefix: u8 = prefix
                .parse()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("`{entry}`: prefix length must be 0..={max}"))?;
            return Ok(Pattern::Cidr { net, prefix });
        }
        let has_port = entry.starts_with('[') && entry.contains("]:")
            || (!entry.starts_with('[') && entry.matches(':').count() == 1);
        if entry.contains('@') {
            return Err(format!(
                "`{entry}`: user names are not allowed in host entries"
            ));
        }
        let bare_v6 = !entry.starts_with('[') && entry.matches(':').count() > 1;
        let authority = if bare_v6 {
            format!("[{entry}]")
        } else {
            entry.to_string()
        };
        let (host, port) = split_host_port(&authority, 0)
            .or_else(|| split_host_port(&authority, 1))
            .ok_or_else(|| format!("`{entry}`: not a host, host:port, *.domain or CIDR range"))?;
        Ok(Pattern::Host {
            host,
            port: has_port.then_some(port),
        })
    }

    fn matches(&self, dest: &Destination, ip: Option<IpAddr>) -> bool {
        match self {
            Pattern::Host { host, port } => {
                let host_ok = *host == dest.host || ip.is_some_and(|ip| host.parse() == Ok(ip));
                host_ok && port.is_none_or(|p| p == dest.port)
            }
            Pattern::Suffix(suffix) => dest.host.ends_with(suffix.as_str()),
            Pattern::Cidr { net, prefix } => ip.is_some_and(|ip| in_cidr(ip, *net, *prefix)),
        }
    }

    /// Entries that name a host or address exactly may open link-local destinations.
    fn is_exact(&self) -> bool {
        matches!(self, Pattern::Host { .. })
    }
}

fn in_cidr(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (canonical(ip), canonical(net)) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are treated as the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Link-local and cloud-metadata addresses: never reachable by default.
pub fn is_sensitive_ip(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => {
            (v6.segments()[0] & 0xffc0) == 0xfe80
                // AWS's IPv6 metadata endpoint.
                || v6 == "fd00:ec2::254".parse::<std::net::Ipv6Addr>().expect("literal")
        }
    }
}

/// Host names of cloud metadata services.
fn is_metadata_name(host: &str) -> bool {
    matches!(
        host,
        "metadata.google.internal" | "metadata" | "instance-data" | "metadata.azure.com"
    ) || host.ends_with(".metadata.google.internal")
}

/// What to do with a request the policy allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Headers the host adds (the API key for the origin). Values are secret.
    pub inject: Vec<(&'static str, String)>,
}

/// The host's outbound policy; cheap to clone into each store.
#[derive(Clone)]
pub struct NetPolicy {
    origin: Destination,
    patterns: Vec<Pattern>,
    api_key: Option<String>,
}

impl fmt::Debug for NetPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetPolicy")
            .field("origin", &self.origin)
            .field("patterns", &self.patterns)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl NetPolicy {
    /// `allow` holds entries from `ABX_OPENSANDBOX_ALLOW_HOSTS` and `--allow-host`,
    /// separated by commas or spaces.
    pub fn new(origin: &Origin, allow: &[String], api_key: Option<String>) -> Result<Self, String> {
        let origin = Destination {
            scheme: if origin.scheme == "https" {
                "https"
            } else {
                "http"
            },
            host: origin.host.clone(),
            port: origin.port,
        };
        let mut patterns = Vec::new();
        for entry in allow
            .iter()
            .flat_map(|s| s.split([',', ' ', '\n', '\t']))
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            patterns.push(
                Pattern::parse(entry)
                    .map_err(|e| format!("{ALLOW_HOSTS_ENV} / --allow-host: {e}"))?,
            );
        }
        Ok(NetPolicy {
            origin,
            patterns,
            api_key,
        })
    }

    /// Decides on a destination before any connection is made.
    pub fn check(&self, dest: &Destination) -> Result<Grant, Denied> {
        let ip = dest.ip();
        let exact = self
            .patterns
            .iter()
            .any(|p| p.is_exact() && p.matches(dest, ip));
        let same_host = dest.host == self.origin.host;
        let is_origin =
            same_host && dest.port == self.origin.port && dest.scheme == self.origin.scheme;
        let listed = self.patterns.iter().any(|p| p.matches(dest, ip));
        // The origin host itself counts as explicitly configured.
        let sensitive_ok = exact || same_host;
        if !sensitive_ok && (ip.is_some_and(is_sensitive_ip) || is_metadata_name(&dest.host)) {
            return Err(Denied(format!(
                "{dest} is a link-local or cloud-metadata address, which providers may not reach; \
                 if you really mean it, list it exactly in {ALLOW_HOSTS_ENV} or --allow-host"
            )));
        }
        if !(same_host || listed) {
            return Err(Denied(format!(
                "{dest} is not allowed by epp-host's network policy: the provider may reach its \
                 server {origin} (any port on that host) and hosts listed in {ALLOW_HOSTS_ENV} \
                 or --allow-host; add `{host}` there if it is a sandbox endpoint you trust",
                origin = self.origin,
                host = dest.host,
            )));
        }
        let inject = match (&self.api_key, is_origin) {
            (Some(key), true) => vec![(API_KEY_HEADER, key.clone())],
            _ => Vec::new(),
        };
        Ok(Grant { inject })
    }

    /// Whether the operator named `host` itself: the origin's host or an exact
    /// allow-list entry. Only such names may resolve to link-local addresses.
    pub fn vouches_for(&self, host: &str) -> bool {
        host == self.origin.host
            || self
                .patterns
                .iter()
                .any(|p| matches!(p, Pattern::Host { host: h, .. } if h == host))
    }

    /// Checks an address a host name resolved to (DNS rebinding defence). CIDR
    /// entries match address literals only: a name is allowed by its own entry.
    pub fn check_resolved(&self, host: &str, ip: IpAddr) -> Result<(), Denied> {
        if is_sensitive_ip(ip) && !self.vouches_for(host) {
            return Err(Denied(format!(
                "`{host}` resolves to the link-local address {ip}, which providers may not reach; \
                 list `{host}` exactly in {ALLOW_HOSTS_ENV} or --allow-host to allow it"
            )));
        }
        Ok(())
    }
}

/// Headers the guest may never set: the host owns them.
pub fn is_host_owned_header(name: &str) -> bool {
    name.eq_ignore_ascii_case(API_KEY_HEADER) || name.eq_ignore_ascii_case("x-execd-access-token")
}

#[cfg(test)]
mod tests;
