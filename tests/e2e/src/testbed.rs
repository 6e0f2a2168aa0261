//! Starting (or reusing) the testbed: the local-process tier and the Docker tier.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running lifecycle server.
pub struct Testbed {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    pub api_key: String,
    child: Option<Child>,
}

static TESTBED: OnceLock<Result<Testbed, String>> = OnceLock::new();
static CHILD_PGID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn stop_testbed() {
    let pgid = CHILD_PGID.swap(0, std::sync::atomic::Ordering::SeqCst);
    if pgid > 0 {
        // The testbed stops its sandboxes on SIGTERM (at worst 15 s for the server,
        // 5 s for what is left).
        stop_process_group(pgid, Duration::from_secs(30));
    }
}

/// The value `init` makes, once per process: when it panics (a testbed that did not
/// start), the failure is what every later call gets, at once, rather than another
/// start and another wait of up to 180 s per test.
fn once<T>(
    cell: &'static OnceLock<Result<T, String>>,
    what: &str,
    init: impl FnOnce() -> T + std::panic::UnwindSafe,
) -> &'static T {
    let mut first = false;
    let got = cell.get_or_init(|| {
        first = true;
        std::panic::catch_unwind(init).map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".to_string())
        })
    });
    match got {
        Ok(v) => v,
        Err(e) if first => panic!("{e}"),
        Err(e) => panic!("the {what} failed to start earlier in this test binary: {e}"),
    }
}

/// SIGTERM to the process group `pgid`, whose leader (pid `pgid`) is a child of this
/// process; waits up to `patience` for every member to be gone, then SIGKILLs what is
/// left. The leader is reaped on the way (unreaped, it would count as a member until
/// this process exits). Whether the group ended on its own.
fn stop_process_group(pgid: i32, patience: Duration) -> bool {
    // SAFETY: plain syscalls on a process group this process created.
    unsafe {
        libc::kill(-pgid, libc::SIGTERM);
    }
    let deadline = Instant::now() + patience;
    loop {
        // SAFETY: reaping our own child (std's Child is never waited for after this),
        // then probing its group.
        let gone = unsafe {
            libc::waitpid(pgid, std::ptr::null_mut(), libc::WNOHANG);
            libc::kill(-pgid, 0) != 0
        };
        if gone {
            return true;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: as above; whatever is left of the group goes.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
        libc::waitpid(pgid, std::ptr::null_mut(), 0);
    }
    false
}

/// The shared testbed of this test binary.
pub fn testbed() -> &'static Testbed {
    once(&TESTBED, "testbed", || {
        match std::env::var("EPP_TESTBED_URL") {
            Ok(url) => Testbed {
                url,
                api_key: std::env::var("EPP_TESTBED_KEY").unwrap_or_default(),
                child: None,
            },
            Err(_) => Testbed::start(),
        }
    })
}

impl Testbed {
    // The child is stopped (its whole process group) by the atexit hook.
    fn start() -> Testbed {
        // Recognisable, for the secrets sweep (see `secrets`).
        let api_key = format!("KEY-{}-SECRET", crate::secrets::token());
        let (child, ready) = launch(
            &["--port", "0", "--api-key", &api_key],
            true,
            |_| {},
            |child| {
                CHILD_PGID.store(child.id() as i32, std::sync::atomic::Ordering::SeqCst);
                // SAFETY: registering a plain extern "C" function.
                unsafe {
                    libc::atexit(stop_testbed);
                }
            },
        );
        match ready {
            Ok((url, _)) => Testbed {
                url,
                api_key,
                child: Some(child),
            },
            Err(_) => {
                stop_testbed();
                panic!(
                    "the testbed did not become ready (it exited, or 180 s passed: see [testbed] lines above)"
                );
            }
        }
    }

    /// Whether this process started the testbed (false when reusing one).
    pub fn owned(&self) -> bool {
        self.child.is_some()
    }
}

