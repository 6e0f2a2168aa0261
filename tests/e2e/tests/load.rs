//! Load and soak on loopback: many sandboxes and many operations in flight at
//! once through a few hosts (two of them with `--fresh-instances`), every
//! answer checked, nothing left running, host memory flat. Short in `just
//! test`; `just soak` runs the long versions:
//!
//! - `EPP_LOAD_SANDBOXES` (default 250: more than one page of `sandbox.list`) sandboxes, `EPP_LOAD_OPS` (default 200)
//!   operations in flight at once, `EPP_LOAD_ROUNDS` (default 1) times;
//! - `EPP_SOAK_SECS` (default 20) of create/run/stream/files/terminal/kill
//!   cycles with host RSS sampled every `EPP_SOAK_SAMPLE_SECS` (default 1).
//!
//! Figures go to `target/reliability/load.txt`, `soak.txt` and `soak-rss.csv`.

use epp_e2e::{Host, HostBuilder, Mode, b64e, figure, open_fds, orphans, rss_kib, unique};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A host's resident set. A host whose `/proc` entry cannot be read has died,
/// which fails the test: a figure of 0 would hide it.
fn host_rss(h: &Host) -> u64 {
    rss_kib(h.pid()).unwrap_or_else(|| {
        panic!(
            "cannot read VmRSS of epp-host pid {}: has it died?",
            h.pid()
        )
    })
}

/// A host's open descriptors; as `host_rss`, a missing host fails the test.
fn host_fds(h: &Host) -> usize {
    open_fds(h.pid()).unwrap_or_else(|| {
        panic!(
            "cannot list the fds of epp-host pid {}: has it died?",
            h.pid()
        )
    })
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A streamed run answers without `stdout`.
fn i_is_stream(result: &Value) -> bool {
    result.get("stdout").is_none()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Creates `n` sandboxes spread over `hosts`, all at once; returns (host index, id).
fn create_many(hosts: &[Host], n: usize, tag: &str) -> Vec<(usize, String)> {
    let ids = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for i in 0..n {
            let ids = &ids;
            s.spawn(move || {
                let h = i % hosts.len();
                let info = hosts[h].create_info(json!({"metadata": {"e2e": tag}, "timeout": 900}));
                ids.lock()
                    .unwrap()
                    .push((h, info["sandbox_id"].as_str().unwrap().to_string()));
            });
        }
    });
    ids.into_inner().unwrap()
}

/// Checks an answer.
type Check = Box<dyn Fn(&Value) -> bool>;

/// One operation of the storm, and how to check its answer.
fn operation(i: usize, sandbox: &str) -> (&'static str, Value, Check) {
    let tag = format!("op-{i}");
    match i % 6 {
        0 => (
            "commands.run",
            json!({"sandbox_id": sandbox, "cmd": format!("echo {tag}")}),
            Box::new(move |r: &Value| r["stdout"] == format!("{tag}\n") && r["exit_code"] == 0),
        ),
        1 => (
            "files.write",
            json!({"sandbox_id": sandbox, "path": format!("{tag}.txt"), "content": tag.repeat(100)}),
            Box::new(|r: &Value| r["type"] == "file"),
        ),
        2 => (
            "sandbox.get_info",
            json!({"sandbox_id": sandbox}),
            Box::new(|r: &Value| r["state"] == "running"),
        ),
        // (Not process.list: on the testbed a sandbox sees every process of
        // the machine, and listing them forks per process.)
        3 => (
            "files.list",
            json!({"sandbox_id": sandbox, "path": "."}),
            Box::new(|r: &Value| r["entries"].is_array()),
        ),
        4 => (
            "files.exists",
            json!({"sandbox_id": sandbox, "path": "/no/such/file"}),
            Box::new(|r: &Value| r["exists"] == false),
        ),
        _ => (
            "commands.run",
            json!({"sandbox_id": sandbox, "cmd": "for i in 1 2 3; do echo $i; done", "stream": true}),
            Box::new(|r: &Value| r["exit_code"] == 0),
        ),
    }
}

