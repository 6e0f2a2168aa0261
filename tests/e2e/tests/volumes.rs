//! `volumes` of sandbox.create (storage.mount): what is wrong with a volume
//! is said before anything is sent, naming the volume by its index and
//! source; mounts are made at create only. On the Docker tier: real binds of
//! host folders and Docker named volumes, and the server's refusals.

use epp_e2e::{
    Host, Mode, both_modes, docker_cli, docker_cli_output, docker_inspect, docker_volumes,
    sandbox_container, sh, unique,
};
use serde_json::{Value, json};
use std::path::PathBuf;

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

// ------------------------------------------------------------------ Docker tier
// Real binds and Docker named volumes.

/// What a test makes outside its sandboxes, removed when the test ends,
/// passed or failed. Made before the test's `Host`, so that it is dropped
/// after it: the host's drop kills the sandboxes that use these first.
enum Leftover {
    Folder(PathBuf),
    Volume(String),
}

impl Drop for Leftover {
    fn drop(&mut self) {
        let failed = match self {
            Leftover::Folder(dir) => std::fs::remove_dir_all(&*dir)
                .err()
                .filter(|e| e.kind() != std::io::ErrorKind::NotFound)
                .map(|e| format!("removing {}: {e}", dir.display())),
            Leftover::Volume(name) => {
                let out = docker_cli_output(&["volume", "rm", "--", name]);
                let said = String::from_utf8_lossy(&out.stderr).to_string();
                (!out.status.success() && !said.contains("no such volume"))
                    .then(|| format!("docker volume rm {name}: {said}"))
            }
        };
        match failed {
            // A test that passed must not leave anything behind.
            Some(why) if !std::thread::panicking() => panic!("left behind: {why}"),
            Some(why) => eprintln!("left behind: {why}"),
            None => {}
        }
    }
}

/// Sandboxes from one create with three views of a host folder under the
/// server's allowed one: read-write, read-only, and one directory of it.
fn host_paths(mode: Mode) {
    let dir = docker_volumes().join(unique("vol"));
    let _folder = Leftover::Folder(dir.clone());
    let host = Host::start_docker(mode);
    let tag = unique("volumes");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let marker = unique("on-the-host");
    std::fs::write(dir.join("hello.txt"), &marker).unwrap();
    std::fs::write(dir.join("sub/only.txt"), "sub\n").unwrap();
    let source = dir.to_str().unwrap();
    let info = host.create_info(json!({
        "metadata": {"e2e-volumes": tag},
        "volumes": [
            {"source": source, "mount_path": "/mnt/rw", "read_only": false},
            {"source": source, "mount_path": "/mnt/ro", "read_only": true},
            {"source": source, "mount_path": "/mnt/sub", "read_only": true, "sub_path": "sub"},
        ],
    }));
    let id = info["sandbox_id"].as_str().unwrap();
    assert_eq!(
        sh(
            &host,
            id,
            "cat /mnt/rw/hello.txt; echo; cat /mnt/ro/hello.txt; echo; ls /mnt/sub"
        ),
        format!("{marker}\n{marker}\nonly.txt\n")
    );
    // Written in the sandbox, seen on the host.
    sh(&host, id, "echo from-the-sandbox > /mnt/rw/out.txt");
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).unwrap(),
        "from-the-sandbox\n"
    );
    // Read-only refuses writes, through a command and through files.write.
    let r = host.ok(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "echo no > /mnt/ro/no.txt"}),
    );
    assert_ne!(r["exit_code"], 0, "{r}");
    assert!(
        r["stderr"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{r}"
    );
    let e = host.call(
        "files.write",
        json!({"sandbox_id": id, "path": "/mnt/ro/no.txt", "content": "no"}),
    );
    assert!(e.is_err(), "files.write into a read-only volume: {e:?}");
    assert!(!dir.join("no.txt").exists());
    // Docker shows the binds as asked.
    let mounts = docker_inspect(&sandbox_container(id)).unwrap()["Mounts"].clone();
    let bind = |dest: &str| {
        mounts
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["Destination"] == dest)
            .unwrap_or_else(|| panic!("no mount at {dest}: {mounts}"))
            .clone()
    };
    assert_eq!(bind("/mnt/rw")["RW"], true);
    assert_eq!(bind("/mnt/ro")["RW"], false);
    assert_eq!(
        bind("/mnt/sub")["Source"],
        dir.join("sub").to_str().unwrap()
    );

    // Outside the allowed folder: E1001 naming the volume and the server
    // setting; nothing made.
    let e = host.fails(
        "sandbox.create",
        json!({"metadata": {"e2e-volumes": tag}, "volumes": [
            {"source": "/etc", "mount_path": "/x", "read_only": true},
        ]}),
        "E1001",
    );
    for words in [
        "volumes[0] (source `/etc`)",
        "`[storage] allowed_host_paths`",
        docker_volumes().to_str().unwrap(),
    ] {
        assert!(e.message.contains(words), "{words}: {e:?}");
    }
    assert_eq!(tagged(&host, &tag).len(), 1);
}
both_modes!(host_paths_are_bound, super::host_paths);

/// A Docker named volume keeps what one sandbox wrote for the next; one that
/// does not exist is E1001 saying how to make it.
fn named_volumes(mode: Mode) {
    let name = unique("vol").to_ascii_lowercase();
    let _volume = Leftover::Volume(name.clone());
    let host = Host::start_docker(mode);
    let tag = unique("volumes");
    let missing = host.fails(
        "sandbox.create",
        json!({"metadata": {"e2e-volumes": tag}, "volumes": [
            {"source": name, "mount_path": "/data", "read_only": false},
        ]}),
        "E1001",
    );
    assert!(
        missing
            .message
            .starts_with(&format!("volumes[0] (source `{name}`): ")),
        "{missing:?}"
    );
    assert!(
        missing
            .message
            .contains(&format!("docker volume create {name}")),
        "{missing:?}"
    );
    assert_eq!(tagged(&host, &tag), Vec::<Value>::new());

    docker_cli(&["volume", "create", &name]);
    let volume = json!([{"source": name, "mount_path": "/data", "read_only": false}]);
    let first = host.create_info(json!({"metadata": {"e2e-volumes": tag}, "volumes": volume}));
    let marker = unique("kept");
    sh(
        &host,
        first["sandbox_id"].as_str().unwrap(),
        &format!("echo {marker} > /data/kept.txt"),
    );
    host.ok("sandbox.kill", json!({"sandbox_id": first["sandbox_id"]}));
    let second = host.create_info(json!({"metadata": {"e2e-volumes": tag}, "volumes": volume}));
    assert_eq!(
        sh(
            &host,
            second["sandbox_id"].as_str().unwrap(),
            "cat /data/kept.txt"
        ),
        format!("{marker}\n")
    );
    host.ok("sandbox.kill", json!({"sandbox_id": second["sandbox_id"]}));
    // The volume is removed by `_volume` (after `host`'s drop), however the
    // test ends.
}
both_modes!(named_volumes_outlive_their_sandbox, super::named_volumes);
