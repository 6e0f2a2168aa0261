//! The generic codec: a plain EPP/1 method is its WIT function, called through
//! wasmtime's dynamic component API, with JSON params and answers projected by
//! one rule (docs/epp-1.md §8). It is driven by the loaded component's own
//! types, worked out once per component ([`Codec::new`]); the method table
//! (`methods::table`) adds what WIT cannot say (capability, result key,
//! defaults, aliases, ranges).

pub mod decode;
pub mod encode;
pub mod names;
pub mod shape;
#[cfg(test)]
mod tests;

use crate::rpc::errors::{RpcError, error_code};
use crate::rpc::methods::CallCtx;
use crate::rpc::methods::table::{INFRA, Method};
use crate::runtime::Instance;
use crate::runtime::bindings::EppError;
use serde_json::{Map, Value};
use shape::{Field, Shape};
use std::collections::HashMap;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, Val};

/// How to call one `infra` function with JSON params.
struct Plan {
    export: ComponentExportIndex,
    /// The wire params: the function's params, or the fields of its lone `req` record.
    params: Vec<Field>,
    /// The function takes one `req` record made of `params`.
    flattened: bool,
    /// The `T` of its `result<T, epp-error>`; none for `result<_, epp-error>`.
    ok: Option<Shape>,
}

/// The plans of every function of one component's `infra` export.
pub struct Codec {
    plans: HashMap<String, Plan>,
}

impl Codec {
    /// Works out the plans from the component's types (no instance needed).
    pub fn new(component: &Component) -> Codec {
        let mut plans = HashMap::new();
        if let Some((ComponentItem::ComponentInstance(infra), index)) =
            component.get_export(None, INFRA)
        {
            for (name, export) in infra.exports(component.engine()) {
                let ComponentItem::ComponentFunc(func) = export.ty else {
                    continue;
                };
                let Some(export) = component.get_export_index(Some(&index), name) else {
                    continue;
                };
                let params: Vec<Field> = func
                    .params()
                    .map(|(name, ty)| Field::new(name, Shape::of(&ty)))
                    .collect();
                let (params, flattened) = match <[Field; 1]>::try_from(params) {
                    Ok(
                        [
                            Field {
                                wit,
                                shape: Shape::Record(fields),
                                ..
                            },
                        ],
                    ) if wit == "req" => (fields, true),
                    Ok(one) => (one.into(), false),
                    Err(params) => (params, false),
                };
                let ok = match func.results().next().map(|t| Shape::of(&t)) {
                    Some(Shape::Result { ok, .. }) => ok.map(|s| *s),
                    other => other,
                };
                plans.insert(
                    name.to_string(),
                    Plan {
                        export,
                        params,
                        flattened,
                        ok,
                    },
                );
            }
        }
        Codec { plans }
    }

    /// Whether the component exports `function` (a function added in a later
    /// minor version of the world is missing from older components).
    pub fn exports(&self, function: &str) -> bool {
        self.plans.contains_key(function)
    }

    fn plan(&self, function: &str) -> Result<&Plan, RpcError> {
        self.plans.get(function).ok_or_else(|| {
            RpcError::fault(format!(
                "the provider does not export `{function}` in {INFRA}; it was built against \
                 another version of the EPP world"
            ))
        })
    }

    /// `params` as the arguments of `function`, under `method`'s defaults,
    /// aliases and ranges. `taken` names params an adapter already removed
    /// (for the message about an unknown field).
    pub fn args(
        &self,
        method: &Method,
        function: &str,
        params: Map<String, Value>,
        taken: &[&str],
    ) -> Result<Vec<Val>, RpcError> {
        let plan = self.plan(function)?;
        let values = decode::params(method, &plan.params, params, taken)
            .map_err(|e| RpcError::invalid_params(method.name, e))?;
        Ok(if plan.flattened {
            let fields = plan.params.iter().map(|f| f.wit.clone()).zip(values);
            vec![Val::Record(fields.collect())]
        } else {
            values
        })
    }

