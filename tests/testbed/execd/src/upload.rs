//! POST /files/upload (execd's `filesystem_upload.go`): multipart `metadata` + `file`
//! parts, paired by order, both required to be file parts (`filename=` present).
//!
//! Unlike Gin, which buffers the whole form first, file parts are streamed straight to disk:
//! into a temporary file next to the target when the part's metadata came first (the usual
//! order), else into a spool file. Nothing touches a target until the whole body has been
//! read and the part counts checked, then pairs are committed in order with
//! write-temp + fsync + rename, stopping at the first failure like execd does.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use futures::TryStreamExt;
use http::{Request, StatusCode, header};
use http_body_util::BodyStream;
use hyper::body::Incoming;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use crate::files::{self, Permission};
use crate::paths;
use crate::sys;
use crate::web::{self as h, RUNTIME_ERROR, Resp};

const INVALID_FILE: &str = "INVALID_FILE";
const INVALID_FILE_METADATA: &str = "INVALID_FILE_METADATA";
const INVALID_FILE_CONTENT: &str = "INVALID_FILE_CONTENT";

#[derive(Deserialize, Default)]
struct Metadata {
    #[serde(default)]
    path: String,
    #[serde(flatten)]
    perm: Permission,
}

struct UploadError(StatusCode, &'static str, String);

impl UploadError {
    fn into_resp(self) -> Resp {
        h::error(self.0, self.1, self.2)
    }
}

fn parse_metadata(raw: &[u8]) -> Result<Metadata, UploadError> {
    let meta: Metadata = serde_json::from_slice::<Option<Metadata>>(raw)
        .map_err(|e| {
            UploadError(
                StatusCode::BAD_REQUEST,
                INVALID_FILE_METADATA,
                format!("invalid metadata format. {e}"),
            )
        })?
        .unwrap_or_default();
    if meta.path.is_empty() {
        return Err(UploadError(
            StatusCode::BAD_REQUEST,
            INVALID_FILE_METADATA,
            "metadata path is empty".into(),
        ));
    }
    Ok(meta)
}

/// Temporary files not yet committed; removed on drop so failed uploads leave nothing.
#[derive(Default)]
struct Staged(Vec<Option<String>>);

impl Drop for Staged {
    fn drop(&mut self) {
        for p in self.0.iter().flatten() {
            let _ = fs::remove_file(p);
        }
    }
}

fn temp_name(dir: &str, base: &str) -> String {
    let id = &h::new_uuid(false)[..12];
    paths::clean(&format!("{dir}/.{base}.execd-upload-{id}"))
}

/// Where to stream the i-th file part: next to its target when its metadata is known.
fn staging_path(meta: Option<&Result<Metadata, UploadError>>) -> String {
    if let Some(Ok(meta)) = meta
        && let Ok(resolved) = paths::expand(&meta.path)
    {
        let dir = paths::dir(&resolved);
        if files::mkdir_all(&dir).is_ok() {
            return temp_name(&dir, &paths::base(&resolved));
        }
    }
    temp_name(&std::env::temp_dir().to_string_lossy(), "spool")
}

async fn stream_part(field: &mut multer::Field<'_>, path: &str) -> io::Result<()> {
    // 0777 & ~umask, like Go's os.OpenFile(..., os.ModePerm) for a new file.
    let mut f = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o777)
        .open(path)
        .await?;
    while let Some(chunk) = field.chunk().await.map_err(io::Error::other)? {
        f.write_all(&chunk).await?;
    }
    f.flush().await?;
    f.sync_all().await
}

