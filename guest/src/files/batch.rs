//! files.write with a list of files (E2B's `write_files`): one multipart upload
//! to execd with a `metadata` + `file` pair per file, which execd commits in
//! order, each file atomically, stopping at the first failure; then one
//! `GET /files/info` with every path (in batches when the query grows long).
//!
//! The contents are streamed: `files-write-many` answers a `batch-writer` that
//! takes them one after the other in list order (a chunk may span files) and
//! passes them on as they come, so the provider holds one chunk at a time. The
//! sizes are known up front, so the body has an exact Content-Length (proxies
//! in front of execd need one), as for a single file (`files::FileWriter`).

use super::multipart::{boundary, check_write, close, pair_head, start_upload};
use super::{Owner, file_info};
use crate::bindings::exports::abx::epp::infra::{FileInfo, FileUpload};
use crate::error::{self, Error, Result, invalid, upstream};
use crate::execd::Execd;
use crate::http::{Response, Upload, encode};
use crate::models::ExecdFileInfo;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};

/// Files per call: past this, one request is no longer the cheap way.
pub const MAX_FILES: usize = 1000;
/// Content bytes per call. The provider streams them, but the one-line
/// `files.write {files}` arrives whole in the host, and one upload is one POST
/// that is never retried: more goes file by file (streamed `files.write`) or
/// through `files.upload_url`.
pub const MAX_TOTAL_BYTES: u64 = 64 << 20;
/// Longest query of one `GET /files/info` (request lines over 8 KiB are
/// refused by common proxies).
const MAX_INFO_QUERY: usize = 6 * 1024;

/// One file of the upload: where it goes, its size, and its multipart head.
struct Part {
    path: String,
    size: u64,
    head: String,
}

/// The upload of a batch, while its contents arrive.
pub struct BatchWriter {
    inner: RefCell<Option<Batch>>,
}

struct Batch {
    execd: Execd,
    upload: Upload,
    parts: Vec<Part>,
    cursor: Cursor,
    tail: String,
}

/// Where the contents of a batch go: which file takes the next byte, and how
/// many it still takes. Kept apart from the upload so the split is testable.
#[derive(Debug)]
struct Cursor {
    sizes: Vec<u64>,
    /// The file whose bytes come next (its head is written).
    current: usize,
    remaining: u64,
}

/// One piece of the body, in order: a file's head, or bytes of the chunk.
#[derive(Debug, PartialEq)]
enum Piece {
    Head(usize),
    Bytes(std::ops::Range<usize>),
}

/// More bytes than the files' sizes add up to.
#[derive(Debug, PartialEq)]
struct Overflow;

impl Cursor {
    /// A cursor at the start of the first file (whose head the caller writes).
    fn new(sizes: Vec<u64>) -> Cursor {
        let remaining = sizes[0];
        Cursor {
            sizes,
            current: 0,
            remaining,
        }
    }

    /// Moves past complete files (their successors' heads into `out`); false
    /// when every file is complete.
    fn advance(&mut self, out: &mut Vec<Piece>) -> bool {
        while self.remaining == 0 {
            if self.current + 1 == self.sizes.len() {
                return false;
            }
            self.current += 1;
            self.remaining = self.sizes[self.current];
            out.push(Piece::Head(self.current));
        }
        true
    }

    /// The pieces that `len` more bytes of content make.
    fn split(&mut self, len: usize) -> std::result::Result<Vec<Piece>, Overflow> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < len {
            if !self.advance(&mut out) {
                return Err(Overflow);
            }
            let n = (len - at).min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
            out.push(Piece::Bytes(at..at + n));
            self.remaining -= n as u64;
            at += n;
        }
        Ok(out)
    }

    /// The heads of the empty files left at the end, or the file that still
    /// lacks bytes.
    fn end(&mut self) -> std::result::Result<Vec<Piece>, usize> {
        let mut out = Vec::new();
        if self.advance(&mut out) {
            return Err(self.current);
        }
        Ok(out)
    }
}

