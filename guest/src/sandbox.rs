//! sandbox.lifecycle, sandbox.timeout and sandbox.pause.

use crate::bindings::abx::epp::request;
use crate::bindings::exports::abx::epp::infra::{CreateRequest, ListRequest, SandboxInfo};
use crate::config;
use crate::error::{self, Error, Kind, Result, conflict, invalid};
use crate::execd::Execd;
use crate::lifecycle::Lifecycle;
use crate::models::{CreateSandboxRequest, ImageAuth, ImageSpec, PlatformSpec, Sandbox};
use crate::time::{monotonic_ms, now_unix, rfc3339, sleep_ms};
use crate::undo::Token;
use opensandbox_settings::Settings;
use std::collections::BTreeMap;
use std::time::Duration;

/// EPP's default lifetime of a sandbox, in seconds.
const DEFAULT_TIMEOUT: u32 = 300;
/// OpenSandbox's shortest lifetime.
const MIN_TIMEOUT: u32 = 60;
/// How often readiness is polled (the SDK uses 200 ms).
const POLL_MS: u64 = 200;
/// How long the server may take to answer `POST /sandboxes` (it pulls the
/// image inside that call), when the host's deadline leaves that much.
const POST_WAIT_MS: u64 = 300_000;
/// The least time the create POST is given; less is a setup that cannot work.
const MIN_POST_WAIT_MS: u64 = 30_000;
/// Kept back at the end of a create for what follows the ready wait (a GET,
/// or the DELETE of a sandbox that did not become ready).
const MARGIN_MS: u64 = 15_000;

/// Converts the server's sandbox into EPP's.
pub fn info(sandbox: Sandbox, image_hint: Option<&str>) -> Result<SandboxInfo> {
    let settings = config::settings()?;
    let image = sandbox
        .image
        .and_then(|i| i.uri)
        .or_else(|| image_hint.map(str::to_string));
    Ok(SandboxInfo {
        template: image
            .as_deref()
            .map(|i| settings.template_for(i))
            .unwrap_or_default(),
        image,
        sandbox_id: sandbox.id,
        state: sandbox.status.state.to_ascii_lowercase(),
        metadata: sandbox.metadata.unwrap_or_default().into_iter().collect(),
        created_at: sandbox.created_at,
        expires_at: sandbox.expires_at,
    })
}

/// The server's state names are capitalised (`Running`).
fn server_state(state: &str) -> String {
    let mut chars = state.trim().chars();
    match chars.next() {
        Some(first) => {
            first.to_ascii_uppercase().to_string() + &chars.as_str().to_ascii_lowercase()
        }
        None => String::new(),
    }
}

/// The server's create body for an EPP request under `settings`; also returns the image.
fn request(req: &CreateRequest, settings: &Settings) -> Result<(CreateSandboxRequest, String)> {
    let template = req.template.as_deref().unwrap_or("base");
    let Some(image) = settings.image_for(template) else {
        let names: Vec<&str> = std::iter::once("base")
            .chain(settings.image_aliases.keys().map(String::as_str))
            .collect();
        return Err(invalid(format!(
            "unknown template `{template}`; use one of {} or an image URI such as python:3.12-slim \
             (more names: ABX_OPENSANDBOX_IMAGE_ALIASES)",
            names.join(", ")
        )));
    };
    let timeout = match req.timeout.unwrap_or(DEFAULT_TIMEOUT) {
        0 => None,
        t if t < MIN_TIMEOUT => {
            return Err(invalid(format!(
                "timeout {t} s is too short: OpenSandbox sandboxes live at least {MIN_TIMEOUT} s (0 = never expire)"
            )));
        }
        t => Some(t),
    };
    let entrypoint = match &req.entrypoint {
        Some(ep) if ep.is_empty() || ep[0].is_empty() => {
            return Err(invalid(
                "`entrypoint` is empty; give the program first, e.g. [\"sleep\", \"infinity\"]",
            ));
        }
        Some(ep) => ep.clone(),
        None => settings.entrypoint_for(&image),
    };
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
    let network_policy = match &settings.network_policy {
        Some(p) => Some(
            serde_json::from_str(p)
                .map_err(|e| invalid(format!("ABX_OPENSANDBOX_NETWORK_POLICY: {e}")))?,
        ),
        None => None,
    };
    let body = CreateSandboxRequest {
        image: ImageSpec {
            uri: image.clone(),
            auth: settings.registry_auth.as_ref().map(|a| ImageAuth {
                username: a.username.clone(),
                password: a.password.clone(),
            }),
        },
        entrypoint,
        timeout,
        resource_limits: limits,
        env: req.env.iter().cloned().collect(),
        metadata: req.metadata.iter().cloned().collect(),
        platform: settings.platform.map(|p| PlatformSpec {
            os: p.os,
            arch: p.arch,
        }),
        network_policy,
        secure_access: settings.secure_access,
    };
    Ok((body, image))
}

