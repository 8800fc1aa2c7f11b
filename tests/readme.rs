//! The README's newcomer path works as written: the commands of its "## The loop"
//! block (init, run, log, show, audit, fork, run the fork, compare, verify, report) run
//! one by one, in that order, on a tiny plan instead of the demo's, and each succeeds.
//! Every path the README and ledgers/results/FINDINGS.md cite exists.
use crate::common;
use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The lines of the first fenced block after `heading`.
fn block_after(text: &str, heading: &str) -> Vec<String> {
    let at = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("the README has no {heading:?}"));
    let rest = &text[at..];
    let open = rest.find("```").expect("a fenced block");
    let body = &rest[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let close = body.find("```").expect("the block closes");
    body[..close]
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_readmes_loop_runs_as_written() {
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let lines = block_after(&readme, "## The loop");
    assert!(lines.len() >= 8, "{lines:?}");
    let needed = [
        "init", "run", "show", "audit", "fork", "compare", "verify", "report",
    ];
    for cmd in needed {
        assert!(
            lines
                .iter()
                .any(|l| l.split_whitespace().nth(1) == Some(cmd)),
            "the loop has no `ledger {cmd}`: {lines:?}"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let plan = format!("{ROOT}/tests/plans/lm-tiny.toml");
    for line in &lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], "ledger", "{line}");
        let args: Vec<String> = words[1..]
            .iter()
            .map(|w| {
                if *w == "ledgers/demo.toml" {
                    plan.clone()
                } else {
                    w.to_string()
                }
            })
            .collect();
        // From a directory of its own, as from a checkout's root: `ledgers/default`
        // (the default ledger) and the report's `--out` land there.
        let o = Command::new(env!("CARGO_BIN_EXE_ledger"))
            .args(&args)
            .current_dir(tmp.path())
            .env_remove("LEDGER")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "`{line}` failed ({:?}):\n{}",
            o.status.code(),
            common::text(&o)
        );
    }
    assert!(tmp.path().join("ledgers/default").is_dir());
}

/// Every repository path in backquotes in the README and the findings exists (results
/// files over 8 KB are compressed, so their names end in `.xz`).
#[test]
fn every_path_the_readme_and_findings_cite_exists() {
    for doc in [
        "README.md",
        "ledgers/results/FINDINGS.md",
        "ledgers/README.md",
    ] {
        let text = std::fs::read_to_string(format!("{ROOT}/{doc}")).unwrap();
        let base = Path::new(doc).parent().unwrap();
        let mut missing = Vec::new();
        for (i, quoted) in text.split('`').enumerate() {
            if i % 2 == 0 {
                continue;
            }
            let p = quoted.trim();
            let looks_like_path = p.starts_with("ledgers/")
                || p.starts_with("tools/")
                || p.starts_with("tests/")
                || p.starts_with("src/")
                || p.starts_with("schemas/");
            if !looks_like_path || p.contains(['*', ' ', '<', '{', '$']) || p.contains("NAME") {
                continue;
            }
            // Ledger stores and run outputs named in commands are not in the tree.
            let root = Path::new(ROOT);
            if !(root.join(p).exists() || root.join(base).join(p).exists() || generated(p)) {
                missing.push(p.to_string());
            }
        }
        assert!(
            missing.is_empty(),
            "{doc} cites paths that do not exist: {missing:?}"
        );
    }
}

/// Paths a command writes (ledger stores, reports, exported models), not tracked files.
fn generated(p: &str) -> bool {
    let first = p
        .trim_start_matches("ledgers/")
        .split('/')
        .next()
        .unwrap_or("");
    let tracked_dirs = ["models", "results", "cards", "pilots"];
    p.starts_with("ledgers/")
        && !p.ends_with(".toml")
        && !p.ends_with(".md")
        && !tracked_dirs.contains(&first)
}
