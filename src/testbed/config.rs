//! The generator configuration an environment engineer edits, its legal ranges, and the
//! projection of any proposal onto them.
//!
//! Per map size s (as in the paper): `data_ratio` (share of training instances at that
//! size), `hole_ratio` (hole density) and `wait_ratio` (share of instances whose optimum
//! needs coordination), plus the agent count. `project` turns an arbitrary proposal into
//! a legal `GeneratorConfig` and lists every field it had to change, so an engineer's
//! decision can record exactly what was clipped.
use super::instance::{MAX_AGENTS, MAX_SIZE, MIN_AGENTS, MIN_SIZE};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Legal range of `hole_ratio`.
pub const HOLE_RATIO_MAX: f64 = 0.5;

/// The generator's knobs for one map size.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SizeConfig {
    /// Share of the stage's training instances at this size, in [0, 1]; shares are
    /// normalised to sum to 1 over the sizes.
    pub data_ratio: f64,
    /// Hole density in [0, 0.5]: round(hole_ratio * N^2) cells are holes.
    pub hole_ratio: f64,
    /// Share of instances whose optimum needs coordination, in [0, 1]: their optimal
    /// sum-of-costs exceeds the sum of the agents' independent shortest paths.
    pub wait_ratio: f64,
}

/// The whole configuration of the training-instance generator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GeneratorConfig {
    /// Agents per instance, 1..=8 (the paper trains on 2).
    pub agents: usize,
    /// Per map size N (3..=32), the knobs for N x N maps.
    pub sizes: BTreeMap<usize, SizeConfig>,
}

/// A proposal as an engineer may write it: every field optional, values unchecked.
/// Missing fields keep the value of the configuration it edits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigProposal {
    pub agents: Option<f64>,
    /// Fields set at every size of the configuration it edits (the paper's whole
    /// configuration in one entry); a size's own entry in `sizes` overrides them. Read
    /// from engineer replies from text revision 7 on (`engineer::reply`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<SizeProposal>,
    #[serde(default)]
    pub sizes: BTreeMap<String, SizeProposal>,
}

/// One size's fields in a proposal.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SizeProposal {
    pub data_ratio: Option<f64>,
    pub hole_ratio: Option<f64>,
    pub wait_ratio: Option<f64>,
}

impl SizeProposal {
    /// Write the fields it names into `c`, leaving the others.
    pub fn set(&self, c: &mut SizeConfig) {
        if let Some(v) = self.data_ratio {
            c.data_ratio = v;
        }
        if let Some(v) = self.hole_ratio {
            c.hole_ratio = v;
        }
        if let Some(v) = self.wait_ratio {
            c.wait_ratio = v;
        }
    }
}

/// One field the projection changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Clip {
    /// Dotted path of the field, e.g. `sizes.5.hole_ratio`.
    pub field: String,
    /// What was proposed, as text (it may be NaN or not a number at all).
    pub proposed: String,
    /// What was applied, as text.
    pub applied: String,
    pub reason: String,
}

/// A key of a proposal that no engineer may set (the reward, the validation set, the
/// agent count's siblings, anything unknown): recorded with its value, never applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RefusedField {
    /// Dotted path, e.g. `reward` or `sizes.5.agents`.
    pub field: String,
    /// The value as the engineer wrote it (JSON text).
    pub value: String,
}

