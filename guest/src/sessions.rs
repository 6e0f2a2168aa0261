//! sessions over execd's bash sessions: `POST /session`, `POST /session/{id}/run`
//! (SSE, read like `/command`: crate::commands) and `DELETE /session/{id}`.
//!
//! execd keeps a session as an environment and a working directory, not as a live
//! shell: every run is a new `bash` that starts with the exported variables and the
//! directory the previous run ended with (execd 1.1.1). Shell functions would be
//! lost between runs, so each run is wrapped: it first sources the functions the
//! previous run left in `/tmp/.epp-session-ID.functions` and ends by writing
//! `declare -f` there when it changed (see [`save_functions`]), keeping the
//! user's exit status for execd's own trailer, all without a fork.
//! Aliases and unexported variables still do not carry over, nor functions of a run
//! that calls `exit`. Output is line by line with stderr merged into stdout and blank
//! lines dropped. The session id is all a run needs, so any process may run in a
//! session another created.
//!
//! Every session has a marker that says whose it is, written when it is made
//! into a directory only root may touch (`/run/epp/sessions`, 0700), where any
//! process finds it (and memoises it); a session without one is refused rather
//! than run as root, since it may have been a user's. A user's session runs
//! each command in a `bash` as the user ([`as_user`]) that keeps its exported
//! variables and directory in a file of the user's own; execd's root shell
//! takes nothing of them.

use crate::bindings::abx::epp::memo;
use crate::bindings::exports::abx::epp::infra::{CommandEvent, CommandExit};
use crate::error::{self, Error, Result, invalid, not_found};
use crate::event_stream::{Clock, EventStream, Failure, Mapping, Step, stream_timeouts};
use crate::execd::Execd;
use crate::exit_code;
use crate::files;
use crate::http::encode;
use crate::lifecycle::check_id;
use crate::lines::{self, Lines};
use crate::models::ExecEvent;
use crate::refusal::{self, Refusal};
use crate::sse::FrameReader;
use crate::users;
use serde::{Deserialize, Serialize};

#[derive(Serialize)]
struct Create<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<&'a str>,
}

#[derive(Deserialize)]
struct Created {
    session_id: String,
}

#[derive(Serialize)]
struct Run<'a> {
    command: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<u64>,
}

fn gone(sandbox_id: &str, session_id: &str) -> Error {
    not_found(format!(
        "session {session_id} does not exist in sandbox {sandbox_id} (it was closed, or never \
         created there); create one with sessions.create"
    ))
}

pub fn create(sandbox_id: &str, cwd: Option<&str>, user: Option<&str>) -> Result<String> {
    if cwd.is_some_and(|c| c.trim().is_empty()) {
        return Err(invalid(
            "`cwd` is empty; leave it out for the default directory",
        ));
    }
    let mut execd = Execd::connect(sandbox_id)?;
    let user = users::of_request(&mut execd, user)?;
    let body = serde_json::to_vec(&Create { cwd }).expect("serialisable");
    let resp = execd.send(
        |e| {
            Ok(e.request("POST", "/session")?
                .header("content-type", "application/json"))
        },
        &body,
    )?;
    let subject = "a new bash session";
    let created: Created = execd.json(execd.check(resp, subject)?, subject)?;
    let session_id = created.session_id;
    check_id("session", &session_id)?;
    // A session that cannot say whose it is is never run: gone at once.
    if let Err(e) = remember(&mut execd, &session_id, user.as_ref()) {
        let _ = close(sandbox_id, &session_id);
        return Err(e);
    }
    Ok(session_id)
}

/// Where the markers are: root's alone (0700), outside `/tmp`, where anyone
/// (or a cleaner of old files) could delete one and a user's session would
/// then run as root.
const MARKERS: &str = "/run/epp/sessions";

/// The marker of a session run by execd's own user (root on OpenSandbox).
const AS_EXECD: &str = "execd";

fn marker(session_id: &str) -> String {
    format!("{MARKERS}/{session_id}")
}

