//! Jupyter kernel messages → execd's `/code` SSE events, a port of execd's stream handlers
//! (`jupyter/execute/execute.go` `registerExecuteCodeStreamHandlers`,
//! `runtime/jupyter.go` `dispatchExecutionResultHooks`, `controller/sse.go`):
//!
//! * only `execute_result`, `stream`, `error`, `status` and `execute_reply` are handled,
//!   whatever their parent: `display_data` (`plt.show()`, `display(...)`),
//!   `update_display_data`, `clear_output` and `execute_input` produce no event;
//! * `execute_result` → `execution_count` (if > 0), then `result` with the MIME map,
//!   `text/plain` renamed to `text`;
//! * `stream` → `stdout`/`stderr` (empty text dropped);
//! * `error` → `status` "error", then `error` {ename, evalue, traceback};
//! * the FIRST `status: idle` of any parent → `execution_complete` with the time since the
//!   request. execd connects to the kernel anew for every run, and jupyter_server's
//!   connection "nudge" (kernel_info requests) leaks its own busy/idle statuses to the new
//!   connection right after the execute request is sent: with the real image, execd's
//!   `execution_complete` therefore comes before the run's output. The stand-in keeps one
//!   connection and reproduces that by sending a kernel_info request first;
//! * `execute_reply` only records the execution count and whether it failed.
//!
//! execd ends the stream once it saw that idle and the count (or an error), polling every
//! 100 ms; here it ends as soon as the run's own `idle` and that condition are there, so
//! no output is lost and nothing waits for a poll tick. When the kernel dies (Jupyter's
//! `restarting`/`dead` status) execd never sees either and streams pings forever, its
//! context busy for good; here the stream ends there, without a further event.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::web::{go_json, unix_ms};

/// One message from the kernel's channels WebSocket (only what the handlers read).
#[derive(Deserialize)]
pub struct KernelMsg {
    pub header: Header,
    #[serde(default)]
    pub parent_header: ParentHeader,
    #[serde(default)]
    pub content: Value,
}

#[derive(Deserialize)]
pub struct Header {
    pub msg_type: String,
}

#[derive(Deserialize, Default)]
pub struct ParentHeader {
    #[serde(default)]
    pub msg_id: String,
}

/// `execute.ErrorOutput`: all three fields always present (`traceback` may be null).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ErrorOutput {
    #[serde(default)]
    pub ename: String,
    #[serde(default)]
    pub evalue: String,
    #[serde(default)]
    pub traceback: Option<Vec<String>>,
}

/// The events of `model.ServerStreamEvent` that a code run can produce.
#[derive(Debug, PartialEq)]
pub enum CodeEvent {
    Init(String),
    Ping,
    ExecutionCount(i64),
    Result(Value),
    Stdout(String),
    Stderr(String),
    Status(String),
    Error(ErrorOutput),
    Complete(Duration),
}

/// `model.ServerStreamEvent`, field order and omitempty rules included.
#[derive(Serialize, Default)]
struct Wire<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    text: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    execution_count: i64,
    #[serde(skip_serializing_if = "is_zero")]
    execution_time: i64,
    timestamp: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    results: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorOutput>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl CodeEvent {
    /// The SSE frame: compact Go-style JSON followed by `\n\n`.
    pub fn frame(&self) -> Bytes {
        self.frame_at(unix_ms(SystemTime::now()))
    }

    fn frame_at(&self, timestamp: i64) -> Bytes {
        let mut w = Wire {
            timestamp,
            ..Default::default()
        };
        match self {
            CodeEvent::Init(id) => (w.kind, w.text) = ("init", id),
            CodeEvent::Ping => (w.kind, w.text) = ("ping", "pong"),
            CodeEvent::ExecutionCount(n) => (w.kind, w.execution_count) = ("execution_count", *n),
            CodeEvent::Result(r) => (w.kind, w.results) = ("result", Some(r)),
            CodeEvent::Stdout(t) => (w.kind, w.text) = ("stdout", t),
            CodeEvent::Stderr(t) => (w.kind, w.text) = ("stderr", t),
            CodeEvent::Status(t) => (w.kind, w.text) = ("status", t),
            CodeEvent::Error(e) => (w.kind, w.error) = ("error", Some(e)),
            CodeEvent::Complete(d) => {
                (w.kind, w.execution_time) = ("execution_complete", d.as_millis() as i64)
            }
        }
        let mut b = go_json(&w);
        b.extend_from_slice(b"\n\n");
        Bytes::from(b)
    }
}

