//! files.read and files.write, streamed: a reader hands out the download
//! body chunk by chunk, a writer streams the multipart upload (crate::files::multipart).

use super::multipart::{boundary, check_write, close, pair_head, start_upload};
use super::{TRANSFER, check_path, info_of, missing};
use crate::bindings::exports::abx::epp::infra::{ByteRange, FileInfo};
use crate::error::{self, Result, invalid};
use crate::execd::Execd;
use crate::http::{BodyReader, Transport, Upload, encode};
use std::cell::RefCell;
use wasip2::io::streams::{InputStream, OutputStream};

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
        self.next(|body| body.read(max.clamp(1, 4 << 20) as usize))
    }

    /// The next bytes moved into the host's `sink`, not through this memory.
    pub fn read_into(&self, sink: &OutputStream, max: u64) -> Result<Option<u64>> {
        self.next(|body| body.splice_into(sink, max.clamp(1, 4 << 20)))
    }

    /// One step of the download: its answer, none at the end (the body let
    /// go), or what broke it.
    fn next<T>(
        &self,
        step: impl FnOnce(&mut BodyReader) -> std::result::Result<Option<T>, Transport>,
    ) -> Result<Option<T>> {
        let mut inner = self.inner.borrow_mut();
        let Some(body) = inner.as_mut() else {
            return Ok(None);
        };
        match step(body) {
            Ok(Some(answer)) => Ok(Some(answer)),
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

pub fn write(
    sandbox_id: &str,
    path: &str,
    size: u64,
    mode: Option<u32>,
    owner: super::Owner,
) -> Result<FileWriter> {
    let mode = check_write(path, mode)?;
    let mut execd = Execd::connect(sandbox_id)?;
    // Checked before the upload: execd would write the file, then fail to chown it.
    let owner = owner.resolved(&mut execd)?;
    let boundary = boundary();
    let preamble = pair_head(&boundary, path, mode, &owner).into_bytes();
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
        self.put(chunk.len() as u64, |upload| upload.write(&chunk))
    }

    /// `len` bytes the host holds in `source`, moved into the upload without
    /// passing through this memory.
    pub fn write_from(&self, source: &InputStream, len: u64) -> Result<()> {
        self.put(len, |upload| upload.splice_from(source, len))
    }

    /// Adds `len` bytes to the upload (`put` does it), within the size announced.
    fn put(
        &self,
        len: u64,
        put: impl FnOnce(&mut Upload) -> std::result::Result<(), Transport>,
    ) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        let Some(state) = inner.as_mut() else {
            return Err(invalid("this writer is already finished or failed"));
        };
        if len > state.remaining {
            // Abandon: dropping the upload unfinished leaves the old file in place.
            *inner = None;
            return Err(invalid(
                "more bytes were written than the size announced to files-write",
            ));
        }
        state.remaining -= len;
        if let Err(t) = put(&mut state.upload) {
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
