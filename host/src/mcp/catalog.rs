//! Which tools this server lists: the contract's tools (`contract::tools`,
//! generated from `wit/`) whose method the provider serves (its capability is
//! on and the component exports a function of it), narrowed by `--tools` and
//! `--read-only`, in the contract's order. A capability with a method that
//! answers at once and then detaches a stream of events (`pty`: a terminal's
//! output) is left out: MCP has no way to deliver events after a tool's
//! result, and its other methods are of no use without them.

use crate::contract::table::{self, Method};
use crate::contract::tools::{TOOLS, Tool};
use crate::runtime::{self, Runtime};
use anyhow::{Result, bail};
use rmcp::model::{JsonObject, ToolAnnotations};
use std::collections::HashMap;
use std::sync::Arc;

/// A listed tool: what the contract says of it, and its MCP form.
pub struct Listed {
    pub tool: &'static Tool,
    pub method: &'static Method,
    pub mcp: rmcp::model::Tool,
}

/// The tools of this server, by name.
pub struct Catalog {
    pub listed: Vec<Listed>,
    by_name: HashMap<&'static str, usize>,
}

impl Catalog {
    /// The tools `runtime`'s provider serves, narrowed by `only` (names) and `read_only`.
    pub fn new(runtime: &Runtime, only: Option<&[String]>, read_only: bool) -> Result<Catalog> {
        if let Some(names) = only {
            for name in names {
                if !TOOLS.iter().any(|t| t.name == name) {
                    let all: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
                    bail!(
                        "--tools {name}: no such tool (the tools: {})",
                        all.join(", ")
                    );
                }
            }
        }
        let mut listed = Vec::new();
        for tool in TOOLS {
            let Some(method) = table::find(tool.method) else {
                continue;
            };
            let served = runtime.supports(method.capability)
                && runtime::serves(method, &|f| runtime.exports(f))
                && !detaches(method.capability);
            let chosen = only.is_none_or(|names| names.iter().any(|n| n == tool.name));
            if served && chosen && (!read_only || tool.read_only) {
                listed.push(Listed {
                    tool,
                    method,
                    mcp: mcp_tool(tool)?,
                });
            }
        }
        let by_name = listed
            .iter()
            .enumerate()
            .map(|(i, l)| (l.tool.name, i))
            .collect();
        Ok(Catalog { listed, by_name })
    }

    pub fn get(&self, name: &str) -> Option<&Listed> {
        self.by_name.get(name).map(|i| &self.listed[*i])
    }
}

/// Whether a method of `capability` detaches a stream.
fn detaches(capability: &str) -> bool {
    table::METHODS
        .iter()
        .filter(|m| m.capability == capability)
        .any(|m| m.stream.is_some_and(|s| s.detach))
}

/// A schema from the contract as the object rmcp wants.
fn schema(tool: &Tool, which: &str, text: &str) -> Result<Arc<JsonObject>> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(object)) => Ok(Arc::new(object)),
        _ => bail!(
            "the {which} schema of tool {} is not a JSON object (host/build.rs)",
            tool.name
        ),
    }
}

fn mcp_tool(tool: &Tool) -> Result<rmcp::model::Tool> {
    let annotations = ToolAnnotations::with_title(tool.title)
        .read_only(tool.read_only)
        .destructive(tool.destructive)
        .idempotent(tool.idempotent)
        // Every tool acts on a sandbox backend outside this process.
        .open_world(true);
    Ok(rmcp::model::Tool::new(
        tool.name,
        tool.description,
        schema(tool, "input", tool.input_schema)?,
    )
    .with_title(tool.title)
    .with_raw_output_schema(schema(tool, "output", tool.output_schema)?)
    .with_annotations(annotations))
}
