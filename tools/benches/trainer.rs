//! Trainer throughput (`cargo bench --bench trainer`): plans sampled per second and
//! GRPO gradient steps per second for the grid and text policies on the demo's
//! training distribution (2 agents, sizes 3..6), torch on 1 thread. Prints figures;
//! asserts nothing.
use mapf_ledger::env::{generate, Budget, CostMetric, GeneratorConfig};
use mapf_ledger::seed::Seed;
use mapf_ledger::train::adam::AdamConfig;
use mapf_ledger::train::grpo::{self, GrpoConfig};
use mapf_ledger::train::{new_policy, TrainState};
use std::time::Instant;

fn main() {
    tch::set_num_threads(1);
    let cfg = GeneratorConfig::uniform(2, 3..=6, 0.1, 0.2);
    let data = generate(&cfg, 256, Seed::root(1), Budget::default()).expect("generate");
    let blobs = vec![mapf_ledger::ledger::Hash([0; 32]); data.len()];
    let instances: Vec<_> = data.iter().map(|d| d.instance.clone()).collect();
    for kind in ["grid", "text"] {
        let policy = new_policy(kind, tch::Device::Cpu, Seed::root(2)).expect("policy");
        let t0 = Instant::now();
        let mut plans = 0;
        while t0.elapsed().as_secs_f64() < 3.0 {
            plans += policy
                .sample(&instances[..64], 8, false, Seed::root(plans as u64))
                .len();
        }
        let sample_rate = plans as f64 / t0.elapsed().as_secs_f64();
        let mut state = TrainState::new(policy, AdamConfig::default());
        let g = GrpoConfig {
            steps: 0,
            lr: 3e-4,
            group_size: 8,
            batch_size: 16,
            clip_eps: 0.2,
            kl_coef: 0.0,
            entropy_coef: 0.001,
            epochs: 1,
            valid_reward: 1.0,
            optimal_bonus: 0.5,
            format_reward: if kind == "text" { 0.1 } else { 0.0 },
            metric: CostMetric::Makespan,
            checkpoint_every: 1000,
        };
        let t0 = Instant::now();
        let mut steps = 0u64;
        while t0.elapsed().as_secs_f64() < 5.0 {
            let _ = grpo::step(&mut state, None, &g, &data, &blobs, Seed::root(3), steps);
            steps += 1;
        }
        let step_rate = steps as f64 / t0.elapsed().as_secs_f64();
        println!(
            "{kind:>4} policy: {sample_rate:>8.0} plans/s sampled (64 instances x 8), {step_rate:>6.2} GRPO steps/s (16 instances x 8 plans, {:.0} plans/s incl. update)",
            step_rate * 128.0
        );
    }
}
