//! The method table, derived from `wit/` at build time (host/build.rs reads the
//! `/// epp: ...` lines of every `infra` function and of the cases of the event
//! variants its streams carry; docs/epp-1.md §8). Everything the host knows
//! about a particular method is here; the serving code only reads it.

use serde_json::{Map, Value};
use std::time::Duration;

/// One EPP/1 method, as its WIT function and `epp:` lines describe it.
#[derive(Debug)]
pub struct Method {
    /// Wire name, e.g. `sandbox.get_info`.
    pub name: &'static str,
    /// The `infra` function, e.g. `sandbox-get-info`.
    pub function: &'static str,
    /// Wire name of the capability it belongs to.
    pub capability: &'static str,
    /// The key under which a result that is not a record is answered.
    pub result: Option<&'static str>,
    /// Wire names of its params (a lone `req` record's fields), in WIT order.
    pub params: &'static [&'static str],
    /// Those params that are seconds on the wire (`*-ms` in WIT).
    pub seconds: &'static [&'static str],
    /// (param, JSON) used when the param is absent.
    pub defaults: &'static [(&'static str, &'static str)],
    /// (wire name kept for compatibility, param it stands for).
    pub aliases: &'static [(&'static str, &'static str)],
    /// (param, min, max): bounds of integer params.
    pub ranges: &'static [(&'static str, Option<i64>, Option<i64>)],
    /// A param in seconds the call waits on top of `--call-timeout`.
    pub extends: Option<&'static str>,
    /// Whether the request waits for the end of the stream it follows.
    pub wait: Wait,
    /// `resource=TEMPLATE`: it reads the resource at URIs of a template.
    pub resource: Option<Resource>,
    /// `watches=METHOD`: its events are changes of METHOD's resources.
    pub watches: Option<&'static str>,
    /// How a method whose answer holds a resource is served.
    pub stream: Option<&'static StreamTags>,
}

/// `resource=TEMPLATE` and `resource.PARAM=JSON` of a method.
#[derive(Debug, Clone, Copy)]
pub struct Resource {
    /// An RFC 6570 template (`{name}`, `{+name}`) whose variables are params.
    pub template: &'static str,
    /// (param, JSON) a resource read passes besides the URI's.
    pub params: &'static [(&'static str, &'static str)],
}

/// `wait` and `wait=FIELD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    No,
    /// Until the stream ends: no deadline.
    UntilEnd,
    /// For the param FIELD (seconds) plus [`SLACK`]; none when it is absent.
    Field(&'static str),
}

/// What a stream method's `epp:` lines say, and the functions that serve it.
#[derive(Debug)]
pub struct StreamTags {
    /// The wire name of the stream's id.
    pub id: Option<&'static str>,
    /// `resume=METHOD`: a call may be answered before its stream ends while
    /// the host reads on (an MCP server's wait); a METHOD call with the
    /// stream's id picks it up.
    pub resume: Option<&'static str>,
    /// The capability that forwarding (`stream: true`) needs besides the method's.
    pub forward: Option<&'static str>,
    /// The notification of a reader's chunks or of a stream of records.
    pub note: Option<&'static str>,
    /// The notification that carries a writer's content with `stream: true`.
    pub input: Option<&'static str>,
    /// Answered at once; the events follow as notifications.
    pub detach: bool,
    /// The method's own function first, then `prefer=`, then each `when.`.
    pub callees: &'static [Callee],
}

/// A function that serves a stream method.
#[derive(Debug)]
pub struct Callee {
    pub function: &'static str,
    pub via: Via,
    pub answer: Answer,
}

/// Why a callee is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The method's own function.
    Main,
    /// Called instead of the main function when the component exports it.
    Prefer,
    /// Called when `param` is given (`true`, or any value when `is_param`:
    /// then it is a param of this function).
    When { param: &'static str, is_param: bool },
}

