//! Run as another user (abx:epp 1.2): commands (foreground, background, with
//! stdin) and sessions as a user given by name or uid, files written with an
//! owner and a group, files.chmod. The Docker tier's sandboxes have `user`
//! (1000, /home/user), which is the real proof; on the local tier a sandbox is
//! this machine, whose `nobody` (65534) is the user at hand. Terminals as a
//! user are in pty.rs.

use epp_e2e::{Host, Mode, b64e, both_modes, unique, wait_until};
use serde_json::{Value, json};
use std::time::Duration;

/// Ends a stdin command's script that exits on the input the test sends: the
/// program goes on a moment after that input, because opensandbox-server's
/// proxy can drop a command's last frames (its exit among them; close 1011)
/// when a client frame reaches it as the command exits (docs/epp-1.md,
/// `commands.send_input`), an upstream race these tests do not test.
const LINGER: &str = "sleep 0.5";

/// A user of the sandbox's own /etc/passwd and what it should see.
struct Someone {
    name: &'static str,
    uid: u32,
    group: &'static str,
    home: &'static str,
}

const DOCKER_USER: Someone = Someone {
    name: "user",
    uid: 1000,
    group: "user",
    home: "/home/user",
};

const LOCAL_USER: Someone = Someone {
    name: "nobody",
    uid: 65534,
    group: "nogroup",
    home: "/nonexistent",
};

fn run(host: &Host, params: Value) -> Value {
    let r = host.ok("commands.run", params.clone());
    assert_eq!(r["exit_code"], 0, "{params} → {r}");
    r
}

