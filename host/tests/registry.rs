//! Components through a real OCI registry (Debian's docker-registry on
//! loopback, `common::registry`): publish → pull → verify → run, the cache,
//! and every refusal, each of which must leave nothing running.

mod common;

use common::registry::Registry;
use common::{host_command, rt};
use epp_host::oci::access::RegistryPolicy;
use epp_host::oci::cache::OciCache;
use epp_host::oci::credentials::Credentials;
use epp_host::oci::pull;
use epp_host::oci::push::{self, Artifact};
use epp_host::oci::reference::OciRef;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

/// The released abx:epp 1.0.0 provider, signed by the fixture key.
fn fixture(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/epp-1.0.0")
        .join(file)
}

const HELLO: &str =
    r#"{"jsonrpc":"2.0","id":1,"method":"epp.hello","params":{"protocol":"EPP/1"}}"#;

/// `epp-host ARGS` with `stdin` as input, to the end.
fn epp_host(args: &[&str], stdin: &str) -> Output {
    let mut child = host_command()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting epp-host");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("writing stdin");
    child.wait_with_output().expect("epp-host output")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Pushes the fixture with `epp-host push`; returns the pinned reference it printed.
fn publish_fixture(registry: &Registry, tag: &str) -> String {
    let reference = registry.reference(&format!("epp/opensandbox:{tag}"));
    let out = epp_host(
        &[
            "push",
            fixture("opensandbox.wasm").to_str().unwrap(),
            &reference,
            "--insecure-registry",
            &registry.addr,
        ],
        "",
    );
    assert!(out.status.success(), "push failed: {}", text(&out.stderr));
    let pinned = text(&out.stdout).trim().to_string();
    assert!(pinned.contains("@sha256:"), "push printed {pinned}");
    pinned
}

/// `epp-host run REFERENCE` trusting the fixture key (or `trust`), sending
/// `epp.hello`; the cache is `cache`.
fn run_hello(registry: &Registry, reference: &str, cache: &Path, trust: Option<&Path>) -> Output {
    let key = fixture("fixture.pub");
    let mut args = vec![
        "run",
        reference,
        "--insecure-registry",
        &registry.addr,
        "--cache-dir",
        cache.to_str().unwrap(),
        "--trust-file",
        "/dev/null",
    ];
    let trusted;
    if let Some(path) = trust.or(Some(&key)) {
        trusted = path.to_str().unwrap().to_string();
        args.extend(["--trusted-key", &trusted]);
    }
    epp_host(&args, &format!("{HELLO}\n"))
}

/// The hello answer of a run that must have worked.
fn served(out: &Output) -> Value {
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    let line = text(&out.stdout);
    let answer: Value = serde_json::from_str(line.lines().next().unwrap_or(""))
        .unwrap_or_else(|e| panic!("no hello answer ({e}): {line}\n{stderr}"));
    assert_eq!(
        answer["result"]["provider"]["id"], "opensandbox",
        "{answer}"
    );
    answer
}

/// A run that was refused: exit 2, no answer, nothing compiled or run, and
/// the error says `why`. Returns the log.
fn refused(out: &Output, why: &str) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "not refused: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "a refused run answered: {}",
        text(&out.stdout)
    );
    assert!(!stderr.contains("compile cache"), "it compiled: {stderr}");
    assert!(!stderr.contains("running oci://"), "it ran: {stderr}");
    assert!(stderr.contains(why), "expected `{why}` in: {stderr}");
    assert!(stderr.contains("ERROR"), "{stderr}");
    stderr
}

/// Pushes `wasm` as a Wasm artifact under `tag` through the library, with
/// no checks of its own (how a tampered or unsigned artifact gets there).
fn push_raw(registry: &Registry, wasm: Vec<u8>, tag: &str) -> String {
    let reference = OciRef::parse(&registry.reference(&format!("epp/opensandbox:{tag}"))).unwrap();
    let artifact = Artifact {
        wasm,
        annotations: BTreeMap::new(),
        world: None,
    };
    let policy = RegistryPolicy::new(std::slice::from_ref(&registry.addr));
    let pushed = rt()
        .block_on(push::push(artifact, &reference, &policy, &anonymous()))
        .expect("pushing");
    reference.with_digest(&pushed.manifest_digest).to_string()
}

