use super::test_provider;
use super::*;
use crate::contract::bindings::abx::epp::types::{Capabilities, SecretHeader as WitSecretHeader};
use std::collections::HashMap;

/// An example provider with a URL setting, a host + scheme pair and a secret key.
fn info() -> ProviderInfo {
    test_provider(&[
        ("base_url", &["EX_BASE_URL", "EX_URL"], false),
        ("domain", &["EX_DOMAIN"], false),
        ("protocol", &["EX_PROTOCOL"], false),
        ("api_key", &["EX_API_KEY", "EX_KEY"], true),
        ("label", &["EX_LABEL"], false),
    ])
}

fn needs(origin: &[&str]) -> ProviderNeeds {
    ProviderNeeds {
        capabilities: Capabilities::empty(),
        origin: origin.iter().map(|s| s.to_string()).collect(),
        origin_host_any_port: true,
        allow_hosts_env: vec!["EX_ALLOW_HOSTS".into()],
        secret_headers: vec![WitSecretHeader {
            setting: "api_key".into(),
            header: "X-Ex-Key".into(),
            scope: HeaderScope::Origin,
        }],
        generic_settings: Vec::new(),
    }
}

const TEMPLATES: &[&str] = &[
    "{base_url}",
    "{domain}",
    "{protocol=http}://{domain}",
    "http://127.0.0.1:8080",
];

fn resolve_with(needs: &ProviderNeeds, vars: &[(&str, &str)]) -> Result<Grant, String> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Grant::resolve(&info(), needs, &|name| vars.get(name).cloned(), &[])
}

fn origin_of(vars: &[(&str, &str)]) -> Option<(String, String)> {
    let g = resolve_with(&needs(TEMPLATES), vars).unwrap();
    g.origin.map(|o| (o.template, o.dest.to_string()))
}

fn some(template: &str, dest: &str) -> Option<(String, String)> {
    Some((template.to_string(), dest.to_string()))
}

#[test]
fn the_first_template_that_resolves_is_the_origin() {
    // Nothing set: the literal default.
    assert_eq!(
        origin_of(&[]),
        some("http://127.0.0.1:8080", "http://127.0.0.1:8080")
    );
    // The first variable of a setting wins; the second counts when the first is blank.
    assert_eq!(
        origin_of(&[
            ("EX_BASE_URL", "https://a.example/v1"),
            ("EX_URL", "http://b")
        ]),
        some("{base_url}", "https://a.example:443")
    );
    assert_eq!(
        origin_of(&[("EX_BASE_URL", "  "), ("EX_URL", "http://b:81")]),
        some("{base_url}", "http://b:81")
    );
    // A domain without a scheme is not a URL itself: the next template adds one.
    assert_eq!(
        origin_of(&[("EX_DOMAIN", "sbx.example:9000")]),
        some("{protocol=http}://{domain}", "http://sbx.example:9000")
    );
    assert_eq!(
        origin_of(&[("EX_DOMAIN", "sbx.example"), ("EX_PROTOCOL", "https")]),
        some("{protocol=http}://{domain}", "https://sbx.example:443")
    );
    // A domain that is a URL is used as it is.
    assert_eq!(
        origin_of(&[("EX_DOMAIN", "https://d.example:8443")]),
        some("{domain}", "https://d.example:8443")
    );
}

#[test]
fn candidates_that_do_not_parse_are_skipped_with_a_reason() {
    let g = resolve_with(
        &needs(TEMPLATES),
        &[
            ("EX_BASE_URL", "ftp://files.example"),
            ("EX_DOMAIN", "user@evil.example"),
        ],
    )
    .unwrap();
    assert_eq!(
        g.origin.as_ref().unwrap().dest.to_string(),
        "http://127.0.0.1:8080"
    );
    let why: Vec<(&str, &str)> = g
        .skipped
        .iter()
        .map(|s| (s.template.as_str(), s.why.as_str()))
        .collect();
    assert_eq!(why.len(), 3, "{why:?}");
    assert!(why[0].1.contains("scheme `ftp`"), "{why:?}");
    assert!(why[1].1.contains("has no scheme"), "{why:?}");
    assert!(why[2].1.contains("user name or password"), "{why:?}");
    for bad in [
        "http://",
        "http://h:0",
        "http://h:99999",
        "http://h/?q=1",
        "http://h#frag",
        "https://bad host",
        "ws://h",
    ] {
        assert!(parse_origin_url(bad).is_err(), "{bad}");
    }
    assert_eq!(
        parse_origin_url("HTTP://Host.Example.:8080/a/b")
            .unwrap()
            .to_string(),
        "http://host.example:8080"
    );
    assert_eq!(
        parse_origin_url("http://[0:0::1]").unwrap().to_string(),
        "http://[::1]:80"
    );
}

