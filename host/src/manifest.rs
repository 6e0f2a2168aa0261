//! `provider.json`, the release manifest of a provider component.
//!
//! Every field is derived from the component itself: its bytes (size, sha256,
//! signatures), its `describe()` export (id, version, capabilities, settings)
//! and its `needs()` export (origin, allow-hosts variables, secret headers). `epp-host manifest` writes it at release time and `epp-host
//! inspect` derives it again and compares, so the manifest cannot drift from
//! the component it describes. Capabilities and settings have the same shape
//! as in the `epp.hello` answer (docs/epp-1.md).

use crate::contract::bindings::ProviderInfo;
use crate::contract::bindings::abx::epp::types::ProviderNeeds;
use crate::net::grant::scope_name;
use crate::runtime::Runtime;
use crate::signing::{self, SignatureStatus, TrustedKeys};
use anyhow::{Context, Result, bail};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Format of `provider.json`; raised only on incompatible changes.
pub const MANIFEST_VERSION: u32 = 1;
/// What the artifact is: a WebAssembly component run by an EPP host.
pub const KIND: &str = "wasm-component";
/// The protocol the provider speaks through its host.
pub use epp_protocol::PROTOCOL;
/// The manifest `inspect` looks for next to the component.
pub const MANIFEST_FILE: &str = "provider.json";

/// The manifest. Field order is the order in the written file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format of this file (`MANIFEST_VERSION`).
    pub manifest_version: u32,
    /// Provider id from `describe()`, e.g. `example`.
    pub id: String,
    /// Provider version from `describe()`.
    pub version: String,
    /// Always `wasm-component`.
    pub kind: String,
    /// Always `EPP/1`.
    pub protocol: String,
    /// The WIT world the component was built against (`abx:epp/provider@1.1.0`).
    pub wit_world: String,
    /// File name of the component, next to the manifest.
    pub file: String,
    /// Size of the component file in bytes, signatures included.
    pub size: u64,
    /// Hex sha256 of the component file as shipped, signatures included.
    pub sha256: String,
    /// Key ids (hex, as wasmsign2 records them) of the signatures that were
    /// verified against a public key when the manifest was made. Several during
    /// a key rotation.
    pub signer_key_ids: Vec<String>,
    /// Every EPP/1 capability, in protocol order: true where supported.
    pub capabilities: Capabilities,
    /// Every setting the provider reads from its environment.
    pub settings: Vec<Setting>,
    /// What the provider needs from its host beyond its settings (`needs()`;
    /// absent in manifests written before abx:epp 1.1, which then differ).
    #[serde(default)]
    pub needs: Needs,
}

/// `needs()` without the capabilities (already in `capabilities`): what the
/// provider asks its host to reach and to inject. Names only, never values.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Needs {
    /// Origin URL templates, tried in order (wit/types.wit has the rule).
    pub origin: Vec<String>,
    /// Whether any port on the origin's host may be reached too.
    pub origin_host_any_port: bool,
    /// Variables in which the operator lists more hosts.
    pub allow_hosts_env: Vec<String>,
    pub secret_headers: Vec<SecretHeader>,
    /// EPP/1's generic `provider_options` keys and the setting each stands for.
    #[serde(default)]
    pub generic_settings: Vec<GenericSetting>,
}

/// A generic `provider_options` key and the provider's setting it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenericSetting {
    pub key: String,
    pub setting: String,
}

/// A secret setting the host sends as a header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretHeader {
    /// The secret setting whose value is sent.
    pub setting: String,
    /// The request header, as declared.
    pub header: String,
    /// `origin` or `origin-host` (the WIT case names).
    pub scope: String,
}

impl From<&ProviderNeeds> for Needs {
    fn from(n: &ProviderNeeds) -> Needs {
        Needs {
            origin: n.origin.clone(),
            origin_host_any_port: n.origin_host_any_port,
            allow_hosts_env: n.allow_hosts_env.clone(),
            secret_headers: n
                .secret_headers
                .iter()
                .map(|h| SecretHeader {
                    setting: h.setting.clone(),
                    header: h.header.clone(),
                    scope: scope_name(h.scope).into(),
                })
                .collect(),
            generic_settings: n
                .generic_settings
                .iter()
                .map(|(key, setting)| GenericSetting {
                    key: key.clone(),
                    setting: setting.clone(),
                })
                .collect(),
        }
    }
}

