//! `epp-host` as a library: a wasmtime host that serves any EPP/1 provider
//! component on stdio. The binary (`main.rs`) parses the command line; tests
//! and tools use these modules directly.

pub mod call;
pub mod cli;
pub mod config;
pub mod inspect;
pub mod log;
pub mod manifest;
pub mod net;
pub mod oci;
pub mod options;
pub mod rpc;
pub mod runtime;
pub mod signing;
