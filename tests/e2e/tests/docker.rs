//! The Docker tier is real: through epp-host, sandboxes of the unpatched server are
//! Docker containers of the testbed's own engine, looked at with `docker` itself.

use epp_e2e::{
    Host, Mode, b64d, b64e, both_modes, docker_cli, docker_cli_output, docker_inspect,
    sandbox_container, sh, unique, wait_until,
};
use serde_json::{Value, json};
use std::time::Duration;

/// `docker inspect` of a sandbox's container, which must exist.
fn container(sandbox_id: &str) -> Value {
    docker_inspect(&sandbox_container(sandbox_id))
        .unwrap_or_else(|| panic!("no container for sandbox {sandbox_id}"))
}

/// create → a command that sees its container → files in the container's own
/// filesystem → kill removes the container.
fn lifecycle(mode: Mode) {
    let host = Host::start_docker(mode);
    let tag = unique("docker");
    let info = host.create_info(json!({"metadata": {"e2e-tag": tag}, "env": {"FOO": "in docker"}}));
    let id = info["sandbox_id"].as_str().unwrap().to_string();
    assert_eq!(info["state"], "running", "{info}");
    assert_eq!(info["image"], "python:3.12-slim", "{info}");

    let c = container(&id);
    assert_eq!(c["State"]["Running"], true, "{c}");
    assert_eq!(c["Config"]["Image"], "python:3.12-slim");
    assert_eq!(c["Config"]["Labels"]["e2e-tag"], tag.as_str(), "{c}");
    // The server's Docker runtime: its bootstrap as the entrypoint, the provider's as arguments.
    assert_eq!(
        c["Config"]["Entrypoint"],
        json!(["/opt/opensandbox/bootstrap.sh"])
    );
    assert_eq!(c["Config"]["Cmd"], json!(["tail", "-f", "/dev/null"]));

    // The command runs in that container: Docker's marker file, its hostname, its
    // own process namespace (pid 1 is the sandbox's entrypoint, not the host's init),
    // and the environment the server gave the container.
    let hostname = c["Config"]["Hostname"].as_str().unwrap();
    let seen = sh(
        &host,
        &id,
        "test -f /.dockerenv && echo dockerenv; hostname; tr '\\0' ' ' </proc/1/cmdline; echo; \
         echo \"$FOO|$OPENSANDBOX_ID\"",
    );
    assert_eq!(
        seen,
        format!("dockerenv\n{hostname}\ntail -f /dev/null \nin docker|{id}\n"),
        "{c}"
    );

    // A file written through the provider is in the container's filesystem (read back
    // by `docker exec`), and not on the host.
    let path = format!("/tmp/{tag}.txt");
    let content = "written through epp-host\nsecond line";
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": path, "content": content}),
    );
    let read = host.ok("files.read", json!({"sandbox_id": id, "path": path}));
    assert_eq!(read["content"], content);
    assert_eq!(
        docker_cli(&["exec", &sandbox_container(&id), "cat", &path]),
        content
    );
    assert!(
        !std::path::Path::new(&path).exists(),
        "{path} appeared on the host"
    );
    // And the other way round: what the engine puts in the container, the provider reads.
    docker_cli(&[
        "exec",
        &sandbox_container(&id),
        "sh",
        "-c",
        &format!("printf 'from docker exec' > {path}.2"),
    ]);
    let read = host.ok(
        "files.read",
        json!({"sandbox_id": id, "path": format!("{path}.2")}),
    );
    assert_eq!(read["content"], "from docker exec");

    host.ok("sandbox.kill", json!({"sandbox_id": id}));
    assert_eq!(
        docker_inspect(&sandbox_container(&id)),
        None,
        "the container outlived sandbox.kill"
    );
    assert!(
        !docker_cli(&["ps", "-a", "--format", "{{.Names}}"]).contains(&id),
        "docker ps -a still lists {id}"
    );
    host.fails("sandbox.get_info", json!({"sandbox_id": id}), "E4004");
}
both_modes!(create_run_files_kill_in_a_container, super::lifecycle);

/// sandbox.pause is `docker pause` (the cgroup freezer), resume unfreezes it.
fn pause_resume(mode: Mode) {
    let host = Host::start_docker(mode);
    let id = host.create_sandbox();
    // A counter that only advances while the container runs; written by a
    // rename, so a pause between truncating and writing never leaves it empty.
    host.ok(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "i=0; while :; do i=$((i+1)); echo $i > /tmp/ticks.new; mv /tmp/ticks.new /tmp/ticks; sleep 0.05; done", "background": true}),
    );
    let ticks = || -> u64 {
        docker_cli(&["exec", &sandbox_container(&id), "cat", "/tmp/ticks"])
            .trim()
            .parse()
            .unwrap_or(0)
    };
    wait_until("the counter to run", Duration::from_secs(20), || {
        (ticks() > 0).then_some(())
    });

    host.ok("sandbox.pause", json!({"sandbox_id": id}));
    let state = &container(&id)["State"];
    assert_eq!(state["Paused"], true, "{state}");
    assert_eq!(state["Status"], "paused", "{state}");
    assert_eq!(
        host.ok("sandbox.get_info", json!({"sandbox_id": id}))["state"],
        "paused"
    );
    // Frozen: `docker exec` is refused, and the counter does not move while paused
    // (read from the container's filesystem through the engine's archive API).
    let out = docker_cli_output(&["exec", &sandbox_container(&id), "true"]);
    assert!(
        !out.status.success(),
        "docker exec ran in a paused container"
    );
    host.fails("sandbox.pause", json!({"sandbox_id": id}), "E4009");
    let frozen_at = read_ticks_paused(&id);
    // A measurement window, not synchronisation: a counter that ticks every 50 ms
    // would move about 10 times in it if the pause did not freeze the container.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        read_ticks_paused(&id),
        frozen_at,
        "the counter moved in 0.5 s while paused"
    );

    let resumed = host.ok("sandbox.resume", json!({"sandbox_id": id}));
    assert_eq!(resumed["state"], "running");
    let state = &container(&id)["State"];
    assert_eq!(state["Paused"], false, "{state}");
    assert_eq!(state["Running"], true, "{state}");
    assert_eq!(sh(&host, &id, "echo back"), "back\n");
    wait_until("the counter to move again", Duration::from_secs(20), || {
        (ticks() > frozen_at).then_some(())
    });
}
both_modes!(pause_is_a_docker_pause, super::pause_resume);

