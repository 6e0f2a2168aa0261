//! files.write with a list of files (E2B's `write_files`): one multipart upload
//! to execd with a `metadata` + `file` pair per file, which execd commits in
//! order, each file atomically, stopping at the first failure; then one
//! `GET /files/info` with every path (in batches when the query grows long).

use crate::bindings::abx::epp::types::EppError;
use crate::bindings::exports::abx::epp::infra::{FileInfo, FileUpload};
use crate::error::{self, Result, invalid, upstream};
use crate::execd::Execd;
use crate::files::{boundary, check_write, close, file_info, pair_head, start_upload};
use crate::http::{Response, encode};
use crate::models::ExecdFileInfo;
use std::collections::{BTreeMap, HashSet};

/// Files per call: past this, one request is no longer the cheap way.
pub const MAX_FILES: usize = 1000;
/// Content bytes per call: the contents sit in the provider's memory at once
/// (256 MiB by default), so they are bounded well below it.
pub const MAX_TOTAL_BYTES: u64 = 64 << 20;
/// Longest query of one `GET /files/info` (request lines over 8 KiB are
/// refused by common proxies).
const MAX_INFO_QUERY: usize = 6 * 1024;

/// One file's place in the upload: its mode (checked) and multipart head.
struct Part<'a> {
    file: &'a FileUpload,
    head: String,
}

pub fn write_many(sandbox_id: &str, files: Vec<FileUpload>) -> Result<Vec<FileInfo>> {
    check_list(&files)?;
    let boundary = boundary();
    let parts = files
        .iter()
        .enumerate()
        .map(|(i, file)| {
            let mode = check_write(&file.path, file.mode)?;
            // Every pair after the first starts on the line after the previous file's bytes.
            let lead = if i == 0 { "" } else { "\r\n" };
            Ok(Part {
                file,
                head: format!("{lead}{}", pair_head(&boundary, &file.path, mode)),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut execd = Execd::connect(sandbox_id)?;
    let resp = upload(&execd, &boundary, &parts)?;
    if !(200..300).contains(&resp.status) {
        return Err(refused(&execd, resp, &files));
    }
    infos(&mut execd, &files)
}

/// The list as a whole: not empty, within the bounds, no path twice.
fn check_list(files: &[FileUpload]) -> Result<()> {
    if files.is_empty() {
        return Err(invalid("`files` is empty; give at least one file"));
    }
    if files.len() > MAX_FILES {
        return Err(invalid(format!(
            "`files` has {} files, more than {MAX_FILES} in one call; split it",
            files.len()
        )));
    }
    let total: u64 = files.iter().map(|f| f.content.len() as u64).sum();
    if total > MAX_TOTAL_BYTES {
        return Err(invalid(format!(
            "the files hold {total} bytes in all, more than {MAX_TOTAL_BYTES} in one call; split \
             the list, or write large files on their own (files.write with `path`, or \
             files.upload_url)"
        )));
    }
    let mut seen = HashSet::with_capacity(files.len());
    for f in files {
        if !seen.insert(f.path.as_str()) {
            return Err(invalid(format!(
                "{} is given twice in `files`; each path may be written once per call",
                f.path
            )));
        }
    }
    Ok(())
}

/// Streams the whole multipart body and answers execd's response.
fn upload(execd: &Execd, boundary: &str, parts: &[Part]) -> Result<Response> {
    let tail = close(boundary);
    let length = parts
        .iter()
        .map(|p| (p.head.len() + p.file.content.len()) as u64)
        .sum::<u64>()
        + tail.len() as u64;
    let mut body = start_upload(execd, boundary, length)?;
    for part in parts {
        body.write(part.head.as_bytes())
            .and_then(|()| body.write(&part.file.content))
            .map_err(|t| execd.transport(t))?;
    }
    body.finish_with(tail.as_bytes())
        .map_err(|t| execd.transport(t))
}

/// execd's refusal, naming the file it stopped at: execd puts the path in its
/// messages ("error copying file PATH. …"), so the longest listed path that the
/// message holds is the one (a shorter one may be its prefix; execd writes `~`
/// expanded).
fn refused(execd: &Execd, resp: Response, files: &[FileUpload]) -> EppError {
    let status = resp.status;
    let body = resp.read_all(64 * 1024).unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    let failed = files
        .iter()
        .enumerate()
        .filter(|(_, f)| text.contains(f.path.strip_prefix('~').unwrap_or(&f.path)))
        .max_by_key(|(_, f)| f.path.len());
    let n = files.len();
    let subject = match failed {
        Some((i, f)) => format!("{} (file {} of {n})", f.path, i + 1),
        None => format!("the upload of {n} files"),
    };
    let mut e = error::status(status, &body, execd.target(), &subject);
    let stopped = match failed {
        Some((i, f)) => format!(
            "files.write stopped at {} (file {} of {n}): the files before it in the list were \
             written, it and the ones after it were not",
            f.path,
            i + 1
        ),
        None => format!(
            "files.write of {n} files failed at a file execd did not name: the files before it \
             in the list were written, it and the ones after it were not"
        ),
    };
    e.message = format!("{stopped}; {}", e.message);
    e
}

/// The files' info in list order, from as few `GET /files/info` as the query
/// length allows.
fn infos(execd: &mut Execd, files: &[FileUpload]) -> Result<Vec<FileInfo>> {
    let mut out = Vec::with_capacity(files.len());
    let mut rest = files;
    while !rest.is_empty() {
        let mut query = String::from("/files/info?");
        let mut taken = 0;
        for f in rest {
            let param = format!("path={}&", encode(&f.path));
            if taken > 0 && query.len() + param.len() > MAX_INFO_QUERY {
                break;
            }
            query.push_str(&param);
            taken += 1;
        }
        query.pop();
        let (batch, after) = rest.split_at(taken);
        let resp = execd.send(|e| e.request("GET", &query), &[])?;
        let subject = format!("the {} files just written", batch.len());
        let resp = execd.check(resp, &subject)?;
        let mut map: BTreeMap<String, ExecdFileInfo> = execd.json(resp, &subject)?;
        for f in batch {
            let raw = map.remove(&f.path).ok_or_else(|| {
                upstream(format!(
                    "{} did not report {} after writing it",
                    execd.target(),
                    f.path
                ))
            })?;
            out.push(file_info(raw));
        }
        rest = after;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::abx::epp::types::ErrorCode;

    fn file(path: &str, size: usize) -> FileUpload {
        FileUpload {
            path: path.into(),
            content: vec![b'x'; size],
            mode: None,
        }
    }

    fn refusal(files: &[FileUpload]) -> String {
        let e = check_list(files).expect_err("refused");
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        e.message
    }

    #[test]
    fn lists_are_bounded_and_paths_unique() {
        assert!(check_list(&[file("/a", 1), file("/b", 0)]).is_ok());
        assert!(refusal(&[]).contains("`files` is empty"));
        assert!(
            refusal(&[file("/a", 1), file("/b", 1), file("/a", 2)]).contains("/a is given twice")
        );
        let many: Vec<_> = (0..=MAX_FILES)
            .map(|i| file(&format!("/f{i}"), 0))
            .collect();
        assert!(refusal(&many).contains("more than 1000"));
        let half = (MAX_TOTAL_BYTES / 2) as usize;
        assert!(check_list(&[file("/a", half), file("/b", half)]).is_ok());
        assert!(refusal(&[file("/a", half), file("/b", half + 1)]).contains("67108865 bytes"));
    }
}
