//! Calling a component's `infra` functions by name: the one call layer of the
//! host. Every export, of any `abx:epp` 1.x, is found once per component
//! ([`Exports`]) and called through [`Instance::call`] with `Val`s, or through
//! [`Instance::call_typed`] where bytes are heavy (a `list<u8>` as one `Val`
//! per byte would cost ~40 bytes of host memory per byte). Both reset the CPU
//! budget in one place and end in one error type, [`CallError`].

use crate::contract::bindings::{EppError, ErrorCode};
use std::collections::HashMap;
use std::sync::Arc;
use wasmtime::Store;
use wasmtime::component::types::{ComponentFunc, ComponentItem};
use wasmtime::component::{
    Component, ComponentExportIndex, ComponentNamedList, ComponentType, Lift, Lower, ResourceAny,
    Val,
};

use super::state::StoreState;

/// Why a call gave no answer of the provider's.
#[derive(Debug)]
pub enum CallError {
    /// The provider answered with an error.
    Provider(EppError),
    /// It trapped, or hit a host limit (a `LimitHit` inside).
    Trap(wasmtime::Error),
    /// The component has no such function, or not of the contract's type.
    Contract(String),
}

impl CallError {
    fn contract(message: impl Into<String>) -> CallError {
        CallError::Contract(message.into())
    }
}

/// The functions of a component's `infra` export, by WIT name (resource
/// methods as `[method]file-reader.read`), with their types.
pub struct Exports {
    /// The export's name, e.g. `abx:epp/infra@1.0.0`.
    pub infra: String,
    funcs: HashMap<String, (ComponentExportIndex, ComponentFunc)>,
}

impl Exports {
    /// Finds every function of `infra` in `component` (no instance needed).
    pub fn of(component: &Component, infra: &str) -> Exports {
        let mut funcs = HashMap::new();
        if let Some((ComponentItem::ComponentInstance(instance), index)) =
            component.get_export(None, infra)
        {
            for (name, item) in instance.exports(component.engine()) {
                let ComponentItem::ComponentFunc(ty) = item.ty else {
                    continue;
                };
                if let Some(export) = component.get_export_index(Some(&index), name) {
                    funcs.insert(name.to_string(), (export, ty));
                }
            }
        }
        Exports {
            infra: infra.to_string(),
            funcs,
        }
    }

    /// Whether the component exports `function` (a function added in a later
    /// minor version of the contract is missing from older components).
    pub fn has(&self, function: &str) -> bool {
        self.funcs.contains_key(function)
    }

    /// Every function and its type.
    pub fn types(&self) -> impl Iterator<Item = (&str, &ComponentFunc)> {
        self.funcs.iter().map(|(name, (_, ty))| (name.as_str(), ty))
    }

    fn index(&self, function: &str) -> Result<ComponentExportIndex, CallError> {
        self.funcs.get(function).map(|(i, _)| *i).ok_or_else(|| {
            CallError::contract(format!(
                "the provider does not export `{function}` in {}",
                self.infra
            ))
        })
    }
}

/// One instance of the provider, for one request.
pub struct Instance {
    pub store: Store<StoreState>,
    pub(super) instance: wasmtime::component::Instance,
    pub(super) exports: Arc<Exports>,
}

impl Instance {
    fn func(&mut self, function: &str) -> Result<wasmtime::component::Func, CallError> {
        let index = self.exports.index(function)?;
        // A fresh CPU budget for every call into the provider: the one place.
        self.store.data_mut().cpu_ticks = 0;
        self.instance
            .get_func(&mut self.store, index)
            .ok_or_else(|| CallError::contract(format!("`{function}` is not a function")))
    }

    /// Calls `function` (which answers `result<T, epp-error>`) with `args`:
    /// its ok value (none for `result<_, epp-error>`).
    pub async fn call(&mut self, function: &str, args: &[Val]) -> Result<Option<Val>, CallError> {
        let func = self.func(function)?;
        let mut results = [Val::Bool(false)];
        func.call_async(&mut self.store, args, &mut results)
            .await
            .map_err(CallError::Trap)?;
        let [result] = results;
        match result {
            Val::Result(Ok(ok)) => Ok(ok.map(|v| *v)),
            Val::Result(Err(Some(e))) => Err(CallError::Provider(epp_error(*e))),
            _ => Err(CallError::contract(format!(
                "`{function}` did not answer result<_, epp-error>"
            ))),
        }
    }

