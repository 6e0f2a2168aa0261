//! Where answers and notifications go: whole lines on stdout (one writer task,
//! so lines never interleave), or a terminal printer for `epp-host call`.

use super::errors::RpcError;
use serde_json::{Value, json};
use std::io::Write;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Lines queued for stdout before senders wait (back-pressure for big streams).
const QUEUE: usize = 1024;

#[derive(Clone)]
pub enum Outbox {
    Wire(mpsc::Sender<String>),
    Terminal(Arc<Terminal>),
}

/// What `epp-host call` keeps: the answer, and streaming output printed as it comes.
#[derive(Default)]
pub struct Terminal {
    pub answer: Mutex<Option<Result<Value, RpcError>>>,
}

impl Outbox {
    /// Starts the writer task; it ends when every `Outbox` clone is dropped.
    pub fn wire<W: AsyncWrite + Unpin + Send + 'static>(
        mut out: W,
    ) -> (Outbox, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<String>(QUEUE);
        let task = tokio::spawn(async move {
            let mut buf = String::new();
            while let Some(line) = rx.recv().await {
                buf.push_str(&line);
                while buf.len() < (1 << 20) {
                    match rx.try_recv() {
                        Ok(more) => buf.push_str(&more),
                        Err(_) => break,
                    }
                }
                if out.write_all(buf.as_bytes()).await.is_err() || out.flush().await.is_err() {
                    // Nobody reads our answers any more; drain so senders don't block.
                    while rx.recv().await.is_some() {}
                    return;
                }
                buf.clear();
            }
        });
        (Outbox::Wire(tx), task)
    }

    async fn send(&self, message: Value) {
        match self {
            Outbox::Wire(tx) => {
                let mut line = message.to_string();
                line.push('\n');
                let _ = tx.send(line).await;
            }
            Outbox::Terminal(_) => unreachable!("terminal messages are handled by the callers"),
        }
    }

    pub async fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        if let Outbox::Terminal(t) = self {
            *t.answer.lock().expect("lock") = Some(result);
            return;
        }
        let message = match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()}),
        };
        self.send(message).await;
    }

    pub async fn notify(&self, method: &str, params: Value) {
        if let Outbox::Terminal(_) = self {
            print_notification(method, &params);
            return;
        }
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }
}

/// `epp-host call`: command output goes to stdout/stderr as text, terminal
/// output as raw bytes, anything else as a JSON line on stderr.
fn print_notification(method: &str, params: &Value) {
    use base64::Engine as _;
    let data = params.get("data").and_then(Value::as_str).unwrap_or("");
    match (method, params.get("stream").and_then(Value::as_str)) {
        ("commands.output", Some("stdout")) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(data.as_bytes()).and_then(|_| out.flush());
        }
        ("commands.output", _) => {
            let _ = std::io::stderr().write_all(data.as_bytes());
        }
        ("pty.output", _) => {
            if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&bytes).and_then(|_| out.flush());
            }
        }
        _ => eprintln!("{}", json!({"method": method, "params": params})),
    }
}
