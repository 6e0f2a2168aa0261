//! `raw`: the benchmark's floor. The same HTTP calls the SDK and the provider
//! make, from a persistent process with kept-alive connections and no
//! framework: what it costs is what the server (and the execd stand-in) cost.
//!
//! Built with `rustc -O` alone (std only). Usage: `raw <workload> key=value…`;
//! prints one JSON object on stdout. Workloads mirror bench/drivers/*.py.

mod http;
mod sha256;

use http::{Conn, Pool};
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Barrier};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let workload = args.next().unwrap_or_default();
    let opts: HashMap<String, String> = args
        .filter_map(|a| a.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    let get = |k: &str| opts.get(k).cloned().unwrap_or_default();
    let num = |k: &str, d: usize| opts.get(k).and_then(|v| v.parse().ok()).unwrap_or(d);
    let result = match workload.as_str() {
        "session" => session(&get("endpoint"), num("n", 200), num("warmup", 20)),
        "run" => run(&get("endpoint"), &get("cmd"), num("n", 200), num("warmup", 20), num("drain", 1) == 1),
        "stream" => stream(&get("endpoint"), &get("cmd"), num("drain", 1) == 1),
        "files" => files(&get("endpoint"), &get("path"), num("size", 32 << 20), num("sha", 0) == 1),
        "concurrent" => concurrent(&get("endpoints"), num("n", 64), num("batches", 3), num("drain", 1) == 1),
        "scale_run" => scale_run(&get("endpoints"), &nums(&get("series")), &nums(&get("levels")), num("batches", 3), num("min_calls", 0)),
        "scale_read" => scale_read(&get("endpoints"), &get("path"), num("size", 4 << 20), &nums(&get("levels")), num("batches", 3), num("min_calls", 0)),
        "sha256" => {
            let mut h = sha256::Sha256::new();
            h.update(&file_content(num("size", 0)));
            Ok(format!("\"sha256\":\"{}\"", h.hex()))
        }
        "cycle" => cycle(&get("server"), &get("key"), num("n", 3)),
        "snapshot_cycle" => {
            let source = (get("image"), get("snapshot"));
            snapshot_cycle(&get("server"), &get("key"), num("n", 2), &get("first"), &source.0, &source.1)
        }
        "code" => code(&get("endpoint"), &get("code"), num("n", 200), num("warmup", 20)),
        "code_stream" => code_stream(&get("endpoint"), &get("code")),
        "idle" => Ok(String::new()),
        other => Err(io::Error::other(format!("unknown workload {other:?}"))),
    };
    match result {
        Ok(json) => {
            let (rss, hwm) = memory();
            let sep = if json.is_empty() { "" } else { "," };
            println!("{{{json}{sep}\"rss_kib\":{rss},\"hwm_kib\":{hwm}}}");
        }
        Err(e) => {
            eprintln!("raw {workload}: {e}");
            std::process::exit(1);
        }
    }
}

/// `1,16,64` → [1, 16, 64].
fn nums(v: &str) -> Vec<usize> {
    v.split(',').filter_map(|x| x.trim().parse().ok()).collect()
}

