//! Plans as recorded: `ledger show BRANCH@stageN --samples N [--kind K] [--suite S]` and
//! the report's sample panel. GRPO's sampled plans by default; with a suite, the
//! greedy plans of the stage's evaluation (kept when the plan sets `suites.keep_plans`). Each [`Sample`] is one trajectory of the stage's GRPO
//! batches with its instance (from the instance blob), the plan text, reward and
//! outcome, and a [`Drawing`]: every agent's path over the grid up to the first failure,
//! and the cells where it went wrong, computed by re-simulating the recorded plan (the
//! simulator is deterministic, so the drawing says what the recorded outcome says).
//! Nothing here is recorded.
use crate::env::simulate::FailureKind;
use crate::env::text::parse_recorded_plan;
use crate::env::{simulate, Instance, Move, Plan, Solved};
use crate::ledger::{EventBody, Hash, Ledger, LedgerError};
use crate::record::event::EvaluationOutcomes;
use schemars::JsonSchema;
use serde::Serialize;

/// Which trajectories `--kind` keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindFilter {
    /// Failed with this kind.
    Failure(FailureKind),
    /// Failed with a vertex or an edge conflict.
    Conflict,
    Invalid,
    Valid,
    Optimal,
}

/// A `--kind` that names no kind of sample; the message lists the kinds (the command
/// line's parser names the option and the value beside it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a kind of sample (one of {})", KindFilter::names().join(", "))]
pub struct NotAKind {
    pub name: String,
}

/// The kind a command line names (`--kind`): a failure kind, or `conflict`, `invalid`,
/// `valid`, `optimal`.
impl std::str::FromStr for KindFilter {
    type Err = NotAKind;

    fn from_str(name: &str) -> Result<KindFilter, NotAKind> {
        Ok(match name {
            "conflict" => KindFilter::Conflict,
            "invalid" => KindFilter::Invalid,
            "valid" => KindFilter::Valid,
            "optimal" => KindFilter::Optimal,
            other => KindFilter::Failure(
                FailureKind::ALL
                    .into_iter()
                    .find(|k| k.name() == other)
                    .ok_or_else(|| NotAKind { name: other.into() })?,
            ),
        })
    }
}

impl KindFilter {
    /// Every name `--kind` accepts, for messages.
    pub fn names() -> Vec<&'static str> {
        let mut v = vec!["conflict", "invalid", "valid", "optimal"];
        v.extend(FailureKind::ALL.iter().map(|k| k.name()));
        v
    }

    fn keeps(self, valid: bool, optimal: bool, failure: Option<FailureKind>) -> bool {
        match self {
            KindFilter::Failure(k) => failure == Some(k),
            KindFilter::Conflict => matches!(
                failure,
                Some(FailureKind::VertexConflict | FailureKind::EdgeConflict)
            ),
            KindFilter::Invalid => !valid,
            KindFilter::Valid => valid,
            KindFilter::Optimal => optimal,
        }
    }
}

/// A plan drawn on its grid: what the text and the page both render.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Drawing {
    pub size: u32,
    /// Grid rows, `F` frozen and `H` hole (row 0 first).
    pub rows: Vec<String>,
    /// Each agent's cells as (row, column), from its start to where the plan (or the
    /// simulation, at the first failure) stops.
    pub paths: Vec<Vec<(u32, u32)>>,
    pub goals: Vec<(u32, u32)>,
    /// Where it went wrong: the involved agents' cells at the failing timestep.
    pub failure_cells: Vec<(u32, u32)>,
}

