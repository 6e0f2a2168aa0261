//! templates.read and templates.build against the real server: the
//! provider's own templates (image names) on both tiers, the server's
//! snapshots on the Docker tier (the local one takes none).

use epp_e2e::{
    Fault, FaultProxy, Host, HostBuilder, Mode, both_modes, docker_inspect, docker_testbed,
    sandbox_container, sh, unique,
};
use serde_json::{Value, json};
use std::time::Duration;

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

// ------------------------------------------------------------------ Docker tier
// Snapshots are real there: `docker commit` of the sandbox's container.

/// The Docker image the server keeps a snapshot in.
fn snapshot_image(snapshot_id: &str) -> String {
    format!("opensandbox-snapshots:{snapshot_id}")
}

fn sandbox_ids_of(host: &Host, tag: &str) -> Vec<(String, Value)> {
    host.ok("sandbox.list", json!({"metadata": {"e2e-tpl": tag}}))["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["sandbox_id"].as_str().unwrap().to_string(),
                s["template"].clone(),
            )
        })
        .collect()
}

/// A file written before `templates.build` is in a sandbox made from the
/// template (and one written after is not); list and get show it, by name and
/// by id; remove makes a create from it E4004 naming it.
fn snapshot_round_trip(mode: Mode) {
    let host = Host::start_docker(mode);
    let tag = unique("tpl");
    let source = host.create_info(json!({"metadata": {"e2e-tpl": tag}}))["sandbox_id"]
        .as_str()
        .unwrap()
        .to_string();
    let marker = unique("marker");
    sh(
        &host,
        &source,
        &format!("mkdir -p /opt/e2e && echo {marker} > /opt/e2e/before.txt"),
    );
    let name = unique("tpl");
    let built = host.ok(
        "templates.build",
        json!({"name": name, "from_sandbox": source}),
    );
    assert_eq!(built["name"], name.as_str(), "{built}");
    assert!(built["image"].is_null(), "{built}");
    let snap = &built["snapshot"];
    assert_eq!(snap["state"], "ready", "{built}");
    assert_eq!(snap["sandbox_id"], source.as_str(), "{built}");
    let snapshot_id = snap["snapshot_id"].as_str().unwrap().to_string();
    assert!(
        docker_inspect(&snapshot_image(&snapshot_id)).is_some(),
        "no image for snapshot {snapshot_id}"
    );
    sh(&host, &source, "echo later > /opt/e2e/after.txt");

    // Listed beside the provider's own, and got by name and by id.
    let list = templates(&host);
    assert_eq!(named(&list, &name), &built);
    assert_eq!(named(&list, "base")["image"], "python:3.12-slim");
    assert_eq!(host.ok("templates.get", json!({"name": name})), built);
    assert_eq!(
        host.ok("templates.get", json!({"name": snapshot_id})),
        built
    );
    // The name is taken now.
    let e = host.fails(
        "templates.build",
        json!({"name": name, "from_sandbox": source}),
        "E4009",
    );
    assert!(e.message.contains(&snapshot_id), "{e:?}");

    // A sandbox from the template: the container runs the snapshot's image and
    // has the file as it was at the build.
    let made = host.create_info(json!({"template": name, "metadata": {"e2e-tpl": tag}}));
    let id = made["sandbox_id"].as_str().unwrap().to_string();
    assert_eq!(made["template"], name.as_str(), "{made}");
    assert!(made["image"].is_null(), "{made}");
    let c = docker_inspect(&sandbox_container(&id)).expect("the sandbox's container");
    assert_eq!(c["Config"]["Image"], snapshot_image(&snapshot_id).as_str());
    assert_eq!(
        sh(&host, &id, "cat /opt/e2e/before.txt; ls /opt/e2e"),
        format!("{marker}\nbefore.txt\n")
    );
    // Another process names the template from the server alone.
    let other = Host::start_docker(mode);
    let info = other.ok("sandbox.get_info", json!({"sandbox_id": id}));
    assert_eq!(info["template"], name.as_str(), "{info}");
    // By id, too.
    let by_id = host.create_info(json!({"template": snapshot_id, "metadata": {"e2e-tpl": tag}}));
    assert_eq!(by_id["template"], name.as_str(), "{by_id}");
    let listed = sandbox_ids_of(&other, &tag);
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(listed[0], (source.clone(), json!("base")));
    assert!(
        listed[1..].iter().all(|(_, t)| *t == json!(name)),
        "{listed:?}"
    );

    // On Docker the image stays while a container uses it: the removal says
    // which sandboxes to kill.
    let e = host.fails("templates.remove", json!({"name": name}), "E4009");
    for words in [
        id.as_str(),
        by_id["sandbox_id"].as_str().unwrap(),
        "still in use",
    ] {
        assert!(e.message.contains(words), "{words}: {e:?}");
    }
    host.ok("sandbox.kill", json!({"sandbox_id": id}));
    host.ok("sandbox.kill", json!({"sandbox_id": by_id["sandbox_id"]}));
    host.ok("templates.remove", json!({"name": name}));
    assert!(docker_inspect(&snapshot_image(&snapshot_id)).is_none());
    let e = host.fails(
        "sandbox.create",
        json!({"template": name, "metadata": {"e2e-tpl": tag}}),
        "E4004",
    );
    assert!(e.message.contains(&format!("`{name}`")), "{e:?}");
    host.fails("templates.get", json!({"name": name}), "E4004");
    host.fails("templates.remove", json!({"name": name}), "E4004");
    assert!(templates(&host).iter().all(|t| t["name"] != name.as_str()));
    // The sandbox it was made from never noticed.
    assert_eq!(sh(&host, &source, "cat /opt/e2e/after.txt"), "later\n");
}
both_modes!(
    a_sandbox_from_a_template_has_its_files,
    super::snapshot_round_trip
);

