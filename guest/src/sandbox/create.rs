//! sandbox.create: `POST /sandboxes`, then the wait until the sandbox answers.
//! What a failed or abandoned create leaves is undone: by the label it carries
//! while the server still answers (crate::sandbox::label), by its id after.
//! A template names an image or a snapshot (crate::templates).

use super::policy::{self, Policy};
use super::ready::{ready_budget, wait_ready};
use super::{info, label, volumes};
use crate::bindings::abx::epp::request;
use crate::bindings::exports::abx::epp::infra::{CreateRequest, SandboxInfo};
use crate::config;
use crate::error::{self, Error, Kind, Result, invalid};
use crate::lifecycle::{CreateFailed, Lifecycle};
use crate::models::{CreateSandboxRequest, ImageAuth, ImageSpec, PlatformSpec, VolumeSpec};
use crate::templates::{self, Source};
use crate::undo::Token;
use opensandbox_settings::Settings;
use std::collections::BTreeMap;
use std::time::Duration;

/// EPP's default lifetime of a sandbox, in seconds.
const DEFAULT_TIMEOUT: u32 = 300;
/// OpenSandbox's shortest lifetime.
const MIN_TIMEOUT: u32 = 60;
/// How long the server may take to answer `POST /sandboxes` (it pulls the
/// image inside that call), when the host's deadline leaves that much.
const POST_WAIT_MS: u64 = 300_000;
/// The least time the settings must leave the create POST; less is a setup
/// that cannot work.
const MIN_POST_WAIT_MS: u64 = 30_000;
/// The least time worth sending the POST with, once the lookups before it
/// took their part: less, and its answer would be lost to the deadline.
const LAST_POST_WAIT_MS: u64 = 1_000;
/// Kept back at the end of a create for what follows the ready wait (a GET,
/// or the DELETE of a sandbox that did not become ready).
const MARGIN_MS: u64 = 15_000;

/// What a create asks for beyond its source, checked before anything is sent.
struct Checked {
    timeout: Option<u32>,
    limits: BTreeMap<String, String>,
    metadata: BTreeMap<String, String>,
    volumes: Vec<VolumeSpec>,
    policy: Option<Policy>,
}

fn check(req: &CreateRequest, settings: &Settings, label: &str) -> Result<Checked> {
    let timeout = match req.timeout.unwrap_or(DEFAULT_TIMEOUT) {
        0 => None,
        t if t < MIN_TIMEOUT => {
            return Err(invalid(format!(
                "timeout {t} s is too short: OpenSandbox sandboxes live at least {MIN_TIMEOUT} s (0 = never expire)"
            )));
        }
        t => Some(t),
    };
    if req
        .entrypoint
        .as_ref()
        .is_some_and(|ep| ep.first().is_none_or(String::is_empty))
    {
        return Err(invalid(
            "`entrypoint` is empty; give the program first, e.g. [\"sleep\", \"infinity\"]",
        ));
    }
    let mut limits = BTreeMap::from([
        ("cpu".to_string(), "1".to_string()),
        ("memory".to_string(), "2Gi".to_string()),
    ]);
    if let Some(r) = &req.resources {
        if let Some(cpu) = &r.cpu {
            limits.insert("cpu".into(), cpu.clone());
        }
        if let Some(memory) = &r.memory {
            limits.insert("memory".into(), memory.clone());
        }
    }
    Ok(Checked {
        timeout,
        limits,
        metadata: label::labelled(&req.metadata, label)?,
        volumes: volumes::specs(&req.volumes)?,
        policy: policy::of(req.network_policy.as_ref(), settings)?,
    })
}

