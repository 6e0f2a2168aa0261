//! `volumes` of sandbox.create (storage.mount): what is wrong with a volume
//! is said before anything is sent, naming the volume by its index and
//! source; mounts are made at create only.

use epp_e2e::{Host, Mode, both_modes, unique};
use serde_json::{Value, json};

fn tagged(host: &Host, tag: &str) -> Vec<Value> {
    host.ok("sandbox.list", json!({"metadata": {"e2e-volumes": tag}}))["sandboxes"]
        .as_array()
        .unwrap()
        .clone()
}

fn bad_volumes(mode: Mode) {
    let host = Host::start(mode);
    let tag = unique("volumes");
    let ok = json!({"source": "/srv/e2e", "mount_path": "/data", "read_only": false});
    for (bad, words) in [
        (
            json!({"source": "data/set", "mount_path": "/x", "read_only": false}),
            "volumes[1] (source `data/set`): a relative path",
        ),
        (
            json!({"source": "/srv/../etc", "mount_path": "/x", "read_only": false}),
            "volumes[1] (source `/srv/../etc`): source `/srv/../etc` has a `.` or `..` part",
        ),
        (
            json!({"source": "/srv/b", "mount_path": "", "read_only": false}),
            "volumes[1] (source `/srv/b`): mount_path `` is not absolute",
        ),
        (
            json!({"source": "/srv/b", "mount_path": "rel", "read_only": true}),
            "mount_path `rel` is not absolute",
        ),
        (
            json!({"source": "/srv/b", "mount_path": "/data/", "read_only": true}),
            "its mount_path `/data` is that of volumes[0] (source `/srv/e2e`) too",
        ),
        (
            json!({"source": "Not_A_Name", "mount_path": "/x", "read_only": false}),
            "not a volume name",
        ),
        (
            json!({"source": "/srv/b", "mount_path": "/x", "read_only": false, "sub_path": "../up"}),
            "sub_path `../up` leaves the source",
        ),
    ] {
        let e = host.fails(
            "sandbox.create",
            json!({"metadata": {"e2e-volumes": tag}, "volumes": [ok, bad]}),
            "E1001",
        );
        assert!(e.message.contains(words), "{words}: {e:?}");
        assert!(e.data.get("http_status").is_none(), "sent: {e:?}");
    }
    assert_eq!(tagged(&host, &tag), Vec::<Value>::new());

    // Mounts are made at create; the runtime methods say so.
    for (method, params) in [
        (
            "storage.mount",
            json!({"sandbox_id": "sb", "source": "/srv/e2e", "mount_path": "/data"}),
        ),
        (
            "storage.unmount",
            json!({"sandbox_id": "sb", "mount_path": "/data"}),
        ),
    ] {
        let e = host.fails(method, params, "E8004");
        assert!(
            e.message.contains("only when it creates a sandbox") && e.message.contains("volumes"),
            "{method}: {e:?}"
        );
    }
}
both_modes!(
    bad_volumes_are_named_before_anything_is_sent,
    super::bad_volumes
);
