//! Harness for end-to-end tests: the testbed (real opensandbox-server with the
//! local runtime and the execd stand-in) and `epp-host` processes driven over
//! stdio exactly as an agent framework would.
//!
//! Paths come from the environment the justfile sets (`EPP_HOST_BIN`,
//! `EPP_GUEST_WASM`, `EPP_TRUSTED_KEY`, `EPP_TESTBED_URL`, `EPP_TESTBED_KEY`);
//! without `EPP_TESTBED_URL` the harness starts its own testbed once per test
//! binary and stops it (with every sandbox process) when the binary exits.
//! The Docker tier (the unpatched server on a Docker engine of the testbed's own,
//! `docker_testbed`, `HostBuilder::docker`) likewise comes from
//! `EPP_DOCKER_TESTBED_URL`, `EPP_DOCKER_TESTBED_KEY`, `EPP_DOCKER_HOST` and
//! `EPP_DOCKER_TESTBED_VOLUMES`, or is started once per test binary that uses it.

pub mod faults;
mod host;
pub mod secrets;
mod testbed;

pub use faults::{Fault, FaultProxy, Held, HoldEnd};
pub use host::{Host, HostBuilder, Mode, Reply, RpcError};
pub use testbed::{
    PrivateTestbed, Testbed, docker_cli, docker_cli_output, docker_host, docker_inspect,
    docker_testbed, docker_volumes, sandbox_container, testbed,
};

use std::path::PathBuf;
use std::time::{Duration, Instant};

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

/// Asks `probe` every 50 ms until it answers `Some`, and returns that; fails
/// the test, saying it waited for `what`, when `timeout` passes first. `probe`
/// fails the test itself on anything it did not expect (an error it does not
/// wait through), so a poll never hides one.
pub fn wait_until<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "waited {timeout:?} for {what} in vain"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
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

/// The pid of the sandbox's own execd (the stand-in started in its working
/// directory), as `process.list` shows it inside the sandbox.
pub fn execd_pid(host: &Host, sandbox_id: &str) -> i64 {
    let dir = workdir(host, sandbox_id);
    let list = host.ok(
        "process.list",
        serde_json::json!({"sandbox_id": sandbox_id}),
    );
    list["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            let c = p["cmdline"].as_str().unwrap();
            c.contains("execd-standin") && c.contains(&dir)
        })
        .and_then(|p| p["pid"].as_i64())
        .unwrap_or_else(|| panic!("no execd for {dir} in {list}"))
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

/// Appends one line of figures for docs/reliability.md to
/// `$EPP_FIGURES_DIR/<area>.txt` (default `target/reliability/`).
pub fn figure(area: &str, line: &str) {
    use std::io::Write as _;
    let dir = std::env::var_os("EPP_FIGURES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("reliability"));
    let _ = std::fs::create_dir_all(&dir);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{area}.txt")))
    {
        let _ = writeln!(f, "{line}");
    }
    eprintln!("figure {area}: {line}");
}

/// Whether process `pid` of this machine still runs (a zombie has exited
/// already; its parent just has not reaped it).
pub fn running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
    state.is_some_and(|s| s != 'Z' && s != 'X')
}

/// Pids of the running processes of this machine one of whose `/proc/PID/FILE`
/// entries (NUL-separated: `environ`, `cmdline`) satisfies `pred`.
fn processes_where(file: &str, pred: impl Fn(&[u8]) -> bool) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            running(*pid)
                && std::fs::read(format!("/proc/{pid}/{file}"))
                    .is_ok_and(|entries| entries.split(|b| *b == 0).any(&pred))
        })
        .collect()
}

/// Pids of live processes of testbed sandbox `sandbox_id` (found by the
/// `OPENSANDBOX_TESTBED_SANDBOX` marker in their environment, as the testbed
/// itself finds them).
pub fn sandbox_processes(sandbox_id: &str) -> Vec<u32> {
    let needle = format!("OPENSANDBOX_TESTBED_SANDBOX={sandbox_id}");
    processes_where("environ", |v| v == needle.as_bytes())
}

/// Pids of running processes of this machine with `needle` in an argument of
/// their command line (e.g. a unique marker in a sandbox command's script).
pub fn processes_with_arg(needle: &str) -> Vec<u32> {
    assert!(
        !needle.is_empty(),
        "an empty needle is in every command line"
    );
    processes_where("cmdline", |arg| {
        arg.windows(needle.len()).any(|w| w == needle.as_bytes())
    })
}

/// Waits up to `timeout` for every process of these sandboxes to be gone;
/// returns the pids still alive (empty: no orphans).
pub fn orphans(sandbox_ids: &[String], timeout: std::time::Duration) -> Vec<u32> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left: Vec<u32> = sandbox_ids
            .iter()
            .flat_map(|id| sandbox_processes(id))
            .collect();
        if left.is_empty() || std::time::Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Resident set size of a process, in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// The most a process has ever had resident, in KiB (`VmHWM`).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Open file descriptors of a process.
pub fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}
