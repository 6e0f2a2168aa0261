//! files.rw over execd's file API. Contents are streamed: a reader hands out
//! the download body chunk by chunk, a writer streams the multipart upload with
//! an exact Content-Length (which proxies in front of execd need).

use crate::bindings::exports::abx::epp::infra::{ByteRange, FileInfo, FileType};
use crate::error::{self, Error, Kind, Result, conflict, invalid, not_found};
use crate::execd::Execd;
use crate::http::{BodyReader, Timeouts, Upload, encode};
use crate::models::{ExecdFileInfo, Move, UploadMetadata};
use crate::refusal::{self, Refusal};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

/// Mode of a new file when the caller gives none.
const DEFAULT_FILE_MODE: u32 = 0o644;
/// Mode of new directories.
const DIR_MODE: u32 = 0o755;
/// Large transfers: a silent minute means trouble.
const TRANSFER: Timeouts = Timeouts {
    connect: Duration::from_secs(10),
    first_byte: Duration::from_secs(300),
    between_bytes: Duration::from_secs(120),
};

fn check_path(path: &str) -> Result<()> {
    if path.is_empty() {
        return Err(invalid("`path` is empty"));
    }
    if path.contains('\0') {
        return Err(invalid("`path` contains a NUL byte"));
    }
    Ok(())
}

/// execd writes modes as the octal digits read as a decimal number (755).
fn mode_from_execd(mode: u32) -> u32 {
    u32::from_str_radix(&mode.to_string(), 8).unwrap_or(0)
}

fn mode_to_execd(bits: u32) -> u32 {
    format!("{bits:o}").parse().unwrap_or(0)
}

pub(crate) fn file_info(raw: ExecdFileInfo) -> FileInfo {
    let name = raw
        .path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string();
    FileInfo {
        name,
        type_: match raw.kind.as_deref() {
            Some("directory") => FileType::Directory,
            Some("symlink") => FileType::Symlink,
            Some("other") => FileType::Other,
            _ => FileType::File,
        },
        size: raw.size,
        mode: mode_from_execd(raw.mode),
        owner: raw.owner,
        group: raw.group,
        modified_at: raw.modified_at,
        path: raw.path,
    }
}

/// A 404 about `path` says so in plain words (the HTTP answer kept).
fn missing(sandbox_id: &str, path: &str) -> impl Fn(Error) -> Error {
    let message = format!("{path} does not exist in sandbox {sandbox_id}");
    move |e| {
        if e.is(Kind::NotFound) {
            e.reworded(Kind::NotFound, message.clone())
        } else {
            e
        }
    }
}

pub(crate) fn info_of(execd: &mut Execd, path: &str) -> Result<FileInfo> {
    let query = format!("/files/info?path={}", encode(path));
    let resp = execd.send(|e| e.request("GET", &query), &[])?;
    let resp = execd
        .check(resp, path)
        .map_err(missing(&execd.sandbox_id, path))?;
    let map: BTreeMap<String, ExecdFileInfo> = execd.json(resp, path)?;
    map.into_values().next().map(file_info).ok_or_else(|| {
        not_found(format!(
            "{path} does not exist in sandbox {}",
            execd.sandbox_id
        ))
    })
}

pub fn get_info(sandbox_id: &str, path: &str) -> Result<FileInfo> {
    check_path(path)?;
    info_of(&mut Execd::connect(sandbox_id)?, path)
}

pub fn exists(sandbox_id: &str, path: &str) -> Result<bool> {
    check_path(path)?;
    // Resolve the sandbox first so a missing sandbox is an error, not `false`.
    let mut execd = Execd::connect(sandbox_id)?;
    match info_of(&mut execd, path) {
        Ok(_) => Ok(true),
        Err(e) if e.is(Kind::NotFound) => Ok(false),
        Err(e) => Err(e),
    }
}

pub fn list(sandbox_id: &str, path: &str, depth: u32) -> Result<Vec<FileInfo>> {
    check_path(path)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let query = format!(
        "/directories/list?path={}&depth={}",
        encode(path),
        depth.max(1)
    );
    let resp = execd.send(|e| e.request("GET", &query), &[])?;
    if resp.status == 400 {
        return Err(invalid(format!(
            "{path} is not a directory in sandbox {sandbox_id}"
        )));
    }
    let resp = execd.check(resp, path).map_err(missing(sandbox_id, path))?;
    let entries: Vec<ExecdFileInfo> = execd.json(resp, path)?;
    Ok(entries.into_iter().map(file_info).collect())
}

