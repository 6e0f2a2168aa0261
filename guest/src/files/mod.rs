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
use crate::users;
use pattern::check_pattern;
use serde::{Deserialize, Serialize};
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

/// What a missing `path` is called in every error that says so.
fn absent(sandbox_id: &str, path: &str) -> String {
    format!("{path} does not exist in sandbox {sandbox_id}")
}

/// A 404 about `path` says so in plain words (the HTTP answer kept).
fn missing(sandbox_id: &str, path: &str) -> impl Fn(Error) -> Error {
    let message = absent(sandbox_id, path);
    move |e| {
        if e.is(Kind::NotFound) {
            e.reworded(Kind::NotFound, message.clone())
        } else {
            e
        }
    }
}

/// Checks a permission mode for `path` (execd takes the low twelve bits).
fn check_mode(path: &str, mode: u32) -> Result<()> {
    if mode > 0o7777 {
        return Err(invalid(format!(
            "mode {mode:o} of {path} is not a permission mode (at most 7777)"
        )));
    }
    Ok(())
}

pub(crate) fn info_of(execd: &mut Execd, path: &str) -> Result<FileInfo> {
    let query = format!("/files/info?path={}", encode(path));
    let resp = execd.send(|e| e.request("GET", &query), &[])?;
    let resp = execd
        .check(resp, path)
        .map_err(missing(&execd.sandbox_id, path))?;
    let map: BTreeMap<String, ExecdFileInfo> = execd.json(resp, path)?;
    map.into_values()
        .next()
        .map(file_info)
        .ok_or_else(|| not_found(absent(&execd.sandbox_id, path)))
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

    fn is_empty(&self) -> bool {
        self.user.is_none() && self.group.is_none()
    }

    /// The same owner as the names execd takes (it looks owners up by name
    /// only), each checked against the sandbox's own users and groups
    /// (crate::users): an unknown one is E1001 naming it.
    pub fn resolved(self, execd: &mut Execd) -> Result<Owner> {
        let user = match self.user {
            Some(user) => Some(users::user(execd, &user, "owner")?.name),
            None => None,
        };
        let group = match self.group {
            Some(group) => Some(users::group(execd, &group)?.name),
            None => None,
        };
        Ok(Owner { user, group })
    }
}

/// `POST /files/permissions` body: execd reads `mode` 0 (or none) and an empty
/// owner or group as "leave it".
#[derive(Serialize)]
struct Permissions<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<&'a str>,
}

/// `POST /files/permissions`, then the file's info.
pub fn chmod(sandbox_id: &str, path: &str, mode: Option<u32>, owner: Owner) -> Result<FileInfo> {
    check_path(path)?;
    if mode.is_none() && owner.is_empty() {
        return Err(invalid(
            "give at least one of `mode`, `owner` and `group` to change",
        ));
    }
    if mode == Some(0) {
        return Err(invalid(format!(
            "mode 0 cannot be set through execd (it reads 0 as `leave the mode`); take every \
             permission away with commands.run `chmod 000 {path}`"
        )));
    }
    if let Some(mode) = mode {
        check_mode(path, mode)?;
    }
    let mut execd = Execd::connect(sandbox_id)?;
    let owner = owner.resolved(&mut execd)?;
    let body = serde_json::json!({ path: Permissions {
        mode: mode.map(mode_to_execd),
        owner: owner.user.as_deref(),
        group: owner.group.as_deref(),
    }})
    .to_string();
    let resp = execd.send(
        |e| {
            Ok(e.request("POST", "/files/permissions")?
                .header("content-type", "application/json"))
        },
        body.as_bytes(),
    )?;
    if resp.status == 500 {
        let text = resp.read_all(64 * 1024).unwrap_or_default();
        return Err(refused_change(&mut execd, path, &owner, &text));
    }
    execd.check(resp, path).map_err(missing(sandbox_id, path))?;
    info_of(&mut execd, path)
}

/// execd's 500 for a permissions change: a missing file (E4004), an owner or
/// group it does not know after all (E1001, naming it), or its own words.
fn refused_change(execd: &mut Execd, path: &str, owner: &Owner, text: &[u8]) -> Error {
    match refusal::of_answer(500, text) {
        Refusal::Missing => return not_found(absent(&execd.sandbox_id, path)),
        Refusal::UnknownUser => {
            let user = owner.user.as_deref().unwrap_or_default();
            return invalid(format!(
                "`owner`: execd does not know user `{user}` in sandbox {}; give an existing \
                 name or uid",
                execd.sandbox_id
            ));
        }
        Refusal::UnknownGroup => {
            let group = owner.group.as_deref().unwrap_or_default();
            return invalid(format!(
                "`group`: execd does not know group `{group}` in sandbox {}; give an existing \
                 name or gid",
                execd.sandbox_id
            ));
        }
        _ => {}
    }
    error::status(500, text, execd.target(), path)
}

