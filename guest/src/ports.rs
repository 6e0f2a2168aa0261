//! ports.url: the lifecycle API's endpoint for a port, as a URL plus the
//! headers a client must send.

use crate::bindings::exports::abx::epp::infra::PortUrl;
use crate::config;
use crate::error::{Result, invalid};
use crate::execd::endpoint_url;
use crate::lifecycle::Lifecycle;

pub fn url(sandbox_id: &str, port: u16) -> Result<PortUrl> {
    if port == 0 {
        return Err(invalid("port 0 is not a port"));
    }
    let settings = config::settings()?;
    let endpoint = Lifecycle::new()?.endpoint(sandbox_id, port, settings.use_server_proxy)?;
    Ok(PortUrl {
        url: endpoint_url(&endpoint)?,
        headers: endpoint.headers.into_iter().collect(),
    })
}
