//! `/files/*` and `/directories*` (upload lives in `upload.rs`), following execd's
//! `filesystem.go`, `filesystem_download.go` and `utils.go`, error texts included.

use std::collections::BTreeMap;
use std::fs::{self, Metadata};
use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode, header};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::paths;
use crate::sys::{self, path_err};
use crate::web::{self as h, FILE_NOT_FOUND, INVALID_REQUEST, Query, Resp};

/// execd's `model.FileInfo` (Permission fields inlined).
#[derive(Serialize)]
pub struct FileInfo {
    #[serde(skip_serializing_if = "String::is_empty")]
    path: String,
    #[serde(rename = "type")]
    kind: &'static str,
    size: i64,
    modified_at: String,
    created_at: String,
    owner: String,
    group: String,
    mode: u32,
}

pub fn file_info(path: &str, md: &Metadata) -> FileInfo {
    let ft = md.file_type();
    let kind = if ft.is_symlink() {
        "symlink"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_file() {
        "file"
    } else {
        "other"
    };
    // `mode` is an int whose decimal digits spell the octal permission (0o755 -> 755).
    let mode = format!("{:o}", md.mode() & 0o777).parse().unwrap_or(0);
    FileInfo {
        path: path.to_string(),
        kind,
        size: md.size() as i64,
        modified_at: h::rfc3339(md.mtime(), md.mtime_nsec() as u32),
        // execd reports the inode change time as "created_at" on Linux.
        created_at: h::rfc3339(md.ctime(), md.ctime_nsec() as u32),
        owner: sys::user_name(md.uid()),
        group: sys::group_name(md.gid()),
        mode,
    }
}

/// An error that remembers whether it is Go's `fs.ErrNotExist` (-> 404) or not (-> 500).
pub struct FsError {
    pub not_found: bool,
    pub msg: String,
}

impl FsError {
    pub fn other(msg: impl Into<String>) -> Self {
        FsError {
            not_found: false,
            msg: msg.into(),
        }
    }

    pub fn io(msg: String, e: &io::Error) -> Self {
        FsError {
            not_found: e.kind() == io::ErrorKind::NotFound,
            msg,
        }
    }
}

/// `handleFileError`.
fn file_error(e: FsError) -> Resp {
    if e.not_found {
        h::error(
            StatusCode::NOT_FOUND,
            FILE_NOT_FOUND,
            format!("file not found. {}", e.msg),
        )
    } else {
        h::runtime_error(format!("error accessing file: {}", e.msg))
    }
}

fn bad_body(e: String) -> Resp {
    h::error(
        StatusCode::BAD_REQUEST,
        INVALID_REQUEST,
        format!("error parsing request, MAYBE invalid body format. {e}"),
    )
}

async fn json_body<T: serde::de::DeserializeOwned + Default>(
    req: Request<Incoming>,
) -> Result<T, Resp> {
    let body = h::read_body(req.into_body()).await.map_err(bad_body)?;
    h::decode_json(&body).map_err(bad_body)
}

fn get_file_info(path: &str) -> Result<FileInfo, FsError> {
    let abs =
        paths::expand_abs(path).map_err(|e| FsError::other(format!("invalid path {path}: {e}")))?;
    match fs::symlink_metadata(&abs) {
        Ok(md) => Ok(file_info(&abs, &md)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(FsError::io(
            format!("file not found: {path}: {}", path_err("lstat", &abs, &e)),
            &e,
        )),
        Err(e) => Err(FsError::io(
            format!(
                "error accessing file {path}: {}",
                path_err("lstat", &abs, &e)
            ),
            &e,
        )),
    }
}

/// GET /files/info — all or nothing: one missing path fails the whole call with 404.
pub fn info(q: &Query) -> Resp {
    let mut out = BTreeMap::new();
    for p in q.all("path") {
        match get_file_info(p) {
            Ok(fi) => {
                out.insert(p.to_string(), fi);
            }
            Err(e) => return file_error(e),
        }
    }
    h::json(StatusCode::OK, &out)
}

/// DELETE /files — missing files are fine, directories are refused.
pub fn remove_files(q: &Query) -> Resp {
    for p in q.all("path") {
        let res = (|| -> Result<(), String> {
            let abs = paths::expand_abs(p).map_err(|e| format!("invalid path: {e}"))?;
            match fs::metadata(&abs) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(path_err("stat", &abs, &e)),
                Ok(md) if md.is_dir() => return Err(format!("path is a directory: {p}")),
                Ok(_) => {}
            }
            fs::remove_file(&abs)
                .map_err(|e| format!("failed to remove file: {}", path_err("remove", &abs, &e)))
        })();
        if let Err(e) = res {
            return h::runtime_error(format!("error removing file {p}. {e}"));
        }
    }
    h::ok()
}

/// `model.Permission`.
#[derive(Deserialize, Default)]
pub struct Permission {
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub mode: Option<i64>,
}

/// `ChmodFile`: `mode` 0 leaves the mode alone; its decimal digits are read as octal.
pub fn chmod_file(abs: &str, perm: &Permission) -> Result<(), FsError> {
    let mode = perm.mode.unwrap_or(0);
    if mode != 0 {
        let digits = mode.to_string();
        let m = u32::from_str_radix(&digits, 8).map_err(|_| {
            FsError::other(format!(
                "strconv.ParseUint: parsing \"{digits}\": invalid syntax"
            ))
        })?;
        fs::set_permissions(abs, fs::Permissions::from_mode(m))
            .map_err(|e| FsError::io(path_err("chmod", abs, &e), &e))?;
    }
    set_ownership(
        abs,
        perm.owner.as_deref().unwrap_or(""),
        perm.group.as_deref().unwrap_or(""),
    )
}

fn set_ownership(abs: &str, owner: &str, group: &str) -> Result<(), FsError> {
    if owner.is_empty() && group.is_empty() {
        return Ok(());
    }
    let uid = if owner.is_empty() {
        None
    } else {
        Some(sys::uid_by_name(owner).ok_or_else(|| {
            FsError::other(format!(
                "failed to lookup user {owner}: user: unknown user {owner}"
            ))
        })?)
    };
    let gid = if group.is_empty() {
        None
    } else {
        Some(sys::gid_by_name(group).ok_or_else(|| {
            FsError::other(format!(
                "failed to lookup group {group}: group: unknown group {group}"
            ))
        })?)
    };
    sys::chown(abs, uid, gid).map_err(|e| {
        FsError::io(
            format!(
                "failed to set owner/group for {abs}: {}",
                path_err("chown", abs, &e)
            ),
            &e,
        )
    })
}

/// POST /files/permissions — `{"<path>": {mode?, owner?, group?}}`.
pub async fn chmod_files(req: Request<Incoming>) -> Resp {
    let body: BTreeMap<String, Permission> = match json_body(req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    for (file, perm) in &body {
        let res = paths::expand_abs(file)
            .map_err(FsError::other)
            .and_then(|abs| chmod_file(&abs, perm));
        if let Err(e) = res {
            return h::runtime_error(format!("error changing permissions for {file}. {}", e.msg));
        }
    }
    h::ok()
}

#[derive(Deserialize, Default)]
struct RenameItem {
    #[serde(default)]
    src: String,
    #[serde(default)]
    dest: String,
}

fn rename_file(item: &RenameItem) -> Result<(), FsError> {
    let src = paths::expand_abs(&item.src)
        .map_err(|e| FsError::other(format!("invalid source path: {e}")))?;
    let dst = paths::expand_abs(&item.dest)
        .map_err(|e| FsError::other(format!("invalid destination path: {e}")))?;
    if let Err(e) = fs::metadata(&src)
        && e.kind() == io::ErrorKind::NotFound
    {
        return Err(FsError::io(
            format!(
                "source path not found: {}: {}",
                item.src,
                path_err("stat", &src, &e)
            ),
            &e,
        ));
    }
    let parent = paths::dir(&dst);
    mkdir_all(&parent).map_err(|e| {
        FsError::io(
            format!("failed to create destination directory: {}", e.0),
            &e.1,
        )
    })?;
    if fs::metadata(&dst).is_ok() {
        return Err(FsError::other(format!(
            "destination path already exists: {}",
            item.dest
        )));
    }
    fs::rename(&src, &dst).map_err(|e| {
        FsError::io(
            format!(
                "failed to rename file: rename {src} {dst}: {}",
                sys::errno_text(&e)
            ),
            &e,
        )
    })
}

/// POST /files/mv — `[{src, dest}]`, in order, stopping at the first failure.
pub async fn rename_files(req: Request<Incoming>) -> Resp {
    let items: Vec<RenameItem> = match json_body(req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    for item in &items {
        if let Err(e) = rename_file(item) {
            return file_error(e);
        }
    }
    h::ok()
}

/// Go's `os.MkdirAll(path, 0777)`; the error carries Go's message and the io::Error.
pub fn mkdir_all(path: &str) -> Result<(), (String, io::Error)> {
    match fs::metadata(path) {
        Ok(md) if md.is_dir() => return Ok(()),
        Ok(_) => {
            let e = io::Error::from_raw_os_error(libc::ENOTDIR);
            return Err((path_err("mkdir", path, &e), e));
        }
        Err(_) => {}
    }
    let parent = paths::dir(path);
    if parent != path && parent != "." {
        mkdir_all(&parent)?;
    }
    match fs::create_dir(path) {
        Ok(()) => Ok(()),
        // Lost a race with someone else creating it: fine if it is a directory now.
        Err(_) if fs::metadata(path).is_ok_and(|m| m.is_dir()) => Ok(()),
        Err(e) => Err((path_err("mkdir", path, &e), e)),
    }
}

/// POST /directories — `mkdir -p`; permissions only for a newly created leaf (v1.0.19).
pub async fn make_dirs(req: Request<Incoming>) -> Resp {
    let body: BTreeMap<String, Permission> = match json_body(req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    for (dir, perm) in &body {
        let res = (|| -> Result<(), FsError> {
            let abs = paths::expand_abs(dir).map_err(FsError::other)?;
            let existed = fs::metadata(&abs).is_ok();
            mkdir_all(&abs).map_err(|(m, e)| FsError::io(m, &e))?;
            if !existed {
                chmod_file(&abs, perm)?;
            }
            Ok(())
        })();
        if let Err(e) = res {
            return file_error(e);
        }
    }
    h::ok()
}

/// DELETE /directories — `rm -rf` (Go's `os.RemoveAll`), missing paths are fine.
pub fn remove_dirs(q: &Query) -> Resp {
    for dir in q.all("path") {
        let resolved = match paths::expand(dir) {
            Ok(p) => p,
            Err(e) => {
                return h::runtime_error(format!("error resolving directory {dir}. {e}"));
            }
        };
        let res = match fs::symlink_metadata(&resolved) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
            Ok(md) if md.is_dir() => fs::remove_dir_all(&resolved),
            Ok(_) => fs::remove_file(&resolved),
        };
        if let Err(e) = res
            && e.kind() != io::ErrorKind::NotFound
        {
            return h::runtime_error(format!(
                "error removing directory {dir}. {}",
                path_err("unlinkat", &resolved, &e)
            ));
        }
    }
    h::ok()
}

/// Sorted directory entry names (Go's `os.ReadDir` order).
fn read_dir_sorted(dir: &str) -> io::Result<Vec<String>> {
    let mut names: Vec<String> = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<io::Result<_>>()?;
    names.sort();
    Ok(names)
}

fn join(dir: &str, name: &str) -> String {
    paths::clean(&format!("{dir}/{name}"))
}

/// GET /directories/list?path=&depth= — children after their parent, symlinks not followed.
pub fn list_directory(q: &Query) -> Resp {
    let path = match q.required("path") {
        Ok(v) => v,
        Err(resp) => return resp,
    };
    let mut depth = 1usize;
    let raw = q.get("depth");
    if !raw.is_empty() {
        match raw.parse::<i64>() {
            Ok(d) if d >= 0 => depth = d as usize,
            _ => {
                return h::error(
                    StatusCode::BAD_REQUEST,
                    INVALID_REQUEST,
                    format!("invalid query parameter 'depth': {raw}"),
                );
            }
        }
    }
    let abs = match paths::expand_abs(path) {
        Ok(a) => a,
        Err(e) => {
            return h::runtime_error(format!("error converting path {path} to absolute. {e}"));
        }
    };
    let md = match fs::symlink_metadata(&abs) {
        Ok(md) => md,
        Err(e) => return file_error(FsError::io(path_err("lstat", &abs, &e), &e)),
    };
    if md.file_type().is_symlink() {
        return h::error(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            format!("path is a symbolic link, refusing to traverse: {abs}"),
        );
    }
    if !md.is_dir() {
        return h::error(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            format!("path is not a directory: {abs}"),
        );
    }
    fn walk(dir: &str, level: usize, max: usize, out: &mut Vec<FileInfo>) -> Result<(), String> {
        let names = read_dir_sorted(dir).map_err(|e| path_err("open", dir, &e))?;
        for name in names {
            let p = join(dir, &name);
            let md = fs::symlink_metadata(&p).map_err(|e| path_err("lstat", &p, &e))?;
            out.push(file_info(&p, &md));
            if md.is_dir() && level + 1 < max {
                walk(&p, level + 1, max, out)?;
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    if depth > 0
        && let Err(e) = walk(&abs, 0, depth, &mut out)
    {
        return h::runtime_error(format!("error listing directory {abs}. {e}"));
    }
    h::json(StatusCode::OK, &out)
}

/// GET /files/search?path=&pattern= — files only, recursive (Go's `filepath.Walk`, which
/// does not follow symlinks), pattern matched against the base name.
pub fn search(q: &Query) -> Resp {
    let path = match q.required("path") {
        Ok(v) => v,
        Err(resp) => return resp,
    };
    let abs = match paths::expand_abs(path) {
        Ok(a) => a,
        Err(e) => {
            return h::runtime_error(format!("error converting path {path} to absolute. {e}"));
        }
    };
    if let Err(e) = fs::metadata(&abs) {
        return file_error(FsError::io(path_err("stat", &abs, &e), &e));
    }
    let pattern = match q.get("pattern") {
        "" => "**",
        p => p,
    };
    fn walk(p: &str, md: Metadata, pattern: &str, out: &mut Vec<FileInfo>) -> Result<(), String> {
        if md.is_dir() {
            let names = read_dir_sorted(p)
                .map_err(|e| format!("error accessing path {p}: {}", path_err("open", p, &e)))?;
            for name in names {
                let child = join(p, &name);
                match fs::symlink_metadata(&child) {
                    Ok(m) => walk(&child, m, pattern, out)?,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(format!(
                            "error accessing path {child}: {}",
                            path_err("lstat", &child, &e)
                        ));
                    }
                }
            }
            return Ok(());
        }
        let name = paths::base(p);
        let hit = crate::glob::matches(pattern, &name)
            .map_err(|_| format!("invalid pattern {pattern}: syntax error in pattern"))?;
        if hit {
            out.push(file_info(p, &md));
        }
        Ok(())
    }
    let mut out = Vec::new();
    let res = match fs::symlink_metadata(&abs) {
        Ok(md) => walk(&abs, md, pattern, &mut out),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!(
            "error accessing path {abs}: {}",
            path_err("lstat", &abs, &e)
        )),
    };
    match res {
        Ok(()) => h::json(StatusCode::OK, &out),
        Err(e) => h::runtime_error(format!("error searching files. {e}")),
    }
}

#[derive(Deserialize, Default)]
struct ReplaceItem {
    #[serde(default)]
    old: Option<String>,
    #[serde(default)]
    new: Option<String>,
}

#[derive(Serialize)]
struct ReplaceResult {
    #[serde(rename = "replacedCount")]
    replaced_count: usize,
}

/// POST /files/replace[?verbose=true] — `{"<path>": {old, new}}`, whole-file rewrite.
pub async fn replace(req: Request<Incoming>) -> Resp {
    let verbose = Query::parse(req.uri().query()).get("verbose") == "true";
    let body: BTreeMap<String, ReplaceItem> = match json_body(req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let mut results = BTreeMap::new();
    for (file, item) in &body {
        let abs = match paths::expand_abs(file) {
            Ok(a) => a,
            Err(e) => return file_error(FsError::other(e)),
        };
        if let Err(e) = fs::metadata(&abs) {
            return file_error(FsError::io(path_err("stat", &abs, &e), &e));
        }
        let content = match fs::read(&abs) {
            Ok(c) => c,
            Err(e) => return file_error(FsError::io(path_err("open", &abs, &e), &e)),
        };
        let old = item.old.as_deref().unwrap_or("");
        if old.is_empty() {
            return h::error(
                StatusCode::BAD_REQUEST,
                INVALID_REQUEST,
                "old content must not be empty",
            );
        }
        // Go works on the raw bytes of the file; so do we.
        let (new_content, count) = replace_all(
            &content,
            old.as_bytes(),
            item.new.as_deref().unwrap_or("").as_bytes(),
        );
        // Truncate-and-write keeps the file's mode and owner, like os.WriteFile does.
        if let Err(e) = fs::write(&abs, &new_content) {
            return file_error(FsError::io(path_err("open", &abs, &e), &e));
        }
        if verbose {
            results.insert(
                file.clone(),
                ReplaceResult {
                    replaced_count: count,
                },
            );
        }
    }
    if verbose {
        h::json(StatusCode::OK, &results)
    } else {
        h::ok()
    }
}

fn replace_all(hay: &[u8], old: &[u8], new: &[u8]) -> (Vec<u8>, usize) {
    let mut out = Vec::with_capacity(hay.len());
    let mut count = 0;
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(old) {
            out.extend_from_slice(new);
            i += old.len();
            count += 1;
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    (out, count)
}

/// Streams `len` bytes of `file` from its current position into a body channel, on a
/// blocking thread, so large downloads never sit in memory.
fn stream_file(mut file: fs::File, mut len: u64) -> h::Body {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while len > 0 {
            let want = buf.len().min(len as usize);
            match file.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => {
                    len -= n as u64;
                    if tx
                        .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                        .is_err()
                    {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });
    h::channel_body(rx)
}

/// Content-Disposition as execd builds it (RFC 5987 form for non-ASCII names).
fn content_disposition(name: &str) -> String {
    if name.is_ascii() {
        format!("attachment; filename=\"{name}\"")
    } else {
        let enc = h::path_escape(name);
        format!("attachment; filename=\"{enc}\"; filename*=UTF-8''{enc}")
    }
}

enum RangeSpec {
    /// (start, length) of the first satisfiable range.
    One(u64, u64),
    /// Every range started past EOF (Go's ServeContent then answers 416 itself).
    NoOverlap,
    /// Nothing usable (e.g. "bytes="): serve the whole file.
    None,
}

/// execd's `ParseRange`, keeping only what the handler uses (the first range).
fn parse_range(s: &str, size: u64) -> Result<RangeSpec, ()> {
    let spec = s.strip_prefix("bytes=").ok_or(())?;
    let mut skipped = false;
    for ra in spec.split(',') {
        let ra = ra.trim();
        if ra.is_empty() {
            continue;
        }
        let (start, end) = ra.split_once('-').ok_or(())?;
        let (start, end) = (start.trim(), end.trim());
        let (s, mut len) = if start.is_empty() {
            let n: i64 = end.parse().map_err(|_| ())?;
            if n < 0 {
                return Err(());
            }
            let n = (n as u64).min(size);
            (size - n, n)
        } else {
            let i: i64 = start.parse().map_err(|_| ())?;
            if i < 0 {
                return Err(());
            }
            let i = i as u64;
            if end.is_empty() {
                (i, size.saturating_sub(i))
            } else {
                let j: i64 = end.parse().map_err(|_| ())?;
                if j < i as i64 {
                    return Err(());
                }
                (i, j as u64 - i + 1)
            }
        };
        if s >= size {
            skipped = true;
            continue;
        }
        if s + len > size {
            len = size - s;
        }
        return Ok(RangeSpec::One(s, len));
    }
    Ok(if skipped {
        RangeSpec::NoOverlap
    } else {
        RangeSpec::None
    })
}

/// GET /files/download?path=[&offset=&limit=] with optional `Range`.
pub fn download(req: &Request<Incoming>) -> Resp {
    let q = Query::parse(req.uri().query());
    let path = match q.required("path") {
        Ok(v) => v,
        Err(resp) => return resp,
    };
    let resolved = match paths::expand(path) {
        Ok(p) => p,
        Err(e) => {
            return h::runtime_error(format!("error resolving file path: {path}. {e}"));
        }
    };
    let (raw_offset, raw_limit) = (q.get("offset"), q.get("limit"));
    let line_mode = !raw_offset.is_empty() || !raw_limit.is_empty();
    let range = req
        .headers()
        .get(header::RANGE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    if line_mode && !range.is_empty() {
        return h::error(
            StatusCode::BAD_REQUEST,
            INVALID_REQUEST,
            "line-based reading (offset/limit) and byte range (Range header) are mutually exclusive",
        );
    }
    let mut file = match fs::File::open(&resolved) {
        Ok(f) => f,
        Err(e) => return file_error(FsError::io(path_err("open", &resolved, &e), &e)),
    };
    if line_mode {
        return serve_lines(file, raw_offset, raw_limit);
    }
    let md = match file.metadata() {
        Ok(m) if !m.is_dir() => m,
        Ok(_) => {
            let e = io::Error::from_raw_os_error(libc::EISDIR);
            return file_error(FsError::io(path_err("read", &resolved, &e), &e));
        }
        Err(e) => {
            return h::runtime_error(format!(
                "error getting file stat info: {resolved}. {}",
                sys::errno_text(&e)
            ));
        }
    };
    let size = md.len();
    let base = paths::base(&resolved);
    let attach = |mut r: Resp| {
        let hd = r.headers_mut();
        hd.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        if let Ok(v) = HeaderValue::from_str(&content_disposition(&base)) {
            hd.insert(header::CONTENT_DISPOSITION, v);
        }
        r
    };
    let mut spec = RangeSpec::None;
    if !range.is_empty() {
        match parse_range(&range, size) {
            Ok(s) => spec = s,
            Err(()) => return h::error(StatusCode::RANGE_NOT_SATISFIABLE, "UNKNOWN", ""),
        }
    }
    match spec {
        RangeSpec::One(start, len) => {
            if let Err(e) = file.seek(SeekFrom::Start(start)) {
                return file_error(FsError::io(path_err("seek", &resolved, &e), &e));
            }
            let mut r = attach(h::response(
                StatusCode::PARTIAL_CONTENT,
                None,
                stream_file(file, len),
            ));
            let hd = r.headers_mut();
            hd.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            if let Ok(v) =
                HeaderValue::from_str(&format!("bytes {}-{}/{size}", start, start + len - 1))
            {
                hd.insert(header::CONTENT_RANGE, v);
            }
            r
        }
        RangeSpec::NoOverlap => {
            let mut r = h::text_error(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "invalid range: failed to overlap",
            );
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            r
        }
        RangeSpec::None => {
            // What http.ServeContent adds for a plain GET.
            let mut r = attach(h::response(StatusCode::OK, None, stream_file(file, size)));
            let hd = r.headers_mut();
            hd.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
            hd.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
            if md.mtime() > 0
                && let Ok(v) = HeaderValue::from_str(&h::http_date(md.mtime()))
            {
                hd.insert(header::LAST_MODIFIED, v);
            }
            r
        }
    }
}

/// Line mode: 1-based `offset`, `limit` lines, `\r\n` -> `\n`, no trailing newline.
fn serve_lines(file: fs::File, raw_offset: &str, raw_limit: &str) -> Resp {
    let parse = |raw: &str, name: &str| -> Result<Option<u64>, String> {
        if raw.is_empty() {
            return Ok(None);
        }
        match raw.parse::<i64>() {
            Ok(v) if v >= 1 => Ok(Some(v as u64)),
            _ => Err(format!("invalid query parameter '{name}': {raw}")),
        }
    };
    let (offset, limit) = match (parse(raw_offset, "offset"), parse(raw_limit, "limit")) {
        (Ok(o), Ok(l)) => (o.unwrap_or(1), l),
        (Err(e), _) | (_, Err(e)) => {
            return h::error(StatusCode::BAD_REQUEST, INVALID_REQUEST, e);
        }
    };
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        let mut reader = io::BufReader::new(file);
        let (mut line_no, mut written) = (0u64, 0u64);
        let mut out = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
            line_no += 1;
            if line_no < offset {
                continue;
            }
            while matches!(line.last(), Some(b'\r' | b'\n')) {
                line.pop();
            }
            if written > 0 {
                out.push(b'\n');
            }
            out.extend_from_slice(&line);
            written += 1;
            if out.len() >= 64 * 1024
                && tx
                    .blocking_send(Ok(Bytes::from(std::mem::take(&mut out))))
                    .is_err()
            {
                return;
            }
            if limit.is_some_and(|l| written >= l) {
                break;
            }
        }
        if !out.is_empty() {
            let _ = tx.blocking_send(Ok(Bytes::from(out)));
        }
    });
    h::response(
        StatusCode::OK,
        Some("text/plain; charset=utf-8"),
        h::channel_body(rx),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert!(matches!(
            parse_range("bytes=0-9", 100),
            Ok(RangeSpec::One(0, 10))
        ));
        assert!(matches!(
            parse_range("bytes=-10", 100),
            Ok(RangeSpec::One(90, 10))
        ));
        assert!(matches!(
            parse_range("bytes=95-", 100),
            Ok(RangeSpec::One(95, 5))
        ));
        assert!(matches!(
            parse_range("bytes=90-200", 100),
            Ok(RangeSpec::One(90, 10))
        ));
        assert!(matches!(
            parse_range("bytes=200-300", 100),
            Ok(RangeSpec::NoOverlap)
        ));
        assert!(matches!(parse_range("bytes=", 100), Ok(RangeSpec::None)));
        assert!(parse_range("bytes=9-1", 100).is_err());
        assert!(parse_range("items=0-1", 100).is_err());
    }

    #[test]
    fn replacing() {
        assert_eq!(replace_all(b"aaa", b"aa", b"b"), (b"ba".to_vec(), 1));
    }
}
