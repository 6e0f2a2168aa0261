//! proptest strategies shared by the stdio fuzz test and the wire properties.

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Value, json};

/// `PROPTEST_CASES` when set (`just fuzz` sets thousands), else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A proptest config with `cases(default)` cases and no failure files in the tree.
pub fn config(default: u32) -> Config {
    Config {
        cases: cases(default),
        failure_persistence: None,
        ..Config::default()
    }
}

/// A JSON scalar: null, bool, integer, finite float or short string.
pub fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ]
}

/// Any JSON value up to four levels deep.
pub fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
