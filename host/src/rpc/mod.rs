//! The EPP/1 wire protocol: JSON-RPC 2.0, one message per line.

pub mod codec;
pub mod errors;
pub mod json_out;
pub mod methods;
pub mod outbox;
pub mod server;
pub mod wire;
