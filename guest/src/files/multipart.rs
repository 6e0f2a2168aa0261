//! The multipart body of `POST /files/upload`, written as it goes: OpenSandbox
//! pairs a `metadata` part with a `file` part per file, both file parts, and
//! the body has an exact Content-Length (proxies in front of execd need one).

use super::{Owner, TRANSFER, check_mode, check_path, mode_to_execd};
use crate::error::{Result, invalid};
use crate::execd::Execd;
use crate::http::Upload;
use crate::models::UploadMetadata;
use serde::Serialize;

/// Mode of a new file when the caller gives none.
const DEFAULT_FILE_MODE: u32 = 0o644;

/// A fresh multipart boundary (random, so no file content can contain it by chance).
pub fn boundary() -> String {
    format!(
        "epp-{:016x}{:016x}",
        wasip2::random::random::get_random_u64(),
        wasip2::random::random::get_random_u64()
    )
}

/// A file's `metadata` part: its path and mode, and its owner and group as
/// names (execd looks them up by name only; `Owner::resolved` gives them).
#[derive(Serialize)]
struct Metadata<'a> {
    #[serde(flatten)]
    file: UploadMetadata<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<&'a str>,
}

/// The parts in front of one file's bytes: OpenSandbox pairs a `metadata` part
/// with a `file` part, and both must be file parts.
pub fn pair_head(boundary: &str, path: &str, mode: u32, owner: &Owner) -> String {
    let metadata = serde_json::to_string(&Metadata {
        file: UploadMetadata {
            path,
            mode: mode_to_execd(mode),
        },
        owner: owner.user.as_deref(),
        group: owner.group.as_deref(),
    })
    .expect("serialisable");
    format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n\
         Content-Type: application/json\r\n\r\n{metadata}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"file\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
}

/// What ends the last file's bytes and the body. Nothing after the close
/// delimiter (RFC 2046 allows an empty epilogue): a server may answer as soon
/// as it has parsed it, and bytes it never reads would race that answer on a
/// kept-alive connection.
pub fn close(boundary: &str) -> String {
    format!("\r\n--{boundary}--")
}

/// Starts `POST /files/upload` of a multipart body of exactly `length` bytes
/// (an exact Content-Length: proxies in front of execd need one).
pub fn start_upload(execd: &Execd, boundary: &str, length: u64) -> Result<Upload> {
    execd
        .request("POST", "/files/upload")?
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .header("content-length", length.to_string())
        .timeouts(TRANSFER)
        .start()
        .map_err(|t| execd.transport(t))
}

/// Checks a file path to write and the mode to give it (the default when none).
pub fn check_write(path: &str, mode: Option<u32>) -> Result<u32> {
    check_path(path)?;
    if path.ends_with('/') {
        return Err(invalid(format!(
            "{path} names a directory; give a file path"
        )));
    }
    let mode = mode.unwrap_or(DEFAULT_FILE_MODE);
    check_mode(path, mode)?;
    Ok(mode)
}
