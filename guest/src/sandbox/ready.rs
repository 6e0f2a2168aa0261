//! Waiting until a sandbox answers: its endpoint resolved and execd's `/ping`
//! 2xx (what the official SDKs wait for), failing fast when the server says it
//! failed.

use crate::config;
use crate::error::{self, Result, invalid};
use crate::execd::Execd;
use crate::lifecycle::Lifecycle;
use crate::time::{monotonic_ms, sleep_ms};

/// How often readiness is polled (the SDK uses 200 ms).
const POLL_MS: u64 = 200;

/// Waits until the sandbox answers: endpoint resolved and `/ping` 2xx, failing
/// fast when the server says it failed. Returns a description of the last state
/// seen when time runs out.
pub fn wait_ready(
    lifecycle: &Lifecycle,
    id: &str,
    budget_ms: u64,
) -> Result<std::result::Result<(), String>> {
    let deadline = monotonic_ms() + budget_ms;
    let mut last;
    let mut polls = 0u32;
    Execd::forget(id);
    loop {
        match Execd::connect(id) {
            Ok(execd) => {
                if execd.ping()? {
                    return Ok(Ok(()));
                }
                last = "execd does not answer /ping yet".into();
            }
            Err(e)
                if e.status() == Some(404)
                    && e.upstream_code() != Some("KUBERNETES::POD_IP_NOT_AVAILABLE") =>
            {
                return Err(e);
            }
            Err(e) if e.status().is_some_and(|s| s != 404) => return Err(e),
            Err(e) => last = e.message,
        }
        // Every few polls, ask the server whether the sandbox gave up.
        polls += 1;
        if polls % 5 == 0 {
            let sandbox = lifecycle.get(id)?;
            let state = sandbox.status.state.clone();
            if matches!(state.as_str(), "Failed" | "Terminated") {
                return Err(error::upstream(format!(
                    "sandbox {id} is {state}: {}",
                    sandbox
                        .status
                        .message
                        .or(sandbox.status.reason)
                        .unwrap_or_default()
                )));
            }
            last = format!("state {state}, {last}");
        }
        if monotonic_ms() >= deadline {
            Execd::forget(id);
            // The error names the server's state too, even when time ran out
            // between two of the polls above.
            if polls % 5 != 0
                && let Ok(sandbox) = lifecycle.get(id)
            {
                last = format!("state {}, {last}", sandbox.status.state);
            }
            return Ok(Err(last));
        }
        sleep_ms(POLL_MS.min(deadline.saturating_sub(monotonic_ms()).max(1)));
    }
}

pub fn ready_budget(ready_timeout: Option<u32>) -> Result<u64> {
    let secs = match ready_timeout {
        Some(0) => return Err(invalid("`ready_timeout` must be at least 1 second")),
        Some(s) => s,
        None => config::settings()?.ready_timeout,
    };
    Ok(u64::from(secs) * 1000)
}

pub fn ensure_ready(lifecycle: &Lifecycle, id: &str, ready_timeout: Option<u32>) -> Result<()> {
    let budget = ready_budget(ready_timeout)?;
    match wait_ready(lifecycle, id, budget)? {
        Ok(()) => Ok(()),
        Err(last) => Err(error::timed_out(format!(
            "sandbox {id} did not answer within {} s (last seen: {last})",
            budget / 1000
        ))),
    }
}
