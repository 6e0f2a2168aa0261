//! `volumes` of `sandbox.create` in the server's shape: an absolute host path
//! is a bind mount (`host: {path}`), a plain name a volume the platform keeps
//! (`pvc: {claimName}`: a Docker named volume, a Kubernetes PVC), which must
//! exist already (`createIfNotExists: false`: a mistyped name would otherwise
//! mount a new, empty volume). Each gets the server's `name` `vol-N` (a DNS
//! label, unique in the request), N being its index, so that the server's
//! refusals, which name it, can be told back in the caller's terms.
//!
//! Everything that can be checked without the server is checked before
//! anything is sent; what only the server knows (its `[storage]
//! allowed_host_paths`, which named volumes exist) comes back as E1001 naming
//! the volume by its index and source, and the setting to change.

use crate::bindings::exports::abx::epp::infra::Volume;
use crate::error::{Error, Kind, Result, invalid};
use crate::models::{HostPath, NamedVolume, VolumeSpec};

/// The server's volumes for the request's, or E1001 naming the first bad one.
pub fn specs(volumes: &[Volume]) -> Result<Vec<VolumeSpec>> {
    let mut specs: Vec<VolumeSpec> = Vec::with_capacity(volumes.len());
    for (i, v) in volumes.iter().enumerate() {
        let bad = |why: String| invalid(format!("{}: {why}", which(i, v)));
        let (host, pvc) = source(&v.source).map_err(bad)?;
        let mount_path = mount_path(&v.mount_path).map_err(bad)?;
        if let Some(j) = specs.iter().position(|s| s.mount_path == mount_path) {
            return Err(bad(format!(
                "its mount_path `{mount_path}` is that of {} too; give each volume a path of its own",
                which(j, &volumes[j])
            )));
        }
        let sub_path = sub_path(v.sub_path.as_deref()).map_err(bad)?;
        specs.push(VolumeSpec {
            name: format!("vol-{i}"),
            host,
            pvc,
            mount_path,
            read_only: v.read_only,
            sub_path,
        });
    }
    Ok(specs)
}

/// How a message names volume `i`.
fn which(i: usize, v: &Volume) -> String {
    format!("volumes[{i}] (source `{}`)", v.source)
}

type Backend = (Option<HostPath>, Option<NamedVolume>);

fn source(source: &str) -> std::result::Result<Backend, String> {
    if source.is_empty() {
        return Err(
            "`source` is empty; give an absolute host path (/srv/data) or the name \
                    of a volume (a Docker named volume, a Kubernetes PVC)"
                .into(),
        );
    }
    if source.starts_with('/') {
        let path = absolute(source, "source")?;
        return Ok((Some(HostPath { path }), None));
    }
    if source.contains('/') || source.starts_with('.') {
        return Err(
            "a relative path; a host path must be absolute (/srv/data), anything else is the \
             name of a volume the server keeps"
                .into(),
        );
    }
    if !is_volume_name(source) {
        return Err(
            "not a volume name: the server takes names of lower-case letters, digits and `-`, \
             starting and ending with a letter or digit, at most 253 characters (or give an \
             absolute host path)"
                .into(),
        );
    }
    let pvc = NamedVolume {
        claim_name: source.to_string(),
        create_if_not_exists: false,
    };
    Ok((None, Some(pvc)))
}

fn mount_path(path: &str) -> std::result::Result<String, String> {
    if path.is_empty() || !path.starts_with('/') {
        return Err(format!(
            "mount_path `{path}` is not absolute; give where it appears in the sandbox, e.g. /data"
        ));
    }
    let path = absolute(path, "mount_path")?;
    if path == "/" {
        return Err("mount_path `/` would hide the sandbox's whole filesystem".into());
    }
    Ok(path)
}

/// An absolute path without `.` or `..`, written the one way the server
/// accepts it (no `//`, no trailing `/`).
fn absolute(path: &str, field: &str) -> std::result::Result<String, String> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == ".." || *p == ".") {
        return Err(format!(
            "{field} `{path}` has a `.` or `..` part; give the path itself"
        ));
    }
    Ok(format!("/{}", parts.join("/")))
}

fn sub_path(sub: Option<&str>) -> std::result::Result<Option<String>, String> {
    let Some(sub) = sub.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if sub.starts_with('/') {
        return Err(format!(
            "sub_path `{sub}` must be relative: a directory inside the source"
        ));
    }
    if sub.split('/').any(|p| p == "..") {
        return Err(format!(
            "sub_path `{sub}` leaves the source (`..`); give a directory inside it"
        ));
    }
    Ok(Some(sub.to_string()))
}

/// A DNS label-like name, as the server's `pvc.claimName` takes it.
fn is_volume_name(name: &str) -> bool {
    let b = name.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    b.len() <= 253
        && b.first().is_some_and(inner)
        && b.last().is_some_and(inner)
        && b.iter().all(|c| inner(c) || *c == b'-')
}

