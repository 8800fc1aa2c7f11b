//! The `env` commands as text: generated instances with their optima, a solution, a
//! plan's verdict, a suite's statistics (and its baseline), a throughput figure.
use crate::env::batch::Throughput;
use crate::env::table::{render_suite_stats, ResultTable};
use crate::env::text::{render_plan, render_prompt};
use crate::env::verdict::Verdict;
use crate::env::{Solution, Solved, Suite};
use std::fmt::Write as _;

/// `env generate`: each instance's header, prompt and optimal plan.
pub fn generated(items: &[Solved]) -> String {
    let mut s = String::new();
    for (i, it) in items.iter().enumerate() {
        let _ =
            writeln!(
            s,
            "# instance {i}: {n}x{n}, {} agents, {} holes, optimal makespan {}, sum-of-costs {}{}",
            it.instance.agents(),
            it.instance.hole_count(),
            it.reference.makespan,
            it.reference.sum_of_costs,
            if it.needs_coordination { ", needs coordination" } else { "" },
            n = it.instance.size()
        );
        s.push_str(&render_prompt(&it.instance));
        let _ = writeln!(s, "optimal plan:\n{}", render_plan(&it.plan));
    }
    s
}

/// `env solve`: the optima, the search's size and the optimal plan.
pub fn solution(sol: &Solution) -> String {
    format!(
        "optimal sum-of-costs {}, optimal makespan {} (independent paths {}, {} CBS nodes)\n{}",
        sol.reference.sum_of_costs,
        sol.reference.makespan,
        sol.independent_sum,
        sol.nodes,
        render_plan(&sol.plan)
    )
}

/// `env check`: valid with its costs and optimality, or the first failure.
pub fn verdict(v: &Verdict) -> String {
    let outcome = &v.outcome;
    if outcome.valid {
        format!(
            "valid: sum-of-costs {}, makespan {}{}\n",
            outcome.sum_of_costs,
            outcome.makespan,
            match (v.optimal, v.reference) {
                (Some(true), _) => " (optimal)".to_string(),
                (Some(false), Some(r)) => format!(
                    " (not optimal: optimum sum-of-costs {}, makespan {})",
                    r.sum_of_costs, r.makespan
                ),
                _ => " (optimum unknown)".to_string(),
            }
        )
    } else {
        let f = outcome
            .failure
            .as_ref()
            .expect("invalid outcomes carry a failure");
        format!(
            "invalid: {} at t={} (agents {:?}): {}\n",
            f.kind, f.t, f.agents, f.detail
        )
    }
}

/// `env suite`: the suite's statistics, then the baseline's scores when scored.
pub fn suite(s: &Suite, baseline: Option<&ResultTable>) -> String {
    let mut out = render_suite_stats(s);
    if let Some(t) = baseline {
        out.push('\n');
        out.push_str(
            &t.render("independent shortest paths baseline (valid % / optimal %, makespan)"),
        );
    }
    out
}

/// `env throughput` of maps with `holes` (their ratio), stepped on rayon's threads when
/// `parallel`.
pub fn throughput(r: &Throughput, holes: f64, parallel: bool) -> String {
    format!(
        "{}x{} maps, {} agents, {:.0}% holes, batch {}, {} steps{}: {:.0} agent-steps/s ({:.0} env-steps/s, {} episodes finished)\n",
        r.size, r.size, r.agents, holes * 100.0, r.batch, r.steps,
        if parallel { format!(", rayon x{}", r.threads) } else { ", 1 thread".into() },
        r.agent_steps_per_sec, r.env_steps_per_sec, r.episodes
    )
}