/// Foreground, background and stdin commands run as the user, by name or by
/// uid; what they create is theirs; an unknown user is E1001 naming it.
fn commands(host: Host, who: &Someone) {
    let id = host.create_sandbox();
    let made = format!("/tmp/{}", unique("by-user"));
    let r = run(
        &host,
        json!({"sandbox_id": id, "user": who.name,
            "cmd": format!("id -un; id -u; id -gn; echo \"$HOME|$USER|$LOGNAME\"; touch {made}")}),
    );
    assert_eq!(
        r["stdout"],
        format!(
            "{}\n{}\n{}\n{}|{}|{}\n",
            who.name, who.uid, who.group, who.home, who.name, who.name
        ),
        "{r}"
    );
    let info = host.ok("files.get_info", json!({"sandbox_id": id, "path": made}));
    assert_eq!(
        (&info["owner"], &info["group"]),
        (&json!(who.name), &json!(who.group))
    );

    // By uid; the request's own variables win over the user's.
    let r = run(
        &host,
        json!({"sandbox_id": id, "user": who.uid.to_string(), "envs": {"HOME": "/tmp"},
            "cmd": "echo \"$(id -un) $HOME $USER\""}),
    );
    assert_eq!(r["stdout"], format!("{} /tmp {}\n", who.name, who.name));
    // Without `user`, the sandbox's own (root on both tiers).
    assert_eq!(
        run(&host, json!({"sandbox_id": id, "cmd": "id -un"}))["stdout"],
        "root\n"
    );

    // In the background: the log says who ran it.
    let started = host.ok(
        "commands.run",
        json!({"sandbox_id": id, "user": who.name, "background": true, "cmd": "id -un"}),
    );
    let command = started["command_id"].as_str().unwrap().to_string();
    wait_until(
        "the background command's end",
        Duration::from_secs(20),
        || {
            let s = host.ok(
                "commands.status",
                json!({"sandbox_id": id, "command_id": command}),
            );
            (s["running"] == false).then_some(())
        },
    );
    let logs = host.ok(
        "commands.logs",
        json!({"sandbox_id": id, "command_id": command}),
    );
    assert_eq!(logs["output"], format!("{}\n", who.name), "{logs}");

    // With stdin (execd's PTY pipe mode, which takes no uid: setpriv runs it).
    let req = host.send(
        "commands.run",
        json!({"sandbox_id": id, "user": who.name, "stdin": true, "stream": true,
            "cmd": format!("read line; echo \"$line $(id -un) $HOME\"; {LINGER}")}),
    );
    let started = host
        .first_note("commands.started", &req, Duration::from_secs(20))
        .expect("commands.started");
    let command = started["params"]["command_id"].as_str().unwrap();
    host.ok(
        "commands.send_input",
        json!({"sandbox_id": id, "command_id": command, "data": b64e(b"typed\n")}),
    );
    let answer = host
        .wait(&req, Duration::from_secs(20))
        .expect("stdin command");
    assert_eq!(answer["exit_code"], 0, "{answer}");
    let out: String = host
        .notes_for("commands.output", &req)
        .iter()
        .map(|(_, n)| n["params"]["data"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(out, format!("typed {} {}\n", who.name, who.home));

    // Unknown users, by name and by uid: E1001 naming them, nothing run.
    let ghost = unique("ghost");
    for (user, stdin) in [
        (ghost.as_str(), false),
        ("4242424", false),
        (ghost.as_str(), true),
    ] {
        let e = host.fails(
            "commands.run",
            json!({"sandbox_id": id, "user": user, "stdin": stdin, "stream": stdin,
                "cmd": format!("touch /tmp/{ghost}")}),
            "E1001",
        );
        assert!(
            e.message
                .contains(&format!("user `{user}` does not exist in sandbox {id}"))
                && e.message.contains("/etc/passwd"),
            "{e:?}"
        );
    }
    let e = host.fails(
        "commands.run",
        json!({"sandbox_id": id, "user": "a b", "cmd": "true"}),
        "E1001",
    );
    assert!(e.message.contains("`user`"), "{e:?}");
    let exists = host.ok(
        "files.exists",
        json!({"sandbox_id": id, "path": format!("/tmp/{ghost}")}),
    );
    assert_eq!(exists["exists"], false);
}

fn commands_docker(mode: Mode) {
    commands(Host::start_docker(mode), &DOCKER_USER)
}
both_modes!(docker_commands_as_a_user, super::commands_docker);

fn commands_local(mode: Mode) {
    commands(Host::start(mode), &LOCAL_USER)
}
both_modes!(local_commands_as_a_user, super::commands_local);

fn owner_of(info: &Value) -> (&str, &str) {
    (
        info["owner"].as_str().unwrap(),
        info["group"].as_str().unwrap(),
    )
}

/// files.write with an owner and a group (by name and by number, one file and
/// many), files.chmod of mode and owner, and the errors: an unknown owner or
/// group writes nothing, a chmod of nothing or of a missing file.
fn files(host: Host, who: &Someone) {
    let id = host.create_sandbox();
    let dir = format!("/tmp/{}", unique("owned"));
    let path = format!("{dir}/secret.txt");
    let info = host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": path, "content": "mine", "mode": "600",
            "owner": who.name, "group": who.group}),
    );
    assert_eq!(owner_of(&info), (who.name, who.group), "{info}");
    assert_eq!(info["mode"], "0600");
    // Only its owner may read it now: the user can, and finds it theirs.
    let r = run(
        &host,
        json!({"sandbox_id": id, "user": who.name, "cmd": format!("cat {path}; stat -c %U {path}")}),
    );
    assert_eq!(r["stdout"], format!("mine{}\n", who.name));

    // By number, and in a list (per file; one file of the list without).
    let info = host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": format!("{dir}/by-uid"), "content": "x",
            "owner": who.uid.to_string(), "group": "0"}),
    );
    assert_eq!(owner_of(&info), (who.name, "root"), "{info}");
    let many = host.ok(
        "files.write",
        json!({"sandbox_id": id, "files": [
            {"path": format!("{dir}/m1"), "content": "1", "owner": who.name},
            {"path": format!("{dir}/m2"), "content": "2"},
            {"path": format!("{dir}/m3"), "content": "3", "group": who.group},
        ]}),
    );
    let owners: Vec<(&str, &str)> = many["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(owner_of)
        .collect();
    assert_eq!(
        owners,
        [(who.name, "root"), ("root", "root"), ("root", who.group)],
        "{many}"
    );

    // chmod: mode and owner at once, then the group alone; the answer is the file's info.
    let info = host.ok(
        "files.chmod",
        json!({"sandbox_id": id, "path": path, "mode": "640", "owner": "root"}),
    );
    assert_eq!(
        (info["mode"].as_str(), owner_of(&info)),
        (Some("0640"), ("root", who.group))
    );
    let info = host.ok(
        "files.chmod",
        json!({"sandbox_id": id, "path": path, "group": "root"}),
    );
    assert_eq!(
        (info["mode"].as_str(), owner_of(&info)),
        (Some("0640"), ("root", "root"))
    );
    assert_eq!(
        host.ok("files.get_info", json!({"sandbox_id": id, "path": path})),
        info
    );
    // The user lost it with the owner: reading it fails now.
    let r = host.ok(
        "commands.run",
        json!({"sandbox_id": id, "user": who.name, "cmd": format!("cat {path}")}),
    );
    assert_ne!(r["exit_code"], 0, "{r}");

    // Unknown owner or group: E1001 naming it, and nothing is written.
    let ghost = unique("ghost");
    let fresh = format!("{dir}/never");
    for (field, value) in [
        ("owner", ghost.as_str()),
        ("group", ghost.as_str()),
        ("owner", "4242424"),
    ] {
        let e = host.fails(
            "files.write",
            json!({"sandbox_id": id, "path": fresh, "content": "x", field: value}),
            "E1001",
        );
        assert!(
            e.message.contains(&format!("`{field}`")) && e.message.contains(&format!("`{value}`")),
            "{e:?}"
        );
        let e = host.fails(
            "files.chmod",
            json!({"sandbox_id": id, "path": path, field: value}),
            "E1001",
        );
        assert!(e.message.contains(&format!("`{value}`")), "{e:?}");
    }
    let e = host.fails(
        "files.write",
        json!({"sandbox_id": id, "files": [
            {"path": format!("{dir}/m1"), "content": "changed"},
            {"path": fresh, "content": "x", "owner": ghost},
        ]}),
        "E1001",
    );
    assert!(
        e.message.contains(&ghost) && e.message.contains("file 2 of 2"),
        "{e:?}"
    );
    assert_eq!(
        host.ok("files.exists", json!({"sandbox_id": id, "path": fresh}))["exists"],
        false
    );
    assert_eq!(
        host.ok(
            "files.read",
            json!({"sandbox_id": id, "path": format!("{dir}/m1")})
        )["content"],
        "1"
    );
    // chmod of nothing, of mode 0, of a missing file.
    let e = host.fails(
        "files.chmod",
        json!({"sandbox_id": id, "path": path}),
        "E1001",
    );
    assert!(e.message.contains("`mode`"), "{e:?}");
    let e = host.fails(
        "files.chmod",
        json!({"sandbox_id": id, "path": path, "mode": "0"}),
        "E1001",
    );
    assert!(e.message.contains("chmod 000"), "{e:?}");
    let e = host.fails(
        "files.chmod",
        json!({"sandbox_id": id, "path": fresh, "mode": "644"}),
        "E4004",
    );
    assert!(e.message.contains(&fresh), "{e:?}");
}