/// Waits until the sandbox answers: endpoint resolved and `/ping` 2xx, failing
/// fast when the server says it failed. Returns a description of the last state
/// seen when time runs out.
fn wait_ready(
    lifecycle: &Lifecycle,
    id: &str,
    budget_ms: u64,
) -> Result<std::result::Result<(), String>> {
    let deadline = monotonic_ms() + budget_ms;
    let mut last;
    let mut polls = 0u32;
    Execd::forget(id);
    loop {
        match Execd::connect(id) {
            Ok(execd) => {
                if execd.ping()? {
                    return Ok(Ok(()));
                }
                last = "execd does not answer /ping yet".into();
            }
            Err(e)
                if e.status() == Some(404)
                    && e.upstream_code() != Some("KUBERNETES::POD_IP_NOT_AVAILABLE") =>
            {
                return Err(e);
            }
            Err(e) if e.status().is_some_and(|s| s != 404) => return Err(e),
            Err(e) => last = e.message,
        }
        // Every few polls, ask the server whether the sandbox gave up.
        polls += 1;
        if polls % 5 == 0 {
            let sandbox = lifecycle.get(id)?;
            let state = sandbox.status.state.clone();
            if matches!(state.as_str(), "Failed" | "Terminated") {
                return Err(error::upstream(format!(
                    "sandbox {id} is {state}: {}",
                    sandbox
                        .status
                        .message
                        .or(sandbox.status.reason)
                        .unwrap_or_default()
                )));
            }
            last = format!("state {state}, {last}");
        }
        if monotonic_ms() >= deadline {
            Execd::forget(id);
            // The error names the server's state too, even when time ran out
            // between two of the polls above.
            if polls % 5 != 0
                && let Ok(sandbox) = lifecycle.get(id)
            {
                last = format!("state {}, {last}", sandbox.status.state);
            }
            return Ok(Err(last));
        }
        sleep_ms(POLL_MS.min(deadline.saturating_sub(monotonic_ms()).max(1)));
    }
}

fn ready_budget(ready_timeout: Option<u32>) -> Result<u64> {
    let secs = match ready_timeout {
        Some(0) => return Err(invalid("`ready_timeout` must be at least 1 second")),
        Some(s) => s,
        None => config::settings()?.ready_timeout,
    };
    Ok(u64::from(secs) * 1000)
}

/// How long the create POST may wait for its answer: five minutes, or what
/// the host's deadline (`left`, ms) leaves after the ready wait (`budget`, ms)
/// and a margin, so that the provider answers, and cleans up, before the host
/// stops it. `Err` when too little is left, with what to change.
fn post_wait(
    budget: u64,
    left: Option<u64>,
    from_request: bool,
) -> std::result::Result<u64, String> {
    let Some(left) = left else {
        return Ok(POST_WAIT_MS);
    };
    let spare = left.saturating_sub(budget + MARGIN_MS);
    if spare < MIN_POST_WAIT_MS {
        let source = if from_request {
            "the request's ready_timeout"
        } else {
            "ABX_OPENSANDBOX_READY_TIMEOUT, as no ready_timeout was passed"
        };
        return Err(format!(
            "a ready wait of {} s ({source}) leaves the server no time to create the sandbox: \
             epp-host stops this sandbox.create after {} s (--call-timeout, plus a ready_timeout \
             passed with the request). Pass ready_timeout with the request (epp-host adds it to \
             its limit), or raise epp-host --call-timeout",
            budget / 1000,
            left / 1000
        ));
    }
    Ok(POST_WAIT_MS.min(spare))
}