/// The server's create body: from an image (with the entrypoint the request
/// or the settings give for it), or from a snapshot (the request's or the
/// setting's entrypoint, else the server's default for a restore).
fn body(
    req: &CreateRequest,
    checked: Checked,
    source: &Source,
    settings: &Settings,
) -> CreateSandboxRequest {
    let (image, snapshot_id, entrypoint) = match source {
        Source::Image(uri) => (
            Some(ImageSpec {
                uri: uri.clone(),
                auth: settings.registry_auth.as_ref().map(|a| ImageAuth {
                    username: a.username.clone(),
                    password: a.password.clone(),
                }),
            }),
            None,
            Some(
                req.entrypoint
                    .clone()
                    .unwrap_or_else(|| settings.entrypoint_for(uri)),
            ),
        ),
        Source::Snapshot { id, .. } => (
            None,
            Some(id.clone()),
            req.entrypoint
                .clone()
                .or_else(|| settings.entrypoint.clone()),
        ),
    };
    CreateSandboxRequest {
        image,
        snapshot_id,
        entrypoint,
        timeout: checked.timeout,
        resource_limits: checked.limits,
        env: req.env.iter().cloned().collect(),
        metadata: checked.metadata,
        platform: settings.platform.map(|p| PlatformSpec {
            os: p.os,
            arch: p.arch,
        }),
        network_policy: checked.policy.map(|p| p.json),
        secure_access: settings.secure_access,
        volumes: checked.volumes,
    }
}

/// How long the create POST may wait for its answer: five minutes, or what
/// the host's deadline (`left`, ms) leaves after the ready wait (`budget`,
/// ms) and a margin, so that the provider answers, and cleans up, before the
/// host stops it.
fn post_wait(budget: u64, left: Option<u64>) -> u64 {
    match left {
        Some(left) => POST_WAIT_MS.min(left.saturating_sub(budget + MARGIN_MS)),
        None => POST_WAIT_MS,
    }
}

/// Whether the ready wait (`budget`, ms) leaves the server enough of the
/// host's deadline (`left`, ms) to create the sandbox; `Err` with what to
/// change when it does not. Checked before any I/O: a setting or param that
/// cannot work fails the same way every time.
fn check_room(
    budget: u64,
    left: Option<u64>,
    from_request: bool,
) -> std::result::Result<(), String> {
    let Some(left) = left else {
        return Ok(());
    };
    if post_wait(budget, Some(left)) >= MIN_POST_WAIT_MS {
        return Ok(());
    }
    let source = if from_request {
        "the request's ready_timeout"
    } else {
        "ABX_OPENSANDBOX_READY_TIMEOUT, as no ready_timeout was passed"
    };
    Err(format!(
        "a ready wait of {} s ({source}) leaves the server no time to create the sandbox: \
         epp-host stops this sandbox.create after {} s (--call-timeout, plus a ready_timeout \
         passed with the request). Pass ready_timeout with the request (epp-host adds it to \
         its limit), or raise epp-host --call-timeout",
        budget / 1000,
        left / 1000
    ))
}

