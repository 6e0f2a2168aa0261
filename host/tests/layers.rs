//! The layers of host/src point one way (docs/architecture.md): `contract` →
//! `net` → `runtime` → `codec` → `rpc` → the application modules. This test
//! reads every source file, collects what each module uses of the crate
//! (`use` trees and paths naming `crate::`, `super::` or `self::`), and fails
//! on an import circle between sibling modules at any depth, and on a module
//! of a lower layer that uses a higher one. A module may use its ancestors
//! and its descendants (a parent and its children are one unit); test code
//! (`#[cfg(test)]`, `tests` modules) is not counted. It also fails when a
//! string of host/src code (not its doc comments) names a method, a function
//! or a notification of the contract: those come from the generated table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// Top-level modules from the bottom up; a module may use only those before it.
const LAYERS: &[&[&str]] = &[
    &["contract"],
    &["net"],
    &["runtime"],
    &["codec"],
    &["rpc"],
    &["mcp"],
    &[
        "call",
        "cli",
        "config",
        "inspect",
        "installed",
        "log",
        "manifest",
        "memory",
        "oci",
        "signing",
    ],
];

type Module = Vec<String>;

/// A use of `to` by the file at `file`.
struct Edge {
    from: Module,
    to: Module,
    file: PathBuf,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The module a source file defines (`rpc/server.rs` is `rpc::server`,
/// `rpc/mod.rs` is `rpc`); none for the binary's root.
fn module_of(path: &Path) -> Option<Module> {
    let rel = path.strip_prefix(src()).ok()?;
    let mut parts: Module = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    match parts.last().map(String::as_str) {
        Some("main") if parts.len() == 1 => return None,
        Some("lib") if parts.len() == 1 => parts.clear(),
        Some("mod") => {
            parts.pop();
        }
        _ => {}
    }
    Some(parts)
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reading host/src") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// What a file's code (not its tests, not its doc comments) holds: every
/// crate path it names, resolved against its module, and its strings.
struct Uses<'a> {
    module: &'a [String],
    found: BTreeSet<Module>,
    literals: Vec<String>,
}

impl Uses<'_> {
    /// `crate::a::b`, `super::x`, `self::y` as an absolute path, if it is one.
    fn resolve(&mut self, segments: &[String]) {
        let Some((first, rest)) = segments.split_first() else {
            return;
        };
        let mut base: Module = match first.as_str() {
            "crate" => Vec::new(),
            "self" => self.module.to_vec(),
            "super" => {
                let mut m = self.module.to_vec();
                m.pop();
                let mut rest = rest;
                while rest.first().map(String::as_str) == Some("super") {
                    m.pop();
                    rest = &rest[1..];
                }
                m.extend(rest.iter().cloned());
                self.found.insert(m);
                return;
            }
            _ => return,
        };
        base.extend(rest.iter().cloned());
        self.found.insert(base);
    }

    fn tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.resolve(prefix);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.resolve(prefix);
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.resolve(prefix),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Uses<'_> {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if !is_test(&u.attrs) {
            self.tree(&mut Vec::new(), &u.tree);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) && m.ident != "tests" {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_test(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.resolve(&segments);
        syn::visit::visit_path(self, p);
    }

    fn visit_lit_str(&mut self, s: &'ast syn::LitStr) {
        self.literals.push(s.value());
    }

    // Doc comments (and the `--help` text made of them) may name methods:
    // they are documentation, not code.
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // format!, tracing and the like: their strings are literals too.
        let text = m.tokens.to_string();
        for piece in text.split('"').skip(1).step_by(2) {
            self.literals.push(piece.to_string());
        }
        syn::visit::visit_macro(self, m);
    }
}

/// Reads every module's file of host/src (test files aside) with `Uses`.
fn each_module(mut f: impl FnMut(&Module, &Path, Uses)) {
    let mut paths = Vec::new();
    files(&src(), &mut paths);
    for path in paths {
        let Some(module) = module_of(&path) else {
            continue;
        };
        if module.last().is_some_and(|m| m == "tests") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("reading a source file");
        let file = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
        let mut uses = Uses {
            module: &module,
            found: BTreeSet::new(),
            literals: Vec::new(),
        };
        uses.visit_file(&file);
        f(&module, &path, uses);
    }
}

/// The modules of the crate, and every use of one by another.
fn graph() -> (BTreeSet<Module>, Vec<Edge>) {
    let mut paths = Vec::new();
    files(&src(), &mut paths);
    let modules: BTreeSet<Module> = paths.iter().filter_map(|p| module_of(p)).collect();
    let mut edges = Vec::new();
    each_module(|module, path, uses| {
        for used in uses.found {
            // The longest prefix that is a module: the item's own module.
            let to = (0..=used.len())
                .rev()
                .map(|n| used[..n].to_vec())
                .find(|m| modules.contains(m))
                .unwrap_or_default();
            edges.push(Edge {
                from: module.clone(),
                to,
                file: path.to_path_buf(),
            });
        }
    });
    (modules, edges)
}