fn anonymous() -> Credentials {
    Credentials {
        auth: oci_client::secrets::RegistryAuth::Anonymous,
        source: "anonymous".into(),
    }
}

#[test]
fn publish_pull_verify_run() {
    let registry = Registry::start();
    let pinned = publish_fixture(&registry, "1.0.0");
    let cache = tempfile::tempdir().unwrap();
    let reference = registry.reference("epp/opensandbox:1.0.0");
    let out = run_hello(&registry, &reference, cache.path(), None);
    served(&out);
    let log = text(&out.stderr);
    assert!(
        log.contains(&format!("running {pinned} (pulled from the registry), signed by trusted key e00466bd45d1c47285b83c57")),
        "what ran is not said: {log}"
    );
    // inspect looks at it in the registry too: the contract it was built against.
    let inspected = epp_host(
        &[
            "inspect",
            "--json",
            &reference,
            "--insecure-registry",
            &registry.addr,
            "--cache-dir",
            cache.path().to_str().unwrap(),
            "--trust-file",
            "/dev/null",
            "--trusted-key",
            fixture("fixture.pub").to_str().unwrap(),
        ],
        "",
    );
    let report: Value = serde_json::from_slice(&inspected.stdout)
        .unwrap_or_else(|e| panic!("inspect --json ({e}): {}", text(&inspected.stderr)));
    assert_eq!(
        report["contract"]["built_against"], "abx:epp@1.0.0",
        "{report}"
    );
    assert_eq!(report["signature"]["trusted"], true, "{report}");
    // The manifest carries the standard media types and the provider's annotations.
    let pulled = rt()
        .block_on(pull::pull(
            &OciRef::parse(&pinned).unwrap(),
            &RegistryPolicy::new(std::slice::from_ref(&registry.addr)),
            &anonymous(),
            &OciCache::new(cache.path()),
        ))
        .unwrap();
    assert_eq!(
        pulled.wasm,
        std::fs::read(fixture("opensandbox.wasm")).unwrap()
    );
    assert_eq!(
        pulled.manifest.config.media_type,
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(pulled.manifest.layers[0].media_type, "application/wasm");
    let notes = pulled.manifest.annotations.unwrap();
    assert_eq!(notes[push::ANNOTATION_PROVIDER_ID], "opensandbox");
    assert_eq!(notes[push::ANNOTATION_VERSION], "0.1.0");
    assert_eq!(notes[push::ANNOTATION_WORLD], "abx:epp/provider@1.0.0");
    assert!(
        notes[push::ANNOTATION_SOURCE].starts_with("https://"),
        "{notes:?}"
    );
    assert!(
        notes[push::ANNOTATION_CAPABILITIES].contains("sandbox.lifecycle"),
        "{notes:?}"
    );
}

#[test]
fn the_wit_contract_is_published_by_name_and_version() {
    let registry = Registry::start();
    let out = epp_host(
        &[
            "push-wit",
            &registry.reference("contracts"),
            "--insecure-registry",
            &registry.addr,
        ],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let version = epp_host::contract::current().to_string();
    // Another host finds it by package name and version alone.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("epp.wasm");
    let out = epp_host(
        &[
            "pull",
            &registry.reference(&format!("contracts/abx/epp:{version}")),
            "-o",
            file.to_str().unwrap(),
            "--cache-dir",
            dir.path().to_str().unwrap(),
            "--insecure-registry",
            &registry.addr,
        ],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let name = epp_host::oci::wit_package::package_name(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(name.to_string(), format!("abx:epp@{version}"));
}

#[test]
fn a_tampered_layer_is_refused() {
    let registry = Registry::start();
    let mut wasm = std::fs::read(fixture("opensandbox.wasm")).unwrap();
    let middle = wasm.len() / 2;
    wasm[middle] ^= 0x01;
    let reference = push_raw(&registry, wasm, "tampered");
    let cache = tempfile::tempdir().unwrap();
    let out = run_hello(&registry, &reference, cache.path(), None);
    refused(&out, "modified after signing");
}

#[test]
fn a_blob_that_does_not_match_its_digest_is_refused() {
    let registry = Registry::start();
    let pinned = publish_fixture(&registry, "1.0.0");
    // Corrupt the layer inside the registry's own storage.
    let layer = format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
            std::fs::read(fixture("opensandbox.wasm")).unwrap()
        ))
    );
    let file = registry.blob_file(&layer);
    let mut bytes = std::fs::read(&file).expect("the registry stores the layer");
    bytes[100] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let out = run_hello(&registry, &pinned, cache.path(), None);
    refused(&out, "tampered with or corrupt");
}

#[test]
fn a_wrong_digest_is_refused() {
    let registry = Registry::start();
    publish_fixture(&registry, "1.0.0");
    let wrong = registry.reference(&format!("epp/opensandbox@sha256:{}", "0".repeat(64)));
    let cache = tempfile::tempdir().unwrap();
    let out = run_hello(&registry, &wrong, cache.path(), None);
    refused(&out, &format!("has no manifest sha256:{}", "0".repeat(64)));
}

#[test]
fn an_unsigned_component_is_refused() {
    let registry = Registry::start();
    let unsigned = std::fs::read(common::probe_wasm()).unwrap();
    let reference = push_raw(&registry, unsigned, "unsigned");
    let cache = tempfile::tempdir().unwrap();
    let out = run_hello(&registry, &reference, cache.path(), None);
    refused(&out, "it is not signed");
}

#[test]
fn an_untrusted_signer_is_refused() {
    let registry = Registry::start();
    let reference = publish_fixture(&registry, "1.0.0");
    // Another key, not the one that signed it.
    let keys = tempfile::tempdir().unwrap();
    let other = keys.path().join("other.pub");
    let made = epp_host(
        &[
            "keygen",
            "-k",
            keys.path().join("other.sec").to_str().unwrap(),
            "-K",
            other.to_str().unwrap(),
        ],
        "",
    );
    assert!(made.status.success());
    let cache = tempfile::tempdir().unwrap();
    let out = run_hello(&registry, &reference, cache.path(), Some(&other));
    refused(
        &out,
        "signed by key e00466bd45d1c47285b83c57 which is not trusted",
    );
}

#[test]
fn an_unreachable_registry_is_refused() {
    let mut registry = Registry::start();
    registry.stop();
    let cache = tempfile::tempdir().unwrap();
    let out = run_hello(
        &registry,
        &registry.reference("epp/opensandbox:1.0.0"),
        cache.path(),
        None,
    );
    refused(&out, "is unreachable (Connection refused");
}

#[test]
fn a_missing_tag_is_refused() {
    let registry = Registry::start();
    publish_fixture(&registry, "1.0.0");
    let cache = tempfile::tempdir().unwrap();
    let out = run_hello(
        &registry,
        &registry.reference("epp/opensandbox:9.9.9"),
        cache.path(),
        None,
    );
    refused(&out, "has no tag `9.9.9` in epp/opensandbox");
}

#[test]
fn a_local_registry_needs_the_operators_word() {
    let registry = Registry::start();
    publish_fixture(&registry, "1.0.0");
    let cache = tempfile::tempdir().unwrap();
    let out = epp_host(
        &[
            "run",
            &registry.reference("epp/opensandbox:1.0.0"),
            "--cache-dir",
            cache.path().to_str().unwrap(),
            "--trusted-key",
            fixture("fixture.pub").to_str().unwrap(),
        ],
        &format!("{HELLO}\n"),
    );
    refused(&out, &format!("--insecure-registry {}", registry.addr));
}

#[test]
fn a_second_run_needs_no_registry() {
    let mut registry = Registry::start();
    let pinned = publish_fixture(&registry, "1.0.0");
    let cache = tempfile::tempdir().unwrap();
    let tagged = registry.reference("epp/opensandbox:1.0.0");
    served(&run_hello(&registry, &tagged, cache.path(), None));
    registry.stop();
    // By tag: the registry is down, the tag's last digest is in the cache.
    let out = run_hello(&registry, &tagged, cache.path(), None);
    served(&out);
    let log = text(&out.stderr);
    assert!(
        log.contains(&format!(
            "running {pinned} (from the cache: the registry is unreachable"
        )),
        "{log}"
    );
    // By digest: the cache answers without asking any registry.
    let out = run_hello(&registry, &pinned, cache.path(), None);
    served(&out);
    assert!(
        text(&out.stderr).contains("(from the cache (pinned by digest))"),
        "{}",
        text(&out.stderr)
    );
    // The signature is checked on cached bytes too.
    let other = tempfile::tempdir().unwrap();
    let key = other.path().join("k.pub");
    assert!(
        epp_host(
            &[
                "keygen",
                "-k",
                other.path().join("k.sec").to_str().unwrap(),
                "-K",
                key.to_str().unwrap()
            ],
            ""
        )
        .status
        .success()
    );
    refused(
        &run_hello(&registry, &pinned, cache.path(), Some(&key)),
        "which is not trusted",
    );
}

/// `just demo`'s session (scripts/demo) with the component pulled from the
/// registry: the dev build `just build` signs, published, then run as
/// `oci://…` against the shared testbed.
#[test]
fn the_demo_session_runs_from_the_registry() {
    let target = epp_e2e::target_dir();
    let built = epp_e2e::artifact("EPP_GUEST_WASM", target.join("epp/opensandbox.wasm"));
    let key = epp_e2e::artifact("EPP_TRUSTED_KEY", target.join("epp/dev.pub"));
    // What a release directory holds: the component and its provider.json.
    let release = tempfile::tempdir().unwrap();
    let wasm = release.path().join("opensandbox.wasm");
    std::fs::copy(&built, &wasm).unwrap();
    let manifest = epp_host(
        &[
            "manifest",
            wasm.to_str().unwrap(),
            "-K",
            key.to_str().unwrap(),
            "-o",
            release.path().join("provider.json").to_str().unwrap(),
        ],
        "",
    );
    assert!(manifest.status.success(), "{}", text(&manifest.stderr));
    let registry = Registry::start();
    let reference = registry.reference("epp/opensandbox:dev");
    let pushed = epp_host(
        &[
            "push",
            wasm.to_str().unwrap(),
            &reference,
            "--insecure-registry",
            &registry.addr,
        ],
        "",
    );
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
    let pinned = text(&pushed.stdout).trim().to_string();

    let tb = epp_e2e::testbed();
    let cache = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(epp_e2e::repo_root().join("scripts/demo"))
        .env("CARGO_TARGET_DIR", &target)
        .env("ABX_OPENSANDBOX_BASE_URL", &tb.url)
        .env("ABX_OPENSANDBOX_API_KEY", &tb.api_key)
        .env("EPP_DEMO_COMPONENT", &reference)
        .env("EPP_DEMO_TRUSTED_KEY", &key)
        .env(
            "EPP_DEMO_HOST_ARGS",
            format!(
                "--insecure-registry {} --cache-dir {}",
                registry.addr,
                cache.path().display()
            ),
        )
        .stdin(Stdio::null())
        .output()
        .expect("running scripts/demo");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "the demo failed:\n{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "running {pinned} (pulled from the registry), signed by trusted key"
        )),
        "the demo's host did not run the pulled component: {stderr}"
    );
    for step in [
        "Create a sandbox",
        "Run a command",
        "Open a terminal",
        "Kill the sandbox",
        "Done.",
    ] {
        assert!(
            stdout.contains(step),
            "the demo skipped `{step}`:\n{stdout}"
        );
    }
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The probe (it can show its environment: `sandbox.get_info "env"`),
/// signed with a fresh key, with its provider.json: (dir, wasm, public key).
fn signed_probe() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (sec, public, wasm) = (
        dir.path().join("k.sec"),
        dir.path().join("k.pub"),
        dir.path().join("probe.wasm"),
    );
    let path = |p: &Path| p.to_str().unwrap().to_string();
    for args in [
        vec![
            "keygen".into(),
            "-k".into(),
            path(&sec),
            "-K".into(),
            path(&public),
        ],
        vec![
            "sign".into(),
            path(common::probe_wasm()),
            "-k".into(),
            path(&sec),
            "-K".into(),
            path(&public),
            "-o".into(),
            path(&wasm),
        ],
        vec![
            "manifest".into(),
            path(&wasm),
            "-K".into(),
            path(&public),
            "-o".into(),
            path(&dir.path().join("provider.json")),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = epp_host(&args, "");
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    (dir, wasm, public)
}

#[test]
fn credentials_reach_the_registry_only() {
    const PASSWORD: &str = "pw-REGISTRY-7c1e-NEVER-LOGGED";
    let registry = Registry::with_password("alice", PASSWORD);
    let (_dir, wasm, key) = signed_probe();
    let reference = registry.reference("epp/probe:1");
    let env_login = [
        ("EPP_REGISTRY_USERNAME", "alice"),
        ("EPP_REGISTRY_PASSWORD", PASSWORD),
    ];
    let host = |args: &[&str], env: &[(&str, &str)], stdin: &str| {
        let mut cmd = host_command();
        cmd.args(args).env("EPP_LOG", "debug");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    // Pushed with the environment's login.
    let wasm = wasm.to_str().unwrap();
    let pushed = host(
        &[
            "push",
            wasm,
            &reference,
            "--insecure-registry",
            &registry.addr,
        ],
        &env_login,
        "",
    );
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
    let cache = tempfile::tempdir().unwrap();
    let run_args = |extra: &[&'static str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "run",
            &reference,
            "--insecure-registry",
            &registry.addr,
            "--trust-file",
            "/dev/null",
            "--trusted-key",
            key.to_str().unwrap(),
            "--cache-dir",
            cache.path().to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    // Without a login: refused, saying how to log in.
    let anonymous = host(&as_strs(&run_args(&[])), &[], &format!("{HELLO}\n"));
    refused(&anonymous, "refused access");
    // From the environment, even handed over by name, the component never sees it.
    let show_env =
        r#"{"jsonrpc":"2.0","id":2,"method":"sandbox.get_info","params":{"sandbox_id":"env"}}"#;
    let out = host(
        &as_strs(&run_args(&[
            "--pass-env",
            "EPP_REGISTRY_PASSWORD",
            "--pass-env",
            "EPP_REGISTRY_USERNAME",
            "--pass-env",
            "EPP_LOG",
        ])),
        &env_login,
        &format!("{HELLO}\n{show_env}\n"),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("running oci://"), "{stderr}");
    // --pass-env works (EPP_LOG arrives), so only the removal keeps the login out.
    assert!(
        stdout.contains("EPP_LOG=debug"),
        "the probe showed no environment: {stdout}"
    );
    assert!(
        !stdout.contains(PASSWORD),
        "the password reached the component: {stdout}"
    );
    assert!(
        !stdout.contains("EPP_REGISTRY_"),
        "a credential variable reached the component: {stdout}"
    );
    assert!(
        !stderr.contains(PASSWORD),
        "the password is in the log: {stderr}"
    );
    // From the docker config file (base64 user:password), nothing in the log either.
    let docker = tempfile::tempdir().unwrap();
    let encoded = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("alice:{PASSWORD}"),
    );
    std::fs::write(
        docker.path().join("config.json"),
        format!(
            r#"{{"auths": {{"{}": {{"auth": "{encoded}"}}}}}}"#,
            registry.addr
        ),
    )
    .unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let mut args = run_args(&[]);
    let at = args.iter().position(|a| a == "--cache-dir").unwrap();
    args[at + 1] = fresh.path().to_str().unwrap().to_string();
    let out = host(
        &as_strs(&args),
        &[("DOCKER_CONFIG", docker.path().to_str().unwrap())],
        &format!("{HELLO}\n"),
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("(pulled from the registry)"), "{stderr}");
    assert!(
        !stderr.contains(PASSWORD) && !stderr.contains(&encoded),
        "{stderr}"
    );
}
