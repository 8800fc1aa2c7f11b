//! The workspace's structure: imports point down and never go round in a circle.
//!
//! Between crates the compiler keeps the direction (`ledger-store` and `mapf-testbed`
//! below `ledger-core`, which is below the application; none of the three lower ones
//! links tch). Inside a crate it allows anything, so this test reads every `crate::…`
//! and `super::…` path in the sources and checks two things:
//! - **layers**: a top-level module of `ledger-core` or of the application only uses
//!   the ones listed before it (the `ledger` binary's private `cli` is the application's
//!   top);
//! - **circles**: no two modules (files, or directories taken whole below the second
//!   level) use each other, directly or round a longer loop, in any crate. A module's
//!   use of its own parent (the `mod.rs` facade it lives under) is not an edge.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `ledger-core`'s top-level modules, bottom to top. A module may use the ones before it.
const CORE_LAYERS: &[&str] = &[
    "output",  // output files named on the command line: checked first, written whole
    "plan",    // plan files and every config type in them, the trainer's too
    "record",  // events, the trainer's records, checkpoint headers, projections
    "ledger",  // the Ledger: open, facts, references, projections, verify, gc, bundles, recover
    "context", // the five context modules every engineer reads
    "figures", // SVG/PNG figures
    "views",   // what read commands show
    "report",  // the HTML report and the live page
];

/// The application's top-level modules, bottom to top.
const APP_LAYERS: &[&str] = &[
    "interrupt",  // what a signal does to a command
    "train",      // policies, GRPO, evaluation, checkpoints
    "engineer",   // environment engineers, their prompt and replies, the benchmark
    "stage",      // the stage pipeline, model loading
    "replay",     // forks and replay verification
    "executor",   // where study runs execute
    "study",      // counterfactual studies
    "plan_check", // a plan's memory and budgets before it runs
    "schemas",    // every JSON Schema
    "diagnosis",  // what an error's source chain says: damaged? which remedy?
    "cli",        // the `ledger` binary's commands (declared by main.rs only)
];

/// One crate's sources: its root directory and its layers (empty: circles only).
struct Crate {
    name: &'static str,
    root: PathBuf,
    layers: &'static [&'static str],
    /// Directories under `root` that belong to other crates.
    skip: &'static [&'static str],
}

fn crates() -> Vec<Crate> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    vec![
        Crate {
            name: "mapf-ledger",
            root: src.clone(),
            layers: APP_LAYERS,
            skip: &["core", "store", "testbed"],
        },
        Crate {
            name: "ledger-core",
            root: src.join("core"),
            layers: CORE_LAYERS,
            skip: &[],
        },
        Crate {
            name: "ledger-store",
            root: src.join("store"),
            layers: &[],
            skip: &[],
        },
        Crate {
            name: "mapf-testbed",
            root: src.join("testbed"),
            layers: &[],
            skip: &["tests"],
        },
    ]
}

