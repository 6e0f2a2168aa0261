//! Component signatures in the wasmsign2 format (Ed25519, embedded in the
//! component's first custom section, several signatures allowed).
//!
//! The host verifies before it compiles anything: an unsigned component, one
//! modified after signing, or one signed only by keys the operator does not
//! trust is refused unless `--allow-unsigned` is given.

use crate::cli::TrustArgs;
use crate::runtime::cache::WasmBytes;
use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::io::Cursor;
use std::path::{Path, PathBuf};
use wasmsign2::{KeyPair, Module, PublicKey, PublicKeySet, SecretKey, Section, WSError};

/// The keys whose signatures are accepted.
pub struct TrustedKeys {
    set: PublicKeySet,
    /// Where each key came from, for messages.
    pub sources: Vec<PathBuf>,
}

impl TrustedKeys {
    /// Reads `--trusted-key` files and the trust file.
    pub fn load(args: &TrustArgs) -> Result<TrustedKeys> {
        let mut paths = args.trusted_keys.clone();
        let trust_file = args.trust_file.clone().or_else(|| {
            let default = dirs::config_dir()?.join("epp-host").join("trusted-keys");
            default.exists().then_some(default)
        });
        if let Some(file) = trust_file {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading trust file {}", file.display()))?;
            let base = file.parent().unwrap_or(Path::new("."));
            for line in text.lines().map(str::trim) {
                if !line.is_empty() && !line.starts_with('#') {
                    paths.push(base.join(line));
                }
            }
        }
        Self::from_files(&paths)
    }

    /// Exactly these public key files, without the default trust file (for
    /// checks that must not depend on the operator's configuration).
    pub fn from_files(paths: &[PathBuf]) -> Result<TrustedKeys> {
        let mut set = PublicKeySet::empty();
        for path in paths {
            let key = read_public_key(path)?;
            set.insert(key)
                .with_context(|| format!("adding trusted key {}", path.display()))?;
        }
        Ok(TrustedKeys {
            set,
            sources: paths.to_vec(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// sha256 (hex) of the set, in any order, and of what judges with it
    /// (this host's version, and wasmsign2's, pinned in host/Cargo.toml: a
    /// new one must change the string, so that no verdict outlives it): a
    /// remembered verdict's key.
    fn digest(&self) -> String {
        let mut keys: Vec<Vec<u8>> = self.set.items().iter().map(|k| k.to_bytes()).collect();
        keys.sort();
        let mut hash = Sha256::new();
        hash.update(concat!(
            "epp-host ",
            env!("CARGO_PKG_VERSION"),
            " wasmsign2 0.2.8\n"
        ));
        for key in keys {
            hash.update((key.len() as u64).to_le_bytes());
            hash.update(key);
        }
        hex::encode(hash.finalize())
    }
}

/// A public key file in any form wasmsign2 reads (raw, DER, PEM).
pub fn read_public_key(path: &Path) -> Result<PublicKey> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading public key {}", path.display()))?;
    PublicKey::from_any(&bytes)
        .map(PublicKey::attach_default_key_id)
        .map_err(|e| anyhow::anyhow!("{} is not an Ed25519 public key: {e}", path.display()))
}

/// What the signatures of a component say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureStatus {
    /// Signed by at least one trusted key; their key ids (hex).
    Trusted(Vec<String>),
    /// No signature section.
    Unsigned,
    /// A signature claims a trusted key's id but does not verify: the component
    /// was changed after signing.
    Tampered(Vec<String>),
    /// Signed, but by none of the trusted keys; the signers' key ids (hex).
    Untrusted(Vec<String>),
    /// The signature section cannot be read.
    Malformed(String),
}

impl SignatureStatus {
    /// One line for people.
    pub fn describe(&self) -> String {
        match self {
            SignatureStatus::Trusted(ids) => format!("signed by trusted key {}", ids.join(", ")),
            SignatureStatus::Unsigned => "not signed".to_string(),
            SignatureStatus::Tampered(ids) => format!(
                "signature by trusted key {} does not match: the component was modified after signing",
                ids.join(", ")
            ),
            SignatureStatus::Untrusted(ids) if ids.is_empty() => {
                "signed, but by no trusted key (pass --trusted-key)".to_string()
            }
            SignatureStatus::Untrusted(ids) => format!(
                "signed by key {} which is not trusted (pass its public key with --trusted-key)",
                ids.join(", ")
            ),
            SignatureStatus::Malformed(e) => format!("signature section is unreadable: {e}"),
        }
    }
}

fn key_ids_in_signature(wasm: &[u8]) -> Result<Option<Vec<Vec<u8>>>, WSError> {
    let module = Module::deserialize(&mut Cursor::new(wasm))?;
    let Some(Section::Custom(first)) = module.sections.first() else {
        return Ok(None);
    };
    if !first.is_signature_header() {
        return Ok(None);
    }
    let data = first.signature_data()?;
    Ok(Some(
        data.signed_hashes_set
            .iter()
            .flat_map(|h| h.signatures.iter())
            .filter_map(|s| s.key_id.clone())
            .collect(),
    ))
}

/// Verifies `wasm` against `keys`.
pub fn verify(wasm: &[u8], keys: &TrustedKeys) -> SignatureStatus {
    let signer_ids = match key_ids_in_signature(wasm) {
        Ok(Some(ids)) => ids,
        Ok(None) => return SignatureStatus::Unsigned,
        Err(e) => return SignatureStatus::Malformed(e.to_string()),
    };
    if keys.is_empty() {
        return SignatureStatus::Untrusted(signer_ids.iter().map(hex::encode).collect());
    }
    match keys.set.verify(&mut Cursor::new(wasm), None) {
        Ok(matched) if !matched.is_empty() => SignatureStatus::Trusted(
            matched
                .iter()
                .filter_map(|k| k.key_id().map(hex::encode))
                .collect(),
        ),
        Ok(_) | Err(WSError::VerificationFailed) => {
            let trusted_ids: Vec<&Vec<u8>> =
                keys.set.items().iter().filter_map(|k| k.key_id()).collect();
            let claimed: Vec<String> = signer_ids
                .iter()
                .filter(|id| trusted_ids.contains(id))
                .map(hex::encode)
                .collect();
            if claimed.is_empty() {
                SignatureStatus::Untrusted(signer_ids.iter().map(hex::encode).collect())
            } else {
                SignatureStatus::Tampered(claimed)
            }
        }
        Err(WSError::NoSignatures) => SignatureStatus::Unsigned,
        Err(e) => SignatureStatus::Malformed(e.to_string()),
    }
}

/// [`verify`], with a trusted verdict remembered in `memo` (the compile
/// cache's directory). Verifying is a pure function of the component's bytes
/// and the trusted keys, and wasmsign2 parses the whole component twice and
/// hashes it with a portable SHA-256: about a third of a warm start's CPU
/// (bench/profiling.md). The verdict is kept under the sha256 of both (and of
/// this host's version) in the directory that already holds the component's
/// native code, which is private to this user and trusted as such: anyone who
/// could write a verdict there could replace that code. Only `Trusted` is
/// kept; anything else is verified again every time, so its message is fresh.
pub fn verify_remembered(
    wasm: &WasmBytes,
    keys: &TrustedKeys,
    memo: Option<&Path>,
) -> SignatureStatus {
    let Some(dir) = memo.filter(|_| !keys.is_empty()) else {
        return verify(wasm, keys);
    };
    let name = format!("{}-{}.trusted", wasm.sha256(), &keys.digest()[..16]);
    if let Some(ids) = crate::runtime::cache::recall(dir, &name).and_then(|b| remembered_ids(&b)) {
        return SignatureStatus::Trusted(ids);
    }
    let status = verify(wasm, keys);
    if let SignatureStatus::Trusted(ids) = &status {
        crate::runtime::cache::remember(dir, &name, ids.join("\n").as_bytes());
    }
    status
}

/// The key ids of a remembered verdict: one or more lines of hex, or none.
fn remembered_ids(bytes: &[u8]) -> Option<Vec<String>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let ids: Vec<String> = text.lines().map(str::to_string).collect();
    let hex_id = |id: &String| !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit());
    (!ids.is_empty() && ids.iter().all(hex_id)).then_some(ids)
}