fn files_docker(mode: Mode) {
    files(Host::start_docker(mode), &DOCKER_USER)
}
both_modes!(docker_owners_and_chmod, super::files_docker);

fn files_local(mode: Mode) {
    files(Host::start(mode), &LOCAL_USER)
}
both_modes!(local_owners_and_chmod, super::files_local);

fn session_run(host: &Host, id: &str, session: &str, cmd: &str) -> Value {
    host.ok(
        "sessions.run",
        json!({"sandbox_id": id, "session_id": session, "cmd": cmd}),
    )
}

/// A session as the user: every run is theirs (also from another host
/// process), and exported variables (set and unset), cwd and functions carry
/// over as in any session.
fn session(first: Host, second: Host, who: &Someone) {
    let id = first.create_sandbox();
    let session = first.ok(
        "sessions.create",
        json!({"sandbox_id": id, "user": who.name}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let made = format!("/tmp/{}", unique("session-file"));
    let r = session_run(
        &first,
        &id,
        &session,
        &format!(
            "id -un; echo \"$HOME|$USER\"; cd /tmp; export KEPT=1 GONE=2; greet() {{ echo \"hi $1\"; }}; touch {made}"
        ),
    );
    assert_eq!(
        (r["exit_code"].as_i64(), r["stdout"].as_str()),
        (
            Some(0),
            Some(format!("{}\n{}|{}\n", who.name, who.home, who.name).as_str())
        ),
        "{r}"
    );
    let info = first.ok("files.get_info", json!({"sandbox_id": id, "path": made}));
    assert_eq!(owner_of(&info), (who.name, who.group));
    let r = session_run(&first, &id, &session, "unset GONE; false");
    assert_eq!(r["exit_code"], 1, "the run's own status: {r}");
    // Another process finds whose the session is.
    let r = session_run(
        &second,
        &id,
        &session,
        "id -un; pwd; echo \"${KEPT-unset} ${GONE-unset}\"; greet there",
    );
    assert_eq!(
        r["stdout"],
        format!("{}\n/tmp\n1 unset\nhi there\n", who.name),
        "{r}"
    );
    let r = session_run(&second, &id, &session, "exit 5");
    assert_eq!(r["exit_code"], 5, "{r}");
    second.ok(
        "sessions.close",
        json!({"sandbox_id": id, "session_id": session}),
    );
    first.fails(
        "sessions.run",
        json!({"sandbox_id": id, "session_id": session, "cmd": "true"}),
        "E4004",
    );
    let ghost = unique("ghost");
    let e = first.fails(
        "sessions.create",
        json!({"sandbox_id": id, "user": ghost}),
        "E1001",
    );
    assert!(e.message.contains(&ghost), "{e:?}");
}

fn session_docker(mode: Mode) {
    session(
        Host::start_docker(mode),
        Host::start_docker(mode),
        &DOCKER_USER,
    )
}
both_modes!(docker_session_as_a_user, super::session_docker);

fn session_local(mode: Mode) {
    session(Host::start(mode), Host::start(mode), &LOCAL_USER)
}
both_modes!(local_session_as_a_user, super::session_local);

fn new_session(host: &Host, id: &str, user: Option<&str>) -> String {
    let mut params = json!({"sandbox_id": id});
    if let Some(user) = user {
        params["user"] = json!(user);
    }
    host.ok("sessions.create", params)["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// What a user's session exports stays the user's: execd's root shell, which
/// starts every run and runs setpriv, never takes it. `BASH_ENV` is sourced
/// only by the user's own shells, a `PATH` with a `setpriv` of the user's or
/// none at all does not change what root runs, `LD_PRELOAD` reaches no program
/// of root's, and all of them are still the user's in the next run.
fn session_environment(host: Host, who: &Someone) {
    let id = host.create_sandbox();
    let log = format!("/tmp/{}", unique("sourced"));
    let hook = format!("/tmp/{}.sh", unique("bash-env"));
    let fake = format!("/tmp/{}", unique("fake-bin"));
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": hook, "mode": "755",
            "content": format!("echo \"bash-env $(/usr/bin/id -un)\" >> {log}\n")}),
    );
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": format!("{fake}/setpriv"), "mode": "755",
            "content": format!("#!/bin/sh\necho \"fake setpriv $(/usr/bin/id -un)\" >> {log}\nexit 3\n")}),
    );
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": log, "content": "", "mode": "666"}),
    );
    let session = new_session(&host, &id, Some(who.name));
    let run = |cmd: &str| session_run(&host, &id, &session, cmd);
    let ok = |cmd: &str| {
        let r = run(cmd);
        assert_eq!(r["exit_code"], 0, "{cmd} → {r}");
        r["stdout"].as_str().unwrap().to_string()
    };

    ok(&format!("export BASH_ENV={hook}"));
    // The user's own shells source it, as the user; root's never do.
    assert_eq!(
        ok("echo \"[$BASH_ENV]\"; bash -c true; id -un"),
        format!("[{hook}]\n{}\n", who.name)
    );
    ok(&format!("export PATH={fake}:$PATH"));
    assert_eq!(ok("id -un"), format!("{}\n", who.name));
    let preload = format!("/nonexistent/{}.so", unique("preload"));
    // ld.so would complain on stderr (merged into the output) of every
    // program run with it: a builtin alone prints nothing else.
    ok(&format!("export LD_PRELOAD={preload}"));
    assert_eq!(ok("echo \"<$LD_PRELOAD>\""), format!("<{preload}>\n"));
    ok("unset LD_PRELOAD; export PATH=/nonexistent");
    // No PATH at all: absolute paths work, and the next run is still the user's.
    assert_eq!(ok("/usr/bin/id -un"), format!("{}\n", who.name));
    assert_eq!(
        ok("echo \"$PATH\"; /usr/bin/id -u"),
        format!("/nonexistent\n{}\n", who.uid)
    );
    let sourced = host.ok("files.read", json!({"sandbox_id": id, "path": log}))["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sourced, format!("bash-env {}\n", who.name), "{sourced}");
    // The state the user's shell keeps is the user's alone.
    let state = host.ok(
        "files.get_info",
        json!({"sandbox_id": id, "path": format!("/tmp/.epp-session-{session}.state")}),
    );
    assert_eq!(
        (state["mode"].as_str(), owner_of(&state).0),
        (Some("0600"), who.name),
        "{state}"
    );
}

