//! Command line of `epp-host`.

use anyhow::{Result, anyhow};
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

/// A small, strict host for EPP/1 provider components.
///
/// It verifies the component's signature, runs it in wasmtime with no filesystem,
/// no sockets and only its own settings in its environment, and serves EPP/1
/// (JSON-RPC 2.0, one message per line) on stdin/stdout. The component declares
/// what it needs (its backend origin, secret headers, more hosts); all outbound
/// HTTP and WebSocket traffic passes the network policy this host makes of that
/// and of the operator's grants, and secrets the host injects stay on this side.
#[derive(Debug, Parser)]
#[command(name = "epp-host", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve EPP/1 on stdin/stdout until end of input or `epp.shutdown`.
    Run {
        /// The provider component: a .wasm file, or
        /// `oci://REGISTRY/NAME:TAG` / `oci://REGISTRY/NAME@sha256:DIGEST` to
        /// pull it (digests checked, signature verified before compiling,
        /// cached by digest). Default: the installed provider (`epp-host
        /// install`; `--provider NAME` when several are).
        #[arg(value_name = "PROVIDER")]
        wasm: Option<PathBuf>,
        #[command(flatten)]
        host: HostArgs,
    },
    /// Serve the provider as a Model Context Protocol server: one tool per EPP
    /// method it serves, on stdin/stdout, or over streamable HTTP with `--http`.
    Mcp {
        /// The provider component: a .wasm file or an `oci://` reference;
        /// default: the installed provider (as `run`).
        #[arg(value_name = "PROVIDER")]
        wasm: Option<PathBuf>,
        #[command(flatten)]
        host: HostArgs,
        #[command(flatten)]
        mcp: McpArgs,
    },
    /// Send one request, print the result (and streaming notifications) and exit
    /// non-zero on error.
    #[command(override_usage = "epp-host call [OPTIONS] [PROVIDER] <METHOD> [PARAMS]")]
    Call {
        /// `[PROVIDER] METHOD [PARAMS]`: the provider component (a .wasm file
        /// or an `oci://` reference, as `run`; default: the installed
        /// provider), the EPP method (e.g. `sandbox.list`) and its params as a
        /// JSON object (default `{}`). Of two arguments, the second is PARAMS
        /// when it starts with `{`.
        #[arg(value_name = "ARGS", num_args = 1..=3, required = true)]
        args: Vec<OsString>,
        /// A `provider_options` entry for `epp.hello`, sent before the request
        /// (e.g. `--option sandbox_base_url=http://127.0.0.1:8080`); repeatable.
        #[arg(long = "option", value_name = "KEY=VALUE")]
        options: Vec<String>,
        #[command(flatten)]
        host: HostArgs,
    },
    /// Show a component's signature status, signer key id, WIT world, imports,
    /// exports, declared capabilities and settings (the manifest's view), what
    /// it needs from its host next to what this environment grants it (origin,
    /// allowed hosts, secret headers: whether set, never their values), and
    /// whether a provider.json next to it (or --manifest) matches it. Exits 1
    /// when the component cannot be loaded or the manifest does not match.
    Inspect {
        /// The provider component: a .wasm file or an `oci://` reference
        /// (default: the installed provider, as `run`).
        #[arg(value_name = "PROVIDER")]
        wasm: Option<PathBuf>,
        #[command(flatten)]
        provider: ProviderArgs,
        #[command(flatten)]
        trust: TrustArgs,
        #[command(flatten)]
        registry: RegistryArgs,
        /// The download cache for an `oci://` reference (default
        /// `$XDG_CACHE_HOME/epp-host`).
        #[arg(long, value_name = "DIR", env = "EPP_HOST_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
        /// A host `run` would be given with --allow-host (repeatable): shown in
        /// the grant.
        #[arg(long = "allow-host", value_name = "HOST")]
        allow_hosts: Vec<String>,
        /// Manifest to check against the component (default: provider.json in
        /// the component's folder, when there is one).
        #[arg(long, value_name = "PATH")]
        manifest: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write the release manifest (provider.json) of a component: id, kind,
    /// protocol, WIT world, size, sha256, signer key ids, capabilities and
    /// settings, all derived from the component itself.
    Manifest {
        /// The signed provider component (.wasm).
        wasm: PathBuf,
        /// Public key whose signature the manifest names (repeatable, e.g. the
        /// current and the next release key); each must verify the component.
        #[arg(long = "public-key", short = 'K', value_name = "PATH")]
        public_keys: Vec<PathBuf>,
        /// Where to write the manifest (default: stdout).
        #[arg(long, short = 'o', value_name = "PATH")]
        output: Option<PathBuf>,
    },
    /// Install a signed provider into the data directory, so that `run`,
    /// `call` and `inspect` load it when no PROVIDER is given: the component,
    /// its provider.json and the public keys that verify it go to
    /// `DATA/providers/ID/` (ID from provider.json), replacing an earlier
    /// install of the same provider. Those keys are trusted for that provider
    /// only, and only when it is loaded as the installed provider. Prints the
    /// folder.
    Install {
        /// The signed provider component (.wasm).
        wasm: PathBuf,
        /// A public key that verifies the component (repeatable, at least one).
        #[arg(long = "public-key", short = 'K', value_name = "PATH", required = true)]
        public_keys: Vec<PathBuf>,
        /// The component's manifest (default: provider.json beside it).
        #[arg(long, value_name = "PATH")]
        manifest: Option<PathBuf>,
        #[command(flatten)]
        data: DataDirArgs,
    },
    /// Create an Ed25519 key pair for signing components.
    Keygen {
        /// Where to write the secret key (created with mode 0600).
        #[arg(long, short = 'k')]
        secret_key: PathBuf,
        /// Where to write the public key.
        #[arg(long, short = 'K')]
        public_key: PathBuf,
    },
    /// Add a signature to a component (existing signatures are kept, so a
    /// component can carry the current and the next release key).
    Sign {
        /// Component to sign.
        input: PathBuf,
        /// Signed component to write.
        #[arg(long, short = 'o')]
        output: PathBuf,
        /// Secret key file.
        #[arg(long, short = 'k')]
        secret_key: PathBuf,
        /// Public key file; its id is recorded in the signature.
        #[arg(long, short = 'K')]
        public_key: Option<PathBuf>,
    },
    /// Publish a signed component to an OCI registry as a Wasm artifact
    /// (config `application/vnd.wasm.config.v0+json`, layer `application/wasm`)
    /// annotated with the provider's id, version and capabilities from its
    /// provider.json. Prints the pinned reference (`…@sha256:…`).
    Push {
        /// The signed provider component (.wasm).
        wasm: PathBuf,
        /// Where to: `oci://REGISTRY/NAME:TAG`.
        reference: String,
        /// The component's release manifest (default: provider.json beside it).
        #[arg(long, value_name = "PATH")]
        manifest: Option<PathBuf>,
        /// The `org.opencontainers.image.source` annotation (default: this
        /// project's repository).
        #[arg(long, value_name = "URL")]
        source: Option<String>,
        /// Push a component that carries no signature (only to test that
        /// hosts refuse it).
        #[arg(long)]
        allow_unsigned: bool,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Publish the WIT package `abx:epp` (the contract this host speaks, or
    /// the one in --wit DIR) as a Wasm WIT package, at
    /// `REGISTRY[/PREFIX]/abx/epp:VERSION`, so another host can fetch the
    /// contract by name and version.
    PushWit {
        /// `oci://REGISTRY` or `oci://REGISTRY/PREFIX`.
        registry_prefix: String,
        /// A WIT directory (with deps/) to publish instead of the built-in contract.
        #[arg(long, value_name = "DIR")]
        wit: Option<PathBuf>,
        /// The `org.opencontainers.image.source` annotation.
        #[arg(long, value_name = "URL")]
        source: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Fetch an artifact (a component or a WIT package) from a registry into a
    /// file, its digests checked; prints its manifest digest. No signature
    /// check: `run` does that every time.
    Pull {
        /// `oci://REGISTRY/NAME:TAG` or `…@sha256:DIGEST`.
        reference: String,
        /// Where to write the .wasm.
        #[arg(long, short = 'o', value_name = "PATH")]
        output: PathBuf,
        /// The download cache (default `$XDG_CACHE_HOME/epp-host`).
        #[arg(long, value_name = "DIR", env = "EPP_HOST_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Check that a component is signed by one of the trusted keys.
    Verify {
        /// Component to check.
        wasm: PathBuf,
        #[command(flatten)]
        trust: TrustArgs,
    },
}

/// Which signers to trust.
#[derive(Debug, Args, Clone, Default)]
pub struct TrustArgs {
    /// A trusted public key file (repeatable).
    #[arg(long = "trusted-key", value_name = "PATH")]
    pub trusted_keys: Vec<PathBuf>,
    /// A file listing trusted public key files, one path per line (`#` comments;
    /// relative paths are relative to this file). Default:
    /// `$XDG_CONFIG_HOME/epp-host/trusted-keys` when it exists.
    #[arg(long, value_name = "PATH", env = "EPP_HOST_TRUST_FILE")]
    pub trust_file: Option<PathBuf>,
}

/// How registries are reached.
#[derive(Debug, Args, Clone, Default)]
pub struct RegistryArgs {
    /// A registry (`host[:port]`, as in the reference) reached over plain
    /// HTTP, and allowed although it is on this machine (repeatable). Without
    /// it a registry is HTTPS only and a local one is refused.
    #[arg(long = "insecure-registry", value_name = "HOST[:PORT]")]
    pub insecure_registries: Vec<String>,
}

/// Where installed providers are.
#[derive(Debug, Args, Clone, Default)]
pub struct DataDirArgs {
    /// The data directory, holding installed providers in `providers/NAME/`
    /// (default `$XDG_DATA_HOME/epp-host`).
    #[arg(long, value_name = "DIR", env = "EPP_HOST_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// Which installed provider is loaded when no PROVIDER is given
/// (`installed::choose`).
#[derive(Debug, Args, Clone, Default)]
pub struct ProviderArgs {
    /// The installed provider to load when no PROVIDER is given; needed only
    /// when several are installed.
    #[arg(long = "provider", value_name = "NAME")]
    pub name: Option<String>,
    #[command(flatten)]
    pub data: DataDirArgs,
}

/// Everything that shapes how a provider runs. A subcommand taking these and
/// an optional PROVIDER gets the installed provider from
/// `installed::for_host`.
#[derive(Debug, Args, Clone)]
pub struct HostArgs {
    #[command(flatten)]
    pub provider: ProviderArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Run a component that is unsigned or not signed by a trusted key.
    /// For development only; says so loudly on stderr.
    #[arg(long)]
    pub allow_unsigned: bool,
    /// Directory for compiled components (default `$XDG_CACHE_HOME/epp-host`).
    #[arg(long, value_name = "DIR", env = "EPP_HOST_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile the component at every start instead of caching it.
    #[arg(long)]
    pub no_cache: bool,
    /// Another host the provider may reach: name, `*.domain`, `host:port`, IP or
    /// CIDR (repeatable; adds to the provider's own allow-hosts variables, which
    /// `inspect` names).
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,
    /// Another environment variable to hand to the provider (repeatable). The
    /// provider's declared settings are passed already, except the secrets the
    /// host injects as headers and the allow-hosts variables.
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Linear memory cap per provider instance, in MiB.
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    pub max_memory_mib: u64,
    /// CPU time a single call into the provider may use, in milliseconds
    /// (measured in 10 ms epoch ticks while WebAssembly runs).
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub cpu_budget_ms: u64,
    /// Wall-clock limit per request, in seconds. `sandbox.create` gets at least its
    /// ready_timeout + 60; `commands.run` uses its own timeout + 60, or none.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    pub call_timeout: u64,
    /// Requests served at once; more are answered with E9001.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub max_concurrent: usize,
    /// Longest accepted input line, in bytes (a 64 MiB file is 85 MiB of base64).
    #[arg(long, default_value_t = 128 << 20, value_name = "BYTES")]
    pub max_line_bytes: usize,
    /// Output buffered for a non-streaming `commands.run`, in bytes; the rest is
    /// dropped and `truncated: true` is set.
    #[arg(long, default_value_t = 128 << 20, value_name = "BYTES")]
    pub max_output_bytes: usize,
    /// Most bytes one byte param (base64 on the wire, e.g. `data` of
    /// `commands.send_input`) may carry; a longer one is refused before it is
    /// decoded. Below `--max-line-bytes`: such a param is passed to the
    /// provider whole, so it is held more than once on the way.
    #[arg(long, default_value_t = 64 << 20, value_name = "BYTES")]
    pub max_param_bytes: usize,
    /// Seconds in-flight requests get to finish after end of input.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub shutdown_grace: u64,
    /// Serve a call from an instance an earlier one left (a plain call, or a
    /// command followed to its end) even when the provider does not declare
    /// its instances reusable (`reusable()`, abx:epp 1.2). By default they
    /// are reused only when it does: about a fifth less host CPU and latency
    /// per plain call. The provider's own state (its statics, its heap) then
    /// outlives a request; the host's does not, and an instance that trapped,
    /// failed, holds a resource or grew past 4 MiB is never kept.
    #[arg(long, conflicts_with = "fresh_instances")]
    pub reuse_instances: bool,
    /// A fresh instance for every call, even when the provider declares its
    /// instances reusable.
    #[arg(long)]
    pub fresh_instances: bool,
}

impl HostArgs {
    /// Whether a call may be served by an instance an earlier call left.
    pub fn reuse(&self) -> crate::runtime::Reuse {
        use crate::runtime::Reuse;
        match (self.reuse_instances, self.fresh_instances) {
            (true, _) => Reuse::Always,
            (_, true) => Reuse::Never,
            _ => Reuse::Declared,
        }
    }
}

/// What `epp-host mcp` adds to the host's flags.
#[derive(Args, Debug, Clone)]
pub struct McpArgs {
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio. ADDR must be
    /// a loopback address unless `--http-any-address` is given.
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<std::net::SocketAddr>,
    /// Allow `--http` on an address other than loopback (then set `--bearer-env`).
    #[arg(long)]
    pub http_any_address: bool,
    /// The environment variable that holds the bearer token HTTP clients must
    /// send (`Authorization: Bearer …`); never given on the command line.
    #[arg(long, value_name = "NAME")]
    pub bearer_env: Option<String>,
    /// Only these tools (names, comma-separated or repeated).
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub tools: Vec<String>,
    /// Only the tools that change nothing (their `readOnlyHint`).
    #[arg(long)]
    pub read_only: bool,
    /// Seconds a command's tool call (`commands_run`, `commands_connect`) may
    /// run before it answers with the output so far and the command's id
    /// while the command runs on (clients give up at about 60 s).
    #[arg(long, default_value_t = 45, value_name = "SECS")]
    pub mcp_wait: u64,
    /// Most bytes of output or file content one tool result carries: output
    /// past it is dropped (`truncated: true`), a larger file comes back as a
    /// `resource_link` to read as a resource or in parts.
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    pub mcp_inline_bytes: usize,
}

impl HostArgs {
    /// These flags as `run` reads them back (how `call` starts its `run`).
    pub fn to_args(&self) -> Vec<OsString> {
        // Taken apart whole, so a new flag cannot be forgotten here.
        let HostArgs {
            provider:
                ProviderArgs {
                    name,
                    data: DataDirArgs { data_dir },
                },
            trust:
                TrustArgs {
                    trusted_keys,
                    trust_file,
                },
            registry: RegistryArgs {
                insecure_registries,
            },
            allow_unsigned,
            cache_dir,
            no_cache,
            allow_hosts,
            pass_env,
            max_memory_mib,
            cpu_budget_ms,
            call_timeout,
            max_concurrent,
            max_line_bytes,
            max_output_bytes,
            max_param_bytes,
            shutdown_grace,
            reuse_instances,
            fresh_instances,
        } = self;
        let mut args: Vec<OsString> = Vec::new();
        let mut flag = |name: &str, value: OsString| {
            args.push(name.into());
            args.push(value);
        };
        if let Some(name) = name {
            flag("--provider", name.into());
        }
        if let Some(dir) = data_dir {
            flag("--data-dir", dir.into());
        }
        for key in trusted_keys {
            flag("--trusted-key", key.into());
        }
        if let Some(file) = trust_file {
            flag("--trust-file", file.into());
        }
        for registry in insecure_registries {
            flag("--insecure-registry", registry.into());
        }
        if let Some(dir) = cache_dir {
            flag("--cache-dir", dir.into());
        }
        for host in allow_hosts {
            flag("--allow-host", host.into());
        }
        for name in pass_env {
            flag("--pass-env", name.into());
        }
        flag("--max-memory-mib", max_memory_mib.to_string().into());
        flag("--cpu-budget-ms", cpu_budget_ms.to_string().into());
        flag("--call-timeout", call_timeout.to_string().into());
        flag("--max-concurrent", max_concurrent.to_string().into());
        flag("--max-line-bytes", max_line_bytes.to_string().into());
        flag("--max-output-bytes", max_output_bytes.to_string().into());
        flag("--max-param-bytes", max_param_bytes.to_string().into());
        flag("--shutdown-grace", shutdown_grace.to_string().into());
        if *allow_unsigned {
            args.push("--allow-unsigned".into());
        }
        if *no_cache {
            args.push("--no-cache".into());
        }
        if *reuse_instances {
            args.push("--reuse-instances".into());
        }
        if *fresh_instances {
            args.push("--fresh-instances".into());
        }
        args
    }
}

/// `call`'s positional arguments, `[PROVIDER] METHOD [PARAMS]`, told apart.
#[derive(Debug, PartialEq, Eq)]
pub struct CallArgs {
    /// The provider named, if one is.
    pub wasm: Option<PathBuf>,
    pub method: String,
    /// The params as given (JSON text).
    pub params: Option<String>,
}

impl CallArgs {
    /// Params are a JSON object, so they start with `{`: of two arguments the
    /// second is PARAMS when it does, else the two are PROVIDER and METHOD.
    pub fn parse(args: Vec<OsString>) -> Result<CallArgs> {
        fn text(what: &str, arg: OsString) -> Result<String> {
            arg.into_string()
                .map_err(|arg| anyhow!("{what} {arg:?} is not UTF-8"))
        }
        let is_params = |arg: &OsString| {
            arg.to_str()
                .is_some_and(|a| a.trim_start().starts_with('{'))
        };
        let mut args = args.into_iter();
        let (wasm, method, params) = match (args.next(), args.next(), args.next()) {
            (Some(method), None, None) => (None, method, None),
            (Some(method), Some(params), None) if is_params(&params) => {
                (None, method, Some(params))
            }
            (Some(wasm), Some(method), params) => (Some(wasm), method, params),
            _ => return Err(anyhow!("call takes [PROVIDER] METHOD [PARAMS]")),
        };
        Ok(CallArgs {
            wasm: wasm.map(PathBuf::from),
            method: text("METHOD", method)?,
            params: params.map(|p| text("PARAMS", p)).transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_args(args: &[&str]) -> HostArgs {
        let argv = ["epp-host", "call", "p.wasm", "sandbox.list"]
            .iter()
            .chain(args)
            .copied();
        match Cli::try_parse_from(argv).expect("parses").command {
            Command::Call { host, .. } => host,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn call_hands_run_the_same_flags() {
        for args in [
            &[][..],
            &[
                "--provider",
                "opensandbox",
                "--data-dir",
                "/d",
                "--trusted-key",
                "a.pub",
                "--trusted-key",
                "b.pub",
                "--trust-file",
                "keys",
                "--allow-unsigned",
                "--insecure-registry",
                "127.0.0.1:5000",
                "--cache-dir",
                "/c",
                "--allow-host",
                "*.x.test",
                "--allow-host",
                "10.0.0.0/8",
                "--pass-env",
                "HOME",
                "--max-memory-mib",
                "64",
                "--cpu-budget-ms",
                "5",
                "--call-timeout",
                "7",
                "--max-concurrent",
                "3",
                "--max-line-bytes",
                "1000",
                "--max-output-bytes",
                "2000",
                "--shutdown-grace",
                "1",
            ][..],
            &["--no-cache"][..],
        ] {
            let host = host_args(args);
            let again = Cli::try_parse_from(
                [OsString::from("epp-host"), "run".into(), "p.wasm".into()]
                    .into_iter()
                    .chain(host.to_args()),
            )
            .expect("run takes them");
            let Command::Run { host: again, .. } = again.command else {
                panic!("not run");
            };
            assert_eq!(format!("{again:?}"), format!("{host:?}"), "{args:?}");
        }
    }

    #[test]
    fn run_and_inspect_need_no_provider() {
        for argv in [
            &["run"][..],
            &["run", "--provider", "opensandbox"],
            &["inspect"],
        ] {
            let cli = Cli::try_parse_from(["epp-host"].iter().chain(argv))
                .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            match cli.command {
                Command::Run { wasm, .. } | Command::Inspect { wasm, .. } => {
                    assert_eq!(wasm, None, "{argv:?}")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    fn call_args(args: &[&str]) -> Result<CallArgs> {
        let argv = ["epp-host", "call"].iter().chain(args).copied();
        match Cli::try_parse_from(argv)?.command {
            Command::Call { args, .. } => CallArgs::parse(args),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn call_tells_provider_method_and_params_apart() {
        let expect = |wasm: Option<&str>, method: &str, params: Option<&str>| CallArgs {
            wasm: wasm.map(PathBuf::from),
            method: method.into(),
            params: params.map(Into::into),
        };
        let params = r#" {"sandbox_id": "s"}"#;
        for (args, want) in [
            (&["sandbox.list"][..], expect(None, "sandbox.list", None)),
            (
                &["sandbox.get_info", params],
                expect(None, "sandbox.get_info", Some(params)),
            ),
            (
                &["p.wasm", "sandbox.list"],
                expect(Some("p.wasm"), "sandbox.list", None),
            ),
            (
                &["oci://r.test/p:1", "sandbox.get_info", "{}"],
                expect(Some("oci://r.test/p:1"), "sandbox.get_info", Some("{}")),
            ),
        ] {
            assert_eq!(call_args(args).expect("parses"), want, "{args:?}");
        }
        for args in [&[][..], &["p.wasm", "m", "{}", "more"]] {
            assert!(call_args(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn call_says_which_argument_is_not_text() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(vec![b'm', 0xff]);
        let err = CallArgs::parse(vec!["p.wasm".into(), bad]).unwrap_err();
        assert!(err.to_string().starts_with("METHOD "), "{err}");
    }
}