/// A testbed of one test's own, e.g. to stop and restart it; stopped (with
/// every sandbox process) when dropped.
pub struct PrivateTestbed {
    /// `http://127.0.0.1:PORT` (the same across restarts).
    pub url: String,
    pub api_key: String,
    port: u16,
    state: tempfile::TempDir,
    /// The `testbed start` options it was started with.
    options: Vec<String>,
    child: Option<Child>,
}

impl PrivateTestbed {
    /// Starts one on a free port, with its own state folder and API key.
    pub fn start() -> PrivateTestbed {
        Self::start_with(&[])
    }

    /// As `start`, with more `testbed start` options (e.g. `--eip 127.0.0.2`).
    pub fn start_with(options: &[&str]) -> PrivateTestbed {
        let state = tempfile::tempdir().expect("testbed state dir");
        let api_key = format!("KEY-{}-SECRET", crate::secrets::token());
        let options: Vec<String> = options.iter().map(|s| s.to_string()).collect();
        let (child, url) = Self::launch(0, &api_key, state.path(), &options);
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port in the testbed URL");
        PrivateTestbed {
            url,
            api_key,
            port,
            state,
            options,
            child: Some(child),
        }
    }

    fn launch(
        port: u16,
        api_key: &str,
        state: &std::path::Path,
        options: &[String],
    ) -> (Child, String) {
        let state = state.join("testbed");
        let port = port.to_string();
        let mut args = vec![
            "--port",
            &port,
            "--api-key",
            api_key,
            "--state-dir",
            state.to_str().expect("UTF-8 temp dir"),
        ];
        args.extend(options.iter().map(String::as_str));
        let (mut child, ready) = launch(&args, false, |_| {}, |_| {});
        match ready {
            Ok((url, _)) => (child, url),
            Err(seen) => {
                stop_group(&mut child);
                panic!("a private testbed did not start:\n{}", seen.join("\n"));
            }
        }
    }

    /// Stops the server (it ends every sandbox) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_group(&mut child);
        }
    }

    /// Stops it and starts it again on the same port and state folder.
    pub fn restart(&mut self) {
        self.stop();
        let (child, url) = Self::launch(self.port, &self.api_key, self.state.path(), &self.options);
        assert_eq!(url, self.url, "the restarted testbed moved");
        self.child = Some(child);
    }
}

impl Drop for PrivateTestbed {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What `launch` saw: the URL and the lines before the "ready at" line, or every
/// line printed when it never came.
type Launched = Result<(String, Vec<String>), Vec<String>>;

/// Runs `tests/testbed/testbed start --exit-on-eof <args>` in its own process group
/// (so one signal stops the server and every sandbox) and waits up to 180 s for its
/// "ready at" line: the URL and the lines before it, or every line it printed.
/// `configure` adds to the command (environment); `spawned` runs before the wait
/// (to register cleanup); `echo` copies its output to stderr. Its stdin is a pipe
/// whose writing end the returned `Child` holds: when this process ends however it
/// ends (a Ctrl-C of `cargo test` runs no atexit hook), the testbed reads end of file
/// and stops itself.
// The child is stopped by the callers (atexit hook or `stop_group`), not here.
#[allow(clippy::zombie_processes)]
fn launch(
    args: &[&str],
    echo: bool,
    configure: impl FnOnce(&mut Command),
    spawned: impl FnOnce(&Child),
) -> (Child, Launched) {
    let script = crate::repo_root().join("tests/testbed/testbed");
    let mut cmd = Command::new(&script);
    configure(&mut cmd);
    cmd.args(["start", "--exit-on-eof"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", script.display()));
    spawned(&child);
    let (tx, rx) = mpsc::channel::<String>();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("[testbed] {line}");
                }
                let _ = tx.send(line);
            }
        });
    }
    // Only the readers send: once both streams end (the testbed exited), the wait
    // below ends too, rather than after 180 s.
    drop(tx);
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(pos) = line.find("ready at http://") {
                    let url = line[pos + "ready at ".len()..]
                        .split_whitespace()
                        .next()
                        .unwrap()
                        .to_string();
                    return (child, Ok((url, seen)));
                }
                seen.push(line);
            }
            Err(_) => return (child, Err(seen)),
        }
    }
}

