//! Reaching a sandbox's execd: its endpoint comes from the lifecycle API
//! (`GET …/endpoints/44772`), never from memory of `create`, and is memoised
//! host-wide for a while; the endpoint's headers go on every request.

use crate::bindings::abx::epp::memo;
use crate::config;
use crate::error::{self, Error, Result};
use crate::http::{Request, Response, Transport, Url};
use crate::lifecycle::{Lifecycle, check_id};
use crate::models::Endpoint;
use crate::retry::{self, Failure, Retry};
use opensandbox_settings::API_KEY_HEADER;

/// execd's port inside every sandbox.
pub const EXECD_PORT: u16 = 44772;
/// How long a resolved endpoint is reused (the Python SDK uses 600 s).
const ENDPOINT_TTL_MS: u32 = 600_000;

/// One sandbox's execd.
pub struct Execd {
    pub sandbox_id: String,
    base: String,
    headers: Vec<(String, String)>,
    target: String,
    /// The settings a refused endpoint's message names.
    origin: String,
    use_server_proxy: bool,
}

fn memo_key(sandbox_id: &str) -> Result<String> {
    let s = config::settings()?;
    Ok(format!(
        "endpoint:{}:{}:{}",
        s.origin, s.use_server_proxy, sandbox_id
    ))
}

/// A `scheme://endpoint` base URL for an endpoint the server returned.
pub fn endpoint_url(endpoint: &Endpoint) -> Result<String> {
    let s = config::settings()?;
    let e = endpoint.endpoint.trim_end_matches('/');
    if e.is_empty() || e.contains("://") && !e.starts_with("http") {
        return Err(error::upstream(format!(
            "the server returned an unusable endpoint `{e}`"
        )));
    }
    Ok(if e.starts_with("http://") || e.starts_with("https://") {
        e.to_string()
    } else {
        format!("{}://{e}", s.origin.scheme)
    })
}

impl Execd {
    /// Resolves the sandbox's execd, from the memo when possible.
    pub fn connect(sandbox_id: &str) -> Result<Execd> {
        check_id("sandbox", sandbox_id)?;
        let key = memo_key(sandbox_id)?;
        let endpoint = match memo::get(&key).and_then(|v| serde_json::from_str::<Endpoint>(&v).ok())
        {
            Some(endpoint) => endpoint,
            None => Self::resolve(sandbox_id, &key)?,
        };
        Execd::from_endpoint(sandbox_id, &endpoint)
    }

    fn resolve(sandbox_id: &str, key: &str) -> Result<Endpoint> {
        let settings = config::settings()?;
        let endpoint =
            Lifecycle::new()?.endpoint(sandbox_id, EXECD_PORT, settings.use_server_proxy)?;
        if let Ok(json) = serde_json::to_string(&endpoint) {
            memo::put(key, &json, ENDPOINT_TTL_MS);
        }
        Ok(endpoint)
    }

    fn from_endpoint(sandbox_id: &str, endpoint: &Endpoint) -> Result<Execd> {
        let settings = config::settings()?;
        let mut headers: Vec<(String, String)> = endpoint
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // The Python SDK sends the key to execd in proxy mode only (it then goes
        // to the server); under epp-host the host adds it for the server's origin.
        if settings.use_server_proxy {
            if let Some(key) = &settings.api_key {
                headers.push((API_KEY_HEADER.to_string(), key.clone()));
            }
        }
        Ok(Execd {
            sandbox_id: sandbox_id.to_string(),
            base: endpoint_url(endpoint)?,
            headers,
            target: format!("sandbox {sandbox_id}"),
            origin: settings.origin.to_string(),
            use_server_proxy: settings.use_server_proxy,
        })
    }

    /// The error for a request to this execd that never got an answer: a
    /// refusal by the host's policy names the endpoint's host and what allows it.
    pub fn transport(&self, t: Transport) -> Error {
        match t {
            Transport::Denied => error::endpoint_denied(
                &self.sandbox_id,
                &self.base,
                Some(&self.origin),
                self.use_server_proxy,
            ),
            t => error::transport(t, &self.target),
        }
    }

    /// Drops the memoised endpoint (after pause, resume, kill or a failure).
    pub fn forget(sandbox_id: &str) {
        if let Ok(key) = memo_key(sandbox_id) {
            memo::forget(&key);
        }
    }

