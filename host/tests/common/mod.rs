//! Shared harness of epp-host's integration tests: the probe component, a
//! private network namespace, loopback echo servers and a driver for a real
//! `epp-host run` process speaking EPP/1 over its stdio (through `epp-client`,
//! like the end-to-end tests and `epp-host call`).
//!
//! Everything the tests start (echo servers and epp-host processes) lives in a
//! network namespace of its own whose only interface is loopback, when the
//! machine lets us make one (root or CAP_SYS_ADMIN). Then no test can reach any
//! address outside this machine even if the host's policy were broken: a denial
//! test sees `HTTP-request-denied` only if the host refused the request itself.
//! Without that privilege the tests still run in the machine's namespace; they
//! only ever aim at loopback addresses or at addresses the policy must refuse
//! before connecting (which the tests assert from the host's log).

#![allow(dead_code)]

pub mod registry;

use epp_client::{Client, Options};
use serde_json::{Value, json};
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long any single expected answer may take before a test fails.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The secret the tests give the host as the probe's `token` setting:
/// recognisable, so a leak is easy to spot.
pub const SECRET_KEY: &str = "sk-epp-test-9f8e7d6c5b4a-NEVER-IN-GUEST";

/// The probe's declared settings: its origin, a plain one, its secret and the
/// variable in which the operator lists more hosts (tests/components/probe).
pub const BASE_URL_ENV: &str = "EPP_PROBE_BASE_URL";
pub const LABEL_ENV: &str = "EPP_PROBE_LABEL";
pub const TOKEN_ENV: &str = "EPP_PROBE_TOKEN";
pub const TOKEN_ENV_ALT: &str = "EPP_PROBE_TOKEN_ALT";
pub const ALLOW_HOSTS_ENV: &str = "EPP_PROBE_ALLOW_HOSTS";

/// The header in which the host sends the probe's secret to its origin.
pub const KEY_HEADER: &str = "x-probe-token";

// ------------------------------------------------------------------ test components

/// A test component under `tests/components/`: the `cargo` package that builds
/// it and the variable that may name a .wasm a build step made already.
pub struct TestComponent {
    package: &'static str,
    env: &'static str,
    wasm: OnceLock<PathBuf>,
}

/// The hostile probe (`tests/components/probe`).
pub static PROBE: TestComponent = TestComponent::new("epp-probe-provider", "EPP_PROBE_WASM");

/// minibox, the second provider (`tests/components/minibox`).
pub static MINIBOX: TestComponent = TestComponent::new("epp-minibox-provider", "EPP_MINIBOX_WASM");

/// The probe's .wasm (see [`TestComponent::wasm`]).
pub fn probe_wasm() -> &'static Path {
    PROBE.wasm()
}

impl TestComponent {
    const fn new(package: &'static str, env: &'static str) -> Self {
        TestComponent {
            package,
            env,
            wasm: OnceLock::new(),
        }
    }

    /// The component's .wasm: `$ENV` when set, else built here once per test
    /// binary with `cargo build -p PACKAGE --target wasm32-wasip2 --release`,
    /// which is a no-op when it is up to date and always matches the source.
    pub fn wasm(&'static self) -> &'static Path {
        self.wasm
            .get_or_init(|| match std::env::var_os(self.env) {
                Some(path) => {
                    let path = PathBuf::from(path);
                    assert!(
                        path.is_file(),
                        "{}={} is not a file; build it with `{}` or unset {} to let \
                         the tests build it",
                        self.env,
                        path.display(),
                        self.build_command(),
                        self.env
                    );
                    path
                }
                None => self.build(),
            })
            .as_path()
    }

    fn build_command(&self) -> String {
        format!(
            "cargo build -p {} --target wasm32-wasip2 --release",
            self.package
        )
    }

    fn build(&self) -> PathBuf {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("host/ has a parent");
        let output = Command::new(&cargo)
            .current_dir(root)
            .args(["build", "-p", self.package])
            .args(["--target", "wasm32-wasip2", "--release"])
            .arg("--message-format=json-render-diagnostics")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cargo:?} to build {}: {e}", self.package));
        assert!(
            output.status.success(),
            "building {} failed (`{}`; is the target installed? \
             `rustup target add wasm32-wasip2`):\n{}",
            self.package,
            self.build_command(),
            String::from_utf8_lossy(&output.stderr)
        );
        let target = self.package.replace('-', "_");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|msg| msg["reason"] == "compiler-artifact" && msg["target"]["name"] == target)
            .flat_map(|msg| {
                msg["filenames"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|f| f.as_str().map(PathBuf::from))
            })
            .find(|f| f.extension().is_some_and(|e| e == "wasm"))
            .unwrap_or_else(|| panic!("cargo built {} but named no .wasm artifact", self.package))
    }
}

