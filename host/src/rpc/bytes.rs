//! Byte streams (file contents): a stream method whose function answers a
//! reader (`read`, `size`) or a writer (`write`, `finish`). Contents cross
//! the guest boundary in 1 MiB chunks, typed (never one `Val` per byte), so
//! the provider's memory stays small whatever the size; base64 and UTF-8 exist
//! only here, at the JSON edge. This adapter's own wire params: `encoding`,
//! `offset` and `length` (a reader's range), `content` and `size` (a
//! writer's), `stream` (chunks as notifications: the method's `note=` when
//! reading, its `input=` when writing) and, for a writer chosen by a `when.`
//! list param, that list of `{path, content, encoding?, mode?}`.

use super::context::CallCtx;
use super::errors::RpcError;
use super::invoke::call_with;
use super::outbox::tail_len;
use crate::codec::decode;
use crate::contract::table::{Method, StreamTags, Via};
use crate::runtime::Instance;
use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};
use wasmtime::component::{ResourceAny, Val};

/// Bytes moved per call into or out of the provider.
const CHUNK: usize = 1 << 20;
/// Empty chunks in a row after which a reader counts as stuck.
const MAX_EMPTY_CHUNKS: u32 = 1000;

#[derive(Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Encoding {
    #[default]
    Utf8,
    Base64,
    /// Raw bytes in binary frames, streamed only (docs/epp-1.md "Binary frames").
    Binary,
}

impl Encoding {
    fn name(self) -> &'static str {
        match self {
            Encoding::Utf8 => "utf8",
            Encoding::Base64 => "base64",
            Encoding::Binary => "binary",
        }
    }

    /// The bytes that `content`, sent in this encoding, stands for, or what
    /// is wrong with it (words that follow the content's name).
    fn bytes(self, content: String) -> Result<Vec<u8>, String> {
        match self {
            Encoding::Utf8 => Ok(content.into_bytes()),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(&content)
                .map_err(|e| format!("is not valid base64 ({e})")),
            Encoding::Binary => Err(ONLY_STREAMED.into()),
        }
    }
}

/// Why `"binary"` is refused outside a streamed read or write.
const ONLY_STREAMED: &str = "cannot be \"binary\": raw bytes travel only as binary frames, \
    in a streamed read or write (`stream: true`; docs/epp-1.md, Binary frames); use \
    \"base64\" in a JSON line";

/// Binary frames need the EPP/1 wire (stdout lines), not another front end.
fn frames_possible(ctx: &CallCtx, method: &Method, encoding: Encoding) -> Result<(), RpcError> {
    if encoding == Encoding::Binary && !ctx.on_wire() {
        return Err(RpcError::invalid_params(
            method.name,
            "encoding \"binary\" (binary frames) exists only on the EPP/1 wire; use \"base64\"",
        ));
    }
    Ok(())
}

/// Params of `method` into this adapter's typed form.
fn parse<T: serde::de::DeserializeOwned>(
    method: &Method,
    params: Map<String, Value>,
) -> Result<T, RpcError> {
    super::invoke::parse(method.name, params)
}

/// Opens a function's resource: the params as its function's arguments, a
/// fresh instance, the call.
async fn open(
    ctx: &CallCtx,
    method: &Method,
    function: &str,
    params: Map<String, Value>,
) -> Result<(Instance, ResourceAny), RpcError> {
    let args = super::invoke::args(ctx, method, function, params, &[])?;
    let mut inst = ctx.instance().await?;
    match call_with(&mut inst, function, args).await? {
        Some(Val::Resource(r)) => Ok((inst, r)),
        _ => Err(RpcError::fault(format!(
            "`{function}` (for {}) did not answer the resource its type promises",
            method.name
        ))),
    }
}

// ------------------------------------------------------------------ reading

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadParams {
    sandbox_id: String,
    path: String,
    #[serde(default)]
    encoding: Encoding,
    offset: Option<u64>,
    length: Option<u64>,
}

/// A reader's functions: `read`, `size` when it has one, and `read-into`
/// when the contract has it (used instead of `read` when the component
/// exports it).
pub struct ReaderFns {
    pub read: &'static str,
    pub size: Option<&'static str>,
    pub read_into: Option<&'static str>,
}