fn session_environment_docker(mode: Mode) {
    session_environment(Host::start_docker(mode), &DOCKER_USER)
}
both_modes!(
    docker_a_users_exports_never_reach_root,
    super::session_environment_docker
);

/// Every session has a marker of whose it is, in a directory of root's
/// alone; a session whose marker is gone is not run (it might be a user's,
/// and would run as root), E4009 saying to make it again, from a process that
/// had not looked it up; a closed one is E4004 as before.
fn markers(first: Host, fresh: impl Fn() -> Host, who: &Someone) {
    let id = first.create_sandbox();
    let users_session = new_session(&first, &id, Some(who.name));
    let roots_session = new_session(&first, &id, None);
    let dir = first.ok(
        "files.get_info",
        json!({"sandbox_id": id, "path": "/run/epp/sessions"}),
    );
    assert_eq!(
        (dir["mode"].as_str(), owner_of(&dir).0),
        (Some("0700"), "root")
    );
    for (session, expected) in [
        (&users_session, format!("{}\n", who.name)),
        (&roots_session, "root\n".to_string()),
    ] {
        let marker = format!("/run/epp/sessions/{session}");
        let info = first.ok("files.get_info", json!({"sandbox_id": id, "path": marker}));
        assert_eq!(
            (info["mode"].as_str(), owner_of(&info).0),
            (Some("0600"), "root")
        );
        assert_eq!(
            session_run(&first, &id, session, "id -un")["stdout"],
            expected
        );
        sh_ok(&first, &id, &format!("rm {marker}"));
        // This process remembers whose it is; one that never saw it refuses.
        assert_eq!(
            session_run(&first, &id, session, "id -un")["stdout"],
            expected
        );
        let other = fresh();
        let e = other.fails(
            "sessions.run",
            json!({"sandbox_id": id, "session_id": session, "cmd": "id -un"}),
            "E4009",
        );
        assert!(
            e.message.contains(&format!(
                "session {session} of sandbox {id} has lost the record of whose it is ({marker}"
            )) && e
                .message
                .contains("close it (sessions.close) and create it again"),
            "{e:?}"
        );
        other.ok(
            "sessions.close",
            json!({"sandbox_id": id, "session_id": session}),
        );
        other.fails(
            "sessions.run",
            json!({"sandbox_id": id, "session_id": session, "cmd": "id -un"}),
            "E4004",
        );
    }
    let leftovers = sh_ok(
        &first,
        &id,
        &format!(
            "ls /tmp/.epp-session-{users_session}.* /tmp/.epp-session-{roots_session}.* 2>/dev/null; true"
        ),
    );
    assert_eq!(leftovers, "", "closing removes the session's files");
}