    /// Calls `function` through a typed signature `P -> result<R, epp-error>`,
    /// checked against the component's own type on each call.
    pub async fn call_typed<P, R>(&mut self, function: &str, args: P) -> Result<R, CallError>
    where
        P: ComponentNamedList + Lower + Send + Sync,
        R: ComponentType + Lift + Send + Sync + 'static,
    {
        let func = self.func(function)?;
        let typed = func
            .typed::<P, (Result<R, EppError>,)>(&self.store)
            .map_err(|e| {
                CallError::contract(format!(
                    "`{function}` has another type than the contract's ({e})"
                ))
            })?;
        let (result,) = typed
            .call_async(&mut self.store, args)
            .await
            .map_err(CallError::Trap)?;
        result.map_err(CallError::Provider)
    }

    /// Calls a function that answers a value without `result<…>`
    /// (`describe`, `needs`, a reader's `size`), typed.
    pub async fn call_bare<P, R>(&mut self, function: &str, args: P) -> Result<R, CallError>
    where
        P: ComponentNamedList + Lower + Send + Sync,
        R: ComponentType + Lift + Send + Sync + 'static,
    {
        let func = self.func(function)?;
        let typed = func.typed::<P, (R,)>(&self.store).map_err(|e| {
            CallError::contract(format!(
                "`{function}` has another type than the contract's ({e})"
            ))
        })?;
        let (r,) = typed
            .call_async(&mut self.store, args)
            .await
            .map_err(CallError::Trap)?;
        Ok(r)
    }

    /// Drops an exported resource, ignoring a trap in its destructor (logged):
    /// whether the destructor ran cleanly.
    pub async fn drop_resource(&mut self, res: ResourceAny) -> bool {
        match res.resource_drop_async(&mut self.store).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "the provider failed to release a resource");
                false
            }
        }
    }
}

/// An `epp-error` record as the error it stands for.
fn epp_error(val: Val) -> EppError {
    let mut e = EppError {
        code: ErrorCode::ProviderFault,
        message: String::new(),
        http_status: None,
        upstream_code: None,
    };
    let Val::Record(fields) = val else {
        e.message = "the provider's error is not an epp-error record".into();
        return e;
    };
    for (name, value) in fields {
        match (name.as_str(), value) {
            ("code", Val::Enum(code)) => e.code = error_code(&code).unwrap_or(e.code),
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
    e
}

/// An error code by its WIT case name (`not-found`).
pub fn error_code(name: &str) -> Option<ErrorCode> {
    Some(match name {
        "invalid-argument" => ErrorCode::InvalidArgument,
        "configuration" => ErrorCode::Configuration,
        "credentials-rejected" => ErrorCode::CredentialsRejected,
        "not-found" => ErrorCode::NotFound,
        "conflict" => ErrorCode::Conflict,
        "upstream" => ErrorCode::Upstream,
        "unreachable" => ErrorCode::Unreachable,
        "timed-out" => ErrorCode::TimedOut,
        "denied-by-policy" => ErrorCode::DeniedByPolicy,
        "unsupported" => ErrorCode::Unsupported,
        "provider-fault" => ErrorCode::ProviderFault,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_is_found_by_its_wit_name() {
        for (name, code) in [
            ("invalid-argument", ErrorCode::InvalidArgument),
            ("credentials-rejected", ErrorCode::CredentialsRejected),
            ("not-found", ErrorCode::NotFound),
            ("timed-out", ErrorCode::TimedOut),
            ("denied-by-policy", ErrorCode::DeniedByPolicy),
            ("provider-fault", ErrorCode::ProviderFault),
        ] {
            assert_eq!(error_code(name), Some(code), "{name}");
        }
        assert_eq!(error_code("teapot"), None);
    }
}
