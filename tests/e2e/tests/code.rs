//! code.interpret: code runs in Jupyter kernels behind execd on sandboxes made from
//! the `code` template; state lives in a context, rich results keep their MIME
//! bundles, exceptions their tracebacks; runs are interrupted, cancelled and timed
//! out without losing the context; a sandbox without kernels says so at once.

use epp_e2e::{Host, Mode, b64d, both_modes, unique, wait_until};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn code_sandbox(host: &Host) -> String {
    let info = host.create_info(json!({"template": "code", "metadata": {"e2e": unique("code")}}));
    info["sandbox_id"].as_str().unwrap().to_string()
}

fn new_context(host: &Host, sandbox: &str) -> String {
    host.ok(
        "code.create_context",
        json!({"sandbox_id": sandbox, "language": "python"}),
    )["context_id"]
        .as_str()
        .expect("context_id")
        .to_string()
}

fn run(host: &Host, sandbox: &str, context: &str, code: &str) -> Value {
    host.ok(
        "code.run",
        json!({"sandbox_id": sandbox, "context_id": context, "code": code}),
    )
}

/// The `text/plain` of the run's main result (the last expression's value).
fn value(answer: &Value) -> Option<String> {
    answer["results"]
        .as_array()?
        .iter()
        .find(|r| r["is_main_result"] == true)
        .and_then(|r| r["data"]["text/plain"].as_str())
        .map(str::to_string)
}

fn state_lives_in_a_context(mode: Mode) {
    let host = Host::start(mode);
    let id = code_sandbox(&host);
    let languages = host.ok("code.languages", json!({"sandbox_id": id}));
    assert!(
        languages["languages"]
            .as_array()
            .unwrap()
            .contains(&json!("python")),
        "{languages}"
    );

    let a = new_context(&host, &id);
    let b = new_context(&host, &id);
    assert_ne!(a, b);
    let r = run(&host, &id, &a, "x = 41\nprint('set', x)\nx + 1");
    assert_eq!(r["stdout"], "set 41\n", "{r}");
    assert_eq!(value(&r).as_deref(), Some("42"), "{r}");
    assert_eq!(r["context_id"], a.as_str(), "{r}");
    assert!(r["execution_count"].as_u64().unwrap() >= 1, "{r}");
    assert!(r.get("error").is_none(), "{r}");
    // The variable persists in its context…
    assert_eq!(value(&run(&host, &id, &a, "x * 2")).as_deref(), Some("82"));
    // …and does not leak into another.
    let r = run(&host, &id, &b, "x");
    assert_eq!(r["error"]["name"], "NameError", "{r}");

    // stderr, and a rich value kept as several representations.
    let r = run(
        &host,
        &id,
        &a,
        "import sys\nprint('oops', file=sys.stderr)\nfrom IPython.display import HTML\nHTML('<b>bold</b>')",
    );
    assert_eq!(r["stderr"], "oops\n", "{r}");
    let main = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["is_main_result"] == true)
        .unwrap_or_else(|| panic!("no main result: {r}"));
    assert_eq!(main["data"]["text/html"], "<b>bold</b>", "{r}");
    assert!(main["data"]["text/plain"].is_string(), "{r}");

    // The sandbox's default context when none is named.
    let r = host.ok(
        "code.run",
        json!({"sandbox_id": id, "code": "default_var = 'd'\ndefault_var"}),
    );
    assert_eq!(value(&r).as_deref(), Some("'d'"), "{r}");
    let default = r["context_id"].as_str().unwrap().to_string();
    let r = host.ok(
        "code.run",
        json!({"sandbox_id": id, "language": "python", "code": "default_var"}),
    );
    assert_eq!(r["context_id"], default.as_str(), "{r}");
    assert_eq!(value(&r).as_deref(), Some("'d'"), "{r}");

    // Listing, getting, restarting and removing contexts.
    let listed = host.ok("code.list_contexts", json!({"sandbox_id": id}));
    let ids: Vec<&str> = listed["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["context_id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&a.as_str()) && ids.contains(&b.as_str()),
        "{listed}"
    );
    let info = host.ok(
        "code.get_context",
        json!({"sandbox_id": id, "context_id": a}),
    );
    assert_eq!(info["language"], "python", "{info}");
    let fresh = host.ok(
        "code.restart_context",
        json!({"sandbox_id": id, "context_id": a}),
    );
    let fresh_id = fresh["context_id"].as_str().unwrap().to_string();
    assert_eq!(fresh["language"], "python", "{fresh}");
    let r = run(&host, &id, &fresh_id, "x");
    assert_eq!(
        r["error"]["name"], "NameError",
        "a restart empties the state: {r}"
    );
    host.fails(
        "code.run",
        json!({"sandbox_id": id, "context_id": a, "code": "1"}),
        "E4004",
    );
    host.ok(
        "code.remove_context",
        json!({"sandbox_id": id, "context_id": b}),
    );
    let e = host.fails(
        "code.run",
        json!({"sandbox_id": id, "context_id": b, "code": "1"}),
        "E4004",
    );
    assert!(e.message.contains(&b), "{e:?}");
    host.fails(
        "code.remove_context",
        json!({"sandbox_id": id, "context_id": b}),
        "E4004",
    );
    host.fails(
        "code.run",
        json!({"sandbox_id": id, "context_id": fresh_id, "code": ""}),
        "E1001",
    );
}
both_modes!(state_lives_in_a_context, super::state_lives_in_a_context);