#[test]
fn no_origin_names_the_settings_to_set() {
    let g = resolve_with(&needs(&["{base_url}", "{protocol=http}://{domain}"]), &[]).unwrap();
    assert!(g.origin.is_none());
    let hint = g.missing_origin().unwrap();
    assert!(hint.contains("base_url is not set"), "{hint}");
    assert!(hint.contains("domain is not set"), "{hint}");
    assert!(
        hint.contains("set base_url (EX_BASE_URL, EX_URL) or domain (EX_DOMAIN)"),
        "{hint}"
    );
    assert!(!hint.contains("EX_PROTOCOL"), "{hint}");
    assert!(g.reach().contains("no origin"), "{}", g.reach());
    // A provider that declares no origin needs no warning.
    let g = resolve_with(&needs(&[]), &[]).unwrap();
    assert!(g.origin.is_none() && g.missing_origin().is_none());
    // With an origin there is nothing to warn about.
    let g = resolve_with(&needs(TEMPLATES), &[]).unwrap();
    assert!(g.missing_origin().is_none());
}

#[test]
fn bad_templates_are_the_providers_error() {
    for (template, want) in [
        ("{base_url", "without its `}`"),
        ("base_url}", "without its `{`"),
        ("{}", "without a setting name"),
        ("{=x}", "without a setting name"),
        ("{a{b}}", "do not nest"),
        ("{nope}", "does not declare"),
        ("http://{api_key}", "secret setting `api_key`"),
    ] {
        let err = resolve_with(&needs(&[template]), &[]).unwrap_err();
        assert!(err.contains(template), "{template}: {err}");
        assert!(err.contains(want), "{template}: {err}");
    }
    // Checked even when an earlier template resolves.
    let err = resolve_with(&needs(&["http://ok", "{nope}"]), &[]).unwrap_err();
    assert!(err.contains("{nope}"), "{err}");
}

#[test]
fn template_pieces() {
    assert_eq!(
        parse_template("{p=http}://{d}:80/x").unwrap(),
        [
            Piece::Setting {
                name: "p",
                fallback: Some("http")
            },
            Piece::Text("://"),
            Piece::Setting {
                name: "d",
                fallback: None
            },
            Piece::Text(":80/x"),
        ]
    );
    assert_eq!(
        parse_template("{p=}").unwrap(),
        [Piece::Setting {
            name: "p",
            fallback: Some("")
        }]
    );
    assert!(parse_template("").unwrap().is_empty());
}

#[test]
fn secret_headers_take_the_value_from_the_first_set_variable() {
    let g = resolve_with(
        &needs(TEMPLATES),
        &[("EX_KEY", "second"), ("EX_API_KEY", " first ")],
    )
    .unwrap();
    let h = &g.secret_headers[0];
    assert_eq!(h.header.as_str(), "x-ex-key");
    assert_eq!(h.var.as_deref(), Some("EX_API_KEY"));
    assert_eq!(h.value.as_ref().unwrap().as_bytes(), b"first");
    assert!(h.value.as_ref().unwrap().is_sensitive());
    assert!(!format!("{g:?}").contains("first"), "{g:?}");
    // Redacted by the type itself, not only by the value's sensitive flag.
    let mut h = g.secret_headers[0].clone();
    h.value = Some(HeaderValue::from_static("not-marked-sensitive"));
    let shown = format!("{h:?}");
    assert!(!shown.contains("not-marked"), "{shown}");
    assert!(shown.contains("value: \"<redacted>\""), "{shown}");
    // Unset: declared (and so owned by the host), but nothing to send.
    let g = resolve_with(&needs(TEMPLATES), &[]).unwrap();
    assert!(g.secret_headers[0].value.is_none() && g.secret_headers[0].var.is_none());
    // A value that cannot be a header: refused, without showing it.
    let err = resolve_with(&needs(TEMPLATES), &[("EX_API_KEY", "line\nbreak-secret")]).unwrap_err();
    assert!(err.contains("EX_API_KEY"), "{err}");
    assert!(!err.contains("break-secret"), "{err}");
}