/// VmHWM back to VmRSS (Linux ≥ 4.0), so the next reading is the peak from here on.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// VmRSS and VmHWM of this process, in KiB.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// `127.0.0.1:PORT/proxy/44772` → (authority, path prefix).
fn split_endpoint(endpoint: &str) -> (String, String) {
    match endpoint.split_once('/') {
        Some((a, p)) => (a.to_string(), format!("/{p}")),
        None => (endpoint.to_string(), String::new()),
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn list(v: &[u64]) -> String {
    let items: Vec<String> = v.iter().map(u64::to_string).collect();
    format!("[{}]", items.join(","))
}

/// What a command's event stream delivered.
#[derive(Default)]
struct Outcome {
    bytes: u64,
    lines: u64,
    finished: bool,
    /// When the final event arrived: the command's answer is known then. The
    /// rest of the body (if drained, so the connection can be reused) is not
    /// part of the latency, as a client would drain it in the background.
    done_at: Option<Instant>,
}

/// Splits execd's `JSON\n\n` frames and decodes the `text` of output events,
/// as a client that uses the output must.
struct Frames {
    buf: Vec<u8>,
    out: Outcome,
    /// `buf` has been searched up to here without finding a frame's end: a big
    /// frame (a kernel's output comes in chunks of hundreds of KiB) arrives in
    /// many reads, and searching it again from its start each time would be
    /// quadratic.
    scanned: usize,
}

/// The JSON string value of `"key":"…"` in `frame`, unescaped.
fn field<'a>(frame: &'a [u8], key: &[u8], scratch: &'a mut Vec<u8>) -> Option<&'a [u8]> {
    let pos = frame.windows(key.len()).position(|w| w == key)? + key.len();
    let rest = &frame[pos..];
    let mut i = 0;
    let mut escaped = false;
    while i < rest.len() && rest[i] != b'"' {
        escaped |= rest[i] == b'\\';
        i += if rest[i] == b'\\' { 2 } else { 1 };
    }
    let raw = &rest[..i.min(rest.len())];
    if !escaped {
        return Some(raw);
    }
    scratch.clear();
    let mut j = 0;
    while j < raw.len() {
        if raw[j] == b'\\' && j + 1 < raw.len() {
            match raw[j + 1] {
                b'n' => scratch.push(b'\n'),
                b't' => scratch.push(b'\t'),
                b'r' => scratch.push(b'\r'),
                b'u' if j + 5 < raw.len() => {
                    let hex = std::str::from_utf8(&raw[j + 2..j + 6]).unwrap_or("0");
                    let c = char::from_u32(u32::from_str_radix(hex, 16).unwrap_or(0xfffd))
                        .unwrap_or('\u{fffd}');
                    let mut tmp = [0u8; 4];
                    scratch.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
                    j += 4;
                }
                other => scratch.push(other),
            }
            j += 2;
        } else {
            scratch.push(raw[j]);
            j += 1;
        }
    }
    Some(scratch)
}

impl Frames {
    fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        let mut start = 0;
        let mut scratch = Vec::new();
        loop {
            let from = self.scanned.max(start);
            let Some(at) = self.buf[from..].windows(2).position(|w| w == b"\n\n") else {
                self.scanned = self.buf.len().saturating_sub(1).max(start);
                break;
            };
            let end = from + at - start;
            let frame = &self.buf[start..start + end];
            let mut kind_scratch = Vec::new();
            match field(frame, b"\"type\":\"", &mut kind_scratch) {
                Some(b"stdout") | Some(b"stderr") => {
                    let text = field(frame, b"\"text\":\"", &mut scratch).unwrap_or(b"");
                    self.out.bytes += text.len() as u64;
                    self.out.lines += 1;
                }
                Some(b"execution_complete") | Some(b"error") => {
                    self.out.finished = true;
                    self.out.done_at.get_or_insert_with(Instant::now);
                }
                _ => {}
            }
            start += end + 2;
        }
        self.buf.drain(..start);
        self.scanned -= start;
    }
}

/// One `POST /command`: (outcome, connection back if reusable). With `drain`
/// the body is read to its end so the connection can be reused; without, the
/// client stops at the final event (execd's grace period would add ~1 s).
fn command(pool: &Pool, prefix: &str, cmd: &str, drain: bool) -> io::Result<Outcome> {
    let body = format!("{{\"command\":{},\"background\":false}}", json_str(cmd));
    events(pool, &format!("{prefix}/command"), &body, drain)
}

/// One POST answered with execd's event stream (`/command`, `/session/{id}/run`).
fn events(pool: &Pool, path: &str, body: &str, drain: bool) -> io::Result<Outcome> {
    let headers = [("Content-Type", "application/json"), ("Accept", "text/event-stream")];
    // A kept-alive connection may have been closed while idle: retry once on a fresh one.
    let (mut conn, head) = {
        let mut conn = pool.take()?;
        match conn.send("POST", path, &headers, body.as_bytes()).and_then(|_| conn.read_head()) {
            Ok(head) => (conn, head),
            Err(_) => {
                let mut conn = Conn::open(&conn.authority)?;
                conn.send("POST", path, &headers, body.as_bytes())?;
                let head = conn.read_head()?;
                (conn, head)
            }
        }
    };
    if head.status != 200 {
        return Err(io::Error::other(format!("POST {path}: HTTP {}", head.status)));
    }
    let mut frames = Frames { buf: Vec::with_capacity(512 << 10), out: Outcome::default(), scanned: 0 };
    conn.read_body(&head, |data| {
        frames.feed(data);
        drain || !frames.out.finished
    })?;
    if !frames.out.finished {
        return Err(io::Error::other("the command stream ended without a final event"));
    }
    pool.give(conn);
    Ok(frames.out)
}

fn done(out: &Outcome) -> Instant {
    out.done_at.unwrap_or_else(Instant::now)
}

fn run(endpoint: &str, cmd: &str, n: usize, warmup: usize, drain: bool) -> io::Result<String> {
    let (authority, prefix) = split_endpoint(endpoint);
    let pool = Pool::new(&authority);
    let cmd = if cmd.is_empty() { "true" } else { cmd };
    let mut lat = Vec::with_capacity(n);
    for i in 0..warmup + n {
        let t = Instant::now();
        let out = command(&pool, &prefix, cmd, drain)?;
        if i >= warmup {
            lat.push(done(&out).duration_since(t).as_micros() as u64);
        }
    }
    Ok(format!("\"lat_us\":{}", list(&lat)))
}

/// `POST /session/{id}/run {"command":"true"}` in one session (made with
/// `POST /session` and deleted outside the timing), as the SDK's `run_in_session`.
fn session(endpoint: &str, n: usize, warmup: usize) -> io::Result<String> {
    let (authority, prefix) = split_endpoint(endpoint);
    let pool = Pool::new(&authority);
    let call = |method: &str, path: &str, body: &[u8]| -> io::Result<(u16, Vec<u8>)> {
        let mut conn = pool.take()?;
        conn.send(method, path, &[("Content-Type", "application/json")], body)?;
        let head = conn.read_head()?;
        let data = conn.read_all(&head)?;
        pool.give(conn);
        Ok((head.status, data))
    };
    let (status, data) = call("POST", &format!("{prefix}/session"), b"{}")?;
    let mut scratch = Vec::new();
    let id = field(&data, b"\"session_id\":\"", &mut scratch)
        .filter(|_| status == 200)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .ok_or_else(|| {
            io::Error::other(format!("POST /session: HTTP {status} {}", String::from_utf8_lossy(&data)))
        })?;
    let path = format!("{prefix}/session/{id}/run");
    let mut lat = Vec::with_capacity(n);
    for i in 0..warmup + n {
        let t = Instant::now();
        let out = events(&pool, &path, "{\"command\":\"true\"}", true)?;
        if i >= warmup {
            lat.push(done(&out).duration_since(t).as_micros() as u64);
        }
    }
    call("DELETE", &format!("{prefix}/session/{id}"), &[])?;
    Ok(format!("\"lat_us\":{}", list(&lat)))
}

fn stream(endpoint: &str, cmd: &str, drain: bool) -> io::Result<String> {
    let (authority, prefix) = split_endpoint(endpoint);
    let pool = Pool::new(&authority);
    command(&pool, &prefix, "true", drain)?; // connect outside the timed part
    let t = Instant::now();
    let out = command(&pool, &prefix, cmd, drain)?;
    let secs = done(&out).duration_since(t).as_secs_f64();
    Ok(format!("\"secs\":{secs},\"text_bytes\":{},\"lines\":{}", out.bytes, out.lines))
}

/// `POST /code/context {"language":"python"}`: the new context's id.
fn code_context(pool: &Pool, prefix: &str) -> io::Result<String> {
    let mut conn = pool.take()?;
    let path = format!("{prefix}/code/context");
    conn.send("POST", &path, &[("Content-Type", "application/json")], b"{\"language\":\"python\"}")?;
    let head = conn.read_head()?;
    let data = conn.read_all(&head)?;
    pool.give(conn);
    let mut scratch = Vec::new();
    field(&data, b"\"id\":\"", &mut scratch)
        .filter(|_| head.status == 200)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .ok_or_else(|| io::Error::other(format!("POST {path}: HTTP {} {}", head.status, String::from_utf8_lossy(&data))))
}

/// One `POST /code` in `context`, read to the stream's end: execd 1.1.1 says
/// `execution_complete` before a run's output, so the end of the stream is the
/// end of the run.
fn code_run(pool: &Pool, prefix: &str, context: &str, code: &str) -> io::Result<Outcome> {
    let body = format!("{{\"context\":{{\"id\":{},\"language\":\"python\"}},\"code\":{}}}", json_str(context), json_str(code));
    events(pool, &format!("{prefix}/code"), &body, true)
}

fn code(endpoint: &str, code: &str, n: usize, warmup: usize) -> io::Result<String> {
    let (authority, prefix) = split_endpoint(endpoint);
    let pool = Pool::new(&authority);
    let context = code_context(&pool, &prefix)?;
    let mut lat = Vec::with_capacity(n);
    for i in 0..warmup + n {
        let t = Instant::now();
        code_run(&pool, &prefix, &context, code)?;
        if i >= warmup {
            lat.push(t.elapsed().as_micros() as u64);
        }
    }
    Ok(format!("\"lat_us\":{}", list(&lat)))
}

fn code_stream(endpoint: &str, code: &str) -> io::Result<String> {
    let (authority, prefix) = split_endpoint(endpoint);
    let pool = Pool::new(&authority);
    let context = code_context(&pool, &prefix)?;
    code_run(&pool, &prefix, &context, "0")?; // connect and wake the kernel outside the timed part
    let t = Instant::now();
    let out = code_run(&pool, &prefix, &context, code)?;
    let secs = t.elapsed().as_secs_f64();
    Ok(format!("\"secs\":{secs},\"text_bytes\":{},\"lines\":{}", out.bytes, out.lines))
}

/// The benchmark's file content: printable ASCII lines, the same bytes every
/// contender writes (see bench/drivers/common.py `file_content`).
fn file_content(size: usize) -> Vec<u8> {
    let line = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n";
    line.iter().copied().cycle().take(size).collect()
}

fn encode_query(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn files(endpoint: &str, path: &str, size: usize, sha: bool) -> io::Result<String> {
    let (authority, prefix) = split_endpoint(endpoint);
    let pool = Pool::new(&authority);
    let content = file_content(size);
    command(&pool, &prefix, "true", true)?; // connect outside the timed part

    let boundary = "rawbenchboundary7f3a9c";
    let meta = format!("{{\"path\":{},\"mode\":644}}", json_str(path));
    let preamble = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n\
         Content-Type: application/json\r\n\r\n{meta}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"file\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    );
    let epilogue = format!("\r\n--{boundary}--");
    let total = preamble.len() + content.len() + epilogue.len();
    let ctype = format!("multipart/form-data; boundary={boundary}");
    let t = Instant::now();
    let mut conn = pool.take()?;
    conn.send_head("POST", &format!("{prefix}/files/upload"), &[("Content-Type", &ctype)], total as u64)?;
    conn.write_body(preamble.as_bytes())?;
    for chunk in content.chunks(1 << 20) {
        conn.write_body(chunk)?;
    }
    conn.write_body(epilogue.as_bytes())?;
    let head = conn.read_head()?;
    let answer = conn.read_all(&head)?;
    if head.status != 200 {
        return Err(io::Error::other(format!(
            "upload: HTTP {} {}",
            head.status,
            String::from_utf8_lossy(&answer)
        )));
    }
    let write_s = t.elapsed().as_secs_f64();
    pool.give(conn);

    let t = Instant::now();
    let mut conn = pool.take()?;
    conn.send("GET", &format!("{prefix}/files/download?path={}", encode_query(path)), &[], &[])?;
    let head = conn.read_head()?;
    let mut got = Vec::with_capacity(size);
    conn.read_body(&head, |b| {
        got.extend_from_slice(b);
        true
    })?;
    let read_s = t.elapsed().as_secs_f64();
    if head.status != 200 || got != content {
        return Err(io::Error::other(format!(
            "download: HTTP {}, {} bytes, content {}",
            head.status,
            got.len(),
            if got == content { "equal" } else { "differs" }
        )));
    }
    // With `sha`: sha256 of what was sent and of what came back, after the clock stopped.
    let shas = if sha {
        let (mut sent, mut back) = (sha256::Sha256::new(), sha256::Sha256::new());
        sent.update(&content);
        back.update(&got);
        format!(",\"write_sha256\":\"{}\",\"read_sha256\":\"{}\"", sent.hex(), back.hex())
    } else {
        String::new()
    };
    Ok(format!("\"write_s\":{write_s},\"read_s\":{read_s},\"bytes\":{size}{shas}"))
}

type Target = (Arc<Pool>, String);

fn targets_of(endpoints: &str) -> Vec<Target> {
    endpoints
        .split(',')
        .map(|e| {
            let (a, p) = split_endpoint(e);
            (Arc::new(Pool::new(&a)), p)
        })
        .collect()
}

/// `n` threads released at once by a barrier, thread i calling `f(target i mod
/// k)`, which returns (its start, its end); (wall from the first start to the
/// last end, each call's time).
fn batch<F>(targets: &[Target], n: usize, f: F) -> io::Result<(u64, Vec<u64>)>
where
    F: Fn(&Pool, &str) -> io::Result<(Instant, Instant)> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let barrier = Arc::new(Barrier::new(n + 1));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (pool, prefix) = targets[i % targets.len()].clone();
            let (barrier, f) = (barrier.clone(), f.clone());
            std::thread::spawn(move || -> io::Result<(Instant, Instant)> {
                barrier.wait();
                f(&pool, &prefix)
            })
        })
        .collect();
    barrier.wait();
    // The batch runs from the first request sent to the last answer read
    // (this thread may be scheduled late after the barrier).
    let mut span: Option<(Instant, Instant)> = None;
    let mut these = Vec::with_capacity(n);
    for h in handles {
        let (t0, t1) = h.join().map_err(|_| io::Error::other("thread panicked"))??;
        these.push(t1.duration_since(t0).as_micros() as u64);
        span = Some(match span {
            None => (t0, t1),
            Some((a, b)) => (a.min(t0), b.max(t1)),
        });
    }
    let (start, end) = span.ok_or_else(|| io::Error::other("empty batch"))?;
    Ok((end.duration_since(start).as_micros() as u64, these))
}

