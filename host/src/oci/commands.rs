//! The registry side of `epp-host`'s commands: `push`, `push-wit`, `pull`,
//! and the fetch behind `run oci://…`.

use super::access::RegistryPolicy;
use super::cache::OciCache;
use super::credentials::{self, EnvSnapshot};
use super::pull::{self, Pulled};
use super::push::{self, Artifact};
use super::reference::{OciRef, SCHEME};
use super::wit_package;
use crate::cli::RegistryArgs;
use crate::manifest::Manifest;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// The default `org.opencontainers.image.source`.
const DEFAULT_SOURCE: &str = env!("CARGO_PKG_REPOSITORY");

/// `run oci://…`: the component's bytes, digests checked, from the registry
/// or the cache under `cache_dir` (default `$XDG_CACHE_HOME/epp-host`).
pub async fn fetch(
    reference: &OciRef,
    registry: &RegistryArgs,
    cache_dir: Option<&Path>,
    env: &EnvSnapshot,
) -> Result<Pulled> {
    let cache_dir = cache_dir
        .map(Path::to_path_buf)
        .or_else(crate::runtime::cache::default_dir)
        .context("no cache directory for pulled components: pass --cache-dir")?;
    let policy = RegistryPolicy::new(&registry.insecure_registries);
    let credentials = credentials::for_registry(reference.registry(), &|n| env.get(n))?;
    tracing::debug!(registry = reference.registry(), credentials = %credentials.source, "registry credentials");
    pull::pull(reference, &policy, &credentials, &OciCache::new(&cache_dir)).await
}

/// `epp-host push`.
pub async fn push(
    wasm_path: &Path,
    reference: &str,
    manifest: Option<PathBuf>,
    source: Option<String>,
    allow_unsigned: bool,
    registry: &RegistryArgs,
) -> Result<()> {
    let reference = OciRef::parse(reference)?;
    let wasm =
        std::fs::read(wasm_path).with_context(|| format!("reading {}", wasm_path.display()))?;
    let manifest_path = manifest.unwrap_or_else(|| {
        wasm_path
            .parent()
            .unwrap_or(Path::new("."))
            .join(crate::manifest::MANIFEST_FILE)
    });
    let manifest = Manifest::read(&manifest_path)?;
    let signed = !matches!(
        crate::signing::verify(&wasm, &crate::signing::TrustedKeys::from_files(&[])?),
        crate::signing::SignatureStatus::Unsigned
    );
    if !signed && !allow_unsigned {
        bail!(
            "{} carries no signature: hosts would refuse it. Sign it first (epp-host sign, \
             scripts/release)",
            wasm_path.display()
        );
    }
    let artifact =
        Artifact::component(wasm, &manifest, source.as_deref().unwrap_or(DEFAULT_SOURCE))?;
    publish(artifact, &reference, registry).await
}

/// `epp-host push-wit`: to `REGISTRY[/PREFIX]/NAMESPACE/NAME:VERSION`.
pub async fn push_wit(
    registry_prefix: &str,
    wit: Option<PathBuf>,
    source: Option<String>,
    registry: &RegistryArgs,
) -> Result<()> {
    let (name, wasm) = match wit {
        Some(dir) => wit_package::encode_dir(&dir)?,
        None => crate::contract::encoded_package()?,
    };
    let version = name
        .version
        .as_ref()
        .with_context(|| format!("WIT package {name} has no version"))?;
    let Some(rest) = registry_prefix.strip_prefix(SCHEME) else {
        bail!("`{registry_prefix}`: write oci://REGISTRY or oci://REGISTRY/PREFIX");
    };
    let rest = rest.trim_end_matches('/');
    let reference = OciRef::parse(&format!(
        "{SCHEME}{rest}/{}/{}:{version}",
        name.namespace, name.name
    ))?;
    let artifact = Artifact::wit_package(wasm, source.as_deref().unwrap_or(DEFAULT_SOURCE))?;
    publish(artifact, &reference, registry).await
}

async fn publish(artifact: Artifact, reference: &OciRef, registry: &RegistryArgs) -> Result<()> {
    let policy = RegistryPolicy::new(&registry.insecure_registries);
    let env = |name: &str| std::env::var(name).ok();
    let credentials = credentials::for_registry(reference.registry(), &env)?;
    let pushed = push::push(artifact, reference, &policy, &credentials).await?;
    eprintln!(
        "pushed {} (layer {}, manifest {})",
        pushed.reference, pushed.layer_digest, pushed.manifest_digest
    );
    println!("{}", reference.with_digest(&pushed.manifest_digest));
    Ok(())
}

/// `epp-host pull`.
pub async fn pull_to_file(
    reference: &str,
    output: &Path,
    cache_dir: Option<&Path>,
    registry: &RegistryArgs,
) -> Result<()> {
    let reference = OciRef::parse(reference)?;
    let env = EnvSnapshot::from_process();
    let pulled = fetch(&reference, registry, cache_dir, &env).await?;
    std::fs::write(output, &pulled.wasm)
        .with_context(|| format!("writing {}", output.display()))?;
    eprintln!(
        "{reference}: {} bytes, layer {}, {} -> {}",
        pulled.wasm.len(),
        pulled.layer_digest,
        pulled.origin,
        output.display()
    );
    println!("{}", reference.with_digest(&pulled.manifest_digest));
    Ok(())
}
