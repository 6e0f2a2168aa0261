//! RFC 6570 URI templates of the two kinds the contract's `resource=` tags
//! use: `{name}` (simple: percent-encodes everything but unreserved
//! characters) and `{+name}` (reserved: keeps `/`, `:` and the like). A
//! template is matched against a URI to get its variables back, and expanded
//! to make the URI of a resource (a `resource_link`).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde_json::{Map, Value};

/// What `{name}` leaves as it is: RFC 3986 unreserved characters.
const SIMPLE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// What `{+name}` leaves as it is: unreserved and reserved characters (and
/// `%`, so that an encoded triplet passes through).
const RESERVED: &AsciiSet = &SIMPLE
    .remove(b':')
    .remove(b'/')
    .remove(b'?')
    .remove(b'#')
    .remove(b'[')
    .remove(b']')
    .remove(b'@')
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=')
    .remove(b'%');

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Literal(String),
    Var { name: String, reserved: bool },
}

/// A parsed template.
#[derive(Clone, Debug)]
pub struct Template {
    pub text: &'static str,
    parts: Vec<Part>,
}

impl Template {
    /// Parses `text` (checked by host/build.rs, so any form is read leniently).
    pub fn new(text: &'static str) -> Template {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else {
                break;
            };
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_string()));
            }
            let var = &rest[open + 1..open + close];
            parts.push(match var.strip_prefix('+') {
                Some(name) => Part::Var {
                    name: name.into(),
                    reserved: true,
                },
                None => Part::Var {
                    name: var.into(),
                    reserved: false,
                },
            });
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_string()));
        }
        Template { text, parts }
    }

    /// The variables of `uri`, decoded, if it is a URI of this template. A
    /// simple variable takes no `/`; each variable runs to the first place
    /// where the literal after it follows (the last one to the end).
    pub fn matches(&self, uri: &str) -> Option<Map<String, Value>> {
        let mut vars = Map::new();
        let mut rest = uri;
        let mut parts = self.parts.iter().peekable();
        while let Some(part) = parts.next() {
            match part {
                Part::Literal(text) => rest = rest.strip_prefix(text.as_str())?,
                Part::Var { name, reserved } => {
                    let end = match parts.peek() {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        Some(Part::Var { .. }) => return None,
                        None => rest.len(),
                    };
                    let raw = &rest[..end];
                    if raw.is_empty() || (!reserved && raw.contains('/')) {
                        return None;
                    }
                    let value = percent_decode_str(raw).decode_utf8().ok()?;
                    vars.insert(name.clone(), Value::String(value.into_owned()));
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(vars)
    }

    /// The URI of the resource `params` name (every variable a string in
    /// them), or none.
    pub fn expand(&self, params: &Map<String, Value>) -> Option<String> {
        let mut uri = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => uri.push_str(text),
                Part::Var { name, reserved } => {
                    let value = params.get(name)?.as_str()?;
                    let set = if *reserved { RESERVED } else { SIMPLE };
                    uri.extend(utf8_percent_encode(value, set));
                }
            }
        }
        Some(uri)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FILES: &str = "sandbox://{sandbox_id}/files/{+path}";

    #[test]
    fn a_uri_gives_its_variables_back() {
        let t = Template::new(FILES);
        let vars = t.matches("sandbox://sbx-1/files//tmp/a%20b.txt").unwrap();
        assert_eq!(
            Value::Object(vars),
            json!({"sandbox_id": "sbx-1", "path": "/tmp/a b.txt"})
        );
        let vars = t.matches("sandbox://sbx-1/files/etc/hosts").unwrap();
        assert_eq!(vars["path"], "etc/hosts");
        assert!(t.matches("sandbox://sbx-1/other/x").is_none());
        assert!(
            t.matches("sandbox://a/b/files/x").is_none(),
            "no / in a simple var"
        );
        assert!(t.matches("sandbox://sbx-1/files/").is_none(), "empty path");
        assert!(t.matches("file:///etc/hosts").is_none());
    }

    #[test]
    fn expansion_is_rfc_6570_and_round_trips() {
        let t = Template::new(FILES);
        let params = json!({"sandbox_id": "s 1", "path": "/tmp/ü x/a.txt"});
        let params = params.as_object().unwrap();
        let uri = t.expand(params).unwrap();
        assert_eq!(uri, "sandbox://s%201/files//tmp/%C3%BC%20x/a.txt");
        assert_eq!(&t.matches(&uri).unwrap(), params);
        assert!(t.expand(&Map::new()).is_none());
    }
}
