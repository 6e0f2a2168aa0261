//! The generic codec: JSON params into the WIT values of a function's
//! arguments, and WIT values back into JSON, by one rule (docs/epp-1.md §8).
//! It is driven by the loaded component's own types, worked out once per
//! component ([`Codec::new`]); the method table (`contract::table`) adds what
//! WIT cannot say (capability, result key, defaults, aliases, ranges). It
//! knows no method and calls nothing: `rpc` calls through `runtime`.

pub mod decode;
pub mod encode;
pub mod shape;
#[cfg(test)]
mod tests;

use crate::contract::table::Method;
use crate::runtime::Exports;
use serde_json::{Map, Value};
use shape::{Field, Shape};
use std::collections::HashMap;
use wasmtime::component::Val;

/// How to call one `infra` function with JSON params.
struct Plan {
    /// The wire params: the function's params, or the fields of its lone `req` record.
    params: Vec<Field>,
    /// The function takes one `req` record made of `params`.
    flattened: bool,
    /// The `T` of its `result<T, epp-error>`; none for `result<_, epp-error>`.
    ok: Option<Shape>,
    /// Its params are strings and one trailing `list<u8>`, and it answers
    /// `result<_, epp-error>`: called typed (`Args::TextAndBytes`).
    text_and_bytes: bool,
}

/// A function's arguments, ready to call.
pub enum Args {
    /// As `Val`s, for the dynamic call.
    Vals(Vec<Val>),
    /// Strings and one byte string, for the typed call of a function whose
    /// bytes are heavy (`commands-send-input`: megabytes of input).
    TextAndBytes(Vec<String>, Vec<u8>),
}

/// Bytes a `list<u8>` nested inside another value may hold: it becomes one
/// `Val` per byte (about 40 bytes of host memory each), so it stays small.
/// A top-level byte param is called typed and bounded by [`Codec::max_bytes`].
pub const NESTED_BYTES: usize = 1 << 20;

/// The plans of every function of one component's `infra` export.
pub struct Codec {
    plans: HashMap<String, Plan>,
    /// The most bytes a byte param may carry (`--max-param-bytes`).
    pub max_bytes: usize,
}

impl Codec {
    /// Works out the plans from the component's types (no instance needed).
    pub fn new(exports: &Exports, max_bytes: usize) -> Codec {
        let mut plans = HashMap::new();
        for (name, func) in exports.types() {
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
            let text_and_bytes = !flattened
                && ok.is_none()
                && matches!(params.split_last(), Some((last, rest))
                    if last.shape == Shape::Bytes && rest.iter().all(|f| f.shape == Shape::String));
            plans.insert(
                name.to_string(),
                Plan {
                    params,
                    flattened,
                    ok,
                    text_and_bytes,
                },
            );
        }
        Codec { plans, max_bytes }
    }

    fn plan(&self, function: &str) -> Result<&Plan, String> {
        self.plans.get(function).ok_or_else(|| {
            format!(
                "the provider does not export `{function}`; it was built against another \
                 version of the EPP world"
            )
        })
    }

    /// The wire names of `function`'s params.
    pub fn params_of(&self, function: &str) -> Vec<&str> {
        self.plans
            .get(function)
            .map(|p| p.params.iter().map(|f| f.wire.as_str()).collect())
            .unwrap_or_default()
    }

    /// `params` as the arguments of `function`, under `method`'s defaults,
    /// aliases and ranges. `taken` names params an adapter already removed
    /// (for the message about an unknown field). An error is one sentence
    /// about the params.
    pub fn args(
        &self,
        method: &Method,
        function: &str,
        params: Map<String, Value>,
        taken: &[&str],
    ) -> Result<Args, String> {
        let plan = self.plan(function)?;
        // Only a typed call takes the bytes as they are; any other call
        // makes a `Val` of each byte, so its bytes stay small.
        let limits = decode::Limits {
            top: match plan.text_and_bytes {
                true => self.max_bytes,
                false => NESTED_BYTES,
            },
            nested: NESTED_BYTES,
        };
        let mut values = decode::params(method, &plan.params, params, taken, &limits)?;
        if plan.text_and_bytes {
            let bytes = match values.pop() {
                Some(decode::Arg::Bytes(bytes)) => bytes,
                _ => return Err("internal: a byte param was not decoded as bytes".into()),
            };
            let text = values
                .into_iter()
                .map(|v| match v {
                    decode::Arg::Val(Val::String(s)) => Ok(s),
                    _ => Err("internal: a text param was not decoded as text".to_string()),
                })
                .collect::<Result<_, _>>()?;
            return Ok(Args::TextAndBytes(text, bytes));
        }
        let values: Vec<Val> = values.into_iter().map(decode::Arg::into_val).collect();
        Ok(Args::Vals(if plan.flattened {
            let fields = plan.params.iter().map(|f| f.wit.clone()).zip(values);
            vec![Val::Record(fields.collect())]
        } else {
            values
        }))
    }

    /// The shape of `function`'s ok value (none for `result<_, epp-error>`).
    pub fn ok_shape(&self, function: &str) -> Option<&Shape> {
        self.plans.get(function).and_then(|p| p.ok.as_ref())
    }

    /// `function`'s ok value as JSON.
    pub fn to_json(&self, function: &str, ok: Val) -> Result<Value, String> {
        let plan = self.plan(function)?;
        let shape = plan.ok.as_ref().unwrap_or(&Shape::Opaque("nothing"));
        encode::encode(shape, ok)
            .map_err(|e| format!("the provider's answer from `{function}` could not be read: {e}"))
    }

    /// The JSON answer of a plain call: a record as an object, nothing as
    /// `{}`, anything else as `{KEY: value}`.
    pub fn answer(&self, function: &str, key: &str, ok: Option<Val>) -> Result<Value, String> {
        let Some(ok) = ok else {
            return Ok(Value::Object(Map::new()));
        };
        let value = self.to_json(function, ok)?;
        if matches!(self.plan(function)?.ok, Some(Shape::Record(_))) {
            return Ok(value);
        }
        let mut object = Map::with_capacity(1);
        object.insert(key.into(), value);
        Ok(Value::Object(object))
    }
}
