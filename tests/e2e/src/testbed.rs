//! Starting (or reusing) the testbed.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

/// A running lifecycle server.
pub struct Testbed {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    pub api_key: String,
    child: Option<Child>,
}

static TESTBED: OnceLock<Testbed> = OnceLock::new();
static CHILD_PGID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn stop_testbed() {
    let pgid = CHILD_PGID.load(std::sync::atomic::Ordering::SeqCst);
    if pgid > 0 {
        // SAFETY: plain syscalls on a process group this process created.
        unsafe {
            libc::kill(-pgid, libc::SIGTERM);
        }
        // The testbed stops its sandboxes on SIGTERM; give it a moment.
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(50));
            // SAFETY: probing a process group we own.
            if unsafe { libc::kill(-pgid, 0) } != 0 {
                return;
            }
        }
        // SAFETY: as above.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// The shared testbed of this test binary.
pub fn testbed() -> &'static Testbed {
    TESTBED.get_or_init(|| match std::env::var("EPP_TESTBED_URL") {
        Ok(url) => Testbed {
            url,
            api_key: std::env::var("EPP_TESTBED_KEY").unwrap_or_default(),
            child: None,
        },
        Err(_) => Testbed::start(),
    })
}

impl Testbed {
    // The child is stopped (its whole process group) by the atexit hook.
    fn start() -> Testbed {
        // Recognisable, for the secrets sweep (see `secrets`).
        let api_key = format!("KEY-{}-SECRET", crate::secrets::token());
        let (child, ready) = launch(&["--port", "0", "--api-key", &api_key], true, |child| {
            CHILD_PGID.store(child.id() as i32, std::sync::atomic::Ordering::SeqCst);
            // SAFETY: registering a plain extern "C" function.
            unsafe {
                libc::atexit(stop_testbed);
            }
        });
        match ready {
            Ok(url) => Testbed {
                url,
                api_key,
                child: Some(child),
            },
            Err(_) => {
                stop_testbed();
                panic!("the testbed did not become ready within 180 s (see [testbed] lines above)");
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
        let (mut child, ready) = launch(&args, false, |_| {});
        match ready {
            Ok(url) => (child, url),
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

/// Runs `tests/testbed/testbed start <args>` in its own process group (so one
/// signal stops the server and every sandbox) and waits up to 180 s for its
/// "ready at" line: the URL, or every line it printed. `spawned` runs before
/// the wait (to register cleanup); `echo` copies its output to stderr.
// The child is stopped by the callers (atexit hook or `stop_group`), not here.
#[allow(clippy::zombie_processes)]
fn launch(
    args: &[&str],
    echo: bool,
    spawned: impl FnOnce(&Child),
) -> (Child, Result<String, Vec<String>>) {
    let script = crate::repo_root().join("tests/testbed/testbed");
    let mut cmd = Command::new(&script);
    cmd.arg("start")
        .args(args)
        .stdin(Stdio::null())
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
                    return (child, Ok(url));
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