#[test]
fn secret_header_declarations_are_checked() {
    let with = |setting: &str, header: &str| {
        let mut n = needs(TEMPLATES);
        n.secret_headers[0].setting = setting.into();
        n.secret_headers[0].header = header.into();
        resolve_with(&n, &[])
    };
    let err = with("label", "x-label").unwrap_err();
    assert!(err.contains("does not declare `label` secret"), "{err}");
    let err = with("missing", "x-m").unwrap_err();
    assert!(err.contains("declares no setting `missing`"), "{err}");
    let err = with("api_key", "bad header").unwrap_err();
    assert!(err.contains("not a header name"), "{err}");
    let err = with("api_key", "Host").unwrap_err();
    assert!(err.contains("nobody may set"), "{err}");
    let mut n = needs(TEMPLATES);
    n.secret_headers.push(n.secret_headers[0].clone());
    let err = resolve_with(&n, &[]).unwrap_err();
    assert!(err.contains("declared twice"), "{err}");
}

#[test]
fn generic_settings_declarations_are_checked() {
    let with = |pairs: &[(&str, &str)]| {
        let mut n = needs(TEMPLATES);
        n.generic_settings = pairs
            .iter()
            .map(|(k, s)| (k.to_string(), s.to_string()))
            .collect();
        resolve_with(&n, &[])
    };
    with(&[
        ("sandbox_base_url", "base_url"),
        ("sandbox_api_key", "api_key"),
    ])
    .unwrap();
    let err = with(&[("sandbox_region", "base_url")]).unwrap_err();
    assert!(err.contains("not an EPP/1 generic key"), "{err}");
    let err = with(&[("sandbox_base_url", "nope")]).unwrap_err();
    assert!(err.contains("does not declare"), "{err}");
    let err = with(&[
        ("sandbox_base_url", "base_url"),
        ("sandbox_base_url", "domain"),
    ])
    .unwrap_err();
    assert!(err.contains("twice"), "{err}");
}

#[test]
fn allow_hosts_come_from_the_declared_variables_and_the_flag() {
    let vars: HashMap<&str, &str> = [("EX_ALLOW_HOSTS", "a.example, b.example"), ("OTHER", "c")]
        .into_iter()
        .collect();
    let g = Grant::resolve(
        &info(),
        &needs(TEMPLATES),
        &|name| vars.get(name).map(|v| v.to_string()),
        &["d.example".to_string()],
    )
    .unwrap();
    assert_eq!(
        g.allow,
        [
            AllowEntries {
                source: Source::Env("EX_ALLOW_HOSTS".into()),
                entries: "a.example, b.example".into()
            },
            AllowEntries {
                source: Source::Flag,
                entries: "d.example".into()
            },
        ]
    );
    assert_eq!(g.allow_hint(), "EX_ALLOW_HOSTS or --allow-host");
    // Reading hosts from a secret's variable is refused.
    for var in ["EX_KEY", FRAMEWORK_KEY_ENV] {
        let mut n = needs(TEMPLATES);
        n.allow_hosts_env = vec![var.into()];
        let err = resolve_with(&n, &[]).unwrap_err();
        assert!(err.contains(var) && err.contains("secret"), "{err}");
    }
}

#[test]
fn withheld_variables() {
    let g = resolve_with(&needs(TEMPLATES), &[]).unwrap();
    assert_eq!(
        g.withheld().collect::<Vec<_>>(),
        ["EX_API_KEY", "EX_KEY", "EX_ALLOW_HOSTS", FRAMEWORK_KEY_ENV]
    );
}

#[test]
fn a_setting_may_not_read_the_frameworks_key() {
    let mut i = info();
    i.settings[4].env.push(FRAMEWORK_KEY_ENV.into());
    let err = Grant::resolve(&i, &needs(TEMPLATES), &|_| None, &[]).unwrap_err();
    assert!(
        err.contains(FRAMEWORK_KEY_ENV) && err.contains("`label`"),
        "{err}"
    );
}
