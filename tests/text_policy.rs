//! The `text` policy's contract: the tokenizer covers the testbed's text and round-trips
//! it, its JSON is deterministic, sampling is a pure function of the seed, log-probs
//! cover every action, checkpoints reload, and a short imitation run teaches the format.
use mapf_ledger::env::generator::{sample_reachable, InstanceSpec};
use mapf_ledger::env::text::{parse_plan, render_plan, render_prompt};
use mapf_ledger::env::{generate, Budget, GeneratorConfig, Instance, Move, Plan, Solved};
use mapf_ledger::seed::Seed;
use mapf_ledger::train::adam::AdamConfig;
use mapf_ledger::train::checkpoint::param_hash;
use mapf_ledger::train::policy::{Policy, Rollout};
use mapf_ledger::train::text::{
    detokenize, encode_text, plan_budget, render_compact_prompt, tokenizer, tokenizer_json,
    TextPolicy, TextShape, EOS, UNK,
};
use mapf_ledger::train::warmup::{self, WarmupConfig};
use mapf_ledger::train::{new_policy, TrainState};
use rand::Rng as _;
use std::time::Instant;
use tch::Device;

fn inst(size: usize, agents: usize, seed: u64) -> Option<Instance> {
    let spec = InstanceSpec {
        size,
        agents,
        hole_ratio: 0.2,
        coordination: None,
    };
    sample_reachable(&spec, &mut Seed::root(seed).rng()).ok()
}

fn random_plan(agents: usize, seed: u64) -> Plan {
    let mut rng = Seed::root(seed).child("plan", 0).rng();
    Plan {
        moves: (0..agents)
            .map(|_| {
                (0..rng.random_range(1..12))
                    .map(|_| Move::ALL[rng.random_range(0..5)])
                    .collect()
            })
            .collect(),
    }
}

fn policy(seed: u64) -> TextPolicy {
    TextPolicy::new(Device::Cpu, TextShape::default(), Seed::root(seed))
}

fn data(count: usize, seed: u64) -> Vec<Solved> {
    let cfg = GeneratorConfig::uniform(2, [3, 4], 0.1, 0.0);
    generate(&cfg, count, Seed::root(seed), Budget::default()).unwrap()
}

#[test]
fn tokenizer_round_trips_every_size_and_agent_count() {
    let tok = tokenizer();
    let mut checked = 0;
    for size in 3..=10 {
        for agents in 1..=8 {
            let Some(i) = inst(size, agents, (size * 10 + agents) as u64) else {
                continue;
            };
            checked += 1;
            // The full prompt: every piece is known and re-encodes to the same ids.
            let full = render_prompt(&i);
            let ids = encode_text(&tok, &full);
            assert!(!ids.contains(&UNK), "{size}x{size}/{agents}: {full}");
            assert_eq!(encode_text(&tok, &detokenize(&ids)), ids);
            // The compact prompt and plans round-trip exactly.
            let compact = render_compact_prompt(&i);
            let ids = encode_text(&tok, &compact);
            assert!(!ids.contains(&UNK));
            assert_eq!(detokenize(&ids), compact);
            let plan = random_plan(agents, checked);
            let text = render_plan(&plan);
            let ids = encode_text(&tok, &text);
            assert!(!ids.contains(&UNK));
            assert_eq!(detokenize(&ids), text);
            assert_eq!(parse_plan(&detokenize(&ids), agents).unwrap(), plan);
            // HF decoding names the same tokens.
            assert_eq!(
                tok.decode(&ids, false).unwrap().split(' ').count(),
                ids.len()
            );
            if (size, agents) == (10, 5) {
                let prompt = 1 + encode_text(&tok, &compact).len();
                assert!(prompt <= 168 && plan_budget(&i) <= 221, "{prompt}");
            }
            // Prompt + the longest plan fit the model's positions up to 10x10 / 8 agents.
            let max = TextShape::default().max_positions as usize;
            assert!(1 + ids.len().max(encode_text(&tok, &compact).len()) + plan_budget(&i) <= max);
        }
    }
    assert!(checked >= 40, "only {checked} instances");
}

#[test]
fn tokenizer_json_is_deterministic_and_reloads() {
    let a = tokenizer_json();
    assert_eq!(a, tokenizer_json());
    let back: tokenizers::Tokenizer = a.parse().unwrap();
    assert_eq!(back.to_string(true).unwrap(), a);
    let i = inst(5, 3, 1).unwrap();
    let p = render_prompt(&i);
    assert_eq!(
        back.encode(p.as_str(), false).unwrap().get_ids(),
        encode_text(&tokenizer(), &p)
    );
}