/// One provider setting, as in `epp.hello`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    pub name: String,
    /// Environment variables, first one set wins.
    pub env: Vec<String>,
    /// Default in words; null when unset by default.
    pub default: Option<String>,
    /// Never printed, logged or put in an error.
    pub secret: bool,
    pub description: String,
}

/// Capability name → supported, kept in protocol order. A JSON object, like
/// `epp.hello`'s `capabilities` (serde_json keeps key order in this workspace).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities(pub Vec<(String, bool)>);

impl Serialize for Capabilities {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(name, on)| (name, on)))
    }
}

impl<'de> Deserialize<'de> for Capabilities {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        map.into_iter()
            .map(|(name, on)| match on.as_bool() {
                Some(on) => Ok((name, on)),
                None => Err(D::Error::custom(format!(
                    "capability {name} must be true or false"
                ))),
            })
            .collect::<Result<_, _>>()
            .map(Capabilities)
    }
}

impl Manifest {
    /// The manifest of `wasm` (named `file`), described by `info` and `needs`.
    pub fn derive(
        file: &str,
        wasm: &[u8],
        info: &ProviderInfo,
        needs: &ProviderNeeds,
        signer_key_ids: Vec<String>,
    ) -> Manifest {
        Manifest {
            manifest_version: MANIFEST_VERSION,
            id: info.id.clone(),
            version: info.version.clone(),
            kind: KIND.into(),
            protocol: PROTOCOL.into(),
            // The world the component was built against (an older 1.x is served
            // too); this host's own when its type cannot be read.
            wit_world: crate::contract::Contract::of(wasm)
                .map(|c| c.world())
                .unwrap_or_else(|_| crate::contract::world()),
            file: file.into(),
            size: wasm.len() as u64,
            sha256: hex::encode(Sha256::digest(wasm)),
            signer_key_ids,
            capabilities: Capabilities(
                info.capabilities
                    .iter()
                    .map(|c| (c.name.clone(), c.supported))
                    .collect(),
            ),
            settings: info
                .settings
                .iter()
                .map(|s| Setting {
                    name: s.name.clone(),
                    env: s.env.clone(),
                    default: s.default_value.clone(),
                    secret: s.secret,
                    description: s.description.clone(),
                })
                .collect(),
            needs: Needs::from(needs),
        }
    }

    /// Reads a manifest file.
    pub fn read(path: &Path) -> Result<Manifest> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a provider manifest", path.display()))
    }

    /// Where `self` (a manifest file) disagrees with `actual` (derived from the
    /// component), one sentence each; empty when it describes the component.
    /// The file name and signer ids are not compared: a copy may be renamed, and
    /// which signatures count depends on the keys the reader trusts.
    pub fn differences(&self, actual: &Manifest) -> Vec<String> {
        let mut out = Vec::new();
        let mut field = |name: &str, same: bool| {
            if !same {
                out.push(format!("{name} differs from the component's"));
            }
        };
        field("sha256", self.sha256 == actual.sha256);
        field("size", self.size == actual.size);
        field(
            "manifest_version",
            self.manifest_version == actual.manifest_version,
        );
        field("id", self.id == actual.id);
        field("version", self.version == actual.version);
        field("kind", self.kind == actual.kind);
        field("protocol", self.protocol == actual.protocol);
        field("wit_world", self.wit_world == actual.wit_world);
        field("capabilities", self.capabilities == actual.capabilities);
        field("settings", self.settings == actual.settings);
        field("needs", self.needs == actual.needs);
        out
    }
}

