//! The host's log: `tracing` events with fields (request id, method, sandbox,
//! destination), written to stderr as text lines; stdout carries only EPP/1.
//!
//! `EPP_LOG` sets the level: `error`, `warn`, `info` (the default), `debug`
//! (adds one event per request: method, duration, outcome) or `trace`; `off`
//! silences the log. A bare level applies to the host's own events, other
//! crates (wasmtime, hyper) log warnings and errors only; a list of
//! `target=level` directives (`epp_host=debug,wasmtime_wasi=trace`) sets
//! levels per target instead. Events of other crates are theirs: wasmtime's
//! traces can show what the guest handles (its settings included), never the
//! secrets the host injects, which the guest never has.
//!
//! Secret header values are never logged: they live only in `HeaderValue`s
//! marked sensitive, and no event formats a request, its headers or a grant.

use std::io::IsTerminal;
use std::str::FromStr;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The variable that sets the log level.
pub const ENV: &str = "EPP_LOG";

/// The host's own target (library and binary).
const HOST: &str = "epp_host";

/// The filter `spec` (the value of `EPP_LOG`) asks for; an error names what
/// is wrong with it.
pub fn filter(spec: Option<&str>) -> Result<Targets, String> {
    let default = || {
        Targets::new()
            .with_default(LevelFilter::WARN)
            .with_target(HOST, LevelFilter::INFO)
    };
    let spec = spec.map(str::trim).unwrap_or("");
    if spec.is_empty() {
        return Ok(default());
    }
    if let Ok(level) = LevelFilter::from_str(spec) {
        return Ok(Targets::new()
            .with_default(level.min(LevelFilter::WARN))
            .with_target(HOST, level));
    }
    Targets::from_str(spec).map_err(|e| {
        format!(
            "{ENV}={spec:?} is not a level (error, warn, info, debug, trace, off) or a list of \
             target=level directives ({e}); logging at info"
        )
    })
}

/// Installs the stderr log for this process, at the level `EPP_LOG` asks for.
pub fn init() {
    let spec = std::env::var(ENV).ok();
    let (targets, complaint) = match filter(spec.as_deref()) {
        Ok(targets) => (targets, None),
        Err(why) => (filter(None).expect("the default filter"), Some(why)),
    };
    let stderr = std::io::stderr();
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(stderr.is_terminal());
    // A second init (a test calling twice) keeps the first.
    if tracing_subscriber::registry()
        .with(layer)
        .with(targets)
        .try_init()
        .is_ok()
        && let Some(why) = complaint
    {
        tracing::warn!("{why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn enabled(targets: &Targets, target: &str, level: Level) -> bool {
        targets.would_enable(target, &level)
    }

    #[test]
    fn the_default_is_info_for_the_host_and_warn_for_the_rest() {
        for spec in [None, Some(""), Some("  ")] {
            let t = filter(spec).unwrap();
            assert!(enabled(&t, "epp_host::rpc::server", Level::INFO));
            assert!(!enabled(&t, "epp_host::rpc::server", Level::DEBUG));
            assert!(enabled(&t, "wasmtime_wasi_http", Level::WARN));
            assert!(!enabled(&t, "wasmtime_wasi_http", Level::INFO));
        }
    }

    #[test]
    fn a_bare_level_is_the_hosts_own() {
        let t = filter(Some("debug")).unwrap();
        assert!(enabled(&t, "epp_host::net::outbound", Level::DEBUG));
        assert!(!enabled(&t, "epp_host::net::outbound", Level::TRACE));
        assert!(!enabled(&t, "wasmtime_wasi", Level::DEBUG));
        let t = filter(Some("error")).unwrap();
        assert!(!enabled(&t, "epp_host", Level::WARN));
        assert!(!enabled(&t, "hyper_util", Level::WARN));
        let t = filter(Some("off")).unwrap();
        assert!(!enabled(&t, "epp_host", Level::ERROR));
        assert!(!enabled(&t, "wasmtime", Level::ERROR));
    }

    #[test]
    fn directives_set_levels_per_target() {
        let t = filter(Some("epp_host=debug,wasmtime_wasi=trace")).unwrap();
        assert!(enabled(&t, "epp_host::rpc", Level::DEBUG));
        assert!(enabled(&t, "wasmtime_wasi::p2", Level::TRACE));
        assert!(!enabled(&t, "hyper", Level::ERROR));
        let err = filter(Some("epp_host=loud")).unwrap_err();
        assert!(err.contains("EPP_LOG=\"epp_host=loud\""), "{err}");
    }
}