/// Reads a file: collected into one answer `{content, encoding, size}`, or,
/// with `stream: true`, sent as notifications (the method's `note=`)
/// `{request_id, offset, content}` as it arrives, then `{size, encoding}`.
pub async fn read(
    ctx: &CallCtx,
    method: &Method,
    tags: &StreamTags,
    function: &str,
    fns: ReaderFns,
    params: Map<String, Value>,
    forward: bool,
) -> Result<Value, RpcError> {
    let p: ReadParams = parse(method, params)?;
    if p.length == Some(0) {
        return Err(RpcError::invalid_params(
            method.name,
            "`length` must be at least 1",
        ));
    }
    let mut args = Map::new();
    args.insert("sandbox_id".into(), p.sandbox_id.into());
    args.insert("path".into(), p.path.clone().into());
    if p.offset.is_some() || p.length.is_some() {
        let mut range = Map::new();
        range.insert("offset".into(), p.offset.unwrap_or(0).into());
        range.insert("length".into(), p.length.into());
        args.insert("range".into(), Value::Object(range));
    }
    frames_possible(ctx, method, p.encoding)?;
    if p.encoding == Encoding::Binary && !(forward && tags.note.is_some()) {
        return Err(RpcError::invalid_params(
            method.name,
            format!("`encoding` {ONLY_STREAMED}"),
        ));
    }
    let (mut inst, reader) = open(ctx, method, function, args).await?;
    let reading = Reading {
        method,
        read: fns.read,
        read_into: fns.read_into.filter(|f| ctx.runtime.exports(f)),
        path: &p.path,
        start: p.offset.unwrap_or(0),
    };
    let result = match (forward, tags.note) {
        (true, Some(note)) => {
            let sent = reading.send(ctx, &mut inst, reader, note, p.encoding).await;
            sent.map(|size| {
                let mut answer = Map::with_capacity(2);
                answer.insert("size".into(), size.into());
                answer.insert("encoding".into(), p.encoding.name().into());
                Value::Object(answer)
            })
        }
        _ => {
            let bytes = reading.drain(ctx, &mut inst, reader, fns.size).await;
            bytes.and_then(|bytes| reading.answer(bytes, p.encoding))
        }
    };
    inst.drop_resource(reader).await;
    result
}

/// One read of a file.
struct Reading<'a> {
    method: &'a Method,
    read: &'static str,
    /// The reader's `read-into`, which the component exports.
    read_into: Option<&'static str>,
    path: &'a str,
    /// The file offset of the first byte.
    start: u64,
}