fn sh_ok(host: &Host, id: &str, cmd: &str) -> String {
    run(host, json!({"sandbox_id": id, "cmd": cmd}))["stdout"]
        .as_str()
        .unwrap()
        .to_string()
}

fn markers_local(mode: Mode) {
    markers(Host::start(mode), || Host::start(mode), &LOCAL_USER)
}
both_modes!(
    local_a_session_without_its_marker_is_refused,
    super::markers_local
);

/// Appends `lines` to a database file of the sandbox (as root, through files).
fn append(host: &Host, id: &str, path: &str, lines: &str) {
    let old = host.ok("files.read", json!({"sandbox_id": id, "path": path}))["content"]
        .as_str()
        .unwrap()
        .to_string();
    host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": path, "mode": "644",
            "content": format!("{old}{lines}")}),
    );
}

/// Supplementary groups come from /etc/group for every way of running as the
/// user (execd's uid, setpriv), looked up when the process starts; a name that
/// shares its uid with an earlier entry is refused as `user` (execd and
/// setpriv would give it the first name's groups), not as an owner.
fn groups(mode: Mode) {
    let host = Host::start_docker(mode);
    let id = host.create_sandbox();
    // Looked up (and remembered) before the group exists.
    run(
        &host,
        json!({"sandbox_id": id, "user": "user", "cmd": "true"}),
    );
    append(&host, &id, "/etc/group", "epp-extra:x:4321:user\n");
    let expect = |out: &str, how: &str| {
        assert!(
            out.split_whitespace().any(|g| g == "epp-extra")
                && out.split_whitespace().any(|g| g == "user"),
            "{how}: {out:?}"
        );
    };
    let r = run(
        &host,
        json!({"sandbox_id": id, "user": "user", "cmd": "id -Gn"}),
    );
    expect(r["stdout"].as_str().unwrap(), "commands.run");

    let req = host.send(
        "commands.run",
        json!({"sandbox_id": id, "user": "user", "stdin": true, "stream": true,
            "cmd": format!("read line; id -Gn; {LINGER}")}),
    );
    let started = host
        .first_note("commands.started", &req, Duration::from_secs(20))
        .expect("commands.started");
    host.ok(
        "commands.send_input",
        json!({"sandbox_id": id, "command_id": started["params"]["command_id"],
            "data": b64e(b"go\n")}),
    );
    assert_eq!(
        host.wait(&req, Duration::from_secs(20))
            .expect("stdin command")["exit_code"],
        0
    );
    let out: String = host
        .notes_for("commands.output", &req)
        .iter()
        .map(|(_, n)| n["params"]["data"].as_str().unwrap().to_string())
        .collect();
    expect(&out, "stdin");

    let pty = host.ok(
        "pty.create",
        json!({"sandbox_id": id, "user": "user", "cmd": "echo \"[$(id -Gn)]\""}),
    )["pty_id"]
        .as_str()
        .unwrap()
        .to_string();
    host.wait_note(Duration::from_secs(20), |n| {
        n["method"] == "pty.exit" && n["params"]["pty_id"] == pty.as_str()
    })
    .expect("the terminal's exit");
    let printed: Vec<u8> = host
        .notes()
        .iter()
        .filter(|(_, n)| n["method"] == "pty.output" && n["params"]["pty_id"] == pty.as_str())
        .flat_map(|(_, n)| epp_e2e::b64d(n["params"]["data"].as_str().unwrap()))
        .collect();
    let printed = String::from_utf8_lossy(&printed);
    let inside = printed
        .split_once('[')
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(groups, _)| groups)
        .unwrap_or_else(|| panic!("no groups in {printed:?}"));
    expect(inside, "pty");

    let session = new_session(&host, &id, Some("user"));
    let r = session_run(&host, &id, &session, "id -Gn");
    expect(r["stdout"].as_str().unwrap(), "session");

    // A second name of uid 1000, after `user`.
    append(
        &host,
        &id,
        "/etc/passwd",
        "epp-alias:x:1000:4321::/home/epp-alias:/bin/sh\n",
    );
    for (method, params) in [
        (
            "commands.run",
            json!({"sandbox_id": id, "user": "epp-alias", "cmd": "true"}),
        ),
        (
            "sessions.create",
            json!({"sandbox_id": id, "user": "epp-alias"}),
        ),
        ("pty.create", json!({"sandbox_id": id, "user": "epp-alias"})),
    ] {
        let e = host.fails(method, params, "E1001");
        assert!(
            e.message
                .contains("`user`: `epp-alias` shares uid 1000 with `user`, which comes first")
                && e.message.contains("Run as `user`"),
            "{method}: {e:?}"
        );
    }
    // As an owner it is uid 1000, whose name is `user`.
    let info = host.ok(
        "files.write",
        json!({"sandbox_id": id, "path": format!("/tmp/{}", unique("alias")), "content": "x",
            "owner": "epp-alias"}),
    );
    assert_eq!(owner_of(&info).0, "user", "{info}");
}
both_modes!(docker_supplementary_groups_and_shared_uids, super::groups);