/// A compile cache shared by the tests of one build (private to this user, as
/// epp-host demands), so most tests skip compiling the probe.
pub fn shared_cache_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        use std::os::unix::fs::DirBuilderExt;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("epp-host-test-cache");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .expect("creating the shared compile cache");
        dir
    })
}

// ------------------------------------------------------------------ the network lab

type Job = Box<dyn FnOnce() + Send>;

struct Lab {
    jobs: Mutex<mpsc::Sender<Job>>,
    isolated: bool,
}

/// One thread that moved into a fresh network namespace; sockets it binds and
/// processes it spawns belong to that namespace for good.
fn lab() -> &'static Lab {
    static LAB: OnceLock<Lab> = OnceLock::new();
    LAB.get_or_init(|| {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready, is_ready) = mpsc::channel();
        std::thread::Builder::new()
            .name("netns-lab".into())
            .spawn(move || {
                let isolated = match private_network() {
                    Ok(()) => true,
                    Err(e) => {
                        eprintln!(
                            "note: no private network namespace ({e}); the tests use this \
                             machine's loopback and rely on the host's own refusals"
                        );
                        false
                    }
                };
                ready.send(isolated).expect("lab start");
                for job in queue {
                    job();
                }
            })
            .expect("spawning the lab thread");
        Lab {
            jobs: Mutex::new(jobs),
            isolated: is_ready.recv().expect("lab start"),
        }
    })
}

/// Whether the tests run in a namespace that has nothing but loopback.
pub fn isolated() -> bool {
    lab().isolated
}

/// For a test that cannot run on this machine: fails it, saying why, unless
/// `EPP_ALLOW_SKIP=1` allows skipping; then prints `skipped: WHY` and the test
/// returns. A test that could not run never passes silently.
pub fn cannot_run(why: &str) {
    if std::env::var_os("EPP_ALLOW_SKIP").is_some_and(|v| v == "1") {
        eprintln!("skipped: {why}");
        return;
    }
    panic!("this test cannot run here: {why}; set EPP_ALLOW_SKIP=1 to skip it instead");
}

/// Runs `f` on the lab thread (inside the private namespace).
pub fn in_lab<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    lab()
        .jobs
        .lock()
        .expect("lab lock")
        .send(Box::new(move || {
            let _ = tx.send(f());
        }))
        .expect("lab thread is gone");
    rx.recv().expect("a lab job panicked")
}

/// Moves the calling thread into a new network namespace and brings its loopback
/// up (which gives it 127.0.0.0/8 and ::1). Undone if any step fails.
fn private_network() -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    if std::env::var_os("EPP_TEST_NO_NETNS").is_some() {
        return Err(std::io::Error::other("EPP_TEST_NO_NETNS is set"));
    }
    let original = std::fs::File::open("/proc/thread-self/ns/net")?;
    // SAFETY: plain syscalls on this thread; every pointer is to a live local.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNET) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        let ok = fd >= 0 && libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) == 0 && {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) == 0
        };
        let err = std::io::Error::last_os_error();
        if fd >= 0 {
            libc::close(fd);
        }
        if !ok {
            libc::setns(original.as_raw_fd(), libc::CLONE_NEWNET);
            return Err(err);
        }
    }
    // Loopback must work before anyone relies on it.
    std::net::TcpListener::bind("127.0.0.2:0")?;
    Ok(())
}

