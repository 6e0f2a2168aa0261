//! templates.read and templates.build against the real server: the
//! provider's own templates (image names) and the server's snapshots.

use epp_e2e::{Host, HostBuilder, Mode, both_modes, unique};
use serde_json::{Value, json};

fn templates(host: &Host) -> Vec<Value> {
    host.ok("templates.list", json!({}))["templates"]
        .as_array()
        .unwrap()
        .clone()
}

fn named<'a>(list: &'a [Value], name: &str) -> &'a Value {
    list.iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no template {name} in {list:?}"))
}

fn provider_templates(mode: Mode) {
    let host = HostBuilder::new(mode)
        .env("ABX_OPENSANDBOX_IMAGE_ALIASES", "node=node:20")
        .spawn();
    let list = templates(&host);
    for (name, image) in [
        ("base", "python:3.12-slim"),
        ("code", "opensandbox/code-interpreter:v1.1.0"),
        ("node", "node:20"),
    ] {
        let t = named(&list, name);
        assert_eq!(t["image"], image, "{t}");
        assert!(t["snapshot"].is_null(), "{t}");
        assert_eq!(&host.ok("templates.get", json!({"name": name})), t);
    }

    let e = host.fails(
        "templates.get",
        json!({"name": "no-such-template"}),
        "E4004",
    );
    assert!(e.message.contains("`no-such-template`"), "{e:?}");
    let e = host.fails(
        "templates.get",
        json!({"name": "python:3.12-slim"}),
        "E4004",
    );
    assert!(e.message.contains("image URI"), "{e:?}");
    let e = host.fails(
        "sandbox.create",
        json!({"template": "no-such-template"}),
        "E4004",
    );
    for words in [
        "unknown template `no-such-template`",
        "base, code, node",
        "ABX_OPENSANDBOX_IMAGE_ALIASES",
        "templates.list",
    ] {
        assert!(e.message.contains(words), "{words}: {e:?}");
    }
    let e = host.fails("templates.remove", json!({"name": "code"}), "E1001");
    assert!(e.message.contains("not a snapshot"), "{e:?}");
    host.fails(
        "templates.remove",
        json!({"name": "no-such-template"}),
        "E4004",
    );
}
both_modes!(
    the_providers_templates_are_listed,
    super::provider_templates
);

fn build_refusals(mode: Mode) {
    let host = Host::start(mode);
    let sandbox = host.create_sandbox();
    let name = unique("tpl");
    for (params, code, words) in [
        (
            json!({"name": name, "dockerfile": "FROM python:3.12-slim"}),
            "E8004",
            "OpenSandbox builds no images",
        ),
        (
            json!({"name": name, "base_image": "alpine:3"}),
            "E8004",
            "use its URI as sandbox.create's `template`",
        ),
        (json!({"name": name}), "E1001", "exactly one of"),
        (
            json!({"name": name, "base_image": "alpine:3", "from_sandbox": sandbox}),
            "E1001",
            "not base_image and from_sandbox",
        ),
        (
            json!({"name": "base", "from_sandbox": sandbox}),
            "E4009",
            "one of the provider's templates",
        ),
        (
            json!({"name": "py:3", "from_sandbox": sandbox}),
            "E1001",
            "cannot be a template name",
        ),
    ] {
        let e = host.fails("templates.build", params.clone(), code);
        assert!(e.message.contains(words), "{params}: {e:?}");
    }
    // This testbed's runtime takes no snapshots (the server answers 501):
    // E8004 saying so, and no snapshot is left.
    let e = host.fails(
        "templates.build",
        json!({"name": name, "from_sandbox": sandbox}),
        "E8004",
    );
    assert!(e.message.contains("cannot snapshot sandboxes"), "{e:?}");
    assert_eq!(e.data["http_status"], 501, "{e:?}");
    let snapshots: Vec<Value> = templates(&host)
        .into_iter()
        .filter(|t| !t["snapshot"].is_null())
        .collect();
    assert_eq!(snapshots, Vec::<Value>::new());
    host.fails("templates.get", json!({"name": name}), "E4004");
    let e = host.fails(
        "templates.build",
        json!({"name": name, "from_sandbox": "no-such-sandbox"}),
        "E4004",
    );
    assert!(e.message.contains("no-such-sandbox"), "{e:?}");
}
both_modes!(builds_that_cannot_be_made_say_why, super::build_refusals);
