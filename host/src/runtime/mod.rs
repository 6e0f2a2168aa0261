//! Loading a provider component and making instances of it.
//!
//! Load order: read the .wasm, verify its signature (`signing`), then compile
//! it or take it from the cache, link only the allowed imports and build the
//! `InstancePre` once. One instance that may reach nothing and sees no
//! environment answers `describe()`, `needs()` and `reusable()` (on a warm
//! start the compile cache has the answers: `answers`); from these the
//! caller's grant function decides the network policy and the guest's
//! environment (`config.rs`). Every request then gets a `Store` and instance
//! from the pooling allocator (or one a call gave back), sharing that grant.
//! Until the first instance serves a request, an EPP client's
//! `provider_options` may replace the grant ([`Runtime::reconfigure`]); from
//! then on it is fixed.
//!
//! Every export is called by name through `call`, the one call layer, for
//! every version of the contract. Components built against an older
//! `abx:epp` 1.x are served the same way: they have no `needs()`, so the host
//! makes their needs from `describe()` and what they export ([`older_needs`]).

mod answers;
mod byte_streams;
pub mod cache;
pub mod call;
pub mod engine;
mod imports;
pub mod limits;
pub mod state;

use crate::contract::bindings::abx::epp::types::ProviderNeeds;
use crate::contract::bindings::{self, ProviderInfo};
use crate::contract::table::{Answer, METHODS, Method};
use crate::contract::{Contract, capabilities};
use crate::net::policy::NetPolicy;
use answers::Answers;
use anyhow::{Context, Result, bail};
use cache::CacheOutcome;
pub use call::{CallError, Exports, Instance};
use limits::Limits;
use state::{CallState, Shared, StoreState};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use wasmtime::component::{Component, HasSelf, InstancePre, Linker};
use wasmtime::{Engine, Store, UpdateDeadline};

/// What the operator grants a provider, decided from what it declares.
pub struct Granted {
    /// Where the provider may connect and which secret headers it gets.
    pub policy: NetPolicy,
    /// The only environment the guest sees.
    pub guest_env: Vec<(String, String)>,
}

/// Environment variables read ahead of the operator's, as (variable, value):
/// an EPP client's `provider_options`.
pub type Overlay = [(String, String)];

/// Decides the grant from `describe()`, `needs()` and an overlay of the
/// operator's environment (empty at start-up); an error refuses the provider
/// (at start-up) or the overlay.
pub type GrantFn =
    Box<dyn Fn(&ProviderInfo, &ProviderNeeds, &Overlay) -> Result<Granted> + Send + Sync>;

/// Why `provider_options` could not be applied.
#[derive(Debug)]
pub enum Reconfigure {
    /// A call into the provider has started: the grant is fixed.
    Sealed,
    /// The grant refused the settings (e.g. a secret a header cannot carry).
    Refused(anyhow::Error),
    /// The provider's `check-settings` refused them.
    Invalid(bindings::EppError),
}

/// What `Runtime::load` needs.
pub struct LoadOptions {
    pub wasm: cache::WasmBytes,
    pub cache_dir: Option<PathBuf>,
    pub limits: Limits,
    /// Instances alive at once (requests + terminals).
    pub instances: u32,
    /// Called after `describe()` and `needs()`, and again for `provider_options`.
    pub grant: GrantFn,
    /// Whether calls may be served by an instance a previous call left.
    pub reuse: Reuse,
}

/// Whether a call may be served by an instance an earlier call left
/// (`Runtime::give_back` says which instances qualify).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reuse {
    /// When the provider declares its instances reusable (`reusable()`,
    /// abx:epp 1.2): a component without the function, or answering false,
    /// gets a fresh instance for every call.
    #[default]
    Declared,
    /// Always, whatever the provider says (`--reuse-instances`).
    Always,
    /// Never (`--fresh-instances`).
    Never,
}

impl Reuse {
    /// Whether instances are reused for a provider that does (or does not)
    /// declare them reusable, and why, in words for the log.
    pub fn decide(self, declared: bool) -> (bool, &'static str) {
        match (self, declared) {
            (Reuse::Always, _) => (true, "reused (--reuse-instances)"),
            (Reuse::Never, _) => (false, "fresh for every call (--fresh-instances)"),
            (Reuse::Declared, true) => (true, "reused (the provider declares them reusable)"),
            (Reuse::Declared, false) => (
                false,
                "fresh for every call (the provider does not declare them reusable)",
            ),
        }
    }
}

