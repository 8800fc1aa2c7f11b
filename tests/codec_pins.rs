//! Pinned hashes guard the encodings everything hashed goes through: a plan's canonical
//! encoding (its `plan_hash`) and the genesis event built from it. Changing a plan type,
//! the codec or the event layout changes them, and every existing ledger would then
//! stop replaying and fetching: such a change must be a deliberate, versioned one
//! (update these pins in the same commit and say why).
use mapf_ledger::ledger::Ledger;
use mapf_ledger::plan::LedgerPlan;

const TINY: &str = include_str!("plans/tiny.toml");

#[test]
fn the_plan_and_genesis_hashes_of_a_fixed_plan_do_not_move() {
    let plan = LedgerPlan::parse(TINY.as_bytes()).unwrap();
    assert_eq!(
        plan.hash().to_hex().as_str(),
        "7e07a2c90c2349fcbbb2c11458fa26d8f009343a3a65ad0fe0703710a6c56083",
        "the plan's canonical encoding changed"
    );
    let d = tempfile::tempdir().unwrap();
    let l = Ledger::create(&d.path().join("l"), TINY.as_bytes()).unwrap();
    assert_eq!(
        l.head("main").unwrap().to_hex().as_str(),
        "c3828ea2d602bf112dfc2d3c32c8acf3748052d33d9f58d91f5d863b476e9c26",
        "the genesis event's encoding changed"
    );
}