/// The counter of `pause_resume`, copied out of the paused container by `docker cp`
/// (which works on a frozen container; `docker exec` does not).
fn read_ticks_paused(id: &str) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("ticks");
    docker_cli(&[
        "cp",
        &format!("{}:/tmp/ticks", sandbox_container(id)),
        dest.to_str().unwrap(),
    ]);
    std::fs::read_to_string(&dest)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Everything a terminal printed so far.
fn pty_output(host: &Host, pty: &str) -> String {
    let bytes: Vec<u8> = host
        .notes()
        .iter()
        .filter(|(_, n)| n["method"] == "pty.output" && n["params"]["pty_id"] == pty)
        .flat_map(|(_, n)| b64d(n["params"]["data"].as_str().unwrap()))
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A terminal's shell runs in the container (its hostname; `docker top` lists it),
/// and pty.kill ends it there.
fn terminal(mode: Mode) {
    let host = Host::start_docker(mode);
    let id = host.create_sandbox();
    let hostname = container(&id)["Config"]["Hostname"]
        .as_str()
        .unwrap()
        .to_string();
    let created = host.ok(
        "pty.create",
        json!({"sandbox_id": id, "cols": 80, "rows": 24}),
    );
    let pty = created["pty_id"].as_str().unwrap().to_string();
    host.ok(
        "pty.send_input",
        json!({"sandbox_id": id, "pty_id": pty, "data": b64e(b"echo \"tty:$(hostname):$$:end\"\n")}),
    );
    // The echoed line has `$(hostname)` unexpanded; the answer has it expanded.
    let marker = format!("tty:{hostname}:");
    let shell_pid: u32 = wait_until("the terminal's answer", Duration::from_secs(20), || {
        let out = pty_output(&host, &pty);
        let (_, rest) = out.split_once(&marker)?;
        let (pid, _) = rest.split_once(":end")?;
        Some(pid.parse().expect("the shell's pid"))
    });
    // The shell is a process of the container (docker top shows the container's
    // processes by their pids on the host; the shell knows only its own in-container pid).
    let in_container = || {
        docker_cli(&["exec", &sandbox_container(&id), "ls", "/proc"])
            .contains(&format!("\n{shell_pid}\n"))
    };
    assert!(
        in_container(),
        "pid {shell_pid} is not a process of the container"
    );
    let top = docker_cli(&["top", &sandbox_container(&id), "-o", "pid,comm"]);
    assert!(
        top.lines().any(|l| l.trim_end().ends_with(" bash")),
        "{top}"
    );

    host.ok("pty.kill", json!({"sandbox_id": id, "pty_id": pty}));
    let exit = host
        .wait_note(Duration::from_secs(20), |n| {
            n["method"] == "pty.exit" && n["params"]["pty_id"] == pty.as_str()
        })
        .expect("no pty.exit after pty.kill");
    assert_eq!(exit["params"]["exit_code"], 137, "{exit}");
    wait_until(
        "the shell to be gone from the container",
        Duration::from_secs(10),
        || (!in_container()).then_some(()),
    );
}
both_modes!(terminal_in_a_container, super::terminal);

/// An image the engine does not have fails the create, quickly, and nothing is
/// pulled: the testbed's engine sends registry traffic to a closed loopback port.
#[test]
fn a_missing_image_is_never_pulled() {
    let host = Host::start_docker(Mode::Direct);
    let image = format!("{}:never-built", unique("testbed-missing").to_lowercase());
    let started = std::time::Instant::now();
    let err = match host.call("sandbox.create", json!({"template": image})) {
        Ok(v) => panic!("a sandbox of an image that is not there: {v}"),
        Err(e) => e,
    };
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the failed pull took {:?}",
        started.elapsed()
    );
    let text = format!("{} {}", err.message, err.data);
    assert!(text.contains("127.0.0.1:1"), "{err:?}");
    let images = docker_cli(&["images", "--format", "{{.Repository}}:{{.Tag}} {{.Digest}}"]);
    assert!(!images.contains(&image), "{images}");
    // A pulled image has a registry digest; the testbed's (imported) and snapshots
    // (committed) have none.
    for line in images.lines() {
        assert!(line.ends_with(" <none>"), "a pulled image: {line}");
    }
}