pub fn create(req: CreateRequest) -> Result<SandboxInfo> {
    let (body, image) = request(&req, config::settings()?)?;
    let budget = ready_budget(req.ready_timeout)?;
    let post =
        post_wait(budget, request::time_left_ms(), req.ready_timeout.is_some()).map_err(|why| {
            let code = if req.ready_timeout.is_some() {
                Kind::Invalid
            } else {
                Kind::Configuration
            };
            Error::new(code, why)
        })?;
    let lifecycle = Lifecycle::new()?;
    // The server pulls the image inside this call.
    let created = lifecycle.create(&body, Duration::from_millis(post))?;
    let id = created.id.clone();
    // From here on the sandbox exists: if the request fails without this call
    // deleting it (cancelled, stopped at its deadline) the host undoes it.
    let token = Token::Sandbox(id.clone());
    token.made();
    if matches!(created.status.state.as_str(), "Failed" | "Terminated") {
        let deleted = discard(&lifecycle, &id, &token);
        return Err(error::upstream(format!(
            "sandbox {id} could not start ({}: {}); {deleted}",
            created.status.reason.unwrap_or_default(),
            created.status.message.unwrap_or_default()
        )));
    }
    match wait_ready(&lifecycle, &id, budget) {
        Ok(Ok(())) => {}
        Ok(Err(last)) => {
            let deleted = discard(&lifecycle, &id, &token);
            return Err(error::timed_out(format!(
                "sandbox {id} was not ready within {} s (last seen: {last}); {deleted}. \
                 Raise ready_timeout or ABX_OPENSANDBOX_READY_TIMEOUT if images are slow to start",
                budget / 1000
            )));
        }
        Err(mut e) => {
            e.message = format!(
                "{} (sandbox.create: {})",
                e.message,
                discard(&lifecycle, &id, &token)
            );
            return Err(e);
        }
    }
    let fresh = lifecycle.get(&id).unwrap_or(created);
    info(fresh, Some(&image))
}

/// Deletes the sandbox of a create that cannot finish, and says so. Once it
/// is gone its token is settled; otherwise the host's undo tries again.
fn discard(lifecycle: &Lifecycle, id: &str, token: &Token) -> &'static str {
    match lifecycle.delete(id) {
        Err(e) if !e.is(Kind::NotFound) => "deleting it failed",
        _ => {
            token.settled();
            "it was deleted"
        }
    }
}

pub fn connect(id: &str) -> Result<SandboxInfo> {
    let lifecycle = Lifecycle::new()?;
    let sandbox = lifecycle.get(id)?;
    // Like E2B, connecting to a paused sandbox resumes it.
    if sandbox.status.state == "Paused" {
        return resume(id);
    }
    if !matches!(
        sandbox.status.state.as_str(),
        "Running" | "Pending" | "Resuming"
    ) {
        return Err(conflict(format!(
            "sandbox {id} is {} and cannot be connected to",
            sandbox.status.state
        )));
    }
    ensure_ready(&lifecycle, id, None)?;
    info(lifecycle.get(id)?, None)
}

fn ensure_ready(lifecycle: &Lifecycle, id: &str, ready_timeout: Option<u32>) -> Result<()> {
    let budget = ready_budget(ready_timeout)?;
    match wait_ready(lifecycle, id, budget)? {
        Ok(()) => Ok(()),
        Err(last) => Err(error::timed_out(format!(
            "sandbox {id} did not answer within {} s (last seen: {last})",
            budget / 1000
        ))),
    }
}