/// SIGTERM to the child's process group, SIGKILL after 15 s, then reaps it.
fn stop_group(child: &mut Child) {
    let pgid = child.id() as i32;
    // SAFETY: plain syscalls on a process group this process created.
    unsafe {
        libc::kill(-pgid, libc::SIGTERM);
    }
    for _ in 0..300 {
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: as above; whatever is left of the group goes.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    let _ = child.wait();
}

/// The Docker tier: the unpatched server on a Docker engine of the testbed's own
/// (`testbed start --docker`, tests/testbed/README.md "Docker tier").
struct DockerTier {
    testbed: Testbed,
    /// The engine, `unix:///…/engine.sock` (for `docker -H`).
    host: String,
    /// The host folder sandboxes may bind (`[storage] allowed_host_paths`).
    volumes: PathBuf,
}

static DOCKER: OnceLock<Result<DockerTier, String>> = OnceLock::new();
static DOCKER_PGID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// The state folder of the Docker tier this process started (the testbed's own
/// temporary folder, from its `state:` line).
static DOCKER_STATE: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn stop_docker_testbed() {
    let pgid = DOCKER_PGID.swap(0, std::sync::atomic::Ordering::SeqCst);
    if pgid > 0 {
        // It removes every container and stops its engine: 2 to 3 s, about 2 min at
        // worst (see cleanup in tests/testbed/testbed).
        stop_process_group(pgid, Duration::from_secs(150));
    }
    let Some(state) = DOCKER_STATE.get() else {
        return;
    };
    // Killed, or its own sweep failed: what its engine left, from its engine.env; then
    // the folder (the testbed removes it when it stops on its own).
    if state.join("docker/engine.env").exists() {
        let swept = Command::new(crate::repo_root().join("tests/testbed/testbed"))
            .arg("sweep")
            .arg(state)
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !swept {
            eprintln!(
                "[testbed] the Docker tier's engine was not removed completely: testbed sweep {}",
                state.display()
            );
            return;
        }
    }
    let _ = std::fs::remove_dir_all(state);
}

fn docker_tier() -> &'static DockerTier {
    once(&DOCKER, "Docker tier", || {
        match std::env::var("EPP_DOCKER_TESTBED_URL") {
            Ok(url) => {
                let var = |name: &str| {
                    std::env::var(name).unwrap_or_else(|_| {
                    panic!(
                        "EPP_DOCKER_TESTBED_URL is set but {name} is not (scripts/e2e sets both)"
                    )
                })
                };
                DockerTier {
                    testbed: Testbed {
                        url,
                        api_key: std::env::var("EPP_DOCKER_TESTBED_KEY").unwrap_or_default(),
                        child: None,
                    },
                    host: var("EPP_DOCKER_HOST"),
                    volumes: PathBuf::from(var("EPP_DOCKER_TESTBED_VOLUMES")),
                }
            }
            Err(_) => DockerTier::start(),
        }
    })
}

