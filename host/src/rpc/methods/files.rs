//! files.rw: contents cross the guest boundary in 1 MiB chunks through the
//! provider's reader/writer resources, so its memory stays small whatever the
//! file size; base64 exists only here at the JSON edge.

use super::{CallCtx, drop_resource, guest, guest_res};
use crate::rpc::codec::decode;
use crate::rpc::errors::RpcError;
use crate::runtime::Instance;
use crate::runtime::bindings::infra::{ByteRange, FileInfo, FileType, FileUpload};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use wasmtime::component::{ResourceAny, Val};

/// The function that ends a write and answers the new file's info.
const FINISH: &str = "[method]file-writer.finish";
/// Bytes moved per call into or out of the provider.
const CHUNK: usize = 1 << 20;
/// Empty chunks in a row after which a file reader counts as stuck.
const MAX_EMPTY_CHUNKS: u32 = 1000;

#[derive(Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Utf8,
    Base64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    sandbox_id: String,
    path: String,
    #[serde(default)]
    encoding: Encoding,
    offset: Option<u64>,
    length: Option<u64>,
}

/// `files.write`: one file (`path`, `content`) or several in one call (`files`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    sandbox_id: String,
    path: Option<String>,
    content: Option<String>,
    #[serde(default)]
    encoding: Encoding,
    mode: Option<Value>,
    files: Option<Vec<FileParams>>,
}

/// One file of `files.write` with `files`: the single-file params less `sandbox_id`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileParams {
    path: String,
    content: String,
    #[serde(default)]
    encoding: Encoding,
    mode: Option<Value>,
}

pub async fn read(ctx: &CallCtx, p: ReadParams) -> Result<Value, RpcError> {
    let method = "files.read";
    if p.length == Some(0) {
        return Err(RpcError::invalid_params(
            method,
            "`length` must be at least 1",
        ));
    }
    let range = match (p.offset, p.length) {
        (None, None) => None,
        (offset, length) => Some(ByteRange {
            offset: offset.unwrap_or(0),
            length,
        }),
    };
    let mut inst = ctx.instance().await?;
    let reader = guest!(inst, call_files_read, &p.sandbox_id, &p.path, range)?;
    let bytes = drain(ctx, &mut inst, reader, &p.path).await;
    drop_resource(&mut inst, reader).await;
    let bytes = bytes?;
    let size = bytes.len();
    let content = match p.encoding {
        Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(&bytes),
        Encoding::Utf8 => String::from_utf8(bytes).map_err(|e| {
            RpcError::invalid_params(
                method,
                format!(
                    "{} is not UTF-8 text (invalid byte at offset {}); read it with encoding \"base64\"",
                    p.path,
                    e.utf8_error().valid_up_to()
                ),
            )
        })?,
    };
    let encoding = if p.encoding == Encoding::Base64 {
        "base64"
    } else {
        "utf8"
    };
    // Built by hand: `json!` would serialise `content` into a copy of itself
    // (32 MiB more to allocate and write for a 32 MiB file).
    let mut answer = Map::with_capacity(3);
    answer.insert("content".into(), Value::String(content));
    answer.insert("encoding".into(), encoding.into());
    answer.insert("size".into(), size.into());
    Ok(Value::Object(answer))
}