/// The shape of what a callee answers.
#[derive(Debug)]
pub enum Answer {
    /// A value, answered as a plain method's.
    Plain,
    /// A resource whose `next` yields events (`batched`: a list at a time);
    /// `tuple`: the answer is `tuple<string, resource>`, the string its id.
    Events {
        next: &'static str,
        batched: bool,
        tuple: bool,
        items: Items,
    },
    /// A resource whose `read` yields chunks of bytes (and `size` says how many);
    /// `read_into`, when the contract has it, moves them into a host sink instead.
    Reader {
        read: &'static str,
        size: Option<&'static str>,
        read_into: Option<&'static str>,
    },
    /// A resource that takes bytes (`write`) and answers a value (`finish`);
    /// `write_from`, when the contract has it, takes them from a host source instead.
    Writer {
        write: &'static str,
        finish: &'static str,
        write_from: Option<&'static str>,
    },
}

/// What an event stream yields.
#[derive(Debug)]
pub enum Items {
    /// Records, each forwarded as the stream's `note`.
    Records,
    /// The cases of a variant, each with its role.
    Cases(&'static [Case]),
}

/// One case of an event variant.
#[derive(Debug)]
pub struct Case {
    pub wit: &'static str,
    pub wire: &'static str,
    pub role: Role,
    /// The notification it is forwarded as.
    pub note: Option<&'static str>,
    /// Its payload is `list<u8>` (base64 on the wire).
    pub bytes: bool,
}

/// Whether notification `name` carries output text (`{stream, data}`).
pub fn carries_text(name: &str) -> bool {
    cases().any(|c| c.note == Some(name) && c.role == Role::Text)
}

/// The list an `item=KEY` case collects into, by its notification `name`.
pub fn item_list(name: &str) -> Option<&'static str> {
    cases()
        .filter(|c| c.note == Some(name))
        .find_map(|c| match c.role {
            Role::Item(key) => Some(key),
            _ => None,
        })
}

/// The key of the stream id notification `name` carries (an `id` case's), if any.
pub fn carries_id(name: &str) -> Option<&'static str> {
    METHODS.iter().filter_map(|m| m.stream).find_map(|s| {
        let is_id = s.callees.iter().any(|c| match c.answer {
            Answer::Events {
                items: Items::Cases(cases),
                ..
            } => cases
                .iter()
                .any(|c| c.role == Role::Id && c.note == Some(name)),
            _ => false,
        });
        is_id.then_some(s.id).flatten()
    })
}

/// Whether notification `name` carries bytes (`data`, base64).
pub fn carries_bytes(name: &str) -> bool {
    cases().any(|c| c.note == Some(name) && c.bytes)
}

/// Every case of every event variant the methods' streams carry.
fn cases() -> impl Iterator<Item = &'static Case> {
    METHODS
        .iter()
        .filter_map(|m| m.stream)
        .flat_map(|s| s.callees)
        .filter_map(|c| match c.answer {
            Answer::Events {
                items: Items::Cases(cases),
                ..
            } => Some(cases.iter()),
            _ => None,
        })
        .flatten()
}