/// Errors that make a configuration unusable even after projection.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("no map size has a positive data_ratio")]
    NoData,
    #[error("the configuration lists no map sizes")]
    NoSizes,
    #[error("agents: {0} is outside {MIN_AGENTS}..={MAX_AGENTS}")]
    Agents(usize),
    #[error("sizes: {0} is outside {MIN_SIZE}..={MAX_SIZE}")]
    Size(usize),
    #[error("sizes: none given")]
    NoSizesGiven,
    /// Every agent needs a start and a goal cell of its own.
    #[error(
        "too many agents for a {size}x{size} board: {agents} agents need {} distinct start and \
         goal cells, and it has {}", 2 * .agents, .size * .size
    )]
    TooManyAgents { size: usize, agents: usize },
    /// A stratification rule broken (see `suite::check_wait_ratios`); the caller names
    /// the field.
    #[error("wait ratio {0} is outside [0, 1]")]
    WaitRatioRange(f64),
    #[error("wait ratio {0} is listed twice")]
    WaitRatioTwice(f64),
    #[error("{per_cell} instances per cell do not split into {subsets} equal wait-ratio subsets")]
    WaitRatioSubsets { per_cell: usize, subsets: usize },
    /// Fields out of range: what projecting the configuration would change.
    #[error("{}", .0.iter().map(|c| format!("{}: {} ({})", c.field, c.proposed, c.reason)).collect::<Vec<_>>().join("; "))]
    OutOfRange(Vec<Clip>),
}

/// The most holes an N x N map may have with k agents: at least 2k frozen cells remain,
/// so starts and goals can be placed, and at most `HOLE_RATIO_MAX` of the cells.
pub fn max_hole_ratio(size: usize, agents: usize) -> f64 {
    let cells = (size * size) as f64;
    let by_agents = (cells - 2.0 * agents as f64).max(0.0) / cells;
    HOLE_RATIO_MAX.min(by_agents)
}

/// Holes placed on an N x N map for a hole ratio.
pub fn hole_count(size: usize, hole_ratio: f64) -> usize {
    (hole_ratio * (size * size) as f64).round() as usize
}

impl GeneratorConfig {
    /// A uniform configuration over `sizes`: equal data ratios, the given hole and wait
    /// ratios everywhere.
    pub fn uniform(
        agents: usize,
        sizes: impl IntoIterator<Item = usize>,
        hole: f64,
        wait: f64,
    ) -> Self {
        let sizes: Vec<usize> = sizes.into_iter().collect();
        let share = 1.0 / sizes.len().max(1) as f64;
        GeneratorConfig {
            agents,
            sizes: sizes
                .into_iter()
                .map(|s| {
                    (
                        s,
                        SizeConfig {
                            data_ratio: share,
                            hole_ratio: hole,
                            wait_ratio: wait,
                        },
                    )
                })
                .collect(),
        }
    }

    /// Check that every field is in range (what `project` guarantees).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(MIN_AGENTS..=MAX_AGENTS).contains(&self.agents) {
            return Err(ConfigError::Agents(self.agents));
        }
        if let Some(n) = self
            .sizes
            .keys()
            .find(|n| !(MIN_SIZE..=MAX_SIZE).contains(*n))
        {
            return Err(ConfigError::Size(*n));
        }
        if self.sizes.is_empty() {
            return Err(ConfigError::NoSizesGiven);
        }
        if let Some(&size) = self.sizes.keys().find(|&&n| 2 * self.agents > n * n) {
            return Err(ConfigError::TooManyAgents {
                size,
                agents: self.agents,
            });
        }
        let (applied, clips) = project(self, &ConfigProposal::default());
        match applied {
            Err(e) => Err(e),
            Ok(_) if !clips.is_empty() => Err(ConfigError::OutOfRange(clips)),
            Ok(_) => Ok(()),
        }
    }

    /// Normalised data shares per size, in size order.
    pub fn shares(&self) -> Vec<(usize, f64)> {
        let total: f64 = self.sizes.values().map(|s| s.data_ratio).sum();
        self.sizes
            .iter()
            .map(|(&n, s)| (n, s.data_ratio / total))
            .collect()
    }

    /// How many of `count` instances go to each size: largest-remainder rounding of the
    /// normalised shares, ties to the smaller size, so the counts always sum to `count`.
    pub fn allocate(&self, count: usize) -> Vec<(usize, usize)> {
        let shares = self.shares();
        let mut out: Vec<(usize, usize)> = shares
            .iter()
            .map(|&(n, s)| (n, (s * count as f64).floor() as usize))
            .collect();
        let assigned: usize = out.iter().map(|x| x.1).sum();
        let mut rema: Vec<(usize, f64)> = shares
            .iter()
            .enumerate()
            .map(|(i, &(_, s))| (i, s * count as f64 - out[i].1 as f64))
            .collect();
        // Stable sort by descending remainder keeps ties in size order.
        rema.sort_by(|a, b| b.1.total_cmp(&a.1));
        for &(i, _) in rema.iter().take(count.saturating_sub(assigned)) {
            out[i].1 += 1;
        }
        out
    }
}

