//! `ledger env ...`: the MAPF-FrozenLake testbed on its own: generate, solve, check,
//! suite, import-movingai, prompt. Every command takes `--json`.
//!
//! Exit codes: 0 success; 1 when the thing checked fails (`check`: the plan is invalid;
//! `solve`: the instance is unsolvable or the budget ran out); 2 bad input, with a
//! message naming the file, line or field.
use super::{CliError, CliResult};
use clap::{Subcommand, ValueEnum};
use mapf_ledger::env::{
    self, generator, movingai, suite, table, text, Budget, CostMetric, GeneratorConfig, Instance,
    Plan, SolveError,
};
use mapf_ledger::seed::Seed;
use mapf_ledger::views::testbed::{CheckReport, SolveReport, SuiteReport};
use std::path::{Path, PathBuf};

use super::values::{count_arg, max_size_arg, per_cell_arg};

#[derive(Subcommand, Debug)]
pub enum EnvCommand {
    /// Generate solved instances from a generator config (or one size given by flags).
    Generate {
        /// A GeneratorConfig JSON file (schemas/generator-config.json); overrides the flags below.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Map side length (the map is size x size).
        #[arg(long, default_value_t = 5)]
        size: usize,
        /// Number of agents.
        #[arg(long, default_value_t = 2)]
        agents: usize,
        /// Hole ratio in [0, 0.5].
        #[arg(long, default_value_t = 0.2)]
        holes: f64,
        /// Share of instances that need coordination, in [0, 1].
        #[arg(long, default_value_t = 0.0)]
        wait: f64,
        /// Instances to generate.
        #[arg(long, default_value_t = 10, value_parser = count_arg())]
        count: usize,
        /// Seed of the generator (the same seed gives the same instances).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Solve an instance (JSON file) optimally with CBS.
    Solve {
        /// An instance, or what `env generate --json` wrote (pick one with --index).
        file: PathBuf,
        /// Which instance of a file that holds several (from 0).
        #[arg(long)]
        index: Option<usize>,
        /// Most high-level CBS nodes per search.
        #[arg(long, default_value_t = 200_000)]
        max_nodes: u64,
        /// Wall-clock limit in milliseconds.
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Validate a plan (JSON `{"moves": [...]}` or text `agent 1: R D ...`) against an instance.
    Check {
        /// The plan: JSON `{"moves": [...]}` or text `agent 1: R D ...`.
        plan: PathBuf,
        /// An instance, or what `env generate --json` wrote (pick one with --index).
        instance: PathBuf,
        /// Which instance of a file that holds several (from 0).
        #[arg(long)]
        index: Option<usize>,
        /// Cost that "optimal" refers to.
        #[arg(long, value_enum, default_value_t = Metric::Makespan)]
        metric: Metric,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Build a benchmark suite of the paper's protocol and print its statistics.
    Suite {
        /// `val` (2 agents, sizes 3..max) or `test` (3, 4, 5 agents).
        #[arg(long)]
        name: suite::SuiteName,
        /// Instances per (agents, size) cell.
        #[arg(long, default_value_t = 150, value_parser = per_cell_arg())]
        per_cell: usize,
        /// Largest map size of the suite.
        #[arg(long, default_value_t = 10, value_parser = max_size_arg())]
        max_size: usize,
        /// Seed of the generator (the same seed gives the same instances).
        #[arg(long, default_value_t = 2026)]
        seed: u64,
        /// Write the whole suite (instances, optima, plans) as JSON to this file.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Also score the independent-shortest-paths baseline (valid/optimal per cell).
        #[arg(long)]
        baseline: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Import a MovingAI `.map` + `.scen` pair as an instance (first K scenario lines).
    ImportMovingai {
        /// The MovingAI .map file.
        map: PathBuf,
        /// The MovingAI .scen file (its first --agents lines are the agents).
        scen: PathBuf,
        /// Number of agents.
        #[arg(long, default_value_t = 2)]
        agents: usize,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Render an instance as the prompt text an LLM reads.
    Prompt {
        /// An instance, or what `env generate --json` wrote (pick one with --index).
        instance: PathBuf,
        /// Which instance of a file that holds several (from 0).
        #[arg(long)]
        index: Option<usize>,
        /// `paper` (the natural-language prompt), `compact`, `cells` (the shipped
        /// base planner's format) or `steps` (its prompt; the plan is written time first).
        #[arg(long, default_value = "paper")]
        format: mapf_ledger::plan::trainer::PromptStyle,
    },
    /// Measure the batched step API: random actions on generated instances, observation
    /// planes updated every step, finished instances auto-reset.
    Throughput {
        /// Map side length (the map is size x size).
        #[arg(long, default_value_t = 8)]
        size: usize,
        /// Number of agents.
        #[arg(long, default_value_t = 2)]
        agents: usize,
        /// Hole ratio in [0, 0.5].
        #[arg(long, default_value_t = 0.3)]
        holes: f64,
        /// Instances stepped together.
        #[arg(long, default_value_t = 256)]
        batch: usize,
        /// Steps of the whole batch.
        #[arg(long, default_value_t = 2000)]
        steps: usize,
        /// Step lanes in parallel with rayon (RAYON_NUM_THREADS sets the threads).
        #[arg(long)]
        parallel: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Metric {
    Makespan,
    SumOfCosts,
}

impl From<Metric> for CostMetric {
    fn from(m: Metric) -> Self {
        match m {
            Metric::Makespan => CostMetric::Makespan,
            Metric::SumOfCosts => CostMetric::SumOfCosts,
        }
    }
}

pub fn run(cmd: EnvCommand) -> CliResult {
    match cmd {
        EnvCommand::Generate {
            config,
            size,
            agents,
            holes,
            wait,
            count,
            seed,
            json,
        } => {
            let cfg = match config {
                Some(path) => read_json::<GeneratorConfig>(&path)?,
                None => GeneratorConfig::uniform(agents, [size], holes, wait),
            };
            if let Err(e) = cfg.validate() {
                return Err(CliError::input(format!(
                    "generator config out of range: {e}"
                )));
            }
            let items = generator::generate(&cfg, count, Seed::root(seed), Budget::default())
                .map_err(|e| CliError::input(e.to_string()))?;
            if json {
                print_json(&items);
            } else {
                for (i, it) in items.iter().enumerate() {
                    println!(
                        "# instance {i}: {n}x{n}, {} agents, {} holes, optimal makespan {}, sum-of-costs {}{}",
                        it.instance.agents(),
                        it.instance.hole_count(),
                        it.reference.makespan,
                        it.reference.sum_of_costs,
                        if it.needs_coordination { ", needs coordination" } else { "" },
                        n = it.instance.size()
                    );
                    print!("{}", text::render_prompt(&it.instance));
                    println!("optimal plan:\n{}", text::render_plan(&it.plan));
                }
            }
            Ok(())
        }
        EnvCommand::Solve {
            file,
            index,
            max_nodes,
            timeout_ms,
            json,
        } => {
            let inst = read_instance(&file, index)?;
            let budget = Budget {
                max_nodes,
                max_millis: timeout_ms,
            };
            match env::solve(&inst, budget) {
                Ok(sol) => {
                    if json {
                        print_json(&SolveReport::Solved {
                            sum_of_costs: sol.reference.sum_of_costs,
                            makespan: sol.reference.makespan,
                            independent_sum: sol.independent_sum,
                            needs_coordination: sol.needs_coordination(),
                            nodes: sol.nodes,
                            plan: sol.plan.clone(),
                        });
                    } else {
                        println!(
                            "optimal sum-of-costs {}, optimal makespan {} (independent paths {}, {} CBS nodes)",
                            sol.reference.sum_of_costs, sol.reference.makespan, sol.independent_sum, sol.nodes
                        );
                        print!("{}", text::render_plan(&sol.plan));
                    }
                    Ok(())
                }
                Err(e) => {
                    if json {
                        let reason = e.to_string();
                        print_json(&match e {
                            SolveError::Unreachable { .. } | SolveError::Unsolvable { .. } => {
                                SolveReport::Unsolvable { reason }
                            }
                            SolveError::Unknown { .. } => SolveReport::Unknown { reason },
                        });
                    }
                    Err(CliError::check(format!("{}: {e}", file.display())))
                }
            }
        }
        EnvCommand::Check {
            plan,
            instance,
            index,
            metric,
            json,
        } => {
            let inst = read_instance(&instance, index)?;
            let plan_text = read_text(&plan)?;
            let parsed = parse_plan_file(&plan, &plan_text, &inst)?;
            let outcome = match &parsed {
                Ok(p) => env::simulate(&inst, p),
                Err(pe) => env::Outcome::failed(pe.to_failure()),
            };
            let reference = match env::solve(&inst, Budget::default()) {
                Ok(s) => Some(s.reference),
                Err(_) => None,
            };
            let optimal = reference.map(|r| outcome.optimal(&r, metric.into()));
            if json {
                print_json(&CheckReport {
                    valid: outcome.valid,
                    optimal,
                    failure: outcome.failure.clone(),
                    sum_of_costs: outcome.sum_of_costs,
                    makespan: outcome.makespan,
                    reference,
                });
            } else if outcome.valid {
                println!(
                    "valid: sum-of-costs {}, makespan {}{}",
                    outcome.sum_of_costs,
                    outcome.makespan,
                    match (optimal, reference) {
                        (Some(true), _) => " (optimal)".to_string(),
                        (Some(false), Some(r)) => format!(
                            " (not optimal: optimum sum-of-costs {}, makespan {})",
                            r.sum_of_costs, r.makespan
                        ),
                        _ => " (optimum unknown)".to_string(),
                    }
                );
            } else {
                let f = outcome
                    .failure
                    .as_ref()
                    .expect("invalid outcomes carry a failure");
                println!(
                    "invalid: {} at t={} (agents {:?}): {}",
                    f.kind, f.t, f.agents, f.detail
                );
            }
            if outcome.valid {
                Ok(())
            } else {
                Err(CliError::check(format!(
                    "{}: plan is invalid",
                    plan.display()
                )))
            }
        }
        EnvCommand::Suite {
            name,
            per_cell,
            max_size,
            seed,
            out,
            baseline,
            json,
        } => {
            if let Some(o) = &out {
                super::check_output_file("--out", o)?;
            }
            let spec = suite::SuiteSpec {
                name,
                per_cell,
                max_size,
                seed,
                wait_ratios: Vec::new(),
            };
            let s = suite::build(&spec, Budget::default())
                .map_err(|e| CliError::input(e.to_string()))?;
            if let Some(path) = &out {
                let text = serde_json::to_string(&s).expect("suite serializes");
                std::fs::write(path, text)
                    .map_err(|e| CliError::input(format!("{}: {e}", path.display())))?;
            }
            let scores = baseline.then(|| baseline_table(&s));
            if json {
                print_json(&SuiteReport {
                    name,
                    hash: s.hash.clone(),
                    instances: s.len(),
                    cells: table::suite_stats(&s),
                    baseline: scores
                        .as_ref()
                        .map(mapf_ledger::record::trainer::EvalCell::cells_of),
                });
            } else {
                print!("{}", table::render_suite_stats(&s));
                if let Some(t) = scores {
                    println!();
                    print!(
                        "{}",
                        t.render(
                            "independent shortest paths baseline (valid % / optimal %, makespan)"
                        )
                    );
                }
            }
            Ok(())
        }
        EnvCommand::ImportMovingai {
            map,
            scen,
            agents,
            json,
        } => {
            let inst = movingai::import(
                &map.display().to_string(),
                &read_text(&map)?,
                &scen.display().to_string(),
                &read_text(&scen)?,
                agents,
            )
            .map_err(|e| CliError::input(e.to_string()))?;
            if json {
                print_json(&inst);
            } else {
                print!("{}", text::render_prompt(&inst));
            }
            Ok(())
        }
        EnvCommand::Throughput {
            size,
            agents,
            holes,
            batch,
            steps,
            parallel,
            json,
        } => {
            let cfg = GeneratorConfig::uniform(agents, [size], holes, 0.0);
            cfg.validate()
                .map_err(|e| CliError::input(format!("throughput config out of range: {e}")))?;
            let r = env::batch::measure_throughput(&cfg, batch, steps, parallel)
                .map_err(|e| CliError::input(e.to_string()))?;
            if json {
                print_json(&r);
            } else {
                println!(
                    "{}x{} maps, {} agents, {:.0}% holes, batch {}, {} steps{}: {:.0} agent-steps/s ({:.0} env-steps/s, {} episodes finished)",
                    size, size, agents, holes * 100.0, batch, steps,
                    if parallel { format!(", rayon x{}", rayon::current_num_threads()) } else { ", 1 thread".into() },
                    r.agent_steps_per_sec, r.env_steps_per_sec, r.episodes
                );
            }
            Ok(())
        }
        EnvCommand::Prompt {
            instance,
            index,
            format,
        } => {
            let inst = read_instance(&instance, index)?;
            print!("{}", format.task_text(&inst));
            Ok(())
        }
    }
}

/// Score the independent-shortest-paths baseline on every suite item.
fn baseline_table(s: &suite::Suite) -> table::ResultTable {
    let mut t = table::ResultTable::default();
    for c in &s.cells {
        let e = t.cells.entry((c.agents, c.size)).or_default();
        for it in &c.items {
            e.total += 1;
            let (valid, optimal) = env::coordination::baseline_outcome(it, CostMetric::Makespan);
            e.valid += valid as u32;
            e.optimal += optimal as u32;
        }
    }
    t
}

/// A plan file is JSON when its first non-blank character is `{`, else plan text (cells
/// it states, in the cells format, are checked against the instance). JSON errors are
/// input errors (exit 2); text parse errors are plan failures.
fn parse_plan_file(
    path: &Path,
    content: &str,
    inst: &Instance,
) -> Result<Result<Plan, text::ParseError>, CliError> {
    if content.trim_start().starts_with('{') {
        serde_json::from_str::<Plan>(content)
            .map(Ok)
            .map_err(|e| CliError::input(format!("{}: {e}", path.display())))
    } else {
        Ok(text::parse_plan_in(content, inst))
    }
}

fn read_text(path: &Path) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|e| CliError::input(format!("{}: {e}", path.display())))
}

/// An instance from a JSON file that holds one (`Instance`), one generated item
/// (`{"instance": ..., "reference": ..., ...}`), or a list of either (what `env generate
/// --json` writes; `index` picks one, and is needed when the list has several).
fn read_instance(path: &Path, index: Option<usize>) -> Result<Instance, CliError> {
    let value: serde_json::Value = read_json(path)?;
    let bad = |m: String| CliError::input(format!("{}: {m}", path.display()));
    let item = match value {
        serde_json::Value::Array(items) => {
            let n = items.len();
            let i = match (index, n) {
                (Some(i), _) if i < n => i,
                (Some(i), _) => {
                    return Err(bad(format!(
                        "--index {i} but the file holds {n} instance(s)"
                    )))
                }
                (None, 1) => 0,
                (None, _) => {
                    return Err(bad(format!(
                        "the file holds {n} instances; pick one with --index N (0..{})",
                        n.saturating_sub(1)
                    )))
                }
            };
            items.into_iter().nth(i).expect("in range")
        }
        v => {
            if let Some(i) = index.filter(|&i| i > 0) {
                return Err(bad(format!("--index {i} but the file holds one instance")));
            }
            v
        }
    };
    let item = match item {
        serde_json::Value::Object(mut m) if m.contains_key("instance") => {
            m.remove("instance").expect("present")
        }
        v => v,
    };
    serde_json::from_value(item).map_err(|e| bad(format!("not an instance: {e}")))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, CliError> {
    let text = read_text(path)?;
    serde_json::from_str(&text).map_err(|e| CliError::input(format!("{}: {e}", path.display())))
}

fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).expect("serializable"));
}
