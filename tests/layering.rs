//! The application crate's layering: imports between its top-level modules only point
//! down. The two crates below it (`ledger-store`, `mapf-testbed`) are kept apart by the
//! compiler (they do not depend on this crate or on tch); inside this crate the compiler
//! allows cycles, so this test reads every `crate::…` and `super::…` path in `src/` and
//! fails on an edge that points up, naming the file.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules, bottom to top. A module may use the ones before it.
const LAYERS: &[&str] = &[
    "record",   // events, the trainer's records, metadata, projections
    "train",    // policies, GRPO, evaluation
    "plan",     // plan files, embedding the trainer's and generator's configs
    "ledger",   // the Ledger: store + record, verify, gc, bundles, recover
    "engineer", // environment engineers and their context
    "stage",    // the stage pipeline
    "replay",   // forks and replay verification
    "executor", // where study runs execute
    "study",    // counterfactual studies
    "figures",  // SVG/PNG figures
    "views",    // what commands print
    "report",   // the HTML report
    "schemas",  // every JSON Schema
    "cli",      // the `ledger` binary's commands
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a source file: `src/cli/store.rs` -> [cli, store].
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    parts
}

/// The top-level module a path names from `file`'s module, if any: `crate::x::…` is x;
/// `super::…` climbs from the file's module.
fn target(path: &str, module: &[String]) -> Option<String> {
    let mut segs = path.split("::");
    let first = segs.next()?;
    if first == "crate" {
        return segs.next().map(str::to_string);
    }
    let mut at = module.to_vec();
    let mut seg = Some(first);
    while seg == Some("super") {
        at.pop();
        seg = segs.next();
    }
    match at.first() {
        Some(top) => Some(top.clone()),
        None => seg.map(str::to_string),
    }
}

/// Edges `(from, to) -> files` between top-level modules, outside comments.
fn edges(src: &Path) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap().to_path_buf();
        let module = module_path(&rel);
        let top = module[0].clone();
        if !LAYERS.contains(&top.as_str()) {
            continue; // lib.rs, main.rs, and the workspace's other crates
        }
        let text = std::fs::read_to_string(&f).unwrap();
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
                    if let Some(t) = target(&code[i..end], &module) {
                        if t != top && LAYERS.contains(&t.as_str()) {
                            out.entry((top.clone(), t))
                                .or_default()
                                .insert(rel.display().to_string());
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn imports_between_top_level_modules_only_point_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m).unwrap();
    let mut up = Vec::new();
    for ((from, to), files) in edges(&src) {
        if rank(to.as_str()) > rank(from.as_str()) {
            up.push(format!(
                "{from} -> {to} in {}",
                files.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    assert!(
        up.is_empty(),
        "imports that point up the layers {LAYERS:?}:\n{}",
        up.join("\n")
    );
}

#[test]
fn every_top_level_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let declared: BTreeSet<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    let layered: BTreeSet<&str> = LAYERS.iter().copied().collect();
    assert_eq!(
        declared, layered,
        "src/lib.rs's modules and this test's LAYERS differ"
    );
}

#[test]
fn the_checker_sees_an_upward_edge() {
    // `super::super::…` from src/train/lm/model.rs stays inside train; `crate::views` and
    // `super::views` from a top-level file name views.
    let m = module_path(Path::new("train/lm/model.rs"));
    assert_eq!(
        target("super::super::views::x", &m).as_deref(),
        Some("train")
    );
    assert_eq!(target("crate::views::x", &m).as_deref(), Some("views"));
    let top = module_path(Path::new("study.rs"));
    assert_eq!(
        target("super::views::study", &top).as_deref(),
        Some("views")
    );
}