#[test]
fn hundreds_of_concurrent_operations() {
    let sandboxes = env_u64("EPP_LOAD_SANDBOXES", 250) as usize;
    let ops = env_u64("EPP_LOAD_OPS", 200) as usize;
    let rounds = env_u64("EPP_LOAD_ROUNDS", 1) as usize;
    let modes = [Mode::Direct, Mode::Proxy, Mode::Direct, Mode::Proxy];
    // The provider declares its instances reusable, so the first two serve
    // calls from instances earlier calls left; the last two make a fresh one
    // for every call (`--fresh-instances`): the same answers, checked the
    // same way.
    let hosts: Vec<Host> = modes
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let builder = HostBuilder::new(*m);
            if i >= 2 {
                builder.arg("--fresh-instances").spawn()
            } else {
                builder.spawn()
            }
        })
        .collect();
    for h in &hosts {
        h.ok("epp.hello", json!({}));
    }
    let tag = unique("load");

    let began = Instant::now();
    let created = create_many(&hosts, sandboxes, &tag);
    let create_took = began.elapsed();
    assert_eq!(created.len(), sandboxes);

    let mut latencies = Vec::new();
    let mut by_method: std::collections::BTreeMap<&str, Vec<Duration>> = Default::default();
    let mut answered = 0usize;
    let storm = Instant::now();
    for round in 0..rounds {
        // Every operation is sent before any answer is awaited: `ops` in flight.
        let sent: Vec<_> = (0..ops)
            .map(|i| {
                let (h, id) = &created[i % created.len()];
                let (method, params, check) = operation(i + round * ops, id);
                let at = Instant::now();
                (*h, method, hosts[*h].send(method, params), check, at)
            })
            .collect();
        for (h, method, id, check, at) in sent {
            let (result, arrived) = hosts[h].wait_at(&id, Duration::from_secs(180));
            let result = result
                .unwrap_or_else(|e| panic!("{method} (request {id}) failed under load: {e:?}"));
            assert!(
                check(&result),
                "{method}: wrong answer under load: {result}"
            );
            latencies.push(arrived.duration_since(at));
            let kind = if method == "commands.run" && i_is_stream(&result) {
                "commands.run (stream)"
            } else {
                method
            };
            by_method
                .entry(kind)
                .or_default()
                .push(arrived.duration_since(at));
            answered += 1;
        }
    }
    let storm_took = storm.elapsed();
    latencies.sort();
    let per_method: Vec<String> = by_method
        .iter_mut()
        .map(|(m, l)| {
            l.sort();
            format!(
                "{m}: n={} p50={}ms p95={}ms",
                l.len(),
                percentile(l, 0.5).as_millis(),
                percentile(l, 0.95).as_millis()
            )
        })
        .collect();
    let rss: Vec<u64> = hosts.iter().map(host_rss).collect();
    let fds: Vec<usize> = hosts.iter().map(host_fds).collect();

    // The provider asks for 200 a page: with more, `sandbox.list` must walk the
    // pages and find each sandbox exactly once.
    let listed = hosts[1].ok("sandbox.list", json!({"metadata": {"e2e": tag}}));
    let mut found: Vec<&str> = listed["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sandbox_id"].as_str().unwrap())
        .collect();
    found.sort_unstable();
    let mut want: Vec<&str> = created.iter().map(|(_, id)| id.as_str()).collect();
    want.sort_unstable();
    assert_eq!(found, want, "sandbox.list over {sandboxes} sandboxes");

    // Kill everything at once; then no process of any of them may be left.
    let killed = Instant::now();
    std::thread::scope(|s| {
        for (h, id) in &created {
            let host = &hosts[*h];
            s.spawn(move || host.ok("sandbox.kill", json!({"sandbox_id": id})));
        }
    });
    let kill_took = killed.elapsed();
    let ids: Vec<String> = created.iter().map(|(_, id)| id.clone()).collect();
    let left = orphans(&ids, Duration::from_secs(20));
    assert!(
        left.is_empty(),
        "sandbox processes left after kill: {left:?}"
    );
    let listed = hosts[0].ok("sandbox.list", json!({"metadata": {"e2e": tag}}));
    assert_eq!(listed["sandboxes"].as_array().unwrap().len(), 0, "{listed}");

    figure(
        "load",
        &format!(
            "sandboxes={sandboxes} hosts={} ops_in_flight={ops} rounds={rounds} answered={answered}/{} \
             create_all={:.1}s storm={:.1}s p50={}ms p95={}ms max={}ms kill_all={:.1}s \
             host_rss_kib={rss:?} host_fds={fds:?} orphans=0 | {}",
            hosts.len(),
            ops * rounds,
            create_took.as_secs_f64(),
            storm_took.as_secs_f64(),
            percentile(&latencies, 0.5).as_millis(),
            percentile(&latencies, 0.95).as_millis(),
            latencies.last().copied().unwrap_or_default().as_millis(),
            kill_took.as_secs_f64(),
            per_method.join(" | "),
        ),
    );
    assert_eq!(answered, ops * rounds);
}

