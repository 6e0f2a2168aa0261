//! The provider's static answers (`describe()`, `needs()`, `reusable()`),
//! kept beside its compiled code in the compile cache.
//!
//! The instance that asks them may reach nothing and sees no environment, so
//! the answers are a function of the component's bytes (wit/infra.wit says so
//! of the three functions). Kept with the `.cwasm` that was compiled from the
//! same verified `.wasm`, they let a warm start skip that instance: measured
//! (bench/profiling.md) it is the only thing that runs guest code before the
//! first request, and its pages were most of what idle RSS had over 16 MiB.
//!
//! The file is JSON of mirror types below, each converted field by field, so a
//! change of the WIT records fails to compile here instead of silently
//! dropping a field; a file this host cannot read is ignored and rewritten.

use crate::contract::bindings::ProviderInfo;
use crate::contract::bindings::abx::epp::types::{
    Capabilities, Capability, HeaderScope, ProviderNeeds, SecretHeader, Setting,
};
use crate::contract::capabilities;
use serde::{Deserialize, Serialize};

/// What `Runtime::load` asks a provider before serving it.
pub struct Answers {
    pub info: ProviderInfo,
    /// `None` for a component without `needs()` (abx:epp 1.0).
    pub needs: Option<ProviderNeeds>,
    /// `reusable()`, false for a component without it.
    pub reusable: bool,
}

impl Answers {
    /// The answers as stored in the cache.
    pub fn to_json(&self) -> Vec<u8> {
        let stored = Stored {
            info: info_out(&self.info),
            needs: self.needs.as_ref().map(needs_out),
            reusable: self.reusable,
        };
        serde_json::to_vec(&stored).expect("plain data serialises")
    }

