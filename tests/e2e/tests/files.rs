//! files.rw: binary safety, large files, odd paths, search, and errors.

use epp_e2e::{Host, Mode, b64d, b64e, both_modes, workdir};
use serde_json::json;

fn binary_round_trip(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let path = format!("{}/all-bytes.bin", workdir(&host, &id));
    let bytes: Vec<u8> = (0..=255u8).cycle().take(256 * 4).collect();
    let info = host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": path, "content": b64e(&bytes), "encoding": "base64"}),
    );
    assert_eq!(
        (
            info["size"].as_u64(),
            info["type"].as_str(),
            info["path"].as_str()
        ),
        (Some(1024), Some("file"), Some(path.as_str())),
        "{info}"
    );
    let read = host.ok(
        "files.read",
        json!({"sandbox_id": id, "path": path, "encoding": "base64"}),
    );
    assert_eq!(b64d(read["content"].as_str().unwrap()), bytes);
    assert_eq!(read["size"], 1024);
    let e = host.fails(
        "files.read",
        json!({"sandbox_id": id, "path": path}),
        "E1001",
    );
    assert!(e.message.contains("base64"), "{e:?}");
    // A byte range.
    let part = host.ok(
        "files.read",
        json!({"sandbox_id": id, "path": path, "encoding": "base64", "offset": 250, "length": 10}),
    );
    assert_eq!(b64d(part["content"].as_str().unwrap()), bytes[250..260]);
    // A length past the end (up to the largest there is) reads to the end.
    for length in [u64::MAX, 1 << 63, (1 << 63) - 1, 5000] {
        let rest = host.ok(
            "files.read",
            json!({"sandbox_id": id, "path": path, "encoding": "base64", "offset": 1000, "length": length}),
        );
        assert_eq!(
            b64d(rest["content"].as_str().unwrap()),
            bytes[1000..],
            "length {length}"
        );
    }
}
both_modes!(
    binary_round_trip_all_256_byte_values,
    super::binary_round_trip
);

fn large_file(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let path = format!("{}/big.bin", workdir(&host, &id));
    // 50 MiB of deterministic noise (xorshift), so offsets matter.
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let bytes: Vec<u8> = (0..50 * 1024 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let info = host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": path, "content": b64e(&bytes), "encoding": "base64"}),
    );
    assert_eq!(info["size"], bytes.len());
    let sum = epp_e2e::sh(&host, &id, &format!("sha256sum '{path}' | cut -d' ' -f1"));
    let read = host.ok(
        "files.read",
        json!({"sandbox_id": id, "path": path, "encoding": "base64"}),
    );
    let back = b64d(read["content"].as_str().unwrap());
    assert!(back == bytes, "50 MiB round trip differs");
    assert_eq!(sum.trim().len(), 64);
}
both_modes!(fifty_mib_file, super::large_file);

