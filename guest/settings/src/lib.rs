//! The OpenSandbox provider's settings: which environment variables it reads,
//! their defaults, and how their values are checked.
//!
//! Shared by the guest (which reads its own environment) and by `epp-host`
//! (which derives its network policy from the same variables and passes the
//! guest nothing else), so both sides always agree on what a variable means.

mod parse;
pub mod policy;

pub use parse::{Origin, Platform, split_host_port};

use std::collections::BTreeMap;
use std::fmt;

/// Static description of one setting.
#[derive(Debug, Clone, Copy)]
pub struct SettingSpec {
    /// Short name used in docs and the manifest.
    pub name: &'static str,
    /// Environment variables, first one set wins.
    pub env: &'static [&'static str],
    /// Default in words.
    pub default: Option<&'static str>,
    /// Never printed, logged or put in an error.
    pub secret: bool,
    /// One line of help.
    pub description: &'static str,
}

/// Environment variables that carry the API key. `epp-host` withholds them from
/// the guest and adds the header itself.
pub const API_KEY_ENV: &[&str] = &[
    "ABX_OPENSANDBOX_API_KEY",
    "OPEN_SANDBOX_API_KEY",
    "OPENSANDBOX_API_KEY",
];

/// Extra hosts the sandbox endpoints may live on (read by `epp-host` only).
pub const ALLOW_HOSTS_ENV: &str = "ABX_OPENSANDBOX_ALLOW_HOSTS";

/// The agent framework's own key: never forwarded to the guest or to any server.
pub const EXPRESS_KEY_ENV: &str = "ABX_SANDBOX_API_KEY";

/// The header that carries the API key to the lifecycle server.
pub const API_KEY_HEADER: &str = "OPEN-SANDBOX-API-KEY";

/// Default lifecycle server.
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:8080";
/// Image used for the template `base`.
pub const DEFAULT_IMAGE: &str = "python:3.12-slim";
/// Built-in template aliases (`name=image`).
pub const DEFAULT_ALIASES: &str = "code=opensandbox/code-interpreter:v1.1.0";
/// Entrypoint for images that do not bring their own.
pub const DEFAULT_ENTRYPOINT: &[&str] = &["tail", "-f", "/dev/null"];
/// Entrypoint of OpenSandbox's code-interpreter images (the image's own
/// ENTRYPOINT since v1.0.2; the old `/opt/opensandbox/…` path is shadowed by the
/// execd volume there, see upstream docs/execd-path-migration.md).
pub const CODE_INTERPRETER_ENTRYPOINT: &[&str] = &["/opt/code-interpreter/code-interpreter.sh"];
/// Milliseconds between two listings of a `files.watch`.
pub const DEFAULT_WATCH_INTERVAL_MS: u32 = 500;
/// Seconds `sandbox.create` waits for a usable sandbox.
pub const DEFAULT_READY_TIMEOUT: u32 = 60;

/// Every setting, in documentation order.
pub const SETTINGS: &[SettingSpec] = &[
    SettingSpec {
        name: "base_url",
        env: &["ABX_OPENSANDBOX_BASE_URL", "OPENSANDBOX_BASE_URL"],
        default: Some(DEFAULT_BASE_URL),
        secret: false,
        description: "Lifecycle server URL; a trailing /v1 is accepted.",
    },
    SettingSpec {
        name: "api_key",
        env: API_KEY_ENV,
        default: None,
        secret: true,
        description: "Sent as OPEN-SANDBOX-API-KEY to the lifecycle server.",
    },
    SettingSpec {
        name: "domain",
        env: &["ABX_OPENSANDBOX_DOMAIN", "OPEN_SANDBOX_DOMAIN"],
        default: None,
        secret: false,
        description: "host[:port] of the server, used when base_url is not set.",
    },
    SettingSpec {
        name: "protocol",
        env: &["ABX_OPENSANDBOX_PROTOCOL", "OPEN_SANDBOX_PROTOCOL"],
        default: Some("http"),
        secret: false,
        description: "http or https, used with domain.",
    },
    SettingSpec {
        name: "use_server_proxy",
        env: &[
            "ABX_OPENSANDBOX_USE_SERVER_PROXY",
            "OPEN_SANDBOX_USE_SERVER_PROXY",
        ],
        default: Some("false"),
        secret: false,
        description: "Reach each sandbox through the server's proxy instead of directly.",
    },
    SettingSpec {
        name: "default_image",
        env: &["ABX_OPENSANDBOX_DEFAULT_IMAGE"],
        default: Some(DEFAULT_IMAGE),
        secret: false,
        description: "Image of the template `base`.",
    },
    SettingSpec {
        name: "image_aliases",
        env: &["ABX_OPENSANDBOX_IMAGE_ALIASES"],
        default: Some(DEFAULT_ALIASES),
        secret: false,
        description: "More template names, as name=image,...; they add to and override the defaults.",
    },
    SettingSpec {
        name: "entrypoint",
        env: &["ABX_OPENSANDBOX_ENTRYPOINT"],
        default: Some("tail -f /dev/null"),
        secret: false,
        description: "Main process of new sandboxes: a JSON array or space-separated words. \
                      Code-interpreter images keep their own unless this is set.",
    },
    SettingSpec {
        name: "ready_timeout",
        env: &["ABX_OPENSANDBOX_READY_TIMEOUT"],
        default: Some("60"),
        secret: false,
        description: "Seconds sandbox.create waits for the sandbox to answer.",
    },
    SettingSpec {
        name: "registry_username",
        env: &["ABX_OPENSANDBOX_REGISTRY_USERNAME"],
        default: None,
        secret: false,
        description: "User name for a private image registry (image.auth).",
    },
    SettingSpec {
        name: "registry_password",
        env: &["ABX_OPENSANDBOX_REGISTRY_PASSWORD"],
        default: None,
        secret: true,
        description: "Password for a private image registry (image.auth).",
    },
    SettingSpec {
        name: "network_policy",
        env: &["ABX_OPENSANDBOX_NETWORK_POLICY"],
        default: None,
        secret: false,
        description: "JSON network policy applied to every new sandbox.",
    },
    SettingSpec {
        name: "platform",
        env: &["ABX_OPENSANDBOX_PLATFORM"],
        default: None,
        secret: false,
        description: "linux/amd64, linux/arm64, windows/amd64 or windows/arm64.",
    },
    SettingSpec {
        name: "secure_access",
        env: &["ABX_OPENSANDBOX_SECURE_ACCESS"],
        default: Some("false"),
        secret: false,
        description: "Ask the server to protect sandbox endpoints with an access token.",
    },
    SettingSpec {
        name: "watch_interval_ms",
        env: &["ABX_OPENSANDBOX_WATCH_INTERVAL_MS"],
        default: Some("500"),
        secret: false,
        description: "Milliseconds between two looks of files.watch at the watched path \
                      (100 to 60000); a watch costs one listing per interval.",
    },
];

