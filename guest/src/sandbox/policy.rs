//! The egress policy of a new sandbox: the request's `network_policy`, else
//! the setting ABX_OPENSANDBOX_NETWORK_POLICY, as the server's `networkPolicy`,
//! checked by the same rules (opensandbox_settings::policy).
//!
//! A rule's `ports` is honoured from OpenSandbox 1.2 on; 1.1.x drops it
//! without a word, which turns "allow 10.0.0.0/8 on 443" into "allow
//! 10.0.0.0/8". A policy with ports is therefore sent only to a server whose
//! `GET /version` says 1.2 or later, a final release (a pre-release of 1.2
//! may predate the fix; memoised host-wide: a version changes only with a
//! restart); otherwise nothing is created and the answer says why.

use crate::bindings::abx::epp::memo;
use crate::bindings::exports::abx::epp::infra::{EgressAction, NetworkPolicy};
use crate::config;
use crate::error::{Error, Kind, Result};
use crate::lifecycle::Lifecycle;
use opensandbox_settings::Settings;
use opensandbox_settings::policy::{PolicyFacts, check};
use serde_json::{Value, json};

/// The setting that holds the default policy.
const SETTING: &str = "ABX_OPENSANDBOX_NETWORK_POLICY";
/// How long a server's version is remembered.
const VERSION_TTL_MS: u32 = 600_000;
/// The first release that applies `ports`: 1.2.0 itself, not a pre-release
/// of it.
const PORTS_SINCE: Release = (1, 2, 0, true);

/// A policy to send, and where it came from (for messages and codes).
pub struct Policy {
    pub json: Value,
    facts: PolicyFacts,
    from_request: bool,
}

/// The policy of a create: the request's (E1001 when it breaks a rule), else
/// the setting's (checked when the settings were read), else none.
pub fn of(request: Option<&NetworkPolicy>, settings: &Settings) -> Result<Option<Policy>> {
    if let Some(p) = request {
        let json = to_json(p);
        let facts =
            check(&json).map_err(|e| Error::new(Kind::Invalid, format!("network_policy: {e}")))?;
        return Ok(Some(Policy {
            json,
            facts,
            from_request: true,
        }));
    }
    let Some(text) = &settings.network_policy else {
        return Ok(None);
    };
    let json: Value = serde_json::from_str(text)
        .map_err(|e| Error::new(Kind::Configuration, format!("{SETTING}: {e}")))?;
    let facts =
        check(&json).map_err(|e| Error::new(Kind::Configuration, format!("{SETTING}: {e}")))?;
    Ok(Some(Policy {
        json,
        facts,
        from_request: false,
    }))
}

/// The server's shape of a request's policy.
fn to_json(p: &NetworkPolicy) -> Value {
    let action = |a: EgressAction| match a {
        EgressAction::Allow => "allow",
        EgressAction::Deny => "deny",
    };
    let egress: Vec<Value> = p
        .egress
        .iter()
        .map(|rule| {
            let mut r = json!({"action": action(rule.action)});
            if let Some(target) = &rule.target {
                r["target"] = json!(target);
            }
            if !rule.ports.is_empty() {
                r["ports"] = json!(rule.ports);
            }
            r
        })
        .collect();
    let mut out = json!({"egress": egress});
    if let Some(a) = p.default_action {
        out["defaultAction"] = json!(action(a));
    }
    out
}

impl Policy {
    /// Ok when the server applies every rule as written: a policy with
    /// `ports` needs OpenSandbox 1.2 or later.
    pub fn check_server(&self, lifecycle: &Lifecycle) -> Result<()> {
        let Some(rule) = self.facts.first_ports_rule else {
            return Ok(());
        };
        let version = server_version(lifecycle);
        let why = match &version {
            Ok(v) if release(v).is_some_and(|r| r >= PORTS_SINCE) => return Ok(()),
            Ok(v) => format!("{} is OpenSandbox {v}", lifecycle.target()),
            Err(e) => format!(
                "the version of {} could not be read ({})",
                lifecycle.target(),
                e.message
            ),
        };
        let (kind, place, fix) = match self.from_request {
            true => (
                Kind::Invalid,
                format!("network_policy.egress[{rule}]"),
                "remove `ports` from the rule",
            ),
            false => (
                Kind::Configuration,
                format!("{SETTING} (egress[{rule}])"),
                "remove `ports` from the setting's rule",
            ),
        };
        Err(Error::new(
            kind,
            format!(
                "{place} limits ports, but {why}: servers before 1.2 (its pre-releases \
                 included) may drop `ports` without a word, so the rule would apply to every \
                 port; nothing was created. {fix}, or upgrade the server to OpenSandbox 1.2 or \
                 later"
            ),
        ))
    }
}

/// The server's release (`1.1.1`), memoised host-wide.
fn server_version(lifecycle: &Lifecycle) -> Result<String> {
    let key = format!("server-version:{}", config::settings()?.origin);
    if let Some(v) = memo::get(&key) {
        return Ok(v);
    }
    let v = lifecycle.version()?;
    memo::put(&key, &v, VERSION_TTL_MS);
    Ok(v)
}

/// A release as it sorts: major, minor, patch, and whether it is final (a
/// pre-release or development release sorts below its final release, as in
/// PEP 440 and semver).
type Release = (u64, u64, u64, bool);

