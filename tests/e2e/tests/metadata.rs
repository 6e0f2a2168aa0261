//! sandbox.set_metadata and the pages of sandbox.list against the real
//! server, in direct and server-proxy mode.

use epp_e2e::{Host, Mode, both_modes, unique};
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn metadata_of(host: &Host, id: &str) -> Value {
    host.ok("sandbox.get_info", json!({"sandbox_id": id}))["metadata"].clone()
}

fn set_metadata(mode: Mode) {
    let host = Host::start(mode);
    let tag = unique("meta");
    let info = host.create_info(json!({"metadata": {"e2e-meta": tag, "keep": "1", "drop": "x"}}));
    let id = info["sandbox_id"].as_str().unwrap();

    let set = host.ok(
        "sandbox.set_metadata",
        json!({"sandbox_id": id, "metadata": {"added": "yes", "keep": "2"}, "remove": ["drop", "never-set"]}),
    );
    let want = json!({"e2e-meta": tag, "keep": "2", "added": "yes"});
    assert_eq!(set["sandbox_id"], id);
    assert_eq!(set["metadata"], want, "{set}");
    assert_eq!(metadata_of(&host, id), want);
    // The list filters by what was set, and no longer by what was removed.
    let by_new = host.ok(
        "sandbox.list",
        json!({"metadata": {"e2e-meta": tag, "added": "yes"}}),
    );
    assert_eq!(by_new["sandboxes"][0]["sandbox_id"], id, "{by_new}");
    let by_old = host.ok(
        "sandbox.list",
        json!({"metadata": {"e2e-meta": tag, "drop": "x"}}),
    );
    assert_eq!(by_old["sandboxes"], json!([]), "{by_old}");

    // The provider's label can be neither set nor removed; nothing changes.
    for params in [
        json!({"sandbox_id": id, "metadata": {"epp-request": "mine"}}),
        json!({"sandbox_id": id, "remove": ["epp-request"]}),
    ] {
        let e = host.fails("sandbox.set_metadata", params, "E1001");
        assert!(
            e.message.contains("`epp-request` is the provider's own"),
            "{e:?}"
        );
    }
    let e = host.fails(
        "sandbox.set_metadata",
        json!({"sandbox_id": id, "metadata": {"keep": "3"}, "remove": ["keep"]}),
        "E1001",
    );
    assert!(e.message.contains("both set"), "{e:?}");
    // The server's label rules, as at create.
    let e = host.fails(
        "sandbox.set_metadata",
        json!({"sandbox_id": id, "metadata": {"bad": "has spaces"}}),
        "E1001",
    );
    assert_eq!(e.data["http_status"], 400, "{e:?}");
    assert_eq!(metadata_of(&host, id), want);

    host.fails(
        "sandbox.set_metadata",
        json!({"sandbox_id": "no-such-sandbox", "metadata": {"a": "b"}}),
        "E4004",
    );
}
both_modes!(
    set_metadata_sets_removes_and_keeps_the_label,
    super::set_metadata
);

/// The ids of one page, and its cursor.
fn page(host: &Host, tag: &str, limit: u32, cursor: &Value) -> (Vec<String>, Value) {
    let mut params = json!({"metadata": {"e2e-pages": tag}, "limit": limit});
    if !cursor.is_null() {
        params["cursor"] = cursor.clone();
    }
    let page = host.ok("sandbox.list", params);
    let ids: Vec<String> = page["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sandbox_id"].as_str().unwrap().to_string())
        .collect();
    assert!(ids.len() <= limit as usize, "{page}");
    (ids, page["next_cursor"].clone())
}

fn list_pages(mode: Mode) {
    let host = Host::start(mode);
    let tag = unique("pages");
    let create = || {
        host.create_info(json!({"metadata": {"e2e-pages": tag}}))["sandbox_id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let stable: Vec<String> = (0..5).map(|_| create()).collect();

    // Whole list, oldest first, no cursor.
    let all = host.ok("sandbox.list", json!({"metadata": {"e2e-pages": tag}}));
    let ids: Vec<&str> = all["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sandbox_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, stable, "oldest first: {all}");
    assert_eq!(all["next_cursor"], Value::Null);

    // Pages of 2 while others with the same tag are made and killed between
    // pages: the server's offset pages (newest first) would repeat some and
    // skip others; these must not.
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let mut cursor = Value::Null;
    let mut churn: Option<String> = None;
    let mut pages = 0;
    loop {
        let (ids, next) = page(&host, &tag, 2, &cursor);
        pages += 1;
        for id in ids {
            *seen.entry(id).or_default() += 1;
        }
        if next.is_null() {
            break;
        }
        assert!(pages < 20, "paging does not end: {seen:?}");
        if let Some(old) = churn.take() {
            host.ok("sandbox.kill", json!({"sandbox_id": old}));
        }
        churn = Some(create());
        cursor = next;
    }
    assert!(pages >= 3, "{pages} pages for 5+ sandboxes of 2");
    for id in &stable {
        assert_eq!(seen.get(id), Some(&1), "{id} in {seen:?}");
    }
    assert!(seen.values().all(|n| *n == 1), "repeated: {seen:?}");

    // A cursor past the last sandbox: page to the one before the newest,
    // kill the newest, and ask with that page's cursor: an empty page and no
    // cursor. A sandbox made then is on the page that cursor gives.
    let now: Vec<String> = page(&host, &tag, 100, &Value::Null).0;
    assert!(now.len() >= 2, "{now:?}");
    let (before, cursor) = page(&host, &tag, now.len() as u32 - 1, &Value::Null);
    assert_eq!(before, now[..now.len() - 1], "{now:?}");
    assert!(cursor.is_string(), "{cursor}");
    host.ok("sandbox.kill", json!({"sandbox_id": now.last().unwrap()}));
    assert_eq!(page(&host, &tag, 2, &cursor), (vec![], Value::Null));
    let newest = create();
    assert_eq!(page(&host, &tag, 2, &cursor), (vec![newest], Value::Null));

    // A made-up cursor: E1001.
    let e = host.fails(
        "sandbox.list",
        json!({"metadata": {"e2e-pages": tag}, "limit": 2, "cursor": "page-2"}),
        "E1001",
    );
    assert!(e.message.contains("next_cursor"), "{e:?}");
    host.fails("sandbox.list", json!({"limit": 0}), "E1001");
}
both_modes!(list_pages_without_loss_or_repeats, super::list_pages);
