//! The rubric of `ledger engineer eval`: what a decision is scored on, by rules
//! written down and versioned ([`Rules`]; change them only with a new version; results
//! name the version they were scored under, and every version stays runnable with
//! `engineer eval --rules`).
//!
//! Common to every version:
//! - a size is **weak** when its validation valid rate is below [`WEAK_BELOW`] %, and
//!   **working** otherwise (the `heuristic` and `learnability` engineers use the same
//!   80% line); its **dominant failure** is the kind with the most failures (ties: the
//!   simulator's order);
//! - **targeting**: the share of edited sizes that are weak; **preserve**: the share of
//!   working sizes left unchanged (the paper's "preserve configurations that already
//!   work"); a size is edited when one of its ratios changes at two decimals, or it is
//!   added or dropped;
//! - the **rule table** ([`answer`]): conflicts (vertex, edge) → more coordination
//!   (`wait_ratio` up); holes → fewer holes (`hole_ratio` down); goals not reached,
//!   plans too long, parse errors, illegal moves, wrong agent counts → more practice at
//!   that size (`data_ratio` up);
//! - **claims**: the rationale is split into clauses (at `;` and line ends); a clause
//!   that makes a claim (a fraction `a/b`, a failure kind by its name, `valid P%`) about
//!   a size it names (`10:`, `10x10`, `size 10`) is checked against that size's
//!   evidence: the fraction must be its failed count or one kind's count over its
//!   total, the kind must have failures there, the valid rate must match the summary.
//!   A kind's count is read only from a whole token (`holes -0.05` describes an edit);
//! - **learnability** (with a reference policy): the policy's pass rate p on instances
//!   drawn from the configuration the decision leads to, per probe instance, scored
//!   4·mean p(1-p): highest when the stage would be neither solved nor hopeless
//!   (GenEnv's α-curriculum, the `learnability` engineer's own criterion). Estimated
//!   size by size ([`crate::engineer::probe::SizeProbe`]): [`super::PROBE_PER_SIZE`]
//!   instances of each size drawn from its own settings with the context's seed for
//!   that size, common to every engineer, [`super::PROBE_SAMPLES`] plans each, weighted
//!   by data ratio.
//!
//! **Rules v3** (`engineer-eval rules v3`):
//! - **direction**: per weak size with a dominant failure *that the decision edits*,
//!   whether the field that answers the failure moved the rule table's way (how many
//!   weak sizes are edited is not direction's business);
//! - **grounding**: a claim in a clause that names no size must hold for some size; a
//!   rationale is grounded when every claim holds, and rates count only rationales
//!   that claim something.
//!
//! v3 can be passed without reading: an engineer that raises data, lowers holes and
//! raises waits on the sizes with the most failures (`blind`) moves every weak size's
//! answering field the right way whatever its failure, and cites nothing.
//!
//! **Rules v4** (`engineer-eval rules v4`):
//! - **direction** is judged field by field: every ratio a decision moves on a size
//!   that stays in the configuration is one move ([`FieldMove`]), *justified* when the
//!   size's own breakdown holds failures that this field answers, in the direction the
//!   rule table says, making at least [`MATERIAL_SHARE`] (a tenth) of the size's
//!   failures. Direction is the share of moves that are justified,
//!   so a move no failure of its size calls for counts against the decision. (Adding or
//!   dropping a size moves no field; targeting judges it.)
//! - **grounding**: a claim that names no size is not evidence (it does not hold). A
//!   decision is judged when it claims something or edits a size, and grounded when
//!   every claim holds *and* every edited size that has a breakdown line is cited: a
//!   clause about it gives its failed/total and, when it has failures, a kind its line
//!   holds ([`ContextScore::uncited`] lists the sizes that were not).
//! - **acts**: on a context with a weak size, whether the decision edits anything; it
//!   stands beside preserve, so doing nothing does not win.
//!
//! **Rules v5** (`engineer-eval rules v5`, the default): v4, with a whole-configuration
//! edit (engineer text revision 7's `all` entry) judged as one decision about the
//! configuration rather than as an edit of every size. A size is **edited by its entry**
//! when the proposal names it (or it is added or dropped); a size the `all` entry alone
//! changes is **moved whole**. Then:
//! - targeting and preserve count the sizes edited by their entry only (a whole edit
//!   moves working sizes by design: the headroom pilot measured it to help, so it is
//!   judged by direction);
//! - a field the `all` entry moves is one move ([`FieldMove`] with `size` 0), justified
//!   when the weak sizes' failures that this field answers in this direction make at
//!   least [`MATERIAL_SHARE`] of the weak sizes' failures (pooled); moves of sizes
//!   edited by their entry are judged as in v4;
//! - grounding asks every size edited by its entry to be cited, as v4, and a whole edit
//!   to cite at least one size's line (a clause with its failed/total and a kind its
//!   line holds).
use crate::context::EngineerContext;
use crate::engineer::Decision;
use crate::env::config::SizeConfig;
use crate::env::{project, FailureKind, GeneratorConfig};
use crate::record::event::SizeFailures;
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// A version of the scoring rules above.
///
/// Why a second version scheme beside the engineer text's revisions
/// ([`crate::engineer::text::TextRevision`]): a text revision is what an engineer
/// *reads and writes* (recorded ledgers replay at theirs, byte for byte), while a rules
/// version is how the benchmark *judges* a reply. They move independently: every text
/// revision is scored under either rules version, and reports name the rules they were
/// scored under (`engineer-eval rules v4`) so old reports stay comparable. Folding one
/// into the other would make re-scoring an old ledger's replies change what it replays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rules {
    V3,
    V4,
    #[default]
    V5,
}