/// What execd's `OnExecuteResult` sends for an `execute_result`'s `data`: the map with
/// `text/plain` renamed to `text`, as Go re-encodes a decoded `map[string]any` (keys
/// sorted at every level, numbers as float64). `None` when there is nothing to send.
fn results_of(data: &Value) -> Option<Value> {
    let map = data.as_object().filter(|m| !m.is_empty())?;
    let renamed = map
        .iter()
        .map(|(k, v)| {
            let key = if k == "text/plain" {
                "text"
            } else {
                k.as_str()
            };
            (key.to_string(), v.clone())
        })
        .collect::<Map<_, _>>();
    Some(go_decoded(Value::Object(renamed)))
}

/// A JSON value as Go prints it after decoding it into `any`: object keys sorted (Go
/// marshals maps in key order; our `Map` keeps insertion order) and whole numbers
/// without a fraction (they were float64: `1.0` prints as `1`).
fn go_decoded(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, go_decoded(v)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.into_iter().map(go_decoded).collect()),
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.abs() < 9.0e15 {
                Value::from(f as i64)
            } else {
                Value::from(f)
            }
        }
        other => other,
    }
}

/// One run's handler state (`streamExecutionState` plus the end condition).
pub struct RunState {
    /// msg_id of the run's execute_request: its own `idle` ends the stream.
    execute_id: String,
    started: std::time::Instant,
    execution_count: i64,
    failed: bool,
    completed: bool,
    own_idle: bool,
    kernel_died: bool,
}

impl RunState {
    pub fn new(execute_id: String, started: std::time::Instant) -> RunState {
        RunState {
            execute_id,
            started,
            execution_count: 0,
            failed: false,
            completed: false,
            own_idle: false,
            kernel_died: false,
        }
    }

    /// Events for one kernel message, in the order execd writes them.
    pub fn on_message(&mut self, msg: &KernelMsg) -> Vec<CodeEvent> {
        let c = &msg.content;
        let mut out = Vec::new();
        match msg.header.msg_type.as_str() {
            // Only this run's reply: a reply of the previous run may come after its idle.
            "execute_reply" if msg.parent_header.msg_id == self.execute_id => {
                self.execution_count = int(c, "execution_count");
                if !c["ename"].as_str().unwrap_or("").is_empty() {
                    self.failed = true;
                }
            }
            "execute_result" => {
                let count = int(c, "execution_count");
                self.execution_count = count;
                if count > 0 {
                    out.push(CodeEvent::ExecutionCount(count));
                }
                if let Some(r) = results_of(&c["data"]) {
                    out.push(CodeEvent::Result(r));
                }
            }
            "stream" => {
                let text = c["text"].as_str().unwrap_or("");
                if !text.is_empty() {
                    match c["name"].as_str() {
                        Some("stdout") => out.push(CodeEvent::Stdout(text.to_string())),
                        Some("stderr") => out.push(CodeEvent::Stderr(text.to_string())),
                        _ => {}
                    }
                }
            }
            "error" => {
                self.failed = true;
                let e = serde_json::from_value::<ErrorOutput>(c.clone()).unwrap_or(ErrorOutput {
                    ename: String::new(),
                    evalue: String::new(),
                    traceback: None,
                });
                out.push(CodeEvent::Status("error".into()));
                out.push(CodeEvent::Error(e));
            }
            "status" if c["execution_state"] == "idle" => {
                if !self.completed {
                    self.completed = true;
                    out.push(CodeEvent::Complete(self.started.elapsed()));
                }
                if msg.parent_header.msg_id == self.execute_id {
                    self.own_idle = true;
                }
            }
            "status" if matches!(c["execution_state"].as_str(), Some("restarting" | "dead")) => {
                self.kernel_died = true;
            }
            _ => {}
        }
        out
    }

