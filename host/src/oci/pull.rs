//! Fetching a component for `epp-host run oci://…`: manifest, then layer,
//! every digest checked, everything kept in the cache. The signature is not
//! this module's business: the caller verifies the returned bytes against its
//! trusted keys before compiling them, whether they came from the registry or
//! from the cache.

use super::access::RegistryPolicy;
use super::cache::OciCache;
use super::credentials::Credentials;
use super::reference::OciRef;
use super::{MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, sha256_digest};
use anyhow::{Context, Result, anyhow, bail};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use std::fmt;

/// The largest layer accepted: a provider is about 1 MiB; this leaves room
/// and still keeps a hostile registry from filling memory.
pub const MAX_LAYER_BYTES: i64 = 64 << 20;
/// The largest manifest accepted.
const MAX_MANIFEST_BYTES: usize = 1 << 20;

/// A fetched artifact and where it came from.
pub struct Pulled {
    /// The component (or WIT package) bytes, their digest checked.
    pub wasm: Vec<u8>,
    /// The reference as given.
    pub reference: OciRef,
    /// The manifest digest: the artifact's identity (`@sha256:…` pins it).
    pub manifest_digest: String,
    /// The layer digest: the sha256 of `wasm`.
    pub layer_digest: String,
    /// The manifest's annotations (version, source, provider id, …).
    pub manifest: OciImageManifest,
    /// Registry or cache, and why.
    pub origin: Origin,
}

/// Where `pull` found the artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Fetched from the registry just now.
    Registry,
    /// A digest reference found in the cache: no registry was asked.
    Cache,
    /// The registry could not be reached; the tag's last known digest was
    /// found in the cache. Carries why the registry failed.
    CacheRegistryDown(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Registry => f.write_str("pulled from the registry"),
            Origin::Cache => f.write_str("from the cache (pinned by digest)"),
            Origin::CacheRegistryDown(why) => write!(
                f,
                "from the cache: the registry is unreachable ({why}), so the tag's last known digest"
            ),
        }
    }
}

/// What a failed registry request means for the caller.
enum Failure {
    /// Connect or timeout: the cache may stand in for a tag.
    Unreachable(String),
    /// The registry answered: the reference does not exist, access was refused, ….
    Answered(anyhow::Error),
}

/// Fetches `reference` under `policy`, using and filling `cache`.
pub async fn pull(
    reference: &OciRef,
    policy: &RegistryPolicy,
    credentials: &Credentials,
    cache: &OciCache,
) -> Result<Pulled> {
    // A digest names exactly one artifact: the cache answers without a registry.
    if let Some(digest) = reference.digest()
        && let Some(found) = from_cache(reference, digest, cache, Origin::Cache)?
    {
        return Ok(found);
    }
    let client = policy.client(reference.registry())?;
    match fetch_manifest(&client, reference, credentials).await {
        Ok((bytes, digest)) => {
            let manifest = parse_manifest(reference, &digest, &bytes)?;
            let layer = wasm_layer(reference, &digest, &manifest)?;
            let wasm = match cache.blob(&layer.digest) {
                Some(wasm) => wasm,
                None => fetch_layer(&client, reference, layer).await?,
            };
            cache.put_blob(&bytes)?;
            cache.put_blob(&wasm)?;
            cache.put_tag(reference, &digest)?;
            Ok(Pulled {
                wasm,
                reference: reference.clone(),
                layer_digest: layer.digest.clone(),
                manifest_digest: digest,
                manifest,
                origin: Origin::Registry,
            })
        }
        Err(Failure::Answered(e)) => Err(e),
        Err(Failure::Unreachable(why)) => {
            let cached = match cache.tag(reference) {
                Some(digest) => from_cache(
                    reference,
                    &digest,
                    cache,
                    Origin::CacheRegistryDown(why.clone()),
                )?,
                None => None,
            };
            cached.ok_or_else(|| {
                anyhow!(
                    "registry {} is unreachable ({why}) and {reference} is not in the cache; \
                     nothing was run",
                    reference.registry()
                )
            })
        }
    }
}

/// The artifact whose manifest has `digest`, from the cache alone.
fn from_cache(
    reference: &OciRef,
    digest: &str,
    cache: &OciCache,
    origin: Origin,
) -> Result<Option<Pulled>> {
    let Some(bytes) = cache.blob(digest) else {
        return Ok(None);
    };
    let manifest = parse_manifest(reference, digest, &bytes)?;
    let layer = wasm_layer(reference, digest, &manifest)?;
    Ok(cache.blob(&layer.digest).map(|wasm| Pulled {
        wasm,
        reference: reference.clone(),
        manifest_digest: digest.to_string(),
        layer_digest: layer.digest.clone(),
        manifest: manifest.clone(),
        origin,
    }))
}