#[derive(Deserialize)]
struct Replaced {
    #[serde(rename = "replacedCount")]
    count: u32,
}

/// `POST /files/replace?verbose=true`: execd rewrites the file whole, in place
/// (Go's `os.WriteFile` truncates the file it opens, so its mode and owner
/// stay), and says how many it replaced.
pub fn replace(sandbox_id: &str, path: &str, old: &str, new: &str) -> Result<u32> {
    check_path(path)?;
    if old.is_empty() {
        return Err(invalid(
            "`old` is empty; give the text to replace (at least one character)",
        ));
    }
    let mut execd = Execd::connect(sandbox_id)?;
    let body = serde_json::json!({ path: {"old": old, "new": new} }).to_string();
    let resp = execd.send(
        |e| {
            Ok(e.request("POST", "/files/replace?verbose=true")?
                .header("content-type", "application/json"))
        },
        body.as_bytes(),
    )?;
    let resp = execd.check(resp, path).map_err(missing(sandbox_id, path))?;
    let body = resp
        .read_all(64 * 1024)
        .map_err(|t| error::broken_body(t, execd.target()))?;
    // One path was sent; execd keys the answer by the path as sent (execd
    // before 1.0.19 answers nothing).
    let answer: BTreeMap<String, Replaced> = serde_json::from_slice(&body).unwrap_or_default();
    answer.into_values().next().map(|r| r.count).ok_or_else(|| {
        error::upstream(format!(
            "{} replaced the text in {path} but did not say how many times (execd before \
             1.0.19 does not); check the file with files.read",
            execd.target()
        ))
    })
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
    create_dir(&mut execd, path, DIR_MODE).map(|()| true)
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

/// Makes `dir` (and its parents) if it is missing, with `mode` for `dir`
/// itself (execd gives it only to a directory it creates; parents get 0755):
/// `files.make_dir`, and the provider's own directories (crate::sessions,
/// crate::pty).
pub(crate) fn create_dir(execd: &mut Execd, dir: &str, mode: u32) -> Result<()> {
    let body = serde_json::json!({ dir: {"mode": mode_to_execd(mode)} }).to_string();
    let resp = execd.send(
        |e| {
            Ok(e.request("POST", "/directories")?
                .header("content-type", "application/json"))
        },
        body.as_bytes(),
    )?;
    execd.check(resp, dir).map(drop)
}

/// Writes a small file of the provider's own (a marker) in one request, with
/// `mode`, owned by execd's user; nothing is asked about it afterwards.
pub(crate) fn put_marker(execd: &mut Execd, path: &str, content: &[u8], mode: u32) -> Result<()> {
    let boundary = multipart::boundary();
    let mut body = multipart::pair_head(&boundary, path, mode, &Owner::default()).into_bytes();
    body.extend_from_slice(content);
    body.extend_from_slice(multipart::close(&boundary).as_bytes());
    let resp = execd.send(
        |e| {
            Ok(e.request("POST", "/files/upload")?
                .header(
                    "content-type",
                    format!("multipart/form-data; boundary={boundary}"),
                )
                .header("content-length", body.len().to_string()))
        },
        &body,
    )?;
    execd.check(resp, path).map(drop)
}

/// Removes files of the provider's own, best effort (a missing one is no
/// failure: execd answers 200).
pub(crate) fn remove_quietly(execd: &mut Execd, paths: &[String]) {
    let query: Vec<String> = paths
        .iter()
        .map(|p| format!("path={}", encode(p)))
        .collect();
    let query = format!("/files?{}", query.join("&"));
    let _ = execd.send(|e| e.request("DELETE", &query), &[]);
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

    #[test]
    fn one_check_of_a_mode_for_writes_and_chmod() {
        assert!(check_mode("/x", 0o7777).is_ok());
        let e = check_mode("/x", 0o10000).unwrap_err();
        assert_eq!(
            e.message,
            "mode 10000 of /x is not a permission mode (at most 7777)"
        );
        assert_eq!(
            multipart::check_write("/x", Some(0o10000))
                .unwrap_err()
                .message,
            e.message
        );
    }
}