/// Refuses what execd's matcher would refuse (an unclosed or empty `[`, unbalanced braces,
/// a trailing `\\`, a `!` that does not open `!(…)`), so a bad pattern is E1001 even in a
/// directory without files, where execd would answer `[]`, and elsewhere not E5001 (execd's
/// 500). A `/` is refused too: execd matches names only, so the pattern would find nothing.
fn check_pattern(pattern: &str) -> Result<()> {
    if pattern.is_empty() {
        return Err(invalid(
            "`pattern` is empty; leave it out to find every file (`**`)",
        ));
    }
    if pattern.contains('\0') {
        return Err(invalid("`pattern` contains a NUL byte"));
    }
    let bad = |why: &str| {
        Err(invalid(format!(
            "`pattern` {pattern:?} is not a valid glob: {why}"
        )))
    };
    let mut name = pattern;
    while let Some(rest) = name.strip_prefix("**/") {
        name = rest;
    }
    if name.contains('/') {
        return Err(invalid(format!(
            "`pattern` {pattern:?} has a directory part, but only file names are matched, so it \
             would find nothing; put the directory in `path` and keep the name in `pattern` \
             (e.g. `*.py`)"
        )));
    }
    let p = pattern.as_bytes();
    let mut braces = 0usize;
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            b'\\' if i + 1 == p.len() => return bad("it ends with a lone `\\`"),
            b'\\' => i += 1,
            b'[' => {
                i += 1;
                if matches!(p.get(i), Some(b'!' | b'^')) {
                    i += 1;
                }
                if matches!(p.get(i), None | Some(b']')) {
                    return bad("a `[` class is empty or not closed");
                }
                while i < p.len() && p[i] != b']' {
                    i += if p[i] == b'\\' { 2 } else { 1 };
                }
                if i >= p.len() {
                    return bad("a `[` has no closing `]`");
                }
            }
            b'{' => braces += 1,
            b'}' if braces == 0 => return bad("a `}` has no opening `{`"),
            b'}' => braces -= 1,
            b'!' if p.get(i + 1) != Some(&b'(') || !closes(&p[i + 1..]) => {
                return bad("a `!` must open a negation `!(…)`; write a literal `!` as `\\!`");
            }
            _ => {}
        }
        i += 1;
    }
    if braces > 0 {
        return bad("a `{` has no closing `}`");
    }
    Ok(())
}

