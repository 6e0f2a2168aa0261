//! Host bindings of the `abx:epp/provider` world (wit/). WASI interfaces are
//! wasmtime-wasi's own; `websocket` and `memo` are implemented in `imports.rs`.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "abx:epp/provider",
    imports: { default: async },
    exports: { default: async },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        "wasi:random": wasmtime_wasi::p2::bindings::random,
        "wasi:cli": wasmtime_wasi::p2::bindings::cli,
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
    },
    require_store_data_send: true,
});

pub use abx::epp::types::{Capabilities, EppError, ErrorCode, ProviderInfo};
pub use exports::abx::epp::infra;