fn plots_and_exceptions(mode: Mode) {
    let host = Host::start(mode);
    let id = code_sandbox(&host);
    let ctx = new_context(&host, &id);
    // A figure as the last expression comes back as a PNG.
    let r = run(
        &host,
        &id,
        &ctx,
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2, 3], [1, 4, 9])\nplt.close(fig)\nfig",
    );
    let png = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|x| x["data"]["image/png"].as_str())
        .unwrap_or_else(|| panic!("no image/png result: {r}"));
    let bytes = b64d(&png.replace('\n', ""));
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert!(bytes.len() > 1000, "a tiny PNG: {} bytes", bytes.len());

    // An exception: name, value and a traceback naming the failing function.
    let r = run(
        &host,
        &id,
        &ctx,
        "def divide(a, b):\n    return a / b\nprint('before')\ndivide(1, 0)",
    );
    assert_eq!(r["stdout"], "before\n", "{r}");
    assert_eq!(r["error"]["name"], "ZeroDivisionError", "{r}");
    assert!(
        r["error"]["value"]
            .as_str()
            .unwrap()
            .contains("division by zero"),
        "{r}"
    );
    let traceback = r["error"]["traceback"].as_array().unwrap();
    assert!(
        traceback
            .iter()
            .any(|l| l.as_str().unwrap().contains("divide")),
        "{r}"
    );
    // The context survives its exception.
    assert_eq!(
        value(&run(&host, &id, &ctx, "divide(9, 3)")).as_deref(),
        Some("3.0")
    );

    // Streamed: output and results as notifications, in order, the error in the answer.
    let req = host.send(
        "code.run",
        json!({"sandbox_id": id, "context_id": ctx, "stream": true,
               "code": "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.2)\n7 * 6"}),
    );
    let answer = host
        .wait(&req, Duration::from_secs(60))
        .expect("streamed run");
    assert_eq!(answer["context_id"], ctx.as_str(), "{answer}");
    assert!(answer.get("stdout").is_none(), "{answer}");
    let started = host.notes_for("code.started", &req);
    assert_eq!(started.len(), 1);
    let out: String = host
        .notes_for("code.output", &req)
        .iter()
        .map(|(_, n)| n["params"]["data"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(out, "0\n1\n2\n");
    let outputs = host.notes_for("code.output", &req);
    assert!(
        outputs.last().unwrap().0 - outputs[0].0 >= Duration::from_millis(300),
        "output was not streamed as it came"
    );
    let results = host.notes_for("code.result", &req);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].1["params"]["data"]["text/plain"], "42");
    assert_eq!(results[0].1["params"]["is_main_result"], true);
}
both_modes!(plots_and_exceptions, super::plots_and_exceptions);

