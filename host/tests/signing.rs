//! Component signatures (`keygen`, `sign`, `verify`, and `run` refusing what it
//! must not run) and the compile cache (a second start loads the compiled
//! component; a cache others could write, or a corrupt entry, is not trusted).

mod common;

use common::*;
use serde_json::json;
use std::path::{Path, PathBuf};

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A key pair from `epp-host keygen`, and its key id.
struct Keys {
    secret: PathBuf,
    public: PathBuf,
    id: String,
}

fn keygen(dir: &Path, name: &str) -> Keys {
    let secret = dir.join(format!("{name}.sec"));
    let public = dir.join(format!("{name}.pub"));
    let out = run_host_once(&["keygen", "-k", s(&secret), "-K", s(&public)], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let id = text
        .strip_prefix("key id ")
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("unexpected keygen output: {text}"))
        .to_string();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&secret)
        .expect("secret key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the secret key must be private");
    Keys { secret, public, id }
}

fn sign(input: &Path, output: &Path, keys: &Keys) {
    let out = run_host_once(
        &[
            "sign",
            s(input),
            "-o",
            s(output),
            "-k",
            s(&keys.secret),
            "-K",
            s(&keys.public),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&keys.id), "{}", stdout(&out));
}

/// The signed probe with a custom section appended: still a valid component,
/// no longer the one that was signed.
fn tamper(signed: &Path, output: &Path) {
    let mut bytes = std::fs::read(signed).expect("signed probe");
    bytes.extend_from_slice(&[0, 4, 1, b'x', 1, 2]);
    std::fs::write(output, bytes).expect("writing tampered probe");
}

/// Everything the signature tests use: two key pairs and the probe unsigned,
/// signed by `release`, tampered after signing, and signed by `stranger`.
struct Fixture {
    dir: tempfile::TempDir,
    release: Keys,
    stranger: Keys,
    unsigned: PathBuf,
    signed: PathBuf,
    tampered: PathBuf,
    untrusted: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let release = keygen(dir.path(), "release");
    let stranger = keygen(dir.path(), "stranger");
    assert_ne!(release.id, stranger.id);
    let unsigned = dir.path().join("unsigned.wasm");
    std::fs::copy(probe_wasm(), &unsigned).expect("copying the probe");
    let signed = dir.path().join("signed.wasm");
    sign(&unsigned, &signed, &release);
    let tampered = dir.path().join("tampered.wasm");
    tamper(&signed, &tampered);
    let untrusted = dir.path().join("untrusted.wasm");
    sign(&unsigned, &untrusted, &stranger);
    Fixture {
        dir,
        release,
        stranger,
        unsigned,
        signed,
        tampered,
        untrusted,
    }
}

#[test]
fn verify_reports_each_signature_state() {
    let f = fixture();
    let trusted = s(&f.release.public);
    let verify = |wasm: &Path, trust: &[&str]| {
        let mut args = vec!["verify", s(wasm), "--trust-file", "/dev/null"];
        for key in trust {
            args.extend(["--trusted-key", key]);
        }
        run_host_once(&args, &[])
    };

    let out = verify(&f.signed, &[trusted]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("signed by trusted key {}", f.release.id)),
        "{}",
        stdout(&out)
    );
    // Any one trusted key is enough.
    let out = verify(&f.signed, &[s(&f.stranger.public), trusted]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    for (wasm, trust, phrase) in [
        (&f.unsigned, vec![trusted], "not signed"),
        (&f.tampered, vec![trusted], "modified after signing"),
        (&f.untrusted, vec![trusted], "which is not trusted"),
        (
            &f.signed,
            vec![s(&f.stranger.public)],
            "which is not trusted",
        ),
        (&f.signed, vec![], "which is not trusted"),
    ] {
        let out = verify(wasm, &trust);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}: {}",
            wasm.display(),
            stdout(&out)
        );
        assert!(
            stdout(&out).contains(phrase),
            "{}: expected {phrase:?} in {}",
            wasm.display(),
            stdout(&out)
        );
    }

    // A component signed twice (key rotation) is trusted under either key.
    let both = f.dir.path().join("both.wasm");
    sign(&f.signed, &both, &f.stranger);
    for key in [trusted, s(&f.stranger.public)] {
        let out = verify(&both, &[key]);
        assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    }
}

