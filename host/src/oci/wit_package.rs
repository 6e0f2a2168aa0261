//! The WIT contract as a Wasm WIT package (what `wasm-tools component wit
//! --wasm` writes and `wkg` publishes), and the worlds of components.

use anyhow::{Context, Result, bail};
use std::path::Path;
use wit_parser::decoding::{DecodedWasm, decode};
use wit_parser::{PackageName, Resolve};

/// Encodes the WIT package in `dir` (with its `deps/`) as a Wasm WIT package.
pub fn encode_dir(dir: &Path) -> Result<(PackageName, Vec<u8>)> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve
        .push_dir(dir)
        .with_context(|| format!("reading the WIT package in {}", dir.display()))?;
    let name = resolve.packages[package].name.clone();
    let bytes = wit_component::encode(&resolve, package)
        .with_context(|| format!("encoding WIT package {name}"))?;
    Ok((name, bytes))
}

/// The name of the WIT package `bytes` encode (checks that they are one).
pub fn package_name(bytes: &[u8]) -> Result<PackageName> {
    match decode(bytes).context("decoding a WIT package")? {
        DecodedWasm::WitPackage(resolve, package) => Ok(resolve.packages[package].name.clone()),
        DecodedWasm::Component(..) => bail!("this is a component, not a WIT package"),
    }
}

/// A component's imports and exports, by their interface names (e.g.
/// `abx:epp/infra@1.0.0`), read from its type without compiling it.
pub struct ComponentWorld {
    /// Imported interfaces (and functions), e.g. `wasi:http/types@0.2.12`.
    pub imports: Vec<String>,
    /// Exported interfaces, e.g. `abx:epp/infra@1.1.0`.
    pub exports: Vec<String>,
}

/// The world `wasm` (a component) was built against.
pub fn component_world(wasm: &[u8]) -> Result<ComponentWorld> {
    let DecodedWasm::Component(resolve, world) =
        decode(wasm).context("reading the component's type")?
    else {
        bail!("this is a WIT package, not a component");
    };
    let world = &resolve.worlds[world];
    let names = |items: &wit_parser::IndexMap<wit_parser::WorldKey, wit_parser::WorldItem>| {
        items
            .iter()
            .filter(|(_, item)| !matches!(item, wit_parser::WorldItem::Type { .. }))
            .map(|(key, _)| resolve.name_world_key(key))
            .collect()
    };
    Ok(ComponentWorld {
        imports: names(&world.imports),
        exports: names(&world.exports),
    })
}