/// Instances kept for reuse at most: enough for a client's calls in flight at
/// a time to find one, few enough that what they hold stays small.
const KEPT_MAX: usize = 16;

/// A kept instance's linear memory may have grown to this much at most: a
/// guest's heap does not shrink, so one that once held a large answer would
/// keep it.
const KEPT_MEMORY_MAX: usize = 4 << 20;

/// A loaded provider.
pub struct Runtime {
    engine: Engine,
    component: Component,
    pre: InstancePre<StoreState>,
    /// The `abx:epp` version the component was built against.
    pub contract: Contract,
    /// Its `infra` functions.
    pub exports: Arc<Exports>,
    /// What every instance shares; replaced only by `reconfigure`, before `sealed`.
    shared: RwLock<Arc<Shared>>,
    /// Set when the first instance that serves a request is made.
    sealed: AtomicBool,
    grant: GrantFn,
    limits: Limits,
    /// The provider's own description (`describe`; for an older component,
    /// with the capabilities it cannot serve marked unsupported).
    pub info: ProviderInfo,
    /// What the provider needs from its host (`needs`, or made by the host
    /// for an older component: [`older_needs`]).
    pub needs: ProviderNeeds,
    /// Capabilities an older component declares but exports no function of
    /// (answered E8004).
    pub not_served: Vec<String>,
    pub cache: CacheOutcome,
    /// Whether `describe()`, `needs()` and `reusable()` were answered by the
    /// compile cache instead of an instance.
    pub answers_cached: bool,
    /// Instances a plain call left, for the next one; none when reuse is off.
    kept: Option<std::sync::Mutex<Vec<Instance>>>,
    /// Whether the provider declares its instances reusable (`reusable()`).
    pub declares_reusable: bool,
    /// The operator's choice of reuse (`Reuse::decide` with the declaration).
    pub reuse: Reuse,
}

/// Links exactly what a provider may import: wasi:io, clocks, random (incl. insecure seeds), basic
/// wasi:cli (environment, exit, stdio, terminal queries), wasi:http's outgoing
/// handler, and this world's websocket, memo and request. No sockets. wasi:filesystem is
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
    bindings::abx::epp::request::add_to_linker::<StoreState, HasSelf<StoreState>>(&mut l, |s| s)?;
    Ok(l)
}

impl Runtime {
    /// Compiles (or loads from cache) and links an already verified component,
    /// asks it what it is and needs, and applies the grant `opts.grant` makes
    /// of that.
    pub async fn load(opts: LoadOptions) -> Result<Runtime> {
        let contract = Contract::of(&opts.wasm)?;
        let engine = engine::build(&opts.limits, opts.instances)?;
        let compiled = cache::load(&engine, &opts.wasm, opts.cache_dir.as_deref())
            .context("compiling the provider component")?;
        let component = compiled.component.clone();
        let pre = linker(&engine)?
            .instantiate_pre(&component)
            .map_err(anyhow::Error::from)
            .with_context(|| {
                format!(
                    "the component ({}) imports something this host does not provide",
                    contract.world()
                )
            })?;
        let exports = Arc::new(Exports::of(&component, &contract.infra_export()));
        let stored = compiled
            .stored_answers()
            .and_then(|bytes| Answers::from_json(&bytes));
        let answers_cached = stored.is_some();
        let answers = match stored {
            Some(answers) => answers,
            None => {
                let answers = ask(&engine, &pre, &exports, opts.limits).await?;
                compiled.store_answers(&answers.to_json());
                answers
            }
        };
        let declared = answers.reusable;
        let (info, needs, not_served) = match answers.needs {
            Some(needs) => (answers.info, needs, Vec::new()),
            None => older_needs(answers.info, &|function| exports.has(function)),
        };
        if !not_served.is_empty() {
            tracing::warn!(
                contract = %contract.world(),
                "the component was built against abx:epp@{} and exports no function of: {} \
                 (answered E8004)",
                contract.version,
                not_served.join(", ")
            );
        }
        check_capabilities(&info, &needs)?;
        let granted = (opts.grant)(&info, &needs, &[])
            .with_context(|| format!("refusing to run provider `{}`", info.id))?;
        let shared = Arc::new(Shared::new(granted.policy, granted.guest_env, opts.limits));
        Ok(Runtime {
            engine,
            component,
            pre,
            contract,
            exports,
            shared: RwLock::new(shared),
            sealed: AtomicBool::new(false),
            grant: opts.grant,
            limits: opts.limits,
            info,
            needs,
            not_served,
            cache: compiled.outcome,
            answers_cached,
            kept: opts
                .reuse
                .decide(declared)
                .0
                .then(|| std::sync::Mutex::new(Vec::with_capacity(KEPT_MAX))),
            declares_reusable: declared,
            reuse: opts.reuse,
        })
    }

