//! An `epp-host run` process driven over stdio through `epp-client`.

use crate::{Testbed, artifact, docker_testbed, target_dir, testbed};
use epp_client::{Client, Options};
pub use epp_client::{Reply, RpcError};
use serde_json::{Value, json};
use std::io::{BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the provider reaches sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Straight to each sandbox's endpoint.
    Direct,
    /// Through the server's `/sandboxes/{id}/proxy/{port}` route.
    Proxy,
}

/// Builds an `epp-host run` command line and environment.
pub struct HostBuilder {
    env: Vec<(String, String)>,
    args: Vec<String>,
}

impl HostBuilder {
    /// A host for the shared testbed in `mode`, with its API key.
    pub fn new(mode: Mode) -> HostBuilder {
        Self::for_testbed(testbed(), mode)
    }

    /// A host for the shared Docker-tier testbed (`docker_testbed`) in `mode`, with
    /// its API key; otherwise as `new`.
    pub fn docker(mode: Mode) -> HostBuilder {
        Self::for_testbed(docker_testbed(), mode)
    }

    /// A host for testbed `tb` in `mode`, with its API key; otherwise as `new`.
    pub fn for_testbed(tb: &Testbed, mode: Mode) -> HostBuilder {
        let mut env = vec![
            ("ABX_OPENSANDBOX_BASE_URL".to_string(), tb.url.clone()),
            (
                "ABX_OPENSANDBOX_USE_SERVER_PROXY".to_string(),
                (mode == Mode::Proxy).to_string(),
            ),
            // Sandboxes start in a second or two on the testbed.
            (
                "ABX_OPENSANDBOX_READY_TIMEOUT".to_string(),
                "30".to_string(),
            ),
        ];
        // The host's log level for a run that looks into a failure (README, Development).
        if let Ok(level) = std::env::var("EPP_E2E_LOG") {
            env.push(("EPP_LOG".to_string(), level));
        }
        if !tb.api_key.is_empty() {
            env.push(("ABX_OPENSANDBOX_API_KEY".to_string(), tb.api_key.clone()));
        }
        // Every host also holds a registry password (sent as image.auth, which the
        // testbed accepts and ignores), so the secrets sweep covers both secrets.
        env.push((
            "ABX_OPENSANDBOX_REGISTRY_USERNAME".to_string(),
            "e2e-registry-user".to_string(),
        ));
        env.push((
            "ABX_OPENSANDBOX_REGISTRY_PASSWORD".to_string(),
            crate::secrets::registry_password().to_string(),
        ));
        HostBuilder {
            env,
            args: Vec::new(),
        }
    }

    /// Sets (or replaces) an environment variable of the host.
    pub fn env(mut self, key: &str, value: &str) -> HostBuilder {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Reaches the lifecycle server through a fault proxy.
    pub fn via(self, proxy: &crate::FaultProxy) -> HostBuilder {
        self.env("ABX_OPENSANDBOX_BASE_URL", &proxy.url())
    }

    pub fn without_env(mut self, key: &str) -> HostBuilder {
        self.env.retain(|(k, _)| k != key);
        self
    }

    pub fn arg(mut self, arg: &str) -> HostBuilder {
        self.args.push(arg.to_string());
        self
    }

    pub fn spawn(self) -> Host {
        let bin = artifact("EPP_HOST_BIN", target_dir().join("debug/epp-host"));
        let wasm = artifact("EPP_GUEST_WASM", target_dir().join("epp/opensandbox.wasm"));
        let key = artifact("EPP_TRUSTED_KEY", target_dir().join("epp/dev.pub"));
        let cache = target_dir().join("epp/e2e-cache");
        let mut cmd = Command::new(&bin);
        cmd.arg("run")
            .arg(&wasm)
            .arg("--trusted-key")
            .arg(&key)
            .arg("--cache-dir")
            .arg(&cache)
            .args(&self.args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let leaks = Arc::new(Mutex::new(Vec::new()));
        let found = leaks.clone();
        let client = Client::new(
            stdin,
            stdout,
            Options {
                transcript: false,
                on_line: Some(Box::new(move |line: &str| {
                    if crate::secrets::leak(line).is_some() && leaks_beyond_testbed(line) {
                        found.lock().unwrap().push(crate::secrets::redacted(line));
                    }
                })),
            },
        );
        let log = Arc::new(Mutex::new(String::new()));
        let log_writer = log.clone();
        let stderr_thread = std::thread::spawn(move || {
            let mut buf = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut buf).map(|_| ());
            log_writer.lock().unwrap().push_str(&buf);
        });
        Host {
            stderr_thread: Some(stderr_thread),
            child,
            client,
            leaks,
            stderr: log,
            created: Mutex::new(Vec::new()),
        }
    }
}

/// A value for messages: long texts cut short.
fn short(v: &Value) -> String {
    let text = v.to_string();
    if text.len() <= 400 {
        return text;
    }
    let mut cut = 400;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} bytes)", &text[..cut], text.len())
}