pub fn write_many(sandbox_id: &str, files: Vec<FileUpload>) -> Result<BatchWriter> {
    check_list(&files)?;
    let modes = files
        .iter()
        .map(|file| check_write(&file.path, file.mode))
        .collect::<Result<Vec<_>>>()?;
    let mut execd = Execd::connect(sandbox_id)?;
    let n = files.len();
    let boundary = boundary();
    let parts = files
        .into_iter()
        .zip(modes)
        .enumerate()
        .map(|(i, (file, mode))| {
            // Checked before the upload: execd would write the file, then fail to chown it.
            let owner = Owner::new(file.owner, file.group)
                .resolved(&mut execd)
                .map_err(|e| {
                    let message = format!("{} (file {} of {n}, {})", e.message, i + 1, file.path);
                    let kind = e.kind;
                    e.reworded(kind, message)
                })?;
            // Every pair after the first starts on the line after the previous file's bytes.
            let lead = if i == 0 { "" } else { "\r\n" };
            let head = format!("{lead}{}", pair_head(&boundary, &file.path, mode, &owner));
            Ok(Part {
                path: file.path,
                size: file.size,
                head,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let tail = close(&boundary);
    let length = parts
        .iter()
        .map(|p| p.head.len() as u64 + p.size)
        .sum::<u64>()
        + tail.len() as u64;
    let mut upload = start_upload(&execd, &boundary, length)?;
    upload
        .write(parts[0].head.as_bytes())
        .map_err(|t| execd.transport(t))?;
    let cursor = Cursor::new(parts.iter().map(|p| p.size).collect());
    Ok(BatchWriter {
        inner: RefCell::new(Some(Batch {
            execd,
            upload,
            parts,
            cursor,
            tail,
        })),
    })
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
    let total = files.iter().fold(0u64, |sum, f| sum.saturating_add(f.size));
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

/// What ends an upload early: nothing of a cut multipart body is written
/// (execd reads the whole form before it writes a file).
const ABANDONED: &str = "the upload was abandoned, so no file of the list was written";

impl Batch {
    fn name(&self, i: usize) -> String {
        format!(
            "{} (file {} of {})",
            self.parts[i].path,
            i + 1,
            self.parts.len()
        )
    }

    fn put(&mut self, pieces: &[Piece], chunk: &[u8]) -> Result<()> {
        for piece in pieces {
            let bytes = match piece {
                Piece::Head(i) => self.parts[*i].head.as_bytes(),
                Piece::Bytes(range) => &chunk[range.clone()],
            };
            self.upload
                .write(bytes)
                .map_err(|t| self.execd.transport(t))?;
        }
        Ok(())
    }

    /// Passes a chunk on, file by file. `Err` ends the batch.
    fn write(&mut self, chunk: &[u8]) -> Result<()> {
        let Ok(pieces) = self.cursor.split(chunk.len()) else {
            let last = self.parts.len() - 1;
            return Err(invalid(format!(
                "more bytes were written than the files' sizes announce: the last file, {}, \
                 takes {} bytes; {ABANDONED}",
                self.name(last),
                self.parts[last].size
            )));
        };
        self.put(&pieces, chunk)
    }

    /// Ends the body once every byte arrived, and answers the files' info.
    fn finish(mut self) -> Result<Vec<FileInfo>> {
        let heads = match self.cursor.end() {
            Ok(heads) => heads,
            Err(short) => {
                return Err(invalid(format!(
                    "{} got {} of its {} bytes before the writer was finished; {ABANDONED}",
                    self.name(short),
                    self.parts[short].size - self.cursor.remaining,
                    self.parts[short].size
                )));
            }
        };
        self.put(&heads, &[])?;
        let resp = self
            .upload
            .finish_with(self.tail.as_bytes())
            .map_err(|t| self.execd.transport(t))?;
        if !(200..300).contains(&resp.status) {
            return Err(refused(&self.execd, resp, &self.parts));
        }
        infos(&mut self.execd, &self.parts)
    }
}

impl BatchWriter {
    pub fn write(&self, chunk: Vec<u8>) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        let Some(batch) = inner.as_mut() else {
            return Err(invalid("this writer is already finished or failed"));
        };
        let written = batch.write(&chunk);
        if written.is_err() {
            // Dropping the upload unfinished writes none of the files.
            *inner = None;
        }
        written
    }

    pub fn finish(&self) -> Result<Vec<FileInfo>> {
        let Some(batch) = self.inner.borrow_mut().take() else {
            return Err(invalid("this writer is already finished or failed"));
        };
        batch.finish()
    }
}

/// execd's refusal, naming the file it stopped at: execd puts the path in its
/// messages ("error copying file PATH. …"), so the longest listed path that the
/// message holds is the one (a shorter one may be its prefix; execd writes `~`
/// expanded).
fn refused(execd: &Execd, resp: Response, files: &[Part]) -> Error {
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
fn infos(execd: &mut Execd, files: &[Part]) -> Result<Vec<FileInfo>> {
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
    use crate::error::Kind;

    fn file(path: &str, size: u64) -> FileUpload {
        FileUpload {
            path: path.into(),
            size,
            mode: None,
            owner: None,
            group: None,
        }
    }

    fn refusal(files: &[FileUpload]) -> String {
        let e = check_list(files).expect_err("refused");
        assert_eq!(e.kind, Kind::Invalid);
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
        let half = MAX_TOTAL_BYTES / 2;
        assert!(check_list(&[file("/a", half), file("/b", half)]).is_ok());
        assert!(refusal(&[file("/a", half), file("/b", half + 1)]).contains("67108865 bytes"));
    }

    #[test]
    fn chunks_are_split_at_file_boundaries_and_may_span_files() {
        use Piece::{Bytes, Head};
        // Files of 3, 0, 2 and 0 bytes: a chunk of 4 ends the first, passes the
        // empty one and starts the third.
        let mut c = Cursor::new(vec![3, 0, 2, 0]);
        assert_eq!(
            c.split(4),
            Ok(vec![Bytes(0..3), Head(1), Head(2), Bytes(3..4)])
        );
        assert_eq!(c.split(0), Ok(vec![]));
        // The empty last file still needs its head at the end.
        assert_eq!(c.end(), Err(2));
        assert_eq!(c.split(1), Ok(vec![Bytes(0..1)]));
        assert_eq!(c.end(), Ok(vec![Head(3)]));
        // A byte past the last file is too many (the batch then ends).
        let mut full = Cursor::new(vec![3, 0, 2, 0]);
        assert_eq!(full.split(5).map(|p| p.len()), Ok(4));
        assert_eq!(full.split(1), Err(Overflow));
        // One chunk for everything, and byte by byte: the same pieces in all.
        let mut whole = Cursor::new(vec![2, 2]);
        assert_eq!(whole.split(4), Ok(vec![Bytes(0..2), Head(1), Bytes(2..4)]));
        assert_eq!(whole.end(), Ok(vec![]));
        let mut bytes = Cursor::new(vec![2, 2]);
        let pieces: Vec<Piece> = (0..4).flat_map(|_| bytes.split(1).unwrap()).collect();
        assert_eq!(
            pieces,
            vec![Bytes(0..1), Bytes(0..1), Head(1), Bytes(0..1), Bytes(0..1)]
        );
        // Finishing early names the file that lacks bytes.
        let mut early = Cursor::new(vec![2, 2]);
        assert_eq!(early.split(3).map(|p| p.len()), Ok(3));
        assert_eq!(early.end(), Err(1));
        assert_eq!(early.remaining, 1);
        // Only empty files: every head at the end, no content at all.
        let mut empty = Cursor::new(vec![0, 0]);
        assert_eq!(empty.end(), Ok(vec![Head(1)]));
        assert_eq!(Cursor::new(vec![0, 0]).split(1), Err(Overflow));
    }
}
