//! `epp-host` as a library: a wasmtime host that serves any EPP/1 provider
//! component on stdio. The binary (`main.rs`) parses the command line; tests
//! and tools use these modules directly.
//!
//! Layers, each using only those before it (docs/architecture.md; checked by
//! `host/tests/layers.rs`): `contract` (what `wit/` says) → `net` (grant,
//! policy, outbound HTTP and WebSocket) → `runtime` (instances, the one call
//! layer) → `codec` (JSON ⇄ WIT values) → `rpc` (the wire, requests, streams)
//! → `mcp` (the same requests as MCP tools) → the application: `cli`,
//! `config`, `call`, `inspect`, `installed`, `manifest`, `memory`, `signing`,
//! `oci`, `log`.

pub mod codec;
pub mod contract;
pub mod mcp;
pub mod net;
pub mod rpc;
pub mod runtime;

pub mod call;
pub mod cli;
pub mod config;
pub mod inspect;
pub mod installed;
pub mod log;
pub mod manifest;
pub mod memory;
pub mod oci;
pub mod signing;
