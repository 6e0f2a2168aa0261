//! files.rw over execd's file API: file info, listings, directories, moves and
//! searches here; contents are streamed (`stream`: reads and writes, `batch`:
//! several files in one upload, both through `multipart`); search patterns are
//! checked in `pattern`.

mod batch;
mod multipart;
mod pattern;
mod stream;

pub use batch::{BatchWriter, write_many};
pub use stream::{FileReader, FileWriter, read, write};

use crate::bindings::exports::abx::epp::infra::{FileInfo, FileType};
use crate::error::{self, Error, Kind, Result, conflict, invalid, not_found};
use crate::execd::Execd;
use crate::http::{Timeouts, encode};
use crate::models::{ExecdFileInfo, Move};
use crate::refusal::{self, Refusal};
use pattern::check_pattern;
use std::collections::BTreeMap;
use std::time::Duration;

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

/// `GET /files/search`: execd walks `path` (symlinks not followed) and lists the files
/// whose name matches `pattern`.
/// Who should own a file (since abx:epp 1.2): a user and a group, each a name
/// or a number, as given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owner {
    pub user: Option<String>,
    pub group: Option<String>,
}

impl Owner {
    pub fn new(user: Option<String>, group: Option<String>) -> Owner {
        Owner { user, group }
    }
}

pub fn chmod(
    _sandbox_id: &str,
    _path: &str,
    _mode: Option<u32>,
    _owner: Owner,
) -> Result<FileInfo> {
    Err(error::unsupported("files.chmod", "not built yet"))
}

pub fn replace(_sandbox_id: &str, _path: &str, _old: &str, _new: &str) -> Result<u32> {
    Err(error::unsupported("files.replace", "not built yet"))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip() {
        assert_eq!(mode_from_execd(755), 0o755);
        assert_eq!(mode_to_execd(0o644), 644);
        assert_eq!(mode_from_execd(mode_to_execd(0o4755)), 0o4755);
    }
}