    /// Calls `function` on a fresh CPU budget: its ok value (none for a unit),
    /// or the provider's error, or the trap.
    pub async fn call(
        &self,
        inst: &mut Instance,
        function: &str,
        args: &[Val],
    ) -> Result<Option<Val>, RpcError> {
        let plan = self.plan(function)?;
        let func = inst
            .raw
            .get_func(&mut inst.store, plan.export)
            .ok_or_else(|| RpcError::fault(format!("`{function}` is not a function")))?;
        inst.store.data_mut().cpu_ticks = 0;
        let mut results = [Val::Bool(false)];
        func.call_async(&mut inst.store, args, &mut results)
            .await
            .map_err(|trap| RpcError::from_trap(&trap))?;
        // The call returned: what it reported it made is its own business
        // again (kept if it succeeded, undone by itself if it failed).
        inst.store.data().call.made.lock().expect("lock").clear();
        let [result] = results;
        match result {
            Val::Result(Ok(ok)) => Ok(ok.map(|v| *v)),
            Val::Result(Err(Some(e))) => Err(epp_error(*e)),
            _ => Err(RpcError::fault(format!(
                "`{function}` did not answer result<_, epp-error>"
            ))),
        }
    }

    /// `function`'s ok value as JSON.
    pub fn to_json(&self, function: &str, ok: Val) -> Result<Value, RpcError> {
        let plan = self.plan(function)?;
        let shape = plan.ok.as_ref().unwrap_or(&Shape::Opaque("nothing"));
        encode::encode(shape, ok).map_err(|e| {
            RpcError::fault(format!(
                "the provider's answer from `{function}` could not be read: {e}"
            ))
        })
    }

    /// The JSON answer of a plain method: a record as an object, nothing as
    /// `{}`, anything else as `{KEY: value}`.
    pub fn answer(&self, method: &Method, ok: Option<Val>) -> Result<Value, RpcError> {
        let Some(ok) = ok else {
            return Ok(Value::Object(Map::new()));
        };
        let value = self.to_json(method.function, ok)?;
        if matches!(self.plan(method.function)?.ok, Some(Shape::Record(_))) {
            return Ok(value);
        }
        let mut object = Map::with_capacity(1);
        object.insert(method.result.unwrap_or("result").into(), value);
        Ok(Value::Object(object))
    }
}

/// Checks `params` (less the adapter's own, `taken`) against `function` and
/// calls it on a fresh instance. The instance comes back with the answer: a
/// stream answered by the provider lives in it.
pub async fn invoke(
    ctx: &CallCtx,
    method: &Method,
    function: &str,
    params: Map<String, Value>,
    taken: &[&str],
) -> Result<(Instance, Option<Val>), RpcError> {
    let args = ctx.codec.args(method, function, params, taken)?;
    let mut inst = ctx.instance().await?;
    let ok = ctx.codec.call(&mut inst, function, &args).await?;
    Ok((inst, ok))
}

/// Serves a plain method end to end.
pub async fn serve(
    ctx: &CallCtx,
    method: &Method,
    params: Map<String, Value>,
) -> Result<Value, RpcError> {
    let (_, ok) = invoke(ctx, method, method.function, params, &[]).await?;
    ctx.codec.answer(method, ok)
}

/// An `epp-error` record as the error answer it stands for.
fn epp_error(val: Val) -> RpcError {
    let Val::Record(fields) = val else {
        return RpcError::fault("the provider's error is not an epp-error record");
    };
    let mut e = EppError {
        code: crate::runtime::bindings::ErrorCode::ProviderFault,
        message: String::new(),
        http_status: None,
        upstream_code: None,
    };
    for (name, value) in fields {
        match (name.as_str(), value) {
            ("code", Val::Enum(code)) => {
                e.code = error_code(&code).unwrap_or(e.code);
            }
            ("message", Val::String(message)) => e.message = message,
            ("http-status", Val::Option(Some(status))) => {
                if let Val::U16(status) = *status {
                    e.http_status = Some(status);
                }
            }
            ("upstream-code", Val::Option(Some(code))) => {
                if let Val::String(code) = *code {
                    e.upstream_code = Some(code);
                }
            }
            _ => {}
        }
    }
    RpcError::from_epp(e)
}
