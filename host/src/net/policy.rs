//! Where the provider may connect, and which secret headers the host adds:
//! the enforcement of a [`Grant`] (what the provider asked for, as far as the
//! operator allows it; `grant.rs`).
//!
//! The rule (docs/architecture.md has the reasoning):
//! - the provider's origin (scheme, host, port) is allowed; with
//!   `origin-host-any-port`, so is any port on the origin's host (a backend that
//!   hands out endpoints on its own host, such as published container ports).
//!   The loopback interface is one host under its usual names: `localhost`,
//!   `127.0.0.1` and `::1` ([`same_host`]);
//! - each declared secret header is added here, so the guest never holds it,
//!   to requests in its scope only (the origin, or any port on its host), and
//!   stripped from whatever the guest sends;
//! - hosts listed in the provider's allow-hosts variables or `--allow-host` are
//!   allowed (names, `*.suffix` wildcards, `host:port`, IP addresses and CIDR
//!   ranges);
//! - everything else is denied, and so are link-local and cloud-metadata
//!   addresses (169.254.0.0/16, fe80::/10, metadata host names) unless an entry
//!   names them exactly, however they were reached (an IP literal or a DNS name
//!   resolving to one).
//!
//! Matching is done on a normalised destination: lower case, no trailing dot,
//! explicit port, IPv6 without brackets; a `user@` part is always refused.

pub use super::destination::{Denied, Destination};
use super::grant::{Grant, redacted};
use crate::contract::bindings::abx::epp::types::HeaderScope;
use epp_authority::split_host_port;
use http::{HeaderName, HeaderValue};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

/// Whether `host` (normalised) names this machine's loopback interface the
/// usual way: `localhost` (which resolves to 127.0.0.1 and ::1), `127.0.0.1`,
/// `::1` (or `::ffff:127.0.0.1`).
fn is_local_host(host: &str) -> bool {
    host == "localhost"
        || host.parse::<IpAddr>().is_ok_and(|ip| {
            canonical(ip) == IpAddr::V4(Ipv4Addr::LOCALHOST)
                || ip == IpAddr::V6(Ipv6Addr::LOCALHOST)
        })
}

/// Whether two normalised host names are the same host for the origin-host
/// rule: equal, or both the loopback interface under its usual names. A server
/// configured as `localhost` hands out endpoints on `127.0.0.1` (and the other
/// way round); that is still the server's host. Other `127.x.y.z` addresses
/// are hosts of their own: a machine uses them to run services that stand for
/// separate hosts, and a service bound to one is not reachable on another.
pub fn same_host(a: &str, b: &str) -> bool {
    a == b || (is_local_host(a) && is_local_host(b))
}

/// Host names of cloud metadata services.
fn is_metadata_name(host: &str) -> bool {
    matches!(
        host,
        "metadata.google.internal" | "metadata" | "instance-data" | "metadata.azure.com"
    ) || host.ends_with(".metadata.google.internal")
}

/// What to do with a request the policy allows.
#[derive(Clone, PartialEq, Eq)]
pub struct Allowed {
    /// Secret headers the host adds (values marked sensitive).
    pub inject: Vec<(HeaderName, HeaderValue)>,
}

impl fmt::Debug for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inject: Vec<(&str, &str)> = self
            .inject
            .iter()
            .map(|(name, value)| (name.as_str(), redacted(Some(value))))
            .collect();
        f.debug_struct("Allowed").field("inject", &inject).finish()
    }
}

/// A secret header with its value and scope.
#[derive(Clone)]
struct Injected {
    name: HeaderName,
    /// `None` when the operator did not set it: then the header is only stripped.
    value: Option<HeaderValue>,
    scope: HeaderScope,
}

/// The host's outbound policy; shared by every store.
#[derive(Clone)]
pub struct NetPolicy {
    origin: Option<Destination>,
    any_port: bool,
    patterns: Vec<Pattern>,
    headers: Vec<Injected>,
    /// What the provider may reach by its declaration, in words (for messages).
    reach: String,
    /// Where the operator lists more hosts, in words (for messages).
    allow_hint: String,
}

