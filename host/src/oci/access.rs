//! Which registries `epp-host` talks to, and how: HTTPS with the system's
//! roots by default. Plain HTTP, and any registry on this machine (loopback,
//! unspecified or link-local addresses, `localhost`), only for a registry the
//! operator names with `--insecure-registry`, so that a reference from
//! somewhere else cannot make the host talk to a local service unasked.

use anyhow::{Result, bail};
use oci_client::client::{ClientConfig, ClientProtocol};
use std::net::{IpAddr, ToSocketAddrs};
use std::time::Duration;

/// How long connecting to a registry may take before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a registry may stay silent mid-answer.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The operator's registry rules.
#[derive(Debug, Clone, Default)]
pub struct RegistryPolicy {
    /// `host[:port]` entries reached over plain HTTP, loopback allowed.
    insecure: Vec<String>,
}

impl RegistryPolicy {
    /// The policy of `--insecure-registry` entries (`host[:port]`, as in the reference).
    pub fn new(insecure: &[String]) -> RegistryPolicy {
        RegistryPolicy {
            insecure: insecure.to_vec(),
        }
    }

    /// Whether the operator named `registry` as insecure (plain HTTP, may be local).
    pub fn is_insecure(&self, registry: &str) -> bool {
        self.insecure.iter().any(|r| r == registry)
    }

    /// Refuses a registry the operator did not allow: a local one (by name
    /// or by what the name resolves to) that is not named insecure.
    pub fn check(&self, registry: &str) -> Result<()> {
        if self.is_insecure(registry) {
            return Ok(());
        }
        if let Some(addr) = local_address(registry) {
            bail!(
                "refusing registry {registry}: it is on this machine ({addr}). A local \
                 registry is used only when the operator names it: --insecure-registry {registry} \
                 (which also means plain HTTP)"
            );
        }
        Ok(())
    }

    /// oci-client's configuration under this policy.
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig {
            protocol: ClientProtocol::HttpsExcept(self.insecure.clone()),
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            // One layer per artifact: no point in parallel transfers.
            max_concurrent_download: 1,
            max_concurrent_upload: 1,
            // Proxies: reqwest's usual HTTPS_PROXY / NO_PROXY from the environment.
            ..ClientConfig::default()
        }
    }

    /// A client under this policy, for `registry` (checked first).
    pub fn client(&self, registry: &str) -> Result<oci_client::Client> {
        self.check(registry)?;
        super::install_crypto_provider();
        Ok(oci_client::Client::new(self.client_config()))
    }
}

/// The local address `registry` names or resolves to, if any.
fn local_address(registry: &str) -> Option<IpAddr> {
    let host = host_of(registry);
    if host.eq_ignore_ascii_case("localhost") || host.to_ascii_lowercase().ends_with(".localhost") {
        return Some(IpAddr::from([127, 0, 0, 1]));
    }
    let port = registry
        .rsplit_once(':')
        .filter(|(h, _)| !h.ends_with(']') || registry.starts_with('['))
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .unwrap_or(443);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return is_local(ip).then_some(ip);
    }
    // A name that resolves to this machine is as local as 127.0.0.1.
    (host, port)
        .to_socket_addrs()
        .ok()?
        .map(|a| a.ip())
        .find(|ip| is_local(*ip))
}

/// `registry` without its port (and without the brackets of an IPv6 literal).
fn host_of(registry: &str) -> &str {
    if let Some(rest) = registry.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    registry.split(':').next().unwrap_or(registry)
}

fn is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_unspecified() || v4.is_link_local(),
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| is_local(IpAddr::V4(v4)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_registries_need_the_operators_word() {
        let none = RegistryPolicy::default();
        for local in [
            "127.0.0.1:5000",
            "localhost:5000",
            "[::1]:5000",
            "0.0.0.0",
            "169.254.1.1",
        ] {
            let err = none.check(local).unwrap_err().to_string();
            assert!(err.contains("--insecure-registry"), "{local}: {err}");
        }
        let named = RegistryPolicy::new(&["127.0.0.1:5000".into()]);
        named.check("127.0.0.1:5000").unwrap();
        assert!(
            named.check("127.0.0.1:5001").is_err(),
            "another port is another registry"
        );
        assert_eq!(
            named.client_config().protocol,
            ClientProtocol::HttpsExcept(vec!["127.0.0.1:5000".into()])
        );
    }
}