fn run_one(pool: &Pool, prefix: &str, drain: bool) -> io::Result<(Instant, Instant)> {
    let t = Instant::now();
    let out = command(pool, prefix, "true", drain)?;
    Ok((t, done(&out)))
}

/// `n` commands at once over the sandboxes' endpoints (request i → sandbox i mod k).
fn concurrent(endpoints: &str, n: usize, batches: usize, drain: bool) -> io::Result<String> {
    let targets = targets_of(endpoints);
    let mut walls = Vec::new();
    let mut lat = Vec::new();
    // Batch 0 is the warm-up (connections opened, endpoints known).
    for b in 0..=batches {
        let (wall, these) = batch(&targets, n, move |pool, prefix| run_one(pool, prefix, drain))?;
        if b > 0 {
            walls.push(wall);
            lat.extend(these);
        }
    }
    Ok(format!("\"wall_us\":{},\"lat_us\":{}", list(&walls), list(&lat)))
}

/// Timed batches of one level: at least `batches`, and at least `min_calls` calls.
fn level_batches(batches: usize, min_calls: usize, n: usize) -> usize {
    batches.max(min_calls.div_ceil(n.max(1)))
}

/// One level of a scaling curve, as `"KxN":{…}`: a warm-up batch of `go`, then
/// `timed` batches with this process's peak RSS (VmHWM reset after the warm-up).
fn level<F>(k: usize, n: usize, timed: usize, go: F) -> io::Result<String>
where
    F: Fn() -> io::Result<(u64, Vec<u64>)>,
{
    go()?;
    reset_peak();
    let (mut walls, mut lat) = (Vec::new(), Vec::new());
    for _ in 0..timed {
        let (wall, these) = go()?;
        walls.push(wall);
        lat.extend(these);
    }
    let (rss, hwm) = memory();
    Ok(format!(
        "\"{k}x{n}\":{{\"wall_us\":{},\"lat_us\":{},\"rss_kib\":{rss},\"hwm_kib\":{hwm}}}",
        list(&walls),
        list(&lat)
    ))
}

