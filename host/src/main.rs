//! `epp-host`: serves an EPP/1 provider component on stdio. The work is done by
//! the `epp_host` library; this file only dispatches the command line.

use anyhow::{Context, Result};
use clap::Parser;
use epp_host::cli::{self, Cli, Command, HostArgs};
use epp_host::oci::credentials::EnvSnapshot;
use epp_host::oci::reference::OciRef;
use epp_host::rpc::outbox::Outbox;
use epp_host::rpc::server::Server;
use epp_host::runtime::cache::WasmBytes;
use epp_host::runtime::{self, Runtime};
use epp_host::{call, config, inspect, installed, manifest, oci, signing};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    epp_host::log::init();
    let result = match cli.command {
        Command::Keygen {
            secret_key,
            public_key,
        } => signing::keygen(&secret_key, &public_key).map(|id| {
            println!(
                "key id {id}: secret key {}, public key {}",
                secret_key.display(),
                public_key.display()
            );
            ExitCode::SUCCESS
        }),
        Command::Sign {
            input,
            output,
            secret_key,
            public_key,
        } => signing::sign(&input, &output, &secret_key, public_key.as_deref()).map(|id| {
            println!(
                "signed {} with key {id} -> {}",
                input.display(),
                output.display()
            );
            ExitCode::SUCCESS
        }),
        Command::Verify { wasm, trust } => verify(&wasm, &trust),
        Command::Inspect {
            wasm,
            provider,
            mut trust,
            registry,
            cache_dir,
            allow_hosts,
            manifest,
            json,
        } => installed::choose(wasm, &provider).and_then(|chosen| {
            let source = inspect::Source {
                path: chosen.trusted_by(&mut trust),
                registry,
                cache_dir,
            };
            async_main(inspect::run(source, trust, allow_hosts, manifest, json))
        }),
        Command::Install {
            wasm,
            public_keys,
            manifest,
            data,
        } => installed::install(&wasm, &public_keys, manifest.as_deref(), &data).map(|dir| {
            println!("installed {} into {}", wasm.display(), dir.display());
            ExitCode::SUCCESS
        }),
        Command::Manifest {
            wasm,
            public_keys,
            output,
        } => async_main(manifest::run(wasm, public_keys, output)),
        Command::Run { wasm, host } => {
            // Before any thread starts: registry credentials leave the
            // environment the component's is made from.
            let env = EnvSnapshot::take();
            installed::for_host(wasm, host)
                .and_then(|(wasm, host)| async_main(run(wasm, host, env)))
        }
        Command::Mcp { wasm, host, mcp } => {
            let env = EnvSnapshot::take();
            installed::for_host(wasm, host)
                .and_then(|(wasm, host)| async_main(serve_mcp(wasm, host, mcp, env)))
        }
        Command::Push {
            wasm,
            reference,
            manifest,
            source,
            allow_unsigned,
            registry,
        } => async_main(async move {
            oci::commands::push(
                &wasm,
                &reference,
                manifest,
                source,
                allow_unsigned,
                &registry,
            )
            .await
            .map(|()| ExitCode::SUCCESS)
        }),
        Command::PushWit {
            registry_prefix,
            wit,
            source,
            registry,
        } => async_main(async move {
            oci::commands::push_wit(&registry_prefix, wit, source, &registry)
                .await
                .map(|()| ExitCode::SUCCESS)
        }),
        Command::Pull {
            reference,
            output,
            cache_dir,
            registry,
        } => async_main(async move {
            oci::commands::pull_to_file(&reference, &output, cache_dir.as_deref(), &registry)
                .await
                .map(|()| ExitCode::SUCCESS)
        }),
        Command::Call {
            args,
            options,
            host,
        } => cli::CallArgs::parse(args).and_then(|args| {
            let params = call::params(args.params.as_deref())?;
            let options = call::provider_options(&options)?;
            let (wasm, host) = installed::for_host(args.wasm, host)?;
            let exe = std::env::current_exe().context("finding this epp-host binary")?;
            call::call(&exe, &wasm, &args.method, params, options, &host)
        }),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::from(2)
        }
    }
}

fn async_main(fut: impl std::future::Future<Output = Result<ExitCode>>) -> Result<ExitCode> {
    // A worker per CPU (tokio's default; two on the benchmark machine), not
    // one: one worker saves 15-25 % CPU per call (fewer context switches) but
    // added ~1 ms to `commands.run` at p50 there, in the second, third and
    // seventh passes of issue 24 alike (bench/profiling.md).
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(fut)
}

