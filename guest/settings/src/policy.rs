//! OpenSandbox's `networkPolicy` (egress rules), checked the same way whether
//! it comes from the setting ABX_OPENSANDBOX_NETWORK_POLICY or from the
//! `network_policy` of one `sandbox.create`: the provider builds the same JSON
//! from the request and hands it here.
//!
//! The server itself checks little: OpenSandbox 1.1.x takes any extra key and
//! drops a rule's `ports` without a word, so a typo (`egres`) or a port limit
//! on an old server would widen what the sandbox may reach. Unknown keys are
//! refused here, and the caller gates `ports` on the server's version.

use serde_json::{Map, Value};
use std::net::IpAddr;

/// What the provider must know about a policy that passed the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyFacts {
    /// The index of the first egress rule with `ports`, if any (servers
    /// before OpenSandbox 1.2 ignore them).
    pub first_ports_rule: Option<usize>,
}

/// Checks a policy in the server's shape, `{"defaultAction"?, "egress"?: [{"action",
/// "target"?, "ports"?}]}`. The error says where (`egress[1].ports`) and what a
/// good value is; the caller names the setting or the param in front of it.
pub fn check(policy: &Value) -> Result<PolicyFacts, String> {
    let obj = policy.as_object().ok_or(
        "must be a JSON object like {\"defaultAction\":\"deny\",\"egress\":[{\"action\":\"allow\",\"target\":\"pypi.org\"}]}",
    )?;
    only_keys(obj, "", &["defaultAction", "egress"])?;
    if let Some(action) = obj.get("defaultAction") {
        check_action(action, "defaultAction")?;
    }
    let mut first_ports_rule = None;
    if let Some(egress) = obj.get("egress") {
        let rules = egress.as_array().ok_or(
            "egress must be a list of rules like {\"action\":\"allow\",\"target\":\"pypi.org\"}",
        )?;
        for (i, rule) in rules.iter().enumerate() {
            if check_rule(rule, i)? && first_ports_rule.is_none() {
                first_ports_rule = Some(i);
            }
        }
    }
    Ok(PolicyFacts { first_ports_rule })
}

/// Checks `egress[i]`; answers whether it limits ports.
fn check_rule(rule: &Value, i: usize) -> Result<bool, String> {
    let at = format!("egress[{i}]");
    let obj = rule.as_object().ok_or_else(|| {
        format!("{at} must be an object like {{\"action\":\"allow\",\"target\":\"pypi.org\"}}")
    })?;
    only_keys(obj, &at, &["action", "target", "ports"])?;
    check_action(
        obj.get("action")
            .ok_or_else(|| format!("{at} has no action; give \"allow\" or \"deny\""))?,
        &format!("{at}.action"),
    )?;
    let target = match obj.get("target") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) if !t.trim().is_empty() => Some(t.trim()),
        Some(_) => {
            return Err(format!(
                "{at}.target must be a domain (pypi.org, *.github.com), an IP address or a CIDR"
            ));
        }
    };
    let ports = match obj.get("ports") {
        None | Some(Value::Null) => 0,
        Some(Value::Array(ports)) => {
            for p in ports {
                if !p.as_u64().is_some_and(|p| (1..=65_535).contains(&p)) {
                    return Err(format!("{at}.ports: `{p}` is not a TCP port (1 to 65535)"));
                }
            }
            ports.len()
        }
        Some(_) => {
            return Err(format!(
                "{at}.ports must be a list of TCP ports, e.g. [443]"
            ));
        }
    };
    match target {
        None if ports == 0 => Err(format!(
            "{at} needs a target (a domain, IP address or CIDR) or ports, or both"
        )),
        Some(domain) if ports > 0 && !is_address(domain) => Err(format!(
            "{at} limits ports of the domain `{domain}`: OpenSandbox applies ports only to \
             IP address and CIDR targets, a domain rule with ports is refused (upstream issue \
             #1647); drop `ports`, or give the addresses as targets"
        )),
        _ => Ok(ports > 0),
    }
}

