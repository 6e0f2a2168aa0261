//! Everything that decides or performs network access for the guest: what
//! the operator grants (`grant`, `options` for an EPP client's
//! `provider_options`), the policy that enforces it on every request
//! (`destination`, `policy`), and doing it (`outbound`, `readahead`,
//! `websocket`, `memo`).

pub mod destination;
pub mod grant;
pub mod memo;
pub mod options;
pub mod outbound;
pub mod policy;
pub mod readahead;
pub mod websocket;