/// Whether the `(` that `p` starts with has its `)` (nested pairs counted, `\\` escapes).
fn closes(p: &[u8]) -> bool {
    let mut depth = 0;
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            b'\\' => i += 1,
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return true;
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// `GET /files/search`: execd walks `path` (symlinks not followed) and lists the files
/// whose name matches `pattern`.
pub fn search(sandbox_id: &str, path: &str, pattern: &str) -> Result<Vec<FileInfo>> {
    check_path(path)?;
    check_pattern(pattern)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let query = format!(
        "/files/search?path={}&pattern={}",
        encode(path),
        encode(pattern)
    );
    let resp = execd.send(|e| e.request("GET", &query), &[])?;
    let resp = execd.check(resp, path).map_err(missing(sandbox_id, path))?;
    let entries: Vec<ExecdFileInfo> = execd.json(resp, path)?;
    Ok(entries.into_iter().map(file_info).collect())
}

pub fn make_dir(sandbox_id: &str, path: &str) -> Result<bool> {
    check_path(path)?;
    let mut execd = Execd::connect(sandbox_id)?;
    match info_of(&mut execd, path) {
        Ok(info) if info.type_ == FileType::Directory => return Ok(false),
        Ok(_) => {
            return Err(conflict(format!(
                "{path} exists in sandbox {sandbox_id} and is not a directory"
            )));
        }
        Err(e) if e.is(Kind::NotFound) => {}
        Err(e) => return Err(e),
    }
    let body = serde_json::json!({ path: {"mode": mode_to_execd(DIR_MODE)} }).to_string();
    let resp = execd.send(
        |e| {
            Ok(e.request("POST", "/directories")?
                .header("content-type", "application/json"))
        },
        body.as_bytes(),
    )?;
    execd.check(resp, path).map(|_| true)
}

pub fn remove(sandbox_id: &str, path: &str) -> Result<()> {
    check_path(path)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let info = info_of(&mut execd, path)?;
    let endpoint = if info.type_ == FileType::Directory {
        "/directories"
    } else {
        "/files"
    };
    let query = format!("{endpoint}?path={}", encode(path));
    let resp = execd.send(|e| e.request("DELETE", &query), &[])?;
    execd.check(resp, path).map(drop)
}

pub fn rename(sandbox_id: &str, old_path: &str, new_path: &str) -> Result<FileInfo> {
    check_path(old_path)?;
    check_path(new_path)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let body = serde_json::to_vec(&[Move {
        src: old_path,
        dest: new_path,
    }])
    .expect("serialisable");
    let resp = execd.send(
        |e| {
            Ok(e.request("POST", "/files/mv")?
                .header("content-type", "application/json"))
        },
        &body,
    )?;
    if resp.status == 500 {
        let status = resp.status;
        let text = resp.read_all(64 * 1024).unwrap_or_default();
        if refusal::of_answer(status, &text) == Refusal::Exists {
            return Err(conflict(format!(
                "{new_path} already exists in sandbox {sandbox_id}; remove it first"
            )));
        }
        return Err(error::status(status, &text, execd.target(), old_path));
    }
    execd
        .check(resp, old_path)
        .map_err(missing(sandbox_id, old_path))?;
    info_of(&mut execd, new_path)
}

pub struct FileReader {
    inner: RefCell<Option<BodyReader>>,
    size: Option<u64>,
    target: String,
}

impl FileReader {
    pub fn size(&self) -> Option<u64> {
        self.size
    }

    pub fn read(&self, max: u32) -> Result<Option<Vec<u8>>> {
        let mut inner = self.inner.borrow_mut();
        let Some(body) = inner.as_mut() else {
            return Ok(None);
        };
        match body.read(max.clamp(1, 4 << 20) as usize) {
            Ok(Some(chunk)) => Ok(Some(chunk)),
            Ok(None) => {
                *inner = None;
                Ok(None)
            }
            Err(t) => {
                *inner = None;
                Err(error::broken_body(t, &self.target))
            }
        }
    }
}

pub fn read(sandbox_id: &str, path: &str, range: Option<ByteRange>) -> Result<FileReader> {
    check_path(path)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let query = format!("/files/download?path={}", encode(path));
    let range_header = match range {
        Some(ByteRange {
            length: Some(0), ..
        }) => return Err(invalid("`length` must be at least 1")),
        // execd parses the end as an int64: a longer range stops at the largest one
        // (execd ≥ 1.1.1 then clamps it to the end of the file, #2089).
        Some(ByteRange {
            offset,
            length: Some(len),
        }) => Some(format!(
            "bytes={offset}-{}",
            offset.saturating_add(len - 1).min(i64::MAX as u64)
        )),
        Some(ByteRange {
            offset,
            length: None,
        }) if offset > 0 => Some(format!("bytes={offset}-")),
        _ => None,
    };
    let resp = execd.send(
        |e| {
            let req = e.request("GET", &query)?.timeouts(TRANSFER);
            Ok(match &range_header {
                Some(r) => req.header("range", r.clone()),
                None => req,
            })
        },
        &[],
    )?;
    if resp.status == 416 {
        return Err(invalid(format!("the range is beyond the end of {path}")));
    }
    let resp = execd.check(resp, path).map_err(missing(sandbox_id, path))?;
    let size = resp
        .header("content-length")
        .and_then(|v| v.trim().parse().ok());
    Ok(FileReader {
        inner: RefCell::new(Some(resp.into_reader())),
        size,
        target: execd.target().to_string(),
    })
}

pub struct FileWriter {
    inner: RefCell<Option<WriterState>>,
}

struct WriterState {
    upload: Upload,
    execd: Execd,
    path: String,
    remaining: u64,
    epilogue: Vec<u8>,
}

/// A fresh multipart boundary (random, so no file content can contain it by chance).
pub(crate) fn boundary() -> String {
    format!(
        "epp-{:016x}{:016x}",
        wasip2::random::random::get_random_u64(),
        wasip2::random::random::get_random_u64()
    )
}

/// The parts in front of one file's bytes: OpenSandbox pairs a `metadata` part
/// with a `file` part, and both must be file parts.
pub(crate) fn pair_head(boundary: &str, path: &str, mode: u32) -> String {
    let metadata = serde_json::to_string(&UploadMetadata {
        path,
        mode: mode_to_execd(mode),
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
pub(crate) fn close(boundary: &str) -> String {
    format!("\r\n--{boundary}--")
}

/// Starts `POST /files/upload` of a multipart body of exactly `length` bytes
/// (an exact Content-Length: proxies in front of execd need one).
pub(crate) fn start_upload(execd: &Execd, boundary: &str, length: u64) -> Result<Upload> {
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
pub(crate) fn check_write(path: &str, mode: Option<u32>) -> Result<u32> {
    check_path(path)?;
    if path.ends_with('/') {
        return Err(invalid(format!(
            "{path} names a directory; give a file path"
        )));
    }
    let mode = mode.unwrap_or(DEFAULT_FILE_MODE);
    if mode > 0o7777 {
        return Err(invalid(format!(
            "mode {mode:o} of {path} is not a permission mode"
        )));
    }
    Ok(mode)
}

pub fn write(sandbox_id: &str, path: &str, size: u64, mode: Option<u32>) -> Result<FileWriter> {
    let mode = check_write(path, mode)?;
    let execd = Execd::connect(sandbox_id)?;
    let boundary = boundary();
    let preamble = pair_head(&boundary, path, mode).into_bytes();
    let epilogue = close(&boundary).into_bytes();
    let total = preamble.len() as u64 + size + epilogue.len() as u64;
    let mut upload = start_upload(&execd, &boundary, total)?;
    upload.write(&preamble).map_err(|t| execd.transport(t))?;
    Ok(FileWriter {
        inner: RefCell::new(Some(WriterState {
            upload,
            execd,
            path: path.to_string(),
            remaining: size,
            epilogue,
        })),
    })
}

impl FileWriter {
    pub fn write(&self, chunk: Vec<u8>) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        let Some(state) = inner.as_mut() else {
            return Err(invalid("this writer is already finished or failed"));
        };
        if chunk.len() as u64 > state.remaining {
            // Abandon: dropping the upload unfinished leaves the old file in place.
            *inner = None;
            return Err(invalid(
                "more bytes were written than the size announced to files-write",
            ));
        }
        state.remaining -= chunk.len() as u64;
        if let Err(t) = state.upload.write(&chunk) {
            let target = state.execd.target().to_string();
            *inner = None;
            return Err(error::transport(t, &target));
        }
        Ok(())
    }

    pub fn finish(&self) -> Result<FileInfo> {
        let Some(mut state) = self.inner.borrow_mut().take() else {
            return Err(invalid("this writer is already finished or failed"));
        };
        if state.remaining != 0 {
            return Err(invalid(format!(
                "{} bytes fewer were written than announced; the file was not changed",
                state.remaining
            )));
        }
        let target = state.execd.target().to_string();
        let resp = state
            .upload
            .finish_with(&state.epilogue)
            .map_err(|t| error::transport(t, &target))?;
        state.execd.check(resp, &state.path)?;
        info_of(&mut state.execd, &state.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_execd_refuses_are_refused_here() {
        for ok in [
            "**",
            "*.py",
            "**/*.py",
            "**/**/x",
            "a?.txt",
            "[a-c]x",
            "[!a]*",
            "[^a]",
            "*.{py,rs}",
            "{a,{b,c}}",
            "\\*",
            "\\!",
            "!(*.py)",
            "test_!(*.{py,rs})",
            "!((a))",
            "x[\\]]",
            "ü*",
        ] {
            assert!(check_pattern(ok).is_ok(), "{ok}: {:?}", check_pattern(ok));
        }
        for (bad, says) in [
            ("", "empty"),
            ("[", "class"),
            ("[]", "class"),
            ("[!]", "class"),
            ("[]a]", "class"),
            ("[ab", "closing `]`"),
            ("x[\\]", "closing `]`"),
            ("{a,b", "closing `}`"),
            ("a}", "opening `{`"),
            ("a\\", "lone"),
            ("a!b", "`!(…)`"),
            ("!(a", "`!(…)`"),
            ("!", "`!(…)`"),
            ("src/*.py", "directory part"),
            ("**/src/*.py", "directory part"),
            ("*.py/**", "directory part"),
        ] {
            let e = check_pattern(bad).expect_err(bad);
            assert_eq!(e.kind, Kind::Invalid);
            assert!(e.message.contains(says), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn modes_round_trip() {
        assert_eq!(mode_from_execd(755), 0o755);
        assert_eq!(mode_to_execd(0o644), 644);
        assert_eq!(mode_from_execd(mode_to_execd(0o4755)), 0o4755);
    }
}
