//! Every EPP/1 method as an MCP tool, derived from `wit/` at build time
//! (host/build.rs; docs/epp-1.md §8, "Tools"): its name, title and
//! description, the JSON Schemas of its arguments and of its answer, and
//! what it does to its world. Nothing here is written by hand: a method
//! added to `wit/infra.wit` is a tool, and the build fails naming its
//! function when one of its params has no description.

/// One method as an MCP tool (`tools/list`).
#[derive(Debug)]
pub struct Tool {
    /// The method's wire name with `_` for `.` (`sandbox.create` → `sandbox_create`).
    pub name: &'static str,
    /// The EPP method it calls (`sandbox.create`).
    pub method: &'static str,
    /// A short human title, e.g. "Create sandbox".
    pub title: &'static str,
    /// What it does: the first paragraph of the function's WIT doc comment
    /// (without `epp:` and param lines).
    pub description: &'static str,
    /// JSON Schema 2020-12 of the arguments (an object), as compact JSON text:
    /// the method's params as EPP/1 takes them, less `stream`, a writer's
    /// `size` and `fed.` flags.
    pub input_schema: &'static str,
    /// JSON Schema 2020-12 of `structuredContent` (the EPP result object, as
    /// answered without `stream: true`), compact JSON.
    pub output_schema: &'static str,
    /// MCP `readOnlyHint`: it only looks.
    pub read_only: bool,
    /// MCP `destructiveHint`: it may remove or replace something, or do anything.
    pub destructive: bool,
    /// MCP `idempotentHint`: calling it again with the same arguments changes nothing more.
    pub idempotent: bool,
    /// It feeds a call of another method while that runs (the METHOD of a
    /// `fed.` tag), through the flag tools leave out: no use as a tool.
    pub feeds: bool,
    /// `tool=named`: listed by an MCP server only when `--tools` names it
    /// (a method that changes what other users of the backend see, or that
    /// the provider always refuses with an explanation).
    pub named: bool,
}

use serde_json::{Map, Value};

include!(concat!(env!("OUT_DIR"), "/tools.rs"));

impl Tool {
    /// Its MCP `annotations`: `readOnlyHint` for a tool that only looks;
    /// otherwise `destructiveHint` always (the hint clients ask a user to
    /// confirm by) and `idempotentHint` when it holds (its default is false).
    /// Hints that MCP ignores for a read-only tool are left out, and so is
    /// `title` (the tool's own `title` says it).
    pub fn annotations(&self) -> Map<String, Value> {
        let mut hints = Map::new();
        if self.read_only {
            hints.insert("readOnlyHint".into(), true.into());
            return hints;
        }
        hints.insert("destructiveHint".into(), self.destructive.into());
        if self.idempotent {
            hints.insert("idempotentHint".into(), true.into());
        }
        hints
    }
}

