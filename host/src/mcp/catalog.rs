//! Which tools this server lists: the contract's tools (`contract::tools`,
//! generated from `wit/`) whose method the provider serves (its capability is
//! on and the component exports a function of it), narrowed by `--tools` and
//! `--read-only`, in the contract's order. A capability with a method that
//! answers at once and then detaches a stream of events (`pty`: a terminal's
//! output) is left out: MCP has no way to deliver events after a tool's
//! result, and its other methods are of no use without them. So is a method
//! that backs resource subscriptions (`watches=`: `files.watch`): its call
//! reports changes until cancelled, so as a tool it would never answer; it
//! is served as `resources/subscribe` instead. A tool tagged `tool=named`
//! (docs/epp-1.md §8, Tools) is listed only when `--tools` names it.

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
        Catalog::of(&|m| serves(runtime, m), only, read_only)
    }

    /// The tools of the methods `serves` says yes to, narrowed as [`Catalog::new`].
    pub fn of(
        serves: &dyn Fn(&Method) -> bool,
        only: Option<&[String]>,
        read_only: bool,
    ) -> Result<Catalog> {
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
            let usable = usable(tool, method);
            let chosen = match only {
                Some(names) => names.iter().any(|n| n == tool.name),
                None => !tool.named,
            };
            if usable && chosen && (!read_only || tool.read_only) && serves(method) {
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

    /// Whether the tool of EPP method `method` is listed.
    pub fn lists(&self, method: &str) -> bool {
        self.listed.iter().any(|l| l.method.name == method)
    }
}

/// Whether `runtime`'s provider serves `method`: its capability is on and
/// the component exports a function of it.
pub fn serves(runtime: &Runtime, method: &Method) -> bool {
    runtime.supports(method.capability) && runtime::serves(method, &|f| runtime.exports(f))
}

/// Whether a tool can work over MCP: it feeds no running call, no method of
/// its capability detaches a stream, and it is not a subscription's watcher.
fn usable(tool: &Tool, method: &Method) -> bool {
    !tool.feeds && !detaches(method.capability) && method.watches.is_none()
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
    let annotations: ToolAnnotations =
        serde_json::from_value(serde_json::Value::Object(tool.annotations()))?;
    Ok(rmcp::model::Tool::new(
        tool.name,
        tool.description,
        schema(tool, "input", tool.input_schema)?,
    )
    .with_title(tool.title)
    .with_raw_output_schema(schema(tool, "output", tool.output_schema)?)
    .with_annotations(annotations))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound on `tools/list` per tool, on average (compact JSON): the
    /// 30 KiB asked of the whole list (docs/mcp.md, Size) over the 41 tools
    /// the OpenSandbox provider lists (tests/mcp measures a real provider's).
    const PER_TOOL: usize = 30 * 1024 / 41;

    fn everything() -> Catalog {
        Catalog::of(&|_| true, None, false).expect("catalog")
    }

    fn answer(catalog: &Catalog) -> String {
        let tools: Vec<_> = catalog.listed.iter().map(|l| l.mcp.clone()).collect();
        serde_json::to_string(&rmcp::model::ListToolsResult::with_all_items(tools)).expect("json")
    }

    #[test]
    fn tools_list_fits_its_bound() {
        let catalog = everything();
        let text = answer(&catalog);
        let n = catalog.listed.len();
        println!(
            "tools/list of every method: {n} tools, {} bytes",
            text.len()
        );
        assert!(
            text.len() <= n * PER_TOOL,
            "{} > {n} × {PER_TOOL}",
            text.len()
        );
    }

    #[test]
    fn tools_that_cannot_work_over_mcp_are_not_listed() {
        let catalog = everything();
        for tool in TOOLS {
            let method = table::find(tool.method).expect("method");
            let listed = catalog.get(tool.name).is_some();
            assert_eq!(listed, usable(tool, method) && !tool.named, "{}", tool.name);
        }
        assert!(catalog.listed.iter().all(|l| !l.tool.feeds));
        assert!(catalog.listed.iter().all(|l| l.method.watches.is_none()));
        assert!(TOOLS.iter().any(|t| {
            table::find(t.method).is_some_and(|m| m.watches.is_some())
                && catalog.get(t.name).is_none()
        }));
    }

    #[test]
    fn read_only_and_an_allow_list_narrow_the_list() {
        let names = vec![TOOLS[0].name.to_string()];
        let one = Catalog::of(&|_| true, Some(&names), false).expect("catalog");
        assert_eq!(one.listed.len(), 1);
        let looking = Catalog::of(&|_| true, None, true).expect("catalog");
        assert!(!looking.listed.is_empty());
        assert!(looking.listed.iter().all(|l| l.tool.read_only));
        let wrong = Catalog::of(&|_| true, Some(&["nope".to_string()]), false);
        assert!(
            wrong
                .err()
                .expect("refused")
                .to_string()
                .contains("no such tool")
        );
    }

    #[test]
    fn a_named_tool_is_listed_only_when_asked_for() {
        let named: Vec<&Tool> = TOOLS.iter().filter(|t| t.named).collect();
        assert!(!named.is_empty(), "the contract tags some tools tool=named");
        let default = everything();
        let names: Vec<String> = named.iter().map(|t| t.name.to_string()).collect();
        let asked = Catalog::of(&|_| true, Some(&names), false).expect("catalog");
        for tool in named {
            assert!(default.get(tool.name).is_none(), "{}", tool.name);
            assert!(asked.get(tool.name).is_some(), "{}", tool.name);
        }
    }

    #[test]
    fn annotations_carry_the_contract_hints_and_no_second_title() {
        let catalog = everything();
        for l in &catalog.listed {
            let a = l.mcp.annotations.as_ref().expect("annotations");
            assert_eq!(a.title, None, "{}", l.tool.name);
            assert_eq!(a.read_only_hint, l.tool.read_only.then_some(true));
            if !l.tool.read_only {
                assert_eq!(a.destructive_hint, Some(l.tool.destructive));
            }
        }
    }
}
