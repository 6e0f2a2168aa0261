//! exec.run and exec.stream over execd's `/command`: foreground commands and
//! their event streams (`run`), background commands (`background`), kill,
//! status and logs by id (`control`), following a background command from
//! any process (`connect`), and commands with stdin, which run through
//! execd's PTY API instead (`stdin`).

mod background;
mod connect;
mod control;
mod run;
pub mod stdin;

pub use background::start as start_background;
pub use connect::connect;
pub use control::{kill, logs, status};
pub use run::{run, run_to_end};