/// The tokio runtime that serves the echo servers.
pub fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

// ------------------------------------------------------------------ echo servers

/// One request an echo server received, as the test (not the guest) sees it.
#[derive(Debug, Clone)]
pub struct Hit {
    pub method: String,
    pub path: String,
    /// Which connection it came on: 0 for the server's first, and so on.
    pub conn: usize,
    /// The raw secret header ([`KEY_HEADER`]), if any.
    pub api_key: Option<String>,
    pub websocket: bool,
}

/// A loopback HTTP + WebSocket server that tells the guest what it received,
/// except the secret header ([`KEY_HEADER`]): for that it only says `host-key`,
/// `absent` or `other`, so echoing never hands the secret to the guest.
///
/// - `GET /redirect?to=URL` answers 302 with `Location: URL`;
/// - a WebSocket upgrade on any path answers each text message `T` with
///   `echo T api-key=VERDICT`;
/// - anything else answers 200 with `{server, path, api_key, headers}` (the key
///   header left out of `headers`).
pub struct Echo {
    pub addr: SocketAddr,
    pub name: &'static str,
    hits: Arc<Mutex<Vec<Hit>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Echo {
    /// Listens on `ip`:0 inside the lab.
    pub fn start(name: &'static str, ip: &'static str) -> Echo {
        let listener = in_lab(move || std::net::TcpListener::bind((ip, 0)))
            .unwrap_or_else(|e| panic!("binding {ip}:0 for {name}: {e}"));
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let hits = Arc::new(Mutex::new(Vec::new()));
        let task = {
            let _guard = rt().enter();
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            let hits = hits.clone();
            rt().spawn(async move {
                for conn in 0.. {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let hits = hits.clone();
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |req| {
                            let hits = hits.clone();
                            async move {
                                Ok::<_, std::convert::Infallible>(echo(name, conn, req, &hits))
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .with_upgrades()
                            .await;
                    });
                }
            })
        };
        Echo {
            addr,
            name,
            hits,
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn ws_url(&self, path: &str) -> String {
        format!("ws://{}{path}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.hits.lock().expect("hits").clone()
    }
}

fn key_verdict(key: Option<&str>) -> &'static str {
    match key {
        None => "absent",
        Some(k) if k == SECRET_KEY => "host-key",
        Some(_) => "other",
    }
}

fn echo(
    name: &'static str,
    conn: usize,
    req: hyper::Request<hyper::body::Incoming>,
    hits: &Mutex<Vec<Hit>>,
) -> hyper::Response<http_body_util::Full<bytes::Bytes>> {
    use hyper::header::{CONNECTION, LOCATION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, UPGRADE};
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let api_key = req
        .headers()
        .get(KEY_HEADER)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let verdict = key_verdict(api_key.as_deref());
    let websocket = req
        .headers()
        .get(UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    hits.lock().expect("hits").push(Hit {
        method: req.method().to_string(),
        path: path.clone(),
        conn,
        api_key,
        websocket,
    });
    let response = hyper::Response::builder();
    let empty = || http_body_util::Full::new(bytes::Bytes::new());

    if websocket {
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(
            req.headers()
                .get(SEC_WEBSOCKET_KEY)
                .map(|v| v.as_bytes())
                .unwrap_or_default(),
        );
        tokio::spawn(async move {
            use futures::{SinkExt, StreamExt};
            use tokio_tungstenite::tungstenite::Message;
            let Ok(upgraded) = hyper::upgrade::on(req).await else {
                return;
            };
            let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
                hyper_util::rt::TokioIo::new(upgraded),
                tokio_tungstenite::tungstenite::protocol::Role::Server,
                None,
            )
            .await;
            while let Some(Ok(msg)) = ws.next().await {
                match msg {
                    Message::Text(text) => {
                        let reply = format!("echo {} api-key={verdict}", text.as_str());
                        if ws.send(Message::Text(reply.into())).await.is_err() {
                            break;
                        }
                    }
                    Message::Close(_) => break,
                    _ => {}
                }
            }
        });
        return response
            .status(101)
            .header(CONNECTION, "Upgrade")
            .header(UPGRADE, "websocket")
            .header(SEC_WEBSOCKET_ACCEPT, accept)
            .body(empty())
            .expect("response");
    }
    if let Some(to) = path.strip_prefix("/redirect?to=") {
        return response
            .status(302)
            .header(LOCATION, to)
            .body(empty())
            .expect("response");
    }
    let headers: serde_json::Map<String, Value> = req
        .headers()
        .iter()
        .filter(|(k, _)| k.as_str() != KEY_HEADER)
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                json!(String::from_utf8_lossy(v.as_bytes())),
            )
        })
        .collect();
    let body = json!({"server": name, "path": path, "api_key": verdict, "headers": headers});
    response
        .status(200)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(body.to_string().into()))
        .expect("response")
}

