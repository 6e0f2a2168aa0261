//! files.replace: every occurrence, counted; the file keeps its mode and owner
//! (and group); empty `old` and a missing file are refused.

use epp_e2e::{Host, Mode, both_modes, unique};
use serde_json::json;

fn replace(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let path = format!("/tmp/{}/conf.txt", unique("replace"));
    let content = "name = ä\nport = 80\nname = ä again\nlast";
    // Owned by someone else than execd's user (root): execd rewrites the file
    // in place, so it stays theirs.
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": path, "content": content, "mode": "640",
            "owner": "nobody", "group": "nogroup"}),
    );
    let call = |old: &str, new: &str| {
        host.ok(
            "files.replace",
            json!({"sandbox_id": id, "path": path, "old": old, "new": new}),
        )
    };
    assert_eq!(call("ä", "ö ü"), json!({"replaced": 2}));
    assert_eq!(call("80\n", "8080\n"), json!({"replaced": 1}));
    // Overlapping text is counted as it is replaced, left to right.
    assert_eq!(call("last", "aaa"), json!({"replaced": 1}));
    assert_eq!(call("aa", "b"), json!({"replaced": 1}));
    let read = host.ok("files.read", json!({"sandbox_id": id, "path": path}));
    assert_eq!(
        read["content"],
        "name = ö ü\nport = 8080\nname = ö ü again\nba"
    );
    // Nothing to replace: 0, the file as it was.
    assert_eq!(call("absent", "x"), json!({"replaced": 0}));
    let info = host.ok("files.get_info", json!({"sandbox_id": id, "path": path}));
    assert_eq!(
        (&info["mode"], &info["owner"], &info["group"]),
        (&json!("0640"), &json!("nobody"), &json!("nogroup")),
        "{info}"
    );
    assert_eq!(
        info["size"],
        "name = ö ü\nport = 8080\nname = ö ü again\nba".len()
    );

    let e = host.fails(
        "files.replace",
        json!({"sandbox_id": id, "path": path, "old": "", "new": "x"}),
        "E1001",
    );
    assert!(e.message.contains("`old` is empty"), "{e:?}");
    let missing = format!("{path}.missing");
    let e = host.fails(
        "files.replace",
        json!({"sandbox_id": id, "path": missing, "old": "a", "new": "b"}),
        "E4004",
    );
    assert!(e.message.contains(&missing), "{e:?}");
}
both_modes!(counts_rewrites_and_keeps_mode_and_owner, super::replace);
