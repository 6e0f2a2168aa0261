//! What each store holds, and what all stores share.

use super::limits::{Limits, MemoryLimiter};
use crate::net::memo::Memo;
use crate::net::outbound::{HttpClient, Outbound};
use crate::net::policy::NetPolicy;
use crate::net::websocket::Sockets;
use std::sync::Arc;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// Host-wide state shared by every instance.
pub struct Shared {
    pub http: HttpClient,
    pub sockets: Sockets,
    pub memo: Memo,
    pub limits: Limits,
    /// The only environment the guest sees.
    pub guest_env: Vec<(String, String)>,
    /// The settings an EPP client set through `provider_options`, as (setting,
    /// the key it used), for `request.provider-options`.
    pub options: Vec<(String, String)>,
}

impl Shared {
    /// State for instances that reach what `policy` allows and see `guest_env`.
    pub fn new(policy: NetPolicy, guest_env: Vec<(String, String)>, limits: Limits) -> Shared {
        let policy = Arc::new(policy);
        Shared {
            http: HttpClient::new(policy.clone()),
            sockets: Sockets::new(policy),
            memo: Memo::default(),
            limits,
            guest_env,
            options: Vec::new(),
        }
    }
}

/// What the host knows of the request an instance serves (`abx:epp/request`).
#[derive(Clone, Default)]
pub struct CallState {
    /// When the host stops the request, if it will.
    pub deadline: Option<std::time::Instant>,
    /// The tokens the provider reported (`request.made`) and has not settled,
    /// shared with the request, which undoes them if it fails.
    pub tokens: Tokens,
}

/// The most tokens one request may hold, and the longest token kept: enough
/// for any real method, small enough that a misbehaving provider cannot grow
/// the host.
const MAX_TOKENS: usize = 64;
const MAX_TOKEN_BYTES: usize = 1024;

/// What a request set going that must not outlive it if it fails
/// (`request.made`), in the order reported, and how many were dropped past
/// the bounds above (said in the failed request's answer).
#[derive(Clone, Default)]
pub struct Tokens(Arc<std::sync::Mutex<(Vec<String>, usize)>>);

impl Tokens {
    /// Keeps `token` (once), within the bounds above.
    pub fn made(&self, token: String) {
        let mut held = self.0.lock().expect("lock");
        let (tokens, dropped) = &mut *held;
        if token.len() > MAX_TOKEN_BYTES || tokens.len() >= MAX_TOKENS {
            tracing::warn!(
                bytes = token.len(),
                held = tokens.len(),
                "the provider reported a token past the bounds ({MAX_TOKENS} tokens of at most \
                 {MAX_TOKEN_BYTES} bytes); dropped"
            );
            *dropped += 1;
        } else if !tokens.contains(&token) {
            tokens.push(token);
        }
    }

    /// Forgets `token`: it needs no undoing.
    pub fn settled(&self, token: &str) {
        self.0.lock().expect("lock").0.retain(|t| t != token);
    }

    /// Every token still held, and how many were dropped, leaving none.
    pub fn take(&self) -> (Vec<String>, usize) {
        std::mem::take(&mut *self.0.lock().expect("lock"))
    }
}

/// `request-options` a store may have left over and still be kept for reuse.
const LEFT_OPTIONS_MAX: usize = 256;

/// The `T` of `Store<T>`: one per request.
pub struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    hooks: Outbound,
    pub limiter: MemoryLimiter,
    pub shared: Arc<Shared>,
    /// Epoch ticks seen during the current call.
    pub cpu_ticks: u64,
    /// The call this instance serves.
    pub call: CallState,
}

impl StoreState {
    pub fn new(shared: Arc<Shared>) -> StoreState {
        // No preopened directories, no sockets, no arguments, stdin closed; the
        // guest's stdout/stderr are the host's stderr (the host log).
        let wasi = wasmtime_wasi::WasiCtxBuilder::new()
            .envs(&shared.guest_env)
            .stdout(wasmtime_wasi::cli::stderr())
            .stderr(wasmtime_wasi::cli::stderr())
            .allow_blocking_current_thread(false)
            .build();
        StoreState {
            wasi,
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            hooks: Outbound {
                client: shared.http.clone(),
            },
            limiter: MemoryLimiter {
                limits: shared.limits,
                grown_to: 0,
            },
            shared,
            cpu_ticks: 0,
            call: CallState::default(),
        }
    }

    /// The store's resources, for host streams lent to the provider for a call.
    pub fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// Whether the guest holds no host resource (stream, request, pollable…).
    /// `request-options` do not count, up to a bound: a guest hands them to
    /// `outgoing-handler.handle`, which owns them, but wasmtime-wasi-http 48
    /// only reads them and leaves them in the table, where nothing can reach
    /// them (the guest gave its handle away). Past the bound, the store is not
    /// kept, so a reused one does not grow without end.
    pub fn holds_nothing(&mut self) -> bool {
        let mut options = 0;
        for entry in self.table.iter_mut() {
            let entry: &dyn std::any::Any = entry;
            if !entry.is::<wasmtime_wasi_http::RequestOptions>() {
                return false;
            }
            options += 1;
        }
        options <= LEFT_OPTIONS_MAX
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}
