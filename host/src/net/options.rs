//! `provider_options` (`epp.hello`): an EPP client's values for the provider's
//! settings, ahead of the operator's environment. A key is one of the
//! provider's setting names (`describe()`) or one of EPP/1's generic keys,
//! which the provider maps to its own settings (`needs().generic-settings`).
//! The result is an overlay of the environment: each value as its setting's
//! first variable, from which the grant (origin, secret headers, the guest's
//! environment) is made again (`Runtime::reconfigure`). Nothing here knows a
//! provider.

use crate::contract::bindings::ProviderInfo;
use crate::contract::bindings::abx::epp::types::ProviderNeeds;
use http::HeaderValue;
use serde_json::{Map, Value};

pub use epp_protocol::GENERIC_KEYS;

/// Options resolved against the provider's settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resolved {
    /// (variable, value), read ahead of the operator's environment.
    pub overlay: Vec<(String, String)>,
    /// (setting, the key the client used), in the order of the options.
    pub applied: Vec<(String, String)>,
    /// Keys given but not used, and why (never a value).
    pub ignored: Vec<String>,
}

/// An option's value as a setting's text: strings as they are, numbers and
/// booleans as JSON writes them, objects and arrays as JSON text (a setting
/// such as a network policy is JSON); `null` and blank text are no value.
fn text(value: &Value) -> Option<String> {
    let text = match value {
        Value::Null => return None,
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    (!text.trim().is_empty()).then_some(text)
}

/// Resolves `options` for the provider that declared `info` and `needs`.
/// `framework_key` is the value of `ABX_SANDBOX_API_KEY`, the agent
/// framework's own key: a generic key holding it is ignored, a setting's own
/// key holding it refused, so it never reaches a provider. An `Err` is the
/// message of an E1001 answer; it names keys, never values.
pub fn resolve(
    info: &ProviderInfo,
    needs: &ProviderNeeds,
    options: &Map<String, Value>,
    framework_key: Option<&str>,
) -> Result<Resolved, String> {
    let framework_key = framework_key.filter(|k| !k.is_empty());
    let mut out = Resolved::default();
    let set = |out: &mut Resolved, setting: &str, key: &str, value: String| {
        let spec = info.settings.iter().find(|s| s.name == setting);
        let Some(var) = spec.and_then(|s| s.env.first()) else {
            return Err(format!(
                "`{key}`: the provider's setting `{setting}` has no environment variable to carry it"
            ));
        };
        let injected = needs.secret_headers.iter().any(|h| h.setting == setting);
        if injected && HeaderValue::from_str(&value).is_err() {
            return Err(format!(
                "`{key}` holds characters a request header cannot carry"
            ));
        }
        out.overlay.push((var.clone(), value));
        out.applied.push((setting.to_string(), key.to_string()));
        Ok(())
    };
    // The provider's own names first: they win over a generic key for the same setting.
    for (key, value) in options {
        if !info.settings.iter().any(|s| &s.name == key) {
            continue;
        }
        let Some(value) = text(value) else {
            continue;
        };
        if framework_key == Some(value.as_str()) {
            return Err(format!(
                "`{key}` holds the agent framework's own key (ABX_SANDBOX_API_KEY), which \
                 epp-host never hands to a provider"
            ));
        }
        set(&mut out, key, key, value)?;
    }
    for (key, value) in options {
        if info.settings.iter().any(|s| &s.name == key) {
            continue;
        }
        if !GENERIC_KEYS.contains(&key.as_str()) {
            let mut known: Vec<&str> = info.settings.iter().map(|s| s.name.as_str()).collect();
            known.extend(GENERIC_KEYS);
            return Err(format!(
                "unknown provider option `{key}`; {} takes {}",
                info.id,
                known.join(", ")
            ));
        }
        let Some(value) = text(value) else {
            continue;
        };
        let Some((_, setting)) = needs.generic_settings.iter().find(|(k, _)| k == key) else {
            out.ignored
                .push(format!("{key} ({} has no such setting)", info.id));
            continue;
        };
        if framework_key == Some(value.as_str()) {
            // The framework passes its own key under the generic name to every
            // provider; it is never forwarded.
            out.ignored
                .push(format!("{key} (the agent framework's own key)"));
            continue;
        }
        if out.applied.iter().any(|(s, _)| s == setting) {
            out.ignored
                .push(format!("{key} (`{setting}` is given by its own name)"));
            continue;
        }
        set(&mut out, setting, key, value)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::bindings::abx::epp::types::{Capabilities, HeaderScope, SecretHeader};
    use crate::net::grant::test_provider;
    use serde_json::json;

    fn info() -> ProviderInfo {
        test_provider(&[
            ("base_url", &["EX_BASE_URL", "EX_URL"], false),
            ("api_key", &["EX_API_KEY"], true),
            ("timeout", &["EX_TIMEOUT"], false),
            ("policy", &["EX_POLICY"], false),
        ])
    }

    fn needs() -> ProviderNeeds {
        ProviderNeeds {
            capabilities: Capabilities::empty(),
            origin: vec!["{base_url}".into()],
            origin_host_any_port: false,
            allow_hosts_env: Vec::new(),
            secret_headers: vec![SecretHeader {
                setting: "api_key".into(),
                header: "x-ex-key".into(),
                scope: HeaderScope::Origin,
            }],
            generic_settings: vec![
                ("sandbox_base_url".into(), "base_url".into()),
                ("sandbox_api_key".into(), "api_key".into()),
            ],
        }
    }

    fn resolve_json(options: Value, framework: Option<&str>) -> Result<Resolved, String> {
        let Value::Object(map) = options else {
            unreachable!()
        };
        resolve(&info(), &needs(), &map, framework)
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn names_and_generic_keys_become_the_first_variable() {
        let r = resolve_json(
            json!({"sandbox_base_url": "http://b:1", "timeout": 30, "policy": {"a": [1]},
                   "sandbox_api_key": "k-1"}),
            None,
        )
        .unwrap();
        // Own names first, then generic keys, each in the client's order.
        assert_eq!(
            r.overlay,
            pairs(&[
                ("EX_TIMEOUT", "30"),
                ("EX_POLICY", r#"{"a":[1]}"#),
                ("EX_BASE_URL", "http://b:1"),
                ("EX_API_KEY", "k-1"),
            ])
        );
        assert_eq!(
            r.applied,
            pairs(&[
                ("timeout", "timeout"),
                ("policy", "policy"),
                ("base_url", "sandbox_base_url"),
                ("api_key", "sandbox_api_key"),
            ])
        );
        assert!(r.ignored.is_empty());
    }

    #[test]
    fn the_framework_key_is_never_forwarded() {
        // Under a generic key: ignored (frameworks send their key to every provider).
        let r = resolve_json(json!({"sandbox_api_key": "fw-key"}), Some("fw-key")).unwrap();
        assert!(r.overlay.is_empty(), "{r:?}");
        assert_eq!(r.ignored.len(), 1);
        assert!(!format!("{r:?}").contains("fw-key"));
        // A different value is the provider's own key: used.
        let r = resolve_json(json!({"sandbox_api_key": "mine"}), Some("fw-key")).unwrap();
        assert_eq!(r.overlay, pairs(&[("EX_API_KEY", "mine")]));
        // Under a setting's own name: refused, without the value.
        let e = resolve_json(json!({"api_key": "fw-key"}), Some("fw-key")).unwrap_err();
        assert!(
            e.contains("ABX_SANDBOX_API_KEY") && !e.contains("fw-key"),
            "{e}"
        );
        // An unset framework key matches nothing.
        let r = resolve_json(json!({"sandbox_api_key": ""}), Some("")).unwrap();
        assert!(r.overlay.is_empty());
    }

    #[test]
    fn own_names_win_and_nothing_is_nothing() {
        let r = resolve_json(
            json!({"sandbox_base_url": "http://generic", "base_url": "http://own",
                   "timeout": null, "policy": "  "}),
            None,
        )
        .unwrap();
        assert_eq!(r.overlay, pairs(&[("EX_BASE_URL", "http://own")]));
        assert_eq!(r.ignored.len(), 1, "{r:?}");
    }

    #[test]
    fn unknown_keys_and_bad_secrets_are_refused_by_name() {
        let e = resolve_json(json!({"base-url": "x"}), None).unwrap_err();
        assert!(
            e.contains("`base-url`") && e.contains("base_url, api_key"),
            "{e}"
        );
        assert!(e.contains("sandbox_base_url, sandbox_api_key"), "{e}");
        let e = resolve_json(json!({"sandbox_api_key": "line\nbreak-secret"}), None).unwrap_err();
        assert!(
            e.contains("`sandbox_api_key`") && !e.contains("secret"),
            "{e}"
        );
        // A generic key the provider has no setting for is ignored.
        let mut n = needs();
        n.generic_settings.clear();
        let Value::Object(map) = json!({"sandbox_api_key": "k"}) else {
            unreachable!()
        };
        let r = resolve(&info(), &n, &map, None).unwrap();
        assert!(r.overlay.is_empty() && r.ignored.len() == 1);
    }
}
