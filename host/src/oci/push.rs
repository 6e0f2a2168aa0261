//! Publishing: a signed provider component, or the WIT package `abx:epp`,
//! as a one-layer Wasm artifact with the standard media types and the
//! annotations a registry UI and `wkg` show.

use super::access::RegistryPolicy;
use super::credentials::Credentials;
use super::reference::OciRef;
use super::wit_package::{self, ComponentWorld};
use super::{WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, sha256_digest};
use crate::manifest::Manifest;
use anyhow::{Context, Result, bail};
use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use serde_json::json;
use std::collections::BTreeMap;

/// Annotation keys of our own (reverse-DNS, as the OCI annotation rules ask).
pub const ANNOTATION_PROVIDER_ID: &str = "dev.abx.epp.provider.id";
pub const ANNOTATION_CAPABILITIES: &str = "dev.abx.epp.capabilities";
pub const ANNOTATION_WORLD: &str = "dev.abx.epp.world";
pub const ANNOTATION_SIGNERS: &str = "dev.abx.epp.signer-key-ids";
/// Standard OCI annotation keys.
pub const ANNOTATION_VERSION: &str = "org.opencontainers.image.version";
pub const ANNOTATION_SOURCE: &str = "org.opencontainers.image.source";
const ANNOTATION_TITLE: &str = "org.opencontainers.image.title";
const ANNOTATION_DESCRIPTION: &str = "org.opencontainers.image.description";
const ANNOTATION_CREATED: &str = "org.opencontainers.image.created";
const ANNOTATION_LICENSES: &str = "org.opencontainers.image.licenses";

/// Where the artifact landed.
pub struct Pushed {
    /// The tag pushed to.
    pub reference: OciRef,
    /// The manifest digest: `oci://REGISTRY/REPOSITORY@DIGEST` pins it.
    pub manifest_digest: String,
    /// The sha256 of the pushed bytes.
    pub layer_digest: String,
}

/// What is pushed: the bytes and what the manifest says about them.
pub struct Artifact {
    /// The layer: a component or a WIT package.
    pub wasm: Vec<u8>,
    /// The manifest's annotations.
    pub annotations: BTreeMap<String, String>,
    /// The component's world (none for a WIT package).
    pub world: Option<ComponentWorld>,
}

impl Artifact {
    /// A provider component described by its release manifest (provider.json),
    /// which must be this component's (same sha256).
    pub fn component(wasm: Vec<u8>, manifest: &Manifest, source: &str) -> Result<Artifact> {
        let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&wasm));
        if manifest.sha256 != sha256 {
            bail!(
                "provider.json describes a component with sha256 {}, not this one ({sha256}): \
                 make the manifest again (epp-host manifest) or push the component it describes",
                manifest.sha256
            );
        }
        let world = wit_package::component_world(&wasm)?;
        // From the component itself: a manifest may predate its contract version.
        let contract = crate::contract::Contract::of(&wasm)?.world();
        let capabilities: Vec<&str> = manifest
            .capabilities
            .0
            .iter()
            .filter(|(_, on)| *on)
            .map(|(name, _)| name.as_str())
            .collect();
        let mut annotations = common_annotations(source);
        annotations.extend([
            (ANNOTATION_TITLE.into(), manifest.id.clone()),
            (ANNOTATION_VERSION.into(), manifest.version.clone()),
            (
                ANNOTATION_DESCRIPTION.into(),
                format!(
                    "EPP/1 sandbox provider `{}` ({})",
                    manifest.id, manifest.wit_world
                ),
            ),
            (ANNOTATION_PROVIDER_ID.into(), manifest.id.clone()),
            (ANNOTATION_CAPABILITIES.into(), capabilities.join(",")),
            (ANNOTATION_WORLD.into(), contract),
            (ANNOTATION_SIGNERS.into(), manifest.signer_key_ids.join(",")),
        ]);
        Ok(Artifact {
            wasm,
            annotations,
            world: Some(world),
        })
    }

    /// A Wasm WIT package (`wit_package::encode_dir`).
    pub fn wit_package(wasm: Vec<u8>, source: &str) -> Result<Artifact> {
        let name = wit_package::package_name(&wasm)?;
        let version = name.version.as_ref().with_context(|| {
            format!("WIT package {name} has no version; a published one needs one")
        })?;
        let mut annotations = common_annotations(source);
        annotations.extend([
            (
                ANNOTATION_TITLE.into(),
                format!("{}:{}", name.namespace, name.name),
            ),
            (ANNOTATION_VERSION.into(), version.to_string()),
            (
                ANNOTATION_DESCRIPTION.into(),
                format!("WIT package {name}: the EPP/1 provider contract"),
            ),
        ]);
        Ok(Artifact {
            wasm,
            annotations,
            world: None,
        })
    }

    /// The config blob (wasm-oci-artifact v0: architecture, os, layer digests
    /// and, for a component, its imports and exports).
    fn config(&self) -> Result<Config> {
        let mut config = json!({
            "created": created(),
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [sha256_digest(&self.wasm)],
        });
        if let Some(world) = &self.world {
            config["component"] = json!({"imports": world.imports, "exports": world.exports});
        }
        Ok(Config::new(
            serde_json::to_vec(&config)?,
            WASM_CONFIG_MEDIA_TYPE.to_string(),
            None,
        ))
    }
}

/// Pushes `artifact` to `reference` (a tag; a digest is what comes back).
pub async fn push(
    artifact: Artifact,
    reference: &OciRef,
    policy: &RegistryPolicy,
    credentials: &Credentials,
) -> Result<Pushed> {
    if reference.digest().is_some() {
        bail!("push to a tag (oci://REGISTRY/NAME:TAG); the digest is the registry's answer");
    }
    let client = policy.client(reference.registry())?;
    let layer = ImageLayer::new(
        artifact.wasm.clone(),
        WASM_LAYER_MEDIA_TYPE.to_string(),
        None,
    );
    let config = artifact.config()?;
    let manifest = OciImageManifest::build(
        std::slice::from_ref(&layer),
        &config,
        Some(artifact.annotations.clone()),
    );
    client
        .push(
            reference.as_oci(),
            &[layer],
            config,
            &credentials.auth,
            Some(manifest),
        )
        .await
        .with_context(|| format!("pushing to {reference}"))?;
    let manifest_digest = client
        .fetch_manifest_digest(reference.as_oci(), &credentials.auth)
        .await
        .with_context(|| format!("reading back the digest of {reference}"))?;
    Ok(Pushed {
        reference: reference.clone(),
        manifest_digest,
        layer_digest: sha256_digest(&artifact.wasm),
    })
}

fn common_annotations(source: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ANNOTATION_SOURCE.into(), source.to_string()),
        (ANNOTATION_CREATED.into(), created()),
        (
            ANNOTATION_LICENSES.into(),
            env!("CARGO_PKG_LICENSE").to_string(),
        ),
    ])
}

/// Now, RFC 3339 in UTC (seconds).
fn created() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
