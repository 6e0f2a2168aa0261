//! Generated bindings for the `abx:epp/provider` world, as in `guest/src/bindings.rs`.
//! WASI imports reuse the `wasip2` crate's types.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "abx:epp/provider",
    with: {
        "wasi:io/poll@0.2.12": wasip2::io::poll,
        "wasi:io/error@0.2.12": wasip2::io::error,
        "wasi:io/streams@0.2.12": wasip2::io::streams,
        "wasi:clocks/monotonic-clock@0.2.12": wasip2::clocks::monotonic_clock,
        "wasi:clocks/wall-clock@0.2.12": wasip2::clocks::wall_clock,
        "wasi:random/random@0.2.12": wasip2::random::random,
        "wasi:cli/environment@0.2.12": wasip2::cli::environment,
        "wasi:http/types@0.2.12": wasip2::http::types,
        "wasi:http/outgoing-handler@0.2.12": wasip2::http::outgoing_handler,
    },
    pub_export_macro: true,
});
