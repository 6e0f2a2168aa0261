//! Turning flags and the host's environment into the runtime's configuration:
//! the grant (network policy and guest environment) made from what the
//! provider declares, limits and serving options.

use crate::cli::HostArgs;
use crate::contract::bindings::ProviderInfo;
use crate::contract::bindings::abx::epp::types::ProviderNeeds;
use crate::net::grant::{Env, FRAMEWORK_KEY_ENV, Grant, host_env};
use crate::net::policy::NetPolicy;
use crate::net::websocket::MAX_CONNECTIONS;
use crate::rpc::server::ServeOptions;
use crate::runtime::cache::WasmBytes;
use crate::runtime::limits::Limits;
use crate::runtime::{Granted, LoadOptions};
use anyhow::{Result, bail};
use std::time::Duration;

/// The environment handed to the guest: every variable of every setting the
/// provider declares, except those the host withholds (injected secrets, the
/// allow-list variables, the framework's key), plus the `--pass-env` names.
/// Nothing else from the host's environment reaches the provider.
pub fn guest_env(
    info: &ProviderInfo,
    grant: &Grant,
    pass_env: &[String],
    env: Env,
) -> Result<Vec<(String, String)>> {
    let withheld: Vec<&str> = grant.withheld().collect();
    for extra in pass_env {
        if extra == FRAMEWORK_KEY_ENV || grant.secret_headers.iter().any(|h| h.env.contains(extra))
        {
            bail!(
                "--pass-env {extra}: this variable is a secret the host keeps; it is never passed to providers"
            );
        }
        if grant.allow_hosts_env.contains(extra) {
            bail!(
                "--pass-env {extra}: this variable lists hosts for the host's network policy; \
                 the host reads it, providers never see it"
            );
        }
    }
    let mut names: Vec<&str> = Vec::new();
    let declared = info.settings.iter().flat_map(|s| s.env.iter());
    for name in declared.chain(pass_env).map(String::as_str) {
        if !withheld.contains(&name) && !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(names
        .into_iter()
        .filter_map(|name| env(name).map(|v| (name.to_string(), v)))
        .collect())
}

/// What the operator grants: the provider's needs resolved against `env` and
/// the flags. Warns once on stderr when the provider's origin resolves to
/// nothing (then it may reach only listed hosts).
pub fn grant(
    args: &HostArgs,
    info: &ProviderInfo,
    needs: &ProviderNeeds,
    env: Env,
) -> Result<Granted> {
    let grant = Grant::resolve(info, needs, env, &args.allow_hosts).map_err(anyhow::Error::msg)?;
    let policy = NetPolicy::new(&grant).map_err(anyhow::Error::msg)?;
    let guest_env = guest_env(info, &grant, &args.pass_env, env)?;
    if let Some(why) = grant.missing_origin() {
        tracing::warn!(
            provider = %info.id,
            "{why}; until then provider `{}` may reach only hosts listed in {}",
            info.id,
            grant.allow_hint()
        );
    }
    Ok(Granted { policy, guest_env })
}

/// Memory and CPU limits per instance, from the flags.
pub fn limits(args: &HostArgs) -> Limits {
    Limits::new(args.max_memory_mib.max(16), args.cpu_budget_ms)
}

/// The compile cache's directory, unless `--no-cache`.
pub fn cache_dir(args: &HostArgs) -> Option<std::path::PathBuf> {
    if args.no_cache {
        return None;
    }
    args.cache_dir
        .clone()
        .or_else(crate::runtime::cache::default_dir)
}

/// How to load `wasm`: limits and cache from the flags; the grant from the
/// flags and this process's environment, once the provider has said what it needs.
pub fn load_options(args: &HostArgs, wasm: WasmBytes) -> Result<LoadOptions> {
    if args.max_concurrent == 0 {
        bail!("--max-concurrent must be at least 1");
    }
    let cache_dir = cache_dir(args);
    let grant_args = args.clone();
    Ok(LoadOptions {
        wasm,
        cache_dir,
        limits: limits(args),
        instances: (args.max_concurrent + MAX_CONNECTIONS + 16) as u32,
        reuse: args.reuse(),
        grant: Box::new(move |info, needs, overlay| {
            // An EPP client's provider_options first, then the operator's environment.
            let env = |name: &str| {
                overlay
                    .iter()
                    .find(|(var, _)| var == name)
                    .map(|(_, value)| value.clone())
                    .or_else(|| host_env(name))
            };
            grant(&grant_args, info, needs, &env)
        }),
    })
}

/// How to serve MCP, from the flags and what the loaded provider says of itself.
pub fn mcp_options(
    host: &HostArgs,
    args: &crate::cli::McpArgs,
    runtime: &crate::runtime::Runtime,
    sha256: String,
    signers: Vec<String>,
) -> Result<crate::mcp::McpOptions> {
    if let Some(addr) = args.http
        && !addr.ip().is_loopback()
        && !args.http_any_address
    {
        bail!(
            "--http {addr}: not a loopback address; MCP over HTTP is for this machine unless \
             you pass --http-any-address (and --bearer-env)"
        );
    }
    let bearer = match &args.bearer_env {
        None => None,
        Some(name) => match host_env(name) {
            Some(token) if !token.trim().is_empty() => Some(token.trim().into()),
            _ => bail!(
                "--bearer-env {name}: that variable is not set (or empty); set it to the token"
            ),
        },
    };
    if let Some(addr) = args.http
        && !addr.ip().is_loopback()
        && bearer.is_none()
    {
        bail!("--http {addr} is not a loopback address: give --bearer-env too");
    }
    if args.bearer_env.is_some() && args.http.is_none() {
        bail!(
            "--bearer-env is for --http; on stdio the client is the process that started this one"
        );
    }
    Ok(crate::mcp::McpOptions {
        http: args
            .http
            .map(|addr| crate::mcp::http::HttpOptions { addr, bearer }),
        serve: serve_options(host),
        tools: (!args.tools.is_empty()).then(|| args.tools.clone()),
        read_only: args.read_only,
        wait: Duration::from_secs(args.mcp_wait.max(1)),
        inline_bytes: args.mcp_inline_bytes.max(1),
        identity: crate::mcp::Identity {
            provider: runtime.info.id.clone(),
            provider_version: runtime.info.version.clone(),
            sha256,
            signers,
        },
    })
}

/// How to serve EPP/1, from the flags.
pub fn serve_options(args: &HostArgs) -> ServeOptions {
    ServeOptions {
        max_line_bytes: args.max_line_bytes.max(1024),
        max_concurrent: args.max_concurrent.max(1),
        call_timeout: Duration::from_secs(args.call_timeout.max(1)),
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
        max_output_bytes: args.max_output_bytes,
        max_param_bytes: args.max_param_bytes.min(args.max_line_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::bindings::abx::epp::types::{Capabilities, HeaderScope, SecretHeader};
    use crate::net::grant::test_provider;
    use clap::Parser;

    fn info() -> ProviderInfo {
        test_provider(&[
            ("base_url", &["EX_BASE_URL"], false),
            ("api_key", &["EX_API_KEY", "EX_KEY"], true),
            ("password", &["EX_PASSWORD"], true),
        ])
    }

    fn needs() -> ProviderNeeds {
        ProviderNeeds {
            capabilities: Capabilities::empty(),
            origin: vec!["{base_url}".into()],
            origin_host_any_port: false,
            allow_hosts_env: vec!["EX_ALLOW_HOSTS".into()],
            secret_headers: vec![SecretHeader {
                setting: "api_key".into(),
                header: "x-ex-key".into(),
                scope: HeaderScope::Origin,
            }],
            generic_settings: vec![
                ("sandbox_base_url".into(), "base_url".into()),
                ("sandbox_api_key".into(), "api_key".into()),
            ],
        }
    }

    fn env(name: &str) -> Option<String> {
        let value = match name {
            "EX_BASE_URL" => "http://127.0.0.1:1",
            "EX_API_KEY" | "EX_KEY" => "key-value",
            "EX_PASSWORD" => "password-value",
            "EX_ALLOW_HOSTS" => "a.example",
            "ABX_SANDBOX_API_KEY" => "framework-key",
            "EXTRA" => "extra-value",
            _ => return None,
        };
        Some(value.to_string())
    }

    fn env_for(pass_env: &[&str]) -> Result<Vec<(String, String)>> {
        let grant = Grant::resolve(&info(), &needs(), &env, &[]).unwrap();
        let pass: Vec<String> = pass_env.iter().map(|s| s.to_string()).collect();
        guest_env(&info(), &grant, &pass, &env)
    }

    #[test]
    fn the_guest_gets_its_settings_minus_what_the_host_keeps() {
        let vars = env_for(&["EXTRA", "EX_BASE_URL"]).unwrap();
        assert_eq!(
            vars,
            [
                ("EX_BASE_URL".to_string(), "http://127.0.0.1:1".to_string()),
                // A secret the host does not inject is the provider's own business.
                ("EX_PASSWORD".to_string(), "password-value".to_string()),
                ("EXTRA".to_string(), "extra-value".to_string()),
            ]
        );
    }

    #[test]
    fn pass_env_cannot_hand_over_what_the_host_keeps() {
        for (name, why) in [
            ("EX_API_KEY", "is a secret the host keeps"),
            ("EX_KEY", "is a secret the host keeps"),
            ("ABX_SANDBOX_API_KEY", "is a secret the host keeps"),
            ("EX_ALLOW_HOSTS", "providers never see it"),
        ] {
            let err = env_for(&[name]).unwrap_err().to_string();
            assert!(err.contains(name) && err.contains(why), "{name}: {err}");
            assert!(
                !err.contains("-value") && !err.contains("a.example"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_policy_follows_the_grant() {
        let args = crate::cli::Cli::try_parse_from([
            "epp-host",
            "run",
            "x.wasm",
            "--allow-host",
            "b.example",
        ])
        .unwrap();
        let crate::cli::Command::Run { host, .. } = args.command else {
            unreachable!()
        };
        let granted = grant(&host, &info(), &needs(), &env).unwrap();
        let check = |scheme: &str, authority: &str| {
            let dest = crate::net::policy::Destination::parse(scheme, authority).unwrap();
            granted.policy.check(&dest)
        };
        assert_eq!(check("http", "127.0.0.1:1").unwrap().inject.len(), 1);
        // No `origin-host-any-port`: another port on the origin's host is refused.
        assert!(check("http", "127.0.0.1:2").is_err());
        assert!(check("http", "a.example").unwrap().inject.is_empty());
        assert!(check("http", "b.example").unwrap().inject.is_empty());
        assert!(check("http", "c.example").is_err());
        assert!(granted.policy.owns_header("X-Ex-Key"));
    }
}