/// A setting whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError {
    /// The environment variable that holds the bad value.
    pub var: String,
    /// What is wrong and what is expected; never contains a secret value.
    pub message: String,
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "setting {}: {}", self.var, self.message)
    }
}

impl std::error::Error for SettingError {}

/// Registry credentials for `image.auth`.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryAuth {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// All settings, checked.
#[derive(Clone)]
pub struct Settings {
    /// The lifecycle server, without `/v1`.
    pub origin: Origin,
    pub api_key: Option<String>,
    pub use_server_proxy: bool,
    pub default_image: String,
    /// Template name to image, including the built-in `code`.
    pub image_aliases: BTreeMap<String, String>,
    /// Set only when ABX_OPENSANDBOX_ENTRYPOINT is, to something else than the default.
    pub entrypoint: Option<Vec<String>>,
    pub ready_timeout: u32,
    pub registry_auth: Option<RegistryAuth>,
    /// Already validated as a JSON object.
    pub network_policy: Option<String>,
    pub platform: Option<Platform>,
    pub secure_access: bool,
    /// How often `files.watch` lists the watched path.
    pub watch_interval_ms: u32,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("origin", &self.origin)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("use_server_proxy", &self.use_server_proxy)
            .field("default_image", &self.default_image)
            .field("image_aliases", &self.image_aliases)
            .field("entrypoint", &self.entrypoint)
            .field("ready_timeout", &self.ready_timeout)
            .field("registry_auth", &self.registry_auth)
            .field("network_policy", &self.network_policy)
            .field("platform", &self.platform)
            .field("secure_access", &self.secure_access)
            .field("watch_interval_ms", &self.watch_interval_ms)
            .finish()
    }
}

/// Looks an environment variable up; empty values count as unset.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

