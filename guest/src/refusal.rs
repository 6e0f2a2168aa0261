//! What execd's refusals say. execd answers most failures with HTTP 500
//! `RUNTIME_ERROR` (a few with 400), and a stream that already started ends
//! with a bare `{code, message}` frame; only their words tell them apart
//! (API.md 6.0–6.7). This is the one place that reads those words: the
//! capability modules match on [`Refusal`] and phrase their own errors.

/// One of execd's refusals, by what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// "language runtime server not configured": no Jupyter server behind execd.
    NoKernels,
    /// "context not found": no such code context or bash session.
    NoContext,
    /// "session is busy": the code context runs other code (execd does not queue).
    Busy,
    /// "unknown language": no kernel for the language.
    UnknownLanguage,
    /// "not running in background": logs asked of a foreground command.
    NotBackground,
    /// "is not running", "no such session": an interrupt of something that
    /// already ended, or that execd never knew.
    NotRunning,
    /// "timeout after": a bash-session run passed its timeout (execd killed it).
    SessionTimeout,
    /// "already exists": a move onto a path that exists.
    Exists,
    /// "no such file or directory": a file operation on a path that does not exist.
    Missing,
    /// "unknown user": an owner execd cannot look up (Go's `user.Lookup`).
    UnknownUser,
    /// "unknown group": a group execd cannot look up.
    UnknownGroup,
    /// Anything else: the caller reports execd's own words.
    Other,
}

/// Words of each refusal, the more specific first ("is not running in
/// background" also holds "is not running").
const WORDS: [(&str, Refusal); 12] = [
    ("runtime server not configured", Refusal::NoKernels),
    ("context not found", Refusal::NoContext),
    ("session is busy", Refusal::Busy),
    ("unknown language", Refusal::UnknownLanguage),
    ("not running in background", Refusal::NotBackground),
    ("is not running", Refusal::NotRunning),
    ("no such session", Refusal::NotRunning),
    ("timeout after", Refusal::SessionTimeout),
    ("already exists", Refusal::Exists),
    ("no such file or directory", Refusal::Missing),
    ("unknown user", Refusal::UnknownUser),
    ("unknown group", Refusal::UnknownGroup),
];

fn of_text(text: &str) -> Refusal {
    WORDS
        .into_iter()
        .find(|(words, _)| text.contains(words))
        .map_or(Refusal::Other, |(_, refusal)| refusal)
}

/// An error answer of execd (before any stream started). Only 400 and 500
/// carry these words; a 404 or a proxy's 502 is something else.
pub fn of_answer(status: u16, body: &[u8]) -> Refusal {
    if !matches!(status, 400 | 500) {
        return Refusal::Other;
    }
    of_text(&String::from_utf8_lossy(body))
}

/// The bare error frame that ends a stream execd had started.
pub fn of_frame(message: &str) -> Refusal {
    of_text(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execd_refusals_are_told_apart_by_their_words() {
        let body = |words: &str| {
            format!(r#"{{"code":"RUNTIME_ERROR","message":"error running codes {words}"}}"#)
        };
        let cases = [
            (
                "language runtime server not configured, please check your image runtime",
                Refusal::NoKernels,
            ),
            ("context not found", Refusal::NoContext),
            ("session is busy", Refusal::Busy),
            ("unknown language: cobol", Refusal::UnknownLanguage),
            (
                "command 9f1c is not running in background",
                Refusal::NotBackground,
            ),
            ("command session 9f1c is not running", Refusal::NotRunning),
            ("no such session", Refusal::NotRunning),
            ("destination path already exists: /x", Refusal::Exists),
            (
                "for /x. chmod /x: no such file or directory",
                Refusal::Missing,
            ),
            (
                "for /x. failed to lookup user bob: user: unknown user bob",
                Refusal::UnknownUser,
            ),
            (
                "for /x. failed to lookup group g: group: unknown group g",
                Refusal::UnknownGroup,
            ),
            ("something else", Refusal::Other),
        ];
        for (words, expected) in cases {
            assert_eq!(of_answer(500, body(words).as_bytes()), expected, "{words}");
        }
        assert_eq!(
            of_answer(400, body("not running in background").as_bytes()),
            Refusal::NotBackground
        );
        // Other statuses are not refusals of execd's, whatever they say.
        assert_eq!(
            of_answer(404, body("context not found").as_bytes()),
            Refusal::Other
        );
        assert_eq!(
            of_answer(502, body("session is busy").as_bytes()),
            Refusal::Other
        );
        assert_eq!(
            of_frame("error running in session. timeout after 2s"),
            Refusal::SessionTimeout
        );
        assert_eq!(
            of_frame("error running codes session is busy"),
            Refusal::Busy
        );
    }
}