    /// Answers read back from the cache; `None` when they are not what this
    /// host writes (another version's file, a damaged one).
    pub fn from_json(bytes: &[u8]) -> Option<Answers> {
        let stored: Stored = serde_json::from_slice(bytes).ok()?;
        let needs = match stored.needs {
            Some(needs) => Some(needs_in(needs)?),
            None => None,
        };
        Some(Answers {
            info: info_in(stored.info),
            needs,
            reusable: stored.reusable,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    info: StoredInfo,
    needs: Option<StoredNeeds>,
    reusable: bool,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredInfo {
    id: String,
    version: String,
    /// (name, supported)
    capabilities: Vec<(String, bool)>,
    settings: Vec<StoredSetting>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredSetting {
    name: String,
    env: Vec<String>,
    default_value: Option<String>,
    secret: bool,
    description: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredNeeds {
    /// Wire names of the flags set.
    capabilities: Vec<String>,
    origin: Vec<String>,
    origin_host_any_port: bool,
    allow_hosts_env: Vec<String>,
    /// (setting, header, whether the scope is the origin's host on any port)
    secret_headers: Vec<(String, String, bool)>,
    generic_settings: Vec<(String, String)>,
}

fn info_out(info: &ProviderInfo) -> StoredInfo {
    let ProviderInfo {
        id,
        version,
        capabilities,
        settings,
    } = info;
    StoredInfo {
        id: id.clone(),
        version: version.clone(),
        capabilities: capabilities
            .iter()
            .map(|Capability { name, supported }| (name.clone(), *supported))
            .collect(),
        settings: settings
            .iter()
            .map(|s| {
                let Setting {
                    name,
                    env,
                    default_value,
                    secret,
                    description,
                } = s.clone();
                StoredSetting {
                    name,
                    env,
                    default_value,
                    secret,
                    description,
                }
            })
            .collect(),
    }
}

fn info_in(info: StoredInfo) -> ProviderInfo {
    let StoredInfo {
        id,
        version,
        capabilities,
        settings,
    } = info;
    ProviderInfo {
        id,
        version,
        capabilities: capabilities
            .into_iter()
            .map(|(name, supported)| Capability { name, supported })
            .collect(),
        settings: settings
            .into_iter()
            .map(|s| {
                let StoredSetting {
                    name,
                    env,
                    default_value,
                    secret,
                    description,
                } = s;
                Setting {
                    name,
                    env,
                    default_value,
                    secret,
                    description,
                }
            })
            .collect(),
    }
}

fn needs_out(needs: &ProviderNeeds) -> StoredNeeds {
    let ProviderNeeds {
        capabilities,
        origin,
        origin_host_any_port,
        allow_hosts_env,
        secret_headers,
        generic_settings,
    } = needs;
    StoredNeeds {
        capabilities: capabilities::names(*capabilities)
            .map(str::to_owned)
            .collect(),
        origin: origin.clone(),
        origin_host_any_port: *origin_host_any_port,
        allow_hosts_env: allow_hosts_env.clone(),
        secret_headers: secret_headers
            .iter()
            .map(
                |SecretHeader {
                     setting,
                     header,
                     scope,
                 }| {
                    let any_port = match scope {
                        HeaderScope::Origin => false,
                        HeaderScope::OriginHost => true,
                    };
                    (setting.clone(), header.clone(), any_port)
                },
            )
            .collect(),
        generic_settings: generic_settings.clone(),
    }
}

/// `None` when a capability name is not one this host knows.
fn needs_in(needs: StoredNeeds) -> Option<ProviderNeeds> {
    let StoredNeeds {
        capabilities,
        origin,
        origin_host_any_port,
        allow_hosts_env,
        secret_headers,
        generic_settings,
    } = needs;
    let mut flags = Capabilities::empty();
    for name in &capabilities {
        flags |= capabilities::flag(name)?;
    }
    Some(ProviderNeeds {
        capabilities: flags,
        origin,
        origin_host_any_port,
        allow_hosts_env,
        secret_headers: secret_headers
            .into_iter()
            .map(|(setting, header, any_port)| SecretHeader {
                setting,
                header,
                scope: if any_port {
                    HeaderScope::OriginHost
                } else {
                    HeaderScope::Origin
                },
            })
            .collect(),
        generic_settings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Answers {
        Answers {
            info: ProviderInfo {
                id: "p".into(),
                version: "1.2.3".into(),
                capabilities: vec![Capability {
                    name: "pty".into(),
                    supported: true,
                }],
                settings: vec![Setting {
                    name: "api_key".into(),
                    env: vec!["A".into(), "B".into()],
                    default_value: None,
                    secret: true,
                    description: "the key".into(),
                }],
            },
            needs: Some(ProviderNeeds {
                capabilities: Capabilities::PTY | Capabilities::FILES_RW,
                origin: vec!["{base_url}".into()],
                origin_host_any_port: true,
                allow_hosts_env: vec!["HOSTS".into()],
                secret_headers: vec![SecretHeader {
                    setting: "api_key".into(),
                    header: "x-key".into(),
                    scope: HeaderScope::OriginHost,
                }],
                generic_settings: vec![("api_key".into(), "api_key".into())],
            }),
            reusable: true,
        }
    }

    #[test]
    fn answers_round_trip() {
        let a = sample();
        let b = Answers::from_json(&a.to_json()).expect("reads back");
        // Written again, the same bytes: every field came back.
        assert_eq!(a.to_json(), b.to_json());
        let needs = b.needs.expect("needs");
        assert_eq!(
            needs.capabilities,
            Capabilities::PTY | Capabilities::FILES_RW
        );
        assert!(matches!(
            needs.secret_headers[0].scope,
            HeaderScope::OriginHost
        ));
        assert!(b.reusable);
    }

    #[test]
    fn a_file_this_host_did_not_write_is_not_read() {
        assert!(Answers::from_json(b"").is_none());
        assert!(Answers::from_json(b"{}").is_none());
        let mut json: serde_json::Value = serde_json::from_slice(&sample().to_json()).unwrap();
        json["needs"]["capabilities"] = serde_json::json!(["teleport"]);
        assert!(Answers::from_json(json.to_string().as_bytes()).is_none());
        let mut json: serde_json::Value = serde_json::from_slice(&sample().to_json()).unwrap();
        json["extra"] = serde_json::json!(1);
        assert!(Answers::from_json(json.to_string().as_bytes()).is_none());
    }
}