async fn drain(
    ctx: &CallCtx,
    inst: &mut Instance,
    reader: ResourceAny,
    path: &str,
) -> Result<Vec<u8>, RpcError> {
    let cap = ctx.max_output_bytes;
    let size = inst
        .provider
        .abx_epp_infra()
        .file_reader()
        .call_size(&mut inst.store, reader)
        .await
        .map_err(|trap| RpcError::from_trap(&trap))?;
    if size.is_some_and(|s| s > cap as u64) {
        return Err(too_big(path, cap));
    }
    let mut bytes = Vec::with_capacity(size.unwrap_or(0).min(cap as u64) as usize);
    let mut empty = 0;
    while let Some(chunk) = guest_res!(*inst, file_reader.call_read, reader, CHUNK as u32)? {
        if chunk.is_empty() {
            // Neither data nor the end: tolerated a little, never forever.
            empty += 1;
            if empty >= MAX_EMPTY_CHUNKS {
                return Err(RpcError::fault(format!(
                    "the provider's file reader returned {MAX_EMPTY_CHUNKS} empty chunks in a row \
                     for {path} (no data and no end); stopped; report this provider bug"
                )));
            }
            continue;
        }
        empty = 0;
        if bytes.len() + chunk.len() > cap {
            return Err(too_big(path, cap));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

fn too_big(path: &str, cap: usize) -> RpcError {
    RpcError::invalid_params(
        "files.read",
        format!(
            "{path} is larger than this host returns at once ({cap} bytes, --max-output-bytes); read it in parts with offset and length"
        ),
    )
}

pub async fn write(ctx: &CallCtx, p: WriteParams) -> Result<Value, RpcError> {
    let method = "files.write";
    let bad = |e: String| RpcError::invalid_params(method, e);
    let (sandbox_id, file) = match p {
        WriteParams {
            files: Some(files),
            path: None,
            content: None,
            mode: None,
            encoding: Encoding::Utf8,
            sandbox_id,
        } => return write_many(ctx, sandbox_id, files).await,
        WriteParams { files: Some(_), .. } => {
            return Err(bad(
                "`files` lists every file with its own `path`, `content`, \
                 `encoding` and `mode`; leave those out of the params themselves"
                    .into(),
            ));
        }
        WriteParams {
            path: Some(path),
            content: Some(content),
            sandbox_id,
            encoding,
            mode,
            files: None,
        } => (
            sandbox_id,
            FileParams {
                path,
                content,
                encoding,
                mode,
            },
        ),
        _ => {
            return Err(bad(
                "give `path` and `content` (one file), or `files`: a list of \
                 {path, content, encoding?, mode?} (several files in one call)"
                    .into(),
            ));
        }
    };
    let path = file.path.clone();
    let (bytes, mode) = file.decode("").map_err(bad)?;
    let mut inst = ctx.instance().await?;
    let writer = guest!(
        inst,
        call_files_write,
        &sandbox_id,
        &path,
        bytes.len() as u64,
        mode
    )?;
    let result = async {
        for chunk in bytes.chunks(CHUNK) {
            guest_res!(inst, file_writer.call_write, writer, chunk)?;
        }
        // Called by name so the codec answers the file-info, as files.get_info's.
        let info = ctx
            .codec
            .call(&mut inst, FINISH, &[Val::Resource(writer)])
            .await?
            .ok_or_else(|| RpcError::fault(format!("`{FINISH}` answered nothing")))?;
        ctx.codec.to_json(FINISH, info)
    }
    .await;
    drop_resource(&mut inst, writer).await;
    result
}

impl FileParams {
    /// The bytes to write and the mode; `at` says which file a message is about.
    fn decode(self, at: &str) -> Result<(Vec<u8>, Option<u32>), String> {
        let mode = self
            .mode
            .as_ref()
            .map(|m| decode::mode(m, &format!("{at}mode")))
            .transpose()?;
        let bytes = match self.encoding {
            Encoding::Utf8 => self.content.into_bytes(),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(&self.content)
                .map_err(|e| format!("`{at}content` is not valid base64 ({e})"))?,
        };
        Ok((bytes, mode))
    }
}

/// The function behind `files.write` with `files` (abx:epp 1.1).
const WRITE_MANY: &str = "files-write-many";

/// `files.write` with `files`: one call of `files-write-many`, answered as
/// `{files: [file-info, …]}` in list order.
async fn write_many(
    ctx: &CallCtx,
    sandbox_id: String,
    files: Vec<FileParams>,
) -> Result<Value, RpcError> {
    let uploads = files
        .into_iter()
        .enumerate()
        .map(|(i, file)| {
            let at = format!("files[{i}].");
            let path = file.path.clone();
            let (content, mode) = file.decode(&at).map_err(|e| {
                RpcError::invalid_params("files.write", format!("{e} (file {path})"))
            })?;
            Ok(FileUpload {
                path,
                content,
                mode,
            })
        })
        .collect::<Result<Vec<_>, RpcError>>()?;
    let mut inst = ctx.instance().await?;
    let infos = guest!(inst, call_files_write_many, &sandbox_id, &uploads)?;
    drop(uploads);
    let list = Val::List(infos.into_iter().map(file_info_val).collect());
    Ok(json!({"files": ctx.codec.to_json(WRITE_MANY, list)?}))
}

/// A typed file-info as the value the codec answers (the same JSON as every
/// other method's file-info).
fn file_info_val(info: FileInfo) -> Val {
    let kind = match info.type_ {
        FileType::File => "file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Other => "other",
    };
    let text = |s: Option<String>| Val::Option(s.map(|s| Box::new(Val::String(s))));
    Val::Record(vec![
        ("path".into(), Val::String(info.path)),
        ("name".into(), Val::String(info.name)),
        ("type".into(), Val::Enum(kind.into())),
        ("size".into(), Val::U64(info.size)),
        ("mode".into(), Val::U32(info.mode)),
        ("owner".into(), text(info.owner)),
        ("group".into(), text(info.group)),
        ("modified-at".into(), text(info.modified_at)),
    ])
}