#[test]
fn run_refuses_unsigned_tampered_and_untrusted_components_before_compiling() {
    let f = fixture();
    let cache = f.dir.path().join("cache");
    let trusted = s(&f.release.public);
    for (wasm, trust, phrase) in [
        (&f.unsigned, Some(trusted), "not signed"),
        (&f.tampered, Some(trusted), "modified after signing"),
        (&f.untrusted, Some(trusted), "which is not trusted"),
        (&f.unsigned, None, "No trusted keys are configured"),
    ] {
        let mut args = vec![
            "run",
            s(wasm),
            "--trust-file",
            "/dev/null",
            "--cache-dir",
            s(&cache),
        ];
        if let Some(key) = trust {
            args.extend(["--trusted-key", key]);
        }
        let out = run_host_once(&args, &[]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", wasm.display());
        assert!(err.contains("refusing to run"), "{err}");
        assert!(err.contains(phrase), "expected {phrase:?} in {err}");
        assert!(
            err.contains("--allow-unsigned"),
            "names the escape hatch: {err}"
        );
        assert!(out.stdout.is_empty(), "nothing on the protocol channel");
        assert!(
            !cache.exists(),
            "the refused component was compiled into {}",
            cache.display()
        );
    }
}

#[test]
fn run_serves_a_trusted_component_and_allow_unsigned_warns() {
    let f = fixture();
    let cache = f.dir.path().join("cache");
    std::fs::create_dir(&cache).expect("cache dir");

    // Signed by a trusted key: served, no warning.
    let mut host = HostBuilder::new()
        .wasm(&f.signed)
        .signed_only()
        .cache_dir(&cache)
        .args(["--trusted-key", s(&f.release.public)])
        .spawn();
    assert_eq!(
        result(&host.call("epp.hello", json!({})))["provider"]["id"],
        "probe"
    );
    assert!(!host.log().contains("WARNING"), "{}", host.log());

    // The same key listed in a trust file (relative to the file), with a comment.
    let trust_file = f.dir.path().join("trusted-keys");
    std::fs::write(&trust_file, "# release key\nrelease.pub\n").expect("trust file");
    let mut host = HostBuilder::new()
        .wasm(&f.signed)
        .signed_only()
        .cache_dir(&cache)
        .trust_file(&trust_file)
        .spawn();
    assert_eq!(
        result(&host.probe("echo via trust file"))["sandbox_id"],
        "via trust file"
    );

    // --allow-unsigned runs the others, each with a loud warning saying why.
    for (wasm, phrase) in [
        (&f.unsigned, "not signed"),
        (&f.tampered, "modified after signing"),
        (&f.untrusted, "which is not trusted"),
    ] {
        let mut host = HostBuilder::new()
            .wasm(wasm)
            .cache_dir(&cache)
            .args(["--trusted-key", s(&f.release.public)])
            .spawn();
        assert_eq!(result(&host.probe("echo ran"))["sandbox_id"], "ran");
        let log = host.wait_log("WARNING");
        let warning = log_events(&log, "WARN", "WARNING: running ");
        assert_eq!(warning.len(), 1, "{log}");
        assert!(
            warning[0].text.contains(phrase),
            "expected {phrase:?} in {log}"
        );
        assert!(warning[0].text.contains("--allow-unsigned"), "{log}");
    }
}

/// A trusted verdict is kept in the compile cache, under the sha256 of the
/// component and of the trusted keys, and taken from there as the cache's
/// `.cwasm` is: only from a directory private to this user.
#[test]
fn a_trusted_verdict_is_remembered_in_the_compile_cache_for_those_bytes_and_keys() {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let cache = f.dir.path().join("cache");
    let serve = |wasm: &Path, key: &Path| {
        run_host_once(
            &[
                "run",
                s(wasm),
                "--trust-file",
                "/dev/null",
                "--trusted-key",
                s(key),
                "--cache-dir",
                s(&cache),
            ],
            &[],
        )
    };
    let refused = |out: &std::process::Output, phrase: &str| {
        let err = stderr(out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(phrase), "expected {phrase:?} in {err}");
    };
    let sha = |wasm: &Path| hex::encode(Sha256::digest(std::fs::read(wasm).expect("wasm")));

    let served = |out: &std::process::Output| {
        assert!(out.status.success(), "{}", stderr(out));
        assert!(!stderr(out).contains("refusing"), "{}", stderr(out));
    };
    let verdicts = || -> Vec<PathBuf> {
        cached_files(&cache)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "trusted"))
            .collect()
    };
    served(&serve(&f.signed, &f.release.public));
    let verdicts_now = verdicts();
    assert_eq!(verdicts_now.len(), 1, "{:?}", cached_files(&cache));
    let verdict = &verdicts_now[0];
    assert_eq!(
        std::fs::read_to_string(verdict).expect("verdict"),
        f.release.id
    );
    assert_eq!(
        std::fs::metadata(verdict)
            .expect("verdict")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let name = verdict.file_name().and_then(|n| n.to_str()).expect("name");
    let keys = name
        .strip_prefix(&format!("{}-", sha(&f.signed)))
        .expect("named by the component's sha256");

    // Other bytes or other keys are verified anew: no verdict of theirs.
    refused(
        &serve(&f.tampered, &f.release.public),
        "modified after signing",
    );
    refused(
        &serve(&f.signed, &f.stranger.public),
        "which is not trusted",
    );
    assert_eq!(verdicts().len(), 1, "only trusted verdicts are kept");

    // The verdict is taken without verifying, as the `.cwasm` beside it is run
    // without compiling: a verdict for the stranger's component under its
    // sha256 (as only someone who can write this directory could put there)
    // is believed…
    let forged = cache.join(format!("{}-{keys}", sha(&f.untrusted)));
    std::fs::copy(verdict, &forged).expect("copying the verdict");
    served(&serve(&f.untrusted, &f.release.public));
    // …and not once others could write the directory (nor a damaged one).
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    refused(
        &serve(&f.untrusted, &f.release.public),
        "which is not trusted",
    );
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::write(&forged, "not a key id\n").expect("damaging");
    refused(
        &serve(&f.untrusted, &f.release.public),
        "which is not trusted",
    );
}

