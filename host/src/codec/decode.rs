//! JSON params into WIT values (docs/epp-1.md §8). Errors are one sentence
//! naming the field by its path (`resources.cpu`, `entrypoint[1]`).

use super::shape::{Field, Int, Shape, Unit};
use crate::contract::table::Method;
use base64::Engine as _;
use serde_json::{Map, Value};
use wasmtime::component::Val;

/// How many bytes a `list<u8>` may carry: at the top of the params (called
/// typed, so as bytes) and nested inside another value (one `Val` per byte).
pub struct Limits {
    pub top: usize,
    pub nested: usize,
}

/// One decoded param.
pub enum Arg {
    Val(Val),
    /// A top-level `list<u8>`, kept as bytes.
    Bytes(Vec<u8>),
}

impl Arg {
    /// As a `Val` (a byte param as one `Val` per byte: only small ones get here).
    pub fn into_val(self) -> Val {
        match self {
            Arg::Val(v) => v,
            Arg::Bytes(bytes) => Val::List(bytes.into_iter().map(Val::U8).collect()),
        }
    }
}

/// The params of `method` (its fields are `fields`) as one value per field.
/// A field given under an alias is named by that alias in errors; `taken`
/// are more names an unknown field's message lists (an adapter's own params).
pub fn params(
    method: &Method,
    fields: &[Field],
    params: Map<String, Value>,
    taken: &[&str],
    limits: &Limits,
) -> Result<Vec<Arg>, String> {
    let mut also: Vec<&str> = method.aliases.iter().map(|(alias, _)| *alias).collect();
    also.extend(taken);
    unknown(fields, &params, "", &also)?;
    fields
        .iter()
        .map(|field| {
            let mut given = method
                .aliases
                .iter()
                .filter(|(_, target)| *target == field.wire)
                .map(|(alias, _)| *alias)
                .chain([field.wire.as_str()])
                .filter_map(|key| Some((key, params.get(key).filter(|v| !v.is_null())?)));
            let val = match (given.next(), given.next()) {
                (Some((a, _)), Some((b, _))) => {
                    return Err(format!("`{a}` and `{b}` name the same field; give one"));
                }
                (Some((key, value)), None) if field.shape == Shape::Bytes => {
                    return Ok(Arg::Bytes(bytes(value, key, limits.top)?));
                }
                // Absent bytes are no bytes (as an absent list is empty).
                (None, _)
                    if field.shape == Shape::Bytes && method.default(&field.wire).is_none() =>
                {
                    return Ok(Arg::Bytes(Vec::new()));
                }
                (Some((key, value)), None) => value_of(field, value, key, limits.nested)?,
                (None, _) => match method.default(&field.wire) {
                    Some(json) => {
                        let value: Value = serde_json::from_str(json).map_err(|e| {
                            format!("the default of `{}` is not JSON ({e})", field.wire)
                        })?;
                        value_of(field, &value, &field.wire, limits.nested)?
                    }
                    None => absent(&field.shape, &field.wire)?,
                },
            };
            if let Some(n) = integer(&val) {
                method.check_range(&field.wire, n)?;
            }
            Ok(Arg::Val(val))
        })
        .collect()
}

/// Rejects keys that name no field, as serde's `deny_unknown_fields` words it.
fn unknown(
    fields: &[Field],
    object: &Map<String, Value>,
    at: &str,
    also: &[&str],
) -> Result<(), String> {
    let known = |k: &str| fields.iter().any(|f| f.wire == k) || also.contains(&k);
    let Some(key) = object.keys().find(|k| !known(k)) else {
        return Ok(());
    };
    let names: Vec<String> = fields
        .iter()
        .map(|f| f.wire.as_str())
        .chain(also.iter().copied())
        .map(|n| format!("`{n}`"))
        .collect();
    let expected = match names.as_slice() {
        [] => "there are no fields".to_string(),
        [one] => format!("expected {one}"),
        [a, b] => format!("expected {a} or {b}"),
        all => format!("expected one of {}", all.join(", ")),
    };
    let inside = if at.is_empty() {
        String::new()
    } else {
        format!(" in `{at}`")
    };
    Err(format!("unknown field `{key}`{inside}, {expected}"))
}