pub fn get_info(id: &str) -> Result<SandboxInfo> {
    info(Lifecycle::new()?.get(id)?, None)
}

pub fn list(req: ListRequest) -> Result<Vec<SandboxInfo>> {
    let lifecycle = Lifecycle::new()?;
    let states: Vec<String> = req.states.iter().map(|s| server_state(s)).collect();
    let mut out = Vec::new();
    for page in 1..=10_000 {
        let list = lifecycle.list(&states, &req.metadata, page)?;
        let more =
            list.pagination.as_ref().is_some_and(|p| p.has_next_page) && !list.items.is_empty();
        for sandbox in list.items {
            out.push(info(sandbox, None)?);
        }
        if !more {
            break;
        }
    }
    Ok(out)
}

pub fn kill(id: &str) -> Result<()> {
    let result = Lifecycle::new()?.delete(id);
    Execd::forget(id);
    result
}

pub fn set_timeout(id: &str, timeout: u32) -> Result<String> {
    if timeout == 0 {
        return Err(invalid("`timeout` must be at least 1 second from now"));
    }
    Lifecycle::new()?.renew(id, rfc3339(now_unix() + u64::from(timeout)))
}

pub fn pause(id: &str) -> Result<()> {
    let result = Lifecycle::new()?.pause(id);
    Execd::forget(id);
    result
}

pub fn resume(id: &str) -> Result<SandboxInfo> {
    let lifecycle = Lifecycle::new()?;
    lifecycle.resume(id)?;
    // The endpoint may change after a resume (Kubernetes): resolve it again.
    Execd::forget(id);
    ensure_ready(&lifecycle, id, None)?;
    info(lifecycle.get(id)?, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::exports::abx::epp::infra::Resources;

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_env(&move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
        .unwrap()
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
        }
    }

    fn body(req: &CreateRequest, s: &Settings) -> serde_json::Value {
        serde_json::to_value(request(req, s).unwrap().0).unwrap()
    }

    #[test]
    fn defaults_match_what_the_sdk_sends() {
        let b = body(&create(None, None), &settings(&[]));
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
        let b = body(&create(Some("node"), Some(0)), &s);
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
        let b = body(&create(Some("code"), None), &s);
        assert_eq!(
            b["entrypoint"],
            serde_json::json!(["/opt/code-interpreter/code-interpreter.sh"])
        );
        assert!(request(&create(Some("nope"), None), &s).is_err());
        assert!(request(&create(None, Some(59)), &s).is_err());
        let mut empty = create(None, None);
        empty.entrypoint = Some(vec![]);
        assert!(request(&empty, &s).is_err());
    }

    #[test]
    fn the_create_post_fits_in_the_hosts_deadline() {
        let s = |secs: u64| secs * 1000;
        // No deadline (another host): five minutes.
        assert_eq!(post_wait(s(60), None, false), Ok(s(300)));
        // epp-host's default: --call-timeout 300 s, plus a ready_timeout passed.
        assert_eq!(post_wait(s(60), Some(s(360)), true), Ok(s(285)));
        assert_eq!(post_wait(s(600), Some(s(900)), true), Ok(s(285)));
        // Without one, the setting's default fits in --call-timeout.
        assert_eq!(post_wait(s(60), Some(s(300)), false), Ok(s(225)));
        // A long call timeout does not make the POST wait longer than five minutes.
        assert_eq!(post_wait(s(60), Some(s(3600)), false), Ok(s(300)));
        // A setting that does not fit is said at once, with what to change.
        let e = post_wait(s(600), Some(s(300)), false).unwrap_err();
        assert!(
            e.contains("ABX_OPENSANDBOX_READY_TIMEOUT") && e.contains("--call-timeout"),
            "{e}"
        );
        assert!(e.contains("600 s") && e.contains("300 s"), "{e}");
        assert!(post_wait(s(10), Some(s(40)), true).is_err());
    }

    #[test]
    fn states() {
        assert_eq!(server_state("running"), "Running");
        assert_eq!(server_state("PAUSED"), "Paused");
    }
}
