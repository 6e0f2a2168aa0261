//! files.upload_url / files.download_url: a URL on the sandbox's own execd that
//! a plain HTTP client (curl) uses to move a file of any size without the
//! provider in the way. Direct mode only: the server-proxy path may need the
//! server API key, which is never handed out (docs/epp-1.md, files.transfer).

use crate::bindings::exports::abx::epp::infra::TransferUrl;
use crate::config;
use crate::error::{Result, conflict, invalid, not_found};
use crate::execd::{EXECD_PORT, endpoint_url};
use crate::http::encode;
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
    let settings = config::settings()?;
    if settings.use_server_proxy {
        return Err(conflict(format!(
            "{method} is refused in server-proxy mode (ABX_OPENSANDBOX_USE_SERVER_PROXY): the URL \
             would be the server's proxy path, which a multi-tenant OpenSandbox server only serves \
             with the server API key, and this provider never hands out the API key; use direct \
             mode (unset ABX_OPENSANDBOX_USE_SERVER_PROXY, the sandbox endpoints must then be \
             reachable from where the URL is used), or move the file with files.write / files.read"
        )));
    }
    // The sandbox must exist now (a URL for a killed sandbox is E4004, not a
    // URL that fails later); it lives as long as the sandbox does.
    let lifecycle = Lifecycle::new()?;
    let sandbox = lifecycle.get(sandbox_id)?;
    if matches!(sandbox.status.state.as_str(), "Failed" | "Terminated") {
        return Err(not_found(format!(
            "sandbox {sandbox_id} is {}; its files are gone",
            sandbox.status.state.to_lowercase()
        )));
    }
    let endpoint = lifecycle.endpoint(sandbox_id, EXECD_PORT, false)?;
    let base = endpoint_url(&endpoint)?;
    let headers: Vec<(String, String)> = endpoint
        .headers
        .into_iter()
        // Never the server's key, whatever an endpoint carries.
        .filter(|(k, _)| !k.eq_ignore_ascii_case(API_KEY_HEADER))
        .collect();
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
