//! Harness for end-to-end tests: the testbed (real opensandbox-server with the
//! local runtime and the execd stand-in) and `epp-host` processes driven over
//! stdio exactly as an agent framework would.
//!
//! Paths come from the environment the justfile sets (`EPP_HOST_BIN`,
//! `EPP_GUEST_WASM`, `EPP_TRUSTED_KEY`, `EPP_TESTBED_URL`, `EPP_TESTBED_KEY`);
//! without `EPP_TESTBED_URL` the harness starts its own testbed once per test
//! binary and stops it (with every sandbox process) when the binary exits.

mod host;
mod testbed;

pub use host::{Host, HostBuilder, Mode, Reply, RpcError};
pub use testbed::{Testbed, testbed};

use std::path::PathBuf;

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

/// The cargo target directory (honours `CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// A file the justfile prepares, from `var` or its default location.
pub fn artifact(var: &str, default: PathBuf) -> PathBuf {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or(default);
    assert!(
        path.exists(),
        "{} not found ({var}); run the tests with `just test` (it builds and signs what they need)",
        path.display()
    );
    path
}

/// A unique string for names and metadata in one test run.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{}-{nanos:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Defines `mod $name { fn direct(); fn proxy(); }` running `$body(mode)` in
/// both ways the provider can reach sandboxes.
#[macro_export]
macro_rules! both_modes {
    ($name:ident, $body:path) => {
        mod $name {
            #[test]
            fn direct() {
                $body($crate::Mode::Direct)
            }
            #[test]
            fn proxy() {
                $body($crate::Mode::Proxy)
            }
        }
    };
}

/// Runs a command that must exit 0 and returns its stdout.
pub fn sh(host: &Host, sandbox_id: &str, cmd: &str) -> String {
    let r = host.ok(
        "commands.run",
        serde_json::json!({"sandbox_id": sandbox_id, "cmd": cmd}),
    );
    assert_eq!(r["exit_code"], 0, "`{cmd}` failed: {r}");
    r["stdout"].as_str().unwrap().to_string()
}

/// The sandbox's working directory (on the testbed, a private directory).
pub fn workdir(host: &Host, sandbox_id: &str) -> String {
    sh(host, sandbox_id, "pwd").trim().to_string()
}

/// Decodes standard base64.
pub fn b64d(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("base64")
}

/// Encodes standard base64.
pub fn b64e(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
