//! Routing one request: `epp.hello` is the host's; every other method is
//! looked up in the method table (`contract::table`, derived from `wit/`),
//! checked against the provider's capabilities and exports, and served by
//! the generic codec (plain methods) or the stream adapter (`streams`).
//! Nothing here knows a particular method.

use super::context::CallCtx;
use super::errors::RpcError;
use super::invoke::{parse, plain, unsupported};
use super::streams;
use crate::contract::table;
use epp_protocol::{PROTOCOL, transport};
use serde_json::{Map, Value, json};

/// Routes one request.
pub async fn call(
    ctx: &CallCtx,
    name: &str,
    params: Map<String, Value>,
) -> Result<Value, RpcError> {
    if name == transport::HELLO {
        // Boxed: once a session, and larger than a call's own future.
        return Box::pin(hello(ctx, name, params)).await;
    }
    let Some(method) = table::find(name) else {
        return Err(RpcError::method_not_found(name));
    };
    if !ctx.runtime.supports(method.capability) {
        return Err(unsupported(ctx, method.name, method.capability));
    }
    match method.stream {
        None => plain(ctx, method, method.function, params, &[]).await,
        Some(tags) => streams::serve(ctx, method, tags, params).await,
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HelloParams {
    protocol: Option<String>,
    #[allow(dead_code)]
    client: Option<Value>,
    provider_options: Option<Map<String, Value>>,
}

/// Applies an EPP client's `provider_options`: resolved against the
/// provider's settings, checked by the provider itself, then the grant is made
/// again. Answers (setting, key) of what was applied and what was ignored.
async fn configure(
    ctx: &CallCtx,
    method: &str,
    options: &Map<String, Value>,
) -> Result<(Vec<(String, String)>, Vec<String>), RpcError> {
    use crate::net::grant::{FRAMEWORK_KEY_ENV, host_env};
    let framework_key = host_env(FRAMEWORK_KEY_ENV);
    let resolved = crate::net::options::resolve(
        &ctx.runtime.info,
        &ctx.runtime.needs,
        options,
        framework_key.as_deref(),
    )
    .map_err(|e| RpcError::invalid_params(method, format!("provider_options: {e}")))?;
    use crate::runtime::Reconfigure;
    match ctx
        .runtime
        .reconfigure(&resolved.overlay, resolved.applied.clone())
        .await
    {
        Ok(()) => {
            let keys: Vec<&str> = resolved.applied.iter().map(|(_, k)| k.as_str()).collect();
            tracing::info!(options = ?keys, ignored = ?resolved.ignored, "provider_options applied");
            Ok((resolved.applied, resolved.ignored))
        }
        Err(Reconfigure::Sealed) => Err(RpcError::conflict(
            "provider_options can only be set before the first call to the provider: this \
             host has already served one with its settings",
        )
        .hint("send epp.hello with provider_options first, or start a new epp-host")),
        Err(Reconfigure::Invalid(e)) => Err(e.into()),
        Err(Reconfigure::Refused(e)) => Err(RpcError::configuration(format!(
            "provider_options cannot be used: {e:#}"
        ))),
    }
}

async fn hello(ctx: &CallCtx, method: &str, params: Map<String, Value>) -> Result<Value, RpcError> {
    let p: HelloParams = parse(method, params)?;
    if let Some(protocol) = p.protocol.filter(|p| p != PROTOCOL) {
        return Err(RpcError::invalid_params(
            method,
            format!("this host speaks {PROTOCOL}, not {protocol}"),
        ));
    }
    let options = match &p.provider_options {
        Some(options) => Some(configure(ctx, method, options).await?),
        None => None,
    };
    let info = &ctx.runtime.info;
    let capabilities: Map<String, Value> = table::CAPABILITIES
        .iter()
        .map(|c| (c.to_string(), json!(ctx.runtime.supports(c))))
        .collect();
    let settings: Vec<Value> = info
        .settings
        .iter()
        .map(|s| {
            json!({"name": s.name, "env": s.env, "default": s.default_value,
                   "secret": s.secret, "description": s.description})
        })
        .collect();
    let mut answer = json!({
        "protocol": PROTOCOL,
        "provider": {"id": info.id, "version": info.version},
        "host": {"name": "epp-host", "version": env!("CARGO_PKG_VERSION")},
        "capabilities": capabilities,
        "settings": settings,
    });
    if ctx.on_wire() {
        // docs/epp-1.md, Binary frames: raw bytes after a line, for streamed content.
        answer["wire"] = json!({"binary_frames": true});
    }
    if let Some((applied, ignored)) = options {
        let applied: Map<String, Value> = applied
            .into_iter()
            .map(|(setting, key)| (key, Value::String(setting)))
            .collect();
        answer["provider_options"] = json!({"applied": applied, "ignored": ignored});
    }
    Ok(answer)
}
