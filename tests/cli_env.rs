//! `ledger env ...` driven as a user drives it: outputs, exit codes, error messages.
use crate::common;

use common::schema::validates;
use common::{cli, stderr, stdout};
use std::path::Path;

const INSTANCE: &str = r#"{"size":3,"grid":["FFF","FHF","FFF"],"agents":[{"start":[0,0],"goal":[0,2]},{"start":[0,2],"goal":[0,0]}]}"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn solve_and_check_round_trip() {
    let d = tempfile::tempdir().unwrap();
    let inst = write(d.path(), "i.json", INSTANCE);
    let o = cli(&["env", "solve", &inst, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    validates("env-solve", &v);
    // Two agents swapping ends of the top row around a hole: one detours via the bottom.
    assert_eq!(v["makespan"], 6);
    assert_eq!(v["needs_coordination"], true);
    let plan = write(
        d.path(),
        "p.json",
        &serde_json::json!({ "moves": v["plan"]["moves"] }).to_string(),
    );
    let o = cli(&["env", "check", &plan, &inst, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    validates("env-check", &c);
    assert_eq!(
        (c["valid"].as_bool(), c["optimal"].as_bool()),
        (Some(true), Some(true))
    );
}

#[test]
fn check_reports_failures_with_exit_1_and_bad_input_with_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let inst = write(d.path(), "i.json", INSTANCE);
    let bad = write(d.path(), "p.txt", "agent 1: R R\nagent 2: L L\n");
    let o = cli(&["env", "check", &bad, &inst]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("vertex_conflict at t=1"),
        "{}",
        stdout(&o)
    );
    let garbled = write(d.path(), "g.txt", "agent 1: R Q\nagent 2: L\n");
    let o = cli(&["env", "check", &garbled, &inst, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    validates("env-check", &v);
    assert_eq!(v["failure"]["kind"], "parse_error");
    let malformed = write(d.path(), "m.json", r#"{"moves": ["RR", 3]}"#);
    let o = cli(&["env", "check", &malformed, &inst]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("m.json"), "{}", stderr(&o));
    let o = cli(&["env", "solve", "/nonexistent/x.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/x.json"));
    let holes = write(d.path(), "h.json", &INSTANCE.replace("\"FHF\"", "\"FHX\""));
    let o = cli(&["env", "solve", &holes]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("h.json") && stderr(&o).contains("row 1 col 2"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn generate_rejects_out_of_range_config_naming_the_field() {
    let o = cli(&["env", "generate", "--holes", "0.7", "--count", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("sizes.5.hole_ratio"), "{}", stderr(&o));
    let o = cli(&[
        "env", "generate", "--size", "4", "--count", "3", "--seed", "5", "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    validates("env-generate", &v);
    let v = v.as_array().unwrap();
    assert_eq!(v.len(), 3);
    assert!(v.iter().all(|i| i["instance"]["size"] == 4));
}

#[test]
fn suite_and_movingai_import() {
    let o = cli(&[
        "env",
        "suite",
        "--name",
        "val",
        "--per-cell",
        "2",
        "--max-size",
        "6",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    validates("env-suite", &v);
    assert_eq!(v["instances"], 8);
    assert_eq!(v["hash"].as_str().unwrap().len(), 64);
    let o = cli(&["env", "suite", "--name", "train"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("'train' for '--name"));

    let d = tempfile::tempdir().unwrap();
    let map = write(
        d.path(),
        "m.map",
        "type octile\nheight 4\nwidth 4\nmap\n....\n.@@.\n....\n....\n",
    );
    let scen = write(
        d.path(),
        "m.scen",
        "version 1\n0\tm.map\t4\t4\t0\t0\t3\t3\t6\n0\tm.map\t4\t4\t3\t3\t0\t0\t6\n",
    );
    let o = cli(&[
        "env",
        "import-movingai",
        &map,
        &scen,
        "--agents",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let inst = write(d.path(), "i.json", &stdout(&o));
    assert!(cli(&["env", "solve", &inst]).status.success());
}

#[test]
fn solve_check_and_prompt_read_what_generate_json_wrote() {
    let d = tempfile::tempdir().unwrap();
    let o = cli(&["env", "generate", "--count", "3", "--size", "4", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let items = write(d.path(), "gen.json", &stdout(&o));
    // Three instances: which one is asked for.
    let o = cli(&["env", "solve", &items]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("gen.json") && stderr(&o).contains("--index"),
        "{}",
        stderr(&o)
    );
    let o = cli(&["env", "solve", &items, "--index", "3"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let generated: serde_json::Value = serde_json::from_str(&stdout(&cli(&[
        "env", "generate", "--count", "3", "--size", "4", "--json",
    ])))
    .unwrap();
    let o = cli(&["env", "solve", &items, "--index", "1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    validates("env-solve", &v);
    // The optimum CBS finds again is the one generate recorded for that instance.
    assert_eq!(v["makespan"], generated[1]["reference"]["makespan"]);
    assert_eq!(v["sum_of_costs"], generated[1]["reference"]["sum_of_costs"]);
    let plan = write(
        d.path(),
        "p.json",
        &serde_json::json!({ "moves": v["plan"]["moves"] }).to_string(),
    );
    let o = cli(&["env", "check", &plan, &items, "--index", "1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = cli(&["env", "prompt", &items, "--index", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // An unknown prompt format is refused before the instance is read, naming the
    // option and every format there is.
    let o = cli(&["env", "prompt", &items, "--format", "poem"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("'poem' for '--format")
            && stderr(&o).contains("expected paper, compact, cells or steps"),
        "{}",
        stderr(&o)
    );
    // One generated item alone (an object with its instance inside) reads too.
    let one = write(d.path(), "one.json", &generated[0].to_string());
    assert!(cli(&["env", "solve", &one]).status.success());
}