fn fmt_num(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else {
        format!("{x}")
    }
}

fn clamp_field(field: String, v: f64, lo: f64, hi: f64, clips: &mut Vec<Clip>) -> f64 {
    if v.is_nan() {
        clips.push(Clip {
            field,
            proposed: "NaN".into(),
            applied: fmt_num(lo),
            reason: "not a number".into(),
        });
        return lo;
    }
    let a = v.clamp(lo, hi);
    if a != v {
        clips.push(Clip {
            field,
            proposed: fmt_num(v),
            applied: fmt_num(a),
            reason: format!("outside [{lo}, {hi}]"),
        });
    }
    a
}

/// Apply `proposal` on top of `base` and project the result onto the legal space.
/// Returns the legal configuration (or why none exists) and every field changed on the
/// way. Sizes named in the proposal but absent from `base` are added (missing fields
/// default to data 0, holes 0, wait 0); sizes outside 3..=32 are dropped and reported.
pub fn project(
    base: &GeneratorConfig,
    proposal: &ConfigProposal,
) -> (Result<GeneratorConfig, ConfigError>, Vec<Clip>) {
    let mut clips = Vec::new();
    // The agent count is not the engineer's: training stays on the configuration's
    // count (the paper trains on 2 agents and holds 3-5 out for testing). A proposal
    // that names another value is projected back and the attempt recorded.
    let agents = base.agents;
    if let Some(v) = proposal.agents {
        if v != agents as f64 {
            clips.push(Clip {
                field: "agents".into(),
                proposed: fmt_num(v),
                applied: agents.to_string(),
                reason: format!(
                    "training stays on {agents} agents; the agent count is not an engineer's to change"
                ),
            });
        }
    }

    let mut merged: BTreeMap<usize, SizeConfig> = base.sizes.clone();
    if let Some(p) = &proposal.all {
        for e in merged.values_mut() {
            p.set(e);
        }
    }
    for (key, p) in &proposal.sizes {
        let n = match key.trim().parse::<usize>() {
            Ok(n) if (MIN_SIZE..=MAX_SIZE).contains(&n) => n,
            _ => {
                clips.push(Clip {
                    field: format!("sizes.{key}"),
                    proposed: key.clone(),
                    applied: "(dropped)".into(),
                    reason: format!("map size must be an integer in {MIN_SIZE}..={MAX_SIZE}"),
                });
                continue;
            }
        };
        let e = merged.entry(n).or_insert(SizeConfig {
            data_ratio: 0.0,
            hole_ratio: 0.0,
            wait_ratio: 0.0,
        });
        p.set(e);
    }
    if merged.is_empty() {
        return (Err(ConfigError::NoSizes), clips);
    }
    for (&n, c) in merged.iter_mut() {
        c.data_ratio = clamp_field(
            format!("sizes.{n}.data_ratio"),
            c.data_ratio,
            0.0,
            1.0,
            &mut clips,
        );
        let hmax = max_hole_ratio(n, agents);
        c.hole_ratio = clamp_field(
            format!("sizes.{n}.hole_ratio"),
            c.hole_ratio,
            0.0,
            hmax,
            &mut clips,
        );
        let wmax = if agents >= 2 { 1.0 } else { 0.0 };
        c.wait_ratio = clamp_field(
            format!("sizes.{n}.wait_ratio"),
            c.wait_ratio,
            0.0,
            wmax,
            &mut clips,
        );
    }
    let total: f64 = merged.values().map(|c| c.data_ratio).sum();
    if total <= 0.0 {
        return (Err(ConfigError::NoData), clips);
    }
    (
        Ok(GeneratorConfig {
            agents,
            sizes: merged,
        }),
        clips,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projection_reports_each_clipped_field() {
        let base = GeneratorConfig::uniform(2, 3..=5, 0.1, 0.2);
        let mut p = ConfigProposal {
            agents: Some(9.0),
            ..Default::default()
        };
        p.sizes.insert(
            "4".into(),
            SizeProposal {
                hole_ratio: Some(0.9),
                wait_ratio: Some(f64::NAN),
                data_ratio: None,
            },
        );
        p.sizes.insert("40".into(), SizeProposal::default());
        let (cfg, clips) = project(&base, &p);
        let cfg = cfg.unwrap();
        // The agent count stays the configuration's, and the attempt is recorded.
        assert_eq!(cfg.agents, 2);
        assert_eq!(
            (clips[0].proposed.as_str(), clips[0].applied.as_str()),
            ("9", "2")
        );
        let fields: Vec<&str> = clips.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "agents",
                "sizes.40",
                "sizes.4.hole_ratio",
                "sizes.4.wait_ratio"
            ]
        );
        assert_eq!(cfg.sizes[&4].hole_ratio, 0.5);
        assert!(cfg.validate().is_ok());
        // Naming the current count is no change.
        let same = ConfigProposal {
            agents: Some(2.0),
            ..Default::default()
        };
        assert!(project(&base, &same).1.is_empty());
    }

    /// `all` sets its fields at every size the configuration has (adding none), a
    /// size's own entry overrides it, and its out-of-range values are clipped per size.
    #[test]
    fn all_sets_every_size_and_a_size_entry_overrides_it() {
        let base = GeneratorConfig::uniform(2, 3..=5, 0.2, 0.2);
        let mut p = ConfigProposal {
            all: Some(SizeProposal {
                wait_ratio: Some(0.75),
                hole_ratio: Some(0.9),
                data_ratio: None,
            }),
            ..Default::default()
        };
        p.sizes.insert(
            "4".into(),
            SizeProposal {
                wait_ratio: Some(0.5),
                ..Default::default()
            },
        );
        let (cfg, clips) = project(&base, &p);
        let cfg = cfg.unwrap();
        assert_eq!(cfg.sizes.keys().copied().collect::<Vec<_>>(), [3, 4, 5]);
        let waits: Vec<f64> = cfg.sizes.values().map(|c| c.wait_ratio).collect();
        assert_eq!(waits, [0.75, 0.5, 0.75]);
        assert!(cfg
            .sizes
            .values()
            .all(|c| c.data_ratio == base.sizes[&3].data_ratio));
        let fields: Vec<&str> = clips.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "sizes.3.hole_ratio",
                "sizes.4.hole_ratio",
                "sizes.5.hole_ratio"
            ]
        );
        // Without `all` a proposal serialises as before (recorded proposals are text,
        // and the JSON Schema names the field as optional).
        let plain = serde_json::to_string(&ConfigProposal::default()).unwrap();
        assert_eq!(plain, r#"{"agents":null,"sizes":{}}"#);
    }

    #[test]
    fn no_data_is_an_error() {
        let base = GeneratorConfig::uniform(2, 3..=4, 0.1, 0.2);
        let mut p = ConfigProposal::default();
        for n in ["3", "4"] {
            p.sizes.insert(
                n.into(),
                SizeProposal {
                    data_ratio: Some(0.0),
                    ..Default::default()
                },
            );
        }
        assert_eq!(project(&base, &p).0.unwrap_err(), ConfigError::NoData);
    }

    #[test]
    fn allocation_sums_to_count() {
        let mut c = GeneratorConfig::uniform(2, 3..=9, 0.1, 0.2);
        c.sizes.get_mut(&5).unwrap().data_ratio = 0.37;
        for count in [0, 1, 7, 100, 1001] {
            let a = c.allocate(count);
            assert_eq!(a.iter().map(|x| x.1).sum::<usize>(), count);
        }
        assert_eq!(
            GeneratorConfig::uniform(2, 3..=5, 0.0, 0.0).allocate(4),
            vec![(3, 2), (4, 1), (5, 1)]
        );
    }
}