/// Where a session's own files live in the sandbox: `.functions` (its shell
/// functions) and, for a user's session, `.state` (the directory and exported
/// variables its last run ended with), both written by whoever runs the session.
fn file(session_id: &str, what: &str) -> String {
    format!("/tmp/.epp-session-{session_id}.{what}")
}

fn memo_key(sandbox_id: &str, session_id: &str) -> Result<String> {
    let origin = &crate::config::settings()?.origin;
    Ok(format!("session-user:{origin}:{sandbox_id}:{session_id}"))
}

/// A session is made for a user once, and runs as that user until it is closed.
const USER_TTL_MS: u32 = 3_600_000;

/// Writes whose the session is into the sandbox, where any process finds it:
/// the user's entry (crate::users::encode_user), or [`AS_EXECD`].
fn remember(execd: &mut Execd, session_id: &str, user: Option<&users::User>) -> Result<()> {
    let line = user.map_or_else(|| AS_EXECD.to_string(), users::encode_user);
    files::create_dir(execd, MARKERS, 0o700)?;
    files::put_marker(
        execd,
        &marker(session_id),
        format!("{line}\n").as_bytes(),
        0o600,
    )?;
    memo::put(
        &memo_key(&execd.sandbox_id, session_id)?,
        &line,
        USER_TTL_MS,
    );
    Ok(())
}

/// The user a session runs as (none: execd's own), from the memo or the
/// session's marker. A session without a marker is E4004 when execd does not
/// know it either, else E4009: it may be a user's, so it is not run at all.
fn user_of(execd: &mut Execd, session_id: &str) -> Result<Option<users::User>> {
    let key = memo_key(&execd.sandbox_id, session_id)?;
    let line = match memo::get(&key) {
        Some(line) => line,
        None => {
            let path = marker(session_id);
            let mut first = None;
            let exists = users::read_db(execd, &path, |line| {
                first = Some(line.to_string());
                true
            })?;
            let Some(line) = first else {
                return Err(if exists {
                    unreadable(execd, session_id)
                } else {
                    lost(execd, session_id)
                });
            };
            memo::put(&key, &line, USER_TTL_MS);
            line
        }
    };
    if line == AS_EXECD {
        return Ok(None);
    }
    users::decode_user(&line).map(Some).ok_or_else(|| {
        memo::forget(&key);
        unreadable(execd, session_id)
    })
}

fn unreadable(execd: &Execd, session_id: &str) -> Error {
    error::upstream(format!(
        "{} in sandbox {} does not say whose session {session_id} is; close the session and \
         create it again",
        marker(session_id),
        execd.sandbox_id
    ))
}

/// Why a session without a marker is not run: gone from execd too (closed,
/// never made), or only its marker is lost. execd has no other way to tell
/// than a run, so it runs `true` in it, as execd's user: nothing of the
/// session's own.
fn lost(execd: &mut Execd, session_id: &str) -> Error {
    let path = format!("/session/{}/run", encode(session_id));
    let body = serde_json::to_vec(&Run {
        command: "true",
        timeout: Some(10_000),
    })
    .expect("serialisable");
    let known = execd
        .send(
            |e| {
                Ok(e.request("POST", &path)?
                    .header("content-type", "application/json"))
            },
            &body,
        )
        .map(|resp| {
            let status = resp.status;
            let text = resp.read_all(64 * 1024).unwrap_or_default();
            !(status == 500 && refusal::of_answer(500, &text) == Refusal::NoContext)
        });
    if let Ok(false) = known {
        return gone(&execd.sandbox_id, session_id);
    }
    error::conflict(format!(
        "session {session_id} of sandbox {} has lost the record of whose it is ({} is gone \
         from the sandbox), so it may be a user's and is not run as root; close it \
         (sessions.close) and create it again (sessions.create)",
        execd.sandbox_id,
        marker(session_id)
    ))
}

/// How a session run's events become a command's: execd sends lines without
/// their terminators, stderr merged into stdout, and reports a timeout as a
/// bare error frame.
///
/// No token: an abandoned run ends when its connection drops with the
/// provider's instance (execd kills a session run whose client went away),
/// and the only way to stop it by id, `DELETE /session/{id}`, would close the
/// session itself, which the user may still run in.
pub struct SessionEvents {
    session_id: String,
    target: String,
    clock: Clock,
}