/// `epp-host manifest`: derives the manifest of `wasm` and writes it to
/// `output` (or stdout). Every `public_keys` file must verify a signature of
/// the component; their key ids are recorded.
pub async fn run(
    wasm: PathBuf,
    public_keys: Vec<PathBuf>,
    output: Option<PathBuf>,
) -> Result<ExitCode> {
    let bytes = std::fs::read(&wasm).with_context(|| format!("reading {}", wasm.display()))?;
    let signers = verified_signers(&wasm, &bytes, &public_keys)?;
    if signers.is_empty() {
        tracing::warn!(
            "no --public-key given: the manifest names no signer (signer_key_ids is empty)"
        );
    }
    let runtime = Runtime::load_offline(bytes.clone()).await?;
    let file = wasm
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let manifest = Manifest::derive(&file, &bytes, &runtime.info, &runtime.needs, signers);
    let text = serde_json::to_string_pretty(&manifest)? + "\n";
    match output {
        None => print!("{text}"),
        Some(path) => {
            // Write then rename, so a reader never sees half a manifest.
            let tmp = path.with_extension("json.tmp");
            std::fs::write(&tmp, &text).with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
            tracing::info!(
                path = %path.display(),
                provider = %manifest.id,
                version = %manifest.version,
                sha256 = %manifest.sha256,
                "wrote the manifest"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The key ids of `public_keys`, after checking that each one verifies a
/// signature of `wasm`: a manifest must not name a signer that did not sign.
fn verified_signers(path: &Path, wasm: &[u8], public_keys: &[PathBuf]) -> Result<Vec<String>> {
    let mut ids = Vec::new();
    for key_file in public_keys {
        let keys = TrustedKeys::from_files(std::slice::from_ref(key_file))?;
        match signing::verify(wasm, &keys) {
            SignatureStatus::Trusted(found) => ids.extend(found),
            status => bail!(
                "{} is {} (checked against {})",
                path.display(),
                status.describe(),
                key_file.display()
            ),
        }
    }
    ids.dedup();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::bindings::abx::epp::types::{
        Capabilities as Flags, Capability, HeaderScope, SecretHeader as WitSecretHeader,
        Setting as WitSetting,
    };

    /// An example provider: one secret setting, sent as a header to its origin.
    fn info() -> ProviderInfo {
        ProviderInfo {
            id: "example".into(),
            version: "0.1.0".into(),
            capabilities: vec![
                Capability {
                    name: "sandbox.lifecycle".into(),
                    supported: true,
                },
                Capability {
                    name: "files.watch".into(),
                    supported: false,
                },
            ],
            settings: vec![WitSetting {
                name: "api_key".into(),
                env: vec!["EXAMPLE_API_KEY".into()],
                default_value: None,
                secret: true,
                description: "key".into(),
            }],
        }
    }

    fn needs() -> ProviderNeeds {
        ProviderNeeds {
            capabilities: Flags::SANDBOX_LIFECYCLE,
            origin: vec!["{base_url}".into(), "http://127.0.0.1:8080".into()],
            origin_host_any_port: true,
            allow_hosts_env: vec!["EXAMPLE_ALLOW_HOSTS".into()],
            secret_headers: vec![WitSecretHeader {
                setting: "api_key".into(),
                header: "x-example-key".into(),
                scope: HeaderScope::OriginHost,
            }],
            generic_settings: vec![("sandbox_api_key".into(), "api_key".into())],
        }
    }

    #[test]
    fn round_trips_in_protocol_order() {
        let m = Manifest::derive("p.wasm", b"\0asm", &info(), &needs(), vec!["ab".into()]);
        let text = serde_json::to_string_pretty(&m).unwrap();
        // Capabilities stay a JSON object in describe() order, as in epp.hello.
        let lifecycle = text.find("\"sandbox.lifecycle\": true").unwrap();
        let watch = text.find("\"files.watch\": false").unwrap();
        assert!(lifecycle < watch, "{text}");
        assert!(text.contains("\"default\": null"), "{text}");
        assert!(text.contains("\"scope\": \"origin-host\""), "{text}");
        let back: Manifest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, m);
        assert!(back.differences(&m).is_empty());
    }

    #[test]
    fn differences_name_the_fields() {
        let m = Manifest::derive("p.wasm", b"\0asm", &info(), &needs(), vec![]);
        let other = Manifest::derive(
            "renamed.wasm",
            b"\0asm\x0d",
            &info(),
            &needs(),
            vec!["x".into()],
        );
        assert_eq!(
            m.differences(&other),
            vec![
                "sha256 differs from the component's",
                "size differs from the component's"
            ]
        );
    }

    #[test]
    fn a_manifest_without_needs_reads_but_differs() {
        let m = Manifest::derive("p.wasm", b"\0asm", &info(), &needs(), vec![]);
        let mut old = serde_json::to_value(&m).unwrap();
        old.as_object_mut().unwrap().remove("needs");
        let old: Manifest = serde_json::from_value(old).unwrap();
        assert_eq!(
            old.differences(&m),
            vec!["needs differs from the component's"]
        );
    }

    #[test]
    fn rejects_a_capability_that_is_not_a_bool() {
        let err = serde_json::from_str::<Capabilities>(r#"{"pty": "yes"}"#).unwrap_err();
        assert!(err.to_string().contains("pty"), "{err}");
    }
}
