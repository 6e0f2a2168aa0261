//! `epp-host call`: one request, as a client of `epp-host run`. It starts this
//! same binary as `run` with the same component, flags and environment and
//! drives it with `epp-client`, so the request takes the server's only path
//! (deadline, cancel, stopping what an abandoned request started).
//! Notifications are printed as they arrive; the result as pretty JSON on
//! stdout (exit 0), an error answer on stderr (exit 1). Ctrl-C sends
//! `epp.cancel` and waits for the answer; a second Ctrl-C stops waiting.

use crate::cli::HostArgs;
use anyhow::{Context, Result, bail};
use epp_client::{Client, Options, WaitError};
use epp_protocol::transport;
use serde_json::{Map, Value, json};
use std::io::Write;
use std::path::Path;
use std::process::{Child, ExitCode, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How often the wait for the answer looks at Ctrl-C.
const TICK: Duration = Duration::from_millis(50);
/// How long the answer to a cancelled request may take (stopping a command in
/// the sandbox may take ten seconds).
const CANCEL_WAIT: Duration = Duration::from_secs(15);
/// How long `run` may take to exit once its input is closed.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// `params` as the request's params object.
pub fn params(text: Option<&str>) -> Result<Map<String, Value>> {
    match text {
        None => Ok(Map::new()),
        Some(text) => match serde_json::from_str(text) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => bail!("params must be a JSON object, e.g. '{{\"sandbox_id\":\"...\"}}'"),
            Err(e) => bail!("params are not valid JSON: {e}"),
        },
    }
}

/// `--option KEY=VALUE` flags as an `epp.hello` `provider_options` object.
pub fn provider_options(flags: &[String]) -> Result<Map<String, Value>> {
    let mut options = Map::new();
    for flag in flags {
        let Some((key, value)) = flag.split_once('=').filter(|(k, _)| !k.trim().is_empty()) else {
            bail!(
                "--option {flag:?} is not KEY=VALUE, e.g. --option sandbox_base_url=http://127.0.0.1:8080"
            );
        };
        if options.insert(key.to_string(), value.into()).is_some() {
            bail!("--option {key} is given twice");
        }
    }
    Ok(options)
}

/// Sends `method` with `params` to `exe run wasm HOST-FLAGS` and prints what
/// comes back. With `options`, an `epp.hello` carrying them goes first; its
/// error is the answer.
pub fn call(
    exe: &Path,
    wasm: &Path,
    method: &str,
    params: Map<String, Value>,
    options: Map<String, Value>,
    host: &HostArgs,
) -> Result<ExitCode> {
    let interrupts = ctrl_c()?;
    let mut child = spawn_run(exe, wasm, host)?;
    let client = Client::new(
        child.stdin.take().context("run's stdin")?,
        child.stdout.take().context("run's stdout")?,
        Options::default(),
    );
    if !options.is_empty() {
        let hello = client.request(transport::HELLO, json!({"provider_options": options}));
        let reply = loop {
            match client.wait_for(TICK, |_| true) {
                Ok(msg) if msg.is_response() && msg.raw["id"] == hello => break Some(msg.reply()),
                Ok(_) | Err(WaitError::Timeout) => {}
                Err(WaitError::Closed) => break None,
            }
        };
        if let Some(Err(e)) = reply {
            client.close_input();
            wait_exit(&mut child);
            writeln!(
                std::io::stderr().lock(),
                "error {} ({}): {}",
                e.epp,
                e.code,
                e.message
            )?;
            return Ok(ExitCode::from(1));
        }
    }
    let id = client.request(method, Value::Object(params));
    let mut cancelled: Option<Instant> = None;
    let reply = loop {
        match client.wait_for(TICK, |_| true) {
            Ok(msg) if msg.is_response() && msg.raw["id"] == id => break Some(msg.reply()),
            Ok(msg) if msg.raw.get("method").is_some() => print_notification(&msg.raw),
            // The answer to epp.cancel, if the host sends one: nothing to show.
            Ok(_) | Err(WaitError::Timeout) => {}
            Err(WaitError::Closed) => break None,
        }
        match (interrupts.load(Ordering::SeqCst), cancelled) {
            (0, _) => {}
            (1, None) => {
                client.notify(transport::CANCEL, json!({"id": id}));
                cancelled = Some(Instant::now());
            }
            (1, Some(at)) if at.elapsed() < CANCEL_WAIT => {}
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("no answer to {method} after epp.cancel; stopped `epp-host run`");
            }
        }
    };
    client.close_input();
    let status = wait_exit(&mut child);
    let Some(reply) = reply else {
        return Ok(match status.code() {
            // `run` said why on stderr (which is ours).
            Some(code) if code != 0 => ExitCode::from(u8::try_from(code).unwrap_or(2)),
            _ => bail!("`epp-host run` ended without answering ({status})"),
        });
    };
    match reply {
        Ok(value) => {
            println!("{}", serde_json::to_string_pretty(&value)?);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let mut err = std::io::stderr().lock();
            writeln!(err, "error {} ({}): {}", e.epp, e.code, e.message)?;
            if e.data.as_object().is_some_and(|data| data.len() > 1) {
                writeln!(err, "{}", e.data)?;
            }
            Ok(ExitCode::from(1))
        }
    }
}

/// `exe run wasm HOST-FLAGS` with piped stdin and stdout, stderr shared, in a
/// process group of its own: Ctrl-C at the terminal reaches only `call`, which
/// turns it into `epp.cancel`.
fn spawn_run(exe: &Path, wasm: &Path, host: &HostArgs) -> Result<Child> {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(exe)
        .arg("run")
        .arg(wasm)
        .args(host.to_args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {} run", exe.display()))
}

/// Counts Ctrl-C presses from now on.
fn ctrl_c() -> Result<Arc<AtomicUsize>> {
    let count = Arc::new(AtomicUsize::new(0));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("starting the signal handler")?;
    // Registered here, before the request goes out, so no Ctrl-C is lost.
    let mut signals = rt
        .block_on(async {
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        })
        .context("handling Ctrl-C")?;
    let counter = count.clone();
    std::thread::spawn(move || {
        rt.block_on(async {
            while signals.recv().await.is_some() {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        })
    });
    Ok(count)
}

/// Waits a little for `run` to exit after the end of its input, then stops it.
fn wait_exit(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + EXIT_WAIT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                return child.wait().unwrap_or_else(|_| ExitStatus::default());
            }
        }
    }
}

/// Output text (a notification of a `text` event: `{stream, data}`) goes to
/// stdout or stderr as it is, bytes (terminal output) raw to stdout, any
/// other notification as a JSON line on stderr; which is which, the contract
/// says.
fn print_notification(msg: &Value) {
    use crate::contract::table::{carries_bytes, carries_text};
    use base64::Engine as _;
    let params = &msg["params"];
    let data = params.get("data").and_then(Value::as_str).unwrap_or("");
    let method = msg["method"].as_str().unwrap_or("");
    let stream = params.get("stream").and_then(Value::as_str);
    match (method, stream) {
        (m, Some("stdout")) if carries_text(m) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(data.as_bytes()).and_then(|_| out.flush());
        }
        (m, _) if carries_text(m) => {
            let _ = std::io::stderr().write_all(data.as_bytes());
        }
        (m, _) if carries_bytes(m) => {
            if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&bytes).and_then(|_| out.flush());
            }
        }
        _ => {
            let line = json!({"method": msg["method"], "params": params});
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }
}