/// The manifest's bytes and digest, the digest checked against the reference's.
async fn fetch_manifest(
    client: &oci_client::Client,
    reference: &OciRef,
    credentials: &Credentials,
) -> std::result::Result<(Vec<u8>, String), Failure> {
    let (bytes, _) = client
        .pull_manifest_raw(
            reference.as_oci(),
            &credentials.auth,
            &[MANIFEST_MEDIA_TYPE],
        )
        .await
        .map_err(|e| classify(reference, "its manifest", e))?;
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(Failure::Answered(anyhow!(
            "{reference}: the registry sent a {}-byte manifest; refusing it",
            bytes.len()
        )));
    }
    // Computed here, not taken from the registry's Docker-Content-Digest header.
    let digest = sha256_digest(&bytes);
    if let Some(wanted) = reference.digest()
        && wanted != digest
    {
        return Err(Failure::Answered(anyhow!(
            "{reference}: the registry answered with a manifest whose digest is {digest}, not \
             the {wanted} asked for; nothing was run"
        )));
    }
    Ok((bytes.to_vec(), digest))
}

/// The manifest, which must describe a Wasm artifact.
fn parse_manifest(reference: &OciRef, digest: &str, bytes: &[u8]) -> Result<OciImageManifest> {
    let manifest: OciImageManifest = serde_json::from_slice(bytes)
        .with_context(|| format!("{reference} ({digest}): not an OCI image manifest"))?;
    if manifest.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        bail!(
            "{reference} ({digest}) is not a Wasm artifact: its config is {}, not {WASM_CONFIG_MEDIA_TYPE}",
            manifest.config.media_type
        );
    }
    Ok(manifest)
}

/// The manifest's one `application/wasm` layer.
fn wasm_layer<'m>(
    reference: &OciRef,
    digest: &str,
    manifest: &'m OciImageManifest,
) -> Result<&'m OciDescriptor> {
    let [layer] = manifest.layers.as_slice() else {
        bail!(
            "{reference} ({digest}) has {} layers; a Wasm artifact has exactly one",
            manifest.layers.len()
        );
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        bail!(
            "{reference} ({digest}): its layer is {}, not {WASM_LAYER_MEDIA_TYPE}",
            layer.media_type
        );
    }
    if !super::reference::is_sha256(&layer.digest) {
        bail!(
            "{reference} ({digest}): layer digest {} is not sha256",
            layer.digest
        );
    }
    if !(0..=MAX_LAYER_BYTES).contains(&layer.size) {
        bail!(
            "{reference} ({digest}): the layer is {} bytes, over the {MAX_LAYER_BYTES}-byte limit",
            layer.size
        );
    }
    Ok(layer)
}

/// The layer's bytes, their digest and size checked.
async fn fetch_layer(
    client: &oci_client::Client,
    reference: &OciRef,
    layer: &OciDescriptor,
) -> Result<Vec<u8>> {
    let mut wasm = Vec::with_capacity(layer.size as usize);
    client
        .pull_blob(reference.as_oci(), layer, &mut wasm)
        .await
        .map_err(
            |e| match classify(reference, &format!("layer {}", layer.digest), e) {
                Failure::Unreachable(why) => anyhow!(
                    "registry {} became unreachable while sending layer {} of {reference} ({why}); \
                 nothing was run",
                    reference.registry(),
                    layer.digest
                ),
                Failure::Answered(e) => e,
            },
        )?;
    let actual = sha256_digest(&wasm);
    if actual != layer.digest || wasm.len() as i64 != layer.size {
        bail!(
            "{reference}: the registry sent {} bytes with digest {actual} for layer {} ({} bytes): \
             tampered with or corrupt; nothing was run",
            wasm.len(),
            layer.digest,
            layer.size
        );
    }
    Ok(wasm)
}

/// Sorts a registry error into unreachable (the cache may help) or answered.
fn classify(reference: &OciRef, what: &str, e: OciDistributionError) -> Failure {
    let registry = reference.registry();
    match &e {
        OciDistributionError::RequestError(re) if re.is_connect() || re.is_timeout() => {
            Failure::Unreachable(transport_cause(re))
        }
        OciDistributionError::ImageManifestNotFoundError(_) => {
            Failure::Answered(not_found(reference))
        }
        OciDistributionError::RegistryError { envelope, .. }
            if envelope.errors.iter().any(|err| {
                matches!(
                    err.code,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                )
            }) =>
        {
            Failure::Answered(not_found(reference))
        }
        OciDistributionError::ServerError { code: 404, .. } => {
            Failure::Answered(not_found(reference))
        }
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => Failure::Answered(anyhow!(
            "registry {registry} refused access to {reference} ({e}); set EPP_REGISTRY_USERNAME / \
             EPP_REGISTRY_PASSWORD or `docker login {registry}`; nothing was run"
        )),
        OciDistributionError::DigestError(_) => Failure::Answered(anyhow!(
            "{reference}: {what} does not match its digest ({e}): tampered with or corrupt; \
             nothing was run"
        )),
        _ => Failure::Answered(anyhow!(
            "{reference}: fetching {what} failed: {e}; nothing was run"
        )),
    }
}

fn not_found(reference: &OciRef) -> anyhow::Error {
    match reference.digest() {
        Some(digest) => anyhow!(
            "{reference}: registry {} has no manifest {digest} in {}; nothing was run",
            reference.registry(),
            reference.repository()
        ),
        None => anyhow!(
            "{reference}: registry {} has no tag `{}` in {}; nothing was run",
            reference.registry(),
            reference.tag().unwrap_or("latest"),
            reference.repository()
        ),
    }
}

/// The innermost cause of a transport error (e.g. `Connection refused`),
/// which says more than reqwest's outer "error sending request".
fn transport_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}