#[test]
fn sampling_is_deterministic_and_text_is_what_was_parsed() {
    let pol = policy(1);
    assert_eq!(param_hash(pol.vars()), param_hash(policy(1).vars()));
    assert_ne!(param_hash(pol.vars()), param_hash(policy(2).vars()));
    let insts: Vec<Instance> = [(3, 2), (6, 3), (4, 1), (10, 5)]
        .iter()
        .map(|&(s, k)| inst(s, k, 9).unwrap())
        .collect();
    let a = pol.sample(&insts, 3, false, Seed::root(2));
    assert_eq!(a.len(), 12);
    assert_eq!(a, pol.sample(&insts, 3, false, Seed::root(2)));
    assert_ne!(a, pol.sample(&insts, 3, false, Seed::root(3)));
    // Lane l draws from seed.child("lane", l) whatever else shares the batch.
    let fewer = pol.sample(&insts[..2], 3, false, Seed::root(2));
    assert_eq!(fewer[..], a[..6]);
    for r in &a {
        let i = &insts[r.instance];
        assert!(!r.actions.is_empty() && r.actions.len() <= plan_budget(i));
        let text = String::from_utf8(r.plan_bytes.clone()).unwrap();
        assert_eq!(text, detokenize(&r.actions));
        assert_eq!(r.plan, parse_plan(&text, i.agents()));
    }
    let g = pol.sample(&insts, 1, true, Seed::root(2));
    assert_eq!(g, pol.sample(&insts, 1, true, Seed::root(99)));
}

#[test]
fn log_probs_cover_encoded_plans_and_empty_rollouts() {
    let pol = policy(4);
    let i = inst(4, 2, 5).unwrap();
    let plan = random_plan(2, 8);
    let ids = pol.encode_plan(&i, &plan);
    assert_eq!(*ids.last().unwrap(), EOS);
    assert_eq!(parse_plan(&detokenize(&ids), 2).unwrap(), plan);
    let insts = vec![i.clone(), inst(7, 3, 6).unwrap()];
    let mk = |instance: usize, actions: Vec<u32>| Rollout {
        instance,
        actions,
        plan: Ok(plan.clone()),
        plan_bytes: vec![],
    };
    let rs = vec![
        mk(0, ids.clone()),
        mk(1, vec![]),
        mk(1, pol.encode_plan(&insts[1], &random_plan(3, 9))),
    ];
    let lp = pol.log_probs(&insts, &rs);
    let total = rs.iter().map(|r| r.actions.len()).sum::<usize>() as i64;
    assert_eq!(lp.per_action.size(), [total]);
    assert_eq!(lp.entropy.size(), [total]);
    let of: Vec<i64> = Vec::try_from(&lp.rollout_of).unwrap();
    let want: Vec<i64> = rs
        .iter()
        .enumerate()
        .flat_map(|(k, r)| std::iter::repeat_n(k as i64, r.actions.len()))
        .collect();
    assert_eq!(of, want);
    assert!(lp.per_action.max().double_value(&[]) <= 0.0);
    assert!(lp.per_action.requires_grad());
    // Batch composition does not change a rollout's log-probs (beyond rounding).
    let alone = pol.log_probs(&insts, &rs[..1]);
    let n = ids.len() as i64;
    let diff = (alone.per_action - lp.per_action.narrow(0, 0, n))
        .abs()
        .max()
        .double_value(&[]);
    assert!(diff < 1e-4, "{diff}");
    // Only empty rollouts: nothing to score.
    let lp = pol.log_probs(&insts, &rs[1..2]);
    assert_eq!(lp.per_action.size(), [0]);
    // Sampled rollouts are scored in full and agree with the sampling distribution.
    let sampled = pol.sample(&insts, 2, false, Seed::root(1));
    let lp = pol.log_probs(&insts, &sampled);
    let total = sampled.iter().map(|r| r.actions.len()).sum::<usize>() as i64;
    assert_eq!(lp.per_action.size(), [total]);
}