impl Reading<'_> {
    /// The next non-empty chunk, in the pieces it came in, or none at the end.
    async fn chunk(
        &self,
        inst: &mut Instance,
        reader: ResourceAny,
    ) -> Result<Option<Vec<Bytes>>, RpcError> {
        let mut empty = 0;
        loop {
            let chunk = match self.read_into {
                Some(read_into) => inst.read_into(read_into, reader, CHUNK).await?,
                None => {
                    let chunk: Option<Vec<u8>> =
                        inst.call_typed(self.read, (reader, CHUNK as u32)).await?;
                    chunk.map(|c| vec![Bytes::from(c)])
                }
            };
            match chunk {
                None => return Ok(None),
                Some(chunk) if tail_len(&chunk) > 0 => return Ok(Some(chunk)),
                // Neither data nor the end: tolerated a little, never forever.
                Some(_) => {
                    empty += 1;
                    if empty >= MAX_EMPTY_CHUNKS {
                        return Err(RpcError::fault(format!(
                            "the provider's reader returned {MAX_EMPTY_CHUNKS} empty chunks in a \
                             row for {} (no data and no end); stopped; report this provider bug",
                            self.path
                        )));
                    }
                }
            }
        }
    }

    /// The whole content, within `--max-output-bytes`.
    async fn drain(
        &self,
        ctx: &CallCtx,
        inst: &mut Instance,
        reader: ResourceAny,
        size: Option<&'static str>,
    ) -> Result<Vec<u8>, RpcError> {
        let cap = ctx.max_output_bytes;
        let size: Option<u64> = match size {
            Some(size) => inst.call_bare(size, (reader,)).await?,
            None => None,
        };
        if size.is_some_and(|s| s > cap as u64) {
            return Err(self.too_big(cap, size));
        }
        let mut bytes = Vec::with_capacity(size.unwrap_or(0).min(cap as u64) as usize);
        while let Some(chunk) = self.chunk(inst, reader).await? {
            if bytes.len() + tail_len(&chunk) > cap {
                return Err(self.too_big(cap, size));
            }
            for piece in chunk {
                bytes.extend_from_slice(&piece);
            }
        }
        Ok(bytes)
    }

    fn answer(&self, bytes: Vec<u8>, encoding: Encoding) -> Result<Value, RpcError> {
        let size = bytes.len();
        let content = match encoding {
            Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(&bytes),
            Encoding::Utf8 => String::from_utf8(bytes)
                .map_err(|e| self.not_text(self.start + e.utf8_error().valid_up_to() as u64))?,
            Encoding::Binary => unreachable!("refused before reading"),
        };
        // Built by hand: `json!` would serialise `content` into a copy of itself.
        let mut answer = Map::with_capacity(3);
        answer.insert("content".into(), Value::String(content));
        answer.insert("encoding".into(), encoding.name().into());
        answer.insert("size".into(), size.into());
        Ok(Value::Object(answer))
    }

    /// Each chunk goes out at once as notification `note`, so the client gets
    /// the first bytes while the rest still arrives and no size limit applies.
    /// UTF-8 text is cut only between characters (a character split by a chunk
    /// waits for the next one). Answers the number of bytes sent.
    async fn send(
        &self,
        ctx: &CallCtx,
        inst: &mut Instance,
        reader: ResourceAny,
        note: &str,
        encoding: Encoding,
    ) -> Result<u64, RpcError> {
        let mut sent = 0u64;
        let mut carry: Vec<u8> = Vec::new();
        while let Some(chunk) = self.chunk(inst, reader).await? {
            if encoding == Encoding::Binary {
                let mut params = Map::with_capacity(3);
                params.insert("offset".into(), (self.start + sent).into());
                sent += tail_len(&chunk) as u64;
                ctx.notify_framed(note, params, chunk).await;
                continue;
            }
            let chunk = joined(chunk);
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
                    let (text, rest) = utf8_prefix(bytes)
                        .map_err(|at| self.not_text(self.start + sent + at as u64))?;
                    carry = rest;
                    let len = text.len();
                    (text, len)
                }
                Encoding::Binary => unreachable!("sent as frames above"),
            };
            let len = len as u64;
            if len > 0 {
                let mut params = Map::with_capacity(3);
                params.insert("offset".into(), (self.start + sent).into());
                params.insert("content".into(), Value::String(content));
                ctx.notify(note, params).await;
            }
            sent += len;
        }
        if !carry.is_empty() {
            // The file ends inside a character.
            return Err(self.not_text(self.start + sent));
        }
        Ok(sent)
    }

    fn not_text(&self, offset: u64) -> RpcError {
        RpcError::invalid_params(
            self.method.name,
            format!(
                "{} is not UTF-8 text (invalid byte at offset {offset}); read it with encoding \
                 \"base64\"",
                self.path
            ),
        )
    }

    fn too_big(&self, cap: usize, size: Option<u64>) -> RpcError {
        RpcError::invalid_params(
            self.method.name,
            format!(
                "{} is larger than this host returns at once ({cap} bytes, --max-output-bytes); \
                 read it in parts with offset and length",
                self.path
            ),
        )
        .too_large(size)
    }
}