// ------------------------------------------------------------------ epp-host

/// The path of the `epp-host` binary under test.
pub fn host_bin() -> &'static str {
    env!("CARGO_BIN_EXE_epp-host")
}

/// A `Command` for `epp-host` with an empty environment (plus `PATH`), so
/// nothing from the developer's shell leaks into a test.
pub fn host_command() -> Command {
    let mut cmd = Command::new(host_bin());
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd
}

/// Runs `epp-host ARGS` to the end with no input, inside the lab.
pub fn run_host_once(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = host_command();
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    in_lab(move || cmd.output()).expect("running epp-host")
}

/// Whether this machine lets us run a process in fresh network and mount
/// namespaces (`unshare --net --mount`, needs root or CAP_SYS_ADMIN).
pub fn can_unshare() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        Command::new("unshare")
            .args(["--net", "--mount", "--", "sh", "-c"])
            .arg("mount --make-rprivate / && mount --bind /etc/hosts /etc/hosts")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Runs `cmd` as `unshare --net --mount sh -c 'bind-mount HOSTS over /etc/hosts;
/// exec cmd'`: a process with nothing but a (down) loopback interface that
/// resolves names from the given hosts file.
fn with_private_hosts(cmd: Command, hosts: &Path) -> Command {
    let mut wrapped = Command::new("unshare");
    wrapped
        .args(["--net", "--mount", "--", "sh", "-c"])
        .arg(r#"mount --make-rprivate / && mount --bind "$1" /etc/hosts && shift && exec "$@""#)
        .arg("sh")
        .arg(hosts)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    wrapped.env_clear();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            wrapped.env(k, v);
        }
    }
    wrapped
}

/// How to start `epp-host run`.
pub struct HostBuilder {
    wasm: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    allow_unsigned: bool,
    cache_dir: Option<PathBuf>,
    trust_file: PathBuf,
    hosts: Option<String>,
}

impl HostBuilder {
    /// The probe, `--allow-unsigned`, no trusted keys, the shared compile cache.
    pub fn new() -> HostBuilder {
        HostBuilder {
            wasm: probe_wasm().to_path_buf(),
            args: Vec::new(),
            env: Vec::new(),
            allow_unsigned: true,
            cache_dir: Some(shared_cache_dir().to_path_buf()),
            trust_file: PathBuf::from("/dev/null"),
            hosts: None,
        }
    }