/// The server's refusal of a create's volumes, told in the request's terms:
/// which volume (its index and source), and for a host path, the server
/// setting that decides which are allowed. Other errors pass unchanged.
pub fn explain(e: Error, volumes: &[Volume]) -> Error {
    if volumes.is_empty() || !e.is(Kind::Invalid) || e.http.is_none() {
        return e;
    }
    let text = e.message.clone();
    if let Some(path) = between(&text, "Host path '", "' is not under any allowed prefix") {
        let prefixes = text
            .split_once("Allowed prefixes: ")
            .map(|(_, p)| format!(" (it allows {})", p.trim_end_matches('.')))
            .unwrap_or_default();
        let message = format!(
            "{}: the server does not mount the host path `{path}`: it is under none of the \
             folders its `[storage] allowed_host_paths` setting allows{prefixes}; use a path \
             under one of them, or add the folder to `allowed_host_paths` in the server's \
             config file and restart it ({text})",
            host_volume(volumes, path)
        );
        return e.reworded(Kind::Invalid, message);
    }
    let Some(i) = between(&text, "Volume 'vol-", "'").and_then(|n| n.parse::<usize>().ok()) else {
        return e;
    };
    let Some(v) = volumes.get(i) else {
        return e;
    };
    let hint = match e.upstream_code() {
        // 1.1.1 says `VOLUME::PVC_NOT_FOUND`; its constant is PVC_VOLUME_NOT_FOUND.
        Some(code) if code.contains("PVC") && code.contains("NOT_FOUND") => format!(
            "; create it first (`docker volume create {}` on Docker, a PersistentVolumeClaim \
             on Kubernetes)",
            v.source
        ),
        _ => String::new(),
    };
    e.reworded(Kind::Invalid, format!("{}: {text}{hint}", which(i, v)))
}

/// The volume a refused host path belongs to (its source, or the source
/// joined with its sub_path), or the path itself when none matches (the
/// server resolved a symbolic link).
fn host_volume(volumes: &[Volume], path: &str) -> String {
    let matches = |v: &Volume| {
        let Ok(source) = absolute(&v.source, "source") else {
            return false;
        };
        let joined = match v.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => format!("{source}/{}", sub.trim_matches('/')),
            None => source.clone(),
        };
        source == path || joined == path
    };
    match volumes
        .iter()
        .position(|v| v.source.starts_with('/') && matches(v))
    {
        Some(i) => which(i, &volumes[i]),
        None => format!("a volume's host path (resolved to `{path}`)"),
    }
}

/// The text between `start` and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(&text[from..from + len])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::status;

    fn vol(source: &str, mount: &str) -> Volume {
        Volume {
            source: source.into(),
            mount_path: mount.into(),
            read_only: false,
            sub_path: None,
        }
    }

    #[test]
    fn host_paths_and_names_in_the_servers_shape() {
        let mut ro = vol("/srv//data/", "/data/");
        ro.read_only = true;
        ro.sub_path = Some("sets/a".into());
        let specs = specs(&[ro, vol("cache-1", "/cache")]).unwrap();
        assert_eq!(
            serde_json::to_value(&specs).unwrap(),
            serde_json::json!([
                {"name": "vol-0", "host": {"path": "/srv/data"}, "mountPath": "/data",
                 "readOnly": true, "subPath": "sets/a"},
                {"name": "vol-1", "pvc": {"claimName": "cache-1", "createIfNotExists": false},
                 "mountPath": "/cache", "readOnly": false},
            ])
        );
    }

    #[test]
    fn bad_volumes_are_named_before_anything_is_sent() {
        let ok = vol("/srv/a", "/a");
        for (bad, words) in [
            (vol("", "/x"), "`source` is empty"),
            (vol("data/x", "/x"), "a relative path"),
            (vol("./x", "/x"), "a relative path"),
            (vol("..", "/x"), "a relative path"),
            (vol("/srv/../etc", "/x"), "`..` part"),
            (vol("Data_1", "/x"), "not a volume name"),
            (vol("/srv/b", ""), "is not absolute"),
            (vol("/srv/b", "data"), "is not absolute"),
            (vol("/srv/b", "/x/../y"), "`..` part"),
            (vol("/srv/b", "/"), "whole filesystem"),
            (
                vol("/srv/b", "/a/"),
                "that of volumes[0] (source `/srv/a`) too",
            ),
        ] {
            let source = bad.source.clone();
            let e = specs(&[ok.clone(), bad]).unwrap_err();
            assert_eq!(e.kind, Kind::Invalid);
            let name = format!("volumes[1] (source `{source}`): ");
            assert!(e.message.starts_with(&name), "{e:?}");
            assert!(e.message.contains(words), "{words}: {e:?}");
        }
        for bad_sub in ["/abs", "a/../../b"] {
            let mut v = vol("/srv/b", "/b");
            v.sub_path = Some(bad_sub.into());
            let e = specs(&[v]).unwrap_err();
            assert!(e.message.contains("sub_path"), "{e:?}");
        }
    }

    #[test]
    fn the_servers_refusals_name_the_volume_and_the_setting() {
        let volumes = [vol("cache", "/c"), vol("/home/me", "/h")];
        let refused = status(
            400,
            br#"{"code":"VOLUME::HOST_PATH_NOT_ALLOWED","message":"Host path '/home/me' is not under any allowed prefix. Allowed prefixes: ['/srv/boxes']"}"#,
            "the server",
            "the new sandbox",
        );
        let e = explain(refused, &volumes);
        assert_eq!(e.kind, Kind::Invalid);
        for words in [
            "volumes[1] (source `/home/me`)",
            "`[storage] allowed_host_paths`",
            "it allows ['/srv/boxes']",
            "server's config file",
        ] {
            assert!(e.message.contains(words), "{words}: {e:?}");
        }
        let missing = status(
            400,
            br#"{"code":"VOLUME::PVC_NOT_FOUND","message":"Volume 'vol-0': Docker named volume 'cache' does not exist."}"#,
            "the server",
            "the new sandbox",
        );
        let e = explain(missing, &volumes);
        assert!(
            e.message.starts_with("volumes[0] (source `cache`): "),
            "{e:?}"
        );
        assert!(e.message.contains("docker volume create cache"), "{e:?}");
        // Anything else passes unchanged.
        let other = status(400, br#"{"message":"bad timeout"}"#, "s", "x");
        assert_eq!(explain(other.clone(), &volumes), other);
    }
}