/// A chunk's pieces as one buffer (no copy when it came in one piece).
fn joined(mut pieces: Vec<Bytes>) -> Vec<u8> {
    match pieces.len() {
        1 => pieces.pop().map(Vec::from).unwrap_or_default(),
        _ => pieces.concat(),
    }
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

// ------------------------------------------------------------------ writing

/// A writer's function and its resource's methods.
pub struct Writer {
    pub function: &'static str,
    pub write: &'static str,
    pub finish: &'static str,
    /// Its `write-from`, when the component exports it (used instead of
    /// `write`).
    pub write_from: Option<&'static str>,
}

impl Writer {
    /// Writes `bytes` to the writer `w` in chunks of at most `CHUNK`: by
    /// `write-from` when there is one, else by `write`.
    async fn put(&self, inst: &mut Instance, w: ResourceAny, bytes: Bytes) -> Result<(), RpcError> {
        let mut at = 0;
        while at < bytes.len() {
            let piece = bytes.slice(at..bytes.len().min(at + CHUNK));
            at += piece.len();
            match self.write_from {
                Some(write_from) => inst.write_from(write_from, w, piece).await?,
                None => {
                    inst.call_typed::<_, ()>(self.write, (w, &piece[..]))
                        .await?
                }
            }
        }
        Ok(())
    }
}

/// `files.write`-shaped params: one file (`path`, `content`), its content in
/// input notifications (`stream`, `size`), or several files (the `when.` list).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteParams {
    sandbox_id: String,
    path: Option<String>,
    content: Option<String>,
    #[serde(default)]
    encoding: Encoding,
    mode: Option<Value>,
    owner: Option<String>,
    group: Option<String>,
    size: Option<u64>,
    files: Option<Vec<FileParams>>,
}

/// One file of a write of several: the single-file params less `sandbox_id`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileParams {
    path: String,
    content: String,
    #[serde(default)]
    encoding: Encoding,
    mode: Option<Value>,
    owner: Option<String>,
    group: Option<String>,
}

impl FileParams {
    /// The bytes to write and the mode bits; `at` says which file a message is about.
    fn decode(self, at: &str) -> Result<(Vec<u8>, Option<u32>), String> {
        let mode = mode_bits(self.mode.as_ref(), &format!("{at}mode"))?;
        let bytes = self
            .encoding
            .bytes(self.content)
            .map_err(|e| format!("`{at}content` {e}"))?;
        Ok((bytes, mode))
    }
}

/// A write's optional `mode` param as permission bits; `name` is how the
/// message calls the param.
fn mode_bits(mode: Option<&Value>, name: &str) -> Result<Option<u32>, String> {
    mode.map(|m| decode::mode(m, name)).transpose()
}

