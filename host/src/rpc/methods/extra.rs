//! Methods of capabilities the OpenSandbox provider does not implement
//! (files.watch, files.transfer, code.interpret, templates.*, ports.domain,
//! storage.mount, network.vpc, sessions). The host maps them anyway so any
//! provider that does implement them works behind it.

use super::commands::follow;
use super::{CallCtx, drop_resource, guest, guest_res, kv_in, kv_out, parse, secs_to_ms};
use crate::rpc::errors::RpcError;
use crate::runtime::bindings::infra::{
    CodeRequest, FileEventKind, MountRequest, TemplateBuildRequest, TemplateInfo, TransferUrl,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchParams {
    sandbox_id: String,
    path: String,
    #[serde(default)]
    recursive: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathParams {
    sandbox_id: String,
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CodeParams {
    sandbox_id: String,
    code: String,
    language: Option<String>,
    context_id: Option<String>,
    timeout: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContextParams {
    sandbox_id: String,
    language: Option<String>,
    cwd: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameParams {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BuildParams {
    name: String,
    dockerfile: Option<String>,
    base_image: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DomainParams {
    sandbox_id: String,
    port: u16,
    domain: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MountParams {
    sandbox_id: String,
    source: String,
    mount_path: String,
    #[serde(default)]
    read_only: bool,
    #[serde(default)]
    options: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UnmountParams {
    sandbox_id: String,
    mount_path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VpcParams {
    sandbox_id: String,
    vpc_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionCreateParams {
    sandbox_id: String,
    cwd: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionRunParams {
    sandbox_id: String,
    session_id: String,
    cmd: String,
    timeout: Option<f64>,
    #[serde(default)]
    stream: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionParams {
    sandbox_id: String,
    session_id: String,
}

fn transfer_json(t: TransferUrl) -> Value {
    json!({"url": t.url, "method": t.method, "headers": kv_out(t.headers), "expires_at": t.expires_at})
}

fn template_json(t: TemplateInfo) -> Value {
    json!({"name": t.name, "image": t.image, "description": t.description})
}

fn done(_: ()) -> Value {
    json!({})
}

pub async fn call(
    ctx: &CallCtx,
    method: &str,
    params: Map<String, Value>,
) -> Result<Value, RpcError> {
    let mut inst = ctx.instance().await?;
    match method {
        "files.watch" => {
            let p: WatchParams = parse(method, params)?;
            let stream = guest!(inst, call_files_watch, &p.sandbox_id, &p.path, p.recursive)?;
            let result = loop {
                match guest_res!(inst, watch_stream.call_next, stream) {
                    Ok(Some(event)) => {
                        let kind = match event.kind {
                            FileEventKind::Create => "create",
                            FileEventKind::Write => "write",
                            FileEventKind::Remove => "remove",
                            FileEventKind::Rename => "rename",
                            FileEventKind::Chmod => "chmod",
                        };
                        ctx.notify("files.event", json!({"kind": kind, "path": event.path}))
                            .await;
                    }
                    Ok(None) => break Ok(json!({})),
                    Err(e) => break Err(e),
                }
            };
            drop_resource(&mut inst, stream).await;
            result
        }
        "files.upload_url" => {
            let p: PathParams = parse(method, params)?;
            guest!(inst, call_files_upload_url, &p.sandbox_id, &p.path).map(transfer_json)
        }
        "files.download_url" => {
            let p: PathParams = parse(method, params)?;
            guest!(inst, call_files_download_url, &p.sandbox_id, &p.path).map(transfer_json)
        }
        "code.run" => {
            let p: CodeParams = parse(method, params)?;
            let req = CodeRequest {
                sandbox_id: p.sandbox_id,
                code: p.code,
                language: p.language,
                context_id: p.context_id,
                timeout_ms: secs_to_ms(method, "timeout", p.timeout)?,
            };
            let r = guest!(inst, call_code_run, &req)?;
            Ok(json!({
                "stdout": r.stdout,
                "stderr": r.stderr,
                "results": r.results.into_iter().map(kv_out).collect::<Vec<_>>(),
                "error": r.error,
            }))
        }
        "code.create_context" => {
            let p: ContextParams = parse(method, params)?;
            guest!(
                inst,
                call_code_create_context,
                &p.sandbox_id,
                p.language.as_deref(),
                p.cwd.as_deref()
            )
            .map(|id| json!({"context_id": id}))
        }
        "templates.list" => {
            let _: NoParams = parse(method, params)?;
            let list = guest!(inst, call_templates_list)?;
            Ok(json!({"templates": list.into_iter().map(template_json).collect::<Vec<_>>()}))
        }
        "templates.get" => {
            let p: NameParams = parse(method, params)?;
            guest!(inst, call_templates_get, &p.name).map(template_json)
        }
        "templates.build" => {
            let p: BuildParams = parse(method, params)?;
            let req = TemplateBuildRequest {
                name: p.name,
                dockerfile: p.dockerfile,
                base_image: p.base_image,
            };
            guest!(inst, call_templates_build, &req).map(template_json)
        }
        "ports.domain" => {
            let p: DomainParams = parse(method, params)?;
            guest!(inst, call_ports_domain, &p.sandbox_id, p.port, &p.domain)
                .map(|u| json!({"url": u.url, "headers": kv_out(u.headers)}))
        }
        "storage.mount" => {
            let p: MountParams = parse(method, params)?;
            let req = MountRequest {
                sandbox_id: p.sandbox_id,
                source: p.source,
                mount_path: p.mount_path,
                read_only: p.read_only,
                options: kv_in(p.options),
            };
            guest!(inst, call_storage_mount, &req).map(done)
        }
        "storage.unmount" => {
            let p: UnmountParams = parse(method, params)?;
            guest!(inst, call_storage_unmount, &p.sandbox_id, &p.mount_path).map(done)
        }
        "network.vpc_attach" => {
            let p: VpcParams = parse(method, params)?;
            guest!(inst, call_network_vpc_attach, &p.sandbox_id, &p.vpc_id).map(done)
        }
        "network.vpc_detach" => {
            let p: VpcParams = parse(method, params)?;
            guest!(inst, call_network_vpc_detach, &p.sandbox_id, &p.vpc_id).map(done)
        }
        "sessions.create" => {
            let p: SessionCreateParams = parse(method, params)?;
            guest!(inst, call_sessions_create, &p.sandbox_id, p.cwd.as_deref())
                .map(|id| json!({"session_id": id}))
        }
        "sessions.run" => {
            let p: SessionRunParams = parse(method, params)?;
            let timeout_ms = secs_to_ms(method, "timeout", p.timeout)?;
            let stream = guest!(
                inst,
                call_sessions_run,
                &p.sandbox_id,
                &p.session_id,
                &p.cmd,
                timeout_ms
            )?;
            let result = follow(ctx, &mut inst, stream, &p.sandbox_id, p.stream).await;
            drop_resource(&mut inst, stream).await;
            result
        }
        "sessions.close" => {
            let p: SessionParams = parse(method, params)?;
            guest!(inst, call_sessions_close, &p.sandbox_id, &p.session_id).map(done)
        }
        _ => Err(RpcError::method_not_found(method)),
    }
}
