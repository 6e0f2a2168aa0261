//! What `pull` fetched, kept by digest so that a second run needs no registry:
//!
//! ```text
//! DIR/oci/blobs/sha256/HEX              manifests and components, content-addressed
//! DIR/oci/tags/REGISTRY/REPOSITORY/TAG  the manifest digest the tag last resolved to
//! ```
//!
//! DIR is `--cache-dir` (default `$XDG_CACHE_HOME/epp-host`). A blob is
//! hashed again whenever it is read, so a file changed on disk is a miss, not
//! a component run. A tag entry is only a hint for when the registry cannot
//! be reached; the signature is checked again on every run either way.

use super::reference::OciRef;
use super::sha256_digest;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The content-addressed store under one cache directory.
pub struct OciCache {
    root: PathBuf,
}

impl OciCache {
    /// The store under `dir` (made on first write, private to this user).
    pub fn new(dir: &Path) -> OciCache {
        OciCache {
            root: dir.join("oci"),
        }
    }

    /// The blob with `digest`, if cached and still intact.
    pub fn blob(&self, digest: &str) -> Option<Vec<u8>> {
        let bytes = std::fs::read(self.blob_path(digest)?).ok()?;
        if sha256_digest(&bytes) == digest {
            Some(bytes)
        } else {
            tracing::warn!(
                digest,
                "a cached blob no longer matches its digest; ignoring it"
            );
            None
        }
    }

    /// Stores `bytes` under their own digest.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<()> {
        let digest = sha256_digest(bytes);
        let path = self.blob_path(&digest).expect("a sha256 digest");
        write_atomically(&path, bytes)
    }

    /// The manifest digest `reference`'s tag last resolved to.
    pub fn tag(&self, reference: &OciRef) -> Option<String> {
        let text = std::fs::read_to_string(self.tag_path(reference)?).ok()?;
        let digest = text.trim();
        super::reference::is_sha256(digest).then(|| digest.to_string())
    }

    /// Records that `reference`'s tag resolved to `digest`.
    pub fn put_tag(&self, reference: &OciRef, digest: &str) -> Result<()> {
        match self.tag_path(reference) {
            Some(path) => write_atomically(&path, format!("{digest}\n").as_bytes()),
            None => Ok(()),
        }
    }

    fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        super::reference::is_sha256(digest).then(|| {
            self.root
                .join("blobs/sha256")
                .join(&digest["sha256:".len()..])
        })
    }

    /// Registry, repository and tag are restricted by the reference grammar
    /// (no `..`, no `/` in a tag), so they are safe as path components.
    fn tag_path(&self, reference: &OciRef) -> Option<PathBuf> {
        let tag = reference.tag()?;
        Some(
            self.root
                .join("tags")
                .join(reference.registry())
                .join(reference.repository())
                .join(tag),
        )
    }
}

/// Writes through a temporary file and a rename, so a reader never sees half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = path.parent().context("a cache path has a parent")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("blob"),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_are_checked_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let cache = OciCache::new(dir.path());
        cache.put_blob(b"component").unwrap();
        let digest = sha256_digest(b"component");
        assert_eq!(cache.blob(&digest).as_deref(), Some(&b"component"[..]));
        let path = cache.blob_path(&digest).unwrap();
        std::fs::write(&path, b"c0mponent").unwrap();
        assert_eq!(cache.blob(&digest), None, "a changed file is a miss");
        assert_eq!(cache.blob("sha256:../../etc/passwd"), None);
    }

    #[test]
    fn tags_remember_their_digest() {
        let dir = tempfile::tempdir().unwrap();
        let cache = OciCache::new(dir.path());
        let tagged = OciRef::parse("oci://127.0.0.1:5000/epp/x:1.0").unwrap();
        assert_eq!(cache.tag(&tagged), None);
        let digest = sha256_digest(b"manifest");
        cache.put_tag(&tagged, &digest).unwrap();
        assert_eq!(cache.tag(&tagged), Some(digest));
    }
}
