//! How well an `lm` checkpoint does both of its jobs (`cargo bench --bench base_model --
//! LEDGER [REF]`, REF defaulting to `main@stage0`, the base model). Prints figures;
//! asserts nothing.
//!
//! - plans: the share of greedy answers to the 2-agent validation prompts that parse
//!   (and that are valid);
//! - proposals: the share of replies to 100 held-out engineer prompts (teacher contexts
//!   from a seed the pretraining never used, rendered exactly as `current`/`base` read
//!   them, sampled as the engineer samples) that parse into a proposal, and how many
//!   distinct proposals they make.
use mapf_ledger::engineer::model::ModelEngineer;
use mapf_ledger::engineer::text::TextRevision;
use mapf_ledger::engineer::{teacher, Engineer};
use mapf_ledger::ledger::Ledger;
use mapf_ledger::seed::Seed;
use mapf_ledger::train::lm;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let Some(dir) = args.first() else {
        println!("usage: cargo bench --bench base_model -- LEDGER [REF]");
        return;
    };
    let r = args.get(1).map(String::as_str).unwrap_or("main@stage0");
    tch::set_num_threads(1);
    let mut ledger = Ledger::open_read_only(std::path::Path::new(dir)).expect("ledger");
    let plan = mapf_ledger::stage::ledger_plan(&ledger).expect("plan");
    let blob = ledger.checkpoint_of(r).expect("checkpoint");
    let ts = mapf_ledger::stage::load_state(&ledger, &blob, tch::Device::Cpu).expect("state");
    let (val, _) = mapf_ledger::stage::suites(&plan).expect("suites");
    let scored = mapf_ledger::train::eval::score_suite(
        ts.policy.as_ref(),
        &val,
        plan.train.metric,
        plan.suites.eval_batch as usize,
    );
    let parsed = scored
        .iter()
        .filter(|s| s.outcome.failure_kind() != Some(mapf_ledger::env::FailureKind::ParseError))
        .count();
    let valid = scored.iter().filter(|s| s.outcome.valid).count();
    println!(
        "plans: {parsed} of {} validation answers parse ({:.1}%), {valid} valid ({:.1}%)",
        scored.len(),
        100.0 * parsed as f64 / scored.len() as f64,
        100.0 * valid as f64 / scored.len() as f64
    );
    let policy = lm::downcast(ts.policy).expect("an lm checkpoint");
    let text = TextRevision::of_plan(&plan).expect("a plan's text revision");
    let spec = &plan.lm;
    let mut engineer = ModelEngineer {
        name: "base".into(),
        policy,
        seed: Seed::root(0),
        sampling: spec.engineer_sampling(),
        max_prompt_tokens: spec.engineer_prompt_tokens,
        // One reply per prompt: the benchmark measures how often the first one parses.
        attempts: 1,
        text,
    };
    let held_out = Seed::root(plan.seed).child("held-out engineer prompts", 0);
    let spec = mapf_ledger::stage::corpus::teacher_spec(&plan, text);
    let (mut ok, mut distinct) = (0, std::collections::BTreeSet::new());
    let n = 100;
    let t0 = std::time::Instant::now();
    for i in 0..n {
        let ctx = teacher::context(held_out.child("context", i), &spec, 1 + (i % 3) as u32);
        engineer.seed = held_out.child("reply", i);
        let d = engineer.decide(&ctx);
        if let Some(p) = &d.proposal {
            ok += 1;
            distinct.insert(serde_json::to_string(p).unwrap_or_default());
        } else if i < 3 {
            println!(
                "  unparsed reply: {:?}",
                d.reply
                    .unwrap_or_default()
                    .chars()
                    .take(160)
                    .collect::<String>()
            );
        }
    }
    println!(
        "proposals: {ok} of {n} held-out engineer prompts answered with a parseable proposal ({:.1}%), {} distinct; {:.2} s per decision",
        100.0 * ok as f64 / n as f64,
        distinct.len(),
        t0.elapsed().as_secs_f64() / n as f64
    );
}
