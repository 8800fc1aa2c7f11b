//! The rubric of `ledger engineer eval`: what a decision is scored on, by rules
//! written down and versioned.
//!
//! The rules, written down and versioned ([`RULES_VERSION`]; change them only with a
//! new version; v2 reads a failure-kind count only from a whole token, so an edit such
//! as `holes -0.05` is no claim; v3 estimates learnability size by size):
//! - a size is **weak** when its validation valid rate is below [`WEAK_BELOW`] %, and
//!   **working** otherwise (the `heuristic` and `learnability` engineers use the same
//!   80% line); its **dominant failure** is the kind with the most failures (ties: the
//!   simulator's order);
//! - **targeting**: the share of edited sizes that are weak; **preserve**: the share of
//!   working sizes left unchanged (the paper's "preserve configurations that already
//!   work"); a size is edited when one of its ratios changes at two decimals, or it is
//!   added or dropped;
//! - **direction**: per weak size with a dominant failure *that the decision edits*,
//!   whether the field that answers the failure moved the way [`answer`] says (how
//!   many weak sizes are edited at all is not direction's business: an engineer may
//!   rightly change one size a stage): conflicts (vertex, edge) → more
//!   coordination (`wait_ratio` up); holes → fewer holes (`hole_ratio` down); goals
//!   not reached, plans too long, parse errors, illegal moves, wrong agent counts →
//!   more practice at that size (`data_ratio` up);
//! - **grounding**: the rationale is split into clauses (at `;` and line ends); a clause
//!   that names a size (`10:`, `10x10`, `size 10`) and makes a claim about it (a
//!   fraction `a/b`, a failure kind by its name, `valid P%`) is checked against that
//!   size's evidence: the fraction must be its failed count or one kind's count over
//!   its total, the kind must have failures there, the valid rate must match the
//!   summary; a claim in a clause that names no size must hold for some size. A
//!   rationale is grounded when every claim holds (rates count only rationales that
//!   claim something);
//! - **learnability** (with a reference policy): the policy's pass rate p on instances
//!   drawn from the configuration the decision leads to, per probe instance, scored
//!   4·mean p(1-p): highest when the stage would be neither solved nor hopeless
//!   (GenEnv's α-curriculum, the `learnability` engineer's own criterion). Estimated
//!   size by size ([`crate::engineer::probe::SizeProbe`]): [`super::PROBE_PER_SIZE`] instances of each
//!   size drawn from its own settings with the context's seed for that size, common to
//!   every engineer, [`super::PROBE_SAMPLES`] plans each, weighted by data ratio; so sizes two
//!   engineers leave alike score the same for both and paired differences measure the
//!   edits (v2 drew 24 instances from the whole configuration anew for each engineer).
use crate::context::EngineerContext;
use crate::engineer::Decision;
use crate::env::config::SizeConfig;
use crate::env::{project, FailureKind, GeneratorConfig};
use crate::record::event::SizeFailures;
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// The version of the scoring rules above (in every report).
pub const RULES_VERSION: &str = "engineer-eval rules v3";

/// Validation valid % below which a size is weak.
pub const WEAK_BELOW: f64 = 80.0;

/// What a context's evidence calls for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
pub struct Truth {
    /// Weak sizes with their dominant failure kind (None: no failure recorded).
    pub weak: BTreeMap<usize, Option<FailureKind>>,
    /// Working sizes (valid at or above the line).
    pub working: BTreeSet<usize>,
}

/// A ratio of the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    DataRatio,
    HoleRatio,
    WaitRatio,
}

impl Field {
    fn of(self, c: &SizeConfig) -> f64 {
        match self {
            Field::DataRatio => c.data_ratio,
            Field::HoleRatio => c.hole_ratio,
            Field::WaitRatio => c.wait_ratio,
        }
    }
}

/// The field that answers a failure kind, and whether it should go up.
pub fn answer(kind: FailureKind) -> (Field, bool) {
    match kind {
        FailureKind::VertexConflict | FailureKind::EdgeConflict => (Field::WaitRatio, true),
        FailureKind::Hole => (Field::HoleRatio, false),
        FailureKind::GoalNotReached
        | FailureKind::TooLong
        | FailureKind::ParseError
        | FailureKind::IllegalMove
        | FailureKind::WrongAgentCount => (Field::DataRatio, true),
    }
}

