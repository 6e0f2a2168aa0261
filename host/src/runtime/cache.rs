//! Precompiled components, cached so a second start skips compilation.
//!
//! Only files this host wrote itself are loaded: the cache directory must be
//! owned by the current user and not writable by anyone else (else the cache is
//! ignored with a warning), files are written atomically, and the file name is
//! derived from the sha256 of the already-verified `.wasm` and the engine's
//! compatibility hash. The `.wasm` is what is signed; the `.cwasm` is native
//! code and is never accepted from anywhere else. Beside it, under the same
//! name, the provider's static answers (`runtime::answers`).

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use wasmtime::Engine;
use wasmtime::component::Component;

/// Whether the component came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    Hit,
    Miss,
    Disabled,
}

/// The default cache directory.
pub fn default_dir() -> Option<PathBuf> {
    dirs::cache_dir().map(|d| d.join("epp-host"))
}

/// A component's bytes and, once asked, their sha256 (hex): the name of
/// everything the compile cache keeps for them (the `.cwasm`, the provider's
/// answers, a trusted signature's verdict), hashed once per start.
pub struct WasmBytes {
    bytes: Vec<u8>,
    sha256: OnceLock<String>,
}

impl WasmBytes {
    pub fn new(bytes: Vec<u8>) -> WasmBytes {
        WasmBytes {
            bytes,
            sha256: OnceLock::new(),
        }
    }

    /// The sha256 of the bytes, in hex.
    pub fn sha256(&self) -> &str {
        self.sha256
            .get_or_init(|| hex::encode(Sha256::digest(&self.bytes)))
    }
}

impl std::ops::Deref for WasmBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

fn cache_key(engine: &Engine, wasm: &WasmBytes) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    env!("CARGO_PKG_VERSION").hash(&mut hasher);
    format!("{}-{:016x}.cwasm", wasm.sha256(), hasher.finish())
}

fn private_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating cache directory {}", dir.display()))?;
    trusted(dir)
}

/// The path is ours alone: owned by us, not group- or world-writable.
fn trusted(path: &Path) -> Result<()> {
    let meta =
        std::fs::symlink_metadata(path).with_context(|| format!("checking {}", path.display()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    anyhow::ensure!(
        meta.uid() == uid
            && meta.permissions().mode() & 0o022 == 0
            && !meta.file_type().is_symlink(),
        "{} is not private to this user (owner {}, mode {:o})",
        path.display(),
        meta.uid(),
        meta.permissions().mode() & 0o7777
    );
    Ok(())
}

/// A compiled component and where it came from.
pub struct Compiled {
    pub component: Component,
    pub outcome: CacheOutcome,
    /// Its `.cwasm` in the cache, when the cache is in use.
    path: Option<PathBuf>,
}

impl Compiled {
    /// The provider's static answers stored beside this `.cwasm`
    /// ([`store_answers`](Self::store_answers)), on a cache hit only: a
    /// component compiled now is asked again.
    pub fn stored_answers(&self) -> Option<Vec<u8>> {
        let path = self
            .answers_path()
            .filter(|_| self.outcome == CacheOutcome::Hit)?;
        read_private(&path)
    }

    /// Stores the provider's static answers beside the `.cwasm`; a failure
    /// only costs the next start the question.
    pub fn store_answers(&self, bytes: &[u8]) {
        if let Some(path) = self.answers_path()
            && let Err(e) = store(&path, bytes)
        {
            tracing::warn!(path = %path.display(), error = format!("{e:#}"), "could not write the compile cache");
        }
    }

    fn answers_path(&self) -> Option<PathBuf> {
        self.path.as_ref().map(|p| p.with_extension("answers.json"))
    }
}

/// Compiles `wasm`, or loads it from `dir` when this host compiled it before.
pub fn load(engine: &Engine, wasm: &WasmBytes, dir: Option<&Path>) -> Result<Compiled> {
    let uncached = |outcome| {
        Ok(Compiled {
            component: Component::new(engine, &**wasm)?,
            outcome,
            path: None,
        })
    };
    let Some(dir) = dir else {
        return uncached(CacheOutcome::Disabled);
    };
    if let Err(e) = private_dir(dir) {
        tracing::warn!(dir = %dir.display(), error = format!("{e:#}"), "not using the compile cache");
        return uncached(CacheOutcome::Disabled);
    }
    let path = dir.join(cache_key(engine, wasm));
    if path.exists() && trusted(&path).is_ok() {
        // SAFETY: the file is in a private directory, owned by us and written by
        // `store` below for exactly this .wasm (by hash) and this engine.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => {
                return Ok(Compiled {
                    component,
                    outcome: CacheOutcome::Hit,
                    path: Some(path),
                });
            }
            Err(e) => tracing::warn!(
                path = %path.display(),
                error = format!("{e:#}"),
                "recompiling: the cached component is unusable"
            ),
        }
    }
    let bytes = engine.precompile_component(wasm)?;
    if let Err(e) = store(&path, &bytes) {
        tracing::warn!(path = %path.display(), error = format!("{e:#}"), "could not write the compile cache");
    }
    // SAFETY: these bytes were produced by this engine a moment ago.
    let component = unsafe { Component::deserialize(engine, &bytes)? };
    Ok(Compiled {
        component,
        outcome: CacheOutcome::Miss,
        path: Some(path),
    })
}

/// A small record this host kept in `dir` under `name` ([`remember`]), when
/// the directory and the file are private to this user, as for a `.cwasm`.
pub fn recall(dir: &Path, name: &str) -> Option<Vec<u8>> {
    trusted(dir).ok()?;
    read_private(&dir.join(name))
}

/// A file of the cache, if it is ours alone ([`trusted`]).
fn read_private(path: &Path) -> Option<Vec<u8>> {
    trusted(path).ok()?;
    std::fs::read(path).ok()
}

/// Keeps `bytes` in `dir` under `name` for [`recall`]; a failure only costs
/// the next start the work it saves (and the compile cache says so itself).
pub fn remember(dir: &Path, name: &str, bytes: &[u8]) {
    let path = dir.join(name);
    if let Err(e) = private_dir(dir).and_then(|()| store(&path, bytes)) {
        tracing::debug!(path = %path.display(), error = format!("{e:#}"), "could not write to the compile cache");
    }
}

fn store(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