/// Workload 24's scaling curve: for each count of sandboxes in `series` and each
/// level, one warm-up batch, then timed batches of `level` concurrent commands;
/// this process's peak RSS per level (VmHWM reset before the timed batches).
fn scale_run(endpoints: &str, series: &[usize], levels: &[usize], batches: usize, min_calls: usize) -> io::Result<String> {
    let all = targets_of(endpoints);
    let mut steps = Vec::new();
    for &k in series {
        let targets = &all[..k.min(all.len())];
        for &n in levels {
            let go = || batch(targets, n, |pool, prefix| run_one(pool, prefix, true));
            steps.push(level(targets.len(), n, level_batches(batches, min_calls, n), go)?);
        }
    }
    Ok(format!("\"steps\":{{{}}}", steps.join(",")))
}

/// One `GET /files/download` read to its end, every piece compared with the
/// bench content at its offset (a memcmp, inside the timed part: negligible).
fn download_one(pool: &Pool, prefix: &str, query: &str, want: &[u8]) -> io::Result<(Instant, Instant)> {
    let t = Instant::now();
    let mut conn = pool.take()?;
    conn.send("GET", &format!("{prefix}/files/download?path={query}"), &[], &[])?;
    let head = conn.read_head()?;
    let (mut got, mut equal) = (0usize, true);
    conn.read_body(&head, |b| {
        equal &= want.get(got..got + b.len()) == Some(b);
        got += b.len();
        true
    })?;
    let end = Instant::now();
    if head.status != 200 || got != want.len() || !equal {
        return Err(io::Error::other(format!(
            "download: HTTP {}, {got} bytes of {}, content {}",
            head.status,
            want.len(),
            if equal { "equal" } else { "differs" }
        )));
    }
    pool.give(conn);
    Ok((t, end))
}