impl Mapping for SessionEvents {
    type Event = CommandEvent;
    const WHAT: &'static str = "the command";

    fn target(&self) -> String {
        self.target.clone()
    }

    fn map(
        &mut self,
        event: ExecEvent,
        out: &mut Vec<CommandEvent>,
    ) -> std::result::Result<Step, Failure> {
        let text = event.text.unwrap_or_default();
        match event.kind.as_str() {
            "init" => out.push(CommandEvent::Started(text)),
            "stdout" => out.push(CommandEvent::Stdout(lines::output(Lines::Stripped, text))),
            "stderr" => out.push(CommandEvent::Stderr(lines::output(Lines::Stripped, text))),
            "execution_complete" => {
                out.push(CommandEvent::Exited(CommandExit {
                    exit_code: 0,
                    error: None,
                }));
                return Ok(Step::End);
            }
            "error" => {
                let e = event.error.unwrap_or_default();
                if exit_code::by_signal(&e) && self.clock.passed() {
                    return Err(Failure::ended(self.timed_out()));
                }
                out.push(CommandEvent::Exited(exit_code::of_error(e)));
                return Ok(Step::End);
            }
            _ => {}
        }
        Ok(Step::Go)
    }

    fn refused(&mut self, message: &str) -> Option<Failure> {
        (refusal::of_frame(message) == Refusal::SessionTimeout)
            .then(|| Failure::ended(self.timed_out()))
    }

    fn at_end(&mut self, _out: &mut Vec<CommandEvent>) -> bool {
        false
    }

    fn lost(&self) -> String {
        format!(
            "the command stream from {} ended before the command finished (connection lost); \
             the command may still be running: check commands.status",
            self.target
        )
    }
}

impl SessionEvents {
    fn timed_out(&self) -> Error {
        error::timed_out(format!(
            "the run in session {} ({}) ran longer than its timeout of {} s; execd killed its \
             whole process group (the session stays usable)",
            self.session_id,
            self.target,
            self.clock.seconds()
        ))
    }
}

pub fn run(
    sandbox_id: &str,
    session_id: &str,
    cmd: &str,
    timeout_ms: Option<u64>,
) -> Result<EventStream<SessionEvents>> {
    check_id("session", session_id)?;
    if cmd.trim().is_empty() {
        return Err(invalid("`cmd` is empty; give a shell command line"));
    }
    if timeout_ms == Some(0) {
        return Err(invalid("`timeout` must be positive"));
    }
    let mut execd = Execd::connect(sandbox_id)?;
    let command = match user_of(&mut execd, session_id)? {
        Some(user) => as_user(session_id, cmd, &user),
        None => keeping_functions(session_id, cmd),
    };
    let body = serde_json::to_vec(&Run {
        command: &command,
        timeout: timeout_ms,
    })
    .expect("serialisable");
    let path = format!("/session/{}/run", encode(session_id));
    let timeouts = stream_timeouts(timeout_ms);
    let clock = Clock::start(timeout_ms);
    let resp = execd.send(
        |e| {
            Ok(e.request("POST", &path)?
                .header("content-type", "application/json")
                .header("accept", "text/event-stream")
                .timeouts(timeouts))
        },
        &body,
    )?;
    if resp.status == 500 {
        let body = resp.read_all(64 * 1024).unwrap_or_default();
        if refusal::of_answer(500, &body) == Refusal::NoContext {
            return Err(gone(sandbox_id, session_id));
        }
        return Err(error::status(
            500,
            &body,
            execd.target(),
            &format!("session {session_id}"),
        ));
    }
    let resp = execd.check(resp, &format!("a run in session {session_id}"))?;
    let mapping = SessionEvents {
        session_id: session_id.to_string(),
        target: execd.target().to_string(),
        clock,
    };
    Ok(EventStream::new(
        FrameReader::new(resp.into_reader()),
        sandbox_id,
        mapping,
    ))
}