fn check_action(action: &Value, at: &str) -> Result<(), String> {
    match action.as_str() {
        Some("allow" | "deny") => Ok(()),
        _ => Err(format!("{at} must be \"allow\" or \"deny\", not {action}")),
    }
}

fn only_keys(obj: &Map<String, Value>, at: &str, known: &[&str]) -> Result<(), String> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(key) => {
            let place = if at.is_empty() { "the policy" } else { at };
            Err(format!(
                "{place} has an unknown key `{key}`; it takes {}",
                known.join(", ")
            ))
        }
    }
}

/// An IP address or a CIDR (`10.0.0.0/8`, `fd00::/8`), as opposed to a domain.
fn is_address(target: &str) -> bool {
    let (addr, prefix) = match target.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (target, None),
    };
    let Ok(ip) = addr.parse::<IpAddr>() else {
        return false;
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    prefix.is_none_or(|p| p.parse::<u8>().is_ok_and(|p| p <= max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(policy: Value) -> String {
        check(&policy).unwrap_err()
    }

    #[test]
    fn good_policies_and_their_ports() {
        let none = check(&json!({"defaultAction": "deny", "egress": [
            {"action": "allow", "target": "pypi.org"},
            {"action": "deny", "target": "*.example.com"},
        ]}))
        .unwrap();
        assert_eq!(none.first_ports_rule, None);
        let ports = check(&json!({"egress": [
            {"action": "allow", "target": "pypi.org"},
            {"action": "allow", "target": "10.0.0.0/8", "ports": [443, 8443]},
            {"action": "deny", "ports": [22]},
        ]}))
        .unwrap();
        assert_eq!(ports.first_ports_rule, Some(1));
        assert_eq!(check(&json!({})).unwrap().first_ports_rule, None);
        // An empty port list is every port, like none.
        let empty = check(&json!({"egress": [{"action": "allow", "target": "a.io", "ports": []}]}));
        assert_eq!(empty.unwrap().first_ports_rule, None);
    }

    #[test]
    fn bad_policies_say_where() {
        for (policy, words) in [
            (json!([]), "must be a JSON object"),
            (json!({"egres": []}), "unknown key `egres`"),
            (json!({"defaultAction": "block"}), "defaultAction must be"),
            (json!({"egress": {}}), "egress must be a list"),
            (
                json!({"egress": [{"target": "a.io"}]}),
                "egress[0] has no action",
            ),
            (
                json!({"egress": [{"action": "allow", "target": "a.io", "port": [1]}]}),
                "egress[0] has an unknown key `port`",
            ),
            (
                json!({"egress": [{"action": "allow"}]}),
                "egress[0] needs a target",
            ),
            (
                json!({"egress": [{"action": "allow", "target": ""}]}),
                "egress[0].target must be",
            ),
            (
                json!({"egress": [{"action": "allow", "ports": [0]}]}),
                "egress[0].ports: `0` is not a TCP port",
            ),
            (
                json!({"egress": [{"action": "allow", "ports": [70000]}]}),
                "not a TCP port",
            ),
            (
                json!({"egress": [{"action": "allow", "target": "a.io"}, {"action": "allow", "target": "pypi.org", "ports": [443]}]}),
                "egress[1] limits ports of the domain `pypi.org`",
            ),
            (
                json!({"egress": [{"action": "allow", "target": "10.0.0.0/33", "ports": [1]}]}),
                "domain `10.0.0.0/33`",
            ),
        ] {
            let e = err(policy.clone());
            assert!(e.contains(words), "{policy}: {e}");
        }
    }

    #[test]
    fn addresses_and_domains() {
        for a in ["10.1.2.3", "10.0.0.0/8", "::1", "fd00::/8", "0.0.0.0/0"] {
            assert!(is_address(a), "{a}");
        }
        for d in [
            "pypi.org",
            "*.github.com",
            "10.0.0.0/x",
            "1.2.3",
            "localhost",
        ] {
            assert!(!is_address(d), "{d}");
        }
    }
}
