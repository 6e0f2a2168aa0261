//! The provider's settings, read once per instance from its environment.

use crate::bindings::abx::epp::types::{EppError, ErrorCode};
use opensandbox_settings::Settings;
use std::collections::HashMap;
use std::sync::OnceLock;

static SETTINGS: OnceLock<Result<Settings, String>> = OnceLock::new();

fn load() -> Result<Settings, String> {
    let env: HashMap<String, String> = wasip2::cli::environment::get_environment()
        .into_iter()
        .collect();
    Settings::from_env(&|name: &str| env.get(name).cloned()).map_err(|e| e.to_string())
}

/// The checked settings, or E2001 naming the bad variable.
pub fn settings() -> Result<&'static Settings, EppError> {
    match SETTINGS.get_or_init(load) {
        Ok(s) => Ok(s),
        Err(message) => Err(EppError {
            code: ErrorCode::Configuration,
            message: format!(
                "invalid provider configuration: {message}; fix it and restart the host"
            ),
            http_status: None,
            upstream_code: None,
        }),
    }
}

/// Replaces every secret setting value in `text` (defence in depth: error texts
/// can echo what a server saw).
pub fn redact(mut text: String) -> String {
    if let Some(Ok(s)) = SETTINGS.get() {
        let secrets = [
            s.api_key.as_deref(),
            s.registry_auth.as_ref().map(|a| a.password.as_str()),
        ];
        for secret in secrets.into_iter().flatten().filter(|s| s.len() >= 4) {
            text = text.replace(secret, "<redacted>");
        }
    }
    text
}
