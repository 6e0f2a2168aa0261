//! templates.read and templates.build: the provider's own templates (image
//! names) and the server's snapshots.

use crate::bindings::exports::abx::epp::infra::{TemplateBuildRequest, TemplateInfo};
use crate::error::{Result, unsupported};

pub fn list() -> Result<Vec<TemplateInfo>> {
    Err(unsupported("templates.list", "not built yet"))
}

pub fn get(_name: &str) -> Result<TemplateInfo> {
    Err(unsupported("templates.get", "not built yet"))
}

pub fn build(_req: TemplateBuildRequest) -> Result<TemplateInfo> {
    Err(unsupported("templates.build", "not built yet"))
}

pub fn remove(_name: &str) -> Result<()> {
    Err(unsupported("templates.remove", "not built yet"))
}