fn rust_files(dir: &Path, skip: &[&str], top: bool, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if p.is_dir() {
            if !(top && skip.contains(&name.as_str())) {
                rust_files(&p, skip, false, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a source file: `cli/store.rs` -> [cli, store]; the crate root
/// (`lib.rs`, `main.rs`) is [].
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

/// The module path (within the crate) a path names from `module`: `crate::x::y::Z` is
/// [x, y, Z]; `super::…` climbs from the module. None for other crates' paths.
fn target(path: &str, module: &[String]) -> Option<Vec<String>> {
    let mut segs = path.split("::").filter(|s| !s.is_empty());
    let first = segs.next()?;
    if first == "crate" {
        return Some(segs.map(str::to_string).collect());
    }
    let mut at = module.to_vec();
    let mut seg = Some(first);
    while seg == Some("super") {
        at.pop();
        seg = segs.next();
    }
    at.extend(seg.map(str::to_string));
    at.extend(segs.map(str::to_string));
    Some(at)
}

/// Every `crate::…`/`super::…` path of a file, outside comments.
fn paths_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap();
        let bytes = code.as_bytes();
        for start in ["crate::", "super::"] {
            let mut from = 0;
            while let Some(i) = code[from..].find(start) {
                let i = from + i;
                from = i + start.len();
                if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
                    continue;
                }
                let end = code[i..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .map_or(code.len(), |e| i + e);
                out.push(code[i..end].to_string());
            }
        }
    }
    out
}

/// The graph of a crate: nodes are modules cut to two levels (`train::lm::model` is
/// `train::lm`); edges `(from, to) -> files`, without a module's uses of itself or of
/// an ancestor (its facade).
type Graph = BTreeMap<(String, String), BTreeSet<String>>;

fn graph(c: &Crate) -> (BTreeSet<String>, Graph) {
    let mut files = Vec::new();
    rust_files(&c.root, c.skip, true, &mut files);
    let mut modules: BTreeSet<Vec<String>> = BTreeSet::new();
    for f in &files {
        let m = module_path(f.strip_prefix(&c.root).unwrap());
        for k in 1..=m.len().min(2) {
            modules.insert(m[..k].to_vec());
        }
    }
    let node = |m: &[String]| -> Option<Vec<String>> {
        // The longest known module a path starts with (an item path ends in an item).
        (1..=m.len().min(2))
            .rev()
            .map(|k| m[..k].to_vec())
            .find(|p| modules.contains(p))
    };
    let mut edges = Graph::new();
    for f in &files {
        let rel = f.strip_prefix(&c.root).unwrap().to_path_buf();
        let module = module_path(&rel);
        let Some(from) = node(&module) else { continue };
        let text = std::fs::read_to_string(f).unwrap();
        for p in paths_in(&text) {
            let Some(t) = target(&p, &module) else {
                continue;
            };
            let Some(to) = node(&t) else { continue };
            if to == from || from.starts_with(&to) {
                continue;
            }
            edges
                .entry((from.join("::"), to.join("::")))
                .or_default()
                .insert(rel.display().to_string());
        }
    }
    (modules.iter().map(|m| m.join("::")).collect(), edges)
}

#[test]
fn imports_between_top_level_modules_only_point_down() {
    let mut up = Vec::new();
    for c in crates().iter().filter(|c| !c.layers.is_empty()) {
        let rank = |m: &str| c.layers.iter().position(|l| *l == m);
        let (_, edges) = graph(c);
        for ((from, to), files) in edges {
            let top = |m: &str| m.split("::").next().unwrap().to_string();
            let (f, t) = (top(&from), top(&to));
            if f == t {
                continue;
            }
            let (Some(rf), Some(rt)) = (rank(&f), rank(&t)) else {
                panic!("{}: module {f} or {t} has no layer", c.name);
            };
            if rt > rf {
                up.push(format!(
                    "{}: {from} -> {to} in {}",
                    c.name,
                    files.into_iter().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    assert!(
        up.is_empty(),
        "imports that point up the layers:\n{}",
        up.join("\n")
    );
}

/// Strongly connected components of more than one node (Tarjan).
fn circles(nodes: &BTreeSet<String>, edges: &Graph) -> Vec<Vec<String>> {
    let ids: BTreeMap<&String, usize> = nodes.iter().enumerate().map(|(i, n)| (n, i)).collect();
    let names: Vec<&String> = nodes.iter().collect();
    let mut adj = vec![Vec::new(); nodes.len()];
    for (a, b) in edges.keys() {
        adj[ids[a]].push(ids[b]);
    }
    struct T {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(v: usize, adj: &[Vec<usize>], t: &mut T) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &adj[v] {
            match t.index[w] {
                None => {
                    visit(w, adj, t);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(i) if t.on[w] => t.low[v] = t.low[v].min(i),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let n = nodes.len();
    let mut t = T {
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(v, &adj, &mut t);
        }
    }
    t.out
        .into_iter()
        .map(|c| {
            let mut c: Vec<String> = c.into_iter().map(|i| names[i].clone()).collect();
            c.sort();
            c
        })
        .collect()
}

#[test]
fn no_two_modules_use_each_other() {
    let mut found = Vec::new();
    for c in crates() {
        let (nodes, edges) = graph(&c);
        for circle in circles(&nodes, &edges) {
            let members: BTreeSet<&String> = circle.iter().collect();
            let how: Vec<String> = edges
                .iter()
                .filter(|((a, b), _)| members.contains(a) && members.contains(b))
                .map(|((a, b), files)| {
                    format!(
                        "{a} -> {b} ({})",
                        files.iter().cloned().collect::<Vec<_>>().join(", ")
                    )
                })
                .collect();
            found.push(format!("{}: {}", c.name, how.join("; ")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn every_top_level_module_has_a_layer() {
    for c in crates().iter().filter(|c| !c.layers.is_empty()) {
        let (nodes, _) = graph(c);
        let declared: BTreeSet<&str> = nodes
            .iter()
            .filter(|n| !n.contains("::"))
            .map(String::as_str)
            .collect();
        let layered: BTreeSet<&str> = c.layers.iter().copied().collect();
        assert_eq!(
            declared, layered,
            "{}: its modules and this test's layers differ",
            c.name
        );
    }
}

#[test]
fn the_checkers_see_an_upward_edge_and_a_circle() {
    // `super::super::views::x` from src/train/lm/model.rs stays inside train; `crate::views`
    // and `super::views` from a top-level file name views.
    let m = module_path(Path::new("train/lm/model.rs"));
    assert_eq!(target("super::super::views::x", &m).unwrap()[0], "train");
    assert_eq!(target("crate::views::x", &m).unwrap()[0], "views");
    let top = module_path(Path::new("study.rs"));
    assert_eq!(target("super::views::study", &top).unwrap()[0], "views");
    // A loop of three is one circle; a chain is none.
    let nodes: BTreeSet<String> = ["a", "b", "c", "d"].map(String::from).into();
    let mut edges = Graph::new();
    for (x, y) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        edges.insert((x.into(), y.into()), BTreeSet::new());
    }
    assert_eq!(circles(&nodes, &edges), vec![vec!["a", "b", "c"]]);
    edges.remove(&("c".to_string(), "a".to_string()));
    assert!(circles(&nodes, &edges).is_empty());
}

/// Every `.rs` file under `src/`, with its path relative to the repository root.
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The files (and lines) where `needle` occurs, outside `allowed`.
fn occurrences(needle: &str, allowed: &[&str]) -> Vec<String> {
    sources()
        .iter()
        .filter(|(path, _)| !allowed.contains(&path.as_str()))
        .flat_map(|(path, text)| {
            text.lines()
                .enumerate()
                .filter(|(_, l)| l.contains(needle))
                .map(move |(i, l)| format!("{path}:{}: {}", i + 1, l.trim()))
        })
        .collect()
}

/// A device name (`cpu`, `cuda`, `cuda:N`) is read by one function, `DeviceSpec`'s
/// `FromStr` in the plan's trainer settings: the command line's `--device` options
/// are typed with it, a plan's `[train] device` deserialises into it, and nothing
/// else takes a device as a string.
#[test]
fn device_names_are_parsed_in_one_place() {
    const PARSER: &str = "src/core/plan/trainer.rs";
    let mut found = Vec::new();
    for needle in [
        "strip_prefix(\"cuda",
        "fn parse_device",
        "parse_device(",
        "parse_device_name",
        "device: String,",
        "device: Option<String>,",
        "device: &str,",
        "device: Option<&str>",
    ] {
        found.extend(occurrences(needle, &[PARSER]));
    }
    // Recorded metadata and the memory plan's report keep the name as text.
    found.retain(|l| {
        !l.starts_with("src/core/record/")
            && !l.starts_with("src/core/views/")
            && !l.starts_with("src/replay/setup.rs:") // the recorded setup's device, compared as text
            && !l.starts_with("src/plan_check.rs:") // MemoryPlan's `device`, a report field
    });
    assert!(
        found.is_empty(),
        "device names parsed or passed as text outside {PARSER}:\n{}",
        found.join("\n")
    );
    assert_eq!(
        occurrences("impl std::str::FromStr for DeviceSpec", &[]).len(),
        1,
        "one parser of device names"
    );
}

/// An engineer spec (`NAME[+engineer-rl][:±module…]`) is parsed by one function,
/// `EngineerSpec::parse` (behind `FromStr`), at the edge: the pipeline, the factory,
/// forks, studies and replays take an `EngineerSpec`.
#[test]
fn engineer_specs_are_parsed_in_one_place() {
    const PARSER: &str = "src/engineer/mod.rs";
    let mut found = occurrences("EngineerSpec::parse(", &[PARSER]);
    found.extend(occurrences("spec_label(", &[]));
    found.extend(occurrences("strip_suffix(rl::SUFFIX", &[PARSER]));
    found.extend(occurrences("strip_suffix(crate::engineer::rl::SUFFIX", &[]));
    assert!(
        found.is_empty(),
        "engineer specs parsed outside {PARSER}:\n{}",
        found.join("\n")
    );
    // The factory and the pipeline take the typed spec, not a name.
    for (needle, file) in [
        ("spec: &EngineerSpec,", PARSER),
        ("FnMut(&EngineerSpec,", "src/stage/mod.rs"),
    ] {
        assert!(
            !occurrences(needle, &[]).is_empty(),
            "{file} no longer takes an EngineerSpec ({needle})"
        );
    }
}

/// The built-in engineers are listed once, in `engineer::BUILTINS`; help texts and
/// messages read it. A prose or string list of three or more built-in names anywhere
/// else under src/ is a second list that can drift.
#[test]
fn engineer_names_are_listed_only_by_the_registry() {
    const REGISTRY: &str = "src/engineer/mod.rs";
    let registry = sources()
        .into_iter()
        .find(|(p, _)| p == REGISTRY)
        .unwrap()
        .1;
    let block = &registry[registry.find("pub const BUILTINS").unwrap()..];
    let block = &block[..block.find("];").unwrap()];
    let names: Vec<&str> = block
        .split("name: \"")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
        .collect();
    assert!(names.len() >= 4, "read the registry's names: {names:?}");
    // Words of a line, split at anything but letters, digits, `_` and `-`, with the
    // separators between them: a list is three names in a row joined by `,` or `/`
    // (and optionally "or"/"and").
    let mut found = Vec::new();
    for (path, text) in sources() {
        if path == REGISTRY {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            let mut run = 0;
            let mut best = 0;
            // After "or"/"and" following a `,` (or nothing), the next name still joins.
            let mut carried = false;
            let mut rest = line;
            while !rest.is_empty() {
                let start = rest
                    .find(|c: char| c.is_alphanumeric() || c == '_' || c == '-')
                    .unwrap_or(rest.len());
                let sep = rest[..start].trim();
                rest = &rest[start..];
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
                    .unwrap_or(rest.len());
                let word = &rest[..end];
                rest = &rest[end..];
                if word.is_empty() {
                    break;
                }
                if word == "or" || word == "and" {
                    carried = sep == "," || sep == "/" || sep.is_empty();
                    continue;
                }
                let joined = sep == "," || sep == "/" || (carried && sep.is_empty());
                carried = false;
                if names.contains(&word) {
                    run = if joined && run > 0 { run + 1 } else { 1 };
                    best = best.max(run);
                } else {
                    run = 0;
                }
            }
            if best >= 3 {
                found.push(format!("{path}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "engineer names listed by hand outside {REGISTRY} (derive them from BUILTINS):\n{}",
        found.join("\n")
    );
}

/// Cargo's discovery of test files is off (`autotests = false`): the integration tests are
/// one binary, `tests/integration.rs`, so a file in `tests/` that it does not declare
/// would never be compiled or run. Every one is declared.
#[test]
fn every_test_file_is_a_module_of_the_integration_binary() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let root = std::fs::read_to_string(tests.join("integration.rs")).unwrap();
    let declared: BTreeSet<String> = root
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect();
    let files: BTreeSet<String> = std::fs::read_dir(&tests)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().to_string())
        .filter(|n| n != "integration")
        .collect();
    let missing: Vec<_> = files.difference(&declared).collect();
    assert!(
        missing.is_empty(),
        "tests/integration.rs does not declare {missing:?}: add `mod NAME;` for each"
    );
    assert!(declared.contains("common") && declared.contains("layering"));
}

/// Library errors are typed (issue 52, item 3): the ledger wraps the store's error
/// instead of copying its variants, the CLI has one path from any library error to an
/// exit code and hint, and no error is a `String` (`Result<_, String>`, or a stage error
/// made of another error's text).
#[test]
fn errors_are_typed_and_rendered_in_one_place() {
    let file = |p: &str| {
        sources()
            .into_iter()
            .find(|(path, _)| path == p)
            .unwrap_or_else(|| panic!("{p} is gone"))
            .1
    };
    // LedgerError declares no variant the store's error already has (`Corrupt` stays:
    // the record-level corruption ledger-core finds in bytes the store kept intact).
    let ledger = file("src/core/ledger/mod.rs");
    let decl = &ledger[ledger
        .find("pub enum LedgerError")
        .expect("LedgerError is declared in src/core/ledger/mod.rs")..];
    let decl = &decl[..decl.find("\n}\n").expect("the enum ends")];
    assert!(decl.contains("Store(#[from] ledger_store::StoreError)"));
    for variant in [
        "Io {",
        "Locked {",
        "Damaged {",
        "BadBranchName {",
        "MissingBlob {",
        "NotALedger {",
        "ReadOnly,",
        "UnknownEvent {",
        "BranchExists {",
        "Invalid(",
    ] {
        assert!(
            !decl.contains(&format!("    {variant}")),
            "LedgerError copies the store's `{variant}`: wrap it (LedgerError::Store)"
        );
    }
    assert!(
        !ledger.contains("impl From<ledger_store::StoreError> for LedgerError"),
        "a hand-written conversion of the store's errors (#[from] on Store does it)"
    );
    // One path from library errors to the contract's exit codes.
    let impls = occurrences("for CliError {", &[]);
    assert_eq!(
        impls
            .iter()
            .filter(|l| l.contains("impl<E: std::error::Error + 'static> From<E> for CliError"))
            .count(),
        1,
        "{impls:?}"
    );
    let damage = occurrences("impl Damage for", &[]);
    assert!(
        damage.is_empty(),
        "per-type exit code mappings:\n{}",
        damage.join("\n")
    );
    // No `Result<_, String>` anywhere in the library or the binary: an error is a type
    // that keeps its cause as a `source()`, not a message.
    let stringly = occurrences(", String>", &[])
        .into_iter()
        .filter(|l| l.contains("Result<"))
        .collect::<Vec<_>>();
    assert!(
        stringly.is_empty(),
        "errors as strings:\n{}",
        stringly.join("\n")
    );
    // No stage error built from another error's text (`StageError::X(e.to_string())`):
    // the stage keeps what failed as a source, where the CLI finds the ledger's errors.
    let stage = occurrences("StageError::", &[])
        .into_iter()
        .filter(|l| l.contains(".to_string()"))
        .collect::<Vec<_>>();
    assert!(
        stage.is_empty(),
        "stage errors built from text:\n{}",
        stage.join("\n")
    );
}

/// Engineer text revision numbers are known in one room, `src/engineer/text/`
/// (`TextRevision::of`): everything else asks a `TextRevision` for a named feature.
/// Outside it (and the plan, which reads the number from its file and bounds it) no
/// code compares a revision with a number, matches on one, carries one as a `u32`, or
/// keeps a second `X_revision` function beside `X`.
#[test]
fn revision_numbers_are_known_only_to_the_engineer_text() {
    const ROOM: &str = "src/engineer/text/";
    const PLAN: &str = "src/core/plan/";
    let mut found = Vec::new();
    for (path, text) in sources() {
        if path.starts_with(ROOM) || path.starts_with(PLAN) {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            if revision_number_use(code) {
                found.push(format!("{path}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "revision numbers used outside {ROOM} (ask a TextRevision for its feature):\n{}",
        found.join("\n")
    );
}

/// Whether a line of code uses a revision number: an identifier ending in `revision`
/// compared with a number or matched on, a `revision: u32`, or a call or definition
/// of a function named `…_revision`.
fn revision_number_use(code: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(i) = code[from..].find("revision") {
        let at = from + i;
        let end = at + "revision".len();
        from = end;
        if code[end..].starts_with(|c: char| ident(c)) {
            continue; // `revisions`, `revision_2_...`
        }
        let start = code[..at]
            .rfind(|c: char| !(ident(c) || c == '.'))
            .map_or(0, |s| s + 1);
        let rest = code[end..].trim_start();
        let before = code[..start].trim_end();
        let compared = ["==", "!=", ">=", "<=", ">", "<"].iter().any(|op| {
            rest.strip_prefix(op)
                .is_some_and(|r| r.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        }) || ["==", "!=", ">=", "<=", ">", "<"].iter().any(|op| {
            before.strip_suffix(op).is_some_and(|b| {
                b.trim_end()
                    .ends_with(|c: char| c.is_ascii_digit() || c == ')')
            })
        });
        let matched = before.ends_with("match");
        let typed = rest.starts_with(": u32") || rest.starts_with(": Option<u32>");
        let function =
            code[start..at].ends_with('_') && rest.starts_with('(') && !rest.starts_with("()");
        if compared || matched || typed || function {
            return true;
        }
    }
    false
}

#[test]
fn the_revision_check_sees_numbers_and_not_features() {
    for bad in [
        "if revision >= 5 {",
        "let x = spec.revision < 4;",
        "match self.revision {",
        "pub revision: u32,",
        "fn answer_revision(ctx: &C) {",
        "build_revision(ctx, &[], None, c, 1)",
        "if 2 <= revision {",
    ] {
        assert!(revision_number_use(bad), "{bad}");
    }
    for fine in [
        "if text.weakest_first {",
        "let revision = plan.engineer.revision;",
        "TextRevision::of(revision)",
        "fn revision_2_answers_the_evidence() {",
        "fn teacher_examples_are_pinned_per_revision() {",
        "\"engineer.revision\",",
    ] {
        assert!(!revision_number_use(fine), "{fine}");
    }
}