impl DockerTier {
    // The child is stopped (its whole process group) by the atexit hook.
    fn start() -> DockerTier {
        // SAFETY: a plain syscall.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "the Docker tier runs a dockerd of its own and needs root (or set EPP_DOCKER_TESTBED_URL \
             and the other EPP_DOCKER_* variables to one already running: scripts/e2e does)"
        );
        // The local tier's key: the secrets sweep looks for it in every host's output.
        let api_key = testbed().api_key.clone();
        let mut args = vec!["--docker", "--port", "0"];
        if api_key.is_empty() {
            args.push("--no-api-key");
        } else {
            args.extend(["--api-key", api_key.as_str()]);
        }
        // Its state folder is its own (removed when it stops, a stop at end of file on
        // stdin included), under /tmp, not $TMPDIR: the engine's socket paths have a
        // length limit. It names it before the engine starts; the exit hook sweeps it
        // after a SIGKILL.
        let (child, ready) = launch(
            &args,
            true,
            |cmd| {
                cmd.env("TMPDIR", "/tmp");
            },
            |child| {
                DOCKER_PGID.store(child.id() as i32, std::sync::atomic::Ordering::SeqCst);
                // SAFETY: registering a plain extern "C" function.
                unsafe {
                    libc::atexit(stop_docker_testbed);
                }
            },
        );
        let lines = match &ready {
            Ok((_, lines)) | Err(lines) => lines,
        };
        // testbed: state: /tmp/opensandbox-testbed.XXXXXX (removed on exit)
        if let Some(state) = lines.iter().find_map(|l| {
            let (_, rest) = l.split_once("testbed: state: ")?;
            Some(PathBuf::from(rest.split(" (").next()?))
        }) {
            let _ = DOCKER_STATE.set(state);
        }
        let Ok((url, lines)) = ready else {
            stop_docker_testbed();
            panic!(
                "the Docker testbed did not become ready (it exited, or 180 s passed: see [testbed] lines above)"
            );
        };
        // testbed: docker: engine DOCKER_HOST=unix://…; host paths for volumes under /…/volumes
        let line = lines
            .iter()
            .find(|l| l.contains("engine DOCKER_HOST="))
            .unwrap_or_else(|| panic!("no engine line in the Docker testbed's output: {lines:?}"));
        let after = |marker: &str| {
            line.split_once(marker)
                .map(|(_, rest)| rest.split([';', ' ']).next().unwrap_or("").to_string())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| panic!("no {marker:?} in {line:?}"))
        };
        DockerTier {
            host: after("DOCKER_HOST="),
            volumes: PathBuf::from(after("volumes under ")),
            testbed: Testbed {
                url,
                api_key,
                child: Some(child),
            },
        }
    }
}

/// The shared Docker-tier testbed of this test binary: from `EPP_DOCKER_TESTBED_URL`,
/// `EPP_DOCKER_TESTBED_KEY`, `EPP_DOCKER_HOST` and `EPP_DOCKER_TESTBED_VOLUMES`
/// (scripts/e2e), else started once (`testbed start --docker`, as root) and stopped,
/// with its engine, when the binary exits.
pub fn docker_testbed() -> &'static Testbed {
    &docker_tier().testbed
}

/// The Docker tier's engine, `unix:///…/engine.sock`: what `docker -H` takes.
pub fn docker_host() -> &'static str {
    &docker_tier().host
}

/// The host folder under which the Docker tier lets sandboxes bind host paths
/// (its only `[storage] allowed_host_paths` entry); it exists.
pub fn docker_volumes() -> &'static Path {
    &docker_tier().volumes
}

/// Runs `docker -H <the Docker tier's engine> ARGS`; its output, whatever the exit status.
pub fn docker_cli_output(args: &[&str]) -> Output {
    Command::new("docker")
        .arg("-H")
        .arg(docker_host())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running docker {args:?}: {e}"))
}

/// Runs `docker -H <the Docker tier's engine> ARGS`, which must succeed; its stdout.
pub fn docker_cli(args: &[&str]) -> String {
    let out = docker_cli_output(args);
    assert!(
        out.status.success(),
        "docker {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("docker prints UTF-8")
}

/// `docker inspect` of one container (or image, volume…) as JSON; `None` when the
/// engine has no such object.
pub fn docker_inspect(name: &str) -> Option<serde_json::Value> {
    let out = docker_cli_output(&["inspect", "--", name]);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("No such object"),
            "docker inspect {name} failed ({}): {err}",
            out.status
        );
        return None;
    }
    let mut list: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).expect("docker inspect prints JSON");
    assert_eq!(list.len(), 1, "docker inspect {name}: {list:?}");
    list.pop()
}

/// The container the server runs sandbox `sandbox_id` in (its name, `sandbox-<id>`).
pub fn sandbox_container(sandbox_id: &str) -> String {
    format!("sandbox-{sandbox_id}")
}