/// The release of a version such as `1.1.1`, `v2`, `1.2.0rc1`, `1.2.0.dev0`,
/// `1.2.0-rc.1` or `1.2.0.post1`. After the numbers, nothing, a post-release
/// (`.post1`, `-1`) or a local part (`+build`) is final; anything else
/// (`rc`, `a`, `b`, `dev`, `-beta`, words it does not know) is taken for a
/// pre-release, which keeps a gate such as [`PORTS_SINCE`] shut.
fn release(version: &str) -> Option<Release> {
    let v = version.trim();
    let v = v.strip_prefix(['v', 'V']).unwrap_or(v);
    let v = v.split_once('+').map_or(v, |(release, _local)| release);
    let mut numbers = Vec::new();
    let mut rest = v;
    loop {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            break;
        }
        numbers.push(rest[..digits].parse::<u64>().ok()?);
        rest = &rest[digits..];
        match rest.strip_prefix('.') {
            Some(after) if after.starts_with(|c: char| c.is_ascii_digit()) => rest = after,
            _ => break,
        }
    }
    let number = |i: usize| numbers.get(i).copied().unwrap_or(0);
    if numbers.is_empty() {
        return None;
    }
    let tail = rest
        .trim_start_matches(['.', '-', '_'])
        .to_ascii_lowercase();
    let is_final = tail.is_empty()
        || tail.starts_with("post")
        || (rest.starts_with('-') && tail.bytes().all(|b| b.is_ascii_digit()));
    Some((number(0), number(1), number(2), is_final))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::exports::abx::epp::infra::EgressRule;

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        Settings::from_pairs(pairs).unwrap()
    }

    fn rule(action: EgressAction, target: Option<&str>, ports: &[u16]) -> EgressRule {
        EgressRule {
            action,
            target: target.map(str::to_string),
            ports: ports.to_vec(),
        }
    }

    #[test]
    fn the_request_wins_and_has_the_servers_shape() {
        let s = settings(&[(SETTING, r#"{"defaultAction":"allow"}"#)]);
        let p = NetworkPolicy {
            default_action: Some(EgressAction::Deny),
            egress: vec![
                rule(EgressAction::Allow, Some("pypi.org"), &[]),
                rule(EgressAction::Allow, Some("10.0.0.0/8"), &[443]),
            ],
        };
        let got = of(Some(&p), &s).unwrap().unwrap();
        assert_eq!(
            got.json,
            json!({"defaultAction": "deny", "egress": [
                {"action": "allow", "target": "pypi.org"},
                {"action": "allow", "target": "10.0.0.0/8", "ports": [443]},
            ]})
        );
        assert_eq!(got.facts.first_ports_rule, Some(1));
        assert!(got.from_request);
        let default = of(None, &s).unwrap().unwrap();
        assert_eq!(default.json, json!({"defaultAction": "allow"}));
        assert!(!default.from_request);
        assert!(of(None, &settings(&[])).unwrap().is_none());
    }

    #[test]
    fn a_bad_request_policy_is_e1001_naming_the_rule() {
        let p = NetworkPolicy {
            default_action: None,
            egress: vec![
                rule(EgressAction::Deny, Some("a.io"), &[]),
                rule(EgressAction::Allow, Some("pypi.org"), &[443]),
            ],
        };
        let e = of(Some(&p), &settings(&[])).err().unwrap();
        assert_eq!(e.kind, Kind::Invalid);
        assert!(
            e.message
                .starts_with("network_policy: egress[1] limits ports of the domain"),
            "{e:?}"
        );
        let empty = NetworkPolicy {
            default_action: None,
            egress: vec![rule(EgressAction::Allow, None, &[])],
        };
        let e = of(Some(&empty), &settings(&[])).err().unwrap();
        assert!(e.message.contains("egress[0] needs a target"), "{e:?}");
    }

    #[test]
    fn releases() {
        assert_eq!(release("1.1.1"), Some((1, 1, 1, true)));
        assert_eq!(release("v2"), Some((2, 0, 0, true)));
        assert_eq!(release("1.2.0rc1"), Some((1, 2, 0, false)));
        assert_eq!(release("1.2.0.dev0"), Some((1, 2, 0, false)));
        assert_eq!(release("0.0.0-dev"), Some((0, 0, 0, false)));
        assert_eq!(release("1.2.0+local.7"), Some((1, 2, 0, true)));
        assert_eq!(release("dev"), None);
        assert_eq!(release(""), None);
        let gate = |v: &str| release(v).is_some_and(|r| r >= PORTS_SINCE);
        // Final 1.2 and later open the gate, and so do their post-releases
        // and pre-releases of later versions (1.2.1rc1 comes after 1.2.0).
        for open in [
            "1.2.0",
            "1.2",
            "v1.2.0",
            "1.2.0.post1",
            "1.2.0-1",
            "1.2.1rc1",
            "1.10.0",
            "2.0.0b1",
        ] {
            assert!(gate(open), "{open}");
        }
        // Pre-releases of 1.2 are below it, as is everything before it.
        for shut in [
            "1.1.9",
            "1.1.1",
            "1.2.0rc1",
            "1.2rc1",
            "1.2.0.dev0",
            "1.2.0a1",
            "1.2.0b2",
            "1.2.0-rc.1",
            "1.2.0-beta",
            "1.2.0.nightly",
            "dev",
        ] {
            assert!(!gate(shut), "{shut}");
        }
    }
}
