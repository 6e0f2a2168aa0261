//! Capabilities OpenSandbox cannot provide. Each answers E8004 at once, without
//! any I/O, saying what OpenSandbox would need and what to use instead.

use crate::error::{Error, unsupported};

/// Why each unsupported method is missing, and what to use instead.
fn reason(method: &str) -> &'static str {
    match method {
        "ports.domain" => {
            "OpenSandbox serves a sandbox's ports only at the endpoints its server hands out \
             (ports.url); a domain of your own per port would need a gateway or ingress in front \
             of it that routes each host name to one sandbox port (per-port host routing), and \
             OpenSandbox's API configures none. Use ports.url, or point such a gateway at the \
             URL it answers"
        }
        "network.vpc_attach" | "network.vpc_detach" => {
            "OpenSandbox's API has no VPC attachment: a sandbox's network is its runtime's (a \
             Docker network, the Kubernetes pod network), set up by the server's operator. What \
             it controls per sandbox is egress: pass `network_policy` to sandbox.create, or set \
             ABX_OPENSANDBOX_NETWORK_POLICY for every new sandbox"
        }
        _ => "not available in OpenSandbox",
    }
}

pub fn capability(method: &str) -> Error {
    unsupported(method, reason(method))
}