/// A build cancelled while the server's answer to its POST is held back
/// (the provider does not know the snapshot's id yet), and one cancelled
/// while it waits for the snapshot to be ready: neither leaves a snapshot.
fn cancelled_builds(mode: Mode) {
    let proxy = FaultProxy::start(&docker_testbed().url);
    let host = HostBuilder::docker(mode).via(&proxy).spawn();
    host.ok("epp.hello", json!({}));
    let source = host.create_sandbox();
    for (method, path) in [("POST", "/snapshots"), ("GET", "/snapshots/")] {
        let name = unique("cancel");
        proxy.fault(method, path, Fault::Hold, 1);
        let req = host.send(
            "templates.build",
            json!({"name": name, "from_sandbox": source}),
        );
        let held = proxy.wait_held(Duration::from_secs(60));
        let snapshot_id = held.json()["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no id in {:?}", held.json()))
            .to_string();
        assert_eq!(
            host.ok("epp.cancel", json!({"id": req})),
            json!({"cancelled": true})
        );
        let e = match host.wait(&req, Duration::from_secs(60)) {
            Ok(v) => panic!("the cancelled build answered {v}"),
            Err(e) => e,
        };
        assert_eq!((e.code, e.epp.as_str()), (-32800, "E4999"), "{e:?}");
        assert!(
            e.message
                .contains(&format!("; undone: removed snapshot {snapshot_id}")),
            "{method} {path} held: {e:?}"
        );
        proxy.release();
        host.fails("templates.get", json!({"name": name}), "E4004");
        host.fails("templates.get", json!({"name": snapshot_id}), "E4004");
        assert!(docker_inspect(&snapshot_image(&snapshot_id)).is_none());
    }
}
both_modes!(
    a_cancelled_build_leaves_no_snapshot,
    super::cancelled_builds
);