/// What an event is (`epp:` line of its case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The stream's id.
    Id,
    /// Output text of the stream the case names.
    Text,
    /// Forwarded, or collected into the list KEY.
    Item(&'static str),
    /// Kept for the answer under KEY.
    Keep(&'static str),
    /// The last event: its record's fields, or its value under KEY.
    End(Option<&'static str>),
    /// Forwarded only.
    Forward,
}

include!(concat!(env!("OUT_DIR"), "/methods.rs"));

/// How long past its own timeout a request bounded by one may take
/// (`wait=FIELD`): time for the provider to report the end.
pub const SLACK: Duration = Duration::from_secs(60);

/// The method called `name` on the wire.
pub fn find(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|m| m.name == name)
}

/// The method a request names in `method` takes these notifications as input,
/// if any method does (`input=NAME`).
pub fn is_input(notification: &str) -> bool {
    METHODS
        .iter()
        .filter_map(|m| m.stream)
        .any(|s| s.input == Some(notification))
}

/// The seconds a param gives, if it is a positive number.
fn seconds(params: &Map<String, Value>, key: &str) -> Option<Duration> {
    params
        .get(key)
        .and_then(Value::as_f64)
        .filter(|s| *s > 0.0)
        .map(|s| Duration::from_secs_f64(s.min(1e9)))
}

impl Method {
    pub fn has_param(&self, name: &str) -> bool {
        self.params.contains(&name)
    }

    /// The declared default of `param`, if any.
    pub fn default(&self, param: &str) -> Option<&'static str> {
        self.defaults
            .iter()
            .find(|(p, _)| *p == param)
            .map(|(_, json)| *json)
    }

    /// Checks `value` of an integer param against its declared range.
    pub fn check_range(&self, param: &str, value: i128) -> Result<(), String> {
        let Some((_, min, max)) = self.ranges.iter().find(|(p, ..)| *p == param) else {
            return Ok(());
        };
        let (low, high) = (min.map(i128::from), max.map(i128::from));
        if low.is_some_and(|l| value < l) || high.is_some_and(|h| value > h) {
            let bounds = match (min, max) {
                (Some(l), Some(h)) => format!("between {l} and {h}"),
                (Some(l), None) => format!("at least {l}"),
                (None, Some(h)) => format!("at most {h}"),
                (None, None) => unreachable!("a range has a bound"),
            };
            return Err(format!("`{param}` must be {bounds}, got {value}"));
        }
        Ok(())
    }

    /// The `when.` callee these params select, if one does.
    pub fn when(&self, params: &Map<String, Value>) -> Option<&'static Callee> {
        let stream = self.stream?;
        stream.callees.iter().find(|c| match c.via {
            Via::When { param, is_param } => match params.get(param) {
                None | Some(Value::Null) | Some(Value::Bool(false)) => false,
                Some(_) if is_param => true,
                Some(v) => v == &Value::Bool(true),
            },
            _ => false,
        })
    }

    /// Whether a request with these params takes input notifications while it
    /// runs (`input=NAME`, with `stream: true`). The server decides this when
    /// it reads the request, so that input sent right behind it is never lost.
    pub fn takes_input(&self, params: &Map<String, Value>) -> bool {
        self.stream.is_some_and(|s| s.input.is_some())
            && params.get("stream") == Some(&Value::Bool(true))
            && self.when(params).is_none()
    }

    /// How long a request may take in total, or none when it runs until its
    /// work ends: `default` (`--call-timeout`); with `wait`, until the stream
    /// it follows ends, bounded by its own `wait=FIELD` plus [`SLACK`]; with
    /// `extends=FIELD`, `default` plus that wait. A `when.` function that
    /// answers at once (no stream) takes `default`.
    pub fn deadline(&self, params: &Map<String, Value>, default: Duration) -> Option<Duration> {
        let answers_at_once = self
            .when(params)
            .is_some_and(|c| matches!(c.answer, Answer::Plain));
        let detached = self.stream.is_some_and(|s| s.detach);
        match self.wait {
            _ if answers_at_once || detached => {}
            Wait::No => {}
            Wait::UntilEnd => return None,
            Wait::Field(field) => return seconds(params, field).map(|own| own + SLACK),
        }
        match self.extends {
            Some(field) => Some(default + seconds(params, field).unwrap_or_default()),
            None => Some(default),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(map) => map,
            _ => unreachable!("test params are objects"),
        }
    }

    #[test]
    fn the_table_covers_every_capability_and_names_methods_by_the_rule() {
        let flags = crate::contract::capabilities::all().count();
        assert_eq!(CAPABILITIES.len(), flags);
        for cap in CAPABILITIES {
            let forwarded = METHODS
                .iter()
                .filter_map(|m| m.stream)
                .any(|s| s.forward == Some(cap));
            assert!(
                METHODS.iter().any(|m| m.capability == *cap) || forwarded,
                "no method of {cap}"
            );
        }
        let info = find("sandbox.get_info").expect("sandbox.get_info");
        assert_eq!(info.function, "sandbox-get-info");
        assert_eq!(info.params, ["sandbox_id"]);
        assert!(info.stream.is_none());
        let run = find("commands.run").expect("commands.run");
        assert!(run.stream.is_some());
        assert_eq!(run.seconds, ["timeout"]);
        assert!(
            find("commands.start").is_none(),
            "untagged functions are not methods"
        );
        assert_eq!(find("files.list").unwrap().default("depth"), Some("1"));
        assert_eq!(find("sandbox.list").unwrap().aliases, [("state", "states")]);
        // Adding a method must not need host code: no count, only the rule.
        for m in METHODS {
            assert_eq!(crate::contract::names::method(m.function), m.name);
            assert!(CAPABILITIES.contains(&m.capability), "{m:?}");
        }
    }

    #[test]
    fn every_stream_is_served_by_its_shape() {
        for m in METHODS.iter().filter(|m| m.stream.is_some()) {
            let s = m.stream.unwrap();
            assert_eq!(s.callees[0].function, m.function, "{m:?}");
            assert_eq!(s.callees[0].via, Via::Main);
            for c in s.callees {
                if let Answer::Events {
                    items: Items::Cases(cases),
                    ..
                } = c.answer
                {
                    let ends = cases.iter().filter(|c| matches!(c.role, Role::End(_)));
                    assert_eq!(ends.count(), 1, "{m:?}");
                }
            }
        }
    }

    #[test]
    fn ranges_name_the_param_and_the_bounds() {
        let resize = find("pty.resize").unwrap();
        assert!(resize.check_range("cols", 80).is_ok());
        assert_eq!(
            resize.check_range("rows", 0).unwrap_err(),
            "`rows` must be between 1 and 1000, got 0"
        );
        assert_eq!(
            find("files.list").unwrap().check_range("depth", 0),
            Err("`depth` must be at least 1, got 0".to_string())
        );
    }

    #[test]
    fn deadlines_follow_the_table() {
        let default = Duration::from_secs(300);
        let at = |name: &str, p: Value| find(name).unwrap().deadline(&params(p), default);
        let secs = Duration::from_secs;
        // Foreground commands: their own timeout plus a minute, or none.
        assert_eq!(at("commands.run", json!({"timeout": 5})), Some(secs(65)));
        assert_eq!(at("commands.run", json!({})), None);
        assert_eq!(
            at("sessions.run", json!({"timeout": 0.5})),
            Some(Duration::from_millis(60_500))
        );
        // A background command answers at once: its timeout is the command's.
        assert_eq!(
            at("commands.run", json!({"background": true, "timeout": 5})),
            Some(default)
        );
        assert_eq!(at("files.watch", json!({})), None);
        assert_eq!(at("files.read", json!({})), Some(default));
        assert_eq!(at("pty.create", json!({})), Some(default));
        assert_eq!(at("code.run", json!({"timeout": 1000})), Some(secs(1060)));
        // ready_timeout is a wait on top of the server's part (the create
        // itself, with the image pull), which --call-timeout bounds; `timeout`
        // of sandbox.create is a lifetime.
        assert_eq!(
            at("sandbox.create", json!({"timeout": 3600})),
            Some(default)
        );
        assert_eq!(
            at("sandbox.create", json!({"ready_timeout": 600})),
            Some(secs(900))
        );
        assert_eq!(at("sandbox.get_info", json!({})), Some(default));
        assert_eq!(at("commands.run", json!({"timeout": "5"})), None);
    }

    #[test]
    fn only_a_streamed_write_takes_input() {
        let write = find("files.write").unwrap();
        let streamed = params(json!({"sandbox_id": "s", "path": "/a", "size": 1, "stream": true}));
        assert!(write.takes_input(&streamed));
        assert!(!find("files.read").unwrap().takes_input(&streamed));
        assert!(!find("commands.run").unwrap().takes_input(&streamed));
        let whole = params(json!({"sandbox_id": "s", "path": "/a", "content": "x"}));
        assert!(!write.takes_input(&whole));
        let odd = params(json!({"sandbox_id": "s", "path": "/a", "stream": "yes"}));
        assert!(!write.takes_input(&odd));
        let input = write.stream.unwrap().input.unwrap();
        assert!(is_input(input));
        assert!(!is_input(epp_protocol::transport::CANCEL));
    }
}
