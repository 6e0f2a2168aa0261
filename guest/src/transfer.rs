//! files.upload_url / files.download_url: a URL on the sandbox's own execd that
//! a plain HTTP client (curl) uses to move a file of any size without the
//! provider in the way. In server-proxy mode the URL is the server's proxy
//! path, answered only after an anonymous request showed that the server
//! serves it without the API key, which is never handed out (docs/epp-1.md,
//! files.transfer).

use crate::bindings::exports::abx::epp::infra::TransferUrl;
use crate::config;
use crate::error;
use crate::error::{Result, conflict, invalid, not_found};
use crate::execd::{EXECD_PORT, endpoint_url};
use crate::http::{ANONYMOUS_HEADER, Request, Url, encode};
use crate::lifecycle::Lifecycle;
use opensandbox_settings::API_KEY_HEADER;

#[derive(Clone, Copy)]
enum Direction {
    Upload,
    Download,
}

pub fn upload_url(sandbox_id: &str, path: &str) -> Result<TransferUrl> {
    url(sandbox_id, path, Direction::Upload)
}

pub fn download_url(sandbox_id: &str, path: &str) -> Result<TransferUrl> {
    url(sandbox_id, path, Direction::Download)
}

fn url(sandbox_id: &str, path: &str, direction: Direction) -> Result<TransferUrl> {
    let method = match direction {
        Direction::Upload => "files.upload_url",
        Direction::Download => "files.download_url",
    };
    if path.is_empty() {
        return Err(invalid("`path` is empty"));
    }
    if path.contains('\0') {
        return Err(invalid("`path` contains a NUL byte"));
    }
    let proxied = config::settings()?.use_server_proxy;
    // The sandbox must exist now (a URL for a killed sandbox is E4004, not a
    // URL that fails later); it lives as long as the sandbox does.
    let lifecycle = Lifecycle::new()?;
    let sandbox = lifecycle.get(sandbox_id)?;
    if matches!(sandbox.status.state.as_str(), "Failed" | "Terminated") {
        return Err(not_found(format!(
            "sandbox {sandbox_id} is {}; its files are gone",
            sandbox.status.state.to_ascii_lowercase()
        )));
    }
    let endpoint = lifecycle.endpoint(sandbox_id, EXECD_PORT, proxied)?;
    let base = endpoint_url(&endpoint)?;
    let headers: Vec<(String, String)> = endpoint
        .headers
        .into_iter()
        // Never the server's key, whatever an endpoint carries.
        .filter(|(k, _)| !k.eq_ignore_ascii_case(API_KEY_HEADER))
        .collect();
    if proxied {
        check_anonymous(method, sandbox_id, &base, &headers)?;
    }
    let (url, http_method) = match direction {
        // The target path travels in the multipart `metadata` part, not the URL.
        Direction::Upload => (format!("{base}/files/upload"), "POST"),
        Direction::Download => (
            format!("{base}/files/download?path={}", encode(path)),
            "GET",
        ),
    };
    Ok(TransferUrl {
        url,
        method: http_method.into(),
        headers,
        expires_at: sandbox.expires_at,
    })
}

/// In server-proxy mode the URL goes through the server, which may want its
/// API key there (a multi-tenant server does; a single-tenant one exempts the
/// proxy path). Asks execd's `/ping` through the proxy as the URL's user
/// would, without the key (the host leaves its secret headers off a request
/// marked anonymous), and refuses the URL when the server wants it.
fn check_anonymous(
    method: &str,
    sandbox_id: &str,
    base: &str,
    headers: &[(String, String)],
) -> Result<()> {
    let ping = format!("{base}/ping");
    let url = Url::parse(&ping).map_err(|t| error::transport(t, &ping))?;
    let resp = Request::new("GET", url)
        .headers(headers)
        .header(ANONYMOUS_HEADER, "1")
        .send(&[])
        .map_err(|t| error::transport(t, &ping))?;
    match resp.status {
        200..=299 => Ok(()),
        401 | 403 => Err(conflict(format!(
            "{method} is refused for sandbox {sandbox_id}: in server-proxy mode \
             (ABX_OPENSANDBOX_USE_SERVER_PROXY) the URL is the server's proxy path, and this \
             server answers HTTP {} there without its API key (a multi-tenant server), which \
             this provider never hands out; use direct mode (unset \
             ABX_OPENSANDBOX_USE_SERVER_PROXY, the sandbox endpoints must then be reachable from \
             where the URL is used), or move the file with files.write / files.read",
            resp.status
        ))),
        status => Err(error::upstream(format!(
            "{method}: the server's proxy path for sandbox {sandbox_id} answered HTTP {status} \
             to execd's /ping; the URL would not work"
        ))),
    }
}
