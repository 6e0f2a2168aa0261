//! The JSON form of a WIT type, worked out once per loaded component from
//! wasmtime's component types, so that each call only walks a small tree.

use crate::contract::names;
use wasmtime::component::types::Type;

/// How a value of some WIT type looks on the wire.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Bool,
    Int(Int),
    F32,
    F64,
    Char,
    String,
    /// `list<u8>`: a base64 string.
    Bytes,
    /// `list<tuple<string, string>>`: a JSON object of strings.
    KeyValues,
    List(Box<Shape>),
    Record(Vec<Field>),
    Tuple(Vec<Shape>),
    Variant(Vec<Case>),
    Enum(Vec<Name>),
    Option(Box<Shape>),
    Result {
        ok: Option<Box<Shape>>,
        err: Option<Box<Shape>>,
    },
    Flags(Vec<Name>),
    /// No JSON form (a resource, future, stream, map, ...): what it is.
    Opaque(&'static str),
}

/// The integer types, with their bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int {
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
}

impl Int {
    pub fn bounds(self) -> (i128, i128) {
        match self {
            Int::U8 => (0, u8::MAX.into()),
            Int::U16 => (0, u16::MAX.into()),
            Int::U32 => (0, u32::MAX.into()),
            Int::U64 => (0, u64::MAX.into()),
            Int::S8 => (i8::MIN.into(), i8::MAX.into()),
            Int::S16 => (i16::MIN.into(), i16::MAX.into()),
            Int::S32 => (i32::MIN.into(), i32::MAX.into()),
            Int::S64 => (i64::MIN.into(), i64::MAX.into()),
        }
    }
}

/// How an integer field's number reads on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Plain,
    /// `*-ms` in WIT, seconds on the wire.
    Seconds,
    /// `mode: u32`: an octal permission string.
    Mode,
}

/// A record field or a function param.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub wit: String,
    pub wire: String,
    pub shape: Shape,
    pub unit: Unit,
}

/// An enum case or flag: its WIT name and its wire name.
#[derive(Debug, Clone, PartialEq)]
pub struct Name {
    pub wit: String,
    pub wire: String,
}

impl Name {
    fn new(wit: &str) -> Name {
        Name {
            wit: wit.to_string(),
            wire: names::field(wit),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub name: Name,
    pub payload: Option<Shape>,
}

impl Field {
    /// A field named `wit` of a value shaped `shape` (the `*-ms` and `mode`
    /// rules look at both).
    pub fn new(wit: &str, shape: Shape) -> Field {
        let int = match &shape {
            Shape::Int(int) => Some(*int),
            Shape::Option(inner) => match **inner {
                Shape::Int(int) => Some(int),
                _ => None,
            },
            _ => None,
        };
        let (wire, unit) = match int {
            Some(_) if names::seconds(wit).is_some() => (names::integer_field(wit), Unit::Seconds),
            Some(Int::U32) if names::is_mode(wit) => (names::field(wit), Unit::Mode),
            _ => (names::field(wit), Unit::Plain),
        };
        Field {
            wit: wit.to_string(),
            wire,
            shape,
            unit,
        }
    }
}

impl Shape {
    pub fn of(ty: &Type) -> Shape {
        match ty {
            Type::Bool => Shape::Bool,
            Type::U8 => Shape::Int(Int::U8),
            Type::U16 => Shape::Int(Int::U16),
            Type::U32 => Shape::Int(Int::U32),
            Type::U64 => Shape::Int(Int::U64),
            Type::S8 => Shape::Int(Int::S8),
            Type::S16 => Shape::Int(Int::S16),
            Type::S32 => Shape::Int(Int::S32),
            Type::S64 => Shape::Int(Int::S64),
            Type::Float32 => Shape::F32,
            Type::Float64 => Shape::F64,
            Type::Char => Shape::Char,
            Type::String => Shape::String,
            Type::List(list) => match Shape::of(&list.ty()) {
                Shape::Int(Int::U8) => Shape::Bytes,
                Shape::Tuple(items) if items == [Shape::String, Shape::String] => Shape::KeyValues,
                item => Shape::List(Box::new(item)),
            },
            Type::Record(record) => Shape::Record(
                record
                    .fields()
                    .map(|f| Field::new(f.name, Shape::of(&f.ty)))
                    .collect(),
            ),
            Type::Tuple(tuple) => Shape::Tuple(tuple.types().map(|t| Shape::of(&t)).collect()),
            Type::Variant(variant) => Shape::Variant(
                variant
                    .cases()
                    .map(|c| Case {
                        name: Name::new(c.name),
                        payload: c.ty.as_ref().map(Shape::of),
                    })
                    .collect(),
            ),
            Type::Enum(e) => Shape::Enum(e.names().map(Name::new).collect()),
            Type::Option(option) => Shape::Option(Box::new(Shape::of(&option.ty()))),
            Type::Result(result) => Shape::Result {
                ok: result.ok().map(|t| Box::new(Shape::of(&t))),
                err: result.err().map(|t| Box::new(Shape::of(&t))),
            },
            Type::Flags(flags) => Shape::Flags(flags.names().map(Name::new).collect()),
            Type::Own(_) | Type::Borrow(_) => Shape::Opaque("resource"),
            Type::Future(_) => Shape::Opaque("future"),
            Type::Stream(_) => Shape::Opaque("stream"),
            Type::ErrorContext => Shape::Opaque("error-context"),
            Type::Map(_) => Shape::Opaque("map"),
            Type::FixedLengthList(_) => Shape::Opaque("fixed-length list"),
        }
    }
}
