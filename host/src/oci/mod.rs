//! Components and the WIT contract in OCI registries, the way the Wasm
//! component ecosystem ships them (wkg / wasm-pkg-tools, `spin registry push`):
//! one manifest whose config is `application/vnd.wasm.config.v0+json` and whose
//! only layer is the `application/wasm` bytes.
//!
//! `push` publishes a signed component (with the provider's id, version and
//! capabilities as annotations) and the WIT package `abx:epp`; `pull` fetches
//! a component for `epp-host run oci://…`, checks every digest, and keeps what
//! it fetched in a content-addressed cache (`cache`), so a second run needs no
//! registry. The wasmsign2 signature is checked by the caller, on the bytes
//! `pull` returns, before anything is compiled: a registry is never trusted,
//! only the keys are. Which registries may be reached, and over what, is the
//! operator's decision (`access`); credentials come from the docker config or
//! the environment (`credentials`) and never reach the component or the log.

pub mod access;
pub mod cache;
pub mod commands;
pub mod credentials;
pub mod pull;
pub mod push;
pub mod reference;
pub mod wit_package;

/// The config media type of a Wasm artifact (CNCF wasm-oci-artifact, wkg).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of the one layer: the component or WIT package bytes.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The manifest media type we push and accept.
pub const MANIFEST_MEDIA_TYPE: &str = oci_client::manifest::OCI_IMAGE_MEDIA_TYPE;

/// The hex sha256 of `bytes` as an OCI digest, `sha256:…`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes))
    )
}

/// reqwest is built without a crypto provider of its own (no second TLS
/// stack in the build): it uses rustls' process default, which is ring, as
/// for the provider's own connections. Installing twice is harmless.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