/// Workload 24's scaling curve for files: `level` concurrent downloads of `path`
/// (`size` bytes of the bench content) over the endpoints, one warm-up batch per level.
fn scale_read(endpoints: &str, path: &str, size: usize, levels: &[usize], batches: usize, min_calls: usize) -> io::Result<String> {
    let targets = targets_of(endpoints);
    let want = Arc::new(file_content(size));
    let query = Arc::new(encode_query(path));
    let mut steps = Vec::new();
    let mut compared = 0;
    for &n in levels {
        let go = || {
            let (want, query) = (want.clone(), query.clone());
            batch(&targets, n, move |pool, prefix| download_one(pool, prefix, &query, &want))
        };
        let timed = level_batches(batches, min_calls, n);
        steps.push(level(targets.len(), n, timed, go)?);
        compared += n * (1 + timed);
    }
    Ok(format!("\"steps\":{{{}}},\"compared\":{compared}", steps.join(",")))
}

/// Sandbox create → ready (endpoint known, execd answers /ping) → delete.
fn cycle(server: &str, key: &str, n: usize) -> io::Result<String> {
    let pool = Pool::new(server);
    let auth = [("OPEN-SANDBOX-API-KEY", key), ("Content-Type", "application/json")];
    let body = br#"{"image":{"uri":"python:3.12-slim"},"entrypoint":["tail","-f","/dev/null"],"timeout":300,"resourceLimits":{"cpu":"1","memory":"2Gi"},"env":{},"metadata":{"bench":"cycle"}}"#;
    let mut times = Vec::new();
    let call = |method: &str, path: &str, body: &[u8]| -> io::Result<(u16, Vec<u8>)> {
        let mut conn = pool.take()?;
        conn.send(method, path, &auth, body)?;
        let head = conn.read_head()?;
        let data = conn.read_all(&head)?;
        pool.give(conn);
        Ok((head.status, data))
    };
    for _ in 0..n {
        let t = Instant::now();
        let (status, data) = call("POST", "/v1/sandboxes", body)?;
        let text = String::from_utf8_lossy(&data).into_owned();
        if !(200..300).contains(&status) {
            return Err(io::Error::other(format!("create: HTTP {status} {text}")));
        }
        let mut scratch = Vec::new();
        let id = field(text.as_bytes(), b"\"id\":\"", &mut scratch)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .ok_or_else(|| io::Error::other("create: no id"))?;
        let (status, data) = call("GET", &format!("/v1/sandboxes/{id}/endpoints/44772"), &[])?;
        let text = String::from_utf8_lossy(&data).into_owned();
        let endpoint = field(text.as_bytes(), b"\"endpoint\":\"", &mut scratch)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .filter(|_| status == 200)
            .ok_or_else(|| io::Error::other(format!("endpoint: HTTP {status} {text}")))?;
        let (authority, prefix) = split_endpoint(&endpoint);
        loop {
            let mut conn = Conn::open(&authority)?;
            conn.send("GET", &format!("{prefix}/ping"), &[], &[])?;
            let head = conn.read_head()?;
            if head.status == 200 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let (status, _) = call("DELETE", &format!("/v1/sandboxes/{id}"), &[])?;
        if !(200..300).contains(&status) {
            return Err(io::Error::other(format!("delete: HTTP {status}")));
        }
        times.push(t.elapsed().as_micros() as u64);
    }
    Ok(format!("\"cycle_us\":{}", list(&times)))
}

/// Workload 16 (Docker tier): create → ready → kill from a snapshot and from an
/// image, `n` of each, alternating (`first` goes first in even pairs). The HTTP
/// calls are the provider's: for a snapshot `GET /v1/snapshots?name=` (the
/// provider looks a template's name up on every create), then for both
/// `POST /v1/sandboxes` with its body (`snapshotId` and no entrypoint, or `image`
/// with `tail -f /dev/null`), the execd endpoint, `/ping` every 200 ms until it
/// answers (a refused connection counts as not yet), `GET /v1/sandboxes/{id}`
/// (the provider answers the sandbox's info as it is then), `DELETE`.
fn snapshot_cycle(
    server: &str,
    key: &str,
    n: usize,
    first: &str,
    image: &str,
    snapshot: &str,
) -> io::Result<String> {
    let pool = Pool::new(server);
    let auth = [("OPEN-SANDBOX-API-KEY", key), ("Content-Type", "application/json")];
    let call = |method: &str, path: &str, body: &[u8]| -> io::Result<(u16, String)> {
        let mut conn = pool.take()?;
        conn.send(method, path, &auth, body)?;
        let head = conn.read_head()?;
        let data = conn.read_all(&head)?;
        pool.give(conn);
        Ok((head.status, String::from_utf8_lossy(&data).into_owned()))
    };
    let id_in = |what: &str, status: u16, text: &str| -> io::Result<String> {
        let mut scratch = Vec::new();
        field(text.as_bytes(), b"\"id\":\"", &mut scratch)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .filter(|_| (200..300).contains(&status))
            .ok_or_else(|| io::Error::other(format!("{what}: HTTP {status} {text}")))
    };
    let rest = r#""timeout":300,"resourceLimits":{"cpu":"1","memory":"2Gi"},"env":{},"metadata":{"bench":"snapshot-cycle"}}"#;
    let image_body = format!(r#"{{"image":{{"uri":{}}},"entrypoint":["tail","-f","/dev/null"],{rest}"#, json_str(image));
    let lookup = format!("/v1/snapshots?page=1&pageSize=200&name={}", encode_query(snapshot));
    let one = |from_snapshot: bool| -> io::Result<u64> {
        let t = Instant::now();
        let body = if from_snapshot {
            let (status, text) = call("GET", &lookup, &[])?;
            let snapshot_id = id_in("snapshot lookup", status, &text)?;
            format!(r#"{{"snapshotId":{},{rest}"#, json_str(&snapshot_id))
        } else {
            image_body.clone()
        };
        let (status, text) = call("POST", "/v1/sandboxes", body.as_bytes())?;
        let id = id_in("create", status, &text)?;
        let (status, text) = call("GET", &format!("/v1/sandboxes/{id}/endpoints/44772"), &[])?;
        let mut scratch = Vec::new();
        let endpoint = field(text.as_bytes(), b"\"endpoint\":\"", &mut scratch)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .filter(|_| status == 200)
            .ok_or_else(|| io::Error::other(format!("endpoint: HTTP {status} {text}")))?;
        let (authority, prefix) = split_endpoint(&endpoint);
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let answered = Conn::open(&authority).and_then(|mut conn| {
                conn.send("GET", &format!("{prefix}/ping"), &[], &[])?;
                Ok(conn.read_head()?.status == 200)
            });
            if let Ok(true) = answered {
                break;
            }
            if Instant::now() > deadline {
                let why = format!("sandbox {id}: execd did not answer /ping in 60 s ({answered:?})");
                return Err(io::Error::other(why));
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let (status, text) = call("GET", &format!("/v1/sandboxes/{id}"), &[])?;
        if status != 200 {
            return Err(io::Error::other(format!("sandbox info: HTTP {status} {text}")));
        }
        let (status, text) = call("DELETE", &format!("/v1/sandboxes/{id}"), &[])?;
        if !(200..300).contains(&status) {
            return Err(io::Error::other(format!("delete: HTTP {status} {text}")));
        }
        Ok(t.elapsed().as_micros() as u64)
    };
    let (mut from_image, mut from_snapshot) = (Vec::new(), Vec::new());
    for i in 0..n {
        let snapshot_first = (first == "snapshot") == (i % 2 == 0);
        for take_snapshot in [snapshot_first, !snapshot_first] {
            let us = one(take_snapshot)?;
            if take_snapshot { from_snapshot.push(us) } else { from_image.push(us) }
        }
    }
    Ok(format!("\"image_us\":{},\"snapshot_us\":{}", list(&from_image), list(&from_snapshot)))
}