/// The two sibling subtrees an edge connects (children of the lowest common
/// ancestor), or none when one end contains the other.
fn siblings(from: &[String], to: &[String]) -> Option<(Module, Module)> {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    if common == from.len() || common == to.len() {
        return None;
    }
    Some((from[..=common].to_vec(), to[..=common].to_vec()))
}

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// A cycle in `graph`, if there is one (as the modules along it).
fn cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        marks: &mut BTreeMap<Module, Mark>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let at = stack.iter().position(|m| m == node).expect("on the stack");
                let mut cycle = stack[at..].to_vec();
                cycle.push(node.clone());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.clone(), Mark::Open);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, marks, stack) {
                return Some(c);
            }
        }
        stack.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn host_src_has_no_import_circle() {
    let (_, edges) = graph();
    let mut between: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    let mut why: BTreeMap<(Module, Module), BTreeSet<String>> = BTreeMap::new();
    for e in &edges {
        if let Some((a, b)) = siblings(&e.from, &e.to) {
            between.entry(a.clone()).or_default().insert(b.clone());
            let file = e.file.strip_prefix(src()).unwrap_or(&e.file);
            why.entry((a, b)).or_default().insert(format!(
                "{} uses {}",
                file.display(),
                name(&e.to)
            ));
        }
    }
    if let Some(cycle) = cycle(&between) {
        let steps: Vec<String> = cycle
            .windows(2)
            .map(|w| {
                let because = why[&(w[0].clone(), w[1].clone())]
                    .iter()
                    .next()
                    .cloned()
                    .unwrap_or_default();
                format!("  {} -> {} ({because})", name(&w[0]), name(&w[1]))
            })
            .collect();
        panic!("an import circle in host/src:\n{}", steps.join("\n"));
    }
}

#[test]
fn lower_layers_never_use_higher_ones() {
    let (modules, edges) = graph();
    let layer = |m: &[String]| {
        let top = m.first()?;
        LAYERS.iter().position(|l| l.contains(&top.as_str()))
    };
    for m in modules.iter().filter(|m| m.len() == 1) {
        assert!(
            layer(m).is_some(),
            "host/src/{} is in no layer: add it to LAYERS and to docs/architecture.md",
            name(m)
        );
    }
    let mut wrong = BTreeSet::new();
    for e in &edges {
        let (Some(from), Some(to)) = (layer(&e.from), layer(&e.to)) else {
            continue;
        };
        if to > from {
            let file = e.file.strip_prefix(src()).unwrap_or(&e.file);
            wrong.insert(format!("{} uses {}", file.display(), name(&e.to)));
        }
    }
    assert!(
        wrong.is_empty(),
        "lower layers use higher ones:\n  {}",
        wrong.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}

#[test]
fn the_check_sees_a_circle() {
    let m = |s: &str| s.split("::").map(String::from).collect::<Module>();
    let graph: BTreeMap<Module, BTreeSet<Module>> = [
        (m("a"), [m("b")].into()),
        (m("b"), [m("c")].into()),
        (m("c"), [m("a")].into()),
    ]
    .into();
    assert_eq!(cycle(&graph).map(|c| c.len()), Some(4));
    assert_eq!(
        siblings(&m("rpc::codec::mod"), &m("rpc::methods")),
        Some((m("rpc::codec"), m("rpc::methods")))
    );
    assert_eq!(siblings(&m("rpc::server"), &m("rpc")), None);
    let acyclic: BTreeMap<Module, BTreeSet<Module>> =
        [(m("a"), [m("b")].into()), (m("b"), BTreeSet::new())].into();
    assert_eq!(cycle(&acyclic), None);
}

/// Every name the contract gives a method, a function that serves one, or a
/// notification of one: host/src must not spell any of them (the generated
/// table does, from wit/).
fn contract_names() -> BTreeSet<String> {
    use epp_host::contract::table::{Answer, Items, METHODS};
    let mut names = BTreeSet::new();
    for m in METHODS {
        names.insert(m.name.to_string());
        names.insert(m.function.to_string());
        let Some(s) = m.stream else { continue };
        names.extend(s.note.iter().chain(s.input.iter()).map(|n| n.to_string()));
        for c in s.callees {
            names.insert(c.function.to_string());
            if let Answer::Events {
                items: Items::Cases(cases),
                ..
            } = c.answer
            {
                names.extend(cases.iter().filter_map(|c| c.note).map(str::to_string));
            }
        }
    }
    names
}

/// Whether `text` holds `name` as a word of its own (not inside a longer name).
fn holds(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

#[test]
fn host_src_names_no_epp_method() {
    let names = contract_names();
    assert!(
        names.contains("commands.run") && names.contains("commands-kill"),
        "{names:?}"
    );
    let mut found = BTreeSet::new();
    each_module(|_, path, uses| {
        for literal in uses.literals {
            for name in names.iter().filter(|n| holds(&literal, n)) {
                let file = path.strip_prefix(src()).unwrap_or(path);
                found.insert(format!("{}: {name:?} in {literal:?}", file.display()));
            }
        }
    });
    assert!(
        found.is_empty(),
        "host/src names what the contract names (take it from contract::table):\n  {}",
        found.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}

#[test]
fn the_name_check_sees_a_name() {
    assert!(holds("call commands-kill first", "commands-kill"));
    assert!(holds("\"files.write_chunk\"", "files.write_chunk"));
    assert!(!holds("files.write_chunk", "files.write"));
    assert!(!holds("my-commands-kill", "commands-kill"));
}
