//! Everything that decides or performs network access for the guest.

pub mod grant;
pub mod memo;
pub mod outbound;
pub mod policy;
pub mod readahead;
pub mod websocket;
