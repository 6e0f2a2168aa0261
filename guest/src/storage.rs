//! storage.mount: OpenSandbox mounts storage when it creates a sandbox (the
//! `volumes` of `sandbox.create`: host paths, Docker named volumes, PVCs) and
//! has no call that mounts into a running one, so the runtime methods say so.

use crate::error::{Error, unsupported};

/// The answer of `storage.mount` and `storage.unmount`.
pub fn at_create(method: &str) -> Error {
    unsupported(
        method,
        "OpenSandbox mounts storage only when it creates a sandbox: pass `volumes` \
         ([{source, mount_path, read_only}]) to sandbox.create; a mount stays until the \
         sandbox is killed",
    )
}