impl fmt::Debug for NetPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|h| (h.name.as_str(), redacted(h.value.as_ref())))
            .collect();
        f.debug_struct("NetPolicy")
            .field("origin", &self.origin)
            .field("any_port", &self.any_port)
            .field("patterns", &self.patterns)
            .field("headers", &headers)
            .finish()
    }
}

impl NetPolicy {
    /// Enforces `grant`; fails on an allow-list entry that cannot be parsed,
    /// naming where it came from.
    pub fn new(grant: &Grant) -> Result<Self, String> {
        let mut patterns = Vec::new();
        for list in &grant.allow {
            for entry in list.each() {
                patterns.push(Pattern::parse(entry).map_err(|e| format!("{}: {e}", list.source))?);
            }
        }
        Ok(NetPolicy {
            origin: grant.origin.as_ref().map(|o| o.dest.clone()),
            any_port: grant.origin_host_any_port,
            patterns,
            headers: grant
                .secret_headers
                .iter()
                .map(|h| Injected {
                    name: h.header.clone(),
                    value: h.value.clone(),
                    scope: h.scope,
                })
                .collect(),
            reach: grant.reach(),
            allow_hint: grant.allow_hint(),
        })
    }

    /// Allows nothing and adds nothing (for a provider that is only asked to
    /// describe itself).
    pub fn deny_all() -> Self {
        NetPolicy::new(&Grant::nothing()).expect("an empty grant has no entries to parse")
    }

    /// Decides on a destination before any connection is made.
    pub fn check(&self, dest: &Destination) -> Result<Allowed, Denied> {
        let ip = dest.ip();
        let exact = self
            .patterns
            .iter()
            .any(|p| p.is_exact() && p.matches(dest, ip));
        let same_host = self
            .origin
            .as_ref()
            .is_some_and(|o| same_host(&o.host, &dest.host));
        // The origin itself is exactly what the operator configured: secrets
        // scoped to it go nowhere else, not even to another loopback name.
        let is_origin = self.origin.as_ref() == Some(dest);
        let listed = self.patterns.iter().any(|p| p.matches(dest, ip));
        // The origin host itself counts as explicitly configured.
        let sensitive_ok = exact || same_host;
        if !sensitive_ok && (ip.is_some_and(is_sensitive_ip) || is_metadata_name(&dest.host)) {
            return Err(Denied(format!(
                "{dest} is a link-local or cloud-metadata address, which providers may not reach; \
                 if you really mean it, list it exactly in {}",
                self.allow_hint
            )));
        }
        if !(is_origin || (self.any_port && same_host) || listed) {
            return Err(Denied(format!(
                "{dest} is not allowed by epp-host's network policy: the provider may reach \
                 {reach} and hosts listed in {hint}; add `{host}` there if it is a sandbox \
                 endpoint or server you trust",
                reach = self.reach,
                hint = self.allow_hint,
                host = dest.host,
            )));
        }
        let inject = self
            .headers
            .iter()
            .filter(|h| match h.scope {
                HeaderScope::Origin => is_origin,
                HeaderScope::OriginHost => same_host,
            })
            .filter_map(|h| Some((h.name.clone(), h.value.clone()?)))
            .collect();
        Ok(Allowed { inject })
    }

    /// Whether the operator named `host` itself: the origin's host or an exact
    /// allow-list entry. Only such names may resolve to link-local addresses.
    pub fn vouches_for(&self, host: &str) -> bool {
        self.origin.as_ref().is_some_and(|o| o.host == host)
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
                 list `{host}` exactly in {} to allow it",
                self.allow_hint
            )));
        }
        Ok(())
    }

    /// Headers the guest may never set: the declared secret headers, which the
    /// host owns whether or not the operator gave them a value.
    pub fn owned_headers(&self) -> impl Iterator<Item = &HeaderName> {
        self.headers.iter().map(|h| &h.name)
    }

    /// Whether the host owns the header `name` (any case).
    pub fn owns_header(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|h| h.name.as_str().eq_ignore_ascii_case(name))
    }
}

#[cfg(test)]
mod tests;