    /// `ws://…` or `wss://…` for a path.
    pub fn ws_url(&self, path: &str) -> String {
        let base = self
            .base
            .replacen("https://", "wss://", 1)
            .replacen("http://", "ws://", 1);
        format!("{base}{path}")
    }

    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    pub fn target(&self) -> &str {
        &self.target
    }

    /// A request for `path_and_query` (starting with `/`).
    pub fn request(&self, method: &'static str, path_and_query: &str) -> Result<Request> {
        let url = Url::parse(&format!("{}{path_and_query}", self.base))
            .map_err(|t| error::transport(t, &self.target))?;
        Ok(Request::new(method, url).headers(&self.headers))
    }

    /// Sends a request with a small body. A refused or broken connection may
    /// mean the memoised endpoint is stale, so the first one re-resolves it;
    /// when it changed, the request goes again at once to the new one if
    /// `crate::retry` allows that (after a refused connection any request, after
    /// a broken one only reads: a `POST /command` may have run). Otherwise
    /// transient failures are retried as `crate::retry` allows.
    pub fn send(
        &mut self,
        build: impl Fn(&Execd) -> Result<Request>,
        body: &[u8],
    ) -> Result<Response> {
        let mut retry: Option<Retry> = None;
        let mut refreshed = false;
        loop {
            let req = build(self)?;
            let method = req.method;
            let retry = retry.get_or_insert_with(|| Retry::new(method));
            let outcome = req.send(body);
            if let Some(failure @ (Failure::Refused | Failure::Broken)) = Failure::of(&outcome)
                && !refreshed
            {
                refreshed = true;
                if self.refresh()? && retry::resend_to_fresh_endpoint(method, failure) {
                    continue;
                }
            }
            if !retry.again(&outcome) {
                return outcome.map_err(|t| self.transport(t));
            }
        }
    }

    /// Re-resolves the endpoint; true if it changed (worth a retry).
    fn refresh(&mut self) -> Result<bool> {
        let key = memo_key(&self.sandbox_id)?;
        memo::forget(&key);
        let endpoint = Self::resolve(&self.sandbox_id, &key)?;
        let fresh = Execd::from_endpoint(&self.sandbox_id, &endpoint)?;
        let changed = fresh.base != self.base || fresh.headers != self.headers;
        *self = fresh;
        Ok(changed)
    }

    /// Turns a non-2xx answer into an error about `subject`.
    pub fn check(&self, resp: Response, subject: &str) -> Result<Response> {
        if (200..300).contains(&resp.status) {
            return Ok(resp);
        }
        let status = resp.status;
        let body = resp.read_all(64 * 1024).unwrap_or_default();
        Err(error::status(status, &body, &self.target, subject))
    }

    /// Reads a JSON answer.
    pub fn json<T: serde::de::DeserializeOwned>(&self, resp: Response, subject: &str) -> Result<T> {
        let body = resp
            .read_all(64 << 20)
            .map_err(|t| error::broken_body(t, &self.target))?;
        serde_json::from_slice(&body).map_err(|e| {
            error::upstream(format!(
                "{} sent an unexpected answer about {subject} ({e})",
                self.target
            ))
        })
    }

    /// Whether execd answers `GET /ping` with 2xx right now. 401/403 are errors.
    pub fn ping(&self) -> Result<bool> {
        let req = self
            .request("GET", "/ping")?
            .timeouts(crate::http::Timeouts {
                connect: std::time::Duration::from_secs(2),
                first_byte: std::time::Duration::from_secs(3),
                between_bytes: std::time::Duration::from_secs(3),
            });
        match req.send(&[]) {
            Ok(resp) if (200..300).contains(&resp.status) => Ok(true),
            Ok(resp) if resp.status == 401 || resp.status == 403 => {
                let status = resp.status;
                let body = resp.read_all(4096).unwrap_or_default();
                Err(error::status(
                    status,
                    &body,
                    &self.target,
                    "the sandbox's execd",
                ))
            }
            Ok(_) => Ok(false),
            Err(Transport::Denied) => Err(self.transport(Transport::Denied)),
            Err(_) => Ok(false),
        }
    }
}