pub(super) fn failures_of(ctx: &EngineerContext, n: usize) -> Option<&SizeFailures> {
    ctx.failures.sizes.iter().find(|s| s.size as usize == n)
}

/// The truth of a context, by the rules.
pub fn truth(ctx: &EngineerContext) -> Truth {
    let mut t = Truth::default();
    for (&(k, n), c) in &ctx.validation.cells {
        if k != ctx.current.agents || c.total == 0 {
            continue;
        }
        if c.valid_rate() >= WEAK_BELOW {
            t.working.insert(n);
            continue;
        }
        let dominant = failures_of(ctx, n).and_then(|s| {
            // Ties go to the simulator's order of kinds.
            let mut best: Option<(FailureKind, u32)> = None;
            for k in FailureKind::ALL {
                let c: u32 = s.counts.iter().filter(|x| x.0 == k).map(|x| x.1).sum();
                if c > 0 && best.is_none_or(|b| c > b.1) {
                    best = Some((k, c));
                }
            }
            best.map(|b| b.0)
        });
        t.weak.insert(n, dominant);
    }
    t
}

// ---- grounding ----

/// One claim a rationale makes, and whether the context bears it out.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Claim {
    /// The clause it was read from.
    pub text: String,
    /// The size the clause is about (None: none named).
    pub size: Option<u32>,
    pub holds: bool,
}

/// A failure kind named in text: its snake_case name, or `hole` followed by a count
/// or after `mostly` (plain "holes" is also how rationales describe edits).
fn kinds_in(clause: &str) -> Vec<FailureKind> {
    let lower = clause.to_lowercase();
    let mut out = Vec::new();
    for k in FailureKind::ALL {
        let name = k.name();
        if name.contains('_') {
            if lower.contains(name) {
                out.push(k);
            }
            continue;
        }
        // Words as written (a count is a whole token: `hole 4,` cites a count, `holes
        // -0.05` describes an edit; v1 split `-0.05` into `0` and `05` and read a count).
        let words: Vec<&str> = lower
            .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '(' | ')' | ':'))
            .map(|w| w.trim_matches(|c: char| matches!(c, '.' | '"' | '\'')))
            .filter(|w| !w.is_empty())
            .collect();
        for (i, w) in words.iter().enumerate() {
            let next_is_count = words.get(i + 1).is_some_and(|n| n.parse::<u32>().is_ok());
            let after_mostly = i > 0 && words[i - 1] == "mostly";
            if (*w == name || *w == format!("{name}s")) && (next_is_count || after_mostly) {
                out.push(k);
                break;
            }
        }
    }
    out
}

/// Sizes a clause names: `N:`, `NxN`, `size N`.
fn sizes_in(clause: &str) -> Vec<u32> {
    let b = clause.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() || (i > 0 && (b[i - 1].is_ascii_digit() || b[i - 1] == b'.')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let n: u32 = clause[start..i].parse().unwrap_or(0);
        let before = clause[..start].trim_end().to_lowercase();
        let colon = b.get(i) == Some(&b':');
        let times = b.get(i) == Some(&b'x') && clause[i + 1..].starts_with(&clause[start..i]);
        if colon || times || before.ends_with("size") {
            out.push(n);
        }
    }
    out
}

/// `a/b` fractions in a clause.
fn fractions_in(clause: &str) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for w in clause.split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')') {
        if let Some((a, b)) = w.split_once('/') {
            if let (Ok(a), Ok(b)) = (a.parse(), b.trim_end_matches(['.', ':']).parse()) {
                out.push((a, b));
            }
        }
    }
    out
}

/// `valid P%` rates in a clause.
fn valid_rates_in(clause: &str) -> Vec<f64> {
    let words: Vec<&str> = clause.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0].eq_ignore_ascii_case("valid"))
        .filter_map(|w| w[1].strip_suffix('%')?.parse().ok())
        .collect()
}

