//! files.write with `files`: many files in one call (one multipart upload to
//! execd), their answers, and the errors.

use epp_e2e::{FaultProxy, Host, HostBuilder, Mode, b64d, b64e, both_modes, sh, workdir};
use serde_json::{Value, json};

/// File i: all 256 byte values (rotated by i) in base64, or text with
/// Unicode; modes alternate between the default, 0600 and 0755. The last file
/// is empty and its name has a quote and a backslash (escaped in execd's
/// metadata JSON).
fn hundred(root: &str) -> Vec<(String, Vec<u8>, Option<&'static str>)> {
    (0..100)
        .map(|i| {
            let path = if i == 99 {
                format!("{root}/dir ü 0/sub dir/empty \"quoted\" \\ {i}")
            } else {
                format!("{root}/dir ü {}/sub dir/file {i} ñ.bin", i % 7)
            };
            let content: Vec<u8> = if i == 99 {
                Vec::new()
            } else if i % 2 == 0 {
                (0..=255u8).cycle().skip(i).take(256 + i).collect()
            } else {
                format!("héllo {i}\nwörld\n").into_bytes()
            };
            let mode = [None, Some("0600"), Some("0755")][i % 3];
            (path, content, mode)
        })
        .collect()
}

fn as_params(files: &[(String, Vec<u8>, Option<&str>)]) -> Value {
    files
        .iter()
        .enumerate()
        .map(|(i, (path, content, mode))| {
            let mut f = if i % 2 == 0 {
                json!({"path": path, "content": b64e(content), "encoding": "base64"})
            } else {
                json!({"path": path, "content": String::from_utf8(content.clone()).unwrap()})
            };
            if let Some(mode) = mode {
                f["mode"] = json!(mode);
            }
            f
        })
        .collect()
}

fn hundred_files(mode: Mode) {
    // In server-proxy mode every request to execd passes the counting proxy.
    let proxy = FaultProxy::testbed();
    let host = match mode {
        Mode::Proxy => HostBuilder::new(mode).via(&proxy).spawn(),
        Mode::Direct => Host::start(mode),
    };
    let id = host.create_sandbox();
    let root = format!("{}/many files", workdir(&host, &id));
    let files = hundred(&root);
    let (uploads, infos) = (
        proxy.count("POST", "/files/upload"),
        proxy.count("GET", "/files/info"),
    );
    let answer = host.ok(
        "files.write",
        json!({"sandbox_id": id, "files": as_params(&files)}),
    );
    if mode == Mode::Proxy {
        assert_eq!(
            proxy.count("POST", "/files/upload") - uploads,
            1,
            "one upload"
        );
        // The infos come in one GET per 6 KiB of query: 100 of these long
        // testbed paths (~150 bytes encoded) take 3.
        let gets = proxy.count("GET", "/files/info") - infos;
        assert!((1..=3).contains(&gets), "{gets} info requests");
    }
    let answered = answer["files"].as_array().expect("files");
    assert_eq!(answered.len(), 100, "{answer}");
    for ((path, content, mode), info) in files.iter().zip(answered) {
        assert_eq!(info["path"], path.as_str(), "{info}");
        assert_eq!(info["name"], path.rsplit('/').next().unwrap(), "{info}");
        assert_eq!(info["type"], "file", "{info}");
        assert_eq!(info["size"], content.len(), "{info}");
        assert_eq!(info["mode"], mode.unwrap_or("0644"), "{info}");
    }
    for (path, content, _) in &files {
        let read = host.ok(
            "files.read",
            json!({"sandbox_id": id, "path": path, "encoding": "base64"}),
        );
        assert!(
            b64d(read["content"].as_str().unwrap()) == *content,
            "{path} differs"
        );
    }
    // The nested directories were made, and nothing else was left behind
    // (no temporary files of the upload).
    let found = sh(&host, &id, &format!("find '{root}' -type f | wc -l"));
    assert_eq!(found.trim(), "100");
    let dirs = sh(
        &host,
        &id,
        &format!("find '{root}' -mindepth 1 -type d | wc -l"),
    );
    assert_eq!(dirs.trim(), "14", "7 directories, each with `sub dir`");
}
both_modes!(hundred_files_in_one_call, super::hundred_files);

fn errors(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let root = format!("{}/many errors", workdir(&host, &id));
    let a = format!("{root}/a.txt");
    let b = format!("{root}/b ü.txt");
    let write = |files: Value| json!({"sandbox_id": id, "files": files});

    let e = host.fails("files.write", write(json!([])), "E1001");
    assert!(e.message.contains("`files` is empty"), "{e:?}");

    let twice = json!([{"path": a, "content": "1"}, {"path": b, "content": "2"}, {"path": a, "content": "3"}]);
    let e = host.fails("files.write", write(twice), "E1001");
    assert!(e.message.contains(&format!("{a} is given twice")), "{e:?}");

    let bad = json!([{"path": a, "content": "1"}, {"path": b, "content": "not base64!", "encoding": "base64"}]);
    let e = host.fails("files.write", write(bad), "E1001");
    assert!(
        e.message.contains("files[1].content") && e.message.contains(&b),
        "{e:?}"
    );

    let bad_mode = json!([{"path": a, "content": "1", "mode": "0999"}]);
    let e = host.fails("files.write", write(bad_mode), "E1001");
    assert!(e.message.contains("files[0].mode"), "{e:?}");

    // 64 MiB in all is the bound; one byte more is refused before any upload.
    let half = "x".repeat(32 << 20);
    let big = json!([{"path": a, "content": half}, {"path": b, "content": format!("{half}x")}]);
    let e = host.fails("files.write", write(big), "E1001");
    assert!(
        e.message.contains("67108865 bytes") && e.message.contains("67108864"),
        "{e:?}"
    );

    let both = json!({"sandbox_id": id, "path": a, "content": "1", "files": [{"path": b, "content": "2"}]});
    let e = host.fails("files.write", both, "E1001");
    assert!(e.message.contains("`files` lists every file"), "{e:?}");
    let neither = json!({"sandbox_id": id});
    let e = host.fails("files.write", neither, "E1001");
    assert!(e.message.contains("`path` and `content`"), "{e:?}");

    // None of the refused calls wrote anything.
    assert_eq!(
        host.ok("files.exists", json!({"sandbox_id": id, "path": root}))["exists"],
        false
    );

    // execd stops at the first file that fails (here a path that is a
    // directory): the error names it, the files before it are written, the
    // ones after it are not.
    let dir = format!("{root}/a directory");
    host.ok("files.make_dir", json!({"sandbox_id": id, "path": dir}));
    let c = format!("{root}/c.txt");
    let stops = json!([{"path": a, "content": "first"}, {"path": dir, "content": "x"}, {"path": c, "content": "third"}]);
    let e = host
        .call("files.write", write(stops))
        .expect_err("a directory");
    assert!(
        e.message
            .contains(&format!("stopped at {dir} (file 2 of 3)")),
        "{e:?}"
    );
    assert_eq!(
        host.ok("files.read", json!({"sandbox_id": id, "path": a}))["content"],
        "first"
    );
    assert_eq!(
        host.ok("files.exists", json!({"sandbox_id": id, "path": c}))["exists"],
        false
    );

    let e = host.fails(
        "files.write",
        json!({"sandbox_id": "no-such-sandbox", "files": [{"path": a, "content": "1"}]}),
        "E4004",
    );
    assert!(e.message.contains("no-such-sandbox"), "{e:?}");
}
both_modes!(many_files_errors, super::errors);