impl<F: Fn(&str) -> Option<String>> Env for F {
    fn var(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// The first of `names` that is set (non-empty), with its name.
pub fn first_set(env: &dyn Env, names: &[&str]) -> Option<(String, String)> {
    names.iter().find_map(|name| {
        env.var(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .map(|v| (name.to_string(), v))
    })
}

fn spec(name: &str) -> &'static SettingSpec {
    SETTINGS
        .iter()
        .find(|s| s.name == name)
        .expect("setting names are fixed")
}

fn lookup(env: &dyn Env, name: &str) -> Option<(String, String)> {
    first_set(env, spec(name).env)
}

impl Settings {
    /// Reads and checks every setting from (variable, value) pairs, as
    /// [`Settings::from_env`] does from an environment (tests, tools).
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Result<Settings, SettingError> {
        Settings::from_env(&|name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    /// Reads and checks every setting.
    pub fn from_env(env: &dyn Env) -> Result<Settings, SettingError> {
        let origin = Origin::from_env(env)?;
        let api_key = first_set(env, API_KEY_ENV).map(|(_, v)| v);
        let use_server_proxy = parse_flag(env, "use_server_proxy")?;
        let secure_access = parse_flag(env, "secure_access")?;
        let watch_interval_ms = match lookup(env, "watch_interval_ms") {
            Some((var, value)) => parse::millis(&var, &value, 100, 60_000)?,
            None => DEFAULT_WATCH_INTERVAL_MS,
        };
        let default_image = lookup(env, "default_image")
            .map(|(_, v)| v)
            .unwrap_or_else(|| DEFAULT_IMAGE.to_string());
        let mut image_aliases = parse::aliases("built-in default", DEFAULT_ALIASES)?;
        if let Some((var, value)) = lookup(env, "image_aliases") {
            image_aliases.extend(parse::aliases(&var, &value)?);
        }
        // Set to the default itself, it is as if unset: code-interpreter images
        // keep their own entrypoint.
        let entrypoint = match lookup(env, "entrypoint") {
            Some((var, value)) => Some(parse::words(&var, &value)?).filter(|words| {
                words
                    .iter()
                    .map(String::as_str)
                    .ne(DEFAULT_ENTRYPOINT.iter().copied())
            }),
            None => None,
        };
        let ready_timeout = match lookup(env, "ready_timeout") {
            Some((var, value)) => parse::seconds(&var, &value)?,
            None => DEFAULT_READY_TIMEOUT,
        };
        let username = lookup(env, "registry_username");
        let password = lookup(env, "registry_password");
        let registry_auth = match (username, password) {
            (Some((_, username)), Some((_, password))) => Some(RegistryAuth { username, password }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(SettingError {
                    var: spec("registry_password").env[0].to_string(),
                    message: "is required when ABX_OPENSANDBOX_REGISTRY_USERNAME is set".into(),
                });
            }
            (None, Some(_)) => {
                return Err(SettingError {
                    var: spec("registry_username").env[0].to_string(),
                    message: "is required when ABX_OPENSANDBOX_REGISTRY_PASSWORD is set".into(),
                });
            }
        };
        let network_policy = match lookup(env, "network_policy") {
            Some((var, value)) => Some(parse::network_policy(&var, &value)?),
            None => None,
        };
        let platform = match lookup(env, "platform") {
            Some((var, value)) => Some(Platform::parse(&var, &value)?),
            None => None,
        };
        Ok(Settings {
            origin,
            api_key,
            use_server_proxy,
            default_image,
            image_aliases,
            entrypoint,
            ready_timeout,
            registry_auth,
            network_policy,
            platform,
            secure_access,
            watch_interval_ms,
        })
    }

    /// The image for a template name: itself for an image URI, the image of
    /// one of the provider's own names, else none (a snapshot's name, or
    /// nothing).
    pub fn image_for(&self, template: &str) -> Option<String> {
        if is_image_uri(template) {
            return Some(template.to_string());
        }
        if template == "base" {
            return Some(self.default_image.clone());
        }
        self.image_aliases.get(template).cloned()
    }

    /// Whether a template name is one of the provider's own: `base`, or an
    /// alias of ABX_OPENSANDBOX_IMAGE_ALIASES (never a snapshot's name).
    pub fn is_own_template(&self, name: &str) -> bool {
        name == "base" || self.image_aliases.contains_key(name)
    }

    /// The template name an image was most likely made from (the reverse of `image_for`).
    pub fn template_for(&self, image: &str) -> String {
        if image == self.default_image {
            return "base".to_string();
        }
        self.image_aliases
            .iter()
            .find(|(_, v)| v.as_str() == image)
            .map(|(k, _)| k.clone())
            .unwrap_or_else(|| image.to_string())
    }

    /// The entrypoint for a new sandbox of `image`, unless the request names one.
    pub fn entrypoint_for(&self, image: &str) -> Vec<String> {
        if let Some(ep) = &self.entrypoint {
            return ep.clone();
        }
        let default = if is_code_interpreter(image) {
            CODE_INTERPRETER_ENTRYPOINT
        } else {
            DEFAULT_ENTRYPOINT
        };
        default.iter().map(|s| s.to_string()).collect()
    }
}

/// Whether a template is an image URI rather than a name: it has `:` or `/`
/// (`python:3.12-slim`, `registry.io/team/image`), which no name has.
pub fn is_image_uri(template: &str) -> bool {
    template.contains(':') || template.contains('/')
}

/// OpenSandbox's code-interpreter images start their own Jupyter-backed entrypoint.
pub fn is_code_interpreter(image: &str) -> bool {
    let name = image.rsplit('/').next().unwrap_or(image);
    name.starts_with("code-interpreter")
}

fn parse_flag(env: &dyn Env, name: &str) -> Result<bool, SettingError> {
    match lookup(env, name) {
        Some((var, value)) => parse::flag(&var, &value),
        None => Ok(false),
    }
}

/// The environment variables a host should hand to the guest: every setting's
/// variables except the API key ones (the host injects that header itself).
pub fn guest_env_vars() -> impl Iterator<Item = &'static str> {
    SETTINGS
        .iter()
        .flat_map(|s| s.env.iter().copied())
        .filter(|v| !API_KEY_ENV.contains(v))
}

#[cfg(test)]
mod tests;
