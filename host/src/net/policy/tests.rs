use super::*;
use crate::net::grant::{AllowEntries, Origin, SecretHeader, Source, parse_origin_url};

/// The example provider's allow-list variable and secret header.
const ALLOW_VAR: &str = "EXAMPLE_ALLOW_HOSTS";
const KEY_HEADER: &str = "x-example-key";

fn header(scope: HeaderScope, value: Option<&str>) -> SecretHeader {
    SecretHeader {
        setting: "api_key".into(),
        header: HeaderName::from_static(KEY_HEADER),
        scope,
        env: vec!["EXAMPLE_API_KEY".into()],
        var: value.map(|_| "EXAMPLE_API_KEY".into()),
        value: value.map(|v| {
            let mut v = HeaderValue::from_str(v).unwrap();
            v.set_sensitive(true);
            v
        }),
    }
}

/// A grant like a typical provider's: origin `url` (any port on its host), `allow`
/// from the flag, the key in `scope`.
fn grant(url: &str, allow: &[&str], key: Option<&str>, scope: HeaderScope) -> Grant {
    Grant {
        origin: Some(Origin {
            template: "{base_url}".into(),
            url: url.into(),
            dest: parse_origin_url(url).unwrap(),
        }),
        origin_host_any_port: true,
        allow: allow
            .iter()
            .map(|entries| AllowEntries {
                source: Source::Flag,
                entries: entries.to_string(),
            })
            .collect(),
        allow_hosts_env: vec![ALLOW_VAR.into()],
        secret_headers: vec![header(scope, key)],
        ..Grant::nothing()
    }
}

fn policy(url: &str, allow: &[&str], key: Option<&str>) -> NetPolicy {
    NetPolicy::new(&grant(url, allow, key, HeaderScope::Origin)).unwrap()
}

fn dest(scheme: &str, authority: &str) -> Destination {
    Destination::parse(scheme, authority).unwrap()
}

fn key(value: &str) -> Vec<(HeaderName, HeaderValue)> {
    vec![(
        HeaderName::from_static(KEY_HEADER),
        HeaderValue::from_str(value).unwrap(),
    )]
}

#[test]
fn origin_gets_the_key_and_nothing_else_does() {
    let p = policy("http://127.0.0.1:8080", &[], Some("k-123"));
    let grant = p.check(&dest("http", "127.0.0.1:8080")).unwrap();
    assert_eq!(grant.inject, key("k-123"));
    assert!(grant.inject[0].1.is_sensitive());
    // Same host, other port: a sandbox endpoint in direct mode; allowed without the key.
    let grant = p.check(&dest("http", "127.0.0.1:40123")).unwrap();
    assert!(grant.inject.is_empty());
    // Same host and port but https: not the origin, no key.
    let grant = p.check(&dest("https", "127.0.0.1:8080")).unwrap();
    assert!(grant.inject.is_empty());
}

#[test]
fn origin_host_scope_covers_every_port_of_the_host_only() {
    let p = NetPolicy::new(&grant(
        "http://127.0.0.1:8080",
        &["127.0.0.3"],
        Some("k-9"),
        HeaderScope::OriginHost,
    ))
    .unwrap();
    for (scheme, authority) in [
        ("http", "127.0.0.1:8080"),
        ("http", "127.0.0.1:40123"),
        ("https", "127.0.0.1:8080"),
    ] {
        let grant = p.check(&dest(scheme, authority)).unwrap();
        assert_eq!(grant.inject, key("k-9"), "{scheme}://{authority}");
    }
    // A listed host is reachable, but it is not the origin's host: no key.
    assert!(
        p.check(&dest("http", "127.0.0.3:8080"))
            .unwrap()
            .inject
            .is_empty()
    );
}

