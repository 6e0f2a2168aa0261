//! Turning flags and the host's environment into the runtime's configuration:
//! the network policy, the guest's environment, limits and serving options.

use crate::cli::HostArgs;
use crate::net::policy::NetPolicy;
use crate::net::websocket::MAX_CONNECTIONS;
use crate::rpc::server::ServeOptions;
use crate::runtime::LoadOptions;
use crate::runtime::limits::Limits;
use anyhow::{Result, bail};
use opensandbox_settings::{
    ALLOW_HOSTS_ENV, API_KEY_ENV, EXPRESS_KEY_ENV, Origin, first_set, guest_env_vars,
};
use std::time::Duration;

fn host_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The environment handed to the guest: the provider's setting variables (minus
/// the API key, which the host injects itself) and any `--pass-env` names.
/// Nothing else from the host's environment reaches the provider.
pub fn guest_env(args: &HostArgs) -> Result<Vec<(String, String)>> {
    let mut names: Vec<&str> = guest_env_vars().collect();
    for extra in &args.pass_env {
        if API_KEY_ENV.contains(&extra.as_str()) || extra == EXPRESS_KEY_ENV {
            bail!(
                "--pass-env {extra}: this variable is a secret the host keeps; it is never passed to providers"
            );
        }
        names.push(extra);
    }
    Ok(names
        .into_iter()
        .filter_map(|name| host_env(name).map(|v| (name.to_string(), v)))
        .collect())
}

/// The outbound policy from the provider's settings and `--allow-host`.
///
/// If the server URL settings are invalid the policy allows nothing; the
/// provider reports the bad setting (E2001) on every call.
pub fn policy(args: &HostArgs) -> Result<NetPolicy> {
    let mut allow: Vec<String> = args.allow_hosts.clone();
    if let Some(list) = host_env(ALLOW_HOSTS_ENV) {
        allow.push(list);
    }
    let api_key = first_set(&host_env, API_KEY_ENV).map(|(_, v)| v);
    let origin = Origin::from_env(&host_env).unwrap_or_else(|e| {
        eprintln!("epp-host: {e}; no outbound requests will be allowed until it is fixed");
        Origin {
            scheme: "http".into(),
            host: "invalid.".into(),
            port: 1,
            path_prefix: String::new(),
        }
    });
    NetPolicy::new(&origin, &allow, api_key).map_err(anyhow::Error::msg)
}

pub fn limits(args: &HostArgs) -> Limits {
    Limits::new(args.max_memory_mib.max(16), args.cpu_budget_ms)
}

pub fn load_options(args: &HostArgs, wasm: Vec<u8>) -> Result<LoadOptions> {
    if args.max_concurrent == 0 {
        bail!("--max-concurrent must be at least 1");
    }
    let cache_dir = if args.no_cache {
        None
    } else {
        args.cache_dir
            .clone()
            .or_else(crate::runtime::cache::default_dir)
    };
    Ok(LoadOptions {
        wasm,
        cache_dir,
        limits: limits(args),
        instances: (args.max_concurrent + MAX_CONNECTIONS + 16) as u32,
        policy: policy(args)?,
        guest_env: guest_env(args)?,
    })
}

pub fn serve_options(args: &HostArgs) -> ServeOptions {
    ServeOptions {
        max_line_bytes: args.max_line_bytes.max(1024),
        max_concurrent: args.max_concurrent.max(1),
        call_timeout: Duration::from_secs(args.call_timeout.max(1)),
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
        max_output_bytes: args.max_output_bytes,
    }
}
