//! Installed providers: the data directory `epp-host install` puts a signed
//! provider into, and the choice of the component a subcommand loads when it
//! is given no PROVIDER (`run`, `call`, `inspect`, and any subcommand taking
//! `HostArgs`, through `for_host`).
//!
//! Layout: `DATA/providers/NAME/` holds `provider.json` (the release
//! manifest; NAME is its `id`), the component it names (`file`) and the public
//! keys installed with it (`*.pub`). DATA is `--data-dir`, else
//! `EPP_HOST_DATA_DIR`, else `$XDG_DATA_HOME/epp-host`.
//!
//! Trust: the keys installed with a provider are trusted for that provider
//! only, and only when it is chosen here (not when its file is named as a
//! path, not for any other component), next to the operator's own trusted
//! keys. `install` takes only keys that verify the component; the choice
//! refuses keys, or folders holding them, that anyone but this user (or root)
//! could change.

use crate::cli::{DataDirArgs, HostArgs, ProviderArgs, TrustArgs};
use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::signing::{self, SignatureStatus, TrustedKeys};
use anyhow::{Context, Result, bail, ensure};
use sha2::{Digest, Sha256};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The folder of the data directory that holds one folder per provider.
const PROVIDERS: &str = "providers";
/// The extension of the public keys installed with a provider.
const KEY_EXTENSION: &str = "pub";

/// The default data directory.
pub fn default_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("epp-host"))
}

fn data_dir(args: &DataDirArgs) -> Result<PathBuf> {
    args.data_dir.clone().or_else(default_dir).context(
        "no data directory: set EPP_HOST_DATA_DIR or pass --data-dir \
         (there is no $XDG_DATA_HOME nor $HOME)",
    )
}

/// The component a subcommand loads, and the keys trusted for it besides the
/// operator's.
#[derive(Debug, PartialEq, Eq)]
pub struct Chosen {
    /// A file or an `oci://` reference.
    pub wasm: PathBuf,
    /// The keys installed with it; none for a PROVIDER given by the operator.
    pub keys: Vec<PathBuf>,
}

impl Chosen {
    /// Its path, with its keys added to `trust`.
    pub fn trusted_by(self, trust: &mut TrustArgs) -> PathBuf {
        trust.trusted_keys.extend(self.keys);
        self.wasm
    }
}

/// The PROVIDER given (a path or an `oci://` reference, which always wins),
/// else the installed provider: the only one, or `--provider NAME`.
pub fn choose(wasm: Option<PathBuf>, args: &ProviderArgs) -> Result<Chosen> {
    match (wasm, &args.name) {
        (Some(wasm), None) => Ok(Chosen {
            wasm,
            keys: Vec::new(),
        }),
        (Some(wasm), Some(name)) => bail!(
            "give either a PROVIDER ({}) or --provider {name}, not both",
            wasm.display()
        ),
        (None, name) => {
            let data = data_dir(&args.data)?;
            let providers = data.join(PROVIDERS);
            let installed = installed(&providers)?;
            let name = match (name, installed.as_slice()) {
                (_, []) => bail!(
                    "no PROVIDER given and none installed (in {}): run `just install` \
                     or pass a path or oci:// reference",
                    providers.display()
                ),
                (Some(name), _) if installed.contains(name) => name,
                (Some(name), _) => {
                    plain_name("--provider", name)?;
                    bail!(
                        "no provider {name} is installed in {}; installed: {}",
                        providers.display(),
                        installed.join(", ")
                    )
                }
                (None, [only]) => only,
                (None, several) => bail!(
                    "no PROVIDER given and {} providers are installed in {} ({}): \
                     choose one with --provider NAME",
                    several.len(),
                    providers.display(),
                    several.join(", ")
                ),
            };
            let chosen = load(&data, name)?;
            tracing::info!(
                provider = %name,
                component = %chosen.wasm.display(),
                "the installed provider {name}, trusting the keys installed with it"
            );
            Ok(chosen)
        }
    }
}

/// `choose` for a subcommand taking `HostArgs`: the component, and the flags
/// with its keys trusted and the choice made (so that `run` handed these
/// flags with the component loads the same).
pub fn for_host(wasm: Option<PathBuf>, mut host: HostArgs) -> Result<(PathBuf, HostArgs)> {
    let wasm = choose(wasm, &host.provider)?.trusted_by(&mut host.trust);
    host.provider.name = None;
    Ok((wasm, host))
}