/// One full life: create, run, stream, write and read a file, a terminal, kill.
fn cycle(host: &Host, n: u64, ids: &Mutex<Vec<String>>) -> u64 {
    let info = host.ok("sandbox.create", json!({"metadata": {"e2e": "soak"}}));
    let id = info["sandbox_id"].as_str().unwrap().to_string();
    ids.lock().unwrap().push(id.clone());
    let mut requests = 1;
    let r = host.ok(
        "commands.run",
        json!({"sandbox_id": id, "cmd": format!("echo soak {n}")}),
    );
    assert_eq!(r["stdout"], format!("soak {n}\n"));
    let r = host.ok(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "for i in $(seq 20); do echo line $i; done", "stream": true}),
    );
    assert_eq!(r["exit_code"], 0);
    let content = format!("{n:08}").repeat(32 << 10); // 256 KiB
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": "soak.txt", "content": content}),
    );
    let read = host.ok("files.read", json!({"sandbox_id": id, "path": "soak.txt"}));
    assert!(read["content"] == content.as_str());
    requests += 4;
    let pty = host.ok("pty.create", json!({"sandbox_id": id}))["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    host.ok(
        "pty.send_input",
        json!({"sandbox_id": id, "pty_id": pty, "data": b64e(b"exit 7\n")}),
    );
    let exit = host.wait_note(Duration::from_secs(30), |m| {
        m["method"] == "pty.exit" && m["params"]["pty_id"] == pty.as_str()
    });
    assert_eq!(exit.expect("pty.exit")["params"]["exit_code"], 7);
    host.ok("sandbox.kill", json!({"sandbox_id": id}));
    requests + 3
}