pub async fn upload(req: Request<Incoming>) -> Resp {
    let empty_form = || {
        h::error(
            StatusCode::BAD_REQUEST,
            INVALID_FILE,
            "multipart form is empty",
        )
    };
    let boundary = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| multer::parse_boundary(ct).ok());
    let Some(boundary) = boundary else {
        return empty_form();
    };
    let stream = BodyStream::new(req.into_body())
        .try_filter_map(|frame| futures::future::ready(Ok(frame.into_data().ok())));
    let mut form = multer::Multipart::new(stream, boundary);

    let mut metas: Vec<Result<Metadata, UploadError>> = Vec::new();
    let mut staged = Staged::default();
    loop {
        let mut field = match form.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(_) => return empty_form(),
        };
        // Parts without a file name are form values, which execd never looks at.
        let is_file = field.file_name().is_some_and(|n| !n.is_empty());
        match (field.name(), is_file) {
            (Some("metadata"), true) => match field.bytes().await {
                Ok(raw) => metas.push(parse_metadata(&raw)),
                Err(_) => return empty_form(),
            },
            (Some("file"), true) => {
                let path = staging_path(metas.get(staged.0.len()));
                staged.0.push(Some(path.clone()));
                if let Err(e) = stream_part(&mut field, &path).await {
                    return UploadError(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        RUNTIME_ERROR,
                        format!("error copying file {path}. {}", sys::errno_text(&e)),
                    )
                    .into_resp();
                }
            }
            _ => {
                // Drain and ignore.
                while let Ok(Some(_)) = field.chunk().await {}
            }
        }
    }

    if metas.is_empty() {
        return h::error(
            StatusCode::BAD_REQUEST,
            INVALID_FILE_METADATA,
            "metadata file is missing",
        );
    }
    if staged.0.is_empty() {
        return h::error(
            StatusCode::BAD_REQUEST,
            INVALID_FILE_CONTENT,
            "file is missing",
        );
    }
    if metas.len() != staged.0.len() {
        return h::error(
            StatusCode::BAD_REQUEST,
            INVALID_FILE,
            format!(
                "metadata and file count mismatch: {} vs {}",
                metas.len(),
                staged.0.len()
            ),
        );
    }
    for (i, meta) in metas.into_iter().enumerate() {
        let tmp = staged.0[i].take().expect("staged once");
        let res = match meta {
            Ok(meta) => commit(&meta, &tmp),
            Err(e) => Err(e),
        };
        if let Err(e) = res {
            let _ = fs::remove_file(&tmp);
            return e.into_resp();
        }
    }
    h::ok()
}

/// Moves one staged file onto its target and applies the requested permissions.
fn commit(meta: &Metadata, tmp: &str) -> Result<(), UploadError> {
    let fail = |msg: String| UploadError(StatusCode::INTERNAL_SERVER_ERROR, RUNTIME_ERROR, msg);
    let resolved = paths::expand(&meta.path)
        .map_err(|e| fail(format!("error resolving target path {}. {e}", meta.path)))?;
    let dir = paths::dir(&resolved);
    files::mkdir_all(&dir)
        .map_err(|(m, _)| fail(format!("error creating target directory {dir}. {m}")))?;

    // execd opens the target with O_TRUNC, which writes through a symlink and keeps an
    // existing file's mode and owner; emulate that on top of the atomic rename.
    let mut target = resolved.clone();
    if fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink())
        && let Ok(real) = fs::canonicalize(&target)
    {
        target = real.to_string_lossy().into_owned();
    }
    match fs::metadata(&target) {
        Ok(md) if md.is_dir() => {
            let e = io::Error::from_raw_os_error(libc::EISDIR);
            return Err(fail(format!(
                "error opening destination file {resolved}. {}",
                sys::path_err("open", &resolved, &e)
            )));
        }
        Ok(md) => {
            let _ = fs::set_permissions(tmp, fs::Permissions::from_mode(md.mode() & 0o7777));
            let _ = sys::chown(tmp, Some(md.uid()), Some(md.gid()));
        }
        Err(_) => {}
    }
    let moved = match fs::rename(tmp, &target) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            // Spooled on another filesystem: copy next to the target first.
            let near = temp_name(&paths::dir(&target), &paths::base(&target));
            let res = fs::copy(tmp, &near)
                .and_then(|_| fs::File::open(&near)?.sync_all())
                .and_then(|_| fs::rename(&near, &target));
            if res.is_err() {
                let _ = fs::remove_file(&near);
            }
            let _ = fs::remove_file(tmp);
            res
        }
        other => other,
    };
    moved.map_err(|e| {
        fail(format!(
            "error copying file {resolved}. {}",
            sys::errno_text(&e)
        ))
    })?;
    // Make the new directory entry durable (best effort, as in execd).
    if let Ok(d) = fs::File::open(paths::dir(&target)) {
        let _ = d.sync_all();
    }
    let apply = || files::chmod_file(&resolved, &meta.perm);
    let res = apply().or_else(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        apply()
    });
    res.map_err(|e| fail(format!("error chmoding file {resolved}. {}", e.msg)))
}