/// Whether each claim of `rationale` holds in `ctx` (see the module's rules).
pub fn claims(ctx: &EngineerContext, rationale: &str) -> Vec<Claim> {
    let size_holds =
        |n: u32, fractions: &[(u32, u32)], kinds: &[FailureKind], rates: &[f64]| -> bool {
            let f = failures_of(ctx, n as usize);
            let cell = ctx.validation.cells.get(&(ctx.current.agents, n as usize));
            let frac_ok = fractions.iter().all(|&(a, b)| {
                f.is_some_and(|s| {
                    let failed: u32 = s.counts.iter().map(|c| c.1).sum();
                    b == s.total && (a == failed || s.counts.iter().any(|c| c.1 == a))
                }) || cell.is_some_and(|c| b == c.total && (a == c.valid || a == c.optimal))
            });
            let kind_ok = kinds
                .iter()
                .all(|k| f.is_some_and(|s| s.counts.iter().any(|c| c.0 == *k && c.1 > 0)));
            // Rates are written rounded to 0, 1 or 2 decimals.
            let rate_ok = rates
                .iter()
                .all(|&r| cell.is_some_and(|c| (c.valid_rate() - r).abs() <= 0.5 + 1e-9));
            frac_ok && kind_ok && rate_ok
        };
    let mut sizes_known: BTreeSet<u32> = ctx.failures.sizes.iter().map(|s| s.size).collect();
    sizes_known.extend(ctx.validation.cells.keys().map(|k| k.1 as u32));
    let mut out = Vec::new();
    for clause in rationale
        .split([';', '\n'])
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        let fractions = fractions_in(clause);
        let kinds = kinds_in(clause);
        let rates = valid_rates_in(clause);
        if fractions.is_empty() && kinds.is_empty() && rates.is_empty() {
            continue;
        }
        let size = sizes_in(clause).first().copied();
        let holds = match size {
            Some(n) => sizes_known.contains(&n) && size_holds(n, &fractions, &kinds, &rates),
            None => sizes_known
                .iter()
                .any(|&n| size_holds(n, &fractions, &kinds, &rates)),
        };
        out.push(Claim {
            text: clause.to_string(),
            size,
            holds,
        });
    }
    out
}

// ---- scoring ----

/// One decision, scored.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct ContextScore {
    pub context: String,
    /// A proposal came out of the reply.
    pub parsed: bool,
    /// It projects onto the legal ranges with nothing clipped and no key refused.
    pub legal: bool,
    /// Every claim of the rationale holds ([`claims`]).
    pub grounded: bool,
    pub claims: Vec<Claim>,
    /// Sizes the applied configuration changes.
    pub edited: Vec<usize>,
    /// Share of edited sizes that are weak (None: nothing edited).
    pub targeting: Option<f64>,
    /// Share of working sizes left alone (None: no working size).
    pub preserve: Option<f64>,
    /// Share of the edited weak sizes (with a recorded failure) whose answering field
    /// moved the rule's way (None: no such size edited).
    pub direction: Option<f64>,
    /// The reference policy's learnability on instances drawn from the configuration
    /// the decision leads to: 4·mean p(1-p) over probe instances (1 when every instance
    /// is solved half the time, 0 when all or none), and its mean pass rate p. None
    /// without `--reference`.
    pub learnability: Option<f64>,
    pub pass_rate: Option<f64>,
    pub truth: Truth,
    pub rationale: String,
}

/// The configuration a decision leads to (the current one when nothing usable was
/// proposed, as the stage pipeline keeps it), and whether the proposal was legal as
/// written.
pub fn applied(ctx: &EngineerContext, decision: &Decision) -> (GeneratorConfig, bool) {
    let parsed = decision.proposal.is_some() && decision.error.is_none();
    match &decision.proposal {
        Some(p) => match project(&ctx.current, p) {
            (Ok(cfg), clips) => (
                cfg,
                parsed && clips.is_empty() && decision.refused.is_empty(),
            ),
            (Err(_), _) => (ctx.current.clone(), false),
        },
        None => (ctx.current.clone(), false),
    }
}

