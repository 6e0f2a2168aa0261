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

impl Encoding {
    fn name(self) -> &'static str {
        match self {
            Encoding::Utf8 => "utf8",
            Encoding::Base64 => "base64",
        }
    }

    /// The bytes that `content`, sent in this encoding, stands for.
    fn bytes(self, content: String) -> Result<Vec<u8>, base64::DecodeError> {
        match self {
            Encoding::Utf8 => Ok(content.into_bytes()),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD.decode(&content),
        }
    }
}

/// A write's optional `mode` param as permission bits; `name` is how the
/// message calls the param.
fn mode_bits(mode: Option<&Value>, name: &str) -> Result<Option<u32>, String> {
    mode.map(|m| decode::mode(m, name)).transpose()
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
    /// Send the content in `files.data` notifications as it arrives.
    #[serde(default)]
    stream: bool,
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
    /// The content follows in `files.write_chunk` notifications, `size` bytes in all.
    #[serde(default)]
    stream: bool,
    size: Option<u64>,
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
    if p.stream {
        let start = p.offset.unwrap_or(0);
        let sent = send_data(ctx, &mut inst, reader, &p.path, p.encoding, start).await;
        drop_resource(&mut inst, reader).await;
        let size = sent?;
        return Ok(json!({"size": size, "encoding": p.encoding.name()}));
    }
    let bytes = drain(ctx, &mut inst, reader, &p.path).await;
    drop_resource(&mut inst, reader).await;
    let bytes = bytes?;
    let size = bytes.len();
    let content = match p.encoding {
        Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(&bytes),
        Encoding::Utf8 => String::from_utf8(bytes).map_err(|e| {
            not_text(
                &p.path,
                p.offset.unwrap_or(0) + e.utf8_error().valid_up_to() as u64,
            )
        })?,
    };
    let encoding = p.encoding.name();
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
    let mut chunks = Chunks::new(reader, path);
    while let Some(chunk) = chunks.next(inst).await? {
        if bytes.len() + chunk.len() > cap {
            return Err(too_big(path, cap));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// The non-empty chunks of a provider's file reader, until its end.
struct Chunks<'a> {
    reader: ResourceAny,
    path: &'a str,
}

impl<'a> Chunks<'a> {
    fn new(reader: ResourceAny, path: &'a str) -> Self {
        Chunks { reader, path }
    }

    async fn next(&mut self, inst: &mut Instance) -> Result<Option<Vec<u8>>, RpcError> {
        let mut empty = 0;
        loop {
            match guest_res!(*inst, file_reader.call_read, self.reader, CHUNK as u32)? {
                None => return Ok(None),
                Some(chunk) if !chunk.is_empty() => return Ok(Some(chunk)),
                // Neither data nor the end: tolerated a little, never forever.
                Some(_) => {
                    empty += 1;
                    if empty >= MAX_EMPTY_CHUNKS {
                        return Err(RpcError::fault(format!(
                            "the provider's file reader returned {MAX_EMPTY_CHUNKS} empty chunks in a row \
                             for {} (no data and no end); stopped; report this provider bug",
                            self.path
                        )));
                    }
                }
            }
        }
    }
}

/// `files.read` with `stream: true`: each chunk the provider hands over goes
/// out at once as `files.data {request_id, offset, content}`, so the client
/// gets the first bytes while the rest still arrives and no size limit
/// applies. UTF-8 text is cut only between characters (a character split by
/// a chunk waits for the next one). Answers the number of bytes sent.
async fn send_data(
    ctx: &CallCtx,
    inst: &mut Instance,
    reader: ResourceAny,
    path: &str,
    encoding: Encoding,
    start: u64,
) -> Result<u64, RpcError> {
    let mut chunks = Chunks::new(reader, path);
    // Bytes sent so far, and the start of a character the last chunk cut.
    let mut sent = 0u64;
    let mut carry: Vec<u8> = Vec::new();
    while let Some(chunk) = chunks.next(inst).await? {
        let (content, len) = match encoding {
            Encoding::Base64 => (
                base64::engine::general_purpose::STANDARD.encode(&chunk),
                chunk.len(),
            ),
            Encoding::Utf8 => {
                let bytes = match carry.is_empty() {
                    true => chunk,
                    false => [std::mem::take(&mut carry), chunk].concat(),
                };
                let (text, rest) =
                    utf8_prefix(bytes).map_err(|at| not_text(path, start + sent + at as u64))?;
                carry = rest;
                let len = text.len();
                (text, len)
            }
        };
        let len = len as u64;
        if len > 0 {
            let mut params = Map::with_capacity(3);
            params.insert("offset".into(), (start + sent).into());
            params.insert("content".into(), Value::String(content));
            ctx.notify("files.data", Value::Object(params)).await;
        }
        sent += len;
    }
    if !carry.is_empty() {
        // The file ends inside a character.
        return Err(not_text(path, start + sent));
    }
    Ok(sent)
}

/// The longest valid UTF-8 text at the front of `bytes` and the bytes of an
/// unfinished character after it, or the offset of the first invalid byte.
fn utf8_prefix(mut bytes: Vec<u8>) -> Result<(String, Vec<u8>), usize> {
    match std::str::from_utf8(&bytes) {
        Ok(_) => Ok((String::from_utf8(bytes).expect("checked"), Vec::new())),
        // `error_len` none: the input ended inside a character.
        Err(e) if e.error_len().is_none() => {
            let rest = bytes.split_off(e.valid_up_to());
            Ok((String::from_utf8(bytes).expect("checked"), rest))
        }
        Err(e) => Err(e.valid_up_to()),
    }
}

fn not_text(path: &str, offset: u64) -> RpcError {
    RpcError::invalid_params(
        "files.read",
        format!(
            "{path} is not UTF-8 text (invalid byte at offset {offset}); read it with encoding \"base64\""
        ),
    )
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
            stream: false,
            size: None,
            sandbox_id,
        } => return write_many(ctx, sandbox_id, files).await,
        WriteParams { files: Some(_), .. } => {
            return Err(bad(
                "`files` lists every file with its own `path`, `content`, \
                 `encoding` and `mode`; leave those out of the params themselves \
                 (and `stream` and `size`: stream one file at a time)"
                    .into(),
            ));
        }
        WriteParams {
            stream: true,
            path: Some(path),
            content: None,
            size: Some(size),
            sandbox_id,
            encoding,
            mode,
            files: None,
        } => return write_streamed(ctx, sandbox_id, path, size, encoding, mode).await,
        WriteParams { stream: true, .. } => {
            return Err(bad(
                "`stream: true` takes `path` and `size` (the exact number of bytes), and no \
                 `content`: send the content in `files.write_chunk` notifications \
                 {request_id, content}"
                    .into(),
            ));
        }
        WriteParams { size: Some(_), .. } => {
            return Err(bad(
                "`size` goes with `stream: true`; a write with `content` takes its size from it"
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
            ..
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
                "give `path` and `content` (one file), `files`: a list of \
                 {path, content, encoding?, mode?} (several files in one call), or \
                 `path`, `size` and `stream: true` (content in `files.write_chunk`s)"
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
        finish(ctx, &mut inst, writer).await
    }
    .await;
    drop_resource(&mut inst, writer).await;
    result
}

/// Ends a write: the file-info of the new file, as files.get_info answers it
/// (called by name so that the codec projects it).
async fn finish(
    ctx: &CallCtx,
    inst: &mut Instance,
    writer: ResourceAny,
) -> Result<Value, RpcError> {
    let info = ctx
        .codec
        .call(inst, FINISH, &[Val::Resource(writer)])
        .await?
        .ok_or_else(|| RpcError::fault(format!("`{FINISH}` answered nothing")))?;
    ctx.codec.to_json(FINISH, info)
}

/// One `files.write_chunk` notification: a piece of a streamed write's content.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteChunk {
    #[allow(dead_code)]
    request_id: Value,
    content: String,
}

/// `files.write` with `stream: true`: the provider's writer is opened at once
/// and each `files.write_chunk` goes into it as it arrives (the server hands
/// them over in order, reading stdin no faster than they are written), so the
/// upload runs while the client still sends. Answered once `size` bytes are in
/// and the provider has finished the file. Any error (a bad chunk, more bytes
/// than `size`, the upload failing) ends the request with the file unchanged;
/// chunks that follow are dropped.
async fn write_streamed(
    ctx: &CallCtx,
    sandbox_id: String,
    path: String,
    size: u64,
    encoding: Encoding,
    mode: Option<Value>,
) -> Result<Value, RpcError> {
    let bad = |e: String| RpcError::invalid_params("files.write", e);
    let mode = mode_bits(mode.as_ref(), "mode").map_err(bad)?;
    let mut input = ctx.take_input().ok_or_else(|| {
        RpcError::fault("a streamed files.write was started without its input channel")
    })?;
    let mut inst = ctx.instance().await?;
    let writer = guest!(inst, call_files_write, &sandbox_id, &path, size, mode)?;
    let result = async {
        let mut written = 0u64;
        while written < size {
            // The sender lives as long as the request: `None` cannot happen
            // while it runs; the request's deadline bounds a silent client.
            let Some(item) = input.recv().await else {
                return Err(RpcError::fault("the input of this write ended early"));
            };
            // Held until this chunk is written: the server reads no further
            // ahead than the budget allows.
            let _permit = item.permit;
            let chunk: WriteChunk = serde_json::from_value(Value::Object(item.params?))
                .map_err(|e| bad(format!("a `files.write_chunk` for {path}: {e}")))?;
            let bytes = encoding.bytes(chunk.content).map_err(|e| {
                bad(format!(
                    "the `files.write_chunk` at byte {written} of {path} is not valid \
                     base64 ({e}); the file was not changed"
                ))
            })?;
            if written + bytes.len() as u64 > size {
                return Err(bad(format!(
                    "the chunks for {path} carry more than `size` ({size}) bytes; \
                     the file was not changed"
                )));
            }
            for piece in bytes.chunks(CHUNK) {
                guest_res!(inst, file_writer.call_write, writer, piece)?;
            }
            written += bytes.len() as u64;
        }
        finish(ctx, &mut inst, writer).await
    }
    .await;
    drop_resource(&mut inst, writer).await;
    result
}

impl FileParams {
    /// The bytes to write and the mode; `at` says which file a message is about.
    fn decode(self, at: &str) -> Result<(Vec<u8>, Option<u32>), String> {
        let mode = mode_bits(self.mode.as_ref(), &format!("{at}mode"))?;
        let bytes = self
            .encoding
            .bytes(self.content)
            .map_err(|e| format!("`{at}content` is not valid base64 ({e})"))?;
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

#[cfg(test)]
mod tests {
    use super::utf8_prefix;

    #[test]
    fn text_is_cut_between_characters() {
        let text = "aé🦀z".as_bytes();
        // Every cut of the text: the front is whole characters, the rest the
        // start of the character the cut went through.
        for cut in 0..=text.len() {
            let (front, rest) = utf8_prefix(text[..cut].to_vec()).expect("valid so far");
            assert!(rest.len() < 4, "cut {cut}");
            assert_eq!([front.as_bytes(), &rest].concat(), &text[..cut]);
            let whole = [rest, text[cut..].to_vec()].concat();
            let (back, none) = utf8_prefix(whole).expect("the rest completes it");
            assert!(none.is_empty());
            assert_eq!(front + &back, "aé🦀z");
        }
        // An invalid byte is an error at its offset, not a character to wait for.
        assert_eq!(utf8_prefix(b"ab\xffcd".to_vec()), Err(2));
        assert_eq!(utf8_prefix(b"ab\xc3(".to_vec()), Err(2));
    }
}
