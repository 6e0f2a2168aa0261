//! A command's exit code, from how execd reports its end: `execution_complete`
//! is 0; an `error` event carries the code as text, or `-1` when a signal
//! killed it (its traceback names the signal, as Go does: `signal: killed`).
//! A signal becomes 128 + N, as a shell reports it, in `commands.run` and
//! `commands.status` alike.

use crate::bindings::exports::abx::epp::infra::CommandExit;
use crate::models::ExecErrorBody;

/// Go's names for signals, as execd reports a killed process (`signal: killed`).
const GO_SIGNALS: &[(&str, i32)] = &[
    ("hangup", 1),
    ("interrupt", 2),
    ("quit", 3),
    ("illegal instruction", 4),
    ("aborted", 6),
    ("bus error", 7),
    ("floating point exception", 8),
    ("killed", 9),
    ("user defined signal 1", 10),
    ("segmentation fault", 11),
    ("user defined signal 2", 12),
    ("broken pipe", 13),
    ("alarm clock", 14),
    ("terminated", 15),
];

/// `signal: killed` → 137, like a shell's `$?`.
pub fn of_signal(detail: &str) -> Option<i32> {
    let name = detail.trim().strip_prefix("signal: ")?;
    let name = name.trim_end_matches(" (core dumped)");
    GO_SIGNALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, sig)| 128 + sig)
}

/// The exit code `commands.status` reports: execd says -1 for a process killed by
/// a signal (its error names the signal); that becomes 128 + N as in `commands.run`.
pub fn of_status(code: Option<i32>, error: Option<&str>) -> Option<i32> {
    match code {
        Some(-1) => Some(error.and_then(of_signal).unwrap_or(-1)),
        other => other,
    }
}

/// Whether an `error` event says a signal killed the command.
pub fn by_signal(e: &ExecErrorBody) -> bool {
    e.evalue.trim() == "-1"
}

/// How a command ended, from its `error` event.
pub fn of_error(e: ExecErrorBody) -> CommandExit {
    match e.evalue.trim().parse::<i32>() {
        Ok(-1) => {
            let detail = e.traceback.first().cloned().unwrap_or(e.evalue);
            CommandExit {
                exit_code: of_signal(&detail).unwrap_or(-1),
                error: Some(detail),
            }
        }
        Ok(code) => CommandExit {
            exit_code: code,
            error: None,
        },
        // The process never started: execd reports the reason as text.
        Err(_) => CommandExit {
            exit_code: -1,
            error: Some(format!("{}: {}", e.ename, e.evalue)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(evalue: &str, traceback: &[&str]) -> ExecErrorBody {
        ExecErrorBody {
            ename: "CommandExecError".into(),
            evalue: evalue.into(),
            traceback: traceback.iter().map(|t| t.to_string()).collect(),
        }
    }

    #[test]
    fn signals_become_shell_exit_codes() {
        assert_eq!(of_signal("signal: killed"), Some(137));
        assert_eq!(of_signal("signal: terminated"), Some(143));
        assert_eq!(
            of_signal("signal: segmentation fault (core dumped)"),
            Some(139)
        );
        assert_eq!(of_signal("exit status 3"), None);
        // commands.status says the same as commands.run.
        assert_eq!(of_status(Some(-1), Some("signal: killed")), Some(137));
        assert_eq!(of_status(Some(-1), Some("signal: terminated")), Some(143));
        assert_eq!(of_status(Some(-1), Some("odd")), Some(-1));
        assert_eq!(of_status(Some(-1), None), Some(-1));
        assert_eq!(of_status(Some(3), Some("exit status 3")), Some(3));
        assert_eq!(of_status(None, None), None);
    }

    #[test]
    fn error_events_become_exits() {
        let killed = of_error(error("-1", &["signal: killed"]));
        assert_eq!(
            (killed.exit_code, killed.error.as_deref()),
            (137, Some("signal: killed"))
        );
        assert!(by_signal(&error("-1", &[])));
        assert!(!by_signal(&error("3", &[])));
        let three = of_error(error("3", &["exit status 3"]));
        assert_eq!((three.exit_code, three.error), (3, None));
        let never = of_error(error("fork/exec /bin/bash: no such file", &[]));
        assert_eq!(never.exit_code, -1);
        assert!(never.error.unwrap().contains("CommandExecError: fork/exec"));
    }
}
