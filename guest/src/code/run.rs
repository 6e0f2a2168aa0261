//! Code runs: `POST /code` and its event stream, read by the shared machine
//! (crate::event_stream) through [`CodeEvents`].

use super::contexts::{self, check_language, context_language};
use super::kernels::{self, busy, no_kernels};
use super::{DEFAULT_LANGUAGE, memo};
use crate::bindings::exports::abx::epp::infra::{CodeError, CodeEvent, CodeOutput, CodeRequest};
use crate::error::{self, Result, invalid};
use crate::event_stream::{Clock, EventStream, Failure, Mapping, Step, stream_timeouts};
use crate::execd::Execd;
use crate::lifecycle::check_id;
use crate::models::{Bundle, ExecEvent, RunCode, RunContext};
use crate::refusal::{self, Refusal};
use crate::sse::{FrameReader, Frames};
use crate::time::monotonic_ms;
use crate::undo::Token;

/// How long a timed-out run may take to end after its kernel is interrupted.
const INTERRUPT_GRACE_MS: u64 = 10_000;

/// How `/code`'s events become a run's.
pub struct CodeEvents {
    execd: Execd,
    /// The context named by `init` (execd's default one when none was given).
    context_id: Option<String>,
    /// The run's execution count, once execd said.
    count: Option<u32>,
    /// An `execution_count` event came: the next result is the last expression's value.
    main_next: bool,
    /// The code raised (its `error` event came).
    raised: bool,
    /// execd said `execution_complete`. execd 1.1.1 says it when the kernel first
    /// reports idle, which its per-run connection makes happen before the output
    /// (testbed README, "Code-interpreter sandboxes"): the run's end is the end
    /// of the stream, and this only tells a finished run from a lost connection.
    completed: bool,
    clock: Clock,
}

/// A Jupyter MIME bundle as execd sends it (`text/plain` renamed `text`):
/// every value as text, JSON values as the JSON text execd sent.
fn mime_bundle(results: Bundle) -> Vec<(String, String)> {
    results
        .0
        .into_iter()
        .map(|(mime, value)| {
            let mime = if mime == "text" {
                "text/plain".to_string()
            } else {
                mime
            };
            let json = value.get();
            let data = serde_json::from_str::<String>(json)
                // nbformat's multi-line strings.
                .or_else(|_| serde_json::from_str::<Vec<String>>(json).map(|lines| lines.concat()))
                .unwrap_or_else(|_| json.to_string());
            (mime, data)
        })
        .collect()
}

impl Mapping for CodeEvents {
    type Event = CodeEvent;
    const WHAT: &'static str = "the code";

    fn target(&self) -> String {
        match &self.context_id {
            Some(id) => format!("code context {id} in sandbox {}", self.execd.sandbox_id),
            None => format!("a code run in sandbox {}", self.execd.sandbox_id),
        }
    }

    fn map(
        &mut self,
        event: ExecEvent,
        out: &mut Vec<CodeEvent>,
    ) -> std::result::Result<Step, Failure> {
        match event.kind.as_str() {
            "init" => {
                let id = event.text.unwrap_or_default();
                self.context_id = Some(id.clone());
                out.push(CodeEvent::Started(id.clone()));
                return Ok(Step::Started(id));
            }
            "stdout" => out.push(CodeEvent::Stdout(event.text.unwrap_or_default())),
            "stderr" => out.push(CodeEvent::Stderr(event.text.unwrap_or_default())),
            "execution_count" => {
                self.count = event.execution_count.and_then(|c| u32::try_from(c).ok());
                self.main_next = true;
            }
            "result" => out.push(CodeEvent::Rich(CodeOutput {
                data: mime_bundle(event.results.unwrap_or_default()),
                is_main_result: std::mem::take(&mut self.main_next),
            })),
            "error" => {
                self.raised = true;
                let e = event.error.unwrap_or_default();
                out.push(CodeEvent::Error(CodeError {
                    name: e.ename,
                    value: e.evalue,
                    traceback: e.traceback,
                }));
            }
            "execution_complete" => self.completed = true,
            // status, ping, and kinds of later execd versions.
            _ => {}
        }
        Ok(Step::Go)
    }

    fn refused(&mut self, message: &str) -> Option<Failure> {
        // execd starts the stream (`init`) before it tries the kernel: a busy
        // context runs someone else's code, which must not be interrupted.
        (refusal::of_frame(message) == Refusal::Busy)
            .then(|| Failure::ended(busy(&self.execd.sandbox_id, &self.target())))
    }

    fn at_end(&mut self, out: &mut Vec<CodeEvent>) -> bool {
        if self.completed || self.raised {
            out.push(CodeEvent::Finished(self.count));
            return true;
        }
        false
    }