impl Rules {
    /// Every version, oldest first.
    pub const ALL: [Rules; 3] = [Rules::V3, Rules::V4, Rules::V5];

    /// The name every report carries (`engineer-eval rules v4`).
    pub fn name(self) -> &'static str {
        match self {
            Rules::V3 => "engineer-eval rules v3",
            Rules::V4 => "engineer-eval rules v4",
            Rules::V5 => "engineer-eval rules v5",
        }
    }
}

/// A rules version no one wrote.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("no engineer-eval rules {0:?} (known: v3, v4, v5)")]
pub struct UnknownRules(pub String);

impl Rules {
    /// The rules numbered `n` (a plan's `[engineer.train] rules`).
    pub fn of(n: u32) -> Result<Rules, UnknownRules> {
        match n {
            3 => Ok(Rules::V3),
            4 => Ok(Rules::V4),
            5 => Ok(Rules::V5),
            _ => Err(UnknownRules(n.to_string())),
        }
    }
}

impl std::str::FromStr for Rules {
    type Err = UnknownRules;
    /// `v3`, `3`, `v4`, `4`, `v5`, `5`, or the full name.
    fn from_str(s: &str) -> Result<Rules, UnknownRules> {
        let t = s.trim();
        let t = t.strip_prefix("engineer-eval rules ").unwrap_or(t);
        t.strip_prefix('v')
            .unwrap_or(t)
            .parse()
            .ok()
            .and_then(|n| Rules::of(n).ok())
            .ok_or_else(|| UnknownRules(s.to_string()))
    }
}

