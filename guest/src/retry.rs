//! When a request is sent again after a transient failure: the one retry rule of
//! the provider (docs/reliability.md, "Retries"). Every request to the lifecycle
//! server and to execd goes through [`Retry::again`].
//!
//! - `GET` and `HEAD` (reads) are retried after a refused or broken connection
//!   (no answer arrived) and after HTTP 502, 503 and 504.
//! - `DELETE` is retried only when the request certainly did nothing: a refused
//!   connection or HTTP 503. Then a 404 on the retry is the truth, not an echo
//!   of a first attempt that worked.
//! - `POST`, `PUT` and `PATCH` are never retried: `POST /sandboxes` would leak a
//!   sandbox, `POST /command` would run the command twice, an upload could race
//!   itself. The caller gets the error and decides.
//! - Timeouts are never retried: the whole budget was already spent once.
//! - A request to a sandbox endpoint that changed since it was memoised goes
//!   again at once to the new one by the same rule ([`resend_to_fresh_endpoint`]):
//!   any request after a refused connection, only reads after a broken one.
//! - At most [`MAX_RETRIES`] retries, [`BACKOFF_MS`] apart (±20 % jitter), and
//!   none that would start later than [`BUDGET_MS`] after the first attempt.
//!   A failing read therefore costs at most 1.75 s (+ jitter) of waiting on top
//!   of its attempts.

use crate::http::{Response, Transport};
use crate::time::{monotonic_ms, sleep_ms};

/// Retries after the first attempt.
pub const MAX_RETRIES: u32 = 3;
/// Wait before retry 1, 2, 3.
pub const BACKOFF_MS: [u64; 3] = [250, 500, 1000];
/// No retry starts later than this after the first attempt began.
pub const BUDGET_MS: u64 = 3000;

/// What a failed attempt looked like, for the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// An HTTP answer with this status.
    Status(u16),
    /// Nothing listens there (the request never reached a server).
    Refused,
    /// The connection broke before an answer arrived.
    Broken,
    /// Connect, first byte or between bytes took too long.
    Timeout,
    /// Refused by the host's policy, or not a valid request.
    Final,
}

impl Failure {
    /// The failure of one attempt; `None` when it is an answer worth keeping.
    pub fn of(outcome: &Result<Response, Transport>) -> Option<Failure> {
        match outcome {
            Ok(resp) if matches!(resp.status, 502..=504) => Some(Failure::Status(resp.status)),
            Ok(_) => None,
            Err(Transport::Refused(_)) => Some(Failure::Refused),
            Err(Transport::Broken(_)) => Some(Failure::Broken),
            Err(Transport::Timeout(_)) => Some(Failure::Timeout),
            Err(Transport::Denied | Transport::Invalid(_)) => Some(Failure::Final),
        }
    }
}

/// Whether a request with `method` may be sent again after `failure`.
pub fn retryable(method: &str, failure: Failure) -> bool {
    match method {
        "GET" | "HEAD" => matches!(
            failure,
            Failure::Refused | Failure::Broken | Failure::Status(502..=504)
        ),
        "DELETE" => matches!(failure, Failure::Refused | Failure::Status(503)),
        _ => false,
    }
}

/// Whether a request that failed on a memoised sandbox endpoint may go again
/// at once to the endpoint resolved afresh, when that changed (the old address
/// was another server). After a refused connection nothing was sent, so any
/// request may; after a broken one the request may have been acted on, so only
/// what [`retryable`] allows (never a `POST`: a command would run twice).
pub fn resend_to_fresh_endpoint(method: &str, failure: Failure) -> bool {
    match failure {
        Failure::Refused => true,
        Failure::Broken => retryable(method, Failure::Broken),
        _ => false,
    }
}

/// The wait before retry number `retry` (1-based) started `elapsed_ms` after the
/// first attempt, or `None` when no retry is left.
pub fn delay(retry: u32, elapsed_ms: u64) -> Option<u64> {
    if retry == 0 || retry > MAX_RETRIES {
        return None;
    }
    let wait = BACKOFF_MS[(retry - 1) as usize];
    (elapsed_ms + wait <= BUDGET_MS).then_some(wait)
}

