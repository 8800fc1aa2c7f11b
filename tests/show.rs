//! `show` reads well by default (issue 52, item 5): a stage is a summary in the paper's
//! layout, the projection is behind `--json`, and that JSON names its fields.
use crate::common;

use common::{json, ledger, ok, schema::validates, tiny_ledger};

#[test]
fn show_a_stage_is_a_summary_and_its_json_names_every_field() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());
    let text = ok(&ledger(&d, &["show", "main@stage2"]));
    for word in [
        "main@stage2",
        "status     completed",
        "engineer   fixed",
        "training   ",
        "checkpoint ",
        "config     2 agents",
        "validation (valid % / optimal %)",
        "test (valid % / optimal %)",
        "Sum",
    ] {
        assert!(text.contains(word), "{word:?} missing from:\n{text}");
    }
    assert!(
        text.lines().count() < 80 && !text.contains('{') && !text.contains('['),
        "not a summary:\n{text}"
    );

    let s = json(&ledger(&d, &["show", "main@stage2", "--json"]));
    validates("show-stage", &s);
    let cp = &s["stage"]["checkpoint"];
    assert!(
        cp["blob"].is_string() && cp["params"].is_string() && cp["step"].is_u64(),
        "{cp}"
    );
    // No tuple anywhere: every array holds objects, strings or numbers, never arrays.
    fn no_nested_arrays(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Array(a) => a.iter().all(|x| !x.is_array() && no_nested_arrays(x)),
            serde_json::Value::Object(o) => o.values().all(no_nested_arrays),
            _ => true,
        }
    }
    assert!(no_nested_arrays(&s), "{s}");
    common::fork(&d, "stage2", "random", "r");
    let b = json(&ledger(&d, &["show", "r", "--json"]));
    validates("show-branch", &b);
    assert_eq!(b["state"]["forked_from"]["branch"], "main", "{b}");
    assert!(no_nested_arrays(&b), "{b}");

    // compare --json: named fields too.
    let c = json(&ledger(&d, &["compare", "main", "r", "--json"]));
    validates("compare", &c);
    assert!(no_nested_arrays(&c), "{c}");
    let v = &c[0]["validation"][0];
    assert!(
        v["stage"].is_u64() && v["valid"].is_f64() && v["optimal"].is_f64(),
        "{v}"
    );
    assert!(c[0]["test_cells"][0]["agents"].is_u64(), "{c}");
    assert_eq!(c[1]["engineers"][0]["stage"], 1, "{c}");
}