/// Writes a file (or several): the writer is opened, the content written in
/// chunks, and the writer's `finish` answered. Nothing is visible until then;
/// any error leaves the old file.
pub async fn write(
    ctx: &CallCtx,
    method: &Method,
    tags: &StreamTags,
    writer: Writer,
    mut params: Map<String, Value>,
    forward: bool,
) -> Result<Value, RpcError> {
    // The list param of the `when.` function that writes several files.
    let many = tags.callees.iter().find_map(|c| match c.via {
        Via::When {
            param,
            is_param: true,
        } if c.function == writer.function => Some(param),
        _ => None,
    });
    // Under its own name for the typed params below.
    if let Some(list) = many.filter(|l| *l != "files")
        && let Some(value) = params.remove(list)
    {
        params.insert("files".into(), value);
    }
    let bad = |e: String| RpcError::invalid_params(method.name, e);
    let input = tags.input.unwrap_or("the input notifications");
    let p: WriteParams = parse(method, params)?;
    match p {
        WriteParams {
            files: Some(files),
            path: None,
            content: None,
            mode: None,
            owner: None,
            group: None,
            encoding: Encoding::Utf8,
            size: None,
            sandbox_id,
        } if !forward && many.is_some() => {
            write_many(ctx, method, &writer, sandbox_id, files).await
        }
        WriteParams { files: Some(_), .. } => Err(bad(format!(
            "`{}` lists every file with its own `path`, `content`, `encoding`, `mode`, `owner` \
             and `group`; \
             leave those out of the params themselves (and `stream` and `size`: stream one \
             file at a time)",
            many.unwrap_or("files")
        ))),
        WriteParams {
            path: Some(path),
            content: None,
            size: Some(size),
            sandbox_id,
            encoding,
            mode,
            owner,
            group,
            files: None,
        } if forward => {
            frames_possible(ctx, method, encoding)?;
            let mode = mode_bits(mode.as_ref(), "mode").map_err(bad)?;
            let mut head = head(sandbox_id, &path, size, mode);
            put_owner(&mut head, owner, group);
            let (mut inst, w) = open(ctx, method, writer.function, head).await?;
            let result = async {
                streamed(
                    ctx, method, &mut inst, &writer, w, input, &path, size, encoding,
                )
                .await?;
                finish(ctx, method, &mut inst, &writer, w).await
            }
            .await;
            inst.drop_resource(w).await;
            result
        }
        _ if forward => Err(bad(format!(
            "`stream: true` takes `path` and `size` (the exact number of bytes), and no \
             `content`: send the content in `{input}` notifications {{request_id, content}}"
        ))),
        WriteParams { size: Some(_), .. } => Err(bad(
            "`size` goes with `stream: true`; a write with `content` takes its size from it".into(),
        )),
        WriteParams {
            path: Some(path),
            content: Some(content),
            sandbox_id,
            encoding,
            mode,
            owner,
            group,
            files: None,
            ..
        } => {
            let file = FileParams {
                path: path.clone(),
                content,
                encoding,
                mode,
                owner: None,
                group: None,
            };
            let (bytes, mode) = file.decode("").map_err(bad)?;
            let mut head = head(sandbox_id, &path, bytes.len() as u64, mode);
            put_owner(&mut head, owner, group);
            let (mut inst, w) = open(ctx, method, writer.function, head).await?;
            let result = async {
                writer.put(&mut inst, w, bytes.into()).await?;
                finish(ctx, method, &mut inst, &writer, w).await
            }
            .await;
            inst.drop_resource(w).await;
            result
        }
        _ => Err(bad(format!(
            "give `path` and `content` (one file), `{}`: a list of {{path, content, encoding?, \
             mode?}} (several files in one call), or `path`, `size` and `stream: true` (content \
             in `{input}`s)",
            many.unwrap_or("files")
        ))),
    }
}

/// A writer function's params: where, how many bytes, which mode.
fn head(sandbox_id: String, path: &str, size: u64, mode: Option<u32>) -> Map<String, Value> {
    let mut params = Map::with_capacity(4);
    params.insert("sandbox_id".into(), sandbox_id.into());
    params.insert("path".into(), path.into());
    params.insert("size".into(), size.into());
    if let Some(mode) = mode {
        params.insert("mode".into(), format!("{mode:o}").into());
    }
    params
}

/// Who should own a written file (abx:epp 1.2), into a writer function's
/// params or a file of several: the provider resolves the names.
fn put_owner(params: &mut Map<String, Value>, owner: Option<String>, group: Option<String>) {
    for (key, value) in [("owner", owner), ("group", group)] {
        if let Some(value) = value {
            params.insert(key.into(), value.into());
        }
    }
}

/// Ends a write: the writer's `finish`, answered as a plain method's
/// (a record as is, anything else under `result=`).
async fn finish(
    ctx: &CallCtx,
    method: &Method,
    inst: &mut Instance,
    writer: &Writer,
    w: ResourceAny,
) -> Result<Value, RpcError> {
    let ok = inst.call(writer.finish, &[Val::Resource(w)]).await?;
    super::invoke::answer(ctx, method, writer.finish, ok)
}

/// One input notification: a piece of a streamed write's content, in the
/// write's encoding, or (`bytes`) the header of a binary frame.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Chunk {
    #[allow(dead_code)]
    request_id: Value,
    content: Option<String>,
    bytes: Option<u64>,
}

