//! Black-box tests of the file and directory endpoints.

mod common;

use std::os::unix::fs::{PermissionsExt, symlink};

use bytes::Bytes;
use common::*;
use http::{Request, StatusCode};
use http_body_util::{Full, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};

fn enc(p: &std::path::Path) -> String {
    p.to_str().unwrap().replace('%', "%25").replace(' ', "%20")
}

async fn upload(port: u16, path: &str, data: &[u8], meta_extra: Value) -> Reply {
    let mut meta = json!({"path": path});
    meta.as_object_mut()
        .unwrap()
        .extend(meta_extra.as_object().unwrap().clone());
    let mut body = multipart_pair(&meta, data);
    body.extend_from_slice(multipart_end());
    collect(send(port, upload_request(body)).await).await
}

#[tokio::test]
async fn upload_download_round_trip_all_byte_values() {
    let x = Execd::start();
    let data: Vec<u8> = (0..=255u8).cycle().take(256 * 4).collect();
    let target = x.path("deep/er/bytes.bin");
    let r = upload(
        x.port,
        target.to_str().unwrap(),
        &data,
        json!({"mode": 640}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(r.body.is_empty());
    assert_eq!(std::fs::read(&target).unwrap(), data);
    assert_eq!(
        std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
        0o640
    );
    // No temporary files are left next to the target.
    assert_eq!(std::fs::read_dir(x.path("deep/er")).unwrap().count(), 1);

    let r = get(x.port, &format!("/files/download?path={}", enc(&target))).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, data);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/octet-stream")
    );
    assert_eq!(r.header("content-length").as_deref(), Some("1024"));
    assert_eq!(
        r.header("content-disposition").as_deref(),
        Some("attachment; filename=\"bytes.bin\"")
    );
    assert_eq!(r.header("accept-ranges").as_deref(), Some("bytes"));

    // Relative paths resolve against the sandbox directory, `~` against HOME.
    let r = upload(x.port, "rel.txt", b"relative", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(std::fs::read(x.path("rel.txt")).unwrap(), b"relative");
    let r = upload(x.port, "~/h.txt", b"home", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(std::fs::read(x.path("home/h.txt")).unwrap(), b"home");
    let r = get(x.port, "/files/download?path=~/h.txt").await;
    assert_eq!(r.body, b"home");

    // Overwriting replaces the content and keeps the existing mode when none is given.
    let r = upload(x.port, target.to_str().unwrap(), b"short", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(std::fs::read(&target).unwrap(), b"short");
    assert_eq!(
        std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
        0o640
    );
}

#[tokio::test]
async fn upload_several_pairs_and_errors() {
    let x = Execd::start();
    let a = x.path("a.txt");
    let b = x.path("sub/b.txt");
    let mut body = multipart_pair(&json!({"path": a}), b"AAA");
    body.extend(multipart_pair(&json!({"path": b, "mode": 600}), b"BBB"));
    body.extend_from_slice(multipart_end());
    let r = collect(send(x.port, upload_request(body)).await).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(std::fs::read(&a).unwrap(), b"AAA");
    assert_eq!(std::fs::read(&b).unwrap(), b"BBB");

    // metadata sent as a plain form field (no filename) is ignored → missing.
    let body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{{\"path\":\"/tmp/x\"}}\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\ndata\r\n--{BOUNDARY}--\r\n"
    );
    let r = collect(send(x.port, upload_request(body.into_bytes())).await).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json(),
        json!({"code": "INVALID_FILE_METADATA", "message": "metadata file is missing"})
    );

    let mut body = multipart_pair(&json!({"path": a}), b"x");
    body.extend(multipart_pair(&json!({"path": b}), b"y"));
    let idx = body.len();
    body.extend_from_slice(
        format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"m\"\r\n\r\n{{\"path\":\"/tmp/z\"}}\r\n").as_bytes(),
    );
    assert!(idx > 0);
    body.extend_from_slice(multipart_end());
    let r = collect(send(x.port, upload_request(body)).await).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json()["message"],
        "metadata and file count mismatch: 3 vs 2"
    );
    assert_eq!(
        std::fs::read(&a).unwrap(),
        b"AAA",
        "nothing written on a count mismatch"
    );

    let r = upload(x.port, "", b"x", json!({})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["message"], "metadata path is empty");

    let r = call(x.port, "POST", "/files/upload", "plain").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json(),
        json!({"code": "INVALID_FILE", "message": "multipart form is empty"})
    );

    // Writing onto a directory fails with a 500.
    let r = upload(x.port, x.path("sub").to_str().unwrap(), b"x", json!({})).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.text().contains("is a directory"));
}

