//! The release manifest: `epp-host manifest` derives provider.json from the
//! signed component, and `epp-host inspect` checks a provider.json against the
//! component it sits next to.

use epp_e2e::{artifact, target_dir};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Release {
    host: PathBuf,
    key: PathBuf,
    dir: tempfile::TempDir,
}

impl Release {
    /// A new key pair `<name>.sec` / `<name>.pub` in the release's folder.
    fn keygen(&self, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = self.dir.path();
        let (sec, public) = (
            dir.join(format!("{name}.sec")),
            dir.join(format!("{name}.pub")),
        );
        let out = self.epp_host(&[
            "keygen",
            "-k",
            sec.to_str().unwrap(),
            "-K",
            public.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        (sec, public)
    }

    /// The signed component copied into a folder of its own, with its manifest.
    fn new() -> Release {
        let host = artifact("EPP_HOST_BIN", target_dir().join("debug/epp-host"));
        let wasm = artifact("EPP_GUEST_WASM", target_dir().join("epp/opensandbox.wasm"));
        let key = artifact("EPP_TRUSTED_KEY", target_dir().join("epp/dev.pub"));
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(&wasm, dir.path().join("opensandbox.wasm")).unwrap();
        let release = Release { host, key, dir };
        let out = release.epp_host(&[
            "manifest",
            release.wasm().to_str().unwrap(),
            "--public-key",
            release.key.to_str().unwrap(),
            "-o",
            release.manifest().to_str().unwrap(),
        ]);
        assert!(out.status.success(), "manifest failed: {}", stderr(&out));
        release
    }

    fn wasm(&self) -> PathBuf {
        self.dir.path().join("opensandbox.wasm")
    }

    fn manifest(&self) -> PathBuf {
        self.dir.path().join("provider.json")
    }

    fn epp_host(&self, args: &[&str]) -> Output {
        Command::new(&self.host)
            .args(args)
            .output()
            .expect("running epp-host")
    }

    /// `inspect --json` with the signing key trusted; the manifest beside the
    /// component is found without being named.
    fn inspect(&self) -> (bool, Value) {
        let out = self.epp_host(&[
            "inspect",
            self.wasm().to_str().unwrap(),
            "--trusted-key",
            self.key.to_str().unwrap(),
            "--json",
        ]);
        let report = serde_json::from_slice(&out.stdout).expect("inspect --json prints JSON");
        (out.status.success(), report)
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn manifest_describes_the_signed_component() {
    let release = Release::new();
    let m = read_json(&release.manifest());
    assert_eq!(m["id"], "opensandbox");
    assert_eq!(m["kind"], "wasm-component");
    assert_eq!(m["protocol"], "EPP/1");
    assert_eq!(m["wit_world"], "abx:epp/provider@1.3.0");
    assert_eq!(m["file"], "opensandbox.wasm");
    let size = std::fs::metadata(release.wasm()).unwrap().len();
    assert_eq!(m["size"], size);
    // The shipped component's size budget (1 MiB) is checked by scripts/release on
    // dist/opensandbox.wasm (the guest-release profile); this one is the
    // development build, which is larger.
    assert_eq!(m["signer_key_ids"].as_array().unwrap().len(), 1);

    let caps = m["capabilities"].as_object().unwrap();
    assert_eq!(caps.len(), 18);
    assert_eq!(caps.keys().next().unwrap(), "sandbox.lifecycle");
    assert_eq!(caps["pty"], true);
    assert_eq!(caps["files.watch"], true);
    assert_eq!(caps["files.transfer"], true);
    assert_eq!(caps["code.interpret"], true);

    let settings = m["settings"].as_array().unwrap();
    let api_key = settings.iter().find(|s| s["name"] == "api_key").unwrap();
    assert_eq!(api_key["secret"], true);
    assert_eq!(api_key["default"], Value::Null);
    assert_eq!(api_key["env"][0], "ABX_OPENSANDBOX_API_KEY");
    let base_url = settings.iter().find(|s| s["name"] == "base_url").unwrap();
    assert_eq!(base_url["default"], "http://127.0.0.1:8080");
    assert_eq!(base_url["secret"], false);
    // What it needs from its host (needs(), abx:epp 1.1): names, never values.
    let needs = &m["needs"];
    assert_eq!(needs["origin"][0], "{base_url}");
    assert_eq!(needs["allow_hosts_env"][0], "ABX_OPENSANDBOX_ALLOW_HOSTS");
    assert_eq!(needs["secret_headers"][0]["setting"], "api_key");
    assert_eq!(needs["secret_headers"][0]["scope"], "origin");

    // inspect derives the same manifest and finds the file beside the component.
    let (ok, report) = release.inspect();
    assert!(ok, "{report:#}");
    assert_eq!(report["manifest"], m);
    assert_eq!(report["sha256"], m["sha256"]);
    assert_eq!(report["manifest_file"]["sha256_matches"], true);
    assert_eq!(report["manifest_file"]["matches"], true);
}

#[test]
fn inspect_flags_a_manifest_that_does_not_match() {
    let release = Release::new();
    let mut m = read_json(&release.manifest());
    m["capabilities"]["ports.domain"] = Value::Bool(true);
    std::fs::write(release.manifest(), m.to_string()).unwrap();
    let (ok, report) = release.inspect();
    assert!(!ok, "inspect must fail on a manifest that lies");
    assert_eq!(report["manifest_file"]["sha256_matches"], true);
    assert_eq!(report["manifest_file"]["matches"], false);
    let problems = report["manifest_file"]["problems"].to_string();
    assert!(problems.contains("capabilities"), "{problems}");

    // Another component (here: one more signature) no longer matches its sha256.
    let (sec, pub_) = release.keygen("next");
    let wasm = release.wasm();
    let w = wasm.to_str().unwrap();
    let out = release.epp_host(&[
        "sign",
        w,
        "-k",
        sec.to_str().unwrap(),
        "-K",
        pub_.to_str().unwrap(),
        "-o",
        w,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (ok, report) = release.inspect();
    assert!(!ok);
    assert_eq!(report["manifest_file"]["sha256_matches"], false);
}

#[test]
fn manifest_refuses_a_key_that_did_not_sign() {
    let release = Release::new();
    let (_, pub_) = release.keygen("other");
    let out = release.epp_host(&[
        "manifest",
        release.wasm().to_str().unwrap(),
        "--public-key",
        pub_.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not trusted"), "{}", stderr(&out));
}
