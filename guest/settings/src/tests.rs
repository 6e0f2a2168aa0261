use super::*;

fn settings(pairs: &[(&str, &str)]) -> Result<Settings, SettingError> {
    Settings::from_pairs(pairs)
}

#[test]
fn defaults_point_at_local_server() {
    let s = settings(&[]).unwrap();
    assert_eq!(s.origin.api_base(), "http://127.0.0.1:8080/v1");
    assert_eq!(s.image_for("base").as_deref(), Some(DEFAULT_IMAGE));
    assert_eq!(
        s.image_for("code").as_deref(),
        Some("opensandbox/code-interpreter:v1.1.0")
    );
    assert_eq!(s.ready_timeout, 60);
    assert!(!s.use_server_proxy && !s.secure_access);
    assert!(s.api_key.is_none() && s.registry_auth.is_none());
}

#[test]
fn base_url_accepts_trailing_v1_and_first_var_wins() {
    let s = settings(&[
        (
            "ABX_OPENSANDBOX_BASE_URL",
            "https://Sandbox.Example.COM./v1/",
        ),
        ("OPENSANDBOX_BASE_URL", "http://other:1"),
    ])
    .unwrap();
    assert_eq!(s.origin.host, "sandbox.example.com");
    assert_eq!(s.origin.port, 443);
    assert_eq!(s.origin.api_base(), "https://sandbox.example.com:443/v1");
}

#[test]
fn base_url_keeps_a_path_prefix_and_ipv6() {
    let s = settings(&[("OPENSANDBOX_BASE_URL", "http://[::1]:9000/osb/v1")]).unwrap();
    assert_eq!(s.origin.authority(), "[::1]:9000");
    assert_eq!(s.origin.api_base(), "http://[::1]:9000/osb/v1");
}

#[test]
fn domain_and_protocol_are_an_alternative() {
    let s = settings(&[
        ("OPEN_SANDBOX_DOMAIN", "localhost:8081"),
        ("OPEN_SANDBOX_PROTOCOL", "HTTPS"),
    ])
    .unwrap();
    assert_eq!(s.origin.api_base(), "https://localhost:8081/v1");
    let s = settings(&[("OPEN_SANDBOX_DOMAIN", "http://h:1")]).unwrap();
    assert_eq!(s.origin.api_base(), "http://h:1/v1");
}

#[test]
fn bad_values_name_the_variable() {
    let cases = [
        ("ABX_OPENSANDBOX_BASE_URL", "127.0.0.1:8080"),
        ("ABX_OPENSANDBOX_BASE_URL", "ftp://x"),
        ("ABX_OPENSANDBOX_BASE_URL", "http://user:pw@host"),
        ("ABX_OPENSANDBOX_BASE_URL", "http://host:99999"),
        ("ABX_OPENSANDBOX_USE_SERVER_PROXY", "maybe"),
        ("ABX_OPENSANDBOX_READY_TIMEOUT", "soon"),
        ("ABX_OPENSANDBOX_READY_TIMEOUT", "0"),
        ("ABX_OPENSANDBOX_PLATFORM", "linux/riscv"),
        ("ABX_OPENSANDBOX_NETWORK_POLICY", "{not json"),
        ("ABX_OPENSANDBOX_NETWORK_POLICY", "[1]"),
        (
            "ABX_OPENSANDBOX_NETWORK_POLICY",
            "{\"defaultAction\":\"maybe\"}",
        ),
        ("ABX_OPENSANDBOX_IMAGE_ALIASES", "nonsense"),
        ("ABX_OPENSANDBOX_ENTRYPOINT", "[\"unterminated"),
        ("ABX_OPENSANDBOX_SECURE_ACCESS", "2"),
    ];
    for (var, value) in cases {
        let err = settings(&[(var, value)]).expect_err(value);
        assert_eq!(err.var, var, "{value}: {err}");
    }
}

#[test]
fn secrets_stay_out_of_errors_and_debug() {
    let err = settings(&[("ABX_OPENSANDBOX_REGISTRY_PASSWORD", "hunter2-secret")]).unwrap_err();
    assert_eq!(err.var, "ABX_OPENSANDBOX_REGISTRY_USERNAME");
    assert!(!err.to_string().contains("hunter2"));
    let s = settings(&[
        ("ABX_OPENSANDBOX_API_KEY", "key-secret-123"),
        ("ABX_OPENSANDBOX_REGISTRY_USERNAME", "me"),
        ("ABX_OPENSANDBOX_REGISTRY_PASSWORD", "hunter2-secret"),
    ])
    .unwrap();
    let dbg = format!("{s:?}");
    assert!(
        !dbg.contains("key-secret-123") && !dbg.contains("hunter2-secret"),
        "{dbg}"
    );
    assert_eq!(s.api_key.as_deref(), Some("key-secret-123"));
}

