//! The `abx:epp` contract: which version a component was built against, and
//! how this host serves each version it knows.
//!
//! The package follows semver: a minor version only adds (functions,
//! interfaces, record types). This host is built against the newest 1.x
//! (`wit/`, embedded below) and serves components of any 1.x up to it:
//!
//! - imports: wasmtime's linker matches `abx:epp/memo@1.0.0` to the
//!   `@1.1.0` definition (same major version), and the types check
//!   structurally, so an older component links unchanged;
//! - exports: a component of the current minor version gets the typed
//!   bindings. An older one lacks functions the typed bindings require
//!   (1.0 has no `needs`, `check-settings`, `commands-run-stdin`, …), so it
//!   is served by the generic codec alone (called by name), beside an inert
//!   stand-in instance of the current world that gives the typed adapters
//!   their type and is never called: capabilities that need an adapter or a
//!   function the component lacks are switched off (E8004), see `served`.
//!
//! A component of a newer minor version, or another major version, is refused.

use crate::rpc::methods::table::{INFRA, METHODS};
use anyhow::{Context, Result, bail};
use semver::Version;
use std::sync::OnceLock;
use wit_parser::{PackageName, Resolve, SourceMap, UnresolvedPackageGroup};

/// The interface every provider exports, without a version.
const INFRA_INTERFACE: &str = "abx:epp/infra";

/// The WIT of the contract this host implements, as built in: `wit/` and its deps.
const WIT_DEPS: &[(&str, &str)] = &[
    (
        "deps/io/io.wit",
        include_str!("../../../wit/deps/io/io.wit"),
    ),
    (
        "deps/clocks/clocks.wit",
        include_str!("../../../wit/deps/clocks/clocks.wit"),
    ),
    (
        "deps/random/random.wit",
        include_str!("../../../wit/deps/random/random.wit"),
    ),
    (
        "deps/filesystem/filesystem.wit",
        include_str!("../../../wit/deps/filesystem/filesystem.wit"),
    ),
    (
        "deps/sockets/sockets.wit",
        include_str!("../../../wit/deps/sockets/sockets.wit"),
    ),
    (
        "deps/cli/cli.wit",
        include_str!("../../../wit/deps/cli/cli.wit"),
    ),
    (
        "deps/http/http.wit",
        include_str!("../../../wit/deps/http/http.wit"),
    ),
];
const WIT_PACKAGE: &[(&str, &str)] = &[
    ("types.wit", include_str!("../../../wit/types.wit")),
    ("host.wit", include_str!("../../../wit/host.wit")),
    ("infra.wit", include_str!("../../../wit/infra.wit")),
    ("world.wit", include_str!("../../../wit/world.wit")),
];

/// The version of `abx:epp` this host is built against (from the bindings).
pub fn current() -> &'static Version {
    static CURRENT: OnceLock<Version> = OnceLock::new();
    CURRENT.get_or_init(|| {
        let (_, version) = INFRA.split_once('@').expect("INFRA is versioned");
        Version::parse(version).expect("INFRA's version is semver")
    })
}

/// The `abx:epp` version a component was built against, and what follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    /// The version in the component's `abx:epp/infra@…` export.
    pub version: Version,
}

impl Contract {
    /// The contract of the component `wasm` exports (read from its type,
    /// without compiling it). Refuses versions this host cannot serve.
    pub fn of(wasm: &[u8]) -> Result<Contract> {
        let exports = top_level_exports(wasm)?;
        let version = exports
            .iter()
            .find_map(|name| name.strip_prefix(INFRA_INTERFACE)?.strip_prefix('@'))
            .with_context(|| {
                format!(
                    "the component does not export {INFRA_INTERFACE} (exports: {}); it is not an \
                     EPP provider",
                    exports.join(", ")
                )
            })?;
        let version = Version::parse(version)
            .with_context(|| format!("{INFRA_INTERFACE}@{version} is not a semver version"))?;
        let current = current();
        // A newer patch only fixes documentation or the like: same functions.
        if version.major != current.major
            || !version.pre.is_empty()
            || version.minor > current.minor
        {
            bail!(
                "the component was built against abx:epp@{version}; this host serves \
                 abx:epp@{}.0.0 to @{current} (a newer epp-host may serve it)",
                current.major
            );
        }
        Ok(Contract { version })
    }

    /// Built against this host's own minor version: served through the
    /// typed bindings, as the current world says.
    pub fn is_current(&self) -> bool {
        self.version.minor == current().minor
    }

    /// `abx:epp/provider@VERSION`, the world the component implements.
    pub fn world(&self) -> String {
        format!("abx:epp/provider@{}", self.version)
    }

    /// `abx:epp/infra@VERSION`, the export the codec calls functions of.
    pub fn infra_export(&self) -> String {
        format!("{INFRA_INTERFACE}@{}", self.version)
    }
}

/// Whether an older component can serve `capability`: every method of it is
/// plain (no hand-written adapter, which needs the typed bindings) and its
/// function is one `exports` says the component has.
pub fn served_without_adapters(capability: &str, exports: &dyn Fn(&str) -> bool) -> bool {
    let mut methods = METHODS
        .iter()
        .filter(|m| m.capability == capability)
        .peekable();
    methods.peek().is_some() && methods.all(|m| !m.stream && exports(m.function))
}

/// The built-in contract as a `Resolve`, and its main package.
fn resolve() -> Result<(Resolve, wit_parser::PackageId)> {
    resolve_as(&current().to_string())
}