/// One sampled plan.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Sample {
    pub branch: String,
    pub stage: u32,
    /// The evaluation suite (`val`, `test`) of a greedy evaluation plan; None: a plan
    /// GRPO sampled.
    pub suite: Option<String>,
    /// The optimiser step a sampled plan fed (None for evaluation plans).
    pub step: Option<u64>,
    /// The `trajectories` (or `evaluation_plans`) event it was recorded in, and its
    /// index there (for an evaluation, the item's index in the suite).
    pub event: Hash,
    pub index: u32,
    /// The instance blob.
    pub instance: Hash,
    pub agents: u32,
    pub needs_coordination: bool,
    /// The plan as the policy wrote it (text; a grid policy's moves per agent).
    pub plan: String,
    pub valid: bool,
    pub optimal: bool,
    pub failure: Option<FailureKind>,
    /// The simulator's account of the failure (re-simulated; absent when valid).
    pub detail: Option<String>,
    /// Sum of costs of the plan (0 when invalid) and of the optimum.
    pub cost: u32,
    pub optimal_cost: u32,
    /// GRPO's reward (None for evaluation plans, which are not rewarded).
    pub reward: Option<f64>,
    pub drawing: Drawing,
}

/// What one stage's batches held, before `--samples` picks from them.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Samples {
    pub branch: String,
    pub stage: u32,
    /// The evaluation suite the plans come from (None: GRPO's sampled plans).
    pub suite: Option<String>,
    /// Trajectories recorded in the stage, and how many the filter kept.
    pub recorded: u64,
    pub matching: u64,
    /// At most the requested number, spread evenly over the matching ones in recorded
    /// order (first, last, and evenly between).
    pub samples: Vec<Sample>,
}

/// The plan recorded as bytes, parsed for its instance: a language model's text, or a
/// grid policy's letters with agents separated by `|`. None when it does not parse.
fn parse_recorded(text: &str, inst: &Instance) -> Option<Plan> {
    if !text.contains(':') && text.bytes().all(|b| b"UDLRW|".contains(&b)) {
        let moves: Option<Vec<Vec<Move>>> = text
            .split('|')
            .map(|s| s.chars().map(Move::from_letter).collect())
            .collect();
        return moves.map(|moves| Plan { moves });
    }
    parse_recorded_plan(text, inst).ok()
}

/// The plan a sample draws: none when the run could not read it (its recorded failure is
/// a parse error or a wrong agent count), even where [`parse_recorded`] can. A plan of
/// a named instance whose lines use other names (`agent 1`, `agent 2`) failed to parse
/// in training, but the recorded instance does not keep the names, so this view would
/// read it under plain ones and draw paths the run never took. The recorded outcome
/// wins: the drawing says what it says.
fn drawn_plan(text: &str, inst: &Instance, recorded: Option<FailureKind>) -> Option<Plan> {
    match recorded {
        Some(FailureKind::ParseError | FailureKind::WrongAgentCount) => None,
        _ => parse_recorded(text, inst),
    }
}

fn rc(inst: &Instance, cell: crate::env::Cell) -> (u32, u32) {
    let (r, c) = inst.row_col(cell);
    (r as u32, c as u32)
}

/// The drawing of `plan` on `inst`: paths up to the failing timestep (or the end).
pub fn draw(inst: &Instance, plan: Option<&Plan>) -> (Drawing, Option<String>) {
    let k = inst.agents();
    let mut paths: Vec<Vec<(u32, u32)>> =
        inst.starts().iter().map(|&c| vec![rc(inst, c)]).collect();
    let mut failure_cells = Vec::new();
    let mut detail = None;
    if let Some(plan) = plan {
        let outcome = simulate(inst, plan);
        let stop = match &outcome.failure {
            Some(f) if f.t > 0 => f.t as usize,
            _ => plan.len(),
        };
        let mut pos: Vec<Option<crate::env::Cell>> =
            inst.starts().iter().map(|&c| Some(c)).collect();
        for t in 1..=stop {
            for a in 0..k.min(plan.moves.len()) {
                let mv = plan.moves[a].get(t - 1).copied().unwrap_or(Move::W);
                pos[a] = pos[a].and_then(|c| inst.step(c, mv));
                if let Some(c) = pos[a] {
                    if paths[a].last() != Some(&rc(inst, c)) {
                        paths[a].push(rc(inst, c));
                    }
                }
            }
        }
        if let Some(f) = &outcome.failure {
            for &a in &f.agents {
                // Off-grid moves leave the agent where it was: its last cell.
                if let Some(last) = paths.get(a as usize - 1).and_then(|p| p.last()) {
                    if !failure_cells.contains(last) {
                        failure_cells.push(*last);
                    }
                }
            }
            detail = Some(f.detail.clone());
        }
    }
    let drawing = Drawing {
        size: inst.size() as u32,
        rows: inst.grid_rows(),
        paths,
        goals: inst.goals().iter().map(|&c| rc(inst, c)).collect(),
        failure_cells,
    };
    (drawing, detail)
}

