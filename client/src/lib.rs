//! `epp-client`: a typed client for EPP/1 over stdio (JSON-RPC 2.0, one JSON
//! object per line), as an agent framework speaks it to `epp-host run`.
//!
//! It serves every driver in this workspace: the host's integration tests, the
//! end-to-end suite and `epp-host call`. It is blocking and thread-safe: a
//! reader thread files each line the host writes, and any thread may send
//! requests or wait for answers and notifications at the same time.
//!
//! Messages are kept in arrival order until a caller claims them
//! ([`Client::wait_for`], [`Client::response`]); notifications are also kept in
//! a history that [`Client::notifications`] reads without claiming.

use serde_json::{Value, json};
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub use epp_protocol::EppCode;

/// A JSON-RPC error answer, with the EPP code from `data.epp_code`.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// JSON-RPC `code` (`-32000` for EPP errors, `-32602` for bad params, ...).
    pub code: i64,
    pub message: String,
    /// `data.epp_code`, e.g. `E4004`; empty when the host sent none.
    pub epp: String,
    /// The whole `data` object (`http_status`, `upstream_code`, ...).
    pub data: Value,
}

impl RpcError {
    /// `data.epp_code` as a code; none when it is absent or unknown.
    pub fn code(&self) -> Option<EppCode> {
        EppCode::parse(&self.epp)
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.epp, self.code, self.message)
    }
}

impl std::error::Error for RpcError {}

/// What a request came back with.
pub type Reply = Result<Value, Box<RpcError>>;

/// One line the host wrote, as it arrived.
#[derive(Debug, Clone)]
pub struct Message {
    /// The parsed line; a line that is not JSON is `{"__not_json__": line}`.
    pub raw: Value,
    pub at: Instant,
    /// The raw bytes of a binary frame: a notification whose params hold
    /// `bytes: N` is followed by N bytes (docs/epp-1.md, Binary frames).
    pub frame: Option<Arc<Vec<u8>>>,
}

impl Message {
    /// A response (it has an `id` and no `method`).
    pub fn is_response(&self) -> bool {
        self.raw.get("method").is_none() && self.raw.get("id").is_some()
    }

    /// A notification named `method`.
    pub fn is_notification(&self, method: &str) -> bool {
        self.raw["method"] == method
    }

    /// Whether the line was not JSON at all.
    pub fn is_garbage(&self) -> bool {
        self.raw.get("__not_json__").is_some()
    }

    /// The request a notification belongs to (`params.request_id`).
    pub fn request_id(&self) -> &Value {
        &self.raw["params"]["request_id"]
    }

    /// A response as its result or its error.
    pub fn reply(&self) -> Reply {
        match self.raw.get("error") {
            Some(e) => Err(Box::new(RpcError {
                code: e["code"].as_i64().unwrap_or(0),
                message: e["message"].as_str().unwrap_or("").to_string(),
                epp: e["data"]["epp_code"].as_str().unwrap_or("").to_string(),
                data: e["data"].clone(),
            })),
            None => Ok(self.raw["result"].clone()),
        }
    }
}

/// Why a wait ended without the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitError {
    /// Nothing matching arrived in time.
    Timeout,
    /// The host closed its output first.
    Closed,
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WaitError::Timeout => "nothing arrived in time",
            WaitError::Closed => "epp-host closed its output",
        })
    }
}

impl std::error::Error for WaitError {}

/// Called with each line before it is parsed (e.g. to scan for secrets).
pub type LineHook = Box<dyn FnMut(&str) + Send>;

/// What to keep besides the messages.
#[derive(Default)]
pub struct Options {
    /// Keep every line in [`Client::transcript`] (tests of exact bytes).
    pub transcript: bool,
    pub on_line: Option<LineHook>,
}

