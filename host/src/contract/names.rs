//! Wire names of WIT names (docs/epp-1.md §8). Shared by the build script,
//! which names the methods, and the codec, which names fields and cases, so
//! the two can never disagree.

/// A method: the first `-` becomes `.`, the others `_` (`sandbox-get-info` is
/// `sandbox.get_info`).
pub fn method(wit: &str) -> String {
    match wit.split_once('-') {
        Some((group, rest)) => format!("{group}.{}", rest.replace('-', "_")),
        None => wit.to_string(),
    }
}

/// A capability flag: the first `-` becomes `.` (`files-rw` is `files.rw`).
pub fn capability(wit: &str) -> String {
    wit.replacen('-', ".", 1)
}

/// A field, param, enum case, variant case or flag: `-` becomes `_`.
pub fn field(wit: &str) -> String {
    wit.replace('-', "_")
}

/// An integer field named `*-ms` is `*`, in seconds, on the wire.
pub fn seconds(wit: &str) -> Option<&str> {
    wit.strip_suffix("-ms").filter(|stem| !stem.is_empty())
}

/// An integer field named `mode` is a permission mode, octal on the wire.
pub fn is_mode(wit: &str) -> bool {
    wit == "mode"
}

/// The wire name of a field of integer type (`timeout-ms` is `timeout`).
pub fn integer_field(wit: &str) -> String {
    field(seconds(wit).unwrap_or(wit))
}