/// Sources the functions the session's previous run saved (a run's start).
/// A session without functions has no file: it is not opened, since a failed
/// open costs bash an error message (formatted, then dropped).
fn load_functions(session_id: &str) -> String {
    let functions = file(session_id, "functions");
    format!("{{ [[ ! -s '{functions}' ]] || . '{functions}'; }} 2>/dev/null\n")
}

/// Keeps `cmd`'s status in `$__epp_status`, runs `then` and saves the
/// functions if they changed (the start of a run's end).
///
/// Replacing a file costs: ext4 starts writing out a file that is truncated
/// and written again as soon as it is closed (`auto_da_alloc`), and a run that
/// comes soon after waits for that (about 3 ms per run back to back here; a few
/// tenths of a millisecond when runs are a few milliseconds apart). So the
/// functions file is written only when `declare -f` prints something else than
/// it holds. bash (before 5.3) has no way to take a command's output
/// without a fork, so `declare -f` goes to the session's `.declared` file
/// instead, written over in place (`1<>`: no truncation, no flush) and ended by
/// a NUL, and is read back up to it; with no functions at all (`compgen -A
/// function` fails) nothing is written. When that file cannot be written the
/// functions file is left as it is. Builtins are called as such, so a function
/// of the user's named `declare` or `read` changes nothing; the commands that
/// may fail stand where `set -e` does not stop the shell; the two variables
/// holding the text are unset again (under `set -a` they would be exported,
/// and execd would keep them).
fn save_functions(session_id: &str, then: &str) -> String {
    let functions = file(session_id, "functions");
    let declared = file(session_id, "declared");
    format!(
        "__epp_status=$?; {then}{{ __epp_new= __epp_old=; if ! builtin compgen -A function \
         >/dev/null || {{ {{ builtin declare -f; builtin printf '\\0'; }} 1<> '{declared}' && IFS= \
         builtin read -r -d '' __epp_new < '{declared}'; }}; then [[ ! -s '{functions}' ]] || IFS= builtin read -r \
         -d '' __epp_old < '{functions}' || :; [[ $__epp_new == \"$__epp_old\" ]] || builtin printf %s \
         \"$__epp_new\" >| '{functions}' || :; fi; builtin unset __epp_new __epp_old; }} 2>/dev/null; "
    )
}

/// `cmd` between sourcing the session's saved functions and saving them again.
/// The status of `cmd` is left in `$?` (execd reads it after the script) by a
/// function that returns it: `(exit N)` would cost a fork. The user's text
/// stands on lines of its own so a trailing comment cannot swallow the
/// epilogue. `session_id` is checked (no quote or slash can appear in it).
fn keeping_functions(session_id: &str, cmd: &str) -> String {
    format!(
        "{}{cmd}\n{}__epp_return() {{ return \"$__epp_status\"; }}; __epp_return\n",
        load_functions(session_id),
        save_functions(session_id, "")
    )
}

/// A run of a user's session. execd runs the script as itself (root), in the
/// session's environment and directory; all it does is start a `bash` as the
/// user (crate::users::run_as: setpriv and env found without `$PATH`, the
/// running `$BASH`) whose status is the run's. That shell first takes over the
/// directory and exported variables the previous run ended with from the
/// session's `.state` file (having dropped the exported variables it started
/// with, so an `unset` carries over too; read as data, `export --
/// "NAME=value"`, never run as code), keeps the functions as above, runs `cmd`,
/// and at its end writes its directory and exported variables to `.state`
/// (NUL-separated, under umask 077: the file is the user's alone). So what the
/// user exports (`PATH`, `BASH_ENV`, `LD_PRELOAD`…) never enters execd's root
/// shell, which starts every run with the session's own environment. A run
/// that calls `exit` carries nothing over, as in any session. `SHLVL` is left
/// out, or it would grow by the inner shell's level at every run.
fn as_user(session_id: &str, cmd: &str, user: &users::User) -> String {
    let state = file(session_id, "state");
    let inner = format!(
        "{{ if IFS= read -r -d '' __epp_cwd; then for __epp_name in $(compgen -e); do \
         [ \"$__epp_name\" = SHLVL ] || unset \"$__epp_name\"; done; while IFS= read -r -d '' \
         __epp_kv; do export -- \"$__epp_kv\"; done; cd -- \"$__epp_cwd\"; fi; }} 2>/dev/null < \
         '{state}'\nunset __epp_cwd __epp_name __epp_kv\n{}{cmd}\n{}{{ printf '%s\\0' \"$PWD\"; \
         for __epp_name in $(compgen -e); do \
         [ \"$__epp_name\" = SHLVL ] || printf '%s=%s\\0' \"$__epp_name\" \"${{!__epp_name}}\"; \
         done; }} 2>/dev/null > '{state}'; exit $__epp_status\n",
        load_functions(session_id),
        // Whatever the command set: its end runs and writes the user's files.
        save_functions(session_id, "set +eu; IFS=$' \\t\\n'; umask 077; ")
    );
    users::run_as(user, &inner)
}