    /// Loads a component to look at it (`describe()`, `needs()`, its types)
    /// without letting it reach anything: no cache, no environment, a policy
    /// that allows nothing (`inspect`, `manifest`).
    pub async fn load_offline(wasm: Vec<u8>) -> Result<Runtime> {
        Runtime::load(LoadOptions {
            wasm: cache::WasmBytes::new(wasm),
            cache_dir: None,
            limits: Limits::new(256, 10_000),
            instances: 4,
            grant: Box::new(|_, _, _| {
                Ok(Granted {
                    policy: NetPolicy::deny_all(),
                    guest_env: Vec::new(),
                })
            }),
            reuse: Reuse::Never,
        })
        .await
    }

    /// An instance with the memory cap and CPU budget in place: a kept one
    /// when reuse is on and one is there, else a fresh one. From the first one
    /// on, the grant is fixed (`reconfigure` answers `Sealed`).
    pub async fn instance(&self) -> Result<Instance> {
        let shared = {
            let current = self.shared.read().expect("lock");
            // Under the read lock: `reconfigure` swaps under the write lock
            // and checks this flag there, so no instance ever sees a grant
            // that a later swap would replace.
            self.sealed.store(true, Ordering::SeqCst);
            current.clone()
        };
        if let Some(mut inst) = self
            .kept
            .as_ref()
            .and_then(|k| k.lock().expect("lock").pop())
        {
            inst.store.set_epoch_deadline(1);
            return Ok(inst);
        }
        instantiate(&self.engine, &self.pre, &self.exports, shared).await
    }

    /// Keeps `inst` for a later call when reuse is on and nothing of this
    /// call can reach the next: the call answered (a trap, a limit hit or a
    /// provider error never get here), the guest holds no host resource, its
    /// memory stayed small, and the grant is the one in force. Per-call state
    /// (deadline, tokens, CPU budget) is set again by the next call. Anything
    /// else is dropped as without reuse.
    pub fn give_back(&self, mut inst: Instance) {
        let Some(kept) = &self.kept else {
            return;
        };
        let state = inst.store.data_mut();
        if !state.holds_nothing()
            || state.limiter.grown_to > KEPT_MEMORY_MAX
            || !Arc::ptr_eq(&state.shared, &self.shared.read().expect("lock"))
        {
            return;
        }
        state.call = CallState::default();
        let mut kept = kept.lock().expect("lock");
        if kept.len() < KEPT_MAX {
            kept.push(inst);
        }
    }

    /// Replaces the grant with one made from the operator's environment under
    /// `overlay` (an EPP client's `provider_options`; `options` says which
    /// settings they set and by which key), once the provider's
    /// `check-settings`, in an instance that sees the new environment, accepts
    /// it. Only before the first instance that serves a request: the HTTP
    /// pool, terminals and memo are then still empty, so nothing made under
    /// the old grant survives into the new one.
    pub async fn reconfigure(
        &self,
        overlay: &Overlay,
        options: Vec<(String, String)>,
    ) -> std::result::Result<(), Reconfigure> {
        if self.sealed.load(Ordering::SeqCst) {
            return Err(Reconfigure::Sealed);
        }
        let granted =
            (self.grant)(&self.info, &self.needs, overlay).map_err(Reconfigure::Refused)?;
        let mut shared = Shared::new(granted.policy, granted.guest_env, self.limits);
        shared.options = options;
        let shared = Arc::new(shared);
        let mut inst = instantiate(&self.engine, &self.pre, &self.exports, shared.clone())
            .await
            .map_err(Reconfigure::Refused)?;
        // An older component has no check-settings(): it meets its settings
        // when it uses them.
        if self.exports.has("check-settings") {
            match inst.call_typed::<(), ()>("check-settings", ()).await {
                Ok(()) => {}
                Err(CallError::Provider(e)) => return Err(Reconfigure::Invalid(e)),
                Err(e) => {
                    return Err(Reconfigure::Refused(
                        host_call_error(e).context("the provider's check-settings() failed"),
                    ));
                }
            }
        }
        drop(inst);
        let mut current = self.shared.write().expect("lock");
        if self.sealed.load(Ordering::SeqCst) {
            return Err(Reconfigure::Sealed);
        }
        *current = shared;
        Ok(())
    }