#[test]
fn without_any_port_only_the_origin_itself_is_allowed() {
    let mut g = grant(
        "https://api.example.com",
        &[],
        Some("k"),
        HeaderScope::Origin,
    );
    g.origin_host_any_port = false;
    let p = NetPolicy::new(&g).unwrap();
    assert_eq!(
        p.check(&dest("https", "api.example.com"))
            .unwrap()
            .inject
            .len(),
        1
    );
    for (scheme, authority) in [
        ("https", "api.example.com:8443"),
        ("http", "api.example.com"),
    ] {
        let err = p.check(&dest(scheme, authority)).unwrap_err();
        assert!(err.0.contains("not allowed"), "{authority}: {err}");
        assert!(
            err.0.contains("its origin https://api.example.com:443"),
            "{err}"
        );
        assert!(!err.0.contains("any port"), "{err}");
    }
}

#[test]
fn an_unset_secret_is_not_sent_but_still_owned() {
    let p = policy("http://127.0.0.1:8080", &[], None);
    assert!(
        p.check(&dest("http", "127.0.0.1:8080"))
            .unwrap()
            .inject
            .is_empty()
    );
    assert!(p.owns_header(KEY_HEADER));
}

#[test]
fn other_hosts_are_denied_with_the_setting_named() {
    let p = policy("http://127.0.0.1:8080", &[], None);
    for (scheme, authority) in [
        ("http", "127.0.0.2:8080"),
        ("http", "127.1.0.1:44772"),
        ("https", "example.com"),
        ("http", "localhost.example.com:8080"),
        ("http", "10.0.0.5:44772"),
    ] {
        let err = p.check(&dest(scheme, authority)).unwrap_err();
        assert!(err.0.contains(ALLOW_VAR), "{authority}: {err}");
        assert!(err.0.contains("--allow-host"), "{authority}: {err}");
        assert!(err.0.contains("not allowed"), "{authority}: {err}");
        // It says what the provider may reach: its origin.
        assert!(
            err.0
                .contains("its origin http://127.0.0.1:8080 (any port on that host)"),
            "{authority}: {err}"
        );
    }
}

#[test]
fn loopback_names_are_one_host_for_the_origin_host_rule() {
    // A server configured as `localhost` hands out endpoints on 127.0.0.1, one
    // configured as 127.0.0.1 may be named `localhost` or `::1`: the same host.
    for origin in [
        "http://localhost:8080",
        "http://127.0.0.1:8080",
        "http://[::1]:8080",
        "http://LOCALHOST.:8080",
        "http://[::ffff:127.0.0.1]:8080",
    ] {
        for port_key in [HeaderScope::Origin, HeaderScope::OriginHost] {
            let p = NetPolicy::new(&grant(origin, &[], Some("k-1"), port_key)).unwrap();
            for authority in [
                "localhost:40123",
                "127.0.0.1:40123",
                "[::1]:40123",
                "localhost:8080",
            ] {
                let allowed = p
                    .check(&dest("http", authority))
                    .unwrap_or_else(|e| panic!("{origin} -> {authority}: {e}"));
                // Origin-scoped secrets go to the origin exactly as configured;
                // origin-host-scoped ones to any port on the (loopback) host.
                let exact = parse_origin_url(origin).unwrap() == dest("http", authority);
                let expect_key = exact || port_key == HeaderScope::OriginHost;
                assert_eq!(
                    allowed.inject.len(),
                    usize::from(expect_key),
                    "{origin} -> {authority} ({port_key:?})"
                );
            }
            // Other loopback addresses are hosts of their own.
            for authority in ["127.0.0.2:40123", "127.0.1.1:8080", "[::2]:8080"] {
                let err = p.check(&dest("http", authority)).unwrap_err();
                assert!(err.0.contains(ALLOW_VAR), "{origin} -> {authority}: {err}");
            }
        }
    }
    // Without `origin-host-any-port` only the origin itself is allowed, under
    // the name it was configured with.
    let mut g = grant("http://localhost:8080", &[], Some("k"), HeaderScope::Origin);
    g.origin_host_any_port = false;
    let p = NetPolicy::new(&g).unwrap();
    assert_eq!(
        p.check(&dest("http", "localhost:8080"))
            .unwrap()
            .inject
            .len(),
        1
    );
    assert!(p.check(&dest("http", "127.0.0.1:8080")).is_err());
    // A non-loopback origin has no loopback aliases.
    let p = policy("http://10.0.0.5:8080", &[], None);
    assert!(p.check(&dest("http", "10.0.0.5:44772")).is_ok());
    assert!(p.check(&dest("http", "127.0.0.1:44772")).is_err());
    assert!(p.check(&dest("http", "localhost:8080")).is_err());
    assert!(same_host("localhost", "::1") && !same_host("localhost", "127.0.0.2"));
}

