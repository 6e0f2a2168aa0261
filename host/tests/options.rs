//! `provider_options` in `epp.hello`, against the probe: a client's values for
//! the provider's settings (by name, or by EPP/1's generic keys the provider
//! maps) go ahead of the operator's environment, the grant is made again from
//! them (origin, secret header, guest environment), the provider checks them
//! first, the framework's key is never forwarded, and once a call has reached
//! the provider they can no longer change.

mod common;

use common::*;
use serde_json::{Value, json};

/// The probe's environment, one `NAME=value` a line.
fn guest_env(host: &mut Host) -> String {
    let (_, _, dump) = error(&host.probe("env"));
    dump
}

fn hello(host: &mut Host, options: Value) -> Value {
    host.call("epp.hello", json!({"provider_options": options}))
}

fn assert_no_secret(host: &Host, secret: &str) {
    assert!(!host.transcript().contains(secret), "a secret on stdout");
    assert!(!host.log().contains(secret), "a secret on stderr");
}

#[test]
fn options_go_ahead_of_the_environment_and_the_grant_follows() {
    let first = Echo::start("first", "127.0.0.1");
    let second = Echo::start("second", "127.0.0.2");
    let mut host = HostBuilder::new()
        .origin(&first)
        .env(LABEL_ENV, "from-env")
        .spawn();
    let secret = "sk-from-provider-options-5e6f";
    let answer = hello(
        &mut host,
        json!({"label": "from-options", "sandbox_base_url": second.url(""),
               "sandbox_api_key": secret}),
    );
    // The answer names what was applied, by the key the client used.
    assert_eq!(
        result(&answer)["provider_options"],
        json!({"applied": {"label": "label", "sandbox_base_url": "base_url",
                           "sandbox_api_key": "token"}, "ignored": []})
    );
    let env = guest_env(&mut host);
    assert!(env.contains("EPP_PROBE_LABEL=from-options\n"), "{env}");
    assert!(
        env.contains(&format!("EPP_PROBE_BASE_URL={}\n", second.url(""))),
        "{env}"
    );
    // The secret is injected by the host, to the new origin only, and never
    // enters the guest.
    assert!(!env.contains(secret) && !env.contains(SECRET_KEY), "{env}");
    let resp = host.probe(&format!("fetch {}", second.url("/by-option")));
    assert_eq!(meta(&resp, "status"), Some("200"), "{resp}");
    let resp = host.probe(&format!("fetch {}", first.url("/old-origin")));
    assert_eq!(meta(&resp, "error"), Some("HTTP-request-denied"), "{resp}");
    let hits = second.hits();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].api_key.as_deref(), Some(secret));
    assert!(first.hits().is_empty());
    assert_no_secret(&host, secret);
}

#[test]
fn a_bad_option_is_refused_in_hello_and_changes_nothing() {
    let origin = Echo::start("origin", "127.0.0.1");
    let mut host = HostBuilder::new()
        .origin(&origin)
        .env(LABEL_ENV, "from-env")
        .spawn();
    // The provider's own check, naming the option.
    let (_, epp, message) = error(&hello(&mut host, json!({"label": "invalid"})));
    assert_eq!(epp, "E2001", "{message}");
    assert!(
        message.contains("provider_options.label: `invalid` is not a label"),
        "{message}"
    );
    // The host's: unknown keys, and values a header cannot carry.
    let (code, epp, message) = error(&hello(&mut host, json!({"lable": "x"})));
    assert_eq!((code, epp.as_str()), (-32602, "E1001"));
    assert!(
        message.contains("unknown provider option `lable`") && message.contains("label"),
        "{message}"
    );
    let (_, epp, message) = error(&hello(&mut host, json!({"token": "a\nb"})));
    assert_eq!(epp, "E1001");
    assert!(message.contains("`token`"), "{message}");
    // Nothing changed: still not a call to the provider, so options still work.
    let env = guest_env(&mut host);
    assert!(env.contains("EPP_PROBE_LABEL=from-env\n"), "{env}");
}

#[test]
fn after_a_call_options_are_a_conflict() {
    let origin = Echo::start("origin", "127.0.0.1");
    let mut host = HostBuilder::new().origin(&origin).spawn();
    assert!(result(&hello(&mut host, json!({"label": "one"}))).is_object());
    // Again, before any call: the last hello wins.
    assert!(result(&hello(&mut host, json!({"label": "two"}))).is_object());
    assert!(guest_env(&mut host).contains("EPP_PROBE_LABEL=two\n"));
    let (_, epp, message) = error(&hello(&mut host, json!({"label": "three"})));
    assert_eq!(epp, "E4009", "{message}");
    assert!(
        message.contains("before the first call to the provider"),
        "{message}"
    );
    assert!(guest_env(&mut host).contains("EPP_PROBE_LABEL=two\n"));
    // A hello without options still answers.
    assert_eq!(
        result(&host.call("epp.hello", json!({})))["protocol"],
        "EPP/1"
    );
}

#[test]
fn the_frameworks_key_is_never_forwarded() {
    let origin = Echo::start("origin", "127.0.0.1");
    let framework = "fw-key-0a1b2c3d-EXPRESS";
    let mut host = HostBuilder::new()
        .origin(&origin)
        .env("ABX_SANDBOX_API_KEY", framework)
        .spawn();
    // Under the generic key (as a framework passes it to every provider): ignored.
    let answer = hello(&mut host, json!({"sandbox_api_key": framework}));
    let options = &result(&answer)["provider_options"];
    assert_eq!(options["applied"], json!({}));
    assert_eq!(options["ignored"].as_array().unwrap().len(), 1, "{options}");
    // Under the setting's own name: refused.
    let (_, epp, message) = error(&hello(&mut host, json!({"token": framework})));
    assert_eq!(epp, "E1001");
    assert!(message.contains("ABX_SANDBOX_API_KEY"), "{message}");
    // The operator's key is what the origin gets.
    let resp = host.probe(&format!("fetch {}", origin.url("/x")));
    assert_eq!(meta(&resp, "status"), Some("200"), "{resp}");
    assert_eq!(origin.hits()[0].api_key.as_deref(), Some(SECRET_KEY));
    assert!(!guest_env(&mut host).contains(framework));
    assert_no_secret(&host, framework);
}
