//! files.rw: contents cross the guest boundary in 1 MiB chunks through the
//! provider's reader/writer resources, so its memory stays small whatever the
//! file size; base64 exists only here at the JSON edge.

use super::process::decode_b64;
use super::{CallCtx, drop_resource, guest, guest_res, trap_error};
use crate::rpc::errors::RpcError;
use crate::runtime::Instance;
use crate::runtime::bindings::infra::{ByteRange, FileInfo, FileType};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};
use wasmtime::component::ResourceAny;

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    sandbox_id: String,
    path: String,
    content: String,
    #[serde(default)]
    encoding: Encoding,
    mode: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathParams {
    sandbox_id: String,
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    sandbox_id: String,
    path: String,
    #[serde(default = "one")]
    depth: u32,
}

fn one() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameParams {
    sandbox_id: String,
    old_path: String,
    new_path: String,
}

pub fn info_json(info: FileInfo) -> Value {
    let kind = match info.type_ {
        FileType::File => "file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Other => "other",
    };
    json!({
        "path": info.path,
        "name": info.name,
        "type": kind,
        "size": info.size,
        "mode": format!("{:04o}", info.mode),
        "owner": info.owner,
        "group": info.group,
        "modified_at": info.modified_at,
    })
}

/// File modes are octal: `"644"`, `"0644"`, `"0o644"`, or a number whose digits
/// are the octal digits (`644`), as OpenSandbox writes them.
pub fn parse_mode(method: &str, mode: &Value) -> Result<u32, RpcError> {
    let bad = |why: String| RpcError::invalid_params(method, why);
    let digits = match mode {
        Value::String(s) => s.trim_start_matches("0o").to_string(),
        Value::Number(n) if n.is_u64() => n.to_string(),
        other => {
            return Err(bad(format!(
                "mode must be octal digits like \"0644\" or 644, got {other}"
            )));
        }
    };
    let bits = u32::from_str_radix(&digits, 8).map_err(|_| {
        bad(format!(
            "mode `{digits}` is not octal; use digits 0-7 such as \"0644\""
        ))
    })?;
    if bits > 0o7777 {
        return Err(bad(format!("mode {digits} is beyond 7777")));
    }
    Ok(bits)
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
    Ok(json!({"content": content, "encoding": encoding, "size": size}))
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
        .map_err(|trap| trap_error(&trap))?;
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
    let mode = p.mode.as_ref().map(|m| parse_mode(method, m)).transpose()?;
    let bytes = match p.encoding {
        Encoding::Utf8 => p.content.into_bytes(),
        Encoding::Base64 => decode_b64(method, "content", &p.content)?,
    };
    let mut inst = ctx.instance().await?;
    let writer = guest!(
        inst,
        call_files_write,
        &p.sandbox_id,
        &p.path,
        bytes.len() as u64,
        mode
    )?;
    let result = async {
        for chunk in bytes.chunks(CHUNK) {
            guest_res!(inst, file_writer.call_write, writer, chunk)?;
        }
        guest_res!(inst, file_writer.call_finish, writer)
    }
    .await;
    drop_resource(&mut inst, writer).await;
    result.map(info_json)
}

pub async fn list(ctx: &CallCtx, p: ListParams) -> Result<Value, RpcError> {
    if p.depth == 0 {
        return Err(RpcError::invalid_params(
            "files.list",
            "`depth` must be at least 1",
        ));
    }
    let mut inst = ctx.instance().await?;
    let entries = guest!(inst, call_files_list, &p.sandbox_id, &p.path, p.depth)?;
    Ok(json!({"entries": entries.into_iter().map(info_json).collect::<Vec<_>>()}))
}

pub async fn get_info(ctx: &CallCtx, p: PathParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_files_get_info, &p.sandbox_id, &p.path).map(info_json)
}

pub async fn exists(ctx: &CallCtx, p: PathParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_files_exists, &p.sandbox_id, &p.path).map(|exists| json!({"exists": exists}))
}

pub async fn make_dir(ctx: &CallCtx, p: PathParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_files_make_dir, &p.sandbox_id, &p.path)
        .map(|created| json!({"created": created}))
}

pub async fn remove(ctx: &CallCtx, p: PathParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(inst, call_files_remove, &p.sandbox_id, &p.path).map(|()| json!({}))
}

pub async fn rename(ctx: &CallCtx, p: RenameParams) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    guest!(
        inst,
        call_files_rename,
        &p.sandbox_id,
        &p.old_path,
        &p.new_path
    )
    .map(info_json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        assert_eq!(parse_mode("m", &json!("644")).unwrap(), 0o644);
        assert_eq!(parse_mode("m", &json!("0755")).unwrap(), 0o755);
        assert_eq!(parse_mode("m", &json!("0o600")).unwrap(), 0o600);
        assert_eq!(parse_mode("m", &json!(644)).unwrap(), 0o644);
        assert_eq!(parse_mode("m", &json!(4755)).unwrap(), 0o4755);
        assert!(parse_mode("m", &json!(648)).is_err());
        assert!(parse_mode("m", &json!(-1)).is_err());
        assert!(parse_mode("m", &json!("9")).is_err());
        assert!(parse_mode("m", &json!("77777")).is_err());
        assert!(parse_mode("m", &json!(true)).is_err());
    }
}