pub fn close(sandbox_id: &str, session_id: &str) -> Result<()> {
    check_id("session", session_id)?;
    let mut execd = Execd::connect(sandbox_id)?;
    let path = format!("/session/{}", encode(session_id));
    let resp = execd.send(|e| e.request("DELETE", &path), &[])?;
    if resp.status == 404 {
        return Err(gone(sandbox_id, session_id));
    }
    execd
        .check(resp, &format!("session {session_id}"))
        .map(drop)?;
    // Its files go with it (best effort: the session is closed either way).
    files::remove_quietly(
        &mut execd,
        &[
            marker(session_id),
            file(session_id, "functions"),
            file(session_id, "declared"),
            file(session_id, "state"),
        ],
    );
    if let Ok(key) = memo_key(sandbox_id, session_id) {
        memo::forget(&key);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{as_user, keeping_functions};
    use crate::users::User;

    #[test]
    fn a_users_run_runs_everything_of_the_user_as_the_user() {
        let user = User {
            name: "user".into(),
            uid: 1000,
            gid: 1000,
            home: "/home/user".into(),
        };
        let script = as_user("s-1", "cd /x; echo 'hi'", &user);
        // All of it is one line for root (setpriv into a bash whose script is
        // quoted whole, embedded newlines and all), the run's last command.
        assert!(
            script.starts_with("__epp_setpriv=$(command -p -v setpriv)"),
            "{script}"
        );
        assert!(
            !script.contains("exec \""),
            "the root part goes on: {script}"
        );
        let (root, inner) = script.split_once(" -c '").expect("one bash -c");
        assert!(
            root.ends_with(
                "--init-groups \"$__epp_env\" HOME='/home/user' USER='user' \
                            LOGNAME='user' \"$BASH\" --norc --noprofile"
            ),
            "{root}"
        );
        assert!(inner.ends_with("exit $__epp_status\n'"), "{inner}");
        // Root's part reads nothing of the user's: no state, no export.
        assert!(
            !root.contains("state") && !root.contains("export"),
            "{root}"
        );
        let lines: Vec<&str> = inner.lines().collect();
        // The user's part: the previous run's state taken as data, first.
        assert!(
            lines[0].starts_with("{ if IFS= read -r -d '\\'''\\'' __epp_cwd"),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("export -- \"$__epp_kv\""), "{}", lines[0]);
        assert!(
            lines[0].ends_with("< '\\''/tmp/.epp-session-s-1.state'\\''"),
            "{}",
            lines[0]
        );
        assert!(lines[2].contains(". '\\''/tmp/.epp-session-s-1.functions'\\''"));
        assert!(
            lines[3].starts_with("cd /x; echo '\\''hi'\\''"),
            "{}",
            lines[3]
        );
        // Its end: status kept, files written under umask 077, state saved.
        assert!(
            lines[4].starts_with(
                "__epp_status=$?; set +eu; IFS=$'\\'' \\t\\n'\\''; umask 077; { __epp_new= __epp_old=;"
            ),
            "{}",
            lines[4]
        );
        assert!(
            lines[4].ends_with("> '\\''/tmp/.epp-session-s-1.state'\\''; exit $__epp_status"),
            "{}",
            lines[4]
        );
    }

    #[test]
    fn a_run_sources_and_saves_the_functions_and_keeps_its_status() {
        let script = keeping_functions("s-1", "f() { echo hi; }; false # note");
        let lines: Vec<&str> = script.lines().collect();
        assert_eq!(
            lines[0],
            "{ [[ ! -s '/tmp/.epp-session-s-1.functions' ]] || . \
             '/tmp/.epp-session-s-1.functions'; } 2>/dev/null"
        );
        assert_eq!(lines[1], "f() { echo hi; }; false # note");
        assert!(lines[2].starts_with("__epp_status=$?; { __epp_new= __epp_old=;"));
        assert!(lines[2].contains("1<> '/tmp/.epp-session-s-1.declared'"));
        assert!(lines[2].contains(">| '/tmp/.epp-session-s-1.functions'"));
        assert!(lines[2].ends_with("__epp_return() { return \"$__epp_status\"; }; __epp_return"));
        assert_eq!(lines.len(), 3);
    }

    /// One run as execd makes it (a fresh `bash` per run, its status read
    /// after the script): (status, output).
    fn run_in_bash(session_id: &str, cmd: &str) -> (i32, String) {
        let script = format!("{}exit \"$?\"\n", keeping_functions(session_id, cmd));
        let out = std::process::Command::new("bash")
            .args(["--noprofile", "--norc", "-c", &script])
            .output()
            .expect("bash runs");
        let output = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code().expect("exited"), output)
    }

    /// In a real bash: functions carry over, the status is the command's, and
    /// the functions file is written only when the functions changed, also
    /// under `set -euC` and with functions named like the builtins used.
    #[test]
    fn functions_carry_over_and_are_written_only_when_changed() {
        if std::process::Command::new("bash")
            .arg("--version")
            .output()
            .is_err()
        {
            return;
        }
        let id = format!("t-{}", std::process::id());
        let path = super::file(&id, "functions");
        let modified = || std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        let pause = || std::thread::sleep(std::time::Duration::from_millis(20));

        assert_eq!(run_in_bash(&id, "true"), (0, String::new()));
        assert!(modified().is_none(), "no functions, no file");
        assert_eq!(
            run_in_bash(&id, "f() { echo hi; }; false # note"),
            (1, String::new())
        );
        let first = modified().expect("written");
        pause();
        assert_eq!(run_in_bash(&id, "f; (exit 42)"), (42, "hi\n".to_string()));
        assert_eq!(modified(), Some(first), "unchanged: not written again");
        assert_eq!(run_in_bash(&id, "f() { echo bye; }"), (0, String::new()));
        let second = modified().expect("still there");
        assert_ne!(second, first, "changed: written");
        pause();
        assert_eq!(
            run_in_bash(
                &id,
                "set -euC; declare() { echo no; }; read() { :; }; g() { f; }; ! true"
            ),
            (1, String::new()),
            "set -e ends the script at the status, as `(exit 1)` did"
        );
        assert_ne!(modified(), Some(second), "saved before the status");
        assert_eq!(run_in_bash(&id, "g"), (0, "bye\n".to_string()));
        assert_eq!(
            run_in_bash(&id, "unset -f f g declare read"),
            (0, String::new())
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        // Under `set -a` the compared text would be exported: it is unset.
        let script = format!(
            "{}export -p\n",
            keeping_functions(&id, "set -a; h() { :; }")
        );
        let out = std::process::Command::new("bash")
            .args(["--noprofile", "--norc", "-c", &script])
            .output()
            .expect("bash runs");
        let exports = String::from_utf8_lossy(&out.stdout);
        // (`__epp_status` is, as it always was: the sign that `set -a` took.)
        assert!(exports.contains("__epp_status"), "{exports}");
        assert!(!exports.contains("__epp_new"), "{exports}");
        assert_eq!(run_in_bash(&id, "unset -f h"), (0, String::new()));
        assert_eq!(run_in_bash(&id, "f"), (127, "".to_string()));
        for what in ["functions", "declared"] {
            let _ = std::fs::remove_file(super::file(&id, what));
        }
    }
}
