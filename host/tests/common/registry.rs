//! A real OCI registry for the tests: Debian's `docker-registry`
//! (distribution 2.8) on 127.0.0.1, a free port and a storage directory of
//! its own, started and stopped by the test itself (never the system
//! service). Installed with apt-get when missing (through sudo when not root).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The Debian package's binary.
const BINARY: &str = "/usr/bin/docker-registry";

/// A registry process and its storage.
pub struct Registry {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Registry {
    /// Starts a fresh, empty registry and waits until `/v2/` answers.
    pub fn start() -> Registry {
        Registry::start_with(None)
    }

    /// A registry that serves only `user` with `password` (htpasswd, basic auth).
    pub fn with_password(user: &str, password: &str) -> Registry {
        Registry::start_with(Some((user, password)))
    }

    fn start_with(login: Option<(&str, &str)>) -> Registry {
        install();
        // A port the kernel just handed out; retried if another process takes it first.
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("temp dir");
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let addr = format!("127.0.0.1:{port}");
            let config = dir.path().join("config.yml");
            let mut yaml = format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  \
                 delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
                dir.path().join("data").display()
            );
            if let Some((user, password)) = login {
                let file = dir.path().join("htpasswd");
                std::fs::write(&file, format!("{user}:{}\n", bcrypt(password)))
                    .expect("writing htpasswd");
                yaml.push_str(&format!(
                    "auth:\n  htpasswd:\n    realm: epp-tests\n    path: {}\n",
                    file.display()
                ));
            }
            std::fs::write(&config, yaml).expect("writing the registry config");
            let log = std::fs::File::create(dir.path().join("registry.log")).expect("log file");
            let child = Command::new(BINARY)
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("log file"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("starting {BINARY}: {e}"));
            let mut registry = Registry {
                child: Some(child),
                dir,
                addr,
            };
            if registry.wait_ready() {
                return registry;
            }
            eprintln!(
                "docker-registry did not come up on {}: {}",
                registry.addr,
                registry.log()
            );
        }
        panic!("docker-registry did not start on a free port in 5 tries");
    }

    /// `oci://127.0.0.1:PORT/PATH`.
    pub fn reference(&self, path: &str) -> String {
        format!("oci://{}/{path}", self.addr)
    }

    /// Stops the registry (the port then refuses connections).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Where the registry keeps the blob with `digest` (`sha256:HEX`).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// The registry's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Some(child) = &mut self.child
                && child.try_wait().ok().flatten().is_some()
            {
                return false;
            }
            // 401 is a registry asking for a login: up as well.
            if matches!(get_status(&self.addr, "/v2/"), Some(200 | 401)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The status code of `GET path` on `addr`, if anything answers.
fn get_status(addr: &str, path: &str) -> Option<u16> {
    let mut stream =
        TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// A bcrypt hash of `password` for htpasswd (glibc's crypt through Python,
/// else apache2-utils' htpasswd).
fn bcrypt(password: &str) -> String {
    let python = Command::new("python3")
        .args([
            "-W",
            "ignore",
            "-c",
            "import crypt, sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))",
            password,
        ])
        .output();
    if let Ok(out) = python
        && out.status.success()
    {
        return String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    let out = Command::new("htpasswd")
        .args(["-nbB", "u", password])
        .output()
        .expect("neither python3's crypt nor htpasswd (apache2-utils) can make a bcrypt hash");
    let line = String::from_utf8_lossy(&out.stdout);
    line.trim().trim_start_matches("u:").to_string()
}

/// Installs Debian's `docker-registry` once when it is missing. A test that
/// needs it fails (rather than skips) when it cannot be installed.
fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        if Path::new(BINARY).exists() {
            return;
        }
        eprintln!("installing docker-registry (Debian) for the registry tests");
        // SAFETY: getuid has no preconditions.
        let root = unsafe { libc::getuid() } == 0;
        let apt = |args: &[&str]| {
            let mut cmd = if root {
                Command::new("apt-get")
            } else {
                let mut sudo = Command::new("sudo");
                sudo.args(["-n", "apt-get"]);
                sudo
            };
            cmd.args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .is_ok_and(|s| s.success())
        };
        let installed = apt(&["install", "-y", "-qq", "docker-registry"])
            || (apt(&["update", "-qq"]) && apt(&["install", "-y", "-qq", "docker-registry"]));
        assert!(
            installed && Path::new(BINARY).exists(),
            "docker-registry is missing and could not be installed: run \
             `sudo apt-get install docker-registry`"
        );
    });
}
