//! Why something that followed a sandbox (a command's stream, a code run, a
//! watch) broke off, when the sandbox itself is the reason: it was deleted, or
//! it is no longer running. Both are told the same way wherever they happen:
//! a deleted sandbox is E4004, a stopped (or paused, failed) one E4009, since
//! the object is there but in the wrong state.

use crate::error::{Error, Kind, conflict, not_found};
use crate::execd::Execd;
use crate::lifecycle::Lifecycle;
use crate::time::sleep_ms;

/// What the server says about a sandbox after something of it broke off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Diagnosis {
    /// The server no longer knows it (deleted, or expired).
    Deleted,
    /// It exists but does not run: `state` as the server spells it, and why.
    Stopped { state: String, why: String },
    /// It runs, as far as the server knows (or the server could not say).
    Running,
}

impl Diagnosis {
    /// The error for `what` ("the command", "the code") of `sandbox_id` that
    /// broke off, when the sandbox is why; none while it runs.
    pub fn error(&self, sandbox_id: &str, what: &str) -> Option<Error> {
        match self {
            Diagnosis::Deleted => Some(not_found(format!(
                "sandbox {sandbox_id} was deleted (or expired) while {what} ran; its output ends \
                 here"
            ))),
            Diagnosis::Stopped { state, why } => Some(conflict(format!(
                "sandbox {sandbox_id} stopped while {what} ran (state {state}: {why}); {what}'s \
                 outcome is unknown"
            ))),
            Diagnosis::Running => None,
        }
    }

    /// Whether the sandbox's processes are gone with it (a paused sandbox
    /// keeps them, frozen).
    pub fn processes_gone(&self) -> bool {
        match self {
            Diagnosis::Deleted => true,
            Diagnosis::Stopped { state, .. } => matches!(state.as_str(), "Failed" | "Terminated"),
            Diagnosis::Running => false,
        }
    }
}

/// One look at the sandbox. A deleted or stopped sandbox's memoised endpoint
/// is dropped (a later request resolves it again).
pub fn diagnose(sandbox_id: &str) -> Diagnosis {
    let diagnosis = match Lifecycle::new().and_then(|l| l.get(sandbox_id)) {
        Err(e) if e.is(Kind::NotFound) => Diagnosis::Deleted,
        Ok(s) if s.status.state != "Running" => Diagnosis::Stopped {
            why: s.status.message.or(s.status.reason).unwrap_or_default(),
            state: s.status.state,
        },
        _ => Diagnosis::Running,
    };
    if diagnosis != Diagnosis::Running {
        Execd::forget(sandbox_id);
    }
    diagnosis
}

/// After a stream broke: while the server still shows the sandbox running but
/// its execd does not answer, it may be going away, so it is asked again, for
/// about a second.
pub fn after_break(sandbox_id: &str) -> Diagnosis {
    let execd_answers = || {
        Execd::connect(sandbox_id)
            .and_then(|execd| execd.ping())
            .unwrap_or(false)
    };
    for _ in 0..3 {
        match diagnose(sandbox_id) {
            Diagnosis::Running if !execd_answers() => sleep_ms(400),
            other => return other,
        }
    }
    diagnose(sandbox_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_deleted_or_ended_sandbox_takes_its_processes_along() {
        let stopped = |state: &str| Diagnosis::Stopped {
            state: state.into(),
            why: String::new(),
        };
        assert!(Diagnosis::Deleted.processes_gone());
        assert!(stopped("Failed").processes_gone());
        assert!(stopped("Terminated").processes_gone());
        assert!(!stopped("Paused").processes_gone());
        assert!(!stopped("Stopping").processes_gone());
        assert!(!Diagnosis::Running.processes_gone());
    }
}
