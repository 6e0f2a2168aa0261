//! `oci://REGISTRY/REPOSITORY:TAG` and `oci://REGISTRY/REPOSITORY@sha256:…`:
//! how a component in a registry is named on `epp-host`'s command line.

use anyhow::{Context, Result, bail};
use oci_client::Reference;
use std::fmt;
use std::path::Path;

/// The scheme that marks a registry reference where a file path may stand.
pub const SCHEME: &str = "oci://";

/// A component (or WIT package) in a registry. The registry is always named:
/// there is no default registry that a short name could silently resolve to.
#[derive(Debug, Clone)]
pub struct OciRef {
    reference: Reference,
}

impl OciRef {
    /// Parses `oci://REGISTRY/REPOSITORY(:TAG|@sha256:HEX)`.
    pub fn parse(text: &str) -> Result<OciRef> {
        let Some(rest) = text.strip_prefix(SCHEME) else {
            bail!("`{text}` is not a registry reference (oci://REGISTRY/NAME:TAG or @sha256:…)");
        };
        let (registry, path) = rest.split_once('/').with_context(|| {
            format!("`{text}` names no repository: write oci://REGISTRY/NAME:TAG")
        })?;
        if registry.is_empty() || path.is_empty() {
            bail!("`{text}` needs both a registry and a repository: oci://REGISTRY/NAME:TAG");
        }
        let reference: Reference = rest
            .parse()
            .with_context(|| format!("`{text}` is not a valid OCI reference"))?;
        if reference.registry() != registry {
            bail!(
                "`{text}`: the registry must be written out (got `{}`)",
                reference.registry()
            );
        }
        if let Some(digest) = reference.digest()
            && !is_sha256(digest)
        {
            bail!("`{text}`: only sha256 digests are accepted (sha256:<64 hex digits>)");
        }
        Ok(OciRef { reference })
    }

    /// The reference a command-line argument names, when it is one
    /// (`oci://…`); a plain path is `None`.
    pub fn from_arg(arg: &Path) -> Option<Result<OciRef>> {
        let text = arg.to_str()?;
        text.starts_with(SCHEME).then(|| OciRef::parse(text))
    }

    /// The same repository at `tag` (how `push-wit` names a package version).
    pub fn with_tag(&self, tag: &str) -> OciRef {
        OciRef {
            reference: Reference::with_tag(
                self.registry().to_string(),
                self.repository().to_string(),
                tag.to_string(),
            ),
        }
    }

    /// The same repository at `digest` (what a tag resolved to).
    pub fn with_digest(&self, digest: &str) -> OciRef {
        OciRef {
            reference: Reference::with_digest(
                self.registry().to_string(),
                self.repository().to_string(),
                digest.to_string(),
            ),
        }
    }

    /// `host[:port]`.
    pub fn registry(&self) -> &str {
        self.reference.registry()
    }

    /// `namespace/name`.
    pub fn repository(&self) -> &str {
        self.reference.repository()
    }

    /// The tag, when the reference has one and no digest.
    pub fn tag(&self) -> Option<&str> {
        match self.reference.digest() {
            Some(_) => None,
            None => Some(self.reference.tag().unwrap_or("latest")),
        }
    }

    /// The pinned manifest digest, `sha256:…`.
    pub fn digest(&self) -> Option<&str> {
        self.reference.digest()
    }

    /// The reference as oci-client takes it.
    pub fn as_oci(&self) -> &Reference {
        &self.reference
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry(), self.repository())?;
        match (self.digest(), self.tag()) {
            (Some(digest), _) => write!(f, "@{digest}"),
            (None, Some(tag)) => write!(f, ":{tag}"),
            (None, None) => Ok(()),
        }
    }
}

/// Whether `digest` is `sha256:` and 64 lowercase hex digits.
pub fn is_sha256(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tags_and_digests() {
        let r = OciRef::parse("oci://127.0.0.1:5000/epp/opensandbox:0.1.0").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "epp/opensandbox");
        assert_eq!(r.tag(), Some("0.1.0"));
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/epp/opensandbox:0.1.0");
        let pinned = format!("oci://ghcr.io/abx/opensandbox@sha256:{}", "ab".repeat(32));
        let r = OciRef::parse(&pinned).unwrap();
        assert_eq!(r.tag(), None);
        assert_eq!(r.to_string(), pinned);
        assert_eq!(
            OciRef::parse("oci://ghcr.io/abx/opensandbox")
                .unwrap()
                .tag(),
            Some("latest")
        );
    }

    #[test]
    fn refuses_what_it_cannot_pin_down() {
        for bad in [
            "ghcr.io/abx/x:1",
            "oci://opensandbox:1",
            "oci:///x:1",
            "oci://ghcr.io/abx/x@sha256:abc",
            "oci://ghcr.io/abx/x@md5:00112233445566778899aabbccddeeff",
            "oci://ghcr.io/Abx/x:1",
        ] {
            assert!(OciRef::parse(bad).is_err(), "{bad}");
        }
        assert!(OciRef::from_arg(Path::new("dist/opensandbox.wasm")).is_none());
    }
}
