//! WIT values into JSON answers (docs/epp-1.md §8). Values are consumed so
//! strings move into the JSON tree instead of being copied.

use super::shape::{Field, Shape, Unit};
use base64::Engine as _;
use serde_json::{Map, Number, Value};
use wasmtime::component::Val;

/// `val` as JSON. An error means the value does not have the type the
/// component declared, which wasmtime rules out; it is reported, not trusted.
pub fn encode(shape: &Shape, val: Val) -> Result<Value, String> {
    Ok(match (shape, val) {
        (Shape::Bool, Val::Bool(b)) => Value::Bool(b),
        (Shape::Int(_), val) => Value::Number(integer(val)?),
        (Shape::F32, Val::Float32(f)) => float(f.into()),
        (Shape::F64, Val::Float64(f)) => float(f),
        (Shape::Char, Val::Char(c)) => Value::String(c.into()),
        (Shape::String, Val::String(s)) => Value::String(s),
        (Shape::Bytes, Val::List(items)) => {
            let bytes = items
                .into_iter()
                .map(|v| match v {
                    Val::U8(b) => Ok(b),
                    _ => Err(mismatch("a byte")),
                })
                .collect::<Result<Vec<u8>, String>>()?;
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        (Shape::KeyValues, Val::List(pairs)) => {
            let mut object = Map::with_capacity(pairs.len());
            for pair in pairs {
                let Val::Tuple(kv) = pair else {
                    return Err(mismatch("a key-value pair"));
                };
                let mut kv = kv.into_iter();
                match (kv.next(), kv.next()) {
                    (Some(Val::String(k)), Some(Val::String(v))) => {
                        object.insert(k, Value::String(v));
                    }
                    _ => return Err("a key-value pair is not two strings".into()),
                }
            }
            Value::Object(object)
        }
        (Shape::List(item), Val::List(items)) => Value::Array(
            items
                .into_iter()
                .map(|v| encode(item, v))
                .collect::<Result<_, _>>()?,
        ),
        (Shape::Record(fields), Val::Record(values)) => record(fields, values)?,
        (Shape::Tuple(shapes), Val::Tuple(values)) => Value::Array(
            shapes
                .iter()
                .zip(values)
                .map(|(s, v)| encode(s, v))
                .collect::<Result<_, _>>()?,
        ),
        (Shape::Enum(cases), Val::Enum(name)) => Value::String(wire_name(cases, name)),
        (Shape::Variant(cases), Val::Variant(name, payload)) => {
            let case = cases
                .iter()
                .find(|c| c.name.wit == name)
                .ok_or_else(|| format!("no case `{name}`"))?;
            match (&case.payload, payload) {
                (Some(shape), Some(v)) => {
                    let mut object = Map::with_capacity(1);
                    object.insert(case.name.wire.clone(), encode(shape, *v)?);
                    Value::Object(object)
                }
                _ => Value::String(case.name.wire.clone()),
            }
        }
        (Shape::Option(_), Val::Option(None)) => Value::Null,
        (Shape::Option(inner), Val::Option(Some(v))) => encode(inner, *v)?,
        (Shape::Result { ok, err }, Val::Result(r)) => {
            let (key, side, v) = match r {
                Ok(v) => ("ok", ok, v),
                Err(v) => ("err", err, v),
            };
            let value = match (side, v) {
                (Some(shape), Some(v)) => encode(shape, *v)?,
                _ => Value::Null,
            };
            let mut object = Map::with_capacity(1);
            object.insert(key.into(), value);
            Value::Object(object)
        }
        (Shape::Flags(flags), Val::Flags(names)) => Value::Array(
            names
                .into_iter()
                .map(|n| Value::String(wire_name(flags, n)))
                .collect(),
        ),
        (Shape::Opaque(what), _) => return Err(format!("a {what} has no JSON form")),
        _ => return Err(mismatch("the declared type")),
    })
}

/// A record as an object, fields in WIT order (the wire's order).
pub fn record(fields: &[Field], values: Vec<(String, Val)>) -> Result<Value, String> {
    if fields.len() != values.len() {
        return Err(format!(
            "a record of {} fields where {} were declared",
            values.len(),
            fields.len()
        ));
    }
    let mut object = Map::with_capacity(fields.len());
    for (field, (_, val)) in fields.iter().zip(values) {
        let value = match (field.unit, val) {
            (Unit::Plain, val) => encode(&field.shape, val)?,
            (_, Val::Option(None)) => Value::Null,
            (unit, Val::Option(Some(v))) => with_unit(unit, *v)?,
            (unit, val) => with_unit(unit, val)?,
        };
        object.insert(field.wire.clone(), value);
    }
    Ok(Value::Object(object))
}

/// Milliseconds as seconds; permission bits as octal text (`"0644"`).
fn with_unit(unit: Unit, val: Val) -> Result<Value, String> {
    let n = integer(val)?;
    Ok(match unit {
        Unit::Mode => Value::String(format!("{:04o}", n.as_u64().unwrap_or(0))),
        Unit::Seconds => match n.as_i64() {
            Some(ms) if ms % 1000 == 0 => Value::from(ms / 1000),
            Some(ms) => float(ms as f64 / 1000.0),
            None => float(n.as_f64().unwrap_or(0.0) / 1000.0),
        },
        Unit::Plain => Value::Number(n),
    })
}

fn integer(val: Val) -> Result<Number, String> {
    Ok(match val {
        Val::U8(n) => n.into(),
        Val::U16(n) => n.into(),
        Val::U32(n) => n.into(),
        Val::U64(n) => n.into(),
        Val::S8(n) => n.into(),
        Val::S16(n) => n.into(),
        Val::S32(n) => n.into(),
        Val::S64(n) => n.into(),
        _ => return Err(mismatch("an integer")),
    })
}

/// A float as a number; NaN and infinities (no JSON form) as null.
fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

fn wire_name(names: &[super::shape::Name], wit: String) -> String {
    names
        .iter()
        .find(|n| n.wit == wit)
        .map_or(wit, |n| n.wire.clone())
}

fn mismatch(want: &str) -> String {
    format!("expected {want}, got another kind of value")
}
