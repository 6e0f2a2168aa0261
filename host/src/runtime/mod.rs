//! Loading a provider component and making instances of it.
//!
//! Load order: read the .wasm, verify its signature (`signing`), then compile
//! it or take it from the cache, link only the allowed imports, build the
//! `InstancePre` once and ask the provider to describe itself. Every request
//! then gets a fresh `Store` and instance from the pooling allocator.

pub mod bindings;
pub mod cache;
pub mod engine;
mod imports;
pub mod limits;
pub mod state;

use crate::net::memo::Memo;
use crate::net::outbound::HttpClient;
use crate::net::policy::NetPolicy;
use crate::net::websocket::Sockets;
use anyhow::{Context, Result};
use bindings::{Provider, ProviderInfo, ProviderPre};
use cache::CacheOutcome;
use limits::Limits;
use state::{Shared, StoreState};
use std::path::PathBuf;
use std::sync::Arc;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store, UpdateDeadline};

/// What `Runtime::load` needs.
pub struct LoadOptions {
    pub wasm: Vec<u8>,
    pub cache_dir: Option<PathBuf>,
    pub limits: Limits,
    /// Instances alive at once (requests + terminals).
    pub instances: u32,
    pub policy: NetPolicy,
    pub guest_env: Vec<(String, String)>,
}

/// A loaded provider.
pub struct Runtime {
    engine: Engine,
    component: Component,
    pre: ProviderPre<StoreState>,
    shared: Arc<Shared>,
    /// The provider's own description (`describe`).
    pub info: ProviderInfo,
    pub cache: CacheOutcome,
}

/// One instance, for one request.
pub struct Instance {
    pub store: Store<StoreState>,
    pub provider: Provider,
}

/// Links exactly what a provider may import: wasi:io, clocks, random (incl. insecure seeds), basic
/// wasi:cli (environment, exit, stdio, terminal queries), wasi:http's outgoing
/// handler, and this world's websocket and memo. No sockets. wasi:filesystem is
/// linked only so that components whose libc imports it at start-up (older
/// wasi-libc, as Debian's fallback toolchain has) still load: the store has no
/// preopened directory, so there is no descriptor to open anything with.
pub fn linker(engine: &Engine) -> Result<Linker<StoreState>> {
    use wasmtime_wasi::cli::{WasiCli, WasiCliView};
    use wasmtime_wasi::p2::bindings::cli;
    let mut l = Linker::new(engine);
    wasmtime_wasi_http::p2::add_to_linker_async(&mut l)?;
    // std's HashMap seeds itself from wasi:random/insecure-seed.
    use wasmtime_wasi::WasiView;
    use wasmtime_wasi::p2::bindings::random;
    use wasmtime_wasi::random::WasiRandom;
    random::insecure::add_to_linker::<StoreState, WasiRandom>(&mut l, |t| t.ctx().ctx.random())?;
    random::insecure_seed::add_to_linker::<StoreState, WasiRandom>(&mut l, |t| {
        t.ctx().ctx.random()
    })?;
    use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView};
    use wasmtime_wasi::p2::bindings::filesystem;
    filesystem::types::add_to_linker::<StoreState, WasiFilesystem>(&mut l, StoreState::filesystem)?;
    filesystem::preopens::add_to_linker::<StoreState, WasiFilesystem>(
        &mut l,
        StoreState::filesystem,
    )?;
    cli::environment::add_to_linker::<StoreState, WasiCli>(&mut l, StoreState::cli)?;
    cli::exit::add_to_linker::<StoreState, WasiCli>(&mut l, StoreState::cli)?;
    cli::terminal_input::add_to_linker::<StoreState, WasiCli>(&mut l, StoreState::cli)?;
    cli::terminal_output::add_to_linker::<StoreState, WasiCli>(&mut l, StoreState::cli)?;
    cli::terminal_stdin::add_to_linker::<StoreState, WasiCli>(&mut l, StoreState::cli)?;
    cli::terminal_stdout::add_to_linker::<StoreState, WasiCli>(&mut l, StoreState::cli)?;
    cli::terminal_stderr::add_to_linker::<StoreState, WasiCli>(&mut l, StoreState::cli)?;
    bindings::abx::epp::types::add_to_linker::<StoreState, HasSelf<StoreState>>(&mut l, |s| s)?;
    bindings::abx::epp::websocket::add_to_linker::<StoreState, HasSelf<StoreState>>(&mut l, |s| s)?;
    bindings::abx::epp::memo::add_to_linker::<StoreState, HasSelf<StoreState>>(&mut l, |s| s)?;
    Ok(l)
}

impl Runtime {
    /// Compiles (or loads from cache) and links an already verified component.
    pub async fn load(opts: LoadOptions) -> Result<Runtime> {
        let engine = engine::build(&opts.limits, opts.instances)?;
        let (component, cache) = cache::load(&engine, &opts.wasm, opts.cache_dir.as_deref())
            .context("compiling the provider component")?;
        let pre = linker(&engine)?
            .instantiate_pre(&component)
            .map_err(anyhow::Error::from)
            .context("the component imports something this host does not provide")?;
        let pre = ProviderPre::new(pre)
            .map_err(anyhow::Error::from)
            .context("the component does not implement abx:epp/provider")?;
        let policy = Arc::new(opts.policy);
        let shared = Arc::new(Shared {
            http: HttpClient::new(policy.clone()),
            sockets: Sockets::new(policy),
            memo: Memo::default(),
            limits: opts.limits,
            guest_env: opts.guest_env,
        });
        let mut runtime = Runtime {
            engine,
            component,
            pre,
            shared,
            info: ProviderInfo {
                id: String::new(),
                version: String::new(),
                capabilities: Vec::new(),
                settings: Vec::new(),
            },
            cache,
        };
        let mut inst = runtime.instance().await?;
        runtime.info = inst
            .provider
            .abx_epp_infra()
            .call_describe(&mut inst.store)
            .await
            .map_err(anyhow::Error::from)
            .context("the provider's describe() failed")?;
        Ok(runtime)
    }

    /// A fresh instance with the memory cap and CPU budget in place.
    pub async fn instance(&self) -> Result<Instance> {
        let mut store = Store::new(&self.engine, StoreState::new(self.shared.clone()));
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(1);
        let limits = self.shared.limits;
        store.epoch_deadline_callback(move |mut ctx| {
            let state = ctx.data_mut();
            state.cpu_ticks += 1;
            if state.cpu_ticks > limits.cpu_budget_ticks {
                return Err(wasmtime::Error::new(limits.cpu_hit()));
            }
            Ok(UpdateDeadline::Yield(1))
        });
        let provider = self.pre.instantiate_async(&mut store).await?;
        Ok(Instance { store, provider })
    }

    /// Whether the provider declared `capability` supported.
    pub fn supports(&self, capability: &str) -> bool {
        self.info
            .capabilities
            .iter()
            .any(|c| c.name == capability && c.supported)
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn component(&self) -> &Component {
        &self.component
    }

    /// Closes every WebSocket (shutdown).
    pub async fn close_connections(&self) {
        self.shared.sockets.close_all().await
    }
}
