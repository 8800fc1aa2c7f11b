//! The ledger's JSON Schemas cover every event kind and every plan section, and the
//! JSON the CLI prints round-trips through the types they are generated from. (The
//! checked-in copies under schemas/ are compared by tests/schemas.rs.)
use mapf_ledger::ledger::Ledger;
use mapf_ledger::views::export::EventRecord;

#[test]
fn event_schema_names_every_kind_and_plan_schema_every_section() {
    let all = mapf_ledger::schemas::all();
    let schema = |name: &str| -> &str {
        let found = all.iter().find(|s| s.0 == name);
        &found.unwrap_or_else(|| panic!("no schema {name}")).1
    };
    for name in ["verify", "rebuild", "gc", "recover", "fetch"] {
        schema(name);
    }
    let event: serde_json::Value = serde_json::from_str(schema("ledger-event")).unwrap();
    let text = schema("ledger-event");
    for kind in [
        "genesis",
        "engineer_registered",
        "stage_started",
        "engineer_decision",
        "instances_generated",
        "trajectories",
        "gradient_step",
        "checkpoint_saved",
        "evaluation",
        "failure_breakdown",
        "stage_completed",
        "branch_forked",
        "replay_verified",
        "engineer_chosen",
        "grpo_stats",
        "evaluation_outcomes",
    ] {
        assert!(
            text.contains(&format!("\"{kind}\"")),
            "event schema lacks {kind}"
        );
    }
    for field in ["hash", "parent", "stage", "body", "meta"] {
        assert!(
            event["properties"].get(field).is_some(),
            "event schema lacks {field}"
        );
    }
    let plan: serde_json::Value = serde_json::from_str(schema("ledger-plan")).unwrap();
    for field in [
        "name",
        "seed",
        "policy",
        "initial_config",
        "suites",
        "warmup",
        "grpo",
        "engineer",
    ] {
        assert!(
            plan["properties"].get(field).is_some(),
            "plan schema lacks {field}"
        );
    }
    assert_eq!(
        plan["additionalProperties"], false,
        "unknown plan keys are rejected"
    );
}

#[test]
fn exported_json_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let mut l = Ledger::create(
        &tmp.path().join("l"),
        include_bytes!("../ledgers/demo.toml"),
    )
    .unwrap();
    l.projection("main").unwrap();
    let mut out = Vec::new();
    mapf_ledger::views::export::export(
        &l,
        None,
        mapf_ledger::views::export::Format::Jsonl,
        &mut out,
    )
    .unwrap();
    let rec: EventRecord =
        serde_json::from_slice(out.split(|&b| b == b'\n').next().unwrap()).unwrap();
    assert_eq!(rec.hash, l.head("main").unwrap());
    assert_eq!(rec.event(), l.event(&rec.hash).unwrap());
}