/// Whether a line that contains a secret still does once the testbed's own
/// processes are taken out of a `process.list` answer: the testbed has no
/// isolation, so a sandbox sees every process of the machine, and the
/// testbed's server carries the API key on its command line. That is the
/// testbed showing its key, not the provider.
fn leaks_beyond_testbed(line: &str) -> bool {
    let Ok(mut value) = serde_json::from_str::<Value>(line) else {
        return true;
    };
    if let Some(list) = value["result"]["processes"].as_array_mut() {
        list.retain(|p| {
            let cmd = p["cmdline"].as_str().unwrap_or("");
            !(cmd.contains("tests/testbed/testbed start")
                || cmd.contains("server/run_server.py")
                || cmd.contains("docker/run_server.py"))
        });
    }
    crate::secrets::leak(&value.to_string()).is_some()
}

/// A running `epp-host run`.
pub struct Host {
    stderr_thread: Option<std::thread::JoinHandle<()>>,
    child: Child,
    client: Client,
    /// Stdout lines that contained a secret (redacted).
    leaks: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    created: Mutex<Vec<String>>,
}

impl Host {
    /// A host for the shared testbed with default settings.
    pub fn start(mode: Mode) -> Host {
        HostBuilder::new(mode).spawn()
    }

    /// A host for the shared Docker-tier testbed with default settings.
    pub fn start_docker(mode: Mode) -> Host {
        HostBuilder::docker(mode).spawn()
    }

    /// Writes raw bytes to the host's stdin.
    pub fn raw(&self, bytes: &[u8]) {
        self.client.send_raw(bytes);
    }

    /// Sends a request and returns its id.
    pub fn send(&self, method: &str, params: Value) -> Value {
        self.client.request(method, params)
    }

    /// Sends a request under an id already in flight, expecting its refusal
    /// (a second answer to that id).
    pub fn send_duplicate(&self, id: Value, method: &str, params: Value) {
        self.client.allow_second_answer(&id);
        self.client.request_with_id(id, method, params);
    }

    /// Sends a notification (no id, no answer).
    pub fn notify(&self, method: &str, params: Value) {
        self.client.notify(method, params);
    }

    pub fn send_with_id(&self, id: Value, method: &str, params: Value) {
        self.client.request_with_id(id, method, params);
    }

    /// Waits for the answer to `id`.
    pub fn wait(&self, id: &Value, timeout: Duration) -> Reply {
        self.wait_at(id, timeout).0
    }

    /// Waits for the answer to `id`; also returns when it arrived.
    pub fn wait_at(&self, id: &Value, timeout: Duration) -> (Reply, Instant) {
        match self.client.response(id, timeout) {
            Ok(m) => (m.reply(), m.at),
            Err(e) => panic!(
                "no answer to request {id} within {timeout:?} ({e}); host log:\n{}",
                self.stderr()
            ),
        }
    }

    /// Request and answer (2 minutes at most).
    pub fn call(&self, method: &str, params: Value) -> Reply {
        let id = self.send(method, params);
        self.wait(&id, Duration::from_secs(120))
    }

    /// Request that must succeed.
    pub fn ok(&self, method: &str, params: Value) -> Value {
        match self.call(method, params.clone()) {
            Ok(v) => v,
            Err(e) => panic!("{method} {} failed: {e:?}", short(&params)),
        }
    }

    /// Request that must fail with `epp_code`; returns the error.
    pub fn fails(&self, method: &str, params: Value, epp_code: &str) -> Box<RpcError> {
        match self.call(method, params.clone()) {
            Ok(v) => panic!(
                "{method} {} should fail with {epp_code} but returned {}",
                short(&params),
                short(&v)
            ),
            Err(e) => {
                assert_eq!(e.epp, epp_code, "{method} {}: {e:?}", short(&params));
                assert!(!e.message.is_empty());
                e
            }
        }
    }