/// The server says the snapshot failed (the fault proxy answers the build's
/// read of it so; Docker's own commit does not fail on demand): the build
/// answers E5001 with the server's words, and the snapshot it made is removed.
#[test]
fn a_failed_build_says_why_and_leaves_nothing() {
    let proxy = FaultProxy::start(&docker_testbed().url);
    let host = HostBuilder::docker(Mode::Direct).via(&proxy).spawn();
    host.ok("epp.hello", json!({}));
    let source = host.create_sandbox();
    let name = unique("failed");
    proxy.fault("POST", "/snapshots", Fault::Hold, 1);
    let req = host.send(
        "templates.build",
        json!({"name": name, "from_sandbox": source}),
    );
    let made = proxy.wait_held(Duration::from_secs(60)).json();
    let snapshot_id = made["id"].as_str().unwrap().to_string();
    let failed = json!({
        "id": snapshot_id, "sandboxId": source, "name": name, "createdAt": made["createdAt"],
        "status": {"state": "Failed", "reason": "snapshot_runtime_failed", "message": "no space left on device"},
    });
    proxy.fault(
        "GET",
        &format!("/snapshots/{snapshot_id}"),
        Fault::Body(200, failed.to_string()),
        1,
    );
    proxy.release();
    let e = match host.wait(&req, Duration::from_secs(60)) {
        Ok(v) => panic!("the failed build answered {v}"),
        Err(e) => e,
    };
    assert_eq!(e.epp, "E5001", "{e:?}");
    for words in [
        format!("could not snapshot sandbox {source}"),
        "snapshot_runtime_failed: no space left on device".to_string(),
    ] {
        assert!(e.message.contains(&words), "{words}: {e:?}");
    }
    // Removed by the build itself, or, when the real snapshot was still being
    // committed (the server refuses to delete it then), by the undo after it;
    // the answer says why the first removal failed and what follows.
    if !e.message.contains("; it was removed") {
        for words in [
            "removing it failed (".to_string(),
            "still being created".to_string(),
            "so the undo that follows tries again".to_string(),
            format!("; undone: removed snapshot {snapshot_id}"),
        ] {
            assert!(e.message.contains(&words), "{words}: {e:?}");
        }
    }
    host.fails("templates.get", json!({"name": snapshot_id}), "E4004");
    assert!(docker_inspect(&snapshot_image(&snapshot_id)).is_none());
}

/// Two builds of one name at once, both finding it free: the one begun later
/// gives way (E4009 naming the other) and its snapshot is undone; the name
/// stands for one snapshot. The fault proxy holds the first build's check of
/// the name until the second has finished.
#[test]
fn of_two_builds_of_one_name_at_once_one_is_kept() {
    let proxy = FaultProxy::start(&docker_testbed().url);
    let late = HostBuilder::docker(Mode::Direct).via(&proxy).spawn();
    late.ok("epp.hello", json!({}));
    let early = Host::start_docker(Mode::Direct);
    let source = early.create_sandbox();
    let name = unique("race");
    proxy.fault("GET", &format!("name={name}"), Fault::Hold, 1);
    let req = late.send(
        "templates.build",
        json!({"name": name, "from_sandbox": source}),
    );
    let held = proxy.wait_held(Duration::from_secs(60));
    assert_eq!(held.json()["items"], json!([]), "the name is free at first");
    let kept = early.ok(
        "templates.build",
        json!({"name": name, "from_sandbox": source}),
    );
    let kept_id = kept["snapshot"]["snapshot_id"]
        .as_str()
        .unwrap()
        .to_string();
    proxy.release();
    let e = match late.wait(&req, Duration::from_secs(120)) {
        Ok(v) => panic!("both builds of `{name}` answered: {v}"),
        Err(e) => e,
    };
    assert_eq!(e.epp, "E4009", "{e:?}");
    for words in [
        format!("template `{name}` was taken meanwhile: snapshot {kept_id}"),
        "; undone: removed snapshot ".to_string(),
    ] {
        assert!(e.message.contains(&words), "{words}: {e:?}");
    }
    let named: Vec<Value> = templates(&early)
        .into_iter()
        .filter(|t| t["name"] == name.as_str())
        .collect();
    assert_eq!(named, vec![kept.clone()]);
    assert_eq!(early.ok("templates.get", json!({"name": name})), kept);
    early.ok("templates.remove", json!({"name": name}));
}