/// Score `decision`, made for `ctx`.
pub fn score(id: &str, ctx: &EngineerContext, decision: &Decision) -> ContextScore {
    let truth = truth(ctx);
    let parsed = decision.proposal.is_some() && decision.error.is_none();
    let (applied, legal) = applied(ctx, decision);
    let changed =
        |a: f64, b: f64| crate::engineer::text::ratio(a) != crate::engineer::text::ratio(b);
    let sizes: BTreeSet<usize> = ctx
        .current
        .sizes
        .keys()
        .chain(applied.sizes.keys())
        .copied()
        .collect();
    let edited: Vec<usize> = sizes
        .into_iter()
        .filter(|n| match (ctx.current.sizes.get(n), applied.sizes.get(n)) {
            (Some(a), Some(b)) => {
                changed(a.data_ratio, b.data_ratio)
                    || changed(a.hole_ratio, b.hole_ratio)
                    || changed(a.wait_ratio, b.wait_ratio)
            }
            _ => true,
        })
        .collect();
    let targeting = (!edited.is_empty()).then(|| {
        edited.iter().filter(|n| truth.weak.contains_key(n)).count() as f64 / edited.len() as f64
    });
    let preserve = (!truth.working.is_empty()).then(|| {
        truth.working.iter().filter(|n| !edited.contains(n)).count() as f64
            / truth.working.len() as f64
    });
    let answerable: Vec<(usize, FailureKind)> = truth
        .weak
        .iter()
        .filter(|(n, _)| edited.contains(n))
        .filter_map(|(&n, k)| Some((n, (*k)?)))
        .collect();
    let direction = (!answerable.is_empty()).then(|| {
        let right = answerable
            .iter()
            .filter(|(n, k)| {
                let (field, up) = answer(*k);
                match (ctx.current.sizes.get(n), applied.sizes.get(n)) {
                    (Some(a), Some(b)) => {
                        let (x, y) = (field.of(a), field.of(b));
                        changed(x, y) && ((y > x) == up)
                    }
                    _ => false,
                }
            })
            .count();
        right as f64 / answerable.len() as f64
    });
    let claims = claims(ctx, &decision.rationale);
    ContextScore {
        context: id.to_string(),
        parsed,
        legal,
        grounded: claims.iter().all(|c| c.holds),
        claims,
        edited,
        targeting,
        preserve,
        direction,
        learnability: None,
        pass_rate: None,
        truth,
        rationale: decision.rationale.clone(),
    }
}

/// Means over contexts (rates in %, over the contexts where each is defined).
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Summary {
    pub contexts: usize,
    pub parse_pct: f64,
    pub legal_pct: f64,
    /// Contexts whose rationale made at least one checkable claim, and the share of
    /// those whose every claim holds (None: no rationale claimed anything).
    pub claiming_contexts: usize,
    pub grounded_pct: Option<f64>,
    pub targeting_pct: Option<f64>,
    pub preserve_pct: Option<f64>,
    pub direction_pct: Option<f64>,
    /// Mean learnability score (%), with `--reference`.
    pub learnability_pct: Option<f64>,
}

fn mean(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = xs.collect();
    (!v.is_empty()).then(|| 100.0 * v.iter().sum::<f64>() / v.len() as f64)
}

pub fn summarise(rows: &[ContextScore]) -> Summary {
    let pct = |f: &dyn Fn(&ContextScore) -> bool| {
        mean(rows.iter().map(|r| f(r) as u8 as f64)).unwrap_or(0.0)
    };
    Summary {
        contexts: rows.len(),
        parse_pct: pct(&|r| r.parsed),
        legal_pct: pct(&|r| r.legal),
        claiming_contexts: rows.iter().filter(|r| !r.claims.is_empty()).count(),
        grounded_pct: mean(
            rows.iter()
                .filter(|r| !r.claims.is_empty())
                .map(|r| r.grounded as u8 as f64),
        ),
        targeting_pct: mean(rows.iter().filter_map(|r| r.targeting)),
        preserve_pct: mean(rows.iter().filter_map(|r| r.preserve)),
        direction_pct: mean(rows.iter().filter_map(|r| r.direction)),
        learnability_pct: mean(rows.iter().filter_map(|r| r.learnability)),
    }
}