/// Refuses to go on unless the component is signed by a trusted key, or the
/// operator said `--allow-unsigned` (then warns on stderr).
/// A trusted verdict is remembered in `memo` ([`verify_remembered`]).
pub fn enforce(
    path: &Path,
    wasm: &WasmBytes,
    trust: &TrustArgs,
    allow_unsigned: bool,
    memo: Option<&Path>,
) -> Result<SignatureStatus> {
    let keys = TrustedKeys::load(trust)?;
    let status = verify_remembered(wasm, &keys, memo);
    if let SignatureStatus::Trusted(_) = status {
        return Ok(status);
    }
    if allow_unsigned {
        tracing::warn!(
            "WARNING: running {} although it is {} (--allow-unsigned). \
             Do not use this outside development.",
            path.display(),
            status.describe()
        );
        return Ok(status);
    }
    let hint = if keys.is_empty() {
        " No trusted keys are configured: pass --trusted-key <public key> or --trust-file."
            .to_string()
    } else {
        let files: Vec<String> = keys
            .sources
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        format!(" Trusted keys: {}.", files.join(", "))
    };
    bail!(
        "refusing to run {}: it is {}.{hint} (--allow-unsigned skips this check, for development only)",
        path.display(),
        status.describe()
    )
}

/// Writes a new key pair; the secret key file gets mode 0600.
pub fn keygen(secret_key: &Path, public_key: &Path) -> Result<String> {
    let kp = KeyPair::generate();
    write_private(secret_key, &kp.sk.to_bytes())?;
    std::fs::write(public_key, kp.pk.to_bytes())
        .with_context(|| format!("writing {}", public_key.display()))?;
    let id = kp.pk.attach_default_key_id();
    Ok(id.key_id().map(hex::encode).unwrap_or_default())
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {} (it must not exist yet)", path.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// Adds a signature by `secret_key` to `input`, keeping existing signatures.
pub fn sign(
    input: &Path,
    output: &Path,
    secret_key: &Path,
    public_key: Option<&Path>,
) -> Result<String> {
    let sk_bytes =
        std::fs::read(secret_key).with_context(|| format!("reading {}", secret_key.display()))?;
    let sk = SecretKey::from_any(&sk_bytes).map_err(|e| {
        anyhow::anyhow!("{} is not an Ed25519 secret key: {e}", secret_key.display())
    })?;
    let pk = match public_key {
        Some(path) => read_public_key(path)?,
        None => PublicKey {
            pk: sk.sk.public_key(),
            key_id: None,
        }
        .attach_default_key_id(),
    };
    if pk.pk != sk.sk.public_key() {
        bail!(
            "{} does not belong to secret key {}",
            public_key
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            secret_key.display()
        );
    }
    let wasm = std::fs::read(input).with_context(|| format!("reading {}", input.display()))?;
    let module = Module::deserialize(&mut Cursor::new(&wasm))
        .map_err(|e| anyhow::anyhow!("{} is not a WebAssembly file: {e}", input.display()))?;
    let (signed, _) = sk
        .sign_multi(module, pk.key_id(), false, false)
        .map_err(|e| anyhow::anyhow!("signing {}: {e}", input.display()))?;
    let mut out = Vec::with_capacity(wasm.len() + 256);
    signed
        .serialize(&mut out)
        .map_err(|e| anyhow::anyhow!("serialising signed component: {e}"))?;
    let tmp = output.with_extension("wasm.tmp");
    std::fs::write(&tmp, &out).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, output).with_context(|| format!("writing {}", output.display()))?;
    Ok(pk.key_id().map(hex::encode).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest valid component: the 8-byte header.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    fn keys(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let sk = dir.join(format!("{name}.sec"));
        let pk = dir.join(format!("{name}.pub"));
        keygen(&sk, &pk).unwrap();
        (sk, pk)
    }

    fn trust(pks: &[&Path]) -> TrustedKeys {
        TrustedKeys::load(&TrustArgs {
            trusted_keys: pks.iter().map(|p| p.to_path_buf()).collect(),
            trust_file: Some(PathBuf::from("/dev/null")),
        })
        .unwrap()
    }

    #[test]
    fn sign_verify_tamper_and_untrusted() {
        let dir = tempfile::tempdir().unwrap();
        let (sk, pk) = keys(dir.path(), "release");
        let (_, other_pk) = keys(dir.path(), "other");
        let input = dir.path().join("c.wasm");
        std::fs::write(&input, EMPTY_COMPONENT).unwrap();
        let signed = dir.path().join("signed.wasm");

        assert_eq!(
            verify(EMPTY_COMPONENT, &trust(&[&pk])),
            SignatureStatus::Unsigned
        );
        sign(&input, &signed, &sk, Some(&pk)).unwrap();
        let bytes = std::fs::read(&signed).unwrap();
        assert!(
            matches!(verify(&bytes, &trust(&[&pk])), SignatureStatus::Trusted(ids) if ids.len() == 1)
        );
        assert!(
            matches!(verify(&bytes, &trust(&[&other_pk])), SignatureStatus::Untrusted(ids) if ids.len() == 1)
        );

        // Append a custom section after signing: the signature no longer covers the file.
        let mut tampered = bytes.clone();
        tampered.extend_from_slice(&[0, 4, 1, b'x', 1, 2]);
        assert!(matches!(
            verify(&tampered, &trust(&[&pk])),
            SignatureStatus::Tampered(_)
        ));
    }

    #[test]
    fn two_signatures_for_key_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let (sk1, pk1) = keys(dir.path(), "current");
        let (sk2, pk2) = keys(dir.path(), "next");
        let input = dir.path().join("c.wasm");
        std::fs::write(&input, EMPTY_COMPONENT).unwrap();
        let once = dir.path().join("once.wasm");
        let twice = dir.path().join("twice.wasm");
        sign(&input, &once, &sk1, Some(&pk1)).unwrap();
        sign(&once, &twice, &sk2, Some(&pk2)).unwrap();
        let bytes = std::fs::read(&twice).unwrap();
        for pk in [&pk1, &pk2] {
            assert!(matches!(
                verify(&bytes, &trust(&[pk])),
                SignatureStatus::Trusted(_)
            ));
        }
    }

    #[test]
    fn mismatched_key_pair_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (sk, _) = keys(dir.path(), "a");
        let (_, pk) = keys(dir.path(), "b");
        let input = dir.path().join("c.wasm");
        std::fs::write(&input, EMPTY_COMPONENT).unwrap();
        let err = sign(&input, &dir.path().join("o.wasm"), &sk, Some(&pk)).unwrap_err();
        assert!(err.to_string().contains("does not belong"), "{err}");
    }
}