fn cached_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// Starts the probe with `cache`, checks it answers, returns its stderr.
fn start_with_cache(cache: &Path) -> String {
    let mut host = HostBuilder::new().cache_dir(cache).spawn();
    assert_eq!(result(&host.probe("echo cached"))["sandbox_id"], "cached");
    host.wait_log("compile cache: ")
}

#[test]
fn second_start_loads_the_compiled_component_from_the_cache() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");

    let first = start_with_cache(&cache);
    assert!(first.contains("compile cache: miss"), "{first}");
    // The compiled component and, beside it, the provider's static answers.
    let files = cached_files(&cache);
    assert_eq!(files.len(), 2, "{files:?}");
    let (answers, cwasm) = (&files[0], &files[1]);
    assert!(cwasm.extension().is_some_and(|e| e == "cwasm"));
    assert_eq!(answers, &cwasm.with_extension("answers.json"));
    let meta = std::fs::metadata(cwasm).expect("cached file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(answers).expect("answers")).expect("JSON");
    assert_eq!(stored["info"]["id"], "probe", "{stored}");
    assert_eq!(stored["reusable"], false, "{stored}");
    assert_eq!(
        std::fs::metadata(answers)
            .expect("answers")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let dir_mode = std::fs::metadata(&cache)
        .expect("cache dir")
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);

    let second = start_with_cache(&cache);
    assert!(
        second.contains(
            "compile cache: hit, loaded the compiled component and the provider's answers"
        ),
        "{second}"
    );
    // Loaded, not rewritten.
    let again = std::fs::metadata(cwasm).expect("cached file");
    assert_eq!(
        (again.ino(), again.mtime_nsec()),
        (meta.ino(), meta.mtime_nsec())
    );
    assert_eq!(cached_files(&cache), files);

    // Answers this host cannot read are asked again and stored anew.
    std::fs::write(answers, b"{\"info\":").expect("damaging the answers");
    let third = start_with_cache(&cache);
    assert!(
        third.contains(
            "compile cache: hit, loaded the compiled component, stored the provider's answers"
        ),
        "{third}"
    );
    let stored_again: serde_json::Value =
        serde_json::from_slice(&std::fs::read(answers).expect("answers")).expect("JSON");
    assert_eq!(stored_again, stored);

    // --no-cache compiles and leaves the cache alone.
    let mut host = HostBuilder::new()
        .arg("--no-cache")
        .cache_dir_unset()
        .spawn();
    assert_eq!(result(&host.probe("echo x"))["sandbox_id"], "x");
    let log = host.wait_log("compile cache: ");
    assert!(log.contains("compile cache: off"), "{log}");
}

#[test]
fn a_corrupt_cache_entry_is_recompiled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    assert!(start_with_cache(&cache).contains("compile cache: miss"));
    let cwasm = cached_files(&cache)
        .into_iter()
        .find(|f| f.extension().is_some_and(|e| e == "cwasm"))
        .expect("the compiled component");
    std::fs::write(&cwasm, b"not a compiled component").expect("corrupting");

    let log = start_with_cache(&cache);
    assert_eq!(
        log_events(
            &log,
            "WARN",
            "recompiling: the cached component is unusable"
        )
        .len(),
        1,
        "{log}"
    );
    assert!(log.contains("compile cache: miss"), "{log}");
    // Rewritten with a good one.
    assert!(start_with_cache(&cache).contains("compile cache: hit"));
}

#[test]
fn a_cache_others_could_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).expect("cache dir");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).expect("chmod");

    let log = start_with_cache(&cache);
    assert_eq!(
        log_events(&log, "WARN", "not using the compile cache").len(),
        1,
        "{log}"
    );
    assert!(log.contains("compile cache: off"), "{log}");
    assert!(
        cached_files(&cache).is_empty(),
        "{:?}",
        cached_files(&cache)
    );
}