#[derive(Default)]
struct State {
    /// Arrived and not yet claimed, in arrival order.
    queue: Vec<Message>,
    /// Every notification so far.
    notes: Vec<Message>,
    closed: bool,
    lines: u64,
    bytes: u64,
    transcript: String,
    /// Ids answered so far, to catch a second answer.
    answered: std::collections::HashSet<String>,
    /// Second answers a test expects (a duplicate id refused while the first
    /// request with it is in flight), by id.
    repeats: std::collections::HashMap<String, usize>,
    violations: Vec<String>,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

/// A connection to an EPP/1 host.
pub struct Client {
    input: Mutex<Option<Box<dyn Write + Send>>>,
    shared: Shared,
    next_id: AtomicU64,
}

impl Client {
    /// Talks to a host that reads `input` and writes `output`.
    pub fn new(
        input: impl Write + Send + 'static,
        output: impl Read + Send + 'static,
        options: Options,
    ) -> Client {
        let shared: Shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let reader = shared.clone();
        std::thread::spawn(move || read_lines(output, reader, options));
        Client {
            input: Mutex::new(Some(Box::new(input))),
            shared,
            next_id: AtomicU64::new(1),
        }
    }

    /// Writes raw bytes (tests of malformed input).
    ///
    /// # Panics
    /// When input was closed or the host stopped reading.
    pub fn send_raw(&self, bytes: &[u8]) {
        let mut input = self.input.lock().expect("input lock");
        let input = input.as_mut().expect("input already closed");
        input
            .write_all(bytes)
            .and_then(|()| input.flush())
            .expect("writing to epp-host");
    }

    /// Writes one message as a line.
    pub fn send(&self, msg: &Value) {
        // to_vec, not to_string: no detour through fmt::Write (a large file's
        // request is one line of tens of MiB).
        let mut line = serde_json::to_vec(msg).expect("a Value always serialises");
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// Sends a request with a fresh numeric id; returns the id.
    pub fn request(&self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id.fetch_add(1, Ordering::Relaxed));
        self.request_with_id(id.clone(), method, params);
        id
    }

    /// Sends a request with the given id.
    pub fn request_with_id(&self, id: Value, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    }

    /// Sends a notification (no answer comes).
    pub fn notify(&self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a binary frame: the notification with `bytes` set to the length
    /// of `frame` in its params, then `frame` itself, in one write.
    pub fn notify_framed(&self, method: &str, mut params: Value, frame: &[u8]) {
        params["bytes"] = json!(frame.len());
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        let mut bytes = serde_json::to_vec(&msg).expect("a Value always serialises");
        bytes.push(b'\n');
        bytes.extend_from_slice(frame);
        self.send_raw(&bytes);
    }

    /// Closes the host's input: end of the session.
    pub fn close_input(&self) {
        self.input.lock().expect("input lock").take();
    }

    /// Whether input is still open.
    pub fn input_open(&self) -> bool {
        self.input.lock().expect("input lock").is_some()
    }

    /// Claims the first message, arrived or arriving within `timeout`, that
    /// satisfies `pred`; the others stay queued.
    pub fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&Message) -> bool,
    ) -> Result<Message, WaitError> {
        self.until(timeout, |state| {
            let i = state.queue.iter().position(&pred)?;
            Some(state.queue.remove(i))
        })
    }

    /// Claims every queued message up to and including the first, arrived or
    /// arriving within `timeout`, that satisfies `pred`, in arrival order;
    /// messages after it stay queued. Nothing is claimed when the wait fails.
    pub fn take_until(
        &self,
        timeout: Duration,
        pred: impl Fn(&Message) -> bool,
    ) -> Result<Vec<Message>, WaitError> {
        self.until(timeout, |state| {
            let i = state.queue.iter().position(&pred)?;
            let rest = state.queue.split_off(i + 1);
            Some(std::mem::replace(&mut state.queue, rest))
        })
    }

    /// Claims the response to `id`.
    pub fn response(&self, id: &Value, timeout: Duration) -> Result<Message, WaitError> {
        self.wait_for(timeout, |m| m.is_response() && &m.raw["id"] == id)
    }

    /// A request and its answer.
    pub fn call(&self, method: &str, params: Value, timeout: Duration) -> Result<Reply, WaitError> {
        let id = self.request(method, params);
        self.response(&id, timeout).map(|m| m.reply())
    }

    /// Every notification received so far (not claimed by this).
    pub fn notifications(&self) -> Vec<Message> {
        self.shared.0.lock().expect("state lock").notes.clone()
    }

    /// The first notification so far or within `timeout` that satisfies `pred`
    /// (not claimed: it stays queued).
    pub fn wait_notification(
        &self,
        timeout: Duration,
        pred: impl Fn(&Message) -> bool,
    ) -> Option<Message> {
        self.until(timeout, |state| {
            state.notes.iter().find(|m| pred(m)).cloned()
        })
        .ok()
    }