    /// The run is over: its own idle came, and with it (or before) the count or an error.
    pub fn finished(&self) -> bool {
        self.kernel_died
            || self.completed && self.own_idle && (self.execution_count > 0 || self.failed)
    }
}

fn int(v: &Value, key: &str) -> i64 {
    v[key].as_i64().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(kind: &str, parent: &str, content: Value) -> KernelMsg {
        serde_json::from_value(json!({
            "header": {"msg_type": kind, "msg_id": "x"},
            "parent_header": {"msg_id": parent},
            "content": content,
        }))
        .unwrap()
    }

    fn kinds(events: &[CodeEvent]) -> Vec<&'static str> {
        events
            .iter()
            .map(|e| match e {
                CodeEvent::Init(_) => "init",
                CodeEvent::Ping => "ping",
                CodeEvent::ExecutionCount(_) => "execution_count",
                CodeEvent::Result(_) => "result",
                CodeEvent::Stdout(_) => "stdout",
                CodeEvent::Stderr(_) => "stderr",
                CodeEvent::Status(_) => "status",
                CodeEvent::Error(_) => "error",
                CodeEvent::Complete(_) => "execution_complete",
            })
            .collect()
    }

    /// Feeds a message trace; returns the events and whether the run ended after the last.
    fn replay(trace: &[KernelMsg]) -> (Vec<CodeEvent>, bool) {
        let mut st = RunState::new("exec".into(), std::time::Instant::now());
        let mut all = Vec::new();
        for (i, m) in trace.iter().enumerate() {
            all.extend(st.on_message(m));
            assert!(!st.finished() || i == trace.len() - 1, "ended early at {i}");
        }
        (all, st.finished())
    }

    fn idle(parent: &str) -> KernelMsg {
        msg("status", parent, json!({"execution_state": "idle"}))
    }

    fn busy(parent: &str) -> KernelMsg {
        msg("status", parent, json!({"execution_state": "busy"}))
    }

    #[test]
    fn a_result_run_completes_at_the_nudge_idle_then_streams_the_result() {
        let (events, done) = replay(&[
            busy("info"),
            idle("info"),
            busy("exec"),
            msg("execute_input", "exec", json!({"code": "1+1"})),
            msg(
                "execute_result",
                "exec",
                json!({"execution_count": 3, "data": {"text/plain": "2"}, "metadata": {}}),
            ),
            msg(
                "execute_reply",
                "exec",
                json!({"status": "ok", "execution_count": 3}),
            ),
            idle("exec"),
        ]);
        assert!(done);
        assert_eq!(
            kinds(&events),
            ["execution_complete", "execution_count", "result"]
        );
        assert_eq!(events[1], CodeEvent::ExecutionCount(3));
        assert_eq!(events[2], CodeEvent::Result(json!({"text": "2"})));
    }

    #[test]
    fn output_after_the_reply_is_kept_until_the_runs_own_idle() {
        // iopub and shell are separate sockets: the reply may overtake the output.
        let (events, done) = replay(&[
            idle("info"),
            msg(
                "execute_reply",
                "exec",
                json!({"status": "ok", "execution_count": 1}),
            ),
            msg("stream", "exec", json!({"name": "stdout", "text": "hi\n"})),
            msg("stream", "exec", json!({"name": "stderr", "text": "err\n"})),
            msg("stream", "exec", json!({"name": "stdout", "text": ""})),
            msg("display_data", "exec", json!({"data": {"text/plain": "x"}})),
            idle("exec"),
        ]);
        assert!(done);
        assert_eq!(
            events[1..],
            [
                CodeEvent::Stdout("hi\n".into()),
                CodeEvent::Stderr("err\n".into())
            ]
        );
    }

    #[test]
    fn an_error_is_status_then_error_and_ends_without_a_count() {
        let tb = vec!["\u{1b}[31mZeroDivisionError\u{1b}[39m".to_string()];
        let (events, done) = replay(&[
            idle("info"),
            msg(
                "error",
                "exec",
                json!({"ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": tb}),
            ),
            idle("exec"),
        ]);
        assert!(done, "an error ends the run even before the reply");
        assert_eq!(kinds(&events), ["execution_complete", "status", "error"]);
        assert_eq!(
            String::from_utf8(events[2].frame_at(7).to_vec()).unwrap(),
            "{\"type\":\"error\",\"timestamp\":7,\"error\":{\"ename\":\"ZeroDivisionError\",\
             \"evalue\":\"division by zero\",\"traceback\":[\"\\u001b[31mZeroDivisionError\\u001b[39m\"]}}\n\n"
        );
    }

    #[test]
    fn the_first_idle_alone_does_not_end_a_run() {
        let mut st = RunState::new("exec".into(), std::time::Instant::now());
        st.on_message(&idle("info"));
        st.on_message(&msg("execute_reply", "exec", json!({"execution_count": 2})));
        assert!(!st.finished(), "the run's own idle is still to come");
        assert!(
            st.on_message(&idle("exec")).is_empty(),
            "one execution_complete only"
        );
        assert!(st.finished());
    }

    #[test]
    fn a_dying_kernel_ends_the_run_without_an_event() {
        let mut st = RunState::new("exec".into(), std::time::Instant::now());
        st.on_message(&idle("info"));
        let restarting = msg("status", "", json!({"execution_state": "restarting"}));
        assert!(st.on_message(&restarting).is_empty());
        assert!(st.finished());
    }

    #[test]
    fn frames_follow_execds_field_order_and_omissions() {
        let f = |e: CodeEvent| String::from_utf8(e.frame_at(5).to_vec()).unwrap();
        assert_eq!(
            f(CodeEvent::Init("c1".into())),
            "{\"type\":\"init\",\"text\":\"c1\",\"timestamp\":5}\n\n"
        );
        assert_eq!(
            f(CodeEvent::Ping),
            "{\"type\":\"ping\",\"text\":\"pong\",\"timestamp\":5}\n\n"
        );
        assert_eq!(
            f(CodeEvent::ExecutionCount(4)),
            "{\"type\":\"execution_count\",\"execution_count\":4,\"timestamp\":5}\n\n"
        );
        assert_eq!(
            f(CodeEvent::Complete(Duration::from_micros(12_900))),
            "{\"type\":\"execution_complete\",\"execution_time\":12,\"timestamp\":5}\n\n"
        );
        assert_eq!(
            f(CodeEvent::Complete(Duration::from_micros(300))),
            "{\"type\":\"execution_complete\",\"timestamp\":5}\n\n"
        );
        assert_eq!(
            f(CodeEvent::Stdout("<a>".into())),
            "{\"type\":\"stdout\",\"text\":\"\\u003ca\\u003e\",\"timestamp\":5}\n\n"
        );
    }

    #[test]
    fn results_are_reencoded_as_go_does() {
        let r = results_of(&json!({
            "text/plain": "<Figure>",
            "image/png": "iVBOR",
            "application/json": {"z": 1.0, "a": [2.5, 3]},
        }))
        .unwrap();
        let frame = String::from_utf8(CodeEvent::Result(r).frame_at(1).to_vec()).unwrap();
        assert_eq!(
            frame,
            "{\"type\":\"result\",\"timestamp\":1,\"results\":{\"application/json\":{\"a\":[2.5,3],\"z\":1},\
             \"image/png\":\"iVBOR\",\"text\":\"\\u003cFigure\\u003e\"}}\n\n"
        );
        assert_eq!(results_of(&json!({})), None);
        assert_eq!(results_of(&Value::Null), None);
    }
}
