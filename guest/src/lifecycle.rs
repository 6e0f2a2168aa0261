//! Client of the OpenSandbox lifecycle API (`…/v1/sandboxes`).

use crate::config;
use crate::error::{self, Error, Result, invalid};
use crate::http::{Request, Response, Timeouts, Transport, Url, encode};
use crate::models::{
    CreateSandboxRequest, Endpoint, RenewRequest, RenewResponse, Sandbox, SandboxList,
};
use crate::retry::Retry;
use opensandbox_settings::API_KEY_HEADER;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;

/// Largest JSON answer accepted from the server.
const MAX_ANSWER: usize = 16 << 20;

/// Rejects ids that could change the meaning of a URL.
pub fn check_id(kind: &str, id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 256
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "`{id}` is not a valid {kind} id (letters, digits, `-`, `_` and `.` only)"
        )))
    }
}

/// A `POST /sandboxes` that failed, and whether the server may still have
/// made the sandbox (the request went out but no usable answer came back: a
/// broken connection, a timeout, 502/504, or a 2xx that could not be read).
#[derive(Debug)]
pub struct CreateFailed {
    pub error: Error,
    pub may_exist: bool,
}

pub struct Lifecycle {
    base: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Lifecycle {
    pub fn new() -> Result<Lifecycle> {
        let settings = config::settings()?;
        let mut headers = vec![(
            "user-agent".to_string(),
            concat!("abx-epp-opensandbox/", env!("CARGO_PKG_VERSION")).to_string(),
        )];
        // Under epp-host the key is withheld from us and the host adds it; other
        // hosts may hand it over, and then we send it ourselves.
        if let Some(key) = &settings.api_key {
            headers.push((API_KEY_HEADER.to_string(), key.clone()));
        }
        Ok(Lifecycle {
            base: settings.origin.api_base(),
            target: format!("the OpenSandbox server at {}", settings.origin),
            headers,
        })
    }

    fn request(&self, method: &'static str, path: &str) -> Result<Request> {
        let url = Url::parse(&format!("{}{path}", self.base))
            .map_err(|t| error::transport(t, &self.target))?;
        Ok(Request::new(method, url).headers(&self.headers))
    }

    /// Sends `method path` (with a JSON body when given) until an answer arrives
    /// or the retry rule (`crate::retry`) says stop; returns the last outcome.
    fn exchange(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&[u8]>,
        timeouts: Option<Timeouts>,
    ) -> Result<std::result::Result<Response, Transport>> {
        let mut retry = Retry::new(method);
        loop {
            let mut req = self.request(method, path)?;
            if let Some(t) = timeouts {
                req = req.timeouts(t);
            }
            if body.is_some() {
                req = req.header("content-type", "application/json");
            }
            let outcome = req.send(body.unwrap_or_default());
            if !retry.again(&outcome) {
                return Ok(outcome);
            }
        }
    }

    /// A 2xx answer, or the EPP error for what the server said about `subject`.
    fn answer(&self, resp: Response, subject: &str) -> Result<Response> {
        if (200..300).contains(&resp.status) {
            return Ok(resp);
        }
        let status = resp.status;
        let body = resp.read_all(64 * 1024).unwrap_or_default();
        Err(error::status(status, &body, &self.target, subject))
    }

    fn send(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Vec<u8>>,
        subject: &str,
    ) -> Result<Response> {
        let resp = self
            .exchange(method, path, body.as_deref(), None)?
            .map_err(|t| error::transport(t, &self.target))?;
        self.answer(resp, subject)
    }

    fn json<T: DeserializeOwned>(&self, resp: Response, subject: &str) -> Result<T> {
        let body = resp
            .read_all(MAX_ANSWER)
            .map_err(|t| error::broken_body(t, &self.target))?;
        serde_json::from_slice(&body).map_err(|e| {
            error::upstream(format!(
                "{} sent an answer about {subject} that is not what OpenSandbox sends ({e})",
                self.target
            ))
        })
    }

    fn body(value: &impl Serialize) -> Option<Vec<u8>> {
        Some(serde_json::to_vec(value).expect("request bodies serialise"))
    }

    /// `POST /sandboxes`. Creation is synchronous on the server (it pulls the
    /// image first), so the answer may take minutes. Never retried: when the
    /// answer is lost after the request went out, the sandbox may exist, which
    /// the failure says (`may_exist`), so that the caller can say how to find it.
    pub fn create(
        &self,
        req: &CreateSandboxRequest,
        wait: Duration,
    ) -> std::result::Result<Sandbox, CreateFailed> {
        let subject = "the new sandbox";
        let body = Self::body(req);
        let outcome = self
            .exchange(
                "POST",
                "/sandboxes",
                body.as_deref(),
                Some(Timeouts::API.first_byte(wait)),
            )
            .map_err(|error| CreateFailed {
                error,
                may_exist: false,
            })?;
        let may_exist = match &outcome {
            Err(Transport::Broken(_) | Transport::Timeout(_)) => true,
            Ok(resp) => matches!(resp.status, 200..=299 | 502 | 504),
            Err(_) => false,
        };
        outcome
            .map_err(|t| error::transport(t, &self.target))
            .and_then(|resp| self.answer(resp, subject))
            .and_then(|resp| self.json(resp, subject))
            .map_err(|error| CreateFailed { error, may_exist })
    }

    pub fn get(&self, id: &str) -> Result<Sandbox> {
        check_id("sandbox", id)?;
        let subject = format!("sandbox {id}");
        let resp = self.send("GET", &format!("/sandboxes/{id}"), None, &subject)?;
        self.json(resp, &subject)
    }

    /// One page of `GET /sandboxes`.
    pub fn list(
        &self,
        states: &[String],
        metadata: &[(String, String)],
        page: u32,
    ) -> Result<SandboxList> {
        let mut query = format!("page={page}&pageSize=200");
        for s in states {
            query.push_str(&format!("&state={}", encode(s)));
        }
        if !metadata.is_empty() {
            let pairs: Vec<String> = metadata
                .iter()
                .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
                .collect();
            query.push_str(&format!("&metadata={}", encode(&pairs.join("&"))));
        }
        let resp = self.send(
            "GET",
            &format!("/sandboxes?{query}"),
            None,
            "the sandbox list",
        )?;
        self.json(resp, "the sandbox list")
    }

    pub fn delete(&self, id: &str) -> Result<()> {
        check_id("sandbox", id)?;
        self.send(
            "DELETE",
            &format!("/sandboxes/{id}"),
            None,
            &format!("sandbox {id}"),
        )
        .map(drop)
    }

    pub fn pause(&self, id: &str) -> Result<()> {
        check_id("sandbox", id)?;
        self.send(
            "POST",
            &format!("/sandboxes/{id}/pause"),
            None,
            &format!("sandbox {id}"),
        )
        .map(drop)
    }

    pub fn resume(&self, id: &str) -> Result<()> {
        check_id("sandbox", id)?;
        self.send(
            "POST",
            &format!("/sandboxes/{id}/resume"),
            None,
            &format!("sandbox {id}"),
        )
        .map(drop)
    }

    pub fn renew(&self, id: &str, expires_at: String) -> Result<String> {
        check_id("sandbox", id)?;
        let subject = format!("sandbox {id}");
        let resp = self.send(
            "POST",
            &format!("/sandboxes/{id}/renew-expiration"),
            Self::body(&RenewRequest { expires_at }),
            &subject,
        )?;
        self.json::<RenewResponse>(resp, &subject)
            .map(|r| r.expires_at)
    }

    pub fn endpoint(&self, id: &str, port: u16, use_server_proxy: bool) -> Result<Endpoint> {
        check_id("sandbox", id)?;
        let subject = format!("sandbox {id}");
        let path = format!("/sandboxes/{id}/endpoints/{port}?use_server_proxy={use_server_proxy}");
        let resp = self.send("GET", &path, None, &subject)?;
        self.json(resp, &subject)
    }
}