    /// Messages arrived and not claimed, in arrival order.
    pub fn pending(&self) -> Vec<Message> {
        self.shared.0.lock().expect("state lock").queue.clone()
    }

    /// Claims every queued message.
    pub fn take_pending(&self) -> Vec<Message> {
        std::mem::take(&mut self.shared.0.lock().expect("state lock").queue)
    }

    /// Claims everything the host writes until it closes its output.
    pub fn drain(&self, timeout: Duration) -> Result<Vec<Message>, WaitError> {
        self.until(timeout, |state| {
            state.closed.then(|| std::mem::take(&mut state.queue))
        })
    }

    /// Waits until `found` finds something in the state (it is asked again
    /// after each line the host writes), the host closes its output, or
    /// `timeout` passes.
    fn until<T>(
        &self,
        timeout: Duration,
        mut found: impl FnMut(&mut State) -> Option<T>,
    ) -> Result<T, WaitError> {
        let (lock, cvar) = &*self.shared;
        let deadline = Instant::now() + timeout;
        let mut state = lock.lock().expect("state lock");
        loop {
            if let Some(value) = found(&mut state) {
                return Ok(value);
            }
            if state.closed {
                return Err(WaitError::Closed);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(WaitError::Timeout);
            }
            state = cvar.wait_timeout(state, left).expect("state lock").0;
        }
    }

    /// Whether the host closed its output.
    pub fn closed(&self) -> bool {
        self.shared.0.lock().expect("state lock").closed
    }

    /// Lines and bytes read so far.
    pub fn counts(&self) -> (u64, u64) {
        let state = self.shared.0.lock().expect("state lock");
        (state.lines, state.bytes)
    }

    /// Lines that broke the protocol: not JSON-RPC 2.0, or a second answer to
    /// one id. Drivers assert this stays empty.
    /// Expects one more answer to `id` than requests sent with it: the test
    /// sends a duplicate of an id in flight on purpose.
    pub fn allow_second_answer(&self, id: &Value) {
        let mut state = self.shared.0.lock().expect("state lock");
        *state.repeats.entry(id.to_string()).or_default() += 1;
    }

    pub fn violations(&self) -> Vec<String> {
        self.shared.0.lock().expect("state lock").violations.clone()
    }

    /// Everything read so far, when [`Options::transcript`] was set.
    pub fn transcript(&self) -> String {
        self.shared.0.lock().expect("state lock").transcript.clone()
    }
}

/// The raw bytes that follow a message: `params.bytes` of a notification.
fn frame_length(raw: &Value) -> Option<u64> {
    if raw.get("id").is_some() || !raw["method"].is_string() {
        return None;
    }
    raw["params"]["bytes"].as_u64()
}

