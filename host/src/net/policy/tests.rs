use super::*;

fn origin(url: &str) -> Origin {
    Origin::parse_url("TEST", url).unwrap()
}

fn policy(url: &str, allow: &[&str], key: Option<&str>) -> NetPolicy {
    let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
    NetPolicy::new(&origin(url), &allow, key.map(str::to_string)).unwrap()
}

fn dest(scheme: &str, authority: &str) -> Destination {
    Destination::parse(scheme, authority).unwrap()
}

#[test]
fn origin_gets_the_key_and_nothing_else_does() {
    let p = policy("http://127.0.0.1:8080", &[], Some("k-123"));
    let grant = p.check(&dest("http", "127.0.0.1:8080")).unwrap();
    assert_eq!(grant.inject, vec![(API_KEY_HEADER, "k-123".to_string())]);
    // Same host, other port: a sandbox endpoint in direct mode; allowed without the key.
    let grant = p.check(&dest("http", "127.0.0.1:40123")).unwrap();
    assert!(grant.inject.is_empty());
    // Same host and port but https: not the origin, no key.
    let grant = p.check(&dest("https", "127.0.0.1:8080")).unwrap();
    assert!(grant.inject.is_empty());
}

#[test]
fn other_hosts_are_denied_with_the_setting_named() {
    let p = policy("http://127.0.0.1:8080", &[], None);
    for (scheme, authority) in [
        ("http", "127.0.0.2:8080"),
        ("http", "localhost:8080"),
        ("https", "example.com"),
        ("http", "[::1]:8080"),
        ("http", "10.0.0.5:44772"),
    ] {
        let err = p.check(&dest(scheme, authority)).unwrap_err();
        assert!(err.0.contains(ALLOW_HOSTS_ENV), "{authority}: {err}");
        assert!(err.0.contains("not allowed"), "{authority}: {err}");
    }
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
fn bad_allow_entries_are_reported() {
    for entry in ["*.", "10.0.0.0/40", "user@host", "host:port:x:", "a/b"] {
        let err = NetPolicy::new(&origin("http://h:1"), &[entry.to_string()], None).unwrap_err();
        assert!(err.contains("--allow-host"), "{entry}: {err}");
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
    assert!(!format!("{p:?}").contains("very-secret-key"));
}

#[test]
fn host_owned_headers() {
    assert!(is_host_owned_header("open-sandbox-api-key"));
    assert!(is_host_owned_header("X-EXECD-ACCESS-TOKEN"));
    assert!(!is_host_owned_header("content-type"));
}