#[test]
fn templates_aliases_and_entrypoints() {
    let s = settings(&[
        (
            "ABX_OPENSANDBOX_IMAGE_ALIASES",
            "node=node:20, py = python:3.11",
        ),
        ("ABX_OPENSANDBOX_DEFAULT_IMAGE", "ubuntu:24.04"),
    ])
    .unwrap();
    assert_eq!(s.image_for("node").as_deref(), Some("node:20"));
    assert_eq!(s.image_for("py").as_deref(), Some("python:3.11"));
    assert_eq!(s.image_for("base").as_deref(), Some("ubuntu:24.04"));
    assert_eq!(
        s.image_for("registry.io/x/y:1").as_deref(),
        Some("registry.io/x/y:1")
    );
    assert_eq!(s.image_for("nope"), None);
    for own in ["base", "code", "node", "py"] {
        assert!(s.is_own_template(own), "{own}");
    }
    assert!(!s.is_own_template("nope"));
    assert!(!s.is_own_template("node:20"));
    for uri in ["node:20", "registry.io/x", "localhost:5000/y"] {
        assert!(crate::is_image_uri(uri), "{uri}");
    }
    assert!(!crate::is_image_uri("py-data.v1"));
    assert_eq!(s.template_for("node:20"), "node");
    assert_eq!(s.template_for("ubuntu:24.04"), "base");
    assert_eq!(s.template_for("alpine:3"), "alpine:3");
    assert_eq!(
        s.entrypoint_for("ubuntu:24.04"),
        ["tail", "-f", "/dev/null"]
    );
    assert_eq!(
        s.entrypoint_for("opensandbox/code-interpreter:v1.1.0"),
        ["/opt/code-interpreter/code-interpreter.sh"]
    );
    let s = settings(&[("ABX_OPENSANDBOX_ENTRYPOINT", "[\"sleep\", \"infinity\"]")]).unwrap();
    assert_eq!(
        s.entrypoint_for("opensandbox/code-interpreter:v1.1.0"),
        ["sleep", "infinity"]
    );
    let s = settings(&[("ABX_OPENSANDBOX_ENTRYPOINT", "sleep  infinity")]).unwrap();
    assert_eq!(s.entrypoint_for("x"), ["sleep", "infinity"]);
    // Set to the default value (either form), code-interpreter images keep their script.
    for default in ["tail -f /dev/null", "[\"tail\", \"-f\", \"/dev/null\"]"] {
        let s = settings(&[("ABX_OPENSANDBOX_ENTRYPOINT", default)]).unwrap();
        assert_eq!(s.entrypoint, None, "{default}");
        assert_eq!(
            s.entrypoint_for("opensandbox/code-interpreter:v1.1.0"),
            ["/opt/code-interpreter/code-interpreter.sh"],
            "{default}"
        );
        assert_eq!(
            s.entrypoint_for("ubuntu:24.04"),
            ["tail", "-f", "/dev/null"]
        );
    }
}

#[test]
fn platform_and_policy_parse() {
    let s = settings(&[
        ("ABX_OPENSANDBOX_PLATFORM", "Linux/ARM64"),
        (
            "ABX_OPENSANDBOX_NETWORK_POLICY",
            r#"{"defaultAction":"deny","egress":[]}"#,
        ),
    ])
    .unwrap();
    assert_eq!(
        s.platform,
        Some(Platform {
            os: "linux",
            arch: "arm64"
        })
    );
    assert!(s.network_policy.unwrap().contains("deny"));
}

#[test]
fn guest_env_excludes_api_key_vars() {
    let vars: Vec<_> = guest_env_vars().collect();
    assert!(vars.contains(&"ABX_OPENSANDBOX_BASE_URL"));
    assert!(vars.contains(&"ABX_OPENSANDBOX_REGISTRY_PASSWORD"));
    for key in API_KEY_ENV {
        assert!(!vars.contains(key));
    }
    assert!(!vars.contains(&EXPRESS_KEY_ENV));
    assert_eq!(SETTINGS.iter().flat_map(|s| s.env.iter()).count(), 21);
}

#[test]
fn watch_interval_is_whole_milliseconds_in_range() {
    let var = "ABX_OPENSANDBOX_WATCH_INTERVAL_MS";
    assert_eq!(settings(&[]).unwrap().watch_interval_ms, 500);
    assert_eq!(settings(&[(var, "100")]).unwrap().watch_interval_ms, 100);
    assert_eq!(
        settings(&[(var, "60000")]).unwrap().watch_interval_ms,
        60_000
    );
    for bad in ["99", "60001", "0.5", "fast", "-1"] {
        let e = settings(&[(var, bad)]).unwrap_err();
        assert_eq!(e.var, var);
        assert!(e.message.contains("from 100 to 60000"), "{bad}: {e}");
    }
}

#[test]
fn the_policy_setting_is_checked_like_a_request_policy() {
    let var = "ABX_OPENSANDBOX_NETWORK_POLICY";
    for (bad, words) in [
        ("deny", "is not valid JSON"),
        (r#"{"egres":[]}"#, "unknown key `egres`"),
        (
            r#"{"egress":[{"action":"allow"}]}"#,
            "egress[0] needs a target",
        ),
        (
            r#"{"egress":[{"action":"allow","target":"pypi.org","ports":[443]}]}"#,
            "issue #1647",
        ),
    ] {
        let e = settings(&[(var, bad)]).unwrap_err();
        assert_eq!(e.var, var);
        assert!(e.message.contains(words), "{bad}: {e}");
    }
    let ok = r#"{"egress":[{"action":"allow","target":"10.0.0.0/8","ports":[443]}]}"#;
    assert!(settings(&[(var, ok)]).unwrap().network_policy.is_some());
}