/// The names of the providers installed in `providers`, sorted; none when
/// the folder does not exist.
fn installed(providers: &Path) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(providers) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", providers.display())),
    };
    let mut names = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading {}", providers.display()))?
            .path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(".");
        // Dot folders are installs under way.
        if !name.starts_with('.') && path.join(MANIFEST_FILE).is_file() {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// The installed provider `name`: its component and keys, after checking that
/// nobody else could have changed which keys those are.
fn load(data: &Path, name: &str) -> Result<Chosen> {
    let dir = data.join(PROVIDERS).join(name);
    let manifest = Manifest::read(&dir.join(MANIFEST_FILE))?;
    plain_name("the component's file name in provider.json", &manifest.file)?;
    let mut keys = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("reading {}", dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == KEY_EXTENSION) {
            keys.push(path);
        }
    }
    keys.sort();
    ensure!(
        !keys.is_empty(),
        "{} holds no public key (*.{KEY_EXTENSION}): install the provider again \
         (`just install`, or `epp-host install … --public-key KEY`)",
        dir.display()
    );
    for path in keys
        .iter()
        .map(PathBuf::as_path)
        .chain(dir.ancestors().take(3))
    {
        only_ours(path)?;
    }
    Ok(Chosen {
        wasm: dir.join(&manifest.file),
        keys,
    })
}