/// The name of the default rules (what `engineer eval` scores by).
pub const RULES_VERSION: &str = "engineer-eval rules v5";

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
    /// Its key in a configuration and a proposal (`wait_ratio`).
    pub fn name(self) -> &'static str {
        match self {
            Field::DataRatio => "data_ratio",
            Field::HoleRatio => "hole_ratio",
            Field::WaitRatio => "wait_ratio",
        }
    }

    /// Its value in `c`.
    pub fn of(self, c: &SizeConfig) -> f64 {
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

/// Whether each claim of `rationale` holds in `ctx` under `rules` (see the module doc).
pub fn claims(ctx: &EngineerContext, rationale: &str, rules: Rules) -> Vec<Claim> {
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
            // v4: a claim about no size is not evidence.
            None if rules >= Rules::V4 => false,
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

/// Whether `rationale` cites size `n` as rules v4 asks: a clause naming `n` gives its
/// failed/total and, when it has failures, a kind its breakdown line holds (in one
/// clause or across clauses about `n`). A size without a breakdown line needs no
/// citation (None).
fn cited(ctx: &EngineerContext, rationale: &str, n: usize) -> Option<bool> {
    let f = failures_of(ctx, n)?;
    let failed: u32 = f.counts.iter().map(|c| c.1).sum();
    let (mut fraction, mut kind) = (false, failed == 0);
    for clause in rationale
        .split([';', '\n'])
        .map(str::trim)
        .filter(|c| sizes_in(c).first() == Some(&(n as u32)))
    {
        fraction |= fractions_in(clause).contains(&(failed, f.total));
        kind |= kinds_in(clause)
            .iter()
            .any(|k| f.counts.iter().any(|c| c.0 == *k && c.1 > 0));
    }
    Some(fraction && kind)
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
    /// Whether grounding judges this decision: v3, when the rationale claims
    /// something; v4, also when the decision edits a size.
    pub grounding_judged: bool,
    /// Every claim of the rationale holds ([`claims`]), and (v4) every edited size is
    /// cited.
    pub grounded: bool,
    pub claims: Vec<Claim>,
    /// v4: edited sizes with a breakdown line that the rationale does not cite with
    /// their failed/total and a kind their line holds.
    pub uncited: Vec<usize>,
    /// Sizes the applied configuration changes.
    pub edited: Vec<usize>,
    /// Share of edited sizes that are weak (None: nothing edited).
    pub targeting: Option<f64>,
    /// Share of working sizes left alone (None: no working size).
    pub preserve: Option<f64>,
    /// On a context with a weak size, whether the decision edits anything (None: every
    /// size works, so doing nothing may be right).
    pub acts: Option<bool>,
    /// Every ratio the decision moves on a size it keeps, and whether the size's
    /// failures justify it (rules v4's direction).
    pub moves: Vec<FieldMove>,
    /// v3: the share of edited weak sizes (with a recorded failure) whose answering
    /// field moved the rule's way. v4: the share of moves that are justified. None:
    /// nothing to judge.
    pub direction: Option<f64>,
    /// The reference policy's learnability on instances drawn from the configuration
    /// the decision leads to: 4·mean p(1-p) over probe instances (1 when every instance
    /// is solved half the time, 0 when all or none), and its mean pass rate p. None
    /// without `--reference`.
    pub learnability: Option<f64>,
    pub pass_rate: Option<f64>,
    /// On a context where an oracle searched (read from a ledger), whether the decision
    /// agrees with the oracle's choice (None: no oracle searched there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle: Option<OracleAgreement>,
    pub truth: Truth,
    pub rationale: String,
}

/// What an oracle searched at a context: its candidates' applied configurations (by
/// source: `fixed`, `random#1`, ...) and the one it kept, by validation.
#[derive(Clone, Debug, PartialEq)]
pub struct OracleChoice {
    pub candidates: Vec<(String, GeneratorConfig)>,
    pub chosen: usize,
}

/// A decision against an oracle's search: the candidate nearest the configuration it
/// leads to, and whether that is the one the oracle kept.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct OracleAgreement {
    /// The nearest candidate's source (L1 distance over every size's three ratios, a
    /// size one lacks counting as zeros; ties to the earlier candidate).
    pub nearest: String,
    /// The kept candidate's source.
    pub chosen: String,
    pub agrees: bool,
}

impl OracleChoice {
    /// How `config` stands against the search.
    pub fn agreement(&self, config: &GeneratorConfig) -> Option<OracleAgreement> {
        let distance = |a: &GeneratorConfig, b: &GeneratorConfig| -> f64 {
            let zero = SizeConfig {
                data_ratio: 0.0,
                hole_ratio: 0.0,
                wait_ratio: 0.0,
            };
            let sizes: BTreeSet<usize> = a.sizes.keys().chain(b.sizes.keys()).copied().collect();
            sizes
                .into_iter()
                .map(|n| {
                    let (x, y) = (
                        a.sizes.get(&n).unwrap_or(&zero),
                        b.sizes.get(&n).unwrap_or(&zero),
                    );
                    (x.data_ratio - y.data_ratio).abs()
                        + (x.hole_ratio - y.hole_ratio).abs()
                        + (x.wait_ratio - y.wait_ratio).abs()
                })
                .sum()
        };
        let mut nearest: Option<(usize, f64)> = None;
        for (i, (_, c)) in self.candidates.iter().enumerate() {
            let d = distance(config, c);
            if nearest.is_none_or(|(_, best)| d < best) {
                nearest = Some((i, d));
            }
        }
        let (i, _) = nearest?;
        Some(OracleAgreement {
            nearest: self.candidates[i].0.clone(),
            chosen: self.candidates.get(self.chosen)?.0.clone(),
            agrees: i == self.chosen || self.candidates[i].1 == self.candidates[self.chosen].1,
        })
    }
}

/// Rules v4: the share of a size's failures the failures a field answers must make for
/// a move of that field to be justified (a stray failure among many of another kind
/// calls for no edit; with any failure at all, `blind` kept 70.5% direction against the
/// rule table's 100% on the default 200 contexts).
pub const MATERIAL_SHARE: f64 = 0.1;

/// How many of a size's failures `field` moved `up` (or down) answers by the rule table.
fn answered(f: Option<&SizeFailures>, field: Field, up: bool) -> u32 {
    f.map_or(0, |f| {
        f.counts
            .iter()
            .filter(|c| answer(c.0) == (field, up))
            .map(|c| c.1)
            .sum()
    })
}

/// One ratio a decision moved on a size it kept.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct FieldMove {
    /// The size, or 0 for a rules-v5 whole-configuration move (the `all` entry's).
    pub size: usize,
    pub field: Field,
    pub up: bool,
    /// The size's failures that this field answers in this direction are at least
    /// [`MATERIAL_SHARE`] of its failures (a whole move: the weak sizes' failures,
    /// pooled).
    pub justified: bool,
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

/// Score `decision`, made for `ctx`, under `rules`.
pub fn score(id: &str, ctx: &EngineerContext, decision: &Decision, rules: Rules) -> ContextScore {
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
    // Rules v5: the sizes that the `all` entry alone moves (see the module's doc).
    let named: BTreeSet<usize> = decision
        .proposal
        .iter()
        .flat_map(|p| p.sizes.keys())
        .filter_map(|k| k.trim().parse().ok())
        .collect();
    let whole = rules >= Rules::V5 && decision.proposal.as_ref().is_some_and(|p| p.all.is_some());
    let by_entry: Vec<usize> = edited
        .iter()
        .copied()
        .filter(|n| {
            !whole
                || named.contains(n)
                || !(ctx.current.sizes.contains_key(n) && applied.sizes.contains_key(n))
        })
        .collect();
    let moved_whole = edited.len() > by_entry.len();
    let targeting = (!by_entry.is_empty()).then(|| {
        by_entry
            .iter()
            .filter(|n| truth.weak.contains_key(n))
            .count() as f64
            / by_entry.len() as f64
    });
    let preserve = (!truth.working.is_empty()).then(|| {
        truth
            .working
            .iter()
            .filter(|n| !by_entry.contains(n))
            .count() as f64
            / truth.working.len() as f64
    });
    let mut moves = Vec::new();
    if moved_whole {
        // One move per field the `all` entry changes, judged on the weak sizes' failures.
        let weak: Vec<&SizeFailures> = truth
            .weak
            .keys()
            .filter_map(|&n| failures_of(ctx, n))
            .collect();
        let failed: u32 = weak.iter().flat_map(|f| f.counts.iter().map(|c| c.1)).sum();
        let all = decision.proposal.as_ref().and_then(|p| p.all.as_ref());
        for field in [Field::DataRatio, Field::HoleRatio, Field::WaitRatio] {
            let set = all.and_then(|a| match field {
                Field::DataRatio => a.data_ratio,
                Field::HoleRatio => a.hole_ratio,
                Field::WaitRatio => a.wait_ratio,
            });
            let Some(target) = set else { continue };
            // Its direction: how most moved sizes' values went (the value is one for all).
            let (mut ups, mut downs) = (0, 0);
            for n in edited.iter().filter(|n| !by_entry.contains(n)) {
                let x = field.of(&ctx.current.sizes[n]);
                if changed(x, target) {
                    if target > x {
                        ups += 1
                    } else {
                        downs += 1
                    }
                }
            }
            if ups + downs == 0 {
                continue;
            }
            let up = ups >= downs;
            let answering: u32 = weak.iter().map(|f| answered(Some(f), field, up)).sum();
            moves.push(FieldMove {
                size: 0,
                field,
                up,
                justified: answering > 0 && answering as f64 >= MATERIAL_SHARE * failed as f64,
            });
        }
    }
    for &n in &by_entry {
        let (Some(a), Some(b)) = (ctx.current.sizes.get(&n), applied.sizes.get(&n)) else {
            continue;
        };
        let f = failures_of(ctx, n);
        let failed: u32 = f.map_or(0, |f| f.counts.iter().map(|c| c.1).sum());
        for field in [Field::DataRatio, Field::HoleRatio, Field::WaitRatio] {
            let (x, y) = (field.of(a), field.of(b));
            if changed(x, y) {
                let up = y > x;
                moves.push(FieldMove {
                    size: n,
                    field,
                    up,
                    justified: answered(f, field, up) as f64 >= MATERIAL_SHARE * failed as f64
                        && answered(f, field, up) > 0,
                });
            }
        }
    }
    let direction = match rules {
        Rules::V3 => {
            let answerable: Vec<(usize, FailureKind)> = truth
                .weak
                .iter()
                .filter(|(n, _)| edited.contains(n))
                .filter_map(|(&n, k)| Some((n, (*k)?)))
                .collect();
            (!answerable.is_empty()).then(|| {
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
            })
        }
        Rules::V4 | Rules::V5 => (!moves.is_empty())
            .then(|| moves.iter().filter(|m| m.justified).count() as f64 / moves.len() as f64),
    };
    let claims = claims(ctx, &decision.rationale, rules);
    let (grounding_judged, uncited) = match rules {
        Rules::V3 => (!claims.is_empty(), vec![]),
        Rules::V4 | Rules::V5 => (
            !claims.is_empty() || !edited.is_empty(),
            by_entry
                .iter()
                .copied()
                .filter(|&n| cited(ctx, &decision.rationale, n) == Some(false))
                .collect(),
        ),
    };
    // v5: a whole edit cites at least one size's line.
    let whole_cites = !moved_whole
        || ctx
            .current
            .sizes
            .keys()
            .any(|&n| cited(ctx, &decision.rationale, n) == Some(true));
    let acts = (!truth.weak.is_empty()).then_some(!edited.is_empty());
    ContextScore {
        context: id.to_string(),
        parsed,
        legal,
        grounding_judged,
        grounded: grounding_judged
            && claims.iter().all(|c| c.holds)
            && uncited.is_empty()
            && whole_cites,
        claims,
        uncited,
        edited,
        targeting,
        preserve,
        acts,
        moves,
        direction,
        learnability: None,
        pass_rate: None,
        oracle: None,
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
    /// Contexts whose rationale made at least one checkable claim.
    pub claiming_contexts: usize,
    /// Contexts grounding judges ([`ContextScore::grounding_judged`]: v3, the claiming
    /// ones; v4, also those that edit a size), and the share of them that are grounded
    /// (None: none judged).
    pub grounding_contexts: usize,
    pub grounded_pct: Option<f64>,
    pub targeting_pct: Option<f64>,
    pub preserve_pct: Option<f64>,
    /// Of the contexts with a weak size, the share where the decision edits anything.
    pub acts_pct: Option<f64>,
    pub direction_pct: Option<f64>,
    /// Mean learnability score (%), with `--reference`.
    pub learnability_pct: Option<f64>,
    /// Contexts where an oracle searched, and the share where the decision agrees with
    /// its choice ([`OracleAgreement`]; None: none).
    pub oracle_contexts: usize,
    pub oracle_pct: Option<f64>,
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
        grounding_contexts: rows.iter().filter(|r| r.grounding_judged).count(),
        grounded_pct: mean(
            rows.iter()
                .filter(|r| r.grounding_judged)
                .map(|r| r.grounded as u8 as f64),
        ),
        targeting_pct: mean(rows.iter().filter_map(|r| r.targeting)),
        preserve_pct: mean(rows.iter().filter_map(|r| r.preserve)),
        acts_pct: mean(rows.iter().filter_map(|r| r.acts.map(|a| a as u8 as f64))),
        direction_pct: mean(rows.iter().filter_map(|r| r.direction)),
        learnability_pct: mean(rows.iter().filter_map(|r| r.learnability)),
        oracle_contexts: rows.iter().filter(|r| r.oracle.is_some()).count(),
        oracle_pct: mean(
            rows.iter()
                .filter_map(|r| r.oracle.as_ref().map(|o| o.agrees as u8 as f64)),
        ),
    }
}

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

    /// A decision agrees with an oracle when the candidate nearest its configuration is
    /// the kept one, or repeats the kept one's configuration.
    #[test]
    fn oracle_agreement_is_the_nearest_candidate() {
        let at = |w: f64| GeneratorConfig::uniform(2, 3..=5, 0.2, w);
        let search = OracleChoice {
            candidates: vec![
                ("fixed".into(), at(0.2)),
                ("random#1".into(), at(0.75)),
                ("heuristic".into(), at(0.2)),
            ],
            chosen: 1,
        };
        let a = search.agreement(&at(0.6)).unwrap();
        assert_eq!(
            (a.nearest.as_str(), a.chosen.as_str(), a.agrees),
            ("random#1", "random#1", true)
        );
        let a = search.agreement(&at(0.3)).unwrap();
        assert_eq!((a.nearest.as_str(), a.agrees), ("fixed", false));
        // The kept candidate repeats an earlier one's configuration: nearest either way.
        let same = OracleChoice {
            chosen: 2,
            ..search.clone()
        };
        assert!(same.agreement(&at(0.2)).unwrap().agrees);
        assert!(OracleChoice {
            candidates: vec![],
            chosen: 0
        }
        .agreement(&at(0.2))
        .is_none());
    }

    /// Rules v5 judge a whole-configuration edit as one decision: its field move by the
    /// weak sizes' pooled failures, preserve and targeting by the sizes edited by their
    /// own entry, and grounding by the line it cites; v4 scores the same reply as an
    /// edit of every size.
    #[test]
    fn v5_judges_a_whole_edit_as_one_move_on_the_pooled_evidence() {
        let c = ctx();
        let cite = "10: 6/20 failed, mostly hole: every size to the measured best, wait_ratio 0.44 -> 0.75";
        let wait = decision(r#"{"all": {"wait_ratio": 0.75}}"#, cite);
        let v5 = score("v5", &c, &wait, Rules::V5);
        assert_eq!(v5.edited, [8, 9, 10]);
        assert_eq!((v5.targeting, v5.preserve), (None, Some(1.0)));
        assert_eq!(v5.moves.len(), 1, "{:?}", v5.moves);
        assert_eq!((v5.moves[0].size, v5.moves[0].field), (0, Field::WaitRatio));
        assert!(v5.moves[0].up && v5.moves[0].justified);
        assert_eq!(v5.direction, Some(1.0));
        assert!(v5.grounded, "{v5:?}");
        let v4 = score("v4", &c, &wait, Rules::V4);
        assert_eq!(v4.preserve, Some(0.0));
        assert!(!v4.grounded && v4.uncited == [8, 9]);
        // A whole move no weak size's failures call for is not justified, and a whole
        // edit citing no line is not grounded.
        let data = decision(r#"{"all": {"data_ratio": 0.1}}"#, "every size: less data");
        let d5 = score("v5", &c, &data, Rules::V5);
        assert_eq!(d5.direction, Some(0.0));
        assert!(d5.grounding_judged && !d5.grounded);
        // A size's own entry beside `all` is judged as in v4.
        let both = decision(
            r#"{"all": {"wait_ratio": 0.75}, "sizes": {"8": {"hole_ratio": 0.05}}}"#,
            cite,
        );
        let b5 = score("v5", &c, &both, Rules::V5);
        assert_eq!((b5.targeting, b5.preserve), (Some(0.0), Some(0.0)));
        assert_eq!(b5.uncited, [8]);
        assert!(b5
            .moves
            .iter()
            .any(|m| m.size == 8 && m.field == Field::HoleRatio));
    }

    fn score3(id: &str, c: &EngineerContext, d: &Decision) -> ContextScore {
        score(id, c, d, Rules::V3)
    }

    fn score4(c: &EngineerContext, json: &str, rationale: &str) -> ContextScore {
        score("v4", c, &decision(json, rationale), Rules::V4)
    }

    #[test]
    fn the_demo_rationale_is_not_grounded_and_a_true_one_is() {
        let c = ctx();
        let lie = claims(
            &c,
            "10: 17/20 failed, mostly goal_not_reached; 9: 16/20 failed, mostly goal_not_reached",
            Rules::V3,
        );
        assert_eq!(lie.len(), 2);
        assert!(lie.iter().all(|x| !x.holds), "{lie:?}");
        let truth = claims(&c, "10: 6/20 failed, mostly hole; 9x9: vertex_conflict 3 of its 5 failures; size 8 valid 95%", Rules::V3);
        assert!(truth.iter().all(|x| x.holds), "{truth:?}");
        assert_eq!(truth.len(), 3);
        // A size the context does not have cannot be the subject of evidence.
        assert!(!claims(&c, "7: 3/20 failed", Rules::V3)[0].holds);
        // Describing an edit is not a claim.
        assert!(claims(&c, "10x10: more holes and coordination", Rules::V3).is_empty());
        assert!(claims(&c, "8x8: holes -0.05 (pass 0.46)", Rules::V3).is_empty());
        assert!(claims(&c, "9: hole 2, vertex_conflict 3", Rules::V3)[0].holds);
        assert!(
            !claims(&c, "8: vertex_conflict 2", Rules::V3)[0].holds,
            "8 has none"
        );
    }

    #[test]
    fn targeting_preserve_and_direction_follow_the_v3_rules() {
        let c = ctx();
        let t = truth(&c);
        assert_eq!(t.working, BTreeSet::from([8]));
        assert_eq!(t.weak[&9], Some(FailureKind::VertexConflict));
        assert_eq!(t.weak[&10], Some(FailureKind::Hole));
        // Answers both: wait up on 9, holes down on 10, 8 untouched.
        let good = score3(
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
        let bad = score3(
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
        let clipped = score3(
            "c",
            &c,
            &decision(r#"{"sizes": {"9": {"wait_ratio": 1.7}}}"#, ""),
        );
        assert!(clipped.parsed && !clipped.legal);
        let none = score3(
            "n",
            &c,
            &Decision {
                error: Some("garbled".into()),
                ..Decision::default()
            },
        );
        assert!(!none.parsed && !none.legal && none.targeting.is_none());
    }

    /// Rules v4 judge each moved field by its own size's failures, so the rule that
    /// reads no failure kind (`blind`: more data, fewer holes, more waits on the sizes
    /// with the most failures) loses direction that the rule table's answer keeps.
    #[test]
    fn v4_direction_credits_only_moves_a_failure_of_that_size_calls_for() {
        let c = ctx();
        // The rule table's answer to each weak size's dominant failure.
        let table = score4(
            &c,
            r#"{"sizes": {"9": {"wait_ratio": 0.6}, "10": {"hole_ratio": 0.05}}}"#,
            "",
        );
        assert_eq!(table.direction, Some(1.0));
        assert_eq!(table.moves.len(), 2);
        // Blind: all three fields on 9 and 10. 9 holds holes and vertex conflicts (no
        // data failure); 10 holds parse errors, holes and a vertex conflict: 5 of 6.
        let blind = score4(
            &c,
            r#"{"sizes": {"9": {"data_ratio": 0.5, "hole_ratio": 0.05, "wait_ratio": 0.6},
                          "10": {"data_ratio": 0.5, "hole_ratio": 0.05, "wait_ratio": 0.6}}}"#,
            "",
        );
        assert_eq!(blind.moves.len(), 6);
        let unjustified: Vec<(usize, Field)> = blind
            .moves
            .iter()
            .filter(|m| !m.justified)
            .map(|m| (m.size, m.field))
            .collect();
        assert_eq!(unjustified, vec![(9, Field::DataRatio)]);
        assert_eq!(blind.direction, Some(5.0 / 6.0));
        // A move against the table (waits down on conflicts) is not justified; v3 did
        // not look at fields other than the dominant failure's.
        let wrong = score4(&c, r#"{"sizes": {"9": {"wait_ratio": 0.1}}}"#, "");
        assert_eq!(wrong.direction, Some(0.0));
        // Nothing moved: direction undefined, and with a weak size, no act.
        let idle = score4(&c, r#"{}"#, "");
        assert_eq!((idle.direction, idle.acts), (None, Some(false)));
        assert_eq!(table.acts, Some(true));
    }

    /// Rules v4 ground a decision only when every edited size is cited with its
    /// failed/total and a kind its breakdown line holds; a claim naming no size is not
    /// evidence, and an edit without a rationale is judged (not grounded).
    #[test]
    fn v4_grounding_requires_every_edited_size_cited() {
        let c = ctx();
        let edit = r#"{"sizes": {"9": {"wait_ratio": 0.6}, "10": {"hole_ratio": 0.05}}}"#;
        let full = score4(
            &c,
            edit,
            "9: 5/20 failed, mostly vertex_conflict; 10: 6/20 failed, mostly hole",
        );
        assert!(full.grounding_judged && full.grounded, "{full:?}");
        assert!(full.uncited.is_empty());
        // Size 10 edited but not cited.
        let half = score4(&c, edit, "9: 5/20 failed, mostly vertex_conflict");
        assert!(half.grounding_judged && !half.grounded);
        assert_eq!(half.uncited, vec![10]);
        // The fraction without a kind is not a citation of a size that failed.
        let no_kind = score4(&c, edit, "9: 5/20 failed; 10: 6/20 failed");
        assert_eq!(no_kind.uncited, vec![9, 10]);
        // A true claim naming no size: not evidence under v4, evidence under v3.
        let sizeless = "mostly vertex_conflict";
        assert!(!claims(&c, sizeless, Rules::V4)[0].holds);
        assert!(claims(&c, sizeless, Rules::V3)[0].holds);
        // Edits with no rationale: v4 judges them (not grounded), v3 does not.
        let silent = score4(&c, edit, "");
        assert!(silent.grounding_judged && !silent.grounded);
        let silent3 = score3("s", &c, &decision(edit, ""));
        assert!(!silent3.grounding_judged);
        // Doing nothing and saying nothing is not judged.
        assert!(!score4(&c, "{}", "").grounding_judged);
        let rows = [full, half, silent];
        let m = summarise(&rows);
        assert_eq!(m.grounding_contexts, 3);
        assert!((m.grounded_pct.unwrap() - 100.0 / 3.0).abs() < 1e-9);
        assert_eq!(m.acts_pct, Some(100.0));
    }

    #[test]
    fn rules_versions_parse_by_number_or_name() {
        for r in Rules::ALL {
            assert_eq!(r.name().parse::<Rules>().unwrap(), r);
        }
        assert_eq!("4".parse::<Rules>().unwrap(), Rules::V4);
        assert_eq!("v3".parse::<Rules>().unwrap(), Rules::V3);
        assert!("v9"
            .parse::<Rules>()
            .unwrap_err()
            .to_string()
            .contains("\"v9\""));
        assert_eq!(Rules::default().name(), RULES_VERSION);
    }
}