#[test]
fn checkpoints_reload_the_text_policy() {
    let state = TrainState::new(
        new_policy("text", Device::Cpu, Seed::root(3)).unwrap(),
        AdamConfig::default(),
    );
    let bytes = state.save(0);
    let back = TrainState::load(&bytes, Device::Cpu).unwrap();
    assert_eq!(back.policy.kind(), "text");
    assert_eq!(back.policy.arch(), state.policy.arch());
    assert_eq!(
        param_hash(back.policy.vars()),
        param_hash(state.policy.vars())
    );
}

#[test]
fn imitation_teaches_the_plan_format() {
    tch::set_num_threads(1);
    let train = data(64, 11);
    let mut state = TrainState::new(
        Box::new(policy(5)),
        AdamConfig {
            lr: 3e-3,
            ..Default::default()
        },
    );
    let cfg = WarmupConfig {
        steps: 120,
        lr: 3e-3,
        batch_size: 16,
        instances: train.len(),
    };
    let seed = Seed::root(12);
    let started = Instant::now();
    let mut losses = Vec::new();
    for s in 0..cfg.steps {
        let (_, loss) = warmup::step(&mut state, &cfg, &train, seed, s);
        losses.push(loss);
    }
    let train_s = started.elapsed().as_secs_f64();
    let first = losses[..5].iter().sum::<f64>() / 5.0;
    let last = losses[losses.len() - 5..].iter().sum::<f64>() / 5.0;
    let insts: Vec<Instance> = train.iter().map(|s| s.instance.clone()).collect();
    let started = Instant::now();
    let greedy = state.policy.sample(&insts, 1, true, Seed::root(0));
    let sample_s = started.elapsed().as_secs_f64();
    let parsed = greedy.iter().filter(|r| r.plan.is_ok()).count();
    let valid = greedy
        .iter()
        .filter(|r| {
            r.plan
                .as_ref()
                .is_ok_and(|p| mapf_ledger::env::simulate(&insts[r.instance], p).valid)
        })
        .count();
    println!(
        "imitation: loss {first:.3} -> {last:.3} in {} steps ({:.1} steps/s); greedy: {parsed}/64 parse, {valid}/64 valid ({:.1} plans/s)",
        cfg.steps,
        cfg.steps as f64 / train_s,
        64.0 / sample_s
    );
    assert!(last < 0.4 * first, "loss {first} -> {last}");
    assert!(parsed >= 48, "{parsed}/64 parse");
}

/// Throughput figures (a measurement, not a check): run with
/// `cargo test --test text_policy throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn throughput() {
    use mapf_ledger::env::CostMetric;
    use mapf_ledger::ledger::Hash;
    use mapf_ledger::train::grpo::{self, GrpoConfig};
    let train = data(64, 11);
    let blobs = vec![Hash([0; 32]); train.len()];
    let big: Vec<Instance> = (0..16).map(|s| inst(10, 5, 100 + s).unwrap()).collect();
    for threads in [1, 2] {
        tch::set_num_threads(threads);
        let mut state = TrainState::new(Box::new(policy(5)), AdamConfig::default());
        let insts: Vec<Instance> = train[..16].iter().map(|s| s.instance.clone()).collect();
        let t = Instant::now();
        let reps = 5;
        for r in 0..reps {
            state.policy.sample(&insts, 4, false, Seed::root(r));
        }
        let small = (reps * 64) as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        let rs = state.policy.sample(&big, 4, false, Seed::root(0));
        let big_rate = 64.0 / t.elapsed().as_secs_f64();
        let tokens: usize = rs.iter().map(|r| r.actions.len()).sum();
        let cfg = GrpoConfig {
            steps: 10,
            lr: 1e-3,
            group_size: 4,
            batch_size: 16,
            clip_eps: 0.2,
            kl_coef: 0.0,
            entropy_coef: 0.0,
            epochs: 1,
            valid_reward: 1.0,
            optimal_bonus: 0.5,
            format_reward: 0.1,
            metric: CostMetric::Makespan,
            checkpoint_every: 100,
        };
        let t = Instant::now();
        for s in 0..cfg.steps {
            grpo::step(&mut state, None, &cfg, &train, &blobs, Seed::root(1), s);
        }
        let steps = cfg.steps as f64 / t.elapsed().as_secs_f64();
        println!(
            "threads {threads}: sampling {small:.0} plans/s (3x3/4x4, 2 agents, 16x4, untrained), \
             {big_rate:.1} plans/s (10x10, 5 agents, 16x4, untrained, {} tokens/plan); \
             GRPO {steps:.2} gradient steps/s (batch 16 x group 4, sample + score + update)",
            tokens / 64
        );
    }
}