    /// The run's context: interrupting it undoes the run.
    fn token(&self, started: &str) -> Option<Token> {
        Some(Token::Code {
            sandbox_id: self.execd.sandbox_id.clone(),
            context_id: started.to_string(),
        })
    }

    fn lost(&self) -> String {
        format!(
            "the output of {} ended before the run finished (connection lost); the code may \
             still be running: interrupt it with code.interrupt",
            self.target()
        )
    }

    /// Past its timeout the run's kernel is interrupted (the context and its
    /// state stay) and the caller gets E5004 once the run has ended, so that the
    /// context takes the next run.
    fn overdue(&mut self, frames: &mut dyn Frames) -> Option<Failure> {
        let timeout_ms = self.clock.overdue()?;
        let target = self.target();
        let interrupted = match self.context_id.clone() {
            Some(id) => contexts::interrupt_kernel(&mut self.execd, &id).is_ok(),
            None => false,
        };
        if interrupted {
            let until = monotonic_ms() + INTERRUPT_GRACE_MS;
            while monotonic_ms() < until && matches!(frames.next(), Ok(Some(_))) {}
        }
        let error = error::timed_out(format!(
            "{target} ran longer than its timeout of {} s; {}",
            crate::time::seconds(timeout_ms),
            if interrupted {
                "its kernel was interrupted (the context and its state remain)"
            } else {
                "interrupting its kernel failed: interrupt it with code.interrupt"
            }
        ));
        // Interrupted here, the run is over; else the host's undo tries again.
        Some(Failure {
            error,
            gone: interrupted,
        })
    }
}

pub fn run(req: CodeRequest) -> Result<EventStream<CodeEvents>> {
    if req.code.is_empty() {
        return Err(invalid("`code` is empty; give the code to run"));
    }
    if req.timeout_ms == Some(0) {
        return Err(invalid("`timeout` must be positive"));
    }
    if let Some(id) = &req.context_id {
        check_id("code context", id)?;
    }
    check_language(req.language.as_deref())?;
    let mut execd = Execd::connect(&req.sandbox_id)?;
    if memo::kernels(&req.sandbox_id) == Some(false) {
        return Err(no_kernels(&req.sandbox_id));
    }
    let language = match (&req.language, &req.context_id) {
        (Some(language), _) => language.clone(),
        (None, Some(id)) => context_language(&mut execd, id)?,
        (None, None) => DEFAULT_LANGUAGE.to_string(),
    };
    let body = serde_json::to_vec(&RunCode {
        context: RunContext {
            id: req.context_id.as_deref(),
            language: &language,
        },
        code: &req.code,
    })
    .expect("serialisable");
    let clock = Clock::start(req.timeout_ms);
    let resp = kernels::post_code(&mut execd, &body, stream_timeouts(req.timeout_ms))?;
    if !(200..300).contains(&resp.status) {
        return Err(kernels::refused(
            &execd,
            resp,
            req.context_id.as_deref(),
            &language,
        ));
    }
    memo::remember_kernels(&req.sandbox_id, true);
    let sandbox_id = execd.sandbox_id.clone();
    let mapping = CodeEvents {
        execd,
        context_id: req.context_id.clone(),
        count: None,
        main_next: false,
        raised: false,
        completed: false,
        clock,
    };
    Ok(EventStream::new(
        FrameReader::new(resp.into_reader()),
        &sandbox_id,
        mapping,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mime_bundle_keeps_every_representation_as_text() {
        let results: Bundle = serde_json::from_str(
            r#"{"text":"1","image/png":"iVBO","application/json":{"a":[1,2]},"text/html":["<b>","x</b>"]}"#,
        )
        .unwrap();
        let mut bundle = mime_bundle(results);
        bundle.sort();
        assert_eq!(
            bundle,
            vec![
                ("application/json".into(), r#"{"a":[1,2]}"#.into()),
                ("image/png".into(), "iVBO".into()),
                ("text/html".into(), "<b>x</b>".into()),
                ("text/plain".into(), "1".into()),
            ]
        );
    }

    #[test]
    fn a_json_value_comes_as_execd_sent_it() {
        // Parsed into a Value and printed again, 2^70 would come back as
        // 1.1805916207174113e21, and the float could lose its last digit.
        let json = r#"{"big":1180591620717411303424,"x":0.30000000000000004,"y":[1e-7,null]}"#;
        let results: Bundle =
            serde_json::from_str(&format!(r#"{{"application/json":{json},"text":"ok"}}"#)).unwrap();
        assert_eq!(
            mime_bundle(results),
            vec![
                ("application/json".into(), json.into()),
                ("text/plain".into(), "ok".into()),
            ]
        );
    }
}