/// A /etc/passwd far over 4 MiB: read a line at a time, up to the entry
/// sought, so an entry at its start and one at its very end are both found.
fn big_passwd(mode: Mode) {
    let host = Host::start_docker(mode);
    let id = host.create_sandbox();
    let mut padding = String::new();
    let mut n = 0;
    while padding.len() < 5 << 20 {
        padding.push_str(&format!(
            "epp-pad{n}:x:{uid}:{uid}:padding to make the file big:/nonexistent:/usr/sbin/nologin\n",
            uid = 100_000 + n
        ));
        n += 1;
    }
    padding.push_str("epp-last:x:4999:4999::/tmp:/bin/sh\n");
    append(&host, &id, "/etc/passwd", &padding);
    let r = run(
        &host,
        json!({"sandbox_id": id, "user": "user", "cmd": "id -un"}),
    );
    assert_eq!(r["stdout"], "user\n");
    for user in ["epp-last", "4999"] {
        let r = run(
            &host,
            json!({"sandbox_id": id, "user": user, "cmd": "echo \"$(id -u) $HOME\""}),
        );
        assert_eq!(r["stdout"], "4999 /tmp\n", "{user}: {r}");
    }
    let ghost = unique("ghost");
    let e = host.fails(
        "commands.run",
        json!({"sandbox_id": id, "user": ghost, "cmd": "true"}),
        "E1001",
    );
    assert!(
        e.message.contains("it is not in the sandbox's /etc/passwd"),
        "{e:?}"
    );
}
both_modes!(docker_a_big_passwd_is_scanned, super::big_passwd);
