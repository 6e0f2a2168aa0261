//! A tool call's outcome as an MCP tool result: `structuredContent` is the
//! EPP answer, the text block a short human summary of it (not a second
//! copy), images in it (a kernel's `image/png`) image blocks; an EPP error is
//! a result with `isError: true` whose text carries the code, message and hint
//! and whose `structuredContent.error` is `{code, message, retryable}`.
//! `Forwarded` keeps what a streamed call sent as notifications, for its
//! progress and its result.

use crate::contract::table::{carries_id, carries_text, item_list};
use crate::contract::tools;
use crate::rpc::errors::RpcError;
use crate::rpc::outbox::Note;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// Characters of a string shown in the summary.
const SHOWN: usize = 400;
/// Fields of the answer shown in the summary.
const FIELDS: usize = 8;

/// The output a streamed call forwarded, kept for its result within
/// `--max-output-bytes` (as a collected EPP answer would be).
pub struct Forwarded {
    texts: Vec<(String, String)>,
    items: Vec<(&'static str, Vec<Value>)>,
    /// The stream's id, under its key, once a notification carried it.
    id: Option<(&'static str, Value)>,
    room: usize,
    truncated: bool,
    /// Bytes of output so far: the `progress` of its notifications.
    pub bytes: u64,
}

impl Forwarded {
    pub fn new(room: usize) -> Forwarded {
        Forwarded {
            texts: Vec::new(),
            items: Vec::new(),
            id: None,
            room,
            truncated: false,
            bytes: 0,
        }
    }

    /// Takes one notification of the call; answers the progress message it
    /// makes (its new output), if any.
    pub fn take(&mut self, note: Note) -> Option<String> {
        let Value::Object(mut params) = note.params else {
            return None;
        };
        params.remove("request_id");
        if let Some(key) = carries_id(&note.method) {
            self.id = params.remove(key).map(|id| (key, id));
            return None;
        }
        if carries_text(&note.method) {
            let stream = params.get("stream").and_then(Value::as_str)?.to_string();
            let data = params.get("data").and_then(Value::as_str)?.to_string();
            self.bytes += data.len() as u64;
            let kept = self.keep(data.len());
            let cut = floor_char(&data, kept);
            match self.texts.iter_mut().find(|(s, _)| *s == stream) {
                Some((_, text)) => text.push_str(&data[..cut]),
                None => self.texts.push((stream, data[..cut].to_string())),
            }
            return Some(data);
        }
        if let Some(key) = item_list(&note.method) {
            let item = Value::Object(params);
            let size = item.to_string().len();
            self.bytes += size as u64;
            if self.keep(size) == size {
                match self.items.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, list)) => list.push(item),
                    None => self.items.push((key, vec![item])),
                }
            }
            return Some(format!("({key}: one more)"));
        }
        None
    }

    /// The stream's id, once known.
    pub fn id(&self) -> Option<&Value> {
        self.id.as_ref().map(|(_, id)| id)
    }

    /// How much of `n` bytes fits; marks the cut.
    fn keep(&mut self, n: usize) -> usize {
        let kept = n.min(self.room);
        self.room -= kept;
        if kept < n {
            self.truncated = true;
        }
        kept
    }

    /// Puts what was forwarded into the answer, as a collected answer has it.
    pub fn fill(&self, answer: &mut Value) {
        let Value::Object(map) = answer else {
            return;
        };
        if let Some((key, id)) = &self.id {
            map.entry(*key).or_insert_with(|| id.clone());
        }
        for (stream, text) in &self.texts {
            map.entry(stream.clone())
                .or_insert_with(|| Value::String(text.clone()));
        }
        for (key, list) in &self.items {
            map.entry(*key)
                .or_insert_with(|| Value::Array(list.clone()));
        }
        if self.truncated {
            map.insert("truncated".into(), Value::Bool(true));
        }
    }

    /// The answer of a call still going: its id, the output so far and
    /// `running: true`.
    pub fn running(&self) -> Value {
        let mut answer = Value::Object(Map::new());
        self.fill(&mut answer);
        answer["running"] = Value::Bool(true);
        answer
    }

    /// The text of each stream past `seen` (bytes already seen, per stream;
    /// brought up to date), joined.
    pub fn text_since(&self, seen: &mut Vec<(String, usize)>) -> String {
        let mut news = String::new();
        for (stream, text) in &self.texts {
            let at = match seen.iter_mut().find(|(s, _)| s == stream) {
                Some((_, at)) => at,
                None => {
                    seen.push((stream.clone(), 0));
                    &mut seen.last_mut().expect("pushed").1
                }
            };
            news.push_str(&text[(*at).min(text.len())..]);
            *at = text.len();
        }
        news
    }
}