#[tokio::test]
async fn fifty_mib_upload_chunked_and_with_content_length() {
    let x = Execd::start();
    let data = noise(50 * 1024 * 1024, 7);
    let target = x.path("big.bin");

    // Chunked transfer encoding (what the SDK does against execd directly).
    let mut body = multipart_pair(&json!({"path": target}), &data);
    body.extend_from_slice(multipart_end());
    let chunks: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = body
        .chunks(1 << 20)
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    let req = Request::builder()
        .method("POST")
        .uri("/files/upload")
        .header("host", "127.0.0.1")
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(StreamBody::new(futures::stream::iter(chunks)))
        .unwrap();
    let r = collect(send(x.port, req).await).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(std::fs::read(&target).unwrap() == data);

    // Content-Length body (what goes through the server proxy), into another file.
    let target2 = x.path("big2.bin");
    let mut body = multipart_pair(&json!({"path": target2}), &data);
    body.extend_from_slice(multipart_end());
    let r = collect(send(x.port, upload_request(body)).await).await;
    assert_eq!(r.status, StatusCode::OK);

    let r = get(x.port, &format!("/files/download?path={}", enc(&target2))).await;
    assert_eq!(
        r.header("content-length").unwrap(),
        (50 * 1024 * 1024).to_string()
    );
    assert!(r.body == data);
}

