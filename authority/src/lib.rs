//! `host[:port]` as URLs carry it, split and normalised the same way by
//! `epp-host` (whose network policy matches destinations) and by providers
//! (which read their server's URL from a setting), so both sides agree on
//! what a host is.

fn parse_port(port: Option<&str>, default_port: u16) -> Option<u16> {
    match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0),
        None => Some(default_port),
    }
}

/// Splits `host[:port]` (IPv6 in brackets), lower-cases the host and drops a trailing dot.
pub fn split_host_port(authority: &str, default_port: u16) -> Option<(String, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        // Canonical text, so `[0:0::1]` and `[::1]` are the same host.
        let canonical = host.parse::<std::net::Ipv6Addr>().ok()?.to_string();
        return Some((canonical, parse_port(port, default_port)?));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    let port = parse_port(port, default_port)?;
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let valid = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    valid.then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::split_host_port;

    #[test]
    fn hosts_are_normalised_and_ports_checked() {
        assert_eq!(
            split_host_port("Example.COM.", 80),
            Some(("example.com".into(), 80))
        );
        assert_eq!(split_host_port("h:8080", 80), Some(("h".into(), 8080)));
        assert_eq!(split_host_port("[0:0::1]:9", 80), Some(("::1".into(), 9)));
        assert_eq!(split_host_port("[::1]", 443), Some(("::1".into(), 443)));
        assert_eq!(split_host_port("h:0", 80), None);
        assert_eq!(split_host_port("h:99999", 80), None);
        assert_eq!(split_host_port("", 80), None);
        assert_eq!(split_host_port("a b", 80), None);
        assert_eq!(split_host_port("[::1", 80), None);
        assert_eq!(split_host_port("[not-v6]:1", 80), None);
    }
}
