# opensandbox-provider: `just demo` shows it working, `just test` proves it.

set shell := ["bash", "-euo", "pipefail", "-c"]

target := env_var_or_default("CARGO_TARGET_DIR", justfile_directory() / "target")

# Show the recipes.
default:
    @just --list

# Build the guest component (signed with a local dev key), epp-host and the execd stand-in.
build:
    scripts/build-guest
    cargo build -p epp-host -p execd-standin
    scripts/sign-dev

# Everything CI checks: format, lints, unit tests, end-to-end tests, SDK conformance, the release in jco, MCP clients and the MCP conformance suite, `just install` from a clean clone.
test: build lint release
    cargo test -p epp-authority -p opensandbox-settings -p opensandbox-provider -p epp-client -p epp-host -p execd-standin
    scripts/e2e
    tests/testbed/testbed check
    tests/jco/run
    tests/mcp/run
    tests/install/run

# Formatting and clippy, warnings are errors.
lint:
    cargo fmt --all --check
    cargo clippy -p epp-authority -p opensandbox-settings -p epp-client -p epp-host -p execd-standin -p epp-e2e --all-targets -- -D warnings
    cargo clippy -p opensandbox-provider -p epp-probe-provider -p epp-minibox-provider --target wasm32-wasip2 -- -D warnings

# Install epp-host (a release build, in ~/.cargo/bin or --root DIR/bin) and the signed provider into its data directory (--data-dir DIR or EPP_HOST_DATA_DIR; default $XDG_DATA_HOME/epp-host), so `epp-host run` needs no path.
install *args:
    scripts/install {{args}}

# The real opensandbox-server on 127.0.0.1:8080 (foreground; Ctrl-C stops everything); --docker: unpatched, on a Docker engine it starts itself (root; docker.io installed when missing).
testbed *args:
    cargo build -p execd-standin
    tests/testbed/testbed start {{args}}

# Official Python + TypeScript SDKs against the testbed, direct and server-proxy modes (--docker: against the Docker tier, with its raw checks of containers, snapshots, volumes, egress).
testbed-check *args:
    cargo build -p execd-standin
    tests/testbed/testbed check {{args}}

# End-to-end tests only (pass a test name to filter).
e2e *args: build
    scripts/e2e {{args}}

# A narrated EPP session: create, run, stream, files, terminal, ports.url, kill (starts the testbed if needed).
demo: build
    tests/testbed/testbed setup --server-only
    scripts/demo

# Signed release artifacts in dist/: opensandbox.wasm, opensandbox.pub, provider.json (EPP_RELEASE_KEY/EPP_RELEASE_PUB; else a throwaway key).
release:
    scripts/release

# A throwaway OCI registry on 127.0.0.1:PORT to publish to (Debian's docker-registry, installed if missing; foreground).
registry port="5000":
    scripts/registry {{port}}

# Push the signed release and the WIT package abx:epp to an OCI registry: just publish oci://REGISTRY/NAME:TAG [--insecure-registry HOST:PORT].
publish ref *flags:
    scripts/publish {{ref}} {{flags}}

# `epp-host mcp` with the official MCP Python SDK (both eras; pass client.py groups to filter) and, with no groups, the MCP conformance suite.
mcp-test *groups: build
    tests/mcp/run {{groups}}

# The released component in a second Wasm host (jco on Node.js) against the testbed.
jco: release
    tests/jco/run

# Long fuzzing of the stdio edge (random sessions against a real epp-host) and the wire properties.
fuzz cases="5000":
    PROPTEST_CASES={{cases}} cargo test -p epp-host --test stdio_fuzz --test wire_props

# 10-minute soak (RSS and fds sampled every 5 s) and 3 rounds of the 200-sandbox load; figures in target/reliability/. Not in CI.
soak secs="600": build
    EPP_SOAK_SECS={{secs}} EPP_SOAK_SAMPLE_SECS=5 EPP_LOAD_ROUNDS=3 scripts/e2e --test load

# Benchmarks beside the official Python SDK and a raw HTTP client, and `epp-host mcp` beside opensandbox-mcp 1.1.1; rewrites BENCHMARKS.md (`bench/run --quick` for a smoke run). Not in CI.
bench *args:
    bench/run {{args}}
