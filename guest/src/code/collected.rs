//! abx:epp 1.0's collected `code-run`: the events of a streamed run, gathered.

use crate::bindings::exports::abx::epp::infra::{CodeEvent, CodeRequest, CodeResult};
use crate::error::Result;
use crate::event_stream::Source;

pub fn run_collected(req: CodeRequest) -> Result<CodeResult> {
    let mut stream = super::run::run(req)?;
    let mut result = CodeResult {
        stdout: String::new(),
        stderr: String::new(),
        results: Vec::new(),
        error: None,
    };
    while let Some(events) = stream.next()? {
        for event in events {
            match event {
                CodeEvent::Stdout(t) => result.stdout.push_str(&t),
                CodeEvent::Stderr(t) => result.stderr.push_str(&t),
                CodeEvent::Rich(output) => result.results.push(output.data),
                CodeEvent::Error(e) => result.error = Some(format!("{}: {}", e.name, e.value)),
                CodeEvent::Started(_) | CodeEvent::Finished(_) => {}
            }
        }
    }
    Ok(result)
}
