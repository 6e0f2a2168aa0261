//! The Jupyter server's REST API as execd's `pkg/jupyter` client uses it: kernelspecs,
//! sessions (a session starts a kernel; deleting it shuts the kernel down), kernel list and
//! interrupt, with `Authorization: Token …`. Error texts are execd's.
//!
//! Configured like execd: `JUPYTER_HOST` (`http://host:port`) and `JUPYTER_TOKEN` from
//! the environment (the code-interpreter image sets both); without them `/code` answers
//! "language runtime server not configured".

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpStream;

pub struct Jupyter {
    /// `host:port` of `JUPYTER_HOST`.
    authority: String,
    token: String,
}

#[derive(Deserialize)]
pub struct Session {
    pub id: String,
    pub kernel: KernelRef,
}

#[derive(Deserialize)]
pub struct KernelRef {
    pub id: String,
}

#[derive(Deserialize)]
struct KernelSpecs {
    #[serde(default)]
    kernelspecs: std::collections::BTreeMap<String, KernelSpecEntry>,
}

#[derive(Deserialize)]
struct KernelSpecEntry {
    #[serde(default)]
    spec: KernelSpec,
}

#[derive(Deserialize, Default)]
struct KernelSpec {
    #[serde(default)]
    language: String,
}

impl Jupyter {
    /// execd's flags: both variables must be set (`baseURL == "" || token == ""` means
    /// not configured); only plain `http://` is supported here.
    pub fn from_env() -> Option<Jupyter> {
        let host = std::env::var("JUPYTER_HOST")
            .ok()
            .filter(|h| !h.is_empty())?;
        let token = std::env::var("JUPYTER_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())?;
        let authority = host
            .strip_prefix("http://")
            .map(|a| a.trim_end_matches('/').to_string())?;
        Some(Jupyter { authority, token })
    }

    /// `ws://…/api/kernels/{id}/channels?token=…`, as execd's `ConnectToKernel` builds it.
    pub fn channels_url(&self, kernel_id: &str) -> String {
        format!(
            "ws://{}/api/kernels/{kernel_id}/channels?token={}",
            self.authority, self.token
        )
    }

    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// One request on a fresh connection (these calls are rare: context create/delete,
    /// interrupt); returns the status and body.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<(StatusCode, Bytes), String> {
        let url = format!("http://{}{path}", self.authority);
        let send_err = |e: &dyn std::fmt::Display| {
            format!(
                "failed to send request: {} \"{url}\": {e}",
                go_method(&method)
            )
        };
        let stream = TcpStream::connect(&self.authority).await.map_err(|e| {
            send_err(&format!(
                "dial tcp {}: {}",
                self.authority,
                crate::sys::errno_text(&e)
            ))
        })?;
        let _ = stream.set_nodelay(true);
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream))
                .await
                .map_err(|e| send_err(&e))?;
        tokio::spawn(conn);
        let data = body.map(|b| b.to_string()).unwrap_or_default();
        let req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::HOST, &self.authority)
            .header(header::AUTHORIZATION, format!("Token {}", self.token))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(data)))
            .map_err(|e| send_err(&e))?;
        let resp = sender.send_request(req).await.map_err(|e| send_err(&e))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("failed to read response: {e}"))?
            .to_bytes();
        Ok((status, body))
    }

    async fn call_expect(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        ok: &[StatusCode],
    ) -> Result<Bytes, String> {
        let (status, data) = self.call(method, path, body).await?;
        if !ok.contains(&status) {
            return Err(format!(
                "server returned error status code: {}",
                status.as_u16()
            ));
        }
        Ok(data)
    }

    /// execd's `searchKernel`: a kernelspec of that language, never the one named
    /// `python3` (the image registers its Python kernel as `python`).
    pub async fn kernel_for(&self, language: &str) -> Result<String, String> {
        let data = self
            .call_expect(Method::GET, "/api/kernelspecs", None, &[StatusCode::OK])
            .await?;
        let specs: KernelSpecs =
            serde_json::from_slice(&data).map_err(|e| format!("failed to parse response: {e}"))?;
        if specs.kernelspecs.is_empty() {
            return Err("no kernel specs found".into());
        }
        specs
            .kernelspecs
            .iter()
            .filter(|(name, s)| *name != "python3" && s.spec.language == language)
            .map(|(name, _)| name.clone())
            .next_back()
            .ok_or_else(|| "no kernel specs found".into())
    }

    /// `POST /api/sessions` (type notebook): starts a kernel whose working directory
    /// Jupyter derives from `path`.
    pub async fn create_session(
        &self,
        name: &str,
        path: &str,
        kernel: &str,
    ) -> Result<Session, String> {
        let body =
            json!({"path": path, "name": name, "type": "notebook", "kernel": {"name": kernel}});
        let data = self
            .call_expect(
                Method::POST,
                "/api/sessions",
                Some(body),
                &[StatusCode::CREATED, StatusCode::OK],
            )
            .await?;
        serde_json::from_slice(&data).map_err(|e| format!("failed to parse response: {e}"))
    }

    pub async fn kernel_ids(&self) -> Result<Vec<String>, String> {
        let data = self
            .call_expect(Method::GET, "/api/kernels", None, &[StatusCode::OK])
            .await?;
        let kernels: Vec<KernelRef> =
            serde_json::from_slice(&data).map_err(|e| format!("failed to parse response: {e}"))?;
        Ok(kernels.into_iter().map(|k| k.id).collect())
    }

    pub async fn delete_session(&self, id: &str) -> Result<(), String> {
        self.call_expect(
            Method::DELETE,
            &format!("/api/sessions/{id}"),
            None,
            &[StatusCode::NO_CONTENT, StatusCode::OK],
        )
        .await
        .map(drop)
    }

    pub async fn interrupt_kernel(&self, kernel_id: &str) -> Result<(), String> {
        self.call_expect(
            Method::POST,
            &format!("/api/kernels/{kernel_id}/interrupt"),
            None,
            &[StatusCode::NO_CONTENT, StatusCode::OK],
        )
        .await
        .map(drop)
    }
}

/// Go's `*url.Error` names the method like this ("Get", "Post", "Delete").
fn go_method(m: &Method) -> String {
    let s = m.as_str();
    let mut out = s[..1].to_string();
    out.push_str(&s[1..].to_ascii_lowercase());
    out
}