#[test]
fn soak() {
    let secs = env_u64("EPP_SOAK_SECS", 20);
    let every = Duration::from_secs(env_u64("EPP_SOAK_SAMPLE_SECS", 1).max(1));
    let workers = env_u64("EPP_SOAK_WORKERS", 3);
    let hosts = [Host::start(Mode::Direct), Host::start(Mode::Proxy)];
    for h in &hosts {
        h.ok("epp.hello", json!({}));
    }
    let until = Instant::now() + Duration::from_secs(secs);
    let requests = AtomicU64::new(0);
    let cycles = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let ids = Mutex::new(Vec::new());
    let samples = Mutex::new(Vec::<(f64, Vec<u64>, Vec<usize>)>::new());
    let began = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                let rss = hosts.iter().map(host_rss).collect();
                let fds = hosts.iter().map(host_fds).collect();
                samples
                    .lock()
                    .unwrap()
                    .push((began.elapsed().as_secs_f64(), rss, fds));
                let next = Instant::now() + every;
                while Instant::now() < next && !done.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        let workers: Vec<_> = (0..workers)
            .map(|w| {
                let host = &hosts[w as usize % hosts.len()];
                let (requests, cycles, ids) = (&requests, &cycles, &ids);
                s.spawn(move || {
                    let mut n = w * 1_000_000;
                    while Instant::now() < until {
                        requests.fetch_add(cycle(host, n, ids), Ordering::Relaxed);
                        cycles.fetch_add(1, Ordering::Relaxed);
                        n += 1;
                    }
                })
            })
            .collect();
        // Stop the sampler before reporting a failed worker: a scope waits for
        // every thread, so panicking first would wait for the sampler forever.
        let results: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        done.store(true, Ordering::SeqCst);
        for r in results {
            if let Err(panic) = r {
                std::panic::resume_unwind(panic);
            }
        }
    });
    let elapsed = began.elapsed();
    let ids = ids.into_inner().unwrap();
    let left = orphans(&ids, Duration::from_secs(20));
    assert!(left.is_empty(), "sandbox processes left: {left:?}");

    // RSS: the largest sample of the warm-up (first quarter) against the last
    // samples; a leak shows as steady growth after warm-up.
    let samples = samples.into_inner().unwrap();
    let mut csv = String::from(
        "seconds,direct_host_rss_kib,proxy_host_rss_kib,direct_host_fds,proxy_host_fds\n",
    );
    for (t, rss, fds) in &samples {
        csv.push_str(&format!(
            "{t:.1},{},{},{},{}\n",
            rss[0], rss[1], fds[0], fds[1]
        ));
    }
    let dir = std::env::var_os("EPP_FIGURES_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| epp_e2e::target_dir().join("reliability"));
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join("soak-rss.csv"), csv);
    let warm = (samples.len() / 4).max(1);
    let mut verdicts = Vec::new();
    for h in 0..hosts.len() {
        let series: Vec<u64> = samples.iter().map(|(_, r, _)| r[h]).collect();
        let fds: Vec<usize> = samples.iter().map(|(_, _, f)| f[h]).collect();
        let fds_warm = *fds[..warm].iter().max().unwrap_or(&0);
        let fds_end = fds[fds.len().saturating_sub(3)..]
            .iter()
            .copied()
            .min()
            .unwrap_or(0);
        let warm_max = *series[..warm].iter().max().unwrap_or(&0);
        let tail = &series[series.len().saturating_sub(3)..];
        let end = tail.iter().copied().min().unwrap_or(0);
        let peak = series.iter().copied().max().unwrap_or(0);
        // Allowed after warm-up: 10 % or 8 MiB, whichever is larger (the idle
        // pool leak this caught grew 9 MiB in two minutes).
        let slack = (warm_max / 10).max(8 << 10);
        verdicts.push(format!(
            "{}: RSS warm-up max {} KiB, end {} KiB, peak {} KiB; fds warm-up max {}, end {}",
            if h == 0 { "direct" } else { "proxy" },
            warm_max,
            end,
            peak,
            fds_warm,
            fds_end
        ));
        assert!(
            fds_end <= fds_warm + 16,
            "host {h} holds more and more file descriptors: {fds_warm} -> {fds_end} (samples: {fds:?})"
        );
        assert!(
            end <= warm_max + slack,
            "host {h} RSS grew after warm-up: {} -> {} KiB (samples: {series:?})",
            warm_max,
            end
        );
    }
    figure(
        "soak",
        &format!(
            "duration={:.0}s workers={workers} cycles={} requests={} samples={} every={}s orphans=0 lost=0 | {}",
            elapsed.as_secs_f64(),
            cycles.load(Ordering::Relaxed),
            requests.load(Ordering::Relaxed),
            samples.len(),
            every.as_secs(),
            verdicts.join(" | ")
        ),
    );
}
