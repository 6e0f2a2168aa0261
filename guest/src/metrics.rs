//! sandbox.metrics over execd's `GET /metrics`.

use crate::bindings::exports::abx::epp::infra::MetricsSample;
use crate::error::{Result, unsupported};

pub fn get(_sandbox_id: &str) -> Result<MetricsSample> {
    Err(unsupported("sandbox.metrics", "not built yet"))
}