    /// Runs the host in namespaces of its own where names resolve from `hosts`
    /// (an /etc/hosts text) and no network exists beyond loopback; see
    /// [`can_unshare`].
    pub fn private_hosts(mut self, hosts: &str) -> Self {
        self.hosts = Some(hosts.to_string());
        self
    }

    pub fn wasm(mut self, wasm: &Path) -> Self {
        self.wasm = wasm.to_path_buf();
        self
    }

    pub fn signed_only(mut self) -> Self {
        self.allow_unsigned = false;
        self
    }

    pub fn cache_dir(mut self, dir: &Path) -> Self {
        self.cache_dir = Some(dir.to_path_buf());
        self
    }

    /// Neither `--cache-dir` nor `--no-cache` (pass one yourself).
    pub fn cache_dir_unset(mut self) -> Self {
        self.cache_dir = None;
        self
    }

    /// `--trust-file` (default `/dev/null`: no trusted keys).
    pub fn trust_file(mut self, file: &Path) -> Self {
        self.trust_file = file.to_path_buf();
        self
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The provider's server is `origin`, and the host holds [`SECRET_KEY`].
    pub fn origin(self, origin: &Echo) -> Self {
        self.env(BASE_URL_ENV, origin.url(""))
            .env(TOKEN_ENV, SECRET_KEY)
    }

    fn command(&self) -> Command {
        let mut cmd = host_command();
        cmd.arg("run").arg(&self.wasm);
        cmd.arg("--trust-file").arg(&self.trust_file);
        if self.allow_unsigned {
            cmd.arg("--allow-unsigned");
        }
        if let Some(dir) = &self.cache_dir {
            cmd.arg("--cache-dir").arg(dir);
        }
        cmd.args(&self.args);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Starts the host inside the lab with piped stdio, driven by `epp-client`
    /// (which keeps a transcript of stdout); stderr is collected as the log.
    pub fn spawn(self) -> Host {
        let mut cmd = self.command();
        let mut keep = None;
        if let Some(hosts) = &self.hosts {
            let dir = tempfile::tempdir().expect("temp dir");
            let file = dir.path().join("hosts");
            std::fs::write(&file, hosts).expect("writing the hosts file");
            cmd = with_private_hosts(cmd, &file);
            keep = Some(dir);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = in_lab(move || cmd.spawn()).expect("spawning epp-host");
        let client = Client::new(
            child.stdin.take().expect("stdin"),
            child.stdout.take().expect("stdout"),
            Options {
                transcript: true,
                on_line: None,
            },
        );
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    let mut log = log.lock().expect("log");
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        Host {
            _hosts: keep,
            child,
            client,
            log,
        }
    }
}

impl Default for HostBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// A running `epp-host run`, driven over its stdio by an [`epp_client::Client`].
/// Messages are JSON values as they arrived; waiting for one claims it, and the
/// rest stay queued for later waits.
pub struct Host {
    /// The private hosts file, kept while the host runs.
    _hosts: Option<tempfile::TempDir>,
    child: Child,
    client: Client,
    /// Everything written to stderr.
    log: Arc<Mutex<String>>,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Host {
    pub fn start() -> Host {
        HostBuilder::new().spawn()
    }

    /// The client that drives this host.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Writes raw bytes to the host's stdin.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.client.send_raw(bytes);
    }

    /// Writes one message as a line.
    pub fn send(&mut self, msg: &Value) {
        self.client.send(msg);
    }

    /// Sends a request with a fresh numeric id; returns the id.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.client.request(method, params)
    }

    /// Sends a request with the given id.
    pub fn request_with_id(&mut self, id: Value, method: &str, params: Value) {
        self.client.request_with_id(id, method, params);
    }

    /// A request and its response.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.response(&id)
    }

    /// Runs a probe instruction (`sandbox.get_info` with it as the sandbox id).
    pub fn probe(&mut self, instruction: &str) -> Value {
        self.call("sandbox.get_info", json!({"sandbox_id": instruction}))
    }

    /// The probe's memo value under `key` (`memo-get KEY`), if it holds one.
    pub fn memo(&mut self, key: &str) -> Option<String> {
        meta(&self.probe(&format!("memo-get {key}")), "value").map(str::to_string)
    }

    /// Waits until the probe's memo holds `key`: a mark the probe puts when
    /// something happened (`started:KEY` once a call has begun), asked for
    /// every 10 ms. Fails the test after [`PATIENCE`].
    pub fn wait_memo(&mut self, key: &str) {
        let deadline = Instant::now() + PATIENCE;
        while self.memo(key).is_none() {
            assert!(
                Instant::now() < deadline,
                "the probe put no {key:?} in the memo within {PATIENCE:?}\nstderr:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Claims the first message that satisfies `pred`, within `timeout`;
    /// others stay queued. Fails the test if a line that is not JSON comes
    /// first.
    pub fn wait_for_within(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let msg = self
            .client
            .wait_for(timeout, |m| m.is_garbage() || pred(&m.raw))
            .ok()?;
        assert!(
            !msg.is_garbage(),
            "epp-host wrote a non-JSON line to stdout: {}",
            msg.raw
        );
        Some(msg.raw)
    }

    /// Like [`Host::wait_for_within`] with [`PATIENCE`], failing the test on timeout.
    pub fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        match self.wait_for_within(PATIENCE, pred) {
            Some(msg) => msg,
            None => self.gave_up(what),
        }
    }

    fn gave_up(&self, what: &str) -> ! {
        panic!(
            "no {what} from epp-host within {PATIENCE:?}\nstill pending: {:?}\nstderr:\n{}",
            self.pending(),
            self.log()
        )
    }

    /// Every unclaimed message, in arrival order, up to and including the first
    /// that satisfies `pred`.
    pub fn collect_until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        match self.client.take_until(PATIENCE, |m| pred(&m.raw)) {
            Ok(messages) => messages.into_iter().map(|m| m.raw).collect(),
            Err(_) => self.gave_up(what),
        }
    }

    /// The response to `id`.
    pub fn response(&mut self, id: &Value) -> Value {
        let want = id.clone();
        self.wait_for(&format!("response to {id}"), move |m| {
            is_response(m) && m["id"] == want
        })
    }

    /// A notification `method` about request `id`.
    pub fn notification(&mut self, method: &str, id: &Value) -> Value {
        let want = id.clone();
        self.wait_for(&format!("{method} for {id}"), move |m| {
            m["method"] == method && m["params"]["request_id"] == want
        })
    }

    /// Closes stdin, collects everything the host still writes, and waits for it
    /// to exit.
    pub fn finish(mut self) -> (ExitStatus, Vec<Value>) {
        self.client.close_input();
        let rest = match self.client.drain(PATIENCE) {
            Ok(rest) => rest.into_iter().map(|m| m.raw).collect(),
            Err(_) => panic!(
                "epp-host did not close stdout within {PATIENCE:?} after end of input\nstderr:\n{}",
                self.log()
            ),
        };
        let status = self.wait_exit(PATIENCE);
        (status, rest)
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "epp-host did not exit within {timeout:?}\nstderr:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id (of `unshare` when the host runs with private hosts).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Everything the host wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().expect("log").clone()
    }

    /// Everything the host wrote to stdout so far.
    pub fn transcript(&self) -> String {
        self.client.transcript()
    }

    /// Messages received but not claimed yet, in arrival order.
    pub fn pending(&self) -> Vec<Value> {
        self.client.pending().into_iter().map(|m| m.raw).collect()
    }

    /// Claims the messages received but not claimed.
    pub fn take_pending(&mut self) -> Vec<Value> {
        self.client
            .take_pending()
            .into_iter()
            .map(|m| m.raw)
            .collect()
    }

    /// Waits until stderr satisfies `done` (stderr is read by another thread, so
    /// a line written before an answer may show up just after it). Returns the
    /// log as it is then, or at the [`PATIENCE`] deadline.
    pub fn wait_log_until(&self, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let log = self.log();
            if done(&log) || Instant::now() >= deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until stderr contains `needle`.
    pub fn wait_log(&self, needle: &str) -> String {
        let log = self.wait_log_until(|log| log.contains(needle));
        assert!(
            log.contains(needle),
            "epp-host never logged {needle:?}; stderr:\n{log}"
        );
        log
    }
}

// ------------------------------------------------------------------ the host's log

/// One line of the host's log (`tracing`'s text format on stderr):
/// `2025-01-01T00:00:00.000000Z  WARN request{id=1 method=m}: epp_host::net::outbound: MESSAGE field=value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLine<'a> {
    /// `ERROR`, `WARN`, `INFO`, `DEBUG` or `TRACE`.
    pub level: &'a str,
    /// The spans the event happened in (`request{id=1 method=m}:`), or "".
    pub spans: &'a str,
    /// The event's target, e.g. `epp_host::net::outbound`.
    pub target: &'a str,
    /// The message, then the event's fields.
    pub text: &'a str,
}

/// The host's events in `log`, in order; lines that are not events (a
/// multi-line field such as a trap's backtrace) are left out.
pub fn log_lines(log: &str) -> Vec<LogLine<'_>> {
    log.lines().filter_map(log_line).collect()
}

fn log_line(line: &str) -> Option<LogLine<'_>> {
    let mut words = line.splitn(2, ' ');
    let _time = words.next().filter(|t| t.ends_with('Z'))?;
    let rest = words.next()?.trim_start();
    let (level, rest) = rest.split_once(' ')?;
    if !matches!(level, "ERROR" | "WARN" | "INFO" | "DEBUG" | "TRACE") {
        return None;
    }
    // Spans (`name{fields}:`) come before the target; the target is the
    // first word that starts with the crate's name and ends with `:`.
    let mut at = 0;
    while let Some(found) = rest[at..].find("epp_host") {
        let start = at + found;
        let starts_word = start == 0 || rest.as_bytes()[start - 1] == b' ';
        let end = rest[start..].find(' ').map_or(rest.len(), |e| start + e);
        if starts_word && rest[start..end].ends_with(':') {
            return Some(LogLine {
                level,
                spans: rest[..start].trim_end(),
                target: &rest[start..end - 1],
                text: rest.get(end + 1..).unwrap_or(""),
            });
        }
        at = start + 1;
    }
    None
}

