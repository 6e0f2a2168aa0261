//! The EPP/1 wire protocol: JSON-RPC 2.0, one message per line. `wire` reads
//! and classifies lines, `server` runs requests, `dispatch` routes one,
//! `streams` and `bytes` serve the methods whose answer is a stream, `outbox`
//! writes answers and notifications.

pub mod bytes;
mod collect;
pub mod context;
pub mod dispatch;
pub mod errors;
pub mod invoke;
pub mod outbox;
pub mod server;
pub mod streams;
pub mod wire;