fn verify(wasm: &Path, trust: &cli::TrustArgs) -> Result<ExitCode> {
    let bytes = std::fs::read(wasm).with_context(|| format!("reading {}", wasm.display()))?;
    let keys = signing::TrustedKeys::load(trust)?;
    let status = signing::verify(&bytes, &keys);
    println!("{}: {}", wasm.display(), status.describe());
    Ok(match status {
        signing::SignatureStatus::Trusted(_) => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}

/// The component's bytes, verified against the trusted keys, and what its
/// signatures said: from a file, or pulled from a registry (then what ran is
/// logged: reference, digests, signer). A trusted verdict is remembered in the
/// compile cache (`signing::verify_remembered`).
async fn verified(
    wasm: &Path,
    host: &HostArgs,
    env: &EnvSnapshot,
) -> Result<(WasmBytes, signing::SignatureStatus)> {
    let memo = config::cache_dir(host);
    let Some(reference) = OciRef::from_arg(wasm) else {
        let bytes = std::fs::read(wasm).with_context(|| format!("reading {}", wasm.display()))?;
        let bytes = WasmBytes::new(bytes);
        let status = signing::enforce(
            wasm,
            &bytes,
            &host.trust,
            host.allow_unsigned,
            memo.as_deref(),
        )?;
        return Ok((bytes, status));
    };
    let reference = reference?;
    let pulled =
        oci::commands::fetch(&reference, &host.registry, host.cache_dir.as_deref(), env).await?;
    let named = Path::new(wasm);
    let bytes = WasmBytes::new(pulled.wasm);
    let status = signing::enforce(
        named,
        &bytes,
        &host.trust,
        host.allow_unsigned,
        memo.as_deref(),
    )
    .with_context(|| format!("{reference} (manifest {})", pulled.manifest_digest))?;
    tracing::info!(
        reference = %reference,
        manifest = %pulled.manifest_digest,
        component = %pulled.layer_digest,
        "running {} ({}), {}",
        reference.with_digest(&pulled.manifest_digest),
        pulled.origin,
        status.describe()
    );
    Ok((bytes, status))
}

/// Reads, verifies and loads a component for `run`.
async fn load(wasm: &Path, host: &HostArgs, env: &EnvSnapshot) -> Result<Arc<Runtime>> {
    let (bytes, _) = verified(wasm, host, env).await?;
    load_bytes(bytes, host).await
}

async fn load_bytes(bytes: WasmBytes, host: &HostArgs) -> Result<Arc<Runtime>> {
    let options = config::load_options(host, bytes)?;
    let runtime = Runtime::load(options).await?;
    let (cache, what) = match (runtime.cache, runtime.answers_cached) {
        (runtime::cache::CacheOutcome::Hit, true) => (
            "hit",
            "loaded the compiled component and the provider's answers",
        ),
        (runtime::cache::CacheOutcome::Hit, false) => (
            "hit",
            "loaded the compiled component, stored the provider's answers",
        ),
        (runtime::cache::CacheOutcome::Miss, _) => (
            "miss",
            "compiled the component and stored it with the provider's answers",
        ),
        (runtime::cache::CacheOutcome::Disabled, _) => ("off", "compiled the component"),
    };
    tracing::info!(
        provider = %runtime.info.id,
        version = %runtime.info.version,
        "compile cache: {cache}, {what}; instances {}",
        runtime.reuse.decide(runtime.declares_reusable).1
    );
    let dropped = epp_host::memory::drop_startup_pages();
    tracing::debug!(
        "gave back {} KiB of start-up code and read-only data",
        dropped >> 10
    );
    Ok(Arc::new(runtime))
}

/// `epp-host mcp`: the component as an MCP server.
async fn serve_mcp(
    wasm: std::path::PathBuf,
    host: HostArgs,
    args: cli::McpArgs,
    env: EnvSnapshot,
) -> Result<ExitCode> {
    let (bytes, status) = verified(&wasm, &host, &env).await?;
    let signers = match status {
        signing::SignatureStatus::Trusted(ids) => ids,
        _ => Vec::new(),
    };
    let sha256 = bytes.sha256().to_string();
    let runtime = load_bytes(bytes, &host).await?;
    let opts = config::mcp_options(&host, &args, &runtime, sha256, signers)?;
    epp_host::mcp::serve(runtime, opts).await?;
    Ok(ExitCode::SUCCESS)
}

async fn run(wasm: std::path::PathBuf, host: HostArgs, env: EnvSnapshot) -> Result<ExitCode> {
    let runtime = load(&wasm, &host, &env).await?;
    epp_host::rpc::wire::widen_pipes();
    let (out, writer) = Outbox::wire(std::io::stdout(), epp_host::rpc::wire::stdout_room());
    let server = Server::new(runtime, out, config::serve_options(&host));
    server.serve(std::io::stdin()).await;
    drop(server);
    // The writer ends once the last outbox clone is gone; don't wait forever on a
    // stuck stdout.
    let writer = tokio::task::spawn_blocking(move || writer.join());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
    // Exit without tearing the runtime and its threads down (the stdin reader
    // has stopped, or stops after the line it is handling).
    std::process::exit(0);
}