/// The events at `level` whose message starts with `message`.
pub fn log_events<'a>(log: &'a str, level: &str, message: &str) -> Vec<LogLine<'a>> {
    log_lines(log)
        .into_iter()
        .filter(|l| l.level == level && l.text.starts_with(message))
        .collect()
}

// ------------------------------------------------------------------ answers

pub fn is_response(msg: &Value) -> bool {
    msg.get("id").is_some() && (msg.get("result").is_some() || msg.get("error").is_some())
}

/// The result of a successful response (fails the test on an error).
pub fn result(resp: &Value) -> &Value {
    assert!(
        resp.get("error").is_none(),
        "expected a result, got an error: {resp}"
    );
    &resp["result"]
}

/// `(code, epp_code, message)` of an error response (fails the test on a result).
pub fn error(resp: &Value) -> (i64, String, String) {
    let err = resp
        .get("error")
        .unwrap_or_else(|| panic!("expected an error, got: {resp}"));
    (
        err["code"].as_i64().expect("error code"),
        err["data"]["epp_code"].as_str().unwrap_or("").to_string(),
        err["message"].as_str().unwrap_or("").to_string(),
    )
}

/// A probe answer's metadata value.
pub fn meta<'a>(resp: &'a Value, key: &str) -> Option<&'a str> {
    result(resp)["metadata"][key].as_str()
}