fn read_lines(output: impl Read, shared: Shared, mut options: Options) {
    let (lock, cvar) = &*shared;
    // Answers of files.read are single lines of tens of MiB: large reads, and
    // the line becomes the text without a copy when it is UTF-8 (it always is
    // from epp-host).
    let mut output = BufReader::with_capacity(1 << 20, output);
    loop {
        let mut line = Vec::new();
        match output.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        let line_bytes = line.len() as u64 + 1;
        let text = String::from_utf8(line)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        if let Some(hook) = options.on_line.as_mut() {
            hook(&text);
        }
        let raw =
            serde_json::from_str::<Value>(&text).unwrap_or_else(|_| json!({"__not_json__": text}));
        let frame = match frame_length(&raw) {
            Some(n) => {
                let mut bytes = Vec::with_capacity(n.min(1 << 30) as usize);
                if (&mut output).take(n).read_to_end(&mut bytes).is_err() {
                    break;
                }
                Some(Arc::new(bytes))
            }
            None => None,
        };
        let msg = Message {
            raw,
            at: Instant::now(),
            frame,
        };
        let mut state = lock.lock().expect("state lock");
        state.lines += 1;
        state.bytes += line_bytes;
        if options.transcript {
            state.transcript.push_str(&text);
            state.transcript.push('\n');
        }
        if msg.raw["jsonrpc"] != "2.0" {
            state
                .violations
                .push(format!("not a JSON-RPC 2.0 message: {text}"));
        } else if msg.raw.get("method").is_some() {
            state.notes.push(msg.clone());
        } else if !msg.raw["id"].is_null() && !state.answered.insert(msg.raw["id"].to_string()) {
            // (id null answers lines whose id could not be read: any number of them.)
            let key = msg.raw["id"].to_string();
            match state.repeats.get_mut(&key) {
                Some(n) if *n > 0 => *n -= 1,
                _ => state
                    .violations
                    .push(format!("a second answer to id {}", msg.raw["id"])),
            }
        }
        state.queue.push(msg);
        cvar.notify_all();
    }
    lock.lock().expect("state lock").closed = true;
    cvar.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host that answers from a script: each input line gets the next output.
    fn scripted(lines: &[&str]) -> Client {
        let out = lines.join("\n") + "\n";
        Client::new(
            std::io::sink(),
            std::io::Cursor::new(out.into_bytes()),
            Options {
                transcript: true,
                on_line: None,
            },
        )
    }

    #[test]
    fn responses_are_claimed_by_id_and_notifications_kept() {
        let c = scripted(&[
            r#"{"jsonrpc":"2.0","method":"commands.output","params":{"request_id":2,"data":"hi"}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"exit_code":0}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"gone","data":{"epp_code":"E4004"}}}"#,
        ]);
        let t = Duration::from_secs(5);
        let e = c.response(&json!(1), t).unwrap().reply().unwrap_err();
        assert_eq!(
            (e.code, e.epp.as_str(), e.message.as_str()),
            (-32000, "E4004", "gone")
        );
        assert_eq!(e.code(), Some(EppCode::NotFound));
        assert_eq!(
            c.response(&json!(2), t).unwrap().reply().unwrap()["exit_code"],
            0
        );
        let notes = c.notifications();
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].request_id(), &json!(2));
        // The notification is still queued until claimed; then the output ends.
        assert_eq!(c.take_pending().len(), 1);
        assert_eq!(c.response(&json!(3), t).unwrap_err(), WaitError::Closed);
        assert_eq!(c.counts().0, 3);
        assert_eq!(c.transcript().lines().count(), 3);
    }

    #[test]
    fn take_until_claims_a_prefix_in_arrival_order() {
        let c = scripted(&[
            r#"{"jsonrpc":"2.0","method":"commands.output","params":{"request_id":1,"data":"a"}}"#,
            r#"{"jsonrpc":"2.0","method":"commands.output","params":{"request_id":2,"data":"b"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{}}"#,
        ]);
        let t = Duration::from_secs(5);
        let got = c.take_until(t, |m| m.is_response()).unwrap();
        let lines: Vec<String> = got.iter().map(|m| m.raw.to_string()).collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(got[0].raw["params"]["data"], "a");
        assert_eq!(got[1].raw["params"]["data"], "b");
        assert_eq!(got[2].raw["id"], 1);
        // Nothing more matches: the wait ends with the output, claiming nothing;
        // the answer to 2 is still queued.
        assert_eq!(
            c.take_until(t, |m| m.is_notification("pty.exit"))
                .unwrap_err(),
            WaitError::Closed
        );
        let rest = c.pending();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].raw["id"], 2);
    }

    #[test]
    fn garbage_and_second_answers_are_violations() {
        let c = scripted(&[
            "not json",
            r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
        ]);
        let m = c.wait_for(Duration::from_secs(5), |_| true).unwrap();
        assert!(m.is_garbage());
        assert!(!m.is_response());
        c.drain(Duration::from_secs(5)).unwrap();
        let v = c.violations();
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].starts_with("not a JSON-RPC 2.0 message: not json"));
        assert_eq!(v[1], "a second answer to id 7");
    }

    #[test]
    fn epp_codes_read_back_as_they_are_written() {
        for code in EppCode::ALL {
            assert_eq!(EppCode::parse(code.as_str()), Some(code));
            assert_eq!(code.to_string(), code.as_str());
        }
        assert_eq!(EppCode::parse("E0000"), None);
        assert_eq!(EppCode::parse(""), None);
    }

    #[test]
    fn a_wait_times_out_while_the_host_is_silent() {
        let (rx, _keep) = std::io::pipe().unwrap();
        let c = Client::new(std::io::sink(), rx, Options::default());
        let started = Instant::now();
        let err = c
            .response(&json!(1), Duration::from_millis(50))
            .unwrap_err();
        assert_eq!(err, WaitError::Timeout);
        assert!(started.elapsed() >= Duration::from_millis(50));
    }
}