pub fn create(req: CreateRequest) -> Result<SandboxInfo> {
    let settings = config::settings()?;
    let label = label::new();
    let checked = check(&req, settings, &label)?;
    let budget = ready_budget(req.ready_timeout)?;
    check_room(budget, request::time_left_ms(), req.ready_timeout.is_some()).map_err(|why| {
        let code = if req.ready_timeout.is_some() {
            Kind::Invalid
        } else {
            Kind::Configuration
        };
        Error::new(code, why)
    })?;
    let lifecycle = Lifecycle::new()?;
    let source = templates::source(req.template.as_deref().unwrap_or("base"))?;
    if let Some(policy) = &checked.policy {
        policy.check_server(&lifecycle)?;
    }
    let body = body(&req, checked, &source, settings);
    // What is left now: the template's lookup and the server's version
    // took part of it.
    let post = post_wait(budget, request::time_left_ms());
    if post < LAST_POST_WAIT_MS {
        return Err(error::timed_out(format!(
            "sandbox.create ran out of time before it asked the server for the sandbox: {} s of \
             its deadline were left after looking up the template and the server's version, \
             and the ready wait needs {} s of them; nothing was created. Retry, or raise \
             epp-host --call-timeout",
            request::time_left_ms().unwrap_or(0) / 1000,
            budget / 1000
        )));
    }
    // Before the server is asked: a request abandoned while it still creates
    // the sandbox (it pulls the image inside this call) is undone by finding
    // the sandbox by its label (crate::sandbox::label).
    let pending = Token::Create(label.clone());
    pending.made();
    let created = match lifecycle.create(&body, Duration::from_millis(post)) {
        Ok(created) => created,
        Err(CreateFailed { error, may_exist }) => {
            if !may_exist {
                pending.settled();
                return Err(refused(error, &source, &req));
            }
            // The label's token stays out: the host's undo finds the sandbox
            // if the server made it after all.
            return Err(label::may_exist(error, &label));
        }
    };
    let id = created.id.clone();
    // From here on the sandbox is known by its id: faster to undo by that.
    let token = Token::Sandbox(id.clone());
    token.made();
    pending.settled();
    if matches!(created.status.state.as_str(), "Failed" | "Terminated") {
        let deleted = words(discard(&lifecycle, &id, &token));
        return Err(error::upstream(format!(
            "sandbox {id} could not start ({}: {}); {deleted}",
            created.status.reason.unwrap_or_default(),
            created.status.message.unwrap_or_default()
        )));
    }
    match wait_ready(&lifecycle, &id, budget) {
        Ok(Ok(())) => {}
        Ok(Err(last)) => {
            let deleted = words(discard(&lifecycle, &id, &token));
            return Err(error::timed_out(format!(
                "sandbox {id} was not ready within {} s (last seen: {last}); {deleted}. \
                 Raise ready_timeout or ABX_OPENSANDBOX_READY_TIMEOUT if images are slow to start",
                budget / 1000
            )));
        }
        Err(e) => {
            let message = match discard(&lifecycle, &id, &token) {
                true => format!("{} (sandbox.create deleted sandbox {id})", e.message),
                false => format!(
                    "{} (sandbox.create made sandbox {id} and could not delete it)",
                    e.message
                ),
            };
            let kind = e.kind;
            return Err(e.reworded(kind, message));
        }
    }
    let fresh = lifecycle.get(&id).unwrap_or(created);
    let image = match &source {
        Source::Image(uri) => Some(uri.as_str()),
        Source::Snapshot { .. } => None,
    };
    info(fresh, image)
}

/// The server's refusal of a create, in the request's terms: which volume,
/// which template's snapshot.
fn refused(e: Error, source: &Source, req: &CreateRequest) -> Error {
    let e = volumes::explain(e, &req.volumes);
    match source {
        Source::Snapshot { id, name }
            if e.upstream_code()
                .is_some_and(|c| c.starts_with("SNAPSHOT::")) =>
        {
            let kind = e.kind;
            let message = format!("template `{name}` (snapshot {id}): {}", e.message);
            e.reworded(kind, message)
        }
        _ => e,
    }
}

/// What became of a discarded sandbox, for a message.
fn words(deleted: bool) -> &'static str {
    match deleted {
        true => "it was deleted",
        false => "deleting it failed",
    }
}