    /// Notifications received so far, with their arrival times.
    pub fn notes(&self) -> Vec<(Instant, Value)> {
        self.client
            .notifications()
            .into_iter()
            .map(|m| (m.at, m.raw))
            .collect()
    }

    /// Notifications of `method` tied to request `id`.
    pub fn notes_for(&self, method: &str, id: &Value) -> Vec<(Instant, Value)> {
        self.notes()
            .into_iter()
            .filter(|(_, n)| n["method"] == method && &n["params"]["request_id"] == id)
            .collect()
    }

    /// Sends a binary frame: `params` with `bytes` set, then `frame` raw.
    pub fn notify_framed(&self, method: &str, params: Value, frame: &[u8]) {
        self.client.notify_framed(method, params, frame);
    }

    /// Notifications of `method` tied to request `id` with the raw bytes of
    /// their binary frames (empty for a plain line).
    pub fn frames_for(&self, method: &str, id: &Value) -> Vec<(Value, Vec<u8>)> {
        self.client
            .notifications()
            .into_iter()
            .filter(|m| m.raw["method"] == method && &m.raw["params"]["request_id"] == id)
            .map(|m| {
                let frame = m.frame.map(|f| f.to_vec()).unwrap_or_default();
                (m.raw, frame)
            })
            .collect()
    }

    /// Waits for a notification matching `pred`.
    pub fn wait_note(&self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        self.client
            .wait_notification(timeout, |m| pred(&m.raw))
            .map(|m| m.raw)
    }

    /// The first `method` notification of request `req` (e.g. its first
    /// `commands.output`), waited for up to `timeout`.
    pub fn first_note(&self, method: &str, req: &Value, timeout: Duration) -> Option<Value> {
        self.wait_note(timeout, |n| {
            n["method"] == method && n["params"]["request_id"] == *req
        })
    }

    /// Closes stdin (end of input) and waits for the process to exit.
    pub fn finish(&mut self, timeout: Duration) -> ExitStatus {
        self.client.close_input();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "epp-host did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the host wrote to stderr so far (complete only after it exited).
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The `epp-host` process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Creates a sandbox (killed when this host is dropped); returns its info.
    pub fn create_info(&self, params: Value) -> Value {
        let info = self.ok("sandbox.create", params);
        let id = info["sandbox_id"].as_str().expect("sandbox_id").to_string();
        self.created.lock().unwrap().push(id);
        info
    }

    /// Creates a sandbox with a unique metadata tag; returns its id.
    pub fn create_sandbox(&self) -> String {
        let info = self.create_info(json!({"metadata": {"e2e": crate::unique("sb")}}));
        info["sandbox_id"].as_str().unwrap().to_string()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Sandboxes made through this host go with it, however the test ended.
        let created = std::mem::take(&mut *self.created.lock().unwrap());
        if self.client.input_open() && self.child.try_wait().ok().flatten().is_none() {
            let ids: Vec<Value> = created
                .iter()
                .map(|id| self.send("sandbox.kill", json!({"sandbox_id": id})))
                .collect();
            for id in ids {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.wait(&id, Duration::from_secs(15))
                }));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The secrets sweep: stdout was checked line by line; now all of stderr.
        if let Some(t) = self.stderr_thread.take() {
            let _ = t.join();
        }
        let log = self.stderr();
        // A failed test shows what the host logged (redacted like any output).
        if std::thread::panicking() && !log.is_empty() {
            eprintln!("[epp-host stderr]\n{}", crate::secrets::redacted(&log));
        }
        let (lines, bytes) = self.client.counts();
        let mut leaks = self.leaks.lock().unwrap().clone();
        if crate::secrets::leak(&log).is_some() {
            leaks.push(format!("stderr:\n{}", crate::secrets::redacted(&log)));
        }
        crate::secrets::tally(lines, bytes, log.len() as u64, leaks.len());
        let violations = self.client.violations();
        if !violations.is_empty() && !std::thread::panicking() {
            panic!("epp-host broke the protocol:\n{}", violations.join("\n"));
        }
        if !leaks.is_empty() && !std::thread::panicking() {
            panic!(
                "a secret (API key or registry password) appeared in epp-host's output:\n{}",
                leaks.join("\n")
            );
        }
    }
}
