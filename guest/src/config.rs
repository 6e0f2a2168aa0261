//! The provider's settings, read once per instance from its environment
//! (where the host put an EPP client's `provider_options` ahead of the
//! operator's variables; `request.provider-options` says which).

use crate::bindings::abx::epp::request;
use crate::error::{Error, configuration};
use opensandbox_settings::{SETTINGS as SPECS, SettingError, Settings};
use std::collections::HashMap;
use std::sync::OnceLock;

static SETTINGS: OnceLock<Result<Settings, String>> = OnceLock::new();

fn load() -> Result<Settings, String> {
    let env: HashMap<String, String> = wasip2::cli::environment::get_environment()
        .into_iter()
        .collect();
    Settings::from_env(&|name: &str| env.get(name).cloned())
        .map_err(|e| message(&e, &request::provider_options()))
}

/// What is wrong and where to fix it: the option the client gave
/// (`provider_options.KEY`), or the operator's variable.
fn message(e: &SettingError, options: &[(String, String)]) -> String {
    let setting = SPECS
        .iter()
        .find(|s| s.env.contains(&e.var.as_str()))
        .map(|s| s.name);
    let option = setting.and_then(|name| options.iter().find(|(s, _)| s == name));
    match option {
        Some((_, key)) => format!(
            "invalid provider_options.{key} (epp.hello): {}; send epp.hello again with a \
             valid value",
            e.message
        ),
        None => format!("invalid provider configuration: {e}; fix it and restart the host"),
    }
}

/// The checked settings, or E2001 naming the bad option or variable.
pub fn settings() -> Result<&'static Settings, Error> {
    match SETTINGS.get_or_init(load) {
        Ok(s) => Ok(s),
        Err(message) => Err(configuration(message.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_value_names_where_it_came_from() {
        let e = SettingError {
            var: "ABX_OPENSANDBOX_READY_TIMEOUT".into(),
            message: "must be whole seconds, got `soon`".into(),
        };
        let from_env = message(&e, &[]);
        assert!(
            from_env.contains("setting ABX_OPENSANDBOX_READY_TIMEOUT: must be whole seconds")
                && from_env.contains("restart the host"),
            "{from_env}"
        );
        let options = [("ready_timeout".to_string(), "ready_timeout".to_string())];
        let from_option = message(&e, &options);
        assert!(
            from_option.starts_with("invalid provider_options.ready_timeout (epp.hello): must be")
                && !from_option.contains("ABX_"),
            "{from_option}"
        );
        // A generic key is named as the client wrote it.
        let e = SettingError {
            var: "ABX_OPENSANDBOX_BASE_URL".into(),
            message: "is not a URL".into(),
        };
        let options = [("base_url".to_string(), "sandbox_base_url".to_string())];
        assert!(message(&e, &options).contains("provider_options.sandbox_base_url"));
    }
}