fn paths_and_errors(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let root = format!("{}/dir with spaces ü", workdir(&host, &id));
    let file = format!("{root}/sub/naïve file.txt");
    let text = "héllo wörld\nline 2\n";
    // Parents are created.
    let info = host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": file, "content": text, "mode": "0600"}),
    );
    assert_eq!(info["mode"], "0600", "{info}");
    assert_eq!(info["name"], "naïve file.txt");
    assert_eq!(
        host.ok("files.read", json!({"sandbox_id": id, "path": file}))["content"],
        text
    );
    assert_eq!(
        host.ok("files.exists", json!({"sandbox_id": id, "path": file}))["exists"],
        true
    );
    let got = host.ok(
        "files.get_info",
        json!({"sandbox_id": id, "path": format!("{root}/sub")}),
    );
    assert_eq!(got["type"], "directory");

    let listed = host.ok(
        "files.list",
        json!({"sandbox_id": id, "path": root, "depth": 2}),
    );
    let names: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"sub") && names.contains(&"naïve file.txt"),
        "{names:?}"
    );
    let shallow = host.ok("files.list", json!({"sandbox_id": id, "path": root}));
    assert_eq!(shallow["entries"].as_array().unwrap().len(), 1, "{shallow}");

    let renamed = format!("{root}/renamed.txt");
    let moved = host.ok(
        "files.rename",
        json!({"sandbox_id": id, "old_path": file, "new_path": renamed}),
    );
    assert_eq!(moved["path"], renamed.as_str());
    assert_eq!(
        host.ok("files.exists", json!({"sandbox_id": id, "path": file}))["exists"],
        false
    );
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": file, "content": "again"}),
    );
    host.fails(
        "files.rename",
        json!({"sandbox_id": id, "old_path": file, "new_path": renamed}),
        "E4009",
    );

    let new_dir = format!("{root}/made/deep");
    assert_eq!(
        host.ok("files.make_dir", json!({"sandbox_id": id, "path": new_dir}))["created"],
        true
    );
    assert_eq!(
        host.ok("files.make_dir", json!({"sandbox_id": id, "path": new_dir}))["created"],
        false
    );
    host.fails(
        "files.make_dir",
        json!({"sandbox_id": id, "path": renamed}),
        "E4009",
    );

    // Overwrite replaces the whole file.
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": renamed, "content": "short"}),
    );
    assert_eq!(
        host.ok("files.read", json!({"sandbox_id": id, "path": renamed}))["content"],
        "short"
    );

    host.ok("files.remove", json!({"sandbox_id": id, "path": renamed}));
    host.ok(
        "files.remove",
        json!({"sandbox_id": id, "path": format!("{root}/made")}),
    );
    assert_eq!(
        host.ok(
            "files.exists",
            json!({"sandbox_id": id, "path": format!("{root}/made")})
        )["exists"],
        false
    );

    let missing = format!("{root}/nope.txt");
    for (method, params) in [
        ("files.read", json!({"sandbox_id": id, "path": missing})),
        ("files.get_info", json!({"sandbox_id": id, "path": missing})),
        ("files.remove", json!({"sandbox_id": id, "path": missing})),
        ("files.list", json!({"sandbox_id": id, "path": missing})),
        (
            "files.rename",
            json!({"sandbox_id": id, "old_path": missing, "new_path": format!("{root}/x")}),
        ),
    ] {
        let e = host.fails(method, params, "E4004");
        assert!(e.message.contains("nope.txt"), "{method}: {e:?}");
    }
    host.fails(
        "files.write",
        json!({"sandbox_id": id, "path": file, "content": "%%%", "encoding": "base64"}),
        "E1001",
    );
    let numeric = host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": file, "content": "x", "mode": 640}),
    );
    assert_eq!(
        numeric["mode"], "0640",
        "numbers are octal digits, as OpenSandbox writes modes"
    );
    host.fails(
        "files.write",
        json!({"sandbox_id": id, "path": file, "content": "x", "mode": 648}),
        "E1001",
    );
    host.fails(
        "files.list",
        json!({"sandbox_id": id, "path": renamed.clone() + "x", "depth": 0}),
        "E1001",
    );
}
both_modes!(
    paths_with_spaces_and_utf8_and_errors,
    super::paths_and_errors
);