    /// Whether the provider implements `capability` (a wire name, e.g.
    /// `exec.stream`), by its `needs().capabilities`.
    pub fn supports(&self, capability: &str) -> bool {
        capabilities::flag(capability).is_some_and(|f| self.needs.capabilities.contains(f))
    }

    /// Whether the component exports `function`.
    pub fn exports(&self, function: &str) -> bool {
        self.exports.has(function)
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn component(&self) -> &Component {
        &self.component
    }

    /// Closes every WebSocket (shutdown).
    pub async fn close_connections(&self) {
        let shared = self.shared.read().expect("lock").clone();
        shared.sockets.close_all().await
    }
}

/// A failure of a call the host makes for itself (load, check-settings).
fn host_call_error(e: CallError) -> anyhow::Error {
    match e {
        CallError::Trap(trap) => anyhow::Error::from(trap),
        CallError::Provider(e) => anyhow::anyhow!("{:?}: {}", e.code, e.message),
        CallError::Contract(message) => anyhow::anyhow!(message),
    }
}

/// Asks a provider its static answers in an instance that may reach nothing
/// and sees no environment: `describe()`, `needs()` and `reusable()` must do
/// no I/O.
async fn ask(
    engine: &Engine,
    pre: &InstancePre<StoreState>,
    exports: &Arc<Exports>,
    limits: Limits,
) -> Result<Answers> {
    let nothing = Arc::new(Shared::new(NetPolicy::deny_all(), Vec::new(), limits));
    let mut inst = instantiate(engine, pre, exports, nothing).await?;
    let info: ProviderInfo = inst
        .call_bare("describe", ())
        .await
        .map_err(host_call_error)
        .context("the provider's describe() failed")?;
    let needs = if exports.has("needs") {
        let needs: ProviderNeeds = inst
            .call_bare("needs", ())
            .await
            .map_err(host_call_error)
            .context("the provider's needs() failed")?;
        Some(needs)
    } else {
        None
    };
    let reusable = exports.has("reusable")
        && inst
            .call_bare::<(), bool>("reusable", ())
            .await
            .map_err(host_call_error)
            .context("the provider's reusable() failed")?;
    Ok(Answers {
        info,
        needs,
        reusable,
    })
}

/// A fresh store and instance, with the memory cap and CPU budget in place.
async fn instantiate(
    engine: &Engine,
    pre: &InstancePre<StoreState>,
    exports: &Arc<Exports>,
    shared: Arc<Shared>,
) -> Result<Instance> {
    let limits = shared.limits;
    let mut store = Store::new(engine, StoreState::new(shared));
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |mut ctx| {
        let state = ctx.data_mut();
        state.cpu_ticks += 1;
        if state.cpu_ticks > limits.cpu_budget_ticks {
            return Err(wasmtime::Error::new(limits.cpu_hit()));
        }
        Ok(UpdateDeadline::Yield(1))
    });
    let instance = pre.instantiate_async(&mut store).await?;
    Ok(Instance {
        store,
        instance,
        exports: exports.clone(),
    })
}

/// Whether a component that exports what `exports` says serves `method`:
/// one of the functions that serve it is there.
pub fn serves(method: &Method, exports: &dyn Fn(&str) -> bool) -> bool {
    match method.stream {
        None => exports(method.function),
        Some(s) => s.callees.iter().any(|c| exports(c.function)),
    }
}