#[tokio::test]
async fn download_ranges_lines_and_errors() {
    let x = Execd::start();
    let f = x.path("r.txt");
    std::fs::write(&f, b"0123456789").unwrap();
    let url = format!("/files/download?path={}", enc(&f));
    let ranged = |range: &str| {
        Request::builder()
            .uri(url.as_str())
            .header("host", "127.0.0.1")
            .header("range", range)
            .body(Full::new(Bytes::new()))
            .unwrap()
    };

    let r = collect(send(x.port, ranged("bytes=2-5")).await).await;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.body, b"2345");
    assert_eq!(r.header("content-range").as_deref(), Some("bytes 2-5/10"));
    assert_eq!(r.header("content-length").as_deref(), Some("4"));

    let r = collect(send(x.port, ranged("bytes=-3")).await).await;
    assert_eq!(
        (r.status, r.body.as_slice()),
        (StatusCode::PARTIAL_CONTENT, &b"789"[..])
    );
    let r = collect(send(x.port, ranged("bytes=7-")).await).await;
    assert_eq!(r.body, b"789");
    // An end past the file, even i64::MAX, is clamped before the length is computed
    // (execd 1.1.1, #2089; before, the length overflowed into a broken 206).
    for (range, body, content_range) in [
        (
            "bytes=0-9223372036854775807",
            &b"0123456789"[..],
            "bytes 0-9/10",
        ),
        (
            "bytes=4-9223372036854775807",
            &b"456789"[..],
            "bytes 4-9/10",
        ),
        ("bytes=8-99", &b"89"[..], "bytes 8-9/10"),
    ] {
        let r = collect(send(x.port, ranged(range)).await).await;
        assert_eq!(r.status, StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(r.body, body, "{range}");
        assert_eq!(r.header("content-range").as_deref(), Some(content_range));
        assert_eq!(
            r.header("content-length"),
            Some(body.len().to_string()),
            "{range}"
        );
    }

    let r = collect(send(x.port, ranged("bytes=5-2")).await).await;
    assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(r.json(), json!({"code": "UNKNOWN"}));
    let r = collect(send(x.port, ranged("lines=1-2")).await).await;
    assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE);
    let r = collect(send(x.port, ranged("bytes=20-30")).await).await;
    assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(r.header("content-range").as_deref(), Some("bytes */10"));

    // Line mode.
    let lines = x.path("lines.txt");
    std::fs::write(&lines, b"l1\r\nl2\nl3\nl4\n").unwrap();
    let lurl = format!("/files/download?path={}", enc(&lines));
    let r = get(x.port, &format!("{lurl}&offset=2&limit=2")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(r.text(), "l2\nl3");
    assert_eq!(get(x.port, &format!("{lurl}&limit=1")).await.text(), "l1");
    assert_eq!(
        get(x.port, &format!("{lurl}&offset=3")).await.text(),
        "l3\nl4"
    );
    let r = get(x.port, &format!("{lurl}&offset=0")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["message"], "invalid query parameter 'offset': 0");
    let mut rq = ranged("bytes=0-1");
    *rq.uri_mut() = format!("{lurl}&offset=1").parse().unwrap();
    let r = collect(send(x.port, rq).await).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    let r = get(x.port, "/files/download?path=/no/such/file").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["code"], "FILE_NOT_FOUND");
    let r = get(x.port, "/files/download").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["code"], "MISSING_QUERY");
    let r = get(x.port, "/files/download?path=$UNDEFINED_EXECD_VAR/x").await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn info_is_all_or_nothing_and_uses_lstat() {
    let x = Execd::start();
    let f = x.path("f.txt");
    std::fs::write(&f, b"hello").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o754)).unwrap();
    symlink(&f, x.path("link")).unwrap();

    let r = get(x.port, &format!("/files/info?path={}&path=link", enc(&f))).await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    let fi = &v[f.to_str().unwrap()];
    assert_eq!(fi["path"], f.to_str().unwrap());
    assert_eq!(fi["type"], "file");
    assert_eq!(fi["size"], 5);
    assert_eq!(fi["mode"], 754);
    assert!(fi["owner"].is_string() && fi["group"].is_string());
    assert!(fi["modified_at"].as_str().unwrap().ends_with('Z'));
    assert!(fi["created_at"].is_string());
    // Keys are the paths as sent; `path` is absolute; symlinks are not followed.
    assert_eq!(v["link"]["type"], "symlink");
    assert_eq!(v["link"]["path"], x.path("link").to_str().unwrap());
    let keys: Vec<&str> = [
        "path",
        "type",
        "size",
        "modified_at",
        "created_at",
        "owner",
        "group",
        "mode",
    ]
    .to_vec();
    let body = r.text();
    let mut pos = 0;
    for k in keys {
        let i = body[pos..]
            .find(&format!("\"{k}\""))
            .unwrap_or_else(|| panic!("{k} order"));
        pos += i;
    }

    let r = get(
        x.port,
        &format!("/files/info?path={}&path=/no/such", enc(&f)),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["code"], "FILE_NOT_FOUND");
    assert_eq!(get(x.port, "/files/info").await.json(), json!({}));
}