/// The value of an absent (or null) field: none, empty, false, or an error.
fn absent(shape: &Shape, at: &str) -> Result<Val, String> {
    Ok(match shape {
        Shape::Option(_) => Val::Option(None),
        Shape::List(_) | Shape::Bytes | Shape::KeyValues => Val::List(Vec::new()),
        Shape::Bool => Val::Bool(false),
        _ => return Err(format!("missing field `{at}`")),
    })
}

fn integer(val: &Val) -> Option<i128> {
    Some(match val {
        Val::U8(n) => (*n).into(),
        Val::U16(n) => (*n).into(),
        Val::U32(n) => (*n).into(),
        Val::U64(n) => (*n).into(),
        Val::S8(n) => (*n).into(),
        Val::S16(n) => (*n).into(),
        Val::S32(n) => (*n).into(),
        Val::S64(n) => (*n).into(),
        Val::Option(Some(inner)) => return integer(inner),
        _ => return None,
    })
}

/// A field's value, with its unit (seconds, octal mode) applied.
fn value_of(field: &Field, value: &Value, at: &str, cap: usize) -> Result<Val, String> {
    match (field.unit, &field.shape) {
        (Unit::Plain, shape) => decode_capped(shape, value, at, cap),
        (unit, Shape::Option(inner)) => Ok(Val::Option(Some(Box::new(unit_value(
            unit, inner, value, at, cap,
        )?)))),
        (unit, shape) => unit_value(unit, shape, value, at, cap),
    }
}

fn unit_value(
    unit: Unit,
    shape: &Shape,
    value: &Value,
    at: &str,
    cap: usize,
) -> Result<Val, String> {
    let Shape::Int(int) = shape else {
        return decode_capped(shape, value, at, cap);
    };
    let n = match unit {
        Unit::Seconds => milliseconds(value, at)?,
        Unit::Mode => mode(value, at)?.into(),
        Unit::Plain => return decode_capped(shape, value, at, cap),
    };
    int_val(*int, n, at)
}

/// Seconds (possibly fractional) as whole milliseconds, rounded up.
fn milliseconds(value: &Value, at: &str) -> Result<i128, String> {
    match value.as_f64() {
        Some(s) if s.is_finite() && s > 0.0 && s <= 1e9 => Ok((s * 1000.0).ceil() as i128),
        _ => Err(format!(
            "`{at}` must be a positive number of seconds, got {value}"
        )),
    }
}

/// File modes are octal: `"644"`, `"0644"`, `"0o644"`, or a number whose digits
/// are the octal digits (`644`), as some backends write them.
pub fn mode(value: &Value, at: &str) -> Result<u32, String> {
    let digits = match value {
        Value::String(s) => s.trim_start_matches("0o").to_string(),
        Value::Number(n) if n.is_u64() => n.to_string(),
        other => {
            return Err(format!(
                "{at} must be octal digits like \"0644\" or 644, got {other}"
            ));
        }
    };
    let bits = u32::from_str_radix(&digits, 8)
        .map_err(|_| format!("{at} `{digits}` is not octal; use digits 0-7 such as \"0644\""))?;
    if bits > 0o7777 {
        return Err(format!("{at} {digits} is beyond 7777"));
    }
    Ok(bits)
}

fn int_val(int: Int, n: i128, at: &str) -> Result<Val, String> {
    let (min, max) = int.bounds();
    if n < min || n > max {
        return Err(format!(
            "`{at}` must be an integer from {min} to {max}, got {n}"
        ));
    }
    // In range, so every cast below is exact.
    Ok(match int {
        Int::U8 => Val::U8(n as u8),
        Int::U16 => Val::U16(n as u16),
        Int::U32 => Val::U32(n as u32),
        Int::U64 => Val::U64(n as u64),
        Int::S8 => Val::S8(n as i8),
        Int::S16 => Val::S16(n as i16),
        Int::S32 => Val::S32(n as i32),
        Int::S64 => Val::S64(n as i64),
    })
}