/// Refuses `path` when someone other than this user or root owns it, or
/// group or others may write it: it decides which keys are trusted.
fn only_ours(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).with_context(|| format!("checking {}", path.display()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    ensure!(
        (meta.uid() == uid || meta.uid() == 0) && meta.mode() & 0o022 == 0,
        "refusing the keys installed with this provider: {} may be changed by others \
         (owner {}, mode {:o}); make it yours and not writable by group or others \
         (chmod go-w), or install again",
        path.display(),
        meta.uid(),
        meta.mode() & 0o7777
    );
    Ok(())
}

/// A name that is one path component of our own: letters, digits, `.`, `_`,
/// `-`, not starting with a dot.
fn plain_name(what: &str, name: &str) -> Result<()> {
    ensure!(
        !name.is_empty()
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
        "{what} {name:?} is not a plain name (letters, digits, `.`, `_` and `-`, \
         not starting with a dot)"
    );
    Ok(())
}

/// `epp-host install`: checks that `manifest` (default: provider.json beside
/// `wasm`) describes `wasm` and that every key in `public_keys` verifies it,
/// then puts the three into `DATA/providers/ID/`, replacing an earlier
/// install. Returns that folder.
pub fn install(
    wasm: &Path,
    public_keys: &[PathBuf],
    manifest: Option<&Path>,
    data: &DataDirArgs,
) -> Result<PathBuf> {
    let bytes = std::fs::read(wasm).with_context(|| format!("reading {}", wasm.display()))?;
    let manifest_path = match manifest {
        Some(path) => path.to_path_buf(),
        None => wasm.with_file_name(MANIFEST_FILE),
    };
    let manifest_text = std::fs::read(&manifest_path)
        .with_context(|| format!("reading {}", manifest_path.display()))?;
    let manifest = Manifest::read(&manifest_path)?;
    ensure!(
        manifest.sha256 == hex::encode(Sha256::digest(&bytes)),
        "{} does not describe {} (another sha256): make them together (`just release`)",
        manifest_path.display(),
        wasm.display()
    );
    plain_name("the provider id in provider.json", &manifest.id)?;
    plain_name("the component's file name in provider.json", &manifest.file)?;
    ensure!(
        !public_keys.is_empty(),
        "give the public key that verifies {} (--public-key)",
        wasm.display()
    );
    let mut files = vec![
        (MANIFEST_FILE.to_string(), manifest_text),
        (manifest.file.clone(), bytes),
    ];
    for key in public_keys {
        match signing::verify(
            &files[1].1,
            &TrustedKeys::from_files(std::slice::from_ref(key))?,
        ) {
            SignatureStatus::Trusted(_) => {}
            status => bail!(
                "{} is {} (checked against {})",
                wasm.display(),
                status.describe(),
                key.display()
            ),
        }
        let mut name = key
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| format!("{} has no file name in UTF-8", key.display()))?
            .to_string();
        if Path::new(&name)
            .extension()
            .is_none_or(|e| e != KEY_EXTENSION)
        {
            name = format!("{name}.{KEY_EXTENSION}");
        }
        plain_name("a public key's file name", &name)?;
        let key_bytes = std::fs::read(key).with_context(|| format!("reading {}", key.display()))?;
        files.push((name, key_bytes));
    }
    let mut names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    names.sort_unstable();
    if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
        bail!(
            "two of the files to install would both be named {}",
            twice[0]
        );
    }

    let data = data_dir(data)?;
    let providers = data.join(PROVIDERS);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&providers)
        .with_context(|| format!("creating {}", providers.display()))?;
    // Made whole beside its place, then swapped in: a reader sees the old
    // install or the new one.
    let id = &manifest.id;
    let pid = std::process::id();
    let stage = providers.join(format!(".{id}.new-{pid}"));
    let old = providers.join(format!(".{id}.old-{pid}"));
    let dest = providers.join(id);
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&stage)
        .with_context(|| format!("creating {}", stage.display()))?;
    for (name, bytes) in &files {
        let path = stage.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    if dest.exists() {
        std::fs::rename(&dest, &old)
            .with_context(|| format!("moving the earlier install {} aside", dest.display()))?;
    }
    std::fs::rename(&stage, &dest).with_context(|| format!("installing {}", dest.display()))?;
    let _ = std::fs::remove_dir_all(&old);
    // What `run` will find there, checked the way it checks it.
    load(&data, id)?;
    tracing::info!(
        provider = %id,
        version = %manifest.version,
        sha256 = %manifest.sha256,
        "installed into {}",
        dest.display()
    );
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn args(name: Option<&str>, data: &Path) -> ProviderArgs {
        ProviderArgs {
            name: name.map(Into::into),
            data: DataDirArgs {
                data_dir: Some(data.to_path_buf()),
            },
        }
    }

    /// A signed "component" (any Wasm module signs), its manifest beside it
    /// and its key, in `dir`.
    struct Release {
        wasm: PathBuf,
        key: PathBuf,
    }

    fn release(dir: &Path, id: &str) -> Release {
        use crate::contract::bindings::ProviderInfo;
        use crate::contract::bindings::abx::epp::types::{Capabilities, ProviderNeeds};
        std::fs::create_dir_all(dir).unwrap();
        let unsigned = dir.join("unsigned.wasm");
        std::fs::write(&unsigned, b"\0asm\x01\0\0\0").unwrap();
        let (sec, key) = (dir.join(format!("{id}.sec")), dir.join(format!("{id}.pub")));
        signing::keygen(&sec, &key).unwrap();
        let wasm = dir.join(format!("{id}.wasm"));
        signing::sign(&unsigned, &wasm, &sec, Some(&key)).unwrap();
        let info = ProviderInfo {
            id: id.into(),
            version: "0.1.0".into(),
            capabilities: Vec::new(),
            settings: Vec::new(),
        };
        let needs = ProviderNeeds {
            capabilities: Capabilities::empty(),
            origin: Vec::new(),
            origin_host_any_port: false,
            allow_hosts_env: Vec::new(),
            secret_headers: Vec::new(),
            generic_settings: Vec::new(),
        };
        let bytes = std::fs::read(&wasm).unwrap();
        let file = format!("{id}.wasm");
        let manifest = Manifest::derive(&file, &bytes, &info, &needs, Vec::new());
        std::fs::write(
            dir.join(MANIFEST_FILE),
            serde_json::to_string(&manifest).unwrap(),
        )
        .unwrap();
        Release { wasm, key }
    }

    fn install_release(release: &Release, data: &Path) -> Result<PathBuf> {
        let data = DataDirArgs {
            data_dir: Some(data.to_path_buf()),
        };
        install(
            &release.wasm,
            std::slice::from_ref(&release.key),
            None,
            &data,
        )
    }

    fn error(result: Result<Chosen>) -> String {
        format!("{:#}", result.expect_err("an error"))
    }

    #[test]
    fn a_named_provider_wins_and_brings_no_keys() {
        let tmp = tempfile::tempdir().unwrap();
        install_release(
            &release(&tmp.path().join("a"), "a"),
            &tmp.path().join("data"),
        )
        .unwrap();
        for named in ["p.wasm", "oci://r.test/p:1"] {
            let chosen = choose(Some(named.into()), &args(None, &tmp.path().join("data"))).unwrap();
            assert_eq!(
                chosen,
                Chosen {
                    wasm: named.into(),
                    keys: Vec::new()
                }
            );
        }
        let both = error(choose(Some("p.wasm".into()), &args(Some("a"), tmp.path())));
        assert!(both.contains("not both"), "{both}");
    }

    #[test]
    fn none_installed_says_what_to_do() {
        let tmp = tempfile::tempdir().unwrap();
        for data in [tmp.path().join("missing"), tmp.path().to_path_buf()] {
            let err = error(choose(None, &args(None, &data)));
            assert!(
                err.starts_with("no PROVIDER given and none installed")
                    && err.contains("run `just install` or pass a path or oci:// reference"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_only_installed_provider_comes_with_its_key() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let release = release(&tmp.path().join("rel"), "opensandbox");
        let dir = install_release(&release, &data).unwrap();
        assert_eq!(dir, data.join("providers/opensandbox"));
        let chosen = choose(None, &args(None, &data)).unwrap();
        assert_eq!(
            chosen,
            Chosen {
                wasm: dir.join("opensandbox.wasm"),
                keys: vec![dir.join("opensandbox.pub")],
            }
        );
        // The installed bytes are the signed ones, and the installed key verifies them.
        let installed = std::fs::read(&chosen.wasm).unwrap();
        assert_eq!(installed, std::fs::read(&release.wasm).unwrap());
        let keys = TrustedKeys::from_files(&chosen.keys).unwrap();
        assert!(matches!(
            signing::verify(&installed, &keys),
            SignatureStatus::Trusted(_)
        ));
        // As `run` gets them: the path, its key trusted, the choice made.
        let mut trust = TrustArgs::default();
        trust.trusted_keys.push("mine.pub".into());
        assert_eq!(chosen.trusted_by(&mut trust), dir.join("opensandbox.wasm"));
        assert_eq!(
            trust.trusted_keys,
            vec![PathBuf::from("mine.pub"), dir.join("opensandbox.pub")]
        );
    }

    #[test]
    fn several_installed_need_provider_name() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        for id in ["beta", "alpha"] {
            install_release(&release(&tmp.path().join(id), id), &data).unwrap();
        }
        let err = error(choose(None, &args(None, &data)));
        assert!(
            err.contains("2 providers are installed")
                && err.contains("(alpha, beta)")
                && err.contains("--provider NAME"),
            "{err}"
        );
        let beta = choose(None, &args(Some("beta"), &data)).unwrap();
        assert_eq!(beta.wasm, data.join("providers/beta/beta.wasm"));
        let err = error(choose(None, &args(Some("gamma"), &data)));
        assert!(
            err.contains("no provider gamma is installed")
                && err.ends_with("installed: alpha, beta"),
            "{err}"
        );
        let err = error(choose(None, &args(Some("../alpha"), &data)));
        assert!(err.contains("\"../alpha\" is not a plain name"), "{err}");
    }

    #[test]
    fn installing_again_replaces_the_install() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let first = release(&tmp.path().join("one"), "p");
        install_release(&first, &data).unwrap();
        let second = release(&tmp.path().join("two"), "p");
        let dir = install_release(&second, &data).unwrap();
        // The second key only: the first one is trusted no more.
        assert_eq!(
            std::fs::read(dir.join("p.pub")).unwrap(),
            std::fs::read(&second.key).unwrap()
        );
        let left: Vec<_> = std::fs::read_dir(data.join("providers"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["p"], "no staging folder is left behind");
    }

    #[test]
    fn install_takes_only_a_key_that_verifies_and_its_own_manifest() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let release_a = release(&tmp.path().join("a"), "a");
        let other = release(&tmp.path().join("b"), "b");
        let data_args = DataDirArgs {
            data_dir: Some(data.clone()),
        };
        let err = install(
            &release_a.wasm,
            std::slice::from_ref(&other.key),
            None,
            &data_args,
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("which is not trusted"),
            "{err:#}"
        );
        let manifest_b = other.wasm.with_file_name(MANIFEST_FILE);
        let err = install(
            &release_a.wasm,
            std::slice::from_ref(&release_a.key),
            Some(&manifest_b),
            &data_args,
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("does not describe"), "{err:#}");
        assert!(!data.join("providers").exists(), "nothing was installed");
    }

    #[test]
    fn keys_others_may_change_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let dir = install_release(&release(&tmp.path().join("rel"), "p"), &data).unwrap();
        for path in [dir.join("p.pub"), dir.clone(), data.join("providers")] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
            let err = error(choose(None, &args(None, &data)));
            assert!(
                err.contains(&format!("{} may be changed by others", path.display())),
                "{err}"
            );
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        choose(None, &args(None, &data)).expect("fine again");
    }

    #[test]
    fn a_manifest_naming_a_file_elsewhere_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let dir = install_release(&release(&tmp.path().join("rel"), "p"), &data).unwrap();
        let path = dir.join(MANIFEST_FILE);
        let mut manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        manifest["file"] = "../../elsewhere.wasm".into();
        std::fs::write(&path, manifest.to_string()).unwrap();
        let err = error(choose(None, &args(None, &data)));
        assert!(
            err.contains("\"../../elsewhere.wasm\" is not a plain name"),
            "{err}"
        );
    }
}