#[test]
fn no_origin_means_only_listed_hosts() {
    let mut g = grant(
        "http://127.0.0.1:8080",
        &["127.0.0.3"],
        Some("k"),
        HeaderScope::Origin,
    );
    g.origin = None;
    g.skipped = vec![crate::net::grant::Skipped {
        template: "{base_url}".into(),
        why: "base_url is not set".into(),
    }];
    let p = NetPolicy::new(&g).unwrap();
    let err = p.check(&dest("http", "127.0.0.1:8080")).unwrap_err();
    assert!(err.0.contains("no origin"), "{err}");
    // A listed host is reachable, and never gets the key.
    assert!(
        p.check(&dest("http", "127.0.0.3:1"))
            .unwrap()
            .inject
            .is_empty()
    );
    // Nothing is allowed at all by the empty policy.
    let none = NetPolicy::deny_all();
    assert!(none.check(&dest("http", "127.0.0.1:8080")).is_err());
    assert!(none.check(&dest("http", "127.0.0.3:1")).is_err());
}

#[test]
fn normalisation_before_matching() {
    let p = policy("http://sandbox.example.com:8080", &[], Some("k"));
    for authority in ["SANDBOX.Example.com:8080", "sandbox.example.com.:8080"] {
        let grant = p.check(&dest("http", authority)).unwrap();
        assert_eq!(grant.inject.len(), 1, "{authority}");
    }
    // Default ports.
    let p = policy("https://api.example.com", &[], Some("k"));
    assert_eq!(
        p.check(&dest("https", "api.example.com"))
            .unwrap()
            .inject
            .len(),
        1
    );
    assert_eq!(
        p.check(&dest("wss", "api.example.com:443"))
            .unwrap()
            .inject
            .len(),
        1
    );
    assert!(
        p.check(&dest("http", "api.example.com"))
            .unwrap()
            .inject
            .is_empty()
    );
    // IPv6 with brackets.
    let p = policy("http://[::1]:8080", &[], Some("k"));
    assert_eq!(
        p.check(&dest("http", "[::1]:8080")).unwrap().inject.len(),
        1
    );
    // IPv6 literals are compared in canonical form.
    assert_eq!(
        p.check(&dest("ws", "[0:0::1]:8080")).unwrap().inject.len(),
        1
    );
    assert!(p.check(&dest("ws", "[::2]:8080")).is_err());
}

#[test]
fn userinfo_and_bad_schemes_are_refused() {
    assert!(Destination::parse("http", "user@127.0.0.1:8080").is_err());
    assert!(Destination::parse("http", "127.0.0.1:8080@evil.com").is_err());
    assert!(Destination::parse("ftp", "127.0.0.1").is_err());
    assert!(Destination::parse("file", "").is_err());
    assert!(Destination::parse("http", "host:notaport").is_err());
    assert!(Destination::parse("http", "[::1").is_err());
}

#[test]
fn link_local_and_metadata_denied_unless_exactly_listed() {
    let p = policy(
        "http://127.0.0.1:8080",
        &["169.254.0.0/16", "*.internal"],
        None,
    );
    for authority in [
        "169.254.169.254",
        "[fe80::1]:80",
        "[::ffff:169.254.169.254]:80",
        "metadata.google.internal",
        "[fd00:ec2::254]",
    ] {
        let err = p.check(&dest("http", authority)).unwrap_err();
        assert!(err.0.contains("link-local"), "{authority}: {err}");
        assert!(err.0.contains(ALLOW_VAR), "{authority}: {err}");
    }
    let p = policy("http://127.0.0.1:8080", &["169.254.169.254:80"], None);
    assert!(p.check(&dest("http", "169.254.169.254")).is_ok());
    assert!(p.check(&dest("http", "169.254.169.254:81")).is_err());
}