/// A short description of what was given, for error messages.
fn got(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 40 {
        return text;
    }
    let cut: String = text.chars().take(37).collect();
    format!("{cut}...")
}

fn expected(at: &str, what: &str, value: &Value) -> String {
    format!("`{at}` must be {what}, got {}", got(value))
}

/// A base64 string as bytes, refused before decoding when it would carry
/// more than `cap` bytes.
pub fn bytes(value: &Value, at: &str, cap: usize) -> Result<Vec<u8>, String> {
    let text = value
        .as_str()
        .ok_or_else(|| expected(at, "a base64 string", value))?;
    let carries = text.len() / 4 * 3;
    if carries > cap.saturating_add(2) {
        return Err(format!(
            "`{at}` carries about {carries} bytes, more than this host passes in one param \
             ({cap} bytes, --max-param-bytes); send it in parts"
        ));
    }
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("`{at}` is not valid base64 ({e})"))
}

/// One JSON value as a WIT value of `shape`, byte strings inside it up to the
/// nested bound.
pub fn decode(shape: &Shape, value: &Value, at: &str) -> Result<Val, String> {
    decode_capped(shape, value, at, super::NESTED_BYTES)
}

fn decode_capped(shape: &Shape, value: &Value, at: &str, cap: usize) -> Result<Val, String> {
    let decode = |shape: &Shape, value: &Value, at: &str| decode_capped(shape, value, at, cap);
    let value_of = |field: &Field, value: &Value, at: &str| value_of(field, value, at, cap);
    Ok(match shape {
        Shape::Bool => Val::Bool(
            value
                .as_bool()
                .ok_or_else(|| expected(at, "true or false", value))?,
        ),
        Shape::Int(int) => {
            let n = value
                .as_i64()
                .map(i128::from)
                .or_else(|| value.as_u64().map(i128::from))
                .ok_or_else(|| {
                    let (min, max) = int.bounds();
                    expected(at, &format!("an integer from {min} to {max}"), value)
                })?;
            int_val(*int, n, at)?
        }
        Shape::F32 => Val::Float32(
            value
                .as_f64()
                .ok_or_else(|| expected(at, "a number", value))? as f32,
        ),
        Shape::F64 => Val::Float64(
            value
                .as_f64()
                .ok_or_else(|| expected(at, "a number", value))?,
        ),
        Shape::Char => {
            let mut chars = value.as_str().map(str::chars);
            match chars.as_mut().map(|c| (c.next(), c.next())) {
                Some((Some(c), None)) => Val::Char(c),
                _ => return Err(expected(at, "a single character", value)),
            }
        }
        Shape::String => Val::String(
            value
                .as_str()
                .ok_or_else(|| expected(at, "a string", value))?
                .to_string(),
        ),
        Shape::Bytes => Val::List(bytes(value, at, cap)?.into_iter().map(Val::U8).collect()),
        Shape::KeyValues => {
            let object = value
                .as_object()
                .ok_or_else(|| expected(at, "an object of strings", value))?;
            let pairs = object.iter().map(|(k, v)| {
                let v = v
                    .as_str()
                    .ok_or_else(|| expected(&format!("{at}.{k}"), "a string", v))?;
                Ok(Val::Tuple(vec![
                    Val::String(k.clone()),
                    Val::String(v.to_string()),
                ]))
            });
            Val::List(pairs.collect::<Result<_, String>>()?)
        }
        Shape::List(item) => match value {
            Value::Array(items) => Val::List(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| decode(item, v, &format!("{at}[{i}]")))
                    .collect::<Result<_, _>>()?,
            ),
            // One value where a list is expected is a list of one.
            one => Val::List(vec![decode(item, one, at)?]),
        },
        Shape::Record(fields) => {
            let object = value
                .as_object()
                .ok_or_else(|| expected(at, "an object", value))?;
            unknown(fields, object, at, &[])?;
            Val::Record(
                fields
                    .iter()
                    .map(|f| {
                        let path = format!("{at}.{}", f.wire);
                        let val = match object.get(&f.wire).filter(|v| !v.is_null()) {
                            Some(v) => value_of(f, v, &path)?,
                            None => absent(&f.shape, &path)?,
                        };
                        Ok((f.wit.clone(), val))
                    })
                    .collect::<Result<_, String>>()?,
            )
        }
        Shape::Tuple(items) => match value.as_array() {
            Some(values) if values.len() == items.len() => Val::Tuple(
                items
                    .iter()
                    .zip(values)
                    .enumerate()
                    .map(|(i, (s, v))| decode(s, v, &format!("{at}[{i}]")))
                    .collect::<Result<_, _>>()?,
            ),
            _ => {
                return Err(expected(
                    at,
                    &format!("an array of {} items", items.len()),
                    value,
                ));
            }
        },
        Shape::Enum(cases) => {
            let name = value
                .as_str()
                .and_then(|s| cases.iter().find(|c| c.wire == s));
            match name {
                Some(c) => Val::Enum(c.wit.clone()),
                None => {
                    let all: Vec<String> =
                        cases.iter().map(|c| format!("\"{}\"", c.wire)).collect();
                    return Err(expected(at, &format!("one of {}", all.join(", ")), value));
                }
            }
        }
        Shape::Variant(cases) => {
            let (name, payload) = match value {
                Value::String(s) => (s.as_str(), None),
                Value::Object(o) if o.len() == 1 => {
                    let (k, v) = o.iter().next().expect("one entry");
                    (k.as_str(), Some(v))
                }
                _ => {
                    return Err(expected(
                        at,
                        "a case name, or an object {case: payload}",
                        value,
                    ));
                }
            };
            let case = cases.iter().find(|c| c.name.wire == name).ok_or_else(|| {
                let all: Vec<&str> = cases.iter().map(|c| c.name.wire.as_str()).collect();
                format!("`{at}`: no case `{name}` (cases: {})", all.join(", "))
            })?;
            let payload = match (&case.payload, payload) {
                (None, None) => None,
                (Some(shape), Some(v)) => {
                    Some(Box::new(decode(shape, v, &format!("{at}.{name}"))?))
                }
                (Some(_), None) => {
                    return Err(format!(
                        "`{at}`: case `{name}` needs a payload, as {{\"{name}\": ...}}"
                    ));
                }
                (None, Some(_)) => {
                    return Err(format!(
                        "`{at}`: case `{name}` has no payload; give it as \"{name}\""
                    ));
                }
            };
            Val::Variant(case.name.wit.clone(), payload)
        }
        Shape::Option(inner) => match value {
            Value::Null => Val::Option(None),
            v => Val::Option(Some(Box::new(decode(inner, v, at)?))),
        },
        Shape::Result { ok, err } => {
            let pick = |side: &Option<Box<Shape>>, v: &Value, name: &str| match side {
                Some(shape) => decode(shape, v, &format!("{at}.{name}")).map(|v| Some(Box::new(v))),
                None => Ok(None),
            };
            match value
                .as_object()
                .filter(|o| o.len() == 1)
                .and_then(|o| o.iter().next())
            {
                Some((k, v)) if k == "ok" => Val::Result(Ok(pick(ok, v, "ok")?)),
                Some((k, v)) if k == "err" => Val::Result(Err(pick(err, v, "err")?)),
                _ => return Err(expected(at, "{\"ok\": ...} or {\"err\": ...}", value)),
            }
        }
        Shape::Flags(flags) => {
            let items = value
                .as_array()
                .ok_or_else(|| expected(at, "an array of flag names", value))?;
            Val::Flags(
                items
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .and_then(|s| flags.iter().find(|f| f.wire == s))
                            .map(|f| f.wit.clone())
                            .ok_or_else(|| {
                                let all: Vec<&str> =
                                    flags.iter().map(|f| f.wire.as_str()).collect();
                                expected(at, &format!("flags among {}", all.join(", ")), v)
                            })
                    })
                    .collect::<Result<_, _>>()?,
            )
        }
        Shape::Opaque(what) => {
            return Err(format!("`{at}` is a {what}, which has no JSON form"));
        }
    })
}