/// files.search: a plain method added in wit/ and the guest only (docs/epp-1.md §8).
fn search(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let root = format!("{}/search tree ü", workdir(&host, &id));
    for p in [
        "a.py",
        "notes.txt",
        "src/b.py",
        "src/pkg/c.py",
        "src/pkg/d.rs",
        "docs/.hidden.py",
    ] {
        host.ok(
            "files.write",
            json!({"sandbox_id": id, "path": format!("{root}/{p}"), "content": p}),
        );
    }
    // A directory whose name matches is searched, never listed.
    host.ok(
        "files.make_dir",
        json!({"sandbox_id": id, "path": format!("{root}/dir.py/empty")}),
    );
    let search = |path: &str, pattern: Option<&str>| -> Vec<String> {
        let mut params = json!({"sandbox_id": id, "path": path});
        if let Some(p) = pattern {
            params["pattern"] = json!(p);
        }
        let found = host.ok("files.search", params);
        found["entries"]
            .as_array()
            .unwrap_or_else(|| panic!("no entries: {found}"))
            .iter()
            .map(|e| {
                let path = e["path"].as_str().unwrap();
                assert_eq!(e["type"], "file", "{e}");
                assert!(path.ends_with(&format!("/{}", e["name"].as_str().unwrap())));
                path.strip_prefix(&root).unwrap_or(path).to_string()
            })
            .collect()
    };
    // Names at any depth, in walk order (by name, depth first); dot files are not special.
    assert_eq!(
        search(&root, Some("*.py")),
        ["/a.py", "/docs/.hidden.py", "/src/b.py", "/src/pkg/c.py"]
    );
    assert_eq!(search(&root, Some("**/*.py")), search(&root, Some("*.py")));
    // No pattern: every file, no directory.
    assert_eq!(
        search(&root, None),
        [
            "/a.py",
            "/docs/.hidden.py",
            "/notes.txt",
            "/src/b.py",
            "/src/pkg/c.py",
            "/src/pkg/d.rs"
        ]
    );
    assert_eq!(
        search(&root, Some("*.{rs,txt}")),
        ["/notes.txt", "/src/pkg/d.rs"]
    );
    assert_eq!(
        search(&root, Some("!(*.py)")),
        ["/notes.txt", "/src/pkg/d.rs"]
    );
    assert_eq!(
        search(&root, Some("[a-c].py")),
        ["/a.py", "/src/b.py", "/src/pkg/c.py"]
    );
    // A nested start; a file as the start.
    assert_eq!(
        search(&format!("{root}/src/pkg"), Some("*")),
        ["/src/pkg/c.py", "/src/pkg/d.rs"]
    );
    assert_eq!(search(&format!("{root}/a.py"), Some("a.*")), ["/a.py"]);
    // No match is an empty list, not an error.
    assert!(search(&root, Some("*.java")).is_empty());
    assert!(
        search(&root, Some("A.PY")).is_empty(),
        "names match case-sensitively"
    );

    // Entries are whole FileInfos.
    let one = host.ok(
        "files.search",
        json!({"sandbox_id": id, "path": format!("{root}/src"), "pattern": "c.py"}),
    );
    let c = &one["entries"][0];
    assert_eq!(
        (&c["name"], &c["size"], &c["mode"]),
        (&json!("c.py"), &json!("src/pkg/c.py".len()), &json!("0644")),
        "{one}"
    );
    assert!(c["modified_at"].is_string(), "{one}");

    let e = host.fails(
        "files.search",
        json!({"sandbox_id": id, "path": format!("{root}/nope"), "pattern": "*"}),
        "E4004",
    );
    assert!(e.message.contains("nope"), "{e:?}");
    // A malformed pattern is E1001 with the reason, also where there is nothing to match.
    let empty = format!("{root}/dir.py/empty");
    for (path, pattern, says) in [
        (&root, "[", "not a valid glob"),
        (&empty, "{a,b", "not a valid glob"),
        (&root, "why!.txt", "`!(…)`"),
        (&root, "src/*.py", "directory part"),
        (&root, "", "empty"),
    ] {
        let e = host.fails(
            "files.search",
            json!({"sandbox_id": id, "path": path, "pattern": pattern}),
            "E1001",
        );
        assert!(e.message.contains(says), "{pattern}: {e:?}");
    }
    // The generic codec's own checks apply to the new method as to any.
    let e = host.fails(
        "files.search",
        json!({"sandbox_id": id, "path": root, "glob": "*"}),
        "E1001",
    );
    assert!(e.message.contains("unknown field `glob`"), "{e:?}");
    host.fails("files.search", json!({"sandbox_id": id}), "E1001");
}
both_modes!(search_finds_files_by_name, super::search);
