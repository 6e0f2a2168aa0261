//! Calling the provider for a request: params checked and decoded by the
//! codec, a fresh instance, the call (typed where bytes are heavy), the answer
//! projected back; and the errors every adapter words the same way.

use super::context::CallCtx;
use super::errors::RpcError;
use crate::codec::Args;
use crate::contract::table::Method;
use crate::runtime::Instance;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use wasmtime::component::Val;

/// E8004 for `what` (a method, or a method with a param) of `capability`.
pub fn unsupported(ctx: &CallCtx, what: &str, capability: &str) -> RpcError {
    RpcError::unsupported(what, capability, &ctx.runtime.info.id)
}

/// E8004 for `what`, served by `function`, which the component lacks (built
/// against an older contract).
pub fn not_exported(ctx: &CallCtx, what: &str, function: &str) -> RpcError {
    RpcError::unsupported_by_contract(
        what,
        &ctx.runtime.info.id,
        &ctx.runtime.contract.version.to_string(),
        function,
    )
}

/// Checks `params` (less an adapter's own, `taken`) against `function` and
/// calls it on a fresh instance. The instance comes back with the answer: a
/// stream the provider answered lives in it.
pub async fn invoke(
    ctx: &CallCtx,
    method: &Method,
    function: &str,
    params: Map<String, Value>,
    taken: &[&str],
) -> Result<(Instance, Option<Val>), RpcError> {
    let args = args(ctx, method, function, params, taken)?;
    let mut inst = ctx.instance().await?;
    let ok = call_with(&mut inst, function, args).await?;
    Ok((inst, ok))
}

/// `params` as the arguments of `function`, which the component must export:
/// E8004 when it does not, or when a param is newer than its contract; E1001
/// when the codec refuses them.
pub fn args(
    ctx: &CallCtx,
    method: &Method,
    function: &str,
    params: Map<String, Value>,
    taken: &[&str],
) -> Result<Args, RpcError> {
    if !ctx.runtime.exports(function) {
        return Err(not_exported(ctx, method.name, function));
    }
    if let Some(newer) = newer_param(ctx, method, function, &params) {
        return Err(RpcError::unsupported_by_contract_param(
            method.name,
            newer,
            &ctx.runtime.info.id,
            &ctx.runtime.contract.version.to_string(),
        ));
    }
    ctx.codec
        .args(method, function, params, taken)
        .map_err(|e| RpcError::invalid_params(method.name, e))
}

/// A param given that this host's contract has for `method` but the
/// component's `function` lacks: the component was built against an older
/// `abx:epp` (a later minor version added the param), so the request is
/// something it cannot do (E8004), not a typo (E1001).
fn newer_param<'a>(
    ctx: &CallCtx,
    method: &Method,
    function: &str,
    params: &'a Map<String, Value>,
) -> Option<&'a str> {
    let own = ctx.codec.params_of(function);
    params
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| k.as_str())
        .find(|k| method.params.contains(k) && !own.contains(k))
}

/// Calls `function` with decoded arguments: dynamically, or typed when it
/// carries heavy bytes.
pub async fn call_with(
    inst: &mut Instance,
    function: &str,
    args: Args,
) -> Result<Option<Val>, RpcError> {
    fn text(t: &[String], i: usize) -> &str {
        t.get(i).map(String::as_str).unwrap_or_default()
    }
    match args {
        Args::Vals(vals) => Ok(inst.call(function, &vals).await?),
        Args::TextAndBytes(t, bytes) => {
            let bytes = bytes.as_slice();
            match t.len() {
                0 => inst.call_typed::<(&[u8],), ()>(function, (bytes,)).await?,
                1 => inst.call_typed(function, (text(&t, 0), bytes)).await?,
                2 => {
                    inst.call_typed(function, (text(&t, 0), text(&t, 1), bytes))
                        .await?
                }
                3 => {
                    let args = (text(&t, 0), text(&t, 1), text(&t, 2), bytes);
                    inst.call_typed(function, args).await?
                }
                n => {
                    return Err(RpcError::fault(format!(
                        "`{function}` takes {n} strings before its bytes; this host calls such a \
                         function with at most 3"
                    )));
                }
            }
            Ok(None)
        }
    }
}

/// Calls `function` as a plain method (it answers at once, nothing stays in
/// its instance) and answers it; the instance goes back to the runtime, which
/// keeps it for a later call if reuse is on.
pub async fn plain(
    ctx: &CallCtx,
    method: &Method,
    function: &str,
    params: Map<String, Value>,
    taken: &[&str],
) -> Result<Value, RpcError> {
    let (inst, ok) = invoke(ctx, method, function, params, taken).await?;
    ctx.runtime.give_back(inst);
    answer(ctx, method, function, ok)
}

/// The answer of a function called as a plain method: a record as an object,
/// nothing as `{}`, anything else as `{KEY: value}` (`result=KEY`, or the
/// stream's `id=KEY` for a function that answers only an id).
pub fn answer(
    ctx: &CallCtx,
    method: &Method,
    function: &str,
    ok: Option<Val>,
) -> Result<Value, RpcError> {
    let key = method
        .result
        .or(method.stream.and_then(|s| s.id))
        .unwrap_or("result");
    ctx.codec.answer(function, key, ok).map_err(RpcError::fault)
}

/// Params of `method` into a typed form (an adapter's own params).
pub fn parse<T: DeserializeOwned>(method: &str, params: Map<String, Value>) -> Result<T, RpcError> {
    serde_json::from_value(Value::Object(params)).map_err(|e| RpcError::invalid_params(method, e))
}

/// Removes an adapter's own boolean param (absent = false).
pub fn take_flag(
    method: &str,
    params: &mut Map<String, Value>,
    name: &str,
) -> Result<bool, RpcError> {
    match params.remove(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(b),
        Some(other) => Err(RpcError::invalid_params(
            method,
            format!("`{name}` must be true or false, got {other}"),
        )),
    }
}
