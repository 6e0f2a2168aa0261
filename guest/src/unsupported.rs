//! Capabilities OpenSandbox cannot provide. Each answers E8004 at once, without
//! any I/O, saying what to use instead.

use crate::error::{Error, unsupported};

/// Why each unsupported method is missing, and what to use instead.
fn reason(method: &str) -> &'static str {
    match method {
        "templates.list" | "templates.get" => {
            "OpenSandbox has no template registry; templates are image names (see ABX_OPENSANDBOX_IMAGE_ALIASES)"
        }
        "templates.build" => {
            "OpenSandbox does not build images; build and push an image, then use its URI as the template"
        }
        "ports.domain" => "OpenSandbox has no custom domains per port; use ports.url",
        "storage.mount" | "storage.unmount" => {
            "volumes can only be declared when the server creates a sandbox, not mounted later"
        }
        "network.vpc_attach" | "network.vpc_detach" => {
            "OpenSandbox has no VPC attachment; use ABX_OPENSANDBOX_NETWORK_POLICY for egress rules"
        }
        _ => "not available in OpenSandbox",
    }
}

pub fn capability(method: &str) -> Error {
    unsupported(method, reason(method))
}