/// The undo of a build whose POST was never answered removes the snapshot
/// that build made, and leaves an older one of the same sandbox and name
/// alone (here one being deleted, held by a sandbox made from it, which the
/// server would refuse to delete anyway).
#[test]
fn an_unanswered_build_undoes_only_its_own_snapshot() {
    let proxy = FaultProxy::start(&docker_testbed().url);
    let host = HostBuilder::docker(Mode::Direct).via(&proxy).spawn();
    host.ok("epp.hello", json!({}));
    let source = host.create_sandbox();
    let name = unique("older");
    let older = host.ok(
        "templates.build",
        json!({"name": name, "from_sandbox": source}),
    )["snapshot"]["snapshot_id"]
        .as_str()
        .unwrap()
        .to_string();
    let user = host.create_info(json!({"template": name}))["sandbox_id"]
        .as_str()
        .unwrap()
        .to_string();
    host.fails("templates.remove", json!({"name": name}), "E4009");
    let going = host.ok("templates.get", json!({"name": older}));
    assert_eq!(going["snapshot"]["state"], "deleting", "{going}");

    proxy.fault("POST", "/snapshots", Fault::Hold, 1);
    let req = host.send(
        "templates.build",
        json!({"name": name, "from_sandbox": source}),
    );
    let new = proxy.wait_held(Duration::from_secs(60)).json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    host.ok("epp.cancel", json!({"id": req}));
    let e = match host.wait(&req, Duration::from_secs(60)) {
        Ok(v) => panic!("the cancelled build answered {v}"),
        Err(e) => e,
    };
    proxy.release();
    assert_eq!(e.epp, "E4999", "{e:?}");
    assert!(
        e.message
            .ends_with(&format!("; undone: removed snapshot {new}")),
        "{e:?}"
    );
    assert!(!e.message.contains(&older), "{e:?}");
    host.fails("templates.get", json!({"name": new}), "E4004");
    assert!(docker_inspect(&snapshot_image(&new)).is_none());
    assert_eq!(
        host.ok("templates.get", json!({"name": older}))["snapshot"]["state"],
        "deleting"
    );
    host.ok("sandbox.kill", json!({"sandbox_id": user}));
    host.ok("templates.remove", json!({"name": older}));
    assert!(docker_inspect(&snapshot_image(&older)).is_none());
}

/// A sandbox's template is its snapshot's name, asked of the server once per
/// host: a snapshot the server says is gone (404 `SNAPSHOT::NOT_FOUND`) is
/// shown by its id from then on without asking again; another failure shows
/// the id this time only. The fault proxy gives both answers.
#[test]
fn a_gone_snapshot_is_asked_about_once() {
    let maker = Host::start_docker(Mode::Direct);
    let source = maker.create_sandbox();
    let name = unique("gone");
    let snapshot = maker.ok(
        "templates.build",
        json!({"name": name, "from_sandbox": source}),
    )["snapshot"]["snapshot_id"]
        .as_str()
        .unwrap()
        .to_string();
    let id = maker.create_info(json!({"template": name}))["sandbox_id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/snapshots/{snapshot}");
    let template_of =
        |host: &Host| host.ok("sandbox.get_info", json!({"sandbox_id": id}))["template"].clone();

    // The server fails once: the id, then the name once it answers.
    let proxy = FaultProxy::start(&docker_testbed().url);
    proxy.fault("GET", &path, Fault::Status(500), 1);
    let host = HostBuilder::docker(Mode::Direct).via(&proxy).spawn();
    assert_eq!(template_of(&host), json!(snapshot));
    assert_eq!(template_of(&host), json!(name));
    assert_eq!(template_of(&host), json!(name));
    assert_eq!(proxy.count("GET", &path), 2);

    // The server says it is gone: the id, remembered.
    let gone =
        json!({"code": "SNAPSHOT::NOT_FOUND", "message": format!("Snapshot {snapshot} not found")});
    let proxy = FaultProxy::start(&docker_testbed().url);
    proxy.fault("GET", &path, Fault::Body(404, gone.to_string()), 1);
    let host = HostBuilder::docker(Mode::Direct).via(&proxy).spawn();
    assert_eq!(template_of(&host), json!(snapshot));
    assert_eq!(template_of(&host), json!(snapshot));
    assert_eq!(proxy.count("GET", &path), 1);

    maker.ok("sandbox.kill", json!({"sandbox_id": id}));
    maker.ok("templates.remove", json!({"name": name}));
}