/// The largest char boundary of `s` at or below `at`.
fn floor_char(s: &str, mut at: usize) -> usize {
    at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// A successful call: the answer as `structuredContent`, a summary, images.
pub fn success(answer: Value) -> CallToolResult {
    let mut content = vec![ContentBlock::text(summary(&answer))];
    images(&answer, &mut content);
    let mut result = CallToolResult::success(content);
    result.structured_content = Some(answer);
    result
}

/// A call still going at the wait: what it has so far (`running: true`),
/// and the call that follows it on (the tool of `resume`, with the
/// arguments of it that `asked` and the answer give: the stream's id).
pub fn running(
    answer: Value,
    wait: Duration,
    resume: &str,
    asked: &Map<String, Value>,
) -> CallToolResult {
    let tool = tools::TOOLS.iter().find(|t| t.method == resume);
    let method = crate::contract::table::find(resume);
    let mut args = Map::new();
    for param in method.map(|m| m.params).unwrap_or_default() {
        if let Some(v) = answer.get(*param).or_else(|| asked.get(*param)) {
            args.insert(param.to_string(), v.clone());
        }
    }
    let text = format!(
        "still running after {} s; the output so far is below. Call `{}` {} to wait for \
         more and its end.\n{}",
        wait.as_secs(),
        tool.map_or(resume, |t| t.name),
        Value::Object(args),
        summary(&answer)
    );
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(answer);
    result
}

/// A read whose content is larger than a result carries: a `resource_link`
/// to it, and what to do.
pub fn linked(uri: &str, link: ContentBlock, size: Option<u64>, inline: usize) -> CallToolResult {
    let size_text = size.map_or("more than".to_string(), |s| format!("{s} bytes,"));
    let text = format!(
        "{uri} is {size_text} above the {inline} bytes a result carries: read it as that \
         resource (resources/read), or with this tool in parts."
    );
    let mut structured = Map::new();
    structured.insert("uri".into(), uri.into());
    if let Some(size) = size {
        structured.insert("size".into(), size.into());
    }
    let mut result = CallToolResult::success(vec![ContentBlock::text(text), link]);
    result.structured_content = Some(Value::Object(structured));
    result
}

/// A failed call: the error for the model to read, as text and structured.
pub fn failure(error: &RpcError) -> CallToolResult {
    let message = error.wire_message().into_owned();
    let text = format!("{} {message}", error.code.as_str());
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    result.structured_content = Some(json!({
        "error": {"code": error.code.as_str(), "message": message, "retryable": error.retryable}
    }));
    result
}

/// A few lines that say what the answer holds: each field as `key: value`,
/// long strings cut, lists counted.
pub fn summary(answer: &Value) -> String {
    let Value::Object(map) = answer else {
        return shown(answer);
    };
    if map.is_empty() {
        return "done".into();
    }
    let mut lines: Vec<String> = map
        .iter()
        .take(FIELDS)
        .map(|(k, v)| format!("{k}: {}", shown(v)))
        .collect();
    if map.len() > FIELDS {
        lines.push(format!("(and {} more fields)", map.len() - FIELDS));
    }
    lines.join("\n")
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(s) if s.chars().count() > SHOWN => {
            let cut: String = s.chars().take(SHOWN).collect();
            format!("{cut:?}… ({} bytes in all)", s.len())
        }
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => format!("{} item(s)", items.len()),
        Value::Object(map) => {
            let text = Value::Object(map.clone()).to_string();
            match text.chars().count() > SHOWN {
                true => format!("{}…", text.chars().take(SHOWN).collect::<String>()),
                false => text,
            }
        }
        other => other.to_string(),
    }
}

/// Image blocks for every MIME bundle in the answer (an object of MIME type
/// to base64 data, as a kernel's rich output) that holds an `image/…`.
fn images(value: &Value, out: &mut Vec<ContentBlock>) {
    match value {
        Value::Object(map) => {
            for (mime, data) in map {
                if let (true, Some(data)) = (mime.starts_with("image/"), data.as_str()) {
                    out.push(ContentBlock::image(data.to_string(), mime.clone()));
                }
            }
            map.values().for_each(|v| images(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| images(v, out)),
        _ => {}
    }
}

/// The arguments of a call as EPP params: an absent object is no params.
pub fn params(arguments: Option<Map<String, Value>>) -> Map<String, Value> {
    arguments.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_is_short_and_lists_are_counted() {
        let long = "x".repeat(1000);
        let s = summary(&json!({"exit_code": 0, "stdout": long, "files": [1, 2, 3]}));
        assert!(s.contains("exit_code: 0"), "{s}");
        assert!(s.contains("(1000 bytes in all)"), "{s}");
        assert!(s.contains("files: 3 item(s)"), "{s}");
        assert!(s.len() < 600, "{s}");
        assert_eq!(summary(&json!({})), "done");
    }

    #[test]
    fn images_of_mime_bundles_become_image_blocks() {
        let answer =
            json!({"results": [{"data": {"text/plain": "<Figure>", "image/png": "iVBOR"}}]});
        let mut blocks = Vec::new();
        images(&answer, &mut blocks);
        assert_eq!(blocks.len(), 1);
    }

    #[test]
    fn errors_carry_code_message_and_retryable() {
        let e = RpcError::fault("boom").retryable();
        let r = failure(&e);
        assert_eq!(r.is_error, Some(true));
        let s = r.structured_content.unwrap();
        assert_eq!(s["error"]["code"], "E9001");
        assert_eq!(s["error"]["retryable"], true);
    }
}