/// The drawing as text, one line per grid row: `H` hole, `.` frozen, digits the agents'
/// starts, letters (a, b, ...) their goals, `*` a path cell, `X` where it went wrong.
pub fn render_drawing(d: &Drawing) -> Vec<String> {
    let n = d.size as usize;
    let mut g: Vec<Vec<char>> = d
        .rows
        .iter()
        .map(|r| {
            r.chars()
                .map(|c| if c == 'H' { 'H' } else { '.' })
                .collect()
        })
        .collect();
    let mut put = |(r, c): (u32, u32), ch: char| {
        if let Some(cell) = g
            .get_mut(r as usize)
            .and_then(|row| row.get_mut(c as usize))
        {
            *cell = ch;
        }
    };
    for p in &d.paths {
        for &cell in p.iter().skip(1) {
            put(cell, '*');
        }
    }
    for (a, &goal) in d.goals.iter().enumerate() {
        put(goal, (b'a' + (a as u8 % 26)) as char);
    }
    for (a, p) in d.paths.iter().enumerate() {
        put(
            p[0],
            std::char::from_digit(((a + 1) % 10) as u32, 10).unwrap_or('?'),
        );
    }
    for &cell in &d.failure_cells {
        put(cell, 'X');
    }
    g.into_iter()
        .take(n)
        .map(|row| {
            row.into_iter()
                .map(String::from)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// One candidate before drawing: where it was recorded, and its recorded outcome.
struct Candidate {
    event: Hash,
    index: u32,
    step: Option<u64>,
    instance: Hash,
    plan: Vec<u8>,
    valid: bool,
    optimal: bool,
    failure: Option<FailureKind>,
    cost: u32,
    optimal_cost: u32,
    reward: Option<f64>,
}

/// Evenly spread picks of `k` among `m` (first and last included).
fn spread(m: usize, k: usize) -> Vec<usize> {
    match k.min(m) {
        0 => vec![],
        1 => vec![0],
        k => (0..k).map(|j| j * (m - 1) / (k - 1)).collect(),
    }
}

fn corrupt(what: String, problem: impl ToString) -> LedgerError {
    LedgerError::Corrupt {
        what,
        problem: problem.to_string(),
    }
}

/// `ledger show REF --samples N`: [`samples`] of the stage `reference` names
/// (`BRANCH@stageN`; anything else is [`LedgerError::NotAStage`]), up to its head.
pub fn samples_of(
    ledger: &Ledger,
    reference: &str,
    n: usize,
    kind: Option<KindFilter>,
    suite: Option<&str>,
) -> Result<Samples, LedgerError> {
    let (branch, stage) =
        ledger.stage_of(reference, "--samples shows one stage's sampled plans")?;
    let head = ledger.head_of(&branch)?;
    samples(ledger, &branch, &head, stage, n, kind, suite)
}

/// Up to `n` plans of `branch`'s stage `stage` (history to `head`) that pass `kind`,
/// spread evenly over the matching ones: GRPO's sampled plans, or with `suite` (`val`,
/// `test`) the greedy plans of the stage's evaluation on that suite (recorded when the
/// plan has `suites.keep_plans`).
pub fn samples(
    ledger: &Ledger,
    branch: &str,
    head: &Hash,
    stage: u32,
    n: usize,
    kind: Option<KindFilter>,
    suite: Option<&str>,
) -> Result<Samples, LedgerError> {
    let found = match suite {
        None => sampled_candidates(ledger, head, stage, kind)?,
        Some(name) => evaluation_candidates(ledger, branch, head, stage, name, kind)?,
    };
    let m = found.matching.len();
    let mut out = Vec::new();
    for pick in spread(m, n) {
        let c = &found.matching[pick];
        let solved: Solved = match suite {
            Some(_) => found.items[c.index as usize].clone(),
            None => crate::record::codec::decode(&ledger.blob(&c.instance)?, "training instance")
                .map_err(|e| {
                corrupt(format!("training instance blob {}", c.instance.short()), e)
            })?,
        };
        out.push(drawn_sample(branch, stage, suite, c, solved));
    }
    Ok(Samples {
        branch: branch.to_string(),
        stage,
        suite: suite.map(String::from),
        recorded: found.recorded,
        matching: m as u64,
        samples: out,
    })
}

/// The candidates of one stage, before `--samples` picks from them.
struct Found {
    /// Trajectories (or evaluation plans) recorded in the stage.
    recorded: u64,
    /// Those `--kind` keeps, in recorded order.
    matching: Vec<Candidate>,
    /// The suite's items by index, when the candidates are an evaluation's plans.
    items: Vec<Solved>,
}

impl Candidate {
    fn kept_by(&self, kind: Option<KindFilter>) -> bool {
        kind.is_none_or(|k| k.keeps(self.valid, self.optimal, self.failure))
    }
}

/// GRPO's sampled plans of `stage`, from its `trajectories` events.
fn sampled_candidates(
    ledger: &Ledger,
    head: &Hash,
    stage: u32,
    kind: Option<KindFilter>,
) -> Result<Found, LedgerError> {
    let mut matching = Vec::new();
    let mut recorded = 0u64;
    for (hash, ev) in ledger.history_to(head)? {
        if ev.stage != stage {
            continue;
        }
        let EventBody::Trajectories(batch) = ev.body else {
            continue;
        };
        recorded += batch.trajectories.len() as u64;
        for (i, t) in batch.trajectories.into_iter().enumerate() {
            let instance = batch
                .instances
                .get(t.instance as usize)
                .copied()
                .ok_or_else(|| {
                    corrupt(
                        format!("trajectories event {}", hash.short()),
                        format!(
                            "trajectory {i} names instance {} of {}",
                            t.instance,
                            batch.instances.len()
                        ),
                    )
                })?;
            let c = Candidate {
                event: hash,
                index: i as u32,
                step: Some(batch.step),
                instance,
                plan: t.plan,
                valid: t.valid,
                optimal: t.optimal,
                failure: t.failure,
                cost: t.cost,
                optimal_cost: t.optimal_cost,
                // The f32's shortest decimal, as an f64 (0.1, not 0.10000000149011612).
                reward: Some(
                    f32::from_bits(t.reward_bits)
                        .to_string()
                        .parse()
                        .unwrap_or(f64::NAN),
                ),
            };
            if c.kept_by(kind) {
                matching.push(c);
            }
        }
    }
    Ok(Found {
        recorded,
        matching,
        items: Vec::new(),
    })
}

/// One evaluation as recorded with its plans: the `evaluation_plans` event, the
/// outcomes, the plan texts and the suite's items, one each per item.
struct KeptEvaluation {
    event: Hash,
    outcomes: EvaluationOutcomes,
    texts: Vec<String>,
    items: Vec<Solved>,
}

/// The stage's last evaluation on suite `name` with its plans; an error when the stage
/// kept none (saying why), or when the plans, outcomes and items do not line up.
fn kept_evaluation(
    ledger: &Ledger,
    branch: &str,
    head: &Hash,
    stage: u32,
    name: &str,
) -> Result<KeptEvaluation, LedgerError> {
    // The stage's last evaluation of the suite: its outcomes and its plans.
    let mut outcomes = None;
    let mut plans = None;
    for (hash, ev) in ledger.history_to(head)? {
        match ev.body {
            EventBody::EvaluationOutcomes(o) if ev.stage == stage && o.suite == name => {
                outcomes = Some(o)
            }
            EventBody::EvaluationPlans(p) if ev.stage == stage && p.suite == name => {
                plans = Some((hash, p))
            }
            _ => {}
        }
    }
    let Some((event, p)) = plans else {
        return Err(LedgerError::Store(ledger_store::StoreError::Invalid(
            format!(
                "{branch}@stage{stage} kept no {name} plans: {}",
                if outcomes.is_some() {
                    "its plan does not set suites.keep_plans = true (evaluations record outcomes only)"
                } else {
                    "the stage has no evaluation on that suite"
                }
            ),
        )));
    };
    let o = outcomes.ok_or_else(|| {
        corrupt(
            format!("evaluation_plans event {}", event.short()),
            "no evaluation_outcomes before it",
        )
    })?;
    let texts: Vec<String> =
        crate::record::codec::decode(&ledger.blob(&p.plans)?, "evaluation plans")
            .map_err(|e| corrupt(format!("evaluation plans blob {}", p.plans.short()), e))?;
    let recorded_suite = super::coordination::suite_items(ledger, head)?
        .remove(name)
        .unwrap_or_default();
    if texts.len() != o.outcomes.len() || recorded_suite.items.len() != texts.len() {
        return Err(corrupt(
            format!("evaluation_plans event {}", event.short()),
            format!(
                "{} plans for {} outcomes and {} suite items",
                texts.len(),
                o.outcomes.len(),
                recorded_suite.items.len()
            ),
        ));
    }
    Ok(KeptEvaluation {
        event,
        outcomes: o,
        texts,
        items: recorded_suite.items,
    })
}

/// The greedy plans of the stage's last evaluation on suite `name`, with their
/// outcomes (re-simulated for the failure kind and cost) and the suite's items.
fn evaluation_candidates(
    ledger: &Ledger,
    branch: &str,
    head: &Hash,
    stage: u32,
    name: &str,
    kind: Option<KindFilter>,
) -> Result<Found, LedgerError> {
    let KeptEvaluation {
        event,
        outcomes: o,
        texts,
        items,
    } = kept_evaluation(ledger, branch, head, stage, name)?;
    let recorded = texts.len() as u64;
    let mut matching = Vec::new();
    for (i, text) in texts.into_iter().enumerate() {
        let it = &items[i];
        let plan = parse_recorded(&text, &it.instance);
        let outcome = plan.as_ref().map(|p| simulate(&it.instance, p));
        let c = Candidate {
            event,
            index: i as u32,
            step: None,
            instance: Hash([0; 32]),
            plan: text.into_bytes(),
            valid: o.outcomes[i] >= crate::record::event::OUTCOME_VALID,
            optimal: o.outcomes[i] == crate::record::event::OUTCOME_OPTIMAL,
            failure: match &outcome {
                Some(out) => out.failure_kind(),
                None => Some(FailureKind::ParseError),
            },
            cost: outcome.as_ref().map_or(0, |o| o.sum_of_costs),
            optimal_cost: it.reference.sum_of_costs,
            reward: None,
        };
        if c.kept_by(kind) {
            matching.push(c);
        }
    }
    Ok(Found {
        recorded,
        matching,
        items,
    })
}

/// One picked candidate as a [`Sample`]: its plan drawn on its instance `solved`.
fn drawn_sample(
    branch: &str,
    stage: u32,
    suite: Option<&str>,
    c: &Candidate,
    solved: Solved,
) -> Sample {
    let inst = &solved.instance;
    let text = String::from_utf8_lossy(&c.plan).into_owned();
    let plan = drawn_plan(&text, inst, c.failure);
    let (drawing, detail) = draw(inst, plan.as_ref());
    // A plan that does not parse has no path; the recorded failure says why.
    let detail = detail.or_else(|| (!c.valid).then(|| "the plan text does not parse".to_string()));
    Sample {
        branch: branch.to_string(),
        stage,
        suite: suite.map(String::from),
        step: c.step,
        event: c.event,
        index: c.index,
        instance: match suite {
            Some(_) => Hash::of_blob(&crate::record::codec::encode(&solved)),
            None => c.instance,
        },
        agents: inst.agents() as u32,
        needs_coordination: solved.needs_coordination,
        plan: agent_lines(text),
        valid: c.valid,
        optimal: c.optimal,
        failure: if c.valid { None } else { c.failure },
        detail: if c.valid { None } else { detail },
        cost: c.cost,
        optimal_cost: c.optimal_cost,
        reward: c.reward,
        drawing,
    }
}

/// A recorded plan as a person reads it: a language model's text as written, a grid
/// policy's `|`-separated moves as one `agent N: ...` line per agent.
fn agent_lines(text: String) -> String {
    if text.contains(':') {
        text
    } else {
        text.split('|')
            .enumerate()
            .map(|(a, m)| format!("agent {}: {m}", a + 1))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::text::parse_plan;

    fn inst() -> Instance {
        // 3x3, hole in the middle; agent 1 (0,0) -> (0,2), agent 2 (0,2) -> (0,0).
        let holes = vec![false, false, false, false, true, false, false, false, false];
        Instance::new(3, holes, vec![0, 2], vec![2, 0]).unwrap()
    }

    #[test]
    fn a_conflict_is_drawn_where_it_happens() {
        let i = inst();
        // Both walk the top row towards each other: they meet at (0,1) at t = 1.
        let plan = parse_plan("agent 1: R R\nagent 2: L L", 2).unwrap();
        let (d, detail) = draw(&i, Some(&plan));
        assert_eq!(d.failure_cells, vec![(0, 1)]);
        assert!(detail.unwrap().contains("agent"));
        assert_eq!(render_drawing(&d), vec!["1 X 2", ". H .", ". . ."]);
    }

    #[test]
    fn a_plan_the_run_could_not_read_is_not_drawn() {
        let i = inst();
        let text = "agent 1: R R\nagent 2: L L";
        // Readable under plain names, so drawn when the run read it too...
        assert!(drawn_plan(text, &i, Some(FailureKind::VertexConflict)).is_some());
        assert!(drawn_plan(text, &i, None).is_some());
        // ...but not when the run recorded that it could not (a named instance's
        // plan written with plain names): no paths, only the starts.
        for kind in [FailureKind::ParseError, FailureKind::WrongAgentCount] {
            let plan = drawn_plan(text, &i, Some(kind));
            assert!(plan.is_none(), "{kind:?}");
            let (d, detail) = draw(&i, plan.as_ref());
            assert_eq!(d.paths, vec![vec![(0, 0)], vec![(0, 2)]]);
            assert!(d.failure_cells.is_empty() && detail.is_none());
        }
    }

    #[test]
    fn a_fall_marks_the_hole_and_grid_moves_parse() {
        let i = inst();
        let plan = parse_recorded("DR|W", &i).unwrap();
        assert_eq!(plan.moves.len(), 2);
        let (d, _) = draw(&i, Some(&plan));
        assert_eq!(d.paths[0], vec![(0, 0), (1, 0), (1, 1)]);
        assert_eq!(d.failure_cells, vec![(1, 1)]);
        assert_eq!(render_drawing(&d), vec!["1 . 2", "* X .", ". . ."]);
    }

    #[test]
    fn kinds_parse_by_name() {
        assert_eq!(
            "conflict".parse::<KindFilter>().unwrap(),
            KindFilter::Conflict
        );
        assert_eq!(
            "hole".parse::<KindFilter>().unwrap(),
            KindFilter::Failure(FailureKind::Hole)
        );
        let e = "holes".parse::<KindFilter>().unwrap_err().to_string();
        assert!(e.contains("vertex_conflict"), "{e}");
    }
}