/// One engineer over every context.

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::table::{CellCounts, ResultTable};
    use crate::record::event::FailureBreakdown;

    fn ctx() -> EngineerContext {
        // The demo's stage-3 context as the issue quotes it: size 10 6/20 failed (2
        // parse errors, 3 holes, 1 vertex conflict), size 9 5/20 (2 holes, 3 vertex
        // conflicts), size 8 working.
        let mut current = GeneratorConfig::uniform(2, 8..=10, 0.1, 0.44);
        current.sizes.get_mut(&10).unwrap().wait_ratio = 0.44;
        let mut validation = ResultTable::default();
        for (n, valid) in [(8, 19), (9, 15), (10, 14)] {
            validation.cells.insert(
                (2, n),
                CellCounts {
                    total: 20,
                    valid,
                    optimal: valid,
                },
            );
        }
        let failures = FailureBreakdown {
            suite: "val".into(),
            sizes: vec![
                SizeFailures {
                    size: 8,
                    total: 20,
                    counts: vec![(FailureKind::Hole, 1)],
                    examples: vec![],
                },
                SizeFailures {
                    size: 9,
                    total: 20,
                    counts: vec![(FailureKind::Hole, 2), (FailureKind::VertexConflict, 3)],
                    examples: vec![],
                },
                SizeFailures {
                    size: 10,
                    total: 20,
                    counts: vec![
                        (FailureKind::ParseError, 2),
                        (FailureKind::Hole, 3),
                        (FailureKind::VertexConflict, 1),
                    ],
                    examples: vec![],
                },
            ],
        };
        EngineerContext {
            stage: 3,
            current,
            validation,
            failures,
            history: vec![],
            training: Default::default(),
            modules: Default::default(),
            max_size: 10,
        }
    }

    fn decision(json: &str, rationale: &str) -> Decision {
        Decision {
            proposal: Some(serde_json::from_str(json).unwrap()),
            rationale: rationale.into(),
            ..Decision::default()
        }
    }

    #[test]
    fn the_demo_rationale_is_not_grounded_and_a_true_one_is() {
        let c = ctx();
        let lie = claims(
            &c,
            "10: 17/20 failed, mostly goal_not_reached; 9: 16/20 failed, mostly goal_not_reached",
        );
        assert_eq!(lie.len(), 2);
        assert!(lie.iter().all(|x| !x.holds), "{lie:?}");
        let truth = claims(&c, "10: 6/20 failed, mostly hole; 9x9: vertex_conflict 3 of its 5 failures; size 8 valid 95%");
        assert!(truth.iter().all(|x| x.holds), "{truth:?}");
        assert_eq!(truth.len(), 3);
        // A size the context does not have cannot be the subject of evidence.
        assert!(!claims(&c, "7: 3/20 failed")[0].holds);
        // Describing an edit is not a claim.
        assert!(claims(&c, "10x10: more holes and coordination").is_empty());
        assert!(claims(&c, "8x8: holes -0.05 (pass 0.46)").is_empty());
        assert!(claims(&c, "9: hole 2, vertex_conflict 3")[0].holds);
        assert!(!claims(&c, "8: vertex_conflict 2")[0].holds, "8 has none");
    }

    #[test]
    fn targeting_preserve_and_direction_follow_the_rules() {
        let c = ctx();
        let t = truth(&c);
        assert_eq!(t.working, BTreeSet::from([8]));
        assert_eq!(t.weak[&9], Some(FailureKind::VertexConflict));
        assert_eq!(t.weak[&10], Some(FailureKind::Hole));
        // Answers both: wait up on 9, holes down on 10, 8 untouched.
        let good = score(
            "g",
            &c,
            &decision(
                r#"{"sizes": {"9": {"wait_ratio": 0.6}, "10": {"hole_ratio": 0.05}}}"#,
                "9: vertex_conflict 3",
            ),
        );
        assert!(good.parsed && good.legal && good.grounded);
        assert_eq!(
            (good.targeting, good.preserve, good.direction),
            (Some(1.0), Some(1.0), Some(1.0))
        );
        // The demo's decision: size 10's wait ratio cut from 0.44 to 0.04, and 8 edited.
        let bad = score(
            "b",
            &c,
            &decision(
                r#"{"sizes": {"10": {"wait_ratio": 0.04}, "8": {"data_ratio": 0.9}}}"#,
                "",
            ),
        );
        assert_eq!(
            (bad.targeting, bad.preserve, bad.direction),
            (Some(0.5), Some(0.0), Some(0.0))
        );
        // Clipped values are not legal; no proposal parses to nothing.
        let clipped = score(
            "c",
            &c,
            &decision(r#"{"sizes": {"9": {"wait_ratio": 1.7}}}"#, ""),
        );
        assert!(clipped.parsed && !clipped.legal);
        let none = score(
            "n",
            &c,
            &Decision {
                error: Some("garbled".into()),
                ..Decision::default()
            },
        );
        assert!(!none.parsed && !none.legal && none.targeting.is_none());
    }
}