#[tokio::test]
async fn move_delete_permissions_replace() {
    let x = Execd::start();
    let src = x.path("src.txt");
    std::fs::write(&src, b"foo bar foo").unwrap();
    let dest = x.path("new/dir/dest.txt");
    let r = post_json(x.port, "/files/mv", json!([{"src": src, "dest": dest}])).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(!src.exists() && dest.exists());

    std::fs::write(&src, b"again").unwrap();
    let r = post_json(x.port, "/files/mv", json!([{"src": src, "dest": dest}])).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.text().contains("destination path already exists"));
    let r = post_json(
        x.port,
        "/files/mv",
        json!([{"src": "/no/such", "dest": "/tmp/x"}]),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    let r = post_json(
        x.port,
        "/files/replace?verbose=true",
        json!({dest.to_str().unwrap(): {"old": "foo", "new": "baz"}}),
    )
    .await;
    assert_eq!(
        r.json(),
        json!({dest.to_str().unwrap(): {"replacedCount": 2}})
    );
    assert_eq!(std::fs::read(&dest).unwrap(), b"baz bar baz");
    let r = post_json(
        x.port,
        "/files/replace",
        json!({dest.to_str().unwrap(): {"old": "", "new": "x"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = post_json(
        x.port,
        "/files/replace",
        json!({"/no/such": {"old": "a", "new": "b"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    let r = post_json(
        x.port,
        "/files/permissions",
        json!({dest.to_str().unwrap(): {"mode": 600}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let r = post_json(
        x.port,
        "/files/permissions",
        json!({dest.to_str().unwrap(): {"owner": "no-such-user-xyz"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);

    // DELETE /files: missing files are fine, directories are refused.
    let r = call(
        x.port,
        "DELETE",
        &format!("/files?path={}&path=/no/such", enc(&dest)),
        Bytes::new(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!dest.exists());
    let r = call(
        x.port,
        "DELETE",
        &format!("/files?path={}", enc(&x.path("new"))),
        Bytes::new(),
    )
    .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.text().contains("path is a directory"));
}

#[tokio::test]
async fn search_and_directories() {
    let x = Execd::start();
    let root = x.path("proj");
    let r = post_json(
        x.port,
        "/directories",
        json!({root.join("src/pkg").to_str().unwrap(): {"mode": 700}, root.join("docs").to_str().unwrap(): {}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        std::fs::metadata(root.join("src/pkg"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    for p in [
        "a.py",
        "src/b.py",
        "src/pkg/c.py",
        "src/pkg/d.rs",
        "docs/readme.md",
    ] {
        std::fs::write(root.join(p), p).unwrap();
    }
    symlink(root.join("src"), root.join("zlink")).unwrap();

    let names = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| {
                e["path"]
                    .as_str()
                    .unwrap()
                    .strip_prefix(root.to_str().unwrap())
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let q = enc(&root);
    let r = get(x.port, &format!("/files/search?path={q}&pattern=*.py")).await;
    assert_eq!(names(r.json()), ["/a.py", "/src/b.py", "/src/pkg/c.py"]);
    let r = get(x.port, &format!("/files/search?path={q}&pattern=**/*.py")).await;
    assert_eq!(names(r.json()).len(), 3);
    let r = get(x.port, &format!("/files/search?path={q}&pattern=src/*.py")).await;
    assert_eq!(r.json(), json!([]));
    let r = get(x.port, &format!("/files/search?path={q}")).await;
    // Files only (the symlink counts as a file and is not followed).
    assert_eq!(names(r.json()).len(), 6);
    let r = get(x.port, "/files/search?path=/no/such/dir").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    let r = get(x.port, &format!("/directories/list?path={q}")).await;
    assert_eq!(names(r.json()), ["/a.py", "/docs", "/src", "/zlink"]);
    let v = get(x.port, &format!("/directories/list?path={q}&depth=2"))
        .await
        .json();
    assert_eq!(
        names(v.clone()),
        [
            "/a.py",
            "/docs",
            "/docs/readme.md",
            "/src",
            "/src/b.py",
            "/src/pkg",
            "/zlink"
        ]
    );
    assert_eq!(v[1]["type"], "directory");
    assert_eq!(v[6]["type"], "symlink");
    assert_eq!(
        get(x.port, &format!("/directories/list?path={q}&depth=0"))
            .await
            .json(),
        json!([])
    );
    let r = get(
        x.port,
        &format!("/directories/list?path={}", enc(&root.join("zlink"))),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = get(
        x.port,
        &format!("/directories/list?path={}", enc(&root.join("a.py"))),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = get(x.port, "/directories/list?path=/no/such").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = get(x.port, "/directories/list").await;
    assert_eq!(r.json()["code"], "MISSING_QUERY");

    let r = call(
        x.port,
        "DELETE",
        &format!("/directories?path={q}&path=/no/such"),
        Bytes::new(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!root.exists());
}

/// A DELETE whose (empty, chunked) body ends only after the answer, as
/// opensandbox-server's proxy sends it: the connection still serves the next
/// request, as Go's net/http keeps it (hyper alone would close it, and the
/// proxy's pool answer 502 for the request it sent next).
#[tokio::test]
async fn a_body_that_ends_late_keeps_the_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let x = Execd::start();
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", x.port))
        .await
        .unwrap();
    let head = "DELETE /files?path=/nonexistent-epp HTTP/1.1\r\nHost: x\r\n\
                Transfer-Encoding: chunked\r\n\r\n";
    s.write_all(head.as_bytes()).await.unwrap();
    s.flush().await.unwrap();
    // The body's end follows on its own, after the handler could have answered
    // (the pause makes the late end, it synchronises nothing: with or without
    // it, the connection must serve the next request).
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    s.write_all(b"0\r\n\r\n").await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    s.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let n = s.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "the next request on the connection is answered: {:?}",
        String::from_utf8_lossy(&buf[..n])
    );
}