/// Deletes the sandbox of a create that cannot finish: whether it is gone.
/// Once it is, its token is settled; otherwise the host's undo tries again.
fn discard(lifecycle: &Lifecycle, id: &str, token: &Token) -> bool {
    match lifecycle.delete(id) {
        Err(e) if !e.is(Kind::NotFound) => false,
        _ => {
            token.settled();
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::exports::abx::epp::infra::Resources;

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        Settings::from_pairs(pairs).unwrap()
    }

    fn create(template: Option<&str>, timeout: Option<u32>) -> CreateRequest {
        CreateRequest {
            template: template.map(str::to_string),
            timeout,
            env: vec![("A".into(), "1".into())],
            metadata: vec![("team".into(), "ml".into())],
            resources: Some(Resources {
                cpu: Some("500m".into()),
                memory: None,
            }),
            entrypoint: None,
            ready_timeout: None,
            volumes: Vec::new(),
            network_policy: None,
        }
    }

    /// The body for a request whose template is one of the provider's.
    fn wire(req: &CreateRequest, s: &Settings) -> serde_json::Value {
        let image = s
            .image_for(req.template.as_deref().unwrap_or("base"))
            .unwrap();
        wire_from(req, s, &Source::Image(image))
    }

    fn wire_from(req: &CreateRequest, s: &Settings, source: &Source) -> serde_json::Value {
        let checked = check(req, s, "l-1").unwrap();
        serde_json::to_value(body(req, checked, source, s)).unwrap()
    }

    #[test]
    fn defaults_match_what_the_sdk_sends() {
        let b = wire(&create(None, None), &settings(&[]));
        assert_eq!(b["image"], serde_json::json!({"uri": "python:3.12-slim"}));
        assert_eq!(
            b["entrypoint"],
            serde_json::json!(["tail", "-f", "/dev/null"])
        );
        assert_eq!(b["timeout"], 300);
        assert_eq!(
            b["resourceLimits"],
            serde_json::json!({"cpu": "500m", "memory": "2Gi"})
        );
        assert_eq!(b["env"]["A"], "1");
        assert_eq!(b["metadata"]["team"], "ml");
        // Every create carries its label, for an undo that finds it.
        assert_eq!(b["metadata"][label::KEY], "l-1");
        for absent in ["platform", "networkPolicy", "secureAccess"] {
            assert!(b.get(absent).is_none(), "{absent} should be left out: {b}");
        }
    }

    #[test]
    fn settings_reach_the_create_body() {
        let s = settings(&[
            ("ABX_OPENSANDBOX_REGISTRY_USERNAME", "bot"),
            ("ABX_OPENSANDBOX_REGISTRY_PASSWORD", "pw-123"),
            ("ABX_OPENSANDBOX_PLATFORM", "linux/arm64"),
            (
                "ABX_OPENSANDBOX_NETWORK_POLICY",
                r#"{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"}]}"#,
            ),
            ("ABX_OPENSANDBOX_SECURE_ACCESS", "true"),
            ("ABX_OPENSANDBOX_ENTRYPOINT", "sleep infinity"),
            ("ABX_OPENSANDBOX_IMAGE_ALIASES", "node=node:20"),
        ]);
        let b = wire(&create(Some("node"), Some(0)), &s);
        assert_eq!(
            b["image"],
            serde_json::json!({"uri": "node:20", "auth": {"username": "bot", "password": "pw-123"}})
        );
        assert_eq!(
            b["platform"],
            serde_json::json!({"os": "linux", "arch": "arm64"})
        );
        assert_eq!(b["networkPolicy"]["defaultAction"], "deny");
        assert_eq!(b["secureAccess"], true);
        assert_eq!(b["entrypoint"], serde_json::json!(["sleep", "infinity"]));
        assert!(b.get("timeout").is_none(), "timeout 0 means no expiry: {b}");
    }

    #[test]
    fn code_interpreter_keeps_its_entrypoint_and_bad_input_is_refused() {
        let s = settings(&[]);
        let b = wire(&create(Some("code"), None), &s);
        assert_eq!(
            b["entrypoint"],
            serde_json::json!(["/opt/code-interpreter/code-interpreter.sh"])
        );
        assert!(check(&create(None, Some(59)), &s, "l").is_err());
        let mut empty = create(None, None);
        empty.entrypoint = Some(vec![]);
        assert!(check(&empty, &s, "l").is_err());
    }

    #[test]
    fn a_snapshot_is_restored_with_the_servers_entrypoint() {
        let snapshot = Source::Snapshot {
            id: "5c1f".into(),
            name: "py-data".into(),
        };
        let b = wire_from(&create(Some("py-data"), None), &settings(&[]), &snapshot);
        assert_eq!(b["snapshotId"], "5c1f");
        for absent in ["image", "entrypoint"] {
            assert!(b.get(absent).is_none(), "{absent} should be left out: {b}");
        }
        // One the request or the setting names is kept.
        let s = settings(&[("ABX_OPENSANDBOX_ENTRYPOINT", "sleep infinity")]);
        let b = wire_from(&create(Some("py-data"), None), &s, &snapshot);
        assert_eq!(b["entrypoint"], serde_json::json!(["sleep", "infinity"]));
    }

    #[test]
    fn volumes_and_the_requests_policy_reach_the_create_body() {
        use crate::bindings::exports::abx::epp::infra::{
            EgressAction, EgressRule, NetworkPolicy, Volume,
        };
        let s = settings(&[(
            "ABX_OPENSANDBOX_NETWORK_POLICY",
            r#"{"defaultAction":"allow"}"#,
        )]);
        let mut req = create(None, None);
        req.volumes = vec![Volume {
            source: "/srv/data".into(),
            mount_path: "/data".into(),
            read_only: true,
            sub_path: None,
        }];
        req.network_policy = Some(NetworkPolicy {
            default_action: Some(EgressAction::Deny),
            egress: vec![EgressRule {
                action: EgressAction::Allow,
                target: Some("pypi.org".into()),
                ports: vec![],
            }],
        });
        let b = wire(&req, &s);
        assert_eq!(b["volumes"][0]["host"]["path"], "/srv/data");
        assert_eq!(b["volumes"][0]["readOnly"], true);
        assert_eq!(
            b["networkPolicy"],
            serde_json::json!({"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"}]})
        );
        // Without one, the setting's default applies.
        assert_eq!(
            wire(&create(None, None), &s)["networkPolicy"],
            serde_json::json!({"defaultAction": "allow"})
        );
        // A bad volume is refused before anything is sent.
        req.volumes[0].source = "data".into();
        req.volumes[0].mount_path = "rel".into();
        assert!(check(&req, &s, "l").is_err());
    }

    #[test]
    fn the_create_post_fits_in_the_hosts_deadline() {
        let s = |secs: u64| secs * 1000;
        // No deadline (another host): five minutes.
        assert_eq!(post_wait(s(60), None), s(300));
        assert_eq!(check_room(s(60), None, false), Ok(()));
        // epp-host's default: --call-timeout 300 s, plus a ready_timeout passed.
        assert_eq!(post_wait(s(60), Some(s(360))), s(285));
        assert_eq!(post_wait(s(600), Some(s(900))), s(285));
        // Without one, the setting's default fits in --call-timeout.
        assert_eq!(post_wait(s(60), Some(s(300))), s(225));
        // A long call timeout does not make the POST wait longer than five minutes.
        assert_eq!(post_wait(s(60), Some(s(3600))), s(300));
        // Less time left (after the lookups): less wait, down to none.
        assert_eq!(post_wait(s(60), Some(s(100))), s(25));
        assert_eq!(post_wait(s(60), Some(s(70))), 0);
        // A setting that does not fit is said at once, with what to change.
        assert_eq!(check_room(s(60), Some(s(300)), false), Ok(()));
        assert_eq!(check_room(s(60), Some(s(105)), true), Ok(()));
        let e = check_room(s(600), Some(s(300)), false).unwrap_err();
        assert!(
            e.contains("ABX_OPENSANDBOX_READY_TIMEOUT") && e.contains("--call-timeout"),
            "{e}"
        );
        assert!(e.contains("600 s") && e.contains("300 s"), "{e}");
        assert!(check_room(s(10), Some(s(40)), true).is_err());
        assert!(check_room(s(60), Some(s(104)), true).is_err());
    }
}