/// The retry state of one logical request.
pub struct Retry {
    method: &'static str,
    retries: u32,
    started_ms: u64,
}

impl Retry {
    pub fn new(method: &'static str) -> Retry {
        Retry {
            method,
            retries: 0,
            started_ms: monotonic_ms(),
        }
    }

    /// After an attempt: true (having waited the backoff) when it should be sent
    /// again, false when `outcome` is the answer to return.
    pub fn again(&mut self, outcome: &Result<Response, Transport>) -> bool {
        let Some(failure) = Failure::of(outcome) else {
            return false;
        };
        if !retryable(self.method, failure) {
            return false;
        }
        let elapsed = monotonic_ms().saturating_sub(self.started_ms);
        let Some(wait) = delay(self.retries + 1, elapsed) else {
            return false;
        };
        self.retries += 1;
        sleep_ms(jitter(wait));
        true
    }
}

/// `ms` ± 20 %, so clients that failed together do not retry together.
fn jitter(ms: u64) -> u64 {
    let r = wasip2::random::random::get_random_u64() % 401;
    ms * (800 + r) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_retry_transient_failures_only() {
        for f in [
            Failure::Refused,
            Failure::Broken,
            Failure::Status(502),
            Failure::Status(503),
            Failure::Status(504),
        ] {
            assert!(retryable("GET", f), "{f:?}");
        }
        for f in [
            Failure::Status(500),
            Failure::Status(501),
            Failure::Status(429),
            Failure::Timeout,
            Failure::Final,
        ] {
            assert!(!retryable("GET", f), "{f:?}");
        }
    }

    #[test]
    fn deletes_retry_only_what_certainly_did_nothing() {
        assert!(retryable("DELETE", Failure::Refused));
        assert!(retryable("DELETE", Failure::Status(503)));
        for f in [
            Failure::Broken,
            Failure::Status(502),
            Failure::Status(504),
            Failure::Timeout,
        ] {
            assert!(!retryable("DELETE", f), "{f:?}");
        }
    }

    #[test]
    fn writes_are_never_retried() {
        for method in ["POST", "PUT", "PATCH"] {
            for f in [Failure::Refused, Failure::Broken, Failure::Status(503)] {
                assert!(!retryable(method, f), "{method} {f:?}");
            }
        }
    }

    #[test]
    fn a_fresh_endpoint_gets_only_what_was_certainly_not_acted_on() {
        // Refused: nothing reached the old address, so anything may go again.
        for method in ["GET", "HEAD", "DELETE", "POST", "PUT", "PATCH"] {
            assert!(
                resend_to_fresh_endpoint(method, Failure::Refused),
                "{method}"
            );
        }
        // Broken: the old server may have acted on it; reads only.
        assert!(resend_to_fresh_endpoint("GET", Failure::Broken));
        assert!(resend_to_fresh_endpoint("HEAD", Failure::Broken));
        for method in ["POST", "PUT", "PATCH", "DELETE"] {
            assert!(
                !resend_to_fresh_endpoint(method, Failure::Broken),
                "{method}"
            );
        }
        // Anything else is an answer, or a wait already spent.
        for f in [Failure::Status(502), Failure::Timeout, Failure::Final] {
            assert!(!resend_to_fresh_endpoint("GET", f), "{f:?}");
        }
    }

    #[test]
    fn backoff_is_bounded_in_count_and_time() {
        assert_eq!(delay(1, 0), Some(250));
        assert_eq!(delay(2, 300), Some(500));
        assert_eq!(delay(3, 900), Some(1000));
        assert_eq!(delay(4, 1000), None);
        assert_eq!(delay(0, 0), None);
        // A slow failure leaves no room for another wait.
        assert_eq!(delay(1, BUDGET_MS - 100), None);
        assert_eq!(delay(3, 2500), None);
        let total: u64 = BACKOFF_MS.iter().sum();
        assert!(total <= BUDGET_MS);
    }
}