#[test]
fn allow_list_forms() {
    let p = policy(
        "http://127.0.0.1:8080",
        &[
            "10.0.0.0/8, *.sandboxes.example.com",
            "gw.example.com:443 [2001:db8::1]",
            "::2",
        ],
        None,
    );
    assert!(p.check(&dest("http", "10.1.2.3:44772")).is_ok());
    assert!(p.check(&dest("http", "11.1.2.3:44772")).is_err());
    assert!(
        p.check(&dest("https", "abc-44772.sandboxes.example.com"))
            .is_ok()
    );
    assert!(p.check(&dest("https", "sandboxes.example.com")).is_err());
    assert!(
        p.check(&dest("https", "evilsandboxes.example.com"))
            .is_err()
    );
    assert!(p.check(&dest("https", "gw.example.com")).is_ok());
    assert!(p.check(&dest("http", "gw.example.com:80")).is_err());
    assert!(p.check(&dest("http", "[2001:db8::1]:9")).is_ok());
    assert!(p.check(&dest("http", "[::2]:9")).is_ok());
}

#[test]
fn bad_allow_entries_are_reported_with_their_source() {
    for entry in ["*.", "10.0.0.0/40", "user@host", "host:port:x:", "a/b"] {
        let mut g = grant("http://h:1", &[entry], None, HeaderScope::Origin);
        let err = NetPolicy::new(&g).unwrap_err();
        assert!(err.starts_with("--allow-host: "), "{entry}: {err}");
        g.allow[0].source = Source::Env(ALLOW_VAR.into());
        let err = NetPolicy::new(&g).unwrap_err();
        assert!(err.starts_with(&format!("{ALLOW_VAR}: ")), "{entry}: {err}");
    }
}

#[test]
fn resolved_addresses_are_checked() {
    let p = policy(
        "http://127.0.0.1:8080",
        &["rebind.example.com", "*.example.org"],
        None,
    );
    let link_local: IpAddr = "169.254.169.254".parse().unwrap();
    // Exactly listed: the operator vouched for the name.
    assert!(p.check_resolved("rebind.example.com", link_local).is_ok());
    let err = p.check_resolved("a.example.org", link_local).unwrap_err();
    assert!(err.0.contains("resolves to the link-local"), "{err}");
    assert!(err.0.contains(ALLOW_VAR), "{err}");
    let err = p
        .check_resolved("a.example.org", "fe80::1".parse().unwrap())
        .unwrap_err();
    assert!(err.0.contains("a.example.org"), "{err}");
    assert!(
        p.check_resolved("a.example.org", "127.0.0.1".parse().unwrap())
            .is_ok()
    );
}

#[test]
fn debug_never_shows_the_key() {
    let p = policy("http://127.0.0.1:8080", &[], Some("very-secret-key"));
    let text = format!("{p:?}");
    assert!(!text.contains("very-secret-key"), "{text}");
    assert!(text.contains(KEY_HEADER), "{text}");
    // Nor does what a request to the origin is allowed (the header it gets).
    let dest = Destination::parse("http", "127.0.0.1:8080").unwrap();
    let allowed = p.check(&dest).unwrap();
    assert_eq!(allowed.inject.len(), 1);
    let text = format!("{allowed:?}");
    assert!(!text.contains("very-secret-key"), "{text}");
    assert!(text.contains("<redacted>"), "{text}");
}

#[test]
fn host_owned_headers_are_exactly_the_declared_secret_headers() {
    let p = policy("http://127.0.0.1:8080", &[], Some("k"));
    assert!(p.owns_header(KEY_HEADER));
    assert!(p.owns_header("X-Example-KEY"));
    assert_eq!(
        p.owned_headers()
            .map(HeaderName::as_str)
            .collect::<Vec<_>>(),
        [KEY_HEADER]
    );
    // Headers the provider did not declare are the guest's own, e.g. an
    // endpoint's access token the backend handed to the guest.
    assert!(!p.owns_header("x-execd-access-token"));
    assert!(!p.owns_header("content-type"));
    assert!(!NetPolicy::deny_all().owns_header(KEY_HEADER));
}
