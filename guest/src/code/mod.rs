//! code.interpret over execd's `/code` routes: a Jupyter server runs behind
//! execd on code-interpreter images (template `code`), one kernel per context.
//!
//! Whether a sandbox has that server is asked of execd, not guessed from the
//! image: execd answers a run in a context that does not exist with "context
//! not found" when it has a Jupyter server and with "language runtime server
//! not configured" when it has none, at once and without side effects. The
//! answer is remembered per sandbox (`memo`).
//!
//! execd needs a run's language even when it names a context (without one it
//! runs the code as a shell command), so a context's language and cwd are
//! remembered when it is created here and asked of execd otherwise.
//!
//! Modules by job: `kernels` (whether execd has a Jupyter server; what its
//! refusals mean), `memo` (what is remembered host-wide), `contexts` (context
//! CRUD and interrupts), `languages`, `run` (a run's event stream) and
//! `collected` (abx:epp 1.0's collected run).

mod collected;
mod contexts;
mod kernels;
mod languages;
mod memo;
mod run;

pub use collected::run_collected;
pub use contexts::{
    create_context, get_context, interrupt, interrupt_kernel, list_contexts, remove_context,
    restart_context,
};
pub use languages::languages;
pub use run::run;

/// The language of a run or context that names none (execd's default kernel).
const DEFAULT_LANGUAGE: &str = "python";