fn long_runs_are_interrupted(mode: Mode) {
    let host = Host::start(mode);
    let other = Host::start(mode);
    let id = code_sandbox(&host);
    let ctx = new_context(&host, &id);
    run(&host, &id, &ctx, "kept = 'still here'");

    // code.interrupt from another host ends an endless loop with KeyboardInterrupt.
    // The run makes a file once its print has returned: then it is in the loop
    // proper (an interrupt during the kernel's own print handling is reported by
    // ipykernel on stderr instead of as the run's error).
    let in_loop = format!("/tmp/{}", unique("in-loop"));
    let req = host.send(
        "code.run",
        json!({"sandbox_id": id, "context_id": ctx, "stream": true,
               "code": format!("print('looping', flush=True)\nopen('{in_loop}', 'w').close()\nwhile True:\n    pass")}),
    );
    assert!(
        host.first_note("code.output", &req, Duration::from_secs(60))
            .is_some(),
        "the loop never started"
    );
    wait_until("the run in its loop", Duration::from_secs(30), || {
        let exists = other.ok("files.exists", json!({"sandbox_id": id, "path": in_loop}));
        (exists["exists"] == true).then_some(())
    });
    other.ok("files.remove", json!({"sandbox_id": id, "path": in_loop}));
    // Busy: a second run in the same context is refused, not queued.
    let e = other.fails(
        "code.run",
        json!({"sandbox_id": id, "context_id": ctx, "code": "1"}),
        "E4009",
    );
    assert!(e.message.contains("code.interrupt"), "{e:?}");
    other.ok(
        "code.interrupt",
        json!({"sandbox_id": id, "context_id": ctx}),
    );
    let answer = host
        .wait(&req, Duration::from_secs(30))
        .expect("interrupted run");
    assert_eq!(answer["error"]["name"], "KeyboardInterrupt", "{answer}");
    assert_eq!(
        value(&run(&host, &id, &ctx, "kept")).as_deref(),
        Some("'still here'")
    );

    // A timeout: E5004 after about the timeout, the kernel interrupted, the state kept.
    let started = Instant::now();
    let e = host.fails(
        "code.run",
        json!({"sandbox_id": id, "context_id": ctx, "code": "while True:\n    pass", "timeout": 2}),
        "E5004",
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{e:?}");
    assert!(e.message.contains("interrupted"), "{e:?}");
    assert_eq!(
        value(&run(&host, &id, &ctx, "kept")).as_deref(),
        Some("'still here'")
    );

    // A cancelled request interrupts its run.
    let req = host.send(
        "code.run",
        json!({"sandbox_id": id, "context_id": ctx, "stream": true,
               "code": "print('again', flush=True)\nwhile True:\n    pass"}),
    );
    assert!(
        host.first_note("code.output", &req, Duration::from_secs(60))
            .is_some()
    );
    host.ok("epp.cancel", json!({"id": req}));
    let e = host
        .wait(&req, Duration::from_secs(30))
        .expect_err("cancelled");
    assert_eq!(e.epp.as_str(), "E4999");
    // The interrupt is sent on cancel; the kernel takes a moment to stop the run,
    // meanwhile the context is busy (E4009).
    let after = Instant::now();
    let answer = loop {
        let reply = host.call(
            "code.run",
            json!({"sandbox_id": id, "context_id": ctx, "code": "1 + 1"}),
        );
        match reply {
            Err(e) if e.epp == "E4009" && after.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(100))
            }
            other => break other.expect("a run after the cancelled one"),
        }
    };
    assert_eq!(value(&answer).as_deref(), Some("2"), "{answer}");
}
both_modes!(long_runs_are_interrupted, super::long_runs_are_interrupted);

fn shared_and_gone(mode: Mode) {
    let first = Host::start(mode);
    let second = Host::start(mode);
    let id = code_sandbox(&first);
    let ctx = new_context(&first, &id);
    run(&first, &id, &ctx, "shared = 41");
    // The second host knows only the context's id (its language is asked of execd).
    let r = run(&second, &id, &ctx, "shared + 1");
    assert_eq!(value(&r).as_deref(), Some("42"), "{r}");
    run(&second, &id, &ctx, "shared = 'from second'");
    assert_eq!(
        value(&run(&first, &id, &ctx, "shared")).as_deref(),
        Some("'from second'")
    );

    // A context of a killed sandbox is not found.
    first.ok("sandbox.kill", json!({"sandbox_id": id}));
    for host in [&first, &second] {
        host.fails(
            "code.run",
            json!({"sandbox_id": id, "context_id": ctx, "code": "1"}),
            "E4004",
        );
    }
}
both_modes!(two_hosts_share_a_context, super::shared_and_gone);

fn base_template_has_no_kernels(mode: Mode) {
    let host = Host::start(mode);
    let id = host.create_sandbox();
    let started = Instant::now();
    let e = host.fails(
        "code.run",
        json!({"sandbox_id": id, "code": "1 + 1"}),
        "E8004",
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{e:?}");
    assert!(e.message.contains("template `code`"), "{e:?}");
    assert!(e.message.contains(&id), "{e:?}");
    for (method, params) in [
        ("code.create_context", json!({"sandbox_id": id})),
        ("code.list_contexts", json!({"sandbox_id": id})),
        ("code.languages", json!({"sandbox_id": id})),
    ] {
        let e = host.fails(method, params, "E8004");
        assert!(e.message.contains("template `code`"), "{method}: {e:?}");
    }
    // The capability is declared: it depends on the sandbox, not the provider.
    let hello = host.ok("epp.hello", json!({}));
    assert_eq!(hello["capabilities"]["code.interpret"], true, "{hello}");
}
both_modes!(
    base_template_says_which_template,
    super::base_template_has_no_kernels
);
