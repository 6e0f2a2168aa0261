//! code.interpret: placeholder while the module is written (issue 14).

use crate::bindings::exports::abx::epp::infra::{CodeContext, CodeEvent, CodeRequest};
use crate::error::Result;
use crate::unsupported;

pub struct CodeStream;

impl crate::bindings::exports::abx::epp::infra::GuestCodeStream for CodeStream {
    fn next(&self) -> Result<Option<Vec<CodeEvent>>> {
        Ok(None)
    }
}

pub fn run(_: CodeRequest) -> Result<CodeStream> {
    Err(unsupported::capability("code.run"))
}
pub fn create_context(_: &str, _: Option<&str>, _: Option<&str>) -> Result<CodeContext> {
    Err(unsupported::capability("code.create_context"))
}
pub fn list_contexts(_: &str, _: Option<&str>) -> Result<Vec<CodeContext>> {
    Err(unsupported::capability("code.list_contexts"))
}
pub fn get_context(_: &str, _: &str) -> Result<CodeContext> {
    Err(unsupported::capability("code.get_context"))
}
pub fn remove_context(_: &str, _: &str) -> Result<()> {
    Err(unsupported::capability("code.remove_context"))
}
pub fn interrupt(_: &str, _: &str) -> Result<()> {
    Err(unsupported::capability("code.interrupt"))
}
pub fn restart_context(_: &str, _: &str) -> Result<CodeContext> {
    Err(unsupported::capability("code.restart_context"))
}
pub fn languages(_: &str) -> Result<Vec<String>> {
    Err(unsupported::capability("code.languages"))
}