/// The content of a streamed write, from the request's input notifications
/// as they arrive (the server hands them over in order, reading stdin no
/// faster than they are written), so the upload runs while the client still
/// sends. Any error (a bad chunk, more bytes than `size`) ends the request
/// with the file unchanged; chunks that follow are dropped.
#[allow(clippy::too_many_arguments)]
async fn streamed(
    ctx: &CallCtx,
    method: &Method,
    inst: &mut Instance,
    writer: &Writer,
    w: ResourceAny,
    input: &str,
    path: &str,
    size: u64,
    encoding: Encoding,
) -> Result<(), RpcError> {
    let bad = |e: String| RpcError::invalid_params(method.name, e);
    let mut chunks = ctx.take_input().ok_or_else(|| {
        RpcError::fault(format!(
            "a streamed {} was started without its input channel",
            method.name
        ))
    })?;
    let mut written = 0u64;
    while written < size {
        // The sender lives as long as the request: `None` cannot happen
        // while it runs; the request's deadline bounds a silent client.
        let Some(item) = chunks.recv().await else {
            return Err(RpcError::fault("the input of this write ended early"));
        };
        // Held until this chunk is written: the server reads no further
        // ahead than the budget allows.
        let _permit = item.permit;
        let chunk: Chunk = serde_json::from_value(Value::Object(item.params?))
            .map_err(|e| bad(format!("a `{input}` for {path}: {e}")))?;
        let bytes = match (encoding, chunk.content, item.tail, chunk.bytes) {
            (Encoding::Binary, None, Some(tail), Some(n)) if tail.len() as u64 == n => tail,
            (Encoding::Binary, None, Some(tail), Some(n)) => {
                return Err(bad(format!(
                    "the input ended inside the binary frame at byte {written} of {path} ({} of \
                     its {n} bytes); the file was not changed",
                    tail.len()
                )));
            }
            (Encoding::Binary, ..) => {
                return Err(bad(format!(
                    "with encoding \"binary\" every `{input}` for {path} is a binary frame: \
                     {{request_id, bytes: N}} on one line, then N raw bytes; the file was not \
                     changed"
                )));
            }
            (encoding, Some(content), None, None) => encoding.bytes(content).map_err(|e| {
                bad(format!(
                    "the `{input}` at byte {written} of {path} {e}; the file was not changed"
                ))
            })?,
            (_, None, None, None) => {
                return Err(bad(format!(
                    "a `{input}` for {path} has no `content`; the file was not changed"
                )));
            }
            _ => {
                return Err(bad(format!(
                    "a `{input}` for {path} is a binary frame (`bytes`), but the write's \
                     encoding is {}: open it with encoding \"binary\" to send frames; the \
                     file was not changed",
                    encoding.name()
                )));
            }
        };
        if written + bytes.len() as u64 > size {
            return Err(bad(format!(
                "the chunks for {path} carry more than `size` ({size}) bytes; the file was not \
                 changed"
            )));
        }
        let len = bytes.len() as u64;
        writer.put(inst, w, bytes.into()).await?;
        written += len;
    }
    Ok(())
}

/// Several files in one call: every file decoded first (a bad one is refused
/// before anything is written), then one writer for all, their contents in
/// list order.
async fn write_many(
    ctx: &CallCtx,
    method: &Method,
    writer: &Writer,
    sandbox_id: String,
    files: Vec<FileParams>,
) -> Result<Value, RpcError> {
    let mut heads = Vec::with_capacity(files.len());
    let mut contents = Vec::with_capacity(files.len());
    for (i, mut file) in files.into_iter().enumerate() {
        let path = file.path.clone();
        let (owner, group) = (file.owner.take(), file.group.take());
        let (bytes, mode) = file
            .decode(&format!("files[{i}]."))
            .map_err(|e| RpcError::invalid_params(method.name, format!("{e} (file {path})")))?;
        let mut head = Map::with_capacity(3);
        head.insert("path".into(), path.into());
        head.insert("size".into(), (bytes.len() as u64).into());
        if let Some(mode) = mode {
            head.insert("mode".into(), format!("{mode:o}").into());
        }
        put_owner(&mut head, owner, group);
        heads.push(Value::Object(head));
        contents.push(bytes);
    }
    let mut params = Map::with_capacity(2);
    params.insert("sandbox_id".into(), sandbox_id.into());
    params.insert("files".into(), Value::Array(heads));
    let (mut inst, w) = open(ctx, method, writer.function, params).await?;
    let result = async {
        for bytes in contents {
            writer.put(&mut inst, w, bytes.into()).await?;
        }
        finish(ctx, method, &mut inst, writer, w).await
    }
    .await;
    inst.drop_resource(w).await;
    result
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
