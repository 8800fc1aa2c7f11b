//! Testbed benchmarks (`cargo bench --bench testbed`): plan-validation throughput,
//! the batched step API (one thread and rayon), CBS solve-time distribution per suite
//! cell, and the generation rate with solving. Prints figures; asserts nothing.
//!
//! Options (after `--`): `--per-cell M` (suite instances per cell, default 30),
//! `--quick` (smaller workloads).
use mapf_ledger::env::{
    batch, generate, simulate, solve, suite, Budget, GeneratorConfig, SuiteName, SuiteSpec,
};
use mapf_ledger::seed::Seed;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let per_cell = args
        .iter()
        .position(|a| a == "--per-cell")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 10 } else { 30 });
    println!("rayon threads: {}", rayon::current_num_threads());

    // 1. Plan validation: simulate reference plans of generated instances.
    for (k, n) in [(2usize, 8usize), (4, 8), (8, 10)] {
        let items = generate(
            &GeneratorConfig::uniform(k, [n], 0.2, 0.0),
            200,
            Seed::root(1),
            Budget::default(),
        )
        .expect("generate");
        let reps = if quick { 50 } else { 500 };
        let t0 = Instant::now();
        let mut agent_steps = 0u64;
        for _ in 0..reps {
            for it in &items {
                let o = simulate(&it.instance, &it.plan);
                agent_steps += (it.plan.len() * k) as u64;
                std::hint::black_box(o);
            }
        }
        let s = t0.elapsed().as_secs_f64();
        println!(
            "validate  {k} agents {n}x{n}: {:>12.0} agent-steps/s ({:.0} plans/s)",
            agent_steps as f64 / s,
            (reps * items.len()) as f64 / s
        );
    }

    // 2. Batched step with observation planes.
    for k in [2usize, 4, 8] {
        let cfg = GeneratorConfig::uniform(k, [8], 0.3, 0.0);
        let steps = if quick { 500 } else { 4000 };
        let one = batch::measure_throughput(&cfg, 256, steps, false).expect("batch");
        let par = batch::measure_throughput(&cfg, 256, steps, true).expect("batch");
        println!(
            "batch-step {k} agents 8x8 B=256: {:>12.0} agent-steps/s (1 thread), {:>12.0} (rayon x{})",
            one.agent_steps_per_sec, par.agent_steps_per_sec, par.threads
        );
    }

    // 3. CBS solve-time distribution per suite cell (re-solving suite instances).
    for name in [SuiteName::Val, SuiteName::Test] {
        let spec = SuiteSpec {
            name,
            per_cell,
            max_size: 10,
            seed: 2026,
            wait_ratios: Vec::new(),
        };
        let s = suite::build(&spec, Budget::default()).expect("suite");
        println!("CBS solve time per cell, suite {} ({} per cell): p50 / p90 / p99 / max in microseconds", name.as_str(), per_cell);
        for c in &s.cells {
            let mut us: Vec<f64> = c
                .items
                .iter()
                .map(|it| {
                    let t0 = Instant::now();
                    let r = solve(&it.instance, Budget::default());
                    std::hint::black_box(r.is_ok());
                    t0.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            us.sort_by(f64::total_cmp);
            let q = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
            println!(
                "  {}a {:>2}x{:<2}  {:>9.1} {:>9.1} {:>9.1} {:>10.1}",
                c.agents,
                c.size,
                c.size,
                q(0.5),
                q(0.9),
                q(0.99),
                us[us.len() - 1]
            );
        }
    }

    // 4. Generation rate (sample + solve + accept), training-style configs.
    for (label, cfg) in [
        (
            "2 agents 3..10, holes 0.2, wait 0.0",
            GeneratorConfig::uniform(2, 3..=10, 0.2, 0.0),
        ),
        (
            "2 agents 3..10, holes 0.2, wait 0.5",
            GeneratorConfig::uniform(2, 3..=10, 0.2, 0.5),
        ),
        (
            "4 agents 6..10, holes 0.3, wait 0.5",
            GeneratorConfig::uniform(4, 6..=10, 0.3, 0.5),
        ),
    ] {
        let count = if quick { 200 } else { 2000 };
        let t0 = Instant::now();
        let items = generate(&cfg, count, Seed::root(5), Budget::default()).expect("generate");
        let s = t0.elapsed().as_secs_f64();
        println!(
            "generate {label}: {:>8.0} solved instances/s ({} in {:.2}s)",
            items.len() as f64 / s,
            items.len(),
            s
        );
    }
}