/// Whether such a component serves `capability`: a method of it, or (for a
/// capability with no methods of its own, such as `exec.stream`) a method
/// that forwards with it through a function that answers a stream.
fn serves_capability(capability: &str, exports: &dyn Fn(&str) -> bool) -> bool {
    let own = METHODS
        .iter()
        .filter(|m| m.capability == capability)
        .any(|m| serves(m, exports));
    let forwarding = METHODS.iter().filter_map(|m| m.stream).any(|s| {
        s.forward == Some(capability)
            && s.callees
                .iter()
                .any(|c| !matches!(c.answer, Answer::Plain) && exports(c.function))
    });
    own || forwarding
}

/// What the host grants a component that predates `needs()` (abx:epp 1.0),
/// from its `describe()`: the capabilities it declares and exports a function
/// of (the rest are marked unsupported and returned as not served), no
/// origin and no secret headers. So it reaches only what
/// the operator allows (`--allow-host`, nothing else), and its settings,
/// secrets included, are in its environment as it reads them: a 1.0
/// component was written to send its API key itself. `inspect` says so.
fn older_needs(
    mut info: ProviderInfo,
    exports: &dyn Fn(&str) -> bool,
) -> (ProviderInfo, ProviderNeeds, Vec<String>) {
    let mut flags = bindings::Capabilities::empty();
    let mut not_served = Vec::new();
    for c in info.capabilities.iter_mut().filter(|c| c.supported) {
        match capabilities::flag(&c.name) {
            Some(flag) if serves_capability(&c.name, exports) => flags |= flag,
            _ => {
                c.supported = false;
                not_served.push(c.name.clone());
            }
        }
    }
    let needs = ProviderNeeds {
        capabilities: flags,
        origin: Vec::new(),
        origin_host_any_port: false,
        allow_hosts_env: Vec::new(),
        secret_headers: Vec::new(),
        generic_settings: Vec::new(),
    };
    (info, needs, not_served)
}

/// `describe()` lists capabilities by name, `needs()` as flags: a provider
/// whose two answers disagree is refused rather than half believed.
fn check_capabilities(info: &ProviderInfo, needs: &ProviderNeeds) -> Result<()> {
    for c in info.capabilities.iter().filter(|c| c.supported) {
        if capabilities::flag(&c.name).is_none() {
            bail!(
                "the provider's describe() declares `{}` supported, which is not an EPP/1 capability",
                c.name
            );
        }
    }
    for (name, flag) in capabilities::all() {
        let described = info
            .capabilities
            .iter()
            .any(|c| c.name == name && c.supported);
        let needed = needs.capabilities.contains(flag);
        if described != needed {
            let (yes, no) = if described {
                ("describe()", "needs()")
            } else {
                ("needs()", "describe()")
            };
            bail!(
                "the provider contradicts itself about capability {name}: {yes} says it is \
                 supported, {no} does not; refusing to load it"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::bindings::abx::epp::types::{Capabilities, Capability};

    fn declared(described: &[(&str, bool)], needed: Capabilities) -> Result<()> {
        let info = ProviderInfo {
            id: "example".into(),
            version: "1".into(),
            capabilities: described
                .iter()
                .map(|(name, supported)| Capability {
                    name: name.to_string(),
                    supported: *supported,
                })
                .collect(),
            settings: Vec::new(),
        };
        let needs = ProviderNeeds {
            capabilities: needed,
            origin: Vec::new(),
            origin_host_any_port: false,
            allow_hosts_env: Vec::new(),
            secret_headers: Vec::new(),
            generic_settings: Vec::new(),
        };
        check_capabilities(&info, &needs)
    }

    #[test]
    fn describe_and_needs_must_agree() {
        let both = Capabilities::SANDBOX_LIFECYCLE | Capabilities::PTY;
        declared(
            &[
                ("sandbox.lifecycle", true),
                ("pty", true),
                ("files.rw", false),
            ],
            both,
        )
        .unwrap();
        let err = declared(&[("sandbox.lifecycle", true)], both).unwrap_err();
        assert!(
            err.to_string().contains("capability pty: needs() says"),
            "{err}"
        );
        let err = declared(
            &[
                ("sandbox.lifecycle", true),
                ("pty", true),
                ("exec.stream", true),
            ],
            both,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("capability exec.stream: describe() says"),
            "{err}"
        );
        let err = declared(
            &[
                ("sandbox.lifecycle", true),
                ("pty", true),
                ("exec.teleport", true),
            ],
            both,
        )
        .unwrap_err();
        assert!(err.to_string().contains("`exec.teleport`"), "{err}");
    }
}
