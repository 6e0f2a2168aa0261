//! Registry credentials: `EPP_REGISTRY_USERNAME` / `EPP_REGISTRY_PASSWORD`
//! (or `EPP_REGISTRY_TOKEN`, a bearer token), else the `auths` entry for the
//! registry in the docker config file (`$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`), else anonymous. They go to the registry only:
//! never into the log (no `Debug` of a secret), never into the component's
//! environment (`run` removes the variables from its own environment before
//! any component is loaded, so even `--pass-env` cannot hand them over).

use anyhow::{Context, Result};
use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The variables that carry registry credentials.
pub const USERNAME_VAR: &str = "EPP_REGISTRY_USERNAME";
pub const PASSWORD_VAR: &str = "EPP_REGISTRY_PASSWORD";
pub const TOKEN_VAR: &str = "EPP_REGISTRY_TOKEN";
/// Every credential variable, for scrubbing the environment.
pub const VARS: [&str; 3] = [USERNAME_VAR, PASSWORD_VAR, TOKEN_VAR];

/// Credentials for one registry, and where they came from (for the log).
pub struct Credentials {
    /// What oci-client sends (anonymous, basic or bearer).
    pub auth: RegistryAuth,
    /// `environment`, the docker config path, or `anonymous`: never a value.
    pub source: String,
}

/// The credentials for `registry`, read from `env` (a lookup, so tests and
/// `run` can pass a snapshot) and the docker config file.
pub fn for_registry(registry: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Credentials> {
    if let Some(token) = env(TOKEN_VAR) {
        return Ok(Credentials {
            auth: RegistryAuth::Bearer(token),
            source: TOKEN_VAR.to_string(),
        });
    }
    match (env(USERNAME_VAR), env(PASSWORD_VAR)) {
        (Some(user), Some(pass)) => {
            return Ok(Credentials {
                auth: RegistryAuth::Basic(user, pass),
                source: format!("{USERNAME_VAR}/{PASSWORD_VAR}"),
            });
        }
        (Some(_), None) | (None, Some(_)) => {
            anyhow::bail!("set both {USERNAME_VAR} and {PASSWORD_VAR}, or neither")
        }
        (None, None) => {}
    }
    if let Some(path) = docker_config_path(env)
        && path.is_file()
        && let Some(auth) = from_docker_config(&path, registry)?
    {
        return Ok(Credentials {
            auth,
            source: path.display().to_string(),
        });
    }
    Ok(Credentials {
        auth: RegistryAuth::Anonymous,
        source: "anonymous".to_string(),
    })
}

/// The credential variables (and where the docker config is), read once and
/// removed from this process's environment, so nothing started or loaded
/// later (the component's environment is built from this process's) can see
/// them.
pub struct EnvSnapshot(Vec<(String, String)>);

impl EnvSnapshot {
    /// Takes the variables. Call it before any other thread runs (before the
    /// async runtime starts): changing the environment is not thread-safe.
    pub fn take() -> EnvSnapshot {
        let snapshot = EnvSnapshot::from_process();
        for name in VARS {
            // SAFETY: called from main before any thread is started, as documented.
            unsafe { std::env::remove_var(name) };
        }
        snapshot
    }

    /// The variables, left in place (commands that load no component).
    pub fn from_process() -> EnvSnapshot {
        let names = VARS.iter().chain(&["DOCKER_CONFIG", "HOME"]);
        EnvSnapshot(
            names
                .filter_map(|name| std::env::var(name).ok().map(|v| (name.to_string(), v)))
                .collect(),
        )
    }

    /// The value of `name` as it was.
    pub fn get(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

/// `$DOCKER_CONFIG/config.json`, else `$HOME/.docker/config.json`.
fn docker_config_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    match env("DOCKER_CONFIG") {
        Some(dir) => Some(Path::new(&dir).join("config.json")),
        None => env("HOME").map(|home| Path::new(&home).join(".docker/config.json")),
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: HashMap<String, DockerAuth>,
}

#[derive(Deserialize)]
struct DockerAuth {
    /// base64 of `user:password`.
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
}

/// The `auths` entry for `registry` (keys may carry a scheme and a path, as
/// `docker login` writes them), decoded. Credential helpers are not run.
fn from_docker_config(path: &Path, registry: &str) -> Result<Option<RegistryAuth>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let config: DockerConfig = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a docker config file", path.display()))?;
    let Some((key, entry)) = config
        .auths
        .iter()
        .find(|(key, _)| auth_key_host(key) == registry)
    else {
        return Ok(None);
    };
    let context = || format!("{}: the auths entry for {key}", path.display());
    if let Some(encoded) = &entry.auth {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .with_context(|| format!("{}: `auth` is not base64 of user:password", context()))?;
        let (user, pass) = decoded
            .split_once(':')
            .with_context(|| format!("{}: `auth` is not base64 of user:password", context()))?;
        return Ok(Some(RegistryAuth::Basic(
            user.to_string(),
            pass.to_string(),
        )));
    }
    if let Some(token) = &entry.identitytoken {
        return Ok(Some(RegistryAuth::Bearer(token.clone())));
    }
    match (&entry.username, &entry.password) {
        (Some(user), Some(pass)) => Ok(Some(RegistryAuth::Basic(user.clone(), pass.clone()))),
        _ => Ok(None),
    }
}

/// `https://ghcr.io/v1/` → `ghcr.io`: how `docker login` keys may look.
fn auth_key_host(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    key.split('/').next().unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    fn basic(c: &Credentials) -> (String, String) {
        match &c.auth {
            RegistryAuth::Basic(u, p) => (u.clone(), p.clone()),
            _ => panic!("not basic auth: {}", c.source),
        }
    }

    #[test]
    fn docker_config_auths_by_registry() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"auths": {
                "https://registry.example:5000/v1/": {"auth": "YWxpY2U6czNjcjN0OndpdGgtY29sb24="},
                "other.example": {"username": "bob", "password": "pw"}
            }}"#,
        )
        .unwrap();
        let dir_str = dir.path().to_str().unwrap();
        let env = env_of(&[("DOCKER_CONFIG", dir_str)]);
        let c = for_registry("registry.example:5000", &env).unwrap();
        assert_eq!(basic(&c), ("alice".into(), "s3cr3t:with-colon".into()));
        assert!(c.source.ends_with("config.json"));
        assert_eq!(
            basic(&for_registry("other.example", &env).unwrap()).0,
            "bob"
        );
        let anon = for_registry("registry.example", &env).unwrap();
        assert!(
            matches!(anon.auth, RegistryAuth::Anonymous),
            "the port is part of the name"
        );
    }

    #[test]
    fn environment_comes_first_and_must_be_whole() {
        let env = env_of(&[
            (USERNAME_VAR, "u"),
            (PASSWORD_VAR, "p"),
            ("HOME", "/nonexistent"),
        ]);
        assert_eq!(
            basic(&for_registry("r.example", &env).unwrap()),
            ("u".into(), "p".into())
        );
        let half = env_of(&[(USERNAME_VAR, "u")]);
        assert!(for_registry("r.example", &half).is_err());
    }
}