/// The built-in contract with its package version written as `version`
/// (tests make components of other versions with it).
fn resolve_as(version: &str) -> Result<(Resolve, wit_parser::PackageId)> {
    let ours = format!("abx:epp@{}", current());
    let theirs = format!("abx:epp@{version}");
    let group = |files: &[(&str, &str)]| -> Result<UnresolvedPackageGroup> {
        let mut map = SourceMap::new();
        for (path, text) in files {
            map.push_str(path, text.replace(&ours, &theirs));
        }
        map.parse()
            .map_err(|(_, e)| anyhow::anyhow!("the built-in WIT does not parse: {e}"))
    };
    let deps = WIT_DEPS
        .iter()
        .map(|file| group(std::slice::from_ref(file)))
        .collect::<Result<Vec<_>>>()?;
    let mut resolve = Resolve::default();
    let package = resolve
        .push_groups(group(WIT_PACKAGE)?, deps)
        .map_err(|e| anyhow::anyhow!("the built-in WIT does not resolve: {e}"))?;
    Ok((resolve, package))
}

/// The built-in contract as a Wasm WIT package (`push-wit`).
pub fn encoded_package() -> Result<(PackageName, Vec<u8>)> {
    let (resolve, package) = resolve()?;
    let name = resolve.packages[package].name.clone();
    let bytes = wit_component::encode(&resolve, package).context("encoding the built-in WIT")?;
    Ok((name, bytes))
}

/// The names of a component's own exports, read from its top-level export
/// sections with nested modules and components skipped: decoding its whole
/// type (`wit_component::decode`) took about 5 ms of every start.
fn top_level_exports(wasm: &[u8]) -> Result<Vec<String>> {
    use wasmparser::{Chunk, Parser, Payload};
    let mut parser = Parser::new(0);
    let mut offset = 0;
    let mut names = Vec::new();
    loop {
        let data = wasm.get(offset..).context("the component is truncated")?;
        let (consumed, payload) = match parser.parse(data, true).context("reading the component")? {
            Chunk::Parsed { consumed, payload } => (consumed, payload),
            Chunk::NeedMoreData(_) => bail!("the component is truncated"),
        };
        offset += consumed;
        match payload {
            Payload::Version { encoding, .. } if encoding != wasmparser::Encoding::Component => {
                bail!("this is a core WebAssembly module, not a component")
            }
            // Nested bytes are not the parent parser's: skip them.
            Payload::ModuleSection {
                unchecked_range, ..
            }
            | Payload::ComponentSection {
                unchecked_range, ..
            } => offset = unchecked_range.end,
            Payload::ComponentExportSection(section) => {
                for export in section {
                    names.push(
                        export
                            .context("reading the component's exports")?
                            .name
                            .name
                            .to_string(),
                    );
                }
            }
            Payload::End(_) => return Ok(names),
            _ => {}
        }
    }
}

/// An inert component of the current `provider` world: every function traps.
/// It stands beside an older component so that an instance always has the
/// typed bindings' shape; nothing calls it, because what would need it is
/// switched off for older components.
pub fn stand_in() -> Result<&'static [u8]> {
    static STAND_IN: OnceLock<std::result::Result<Vec<u8>, String>> = OnceLock::new();
    STAND_IN
        .get_or_init(|| build_stand_in().map_err(|e| format!("{e:#}")))
        .as_deref()
        .map_err(|e| anyhow::anyhow!("building the stand-in for older components: {e}"))
}

fn build_stand_in() -> Result<Vec<u8>> {
    dummy_component(&current().to_string())
}

/// A component of the built-in `provider` world at `version` whose every
/// function traps.
fn dummy_component(version: &str) -> Result<Vec<u8>> {
    use wit_component::{ComponentEncoder, StringEncoding, dummy_module, embed_component_metadata};
    use wit_parser::{LiftLowerAbi, ManglingAndAbi};
    let (resolve, package) = resolve_as(version)?;
    let world = resolve.select_world(&[package], Some("provider"))?;
    let mangling = ManglingAndAbi::Legacy(LiftLowerAbi::Sync);
    let mut module = dummy_module(&resolve, world, mangling);
    embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)?;
    ComponentEncoder::default()
        .module(&module)?
        .validate(true)
        .encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_contract_is_the_bindings_version() {
        let (name, bytes) = encoded_package().unwrap();
        assert_eq!(name.to_string(), format!("abx:epp@{}", current()));
        assert_eq!(crate::oci::wit_package::package_name(&bytes).unwrap(), name);
    }

    #[test]
    fn the_stand_in_is_a_current_provider() {
        let contract = Contract::of(stand_in().unwrap()).unwrap();
        assert!(contract.is_current());
        assert_eq!(contract.world(), format!("abx:epp/provider@{}", current()));
    }

    #[test]
    fn serves_1_x_up_to_its_own_minor_version() {
        let of = |version: &str| Contract::of(&dummy_component(version).unwrap());
        let current = current();
        let patch = format!("{}.{}.{}", current.major, current.minor, current.patch + 7);
        assert!(
            of(&patch).unwrap().is_current(),
            "a newer patch is the same contract"
        );
        let older = of("1.0.0").unwrap();
        assert!(!older.is_current());
        assert_eq!(older.infra_export(), "abx:epp/infra@1.0.0");
        for refused in [
            format!("1.{}.0", current.minor + 1),
            "2.0.0".into(),
            "1.0.0-rc.1".into(),
        ] {
            let err = of(&refused).unwrap_err().to_string();
            assert!(
                err.contains(&format!("built against abx:epp@{refused}")),
                "{err}"
            );
        }
    }

    #[test]
    fn only_plain_methods_the_component_has_are_served() {
        let all = |_: &str| true;
        assert!(served_without_adapters("sandbox.lifecycle", &all));
        assert!(
            !served_without_adapters("exec.run", &all),
            "commands.run is an adapter"
        );
        assert!(!served_without_adapters("sandbox.timeout", &|f| f != "sandbox-set-timeout"));
        assert!(!served_without_adapters("no.such", &all));
    }
}