/// The tool called `name`.
pub fn find(name: &str) -> Option<&'static Tool> {
    TOOLS.iter().find(|t| t.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::table::METHODS;
    use serde_json::json;

    /// The bound on the whole list of every method's tool, compact JSON
    /// (terminals and `fed.` targets included; what an MCP server lists is
    /// bounded by `mcp::catalog` and tests/mcp).
    const LIST_BYTES: usize = 40 * 1024;
    /// The bound on what a client hands its model of each tool: name,
    /// description and input schema.
    const MODEL_BYTES: usize = 26 * 1024;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    fn tool(name: &str) -> &'static Tool {
        find(name).unwrap_or_else(|| panic!("no tool {name}"))
    }

    fn input(name: &str) -> Value {
        parse(tool(name).input_schema)
    }

    fn output(name: &str) -> Value {
        parse(tool(name).output_schema)
    }

    /// The tool as an MCP server lists it (`tools/list`).
    fn listed(t: &Tool) -> Value {
        let mut tool = json!({
            "name": t.name,
            "title": t.title,
            "description": t.description,
            "inputSchema": parse(t.input_schema),
            "outputSchema": parse(t.output_schema),
        });
        let hints = t.annotations();
        if !hints.is_empty() {
            tool["annotations"] = Value::Object(hints);
        }
        tool
    }

    #[test]
    fn every_method_is_a_tool_named_by_the_rule() {
        assert_eq!(TOOLS.len(), METHODS.len());
        for (t, m) in TOOLS.iter().zip(METHODS) {
            assert_eq!(t.method, m.name);
            assert_eq!(t.name, m.name.replace('.', "_"));
            assert!(!t.title.is_empty() && !t.description.is_empty(), "{t:?}");
        }
        assert_eq!(tool("sandbox_get_info").title, "Get sandbox info");
        assert_eq!(tool("sandbox_list").title, "List sandboxes");
        assert_eq!(tool("ports_url").title, "Port URL");
        assert_eq!(tool("files_make_dir").title, "Make directory", "title=");
        assert!(INSTRUCTIONS.contains("`sandbox_create`"), "{INSTRUCTIONS}");
    }

    #[test]
    fn every_schema_is_a_2020_12_object_schema() {
        let wrong = json!({"type": "objekt", "properties": []});
        assert!(jsonschema::draft202012::meta::validate(&wrong).is_err());
        for t in TOOLS {
            for (what, text) in [("input", t.input_schema), ("output", t.output_schema)] {
                let schema = parse(text);
                assert_eq!(schema["type"], "object", "{} {what}: {text}", t.name);
                if let Err(e) = jsonschema::draft202012::meta::validate(&schema) {
                    panic!("{} {what} is not JSON Schema 2020-12: {e}\n{text}", t.name);
                }
                jsonschema::draft202012::new(&schema)
                    .unwrap_or_else(|e| panic!("{} {what}: {e}", t.name));
            }
            let schema = parse(t.input_schema);
            // Unknown arguments are the server's to refuse (by name).
            assert!(schema.get("additionalProperties").is_none(), "{}", t.name);
            for (param, s) in schema["properties"].as_object().into_iter().flatten() {
                let text = s["description"].as_str().unwrap_or_default();
                assert!(!text.is_empty(), "{}: `{param}` has no description", t.name);
            }
        }
    }

    #[test]
    fn descriptions_name_tools_and_wire_params() {
        let texts = TOOLS
            .iter()
            .flat_map(|t| [t.description, t.input_schema])
            .chain([INSTRUCTIONS]);
        for text in texts {
            for m in METHODS {
                let name = format!("`{}`", m.name);
                assert!(!text.contains(&name), "{name} in {text}");
            }
            assert!(!text.contains("`sandbox-id`"), "{text}");
        }
    }

    #[test]
    fn the_tools_list_answer_fits_its_bound() {
        let list = json!({"tools": TOOLS.iter().map(listed).collect::<Vec<_>>()});
        let text = list.to_string();
        println!("{text}");
        let model: usize = TOOLS
            .iter()
            .map(|t| {
                let seen = json!({"name": t.name, "description": t.description,
                    "inputSchema": parse(t.input_schema)});
                seen.to_string().len()
            })
            .sum();
        println!(
            "tools/list: {} tools, {} bytes; name, description and inputSchema: {model} bytes",
            TOOLS.len(),
            text.len()
        );
        assert!(text.len() <= LIST_BYTES, "{} > {LIST_BYTES}", text.len());
        assert!(model <= MODEL_BYTES, "{model} > {MODEL_BYTES}");
    }

    #[test]
    fn inputs_are_the_wire_params_less_the_streaming_ones() {
        let create = input("sandbox_create");
        let template = &create["properties"]["template"];
        // An optional param is left out for none: no `null` in its schema.
        assert_eq!(template["type"], "string");
        assert!(
            template["description"]
                .as_str()
                .unwrap()
                .contains("image URI")
        );
        assert!(create["properties"]["timeout"].is_object());
        assert!(create.get("required").is_none(), "{create}");
        assert_eq!(
            create["properties"]["resources"]["additionalProperties"],
            false
        );

        let run = input("commands_run");
        for gone in ["stream", "stdin"] {
            assert!(run["properties"].get(gone).is_none(), "{run}");
        }
        assert_eq!(run["properties"]["background"]["type"], "boolean");
        let timeout = &run["properties"]["timeout"];
        assert_eq!(timeout["exclusiveMinimum"], 0, "seconds: {timeout}");
        assert!(
            timeout["description"]
                .as_str()
                .unwrap()
                .ends_with("In seconds.")
        );
        assert_eq!(run["required"], json!(["sandbox_id", "cmd"]));

        let read = input("files_read");
        assert_eq!(
            read["properties"]["encoding"]["enum"],
            json!(["utf8", "base64"])
        );
        let names: Vec<&String> = read["properties"].as_object().unwrap().keys().collect();
        assert_eq!(
            names,
            ["sandbox_id", "path", "offset", "length", "encoding"]
        );

        let write = input("files_write");
        let names: Vec<&String> = write["properties"].as_object().unwrap().keys().collect();
        assert_eq!(
            names,
            [
                "sandbox_id",
                "path",
                "content",
                "encoding",
                "mode",
                "owner",
                "group",
                "files"
            ]
        );
        let item = &write["properties"]["files"]["items"];
        assert_eq!(item["required"], json!(["path", "content"]));
        assert_eq!(input("pty_create")["properties"]["cols"]["default"], 80);
        assert_eq!(input("files_list")["properties"]["depth"]["minimum"], 1);
    }

    /// Params a schema takes (true) or refuses (false), as EPP/1 does.
    #[test]
    fn inputs_take_what_the_codec_takes() {
        let cases = [
            (
                "commands_run",
                json!({"sandbox_id": "s", "cmd": "ls"}),
                true,
            ),
            (
                "commands_run",
                json!({"sandbox_id": "s", "cmd": "ls", "timeout": 0.5, "cwd": "/tmp"}),
                true,
            ),
            (
                "commands_run",
                json!({"sandbox_id": "s", "cmd": "ls", "timeout": 0}),
                false,
            ),
            ("commands_run", json!({"sandbox_id": "s"}), false),
            (
                "files_write",
                json!({"sandbox_id": "s", "path": "/a", "content": "x", "mode": "644"}),
                true,
            ),
            (
                "files_write",
                json!({"sandbox_id": "s", "files": [{"path": "/a", "content": "x", "mode": 755}]}),
                true,
            ),
            (
                "files_write",
                json!({"sandbox_id": "s", "path": "/a", "content": "x", "files": []}),
                false,
            ),
            (
                "files_write",
                json!({"sandbox_id": "s", "path": "/a", "size": 1}),
                false,
            ),
            (
                "files_write",
                json!({"sandbox_id": "s", "path": "/a", "content": "x", "mode": "0o9"}),
                false,
            ),
            (
                "files_read",
                json!({"sandbox_id": "s", "path": "/a", "encoding": "hex"}),
                false,
            ),
            (
                "ports_url",
                json!({"sandbox_id": "s", "port": 70000}),
                false,
            ),
            (
                "pty_resize",
                json!({"sandbox_id": "s", "pty_id": "p", "cols": 0, "rows": 24}),
                false,
            ),
            (
                "sandbox_list",
                json!({"states": ["running"], "metadata": {"k": "v"}}),
                true,
            ),
            ("sandbox_list", json!({"metadata": {"k": 1}}), false),
        ];
        for (name, params, ok) in cases {
            let validator = jsonschema::draft202012::new(&input(name)).unwrap();
            assert_eq!(validator.is_valid(&params), ok, "{name} {params}");
        }
    }

    #[test]
    fn outputs_are_the_epp_answers() {
        let run = output("commands_run");
        for key in [
            "command_id",
            "exit_code",
            "stdout",
            "stderr",
            "error",
            "truncated",
        ] {
            assert!(run["properties"].get(key).is_some(), "{key}: {run}");
        }
        // Answers' schemas list no `required` (their size; `object` in host/build.rs).
        assert!(run.get("required").is_none(), "{run}");
        let answers = [
            (
                "commands_run",
                json!({"command_id": "c", "exit_code": 0, "stdout": "a\n", "stderr": ""}),
                true,
            ),
            ("commands_run", json!({"command_id": "c"}), true),
            (
                "commands_run",
                json!({"command_id": "c", "exit_code": "0"}),
                false,
            ),
            (
                "commands_connect",
                json!({"command_id": "c", "exit_code": "0"}),
                false,
            ),
            (
                "files_read",
                json!({"content": "aGk=", "encoding": "base64", "size": 2}),
                true,
            ),
            (
                "files_write",
                json!({"files": [{"path": "/a", "name": "a", "type": "file", "size": 1, "mode": "0644", "owner": null, "group": null, "modified_at": null}]}),
                true,
            ),
            ("pty_create", json!({"pty_id": "p"}), true),
            (
                "code_run",
                json!({"context_id": "x", "execution_count": null, "stdout": "", "stderr": "", "results": [{"data": {"text/plain": "2"}, "is_main_result": true}]}),
                true,
            ),
            (
                "sandbox_set_timeout",
                json!({"expires_at": "2030-01-01T00:00:00Z"}),
                true,
            ),
            ("sandbox_get_info", json!({"sandbox_id": 7}), false),
        ];
        for (name, answer, ok) in answers {
            let validator = jsonschema::draft202012::new(&output(name)).unwrap();
            assert_eq!(validator.is_valid(&answer), ok, "{name} {answer}");
        }
        assert_eq!(output("sandbox_kill"), json!({"type": "object"}));
    }

    #[test]
    fn annotations_follow_the_verbs() {
        let list = tool("sandbox_list");
        assert!(list.read_only && list.idempotent && !list.destructive);
        assert_eq!(
            Value::Object(list.annotations()),
            json!({"readOnlyHint": true})
        );
        let kill = tool("sandbox_kill");
        assert!(!kill.read_only && kill.destructive && kill.idempotent);
        assert_eq!(
            Value::Object(kill.annotations()),
            json!({"destructiveHint": true, "idempotentHint": true})
        );
        let create = tool("sandbox_create");
        assert!(!create.read_only && !create.destructive && !create.idempotent);
        let run = tool("commands_run");
        assert!(run.destructive && !run.idempotent);
        assert_eq!(
            Value::Object(run.annotations()),
            json!({"destructiveHint": true})
        );
        assert!(tool("files_upload_url").read_only, "`url` reads");
        assert!(tool("files_make_dir").idempotent && !tool("files_make_dir").destructive);
    }
}
