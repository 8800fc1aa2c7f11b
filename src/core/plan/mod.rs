//! The ledger plan file (`ledgers/*.toml`): what a ledger was created to run.
//!
//! Parsed strictly: unknown keys are errors naming the key, out-of-range values errors
//! naming the field. Sections other than `name`, `seed` and `initial_config` have
//! defaults, so later issues add fields by adding a field with a `#[serde(default)]`.
pub mod lm_config;
pub mod size;
pub mod trainer;
mod validate;
pub mod values;

use crate::env::config::GeneratorConfig;
use ledger_store::codec;
use ledger_store::hash::Hash;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use trainer::GrpoConfig;

/// Context for the hash of a parsed plan (its canonical encoding).
pub const PLAN_CONTEXT: &str = "mapf-ledger 2026 plan v1";

/// Which policy the ledger trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// A small network over the grid.
    Grid,
    /// A decoder-only language model with Hugging Face parameter names (the paper's
    /// setting): settings in `[lm]`.
    Lm,
    /// Replaced by `lm`; kept only to refuse old plans with a clear message.
    Text,
}

impl PolicyKind {
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Grid => "grid",
            PolicyKind::Lm => "lm",
            PolicyKind::Text => "text",
        }
    }
}

/// A ledger plan file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LedgerPlan {
    /// Name of the experiment.
    pub name: String,
    /// Root of the seed tree.
    pub seed: u64,
    pub policy: PolicyKind,
    /// Stage 1's generator configuration.
    pub initial_config: GeneratorConfig,
    #[serde(default)]
    pub suites: Suites,
    #[serde(default)]
    pub warmup: Warmup,
    #[serde(default)]
    /// GRPO hyper-parameters per stage: the trainer's own config type, embedded.
    pub grpo: GrpoConfig,
    #[serde(default)]
    pub engineer: EngineerPlan,
    #[serde(default)]
    pub train: Train,
    /// The language model (`policy = "lm"`).
    #[serde(default)]
    pub lm: trainer::LmSpec,
}

/// How training runs: device, torch threads, the cost "optimal" refers to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Train {
    /// `cpu`, `cuda` or `cuda:N` (the CLI's `--device` overrides it).
    #[schemars(with = "String")]
    pub device: trainer::DeviceSpec,
    /// Torch intra-op threads. Fixed and recorded: results are bit-exact only at the
    /// same count on the same device.
    pub torch_threads: u32,
    /// "makespan" (the paper's ground truth) or "sum_of_costs".
    pub metric: crate::env::CostMetric,
    /// The language model's compute dtype: `auto` (the default: bf16 on CUDA, f32 on the
    /// CPU), `f32`, or `bf16` (bf16 compute with f32 master copies of what trains, on any
    /// device: the CUDA path, testable on a CPU). Skipped when `auto`, so plans without
    /// the field keep their canonical hash.
    #[serde(skip_serializing_if = "trainer::Dtype::is_auto")]
    pub dtype: trainer::Dtype,
}

impl Default for Train {
    fn default() -> Self {
        Train {
            device: trainer::DeviceSpec::Cpu,
            torch_threads: 1,
            metric: crate::env::CostMetric::Makespan,
            dtype: trainer::Dtype::Auto,
        }
    }
}

/// Evaluation suites: instances per (agents, size) cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Suites {
    pub validation_per_cell: u32,
    pub test_per_cell: u32,
    /// Largest map size of the suites (10 in the paper).
    pub max_size: u32,
    /// Seed of the suites (independent of the plan's seed so that ledgers with other
    /// seeds are evaluated on the same instances).
    pub seed: u64,
    /// Stratify both suites by wait ratio (the paper's test subsets), e.g. `[0.25, 0.5,
    /// 0.75]`: each cell's instances are split into equal consecutive subsets, one per
    /// ratio, whose items need coordination with that probability; every evaluation is
    /// then also recorded per subset (`val@wait0.25`, `test@wait0.50`, ...). Both
    /// `*_per_cell` must be multiples of the count. Empty (the default): coordination
    /// is left to chance and the suites are exactly those of plans without the field
    /// (and, skipped when empty, it leaves the plan's canonical hash as it was).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wait_ratios: Vec<f64>,
    /// Suite items greedily decoded per batch (256, the default: as plans without the
    /// field run, whose canonical hash it then leaves unchanged). The evaluation's KV
    /// cache grows with it: `ledger plan check` names it when a GPU is too small.
    #[serde(skip_serializing_if = "is_default_eval_batch")]
    pub eval_batch: u32,
    /// Keep every evaluation's greedy plans, one blob per suite evaluation (an
    /// `evaluation_plans` event), so `show --samples --suite` can draw a failed test
    /// item. Off by default: plans without the field keep their canonical hash and
    /// their ledgers replay as recorded.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub keep_plans: bool,
}

/// Suite items decoded per batch unless a plan says otherwise.
pub const DEFAULT_EVAL_BATCH: u32 = 256;

fn is_default_eval_batch(v: &u32) -> bool {
    *v == DEFAULT_EVAL_BATCH
}

impl Default for Suites {
    fn default() -> Self {
        Suites {
            validation_per_cell: 20,
            test_per_cell: 50,
            max_size: 10,
            seed: 2026,
            wait_ratios: Vec::new(),
            eval_batch: DEFAULT_EVAL_BATCH,
            keep_plans: false,
        }
    }
}

/// Supervised warm-up before the first RL stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Warmup {
    pub steps: u64,
    pub lr: f64,
    pub batch_size: u32,
    /// Solved instances generated for imitation.
    pub instances: u32,
    /// The pretraining distribution: map sizes, hole and wait ratios, agent counts.
    pub sizes: Vec<u32>,
    pub hole_ratio: f64,
    pub wait_ratio: f64,
    /// Agent counts of the solver plans (each with the sizes at least as large as the
    /// count, as in the paper's test sets). Default `[2]`. A count listed twice gets
    /// twice the share of the instances.
    pub agents: Vec<u32>,
    /// Hole ratios to mix (empty: `hole_ratio` alone). The instances are split evenly
    /// over every (agents, hole ratio, wait ratio) combination.
    pub hole_ratios: Vec<f64>,
    /// Wait ratios to mix (empty: `wait_ratio` alone).
    pub wait_ratios: Vec<f64>,
    /// Scratch `lm` models: engineer prompts answered by the teacher
    /// (`src/engineer/teacher.rs`) mixed into pretraining, so the base model can write
    /// proposals. 0 disables.
    pub engineer_examples: u32,
    /// Every this many warm-up steps, one step is on a batch of engineer examples.
    pub engineer_every: u32,
    /// Warm-up steps on plans alone before engineer batches are mixed in (plans are
    /// the slow skill to learn, the answer format a quick one).
    pub engineer_after: u64,
    pub engineer_batch_size: u32,
    /// How the learning rate moves over the warm-up's steps.
    pub lr_schedule: LrSchedule,
    /// Whether the coordination draw from `wait_ratios` holds for every agent count, not
    /// only for 2 (3 or more agents are then redrawn until the instance needs
    /// coordination exactly when drawn to). With `wait_ratios = [0.03]` this is a base
    /// planner that has seen plans needing no coordination, with a trace of waiting: the
    /// coordination is left for RL to teach. Skipped when false, so plans without the
    /// field keep their canonical hash.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub wait_all_agents: bool,
    /// How many trained sizes a compact teacher context holds (engineer text revision
    /// 6 on), drawn uniformly from `[least, most]`: the length of its reading tasks.
    /// Absent: 2 to 4, and plans without the field keep their canonical hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engineer_context_sizes: Option<[u32; 2]>,
    /// The suite sizes (items a size) a teacher context's breakdown counts out of, one
    /// drawn uniformly per context (engineer text revision 2 on): how often its counts
    /// have one, two or three digits. Absent: the plan's `suites.validation_per_cell`,
    /// 20, 24, 48 and 150, and plans without the field keep their canonical hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engineer_suite_items: Option<Vec<u32>>,
    /// How many weak sizes a teacher reply edits, one drawn uniformly per reply: how
    /// often a reply cites a second (third...) breakdown line. Absent: one or two, and
    /// plans without the field keep their canonical hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engineer_edits: Option<Vec<u32>>,
    /// Named agents in the imitated plans, as `[grpo] agent_names`: each plan's k
    /// agents go by k distinct numbers drawn from `1..=agent_names` in increasing
    /// order, so that a base reads the names it is given (a plan of `agent 3` and
    /// `agent 5`) before RL names its training agents. 0 (skipped, so plans without
    /// the field keep their canonical hash): `1..=k`.
    #[serde(skip_serializing_if = "trainer::is_zero")]
    pub agent_names: u32,
}

/// A warm-up learning-rate schedule (a function of the step alone, so a resumed run
/// takes the same steps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LrSchedule {
    /// `lr` at every step.
    Constant,
    /// Half a cosine from `lr` at step 0 down to `lr / 10` at the last step.
    Cosine,
}

impl Warmup {
    /// The learning rate of warm-up step `step` (0-based).
    pub fn lr_at(&self, step: u64) -> f64 {
        match self.lr_schedule {
            LrSchedule::Constant => self.lr,
            LrSchedule::Cosine => {
                let t = step as f64 / self.steps.saturating_sub(1).max(1) as f64;
                let floor = self.lr / 10.0;
                floor + (self.lr - floor) * 0.5 * (1.0 + (std::f64::consts::PI * t.min(1.0)).cos())
            }
        }
    }
}

impl Default for Warmup {
    fn default() -> Self {
        Warmup {
            engineer_examples: 0,
            engineer_every: 4,
            engineer_after: 0,
            engineer_batch_size: 8,
            lr_schedule: LrSchedule::Constant,
            engineer_context_sizes: None,
            engineer_suite_items: None,
            engineer_edits: None,
            agent_names: 0,
            steps: 200,
            lr: 1e-3,
            batch_size: 64,
            instances: 2048,
            sizes: vec![3, 4, 5],
            hole_ratio: 0.1,
            wait_ratio: 0.2,
            agents: vec![2],
            hole_ratios: Vec::new(),
            wait_ratios: Vec::new(),
            wait_all_agents: false,
        }
    }
}

/// The environment engineer and its context modules.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EngineerPlan {
    /// Engineer name (`fixed`, `random`, `heuristic`, `current`, `base`, or registered).
    pub name: String,
    /// Number of curriculum stages.
    pub stages: u32,
    /// Largest map size an engineer may train on (10 in the paper's protocol); larger
    /// proposed sizes are dropped and recorded as clips.
    pub max_size: u32,
    pub context: ContextModules,
    /// Revision of the text engineers read and write (1, the default, is what every
    /// ledger before it recorded, so their replays hold; 2: a module the prompt budget
    /// trimmed says what was cut instead of reading as empty, and a reply that names a
    /// key twice is a recorded repair; 3: the evidence is ordered weakest first with
    /// each size's settings on its breakdown line, and the answer gives one line of
    /// evidence per changed size before a JSON of only the values it changes; 4: the
    /// text of 3, and the pretraining teacher's contexts no longer rank the sizes by map
    /// size, so the weakest line can be any size; 5: as 4, with the breakdown's lines
    /// weakest last at the very end of the prompt, after the answer format). Skipped at
    /// 1, so older plans keep their hash.
    #[serde(skip_serializing_if = "is_first_revision")]
    pub revision: u32,
    /// Engineer RL (`[engineer.train]`): GRPO steps on engineer prompts in the stages
    /// of an `lm` policy, on every branch when `enabled`, else only on branches whose
    /// engineer spec ends in `+engineer-rl` (e.g. `current+engineer-rl`, a study arm;
    /// with [`EngineerTrain::default`] when the plan has no section). Absent: the plan
    /// hashes as before the option existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train: Option<EngineerTrain>,
    /// The `oracle` engineer's candidates (`[engineer.oracle]`; absent: the defaults
    /// of [`OracleSettings`], and the plan hashes as before the option existed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle: Option<OracleSettings>,
}

/// The `oracle` engineer, a hindsight upper bound: at each stage it trains the whole
/// stage once on every candidate configuration, from the stage's starting checkpoint
/// with the stage's seed, scores each model on the validation suite (never the test
/// suite), and keeps the best: the highest validation Sum of valid %, then of
/// optimal %, then the earlier candidate. A stage it designs costs one stage per
/// distinct candidate, plus the stage itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct OracleSettings {
    /// The candidates, in order: engineer specs whose proposal for the stage is one
    /// (`fixed`, `heuristic`, `blind`, `current`, a registered LLM engineer, ...), and
    /// `random`, a fresh random draw each time it is listed. K = their number.
    pub candidates: Vec<String>,
}

impl Default for OracleSettings {
    fn default() -> Self {
        OracleSettings {
            candidates: ["fixed", "heuristic", "blind", "random", "random", "random"]
                .map(String::from)
                .to_vec(),
        }
    }
}

/// Engineer RL: after a stage's plan steps, `steps` GRPO steps on engineer prompts.
/// Each step shows the policy `prompts` contexts (the stage's own, then synthetic ones
/// with known ground truth drawn from the stage seed), samples `group_size` replies to
/// each, and rewards a reply with
/// `learnability_weight` x the proposal's learnability under the current policy
/// (4 p(1-p) on the configuration it leads to, estimated size by size: `probe_per_size`
/// instances of each size, `probe_samples` plans each, weighted by data ratio; 0 when
/// nothing usable was proposed)
/// + `format_weight` if the proposal parses and is legal as written
/// + `grounding_weight` if the rationale makes a checkable claim and every claim holds
///   (the rules of `ledger engineer eval`).
///
/// Advantages are group-normalised and the loss is the plan steps' clipped objective
/// (the plan's `[grpo]` clip, KL and entropy settings, the stage's optimiser).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EngineerTrain {
    /// Every branch trains its engineer. Off (the default): only branches whose
    /// engineer spec ends in `+engineer-rl` do, with these settings.
    pub enabled: bool,
    /// Steps per stage.
    pub steps: u32,
    /// Contexts per step: the stage's own, then `prompts - 1` synthetic ones.
    pub prompts: u32,
    /// Replies sampled per context (the GRPO group).
    pub group_size: u32,
    pub probe_per_size: u32,
    pub probe_samples: u32,
    pub learnability_weight: f64,
    pub format_weight: f64,
    pub grounding_weight: f64,
    /// The optimiser's learning rate during engineer steps (absent: the plan's
    /// `[grpo] lr`); the plan steps of the next stage return to theirs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    /// When the engineer steps run. `true`: after the stage's evaluation, so the stage
    /// is judged on its plan steps alone (its evaluations name the checkpoint before
    /// the engineer steps) and the steps are taken up by the next stage (its `current`
    /// engineer and plan steps start from the stage's final checkpoint, after them).
    /// `false` (absent, as every ledger recorded before the option): before the
    /// evaluation, so the engineer steps move the planner the stage is judged by.
    #[serde(skip_serializing_if = "is_false")]
    pub after_evaluation: bool,
    /// The `ledger engineer eval` rules the grounding term and the synthetic contexts
    /// follow: 3 (absent, as every ledger recorded before the option) or 4 (a claim
    /// names a size, every edited size is cited; contexts show their history).
    #[serde(skip_serializing_if = "is_rules_v3")]
    pub rules: u32,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_rules_v3(r: &u32) -> bool {
    *r == 3
}

impl Default for EngineerTrain {
    fn default() -> Self {
        EngineerTrain {
            enabled: false,
            steps: 4,
            prompts: 2,
            group_size: 4,
            probe_per_size: 6,
            probe_samples: 4,
            learnability_weight: 1.0,
            format_weight: 0.25,
            grounding_weight: 0.25,
            lr: None,
            after_evaluation: false,
            rules: 3,
        }
    }
}

/// The newest engineer text revision a plan may ask for. The one revision number
/// outside `src/engineer/text/`, for a stated reason: a plan is parsed strictly by both
/// builds, and the build without libtorch has no engineer text, so the plan bounds its
/// own field here. `TextRevision::LATEST` is this constant, and `src/engineer/text/`
/// alone knows what each revision up to it means (`tests/layering.rs` checks that no
/// other code compares, matches or carries revision numbers).
pub const LATEST_ENGINEER_REVISION: u32 = 7;

fn is_first_revision(r: &u32) -> bool {
    *r == 1
}

impl Default for EngineerPlan {
    fn default() -> Self {
        EngineerPlan {
            name: "heuristic".into(),
            stages: 4,
            max_size: 10,
            context: ContextModules::default(),
            revision: 1,
            train: None,
            oracle: None,
        }
    }
}

/// The paper's five context modules, each switchable for ablations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ContextModules {
    pub failure_breakdown: bool,
    pub guideline: bool,
    pub history: bool,
    pub summary: bool,
    pub training_details: bool,
}

impl Default for ContextModules {
    fn default() -> Self {
        ContextModules {
            failure_breakdown: true,
            guideline: true,
            history: true,
            summary: true,
            training_details: false,
        }
    }
}

/// A plan that does not parse or is out of range; the message names the key or field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("plan is not valid UTF-8 TOML: {0}")]
    Encoding(String),
    #[error("plan: {0}")]
    Syntax(String),
    #[error("plan field `{field}`: {message}")]
    Range { field: String, message: String },
    #[error("plan field `initial_config`: {0}")]
    InitialConfig(#[source] crate::env::config::ConfigError),
    #[error("plan field `suites.wait_ratios`: {0}")]
    WaitRatios(#[source] crate::env::config::ConfigError),
    /// A device that is not `cpu`, `cuda` or `cuda:N` (the plan's, a flag's or a
    /// recorded one).
    #[error("{text:?}: expected cpu, cuda or cuda:N")]
    Device { text: String },
    /// `lm.init = "hf:DIR"` names no model directory from here; a relative `dir` was
    /// resolved against `against` (the directory `ledger` runs in).
    #[error("lm.init = {init:?}: {dir} {}{}", hf_dir_what(.is_dir), hf_dir_against(.against))]
    HfDir {
        init: String,
        dir: String,
        is_dir: bool,
        against: Option<String>,
    },
}

fn hf_dir_what(is_dir: &bool) -> &'static str {
    if *is_dir {
        "has no config.json (an HF model directory holds config.json, safetensors and tokenizer.json)"
    } else {
        "does not exist"
    }
}

fn hf_dir_against(against: &Option<String>) -> String {
    against
        .as_deref()
        .map(|here| {
            format!(
                " (resolved against {here}, the directory `ledger` runs in: a plan's \
                 paths are relative to it, and the committed plans to the repository root)"
            )
        })
        .unwrap_or_default()
}

/// A plan file that does not read, or does not parse: its path, then why.
#[derive(Debug, thiserror::Error)]
pub enum PlanFileError {
    #[error("{}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Plan {
        path: std::path::PathBuf,
        #[source]
        source: PlanError,
    },
}

impl LedgerPlan {
    /// Read, parse and validate the plan file at `path` (errors name it).
    pub fn read(path: &std::path::Path) -> Result<LedgerPlan, PlanFileError> {
        let bytes = std::fs::read(path).map_err(|source| PlanFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        LedgerPlan::parse(&bytes).map_err(|source| PlanFileError::Plan {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Parse and validate a plan file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<LedgerPlan, PlanError> {
        let text = std::str::from_utf8(bytes).map_err(|e| PlanError::Encoding(e.to_string()))?;
        let plan: LedgerPlan = toml::from_str(text)
            .map_err(|e| PlanError::Syntax(e.to_string().trim().to_string()))?;
        plan.validate()?;
        Ok(plan)
    }

    /// How a run of this plan bounds device memory and which kernels it runs (see
    /// [`trainer::PolicySettings`]).
    pub fn policy_settings(&self) -> trainer::PolicySettings {
        trainer::PolicySettings {
            generation_memory: self.lm.generation_memory.map(|s| s.0),
            log_prob_chunk: self.grpo.log_prob_chunk,
            recompute: self.grpo.recompute,
            lora_in_compute_dtype: self.lm.lora_in_compute_dtype,
            training_attention: self.lm.training_attention,
            training_norms: self.lm.training_norms,
        }
    }

    /// Hash of the parsed plan's canonical encoding: equal plans written differently
    /// (comments, key order) hash the same.
    pub fn hash(&self) -> Hash {
        Hash::derive(PLAN_CONTEXT, &codec::encode(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEMO: &str = include_str!("../../../ledgers/demo.toml");

    #[test]
    fn cosine_warmup_lr_runs_from_lr_to_a_tenth() {
        let w = Warmup {
            steps: 101,
            lr: 0.01,
            lr_schedule: LrSchedule::Cosine,
            ..Warmup::default()
        };
        assert!((w.lr_at(0) - 0.01).abs() < 1e-12);
        assert!((w.lr_at(50) - 0.0055).abs() < 1e-12);
        assert!((w.lr_at(100) - 0.001).abs() < 1e-12);
        assert!(w.lr_at(30) > w.lr_at(31));
        let c = Warmup {
            lr_schedule: LrSchedule::Constant,
            ..w
        };
        assert_eq!(c.lr_at(100), 0.01);
    }

    #[test]
    fn demo_plan_parses() {
        // (What the shipped plans promise is tested in tests/pipeline.rs.)
        let p = LedgerPlan::parse(DEMO.as_bytes()).unwrap();
        assert_eq!(p.seed, 7);
        assert_eq!(p.policy, PolicyKind::Lm);
        let reformatted = format!("# a comment\n{DEMO}");
        assert_eq!(
            LedgerPlan::parse(reformatted.as_bytes()).unwrap().hash(),
            p.hash()
        );
    }

    #[test]
    fn unknown_key_is_named() {
        let bad = DEMO.replace("[grpo]", "[grpo]\nlearning_rate = 0.1");
        let e = LedgerPlan::parse(bad.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("learning_rate"), "{e}");
    }

    #[test]
    fn wait_ratio_subsets_must_divide_each_per_cell() {
        // The demo plan with unstratified suites of 20 and 10 per cell.
        const STRATIFIED: &str =
            "validation_per_cell = 24\ntest_per_cell = 9\nwait_ratios = [0.25, 0.5, 0.75]";
        assert!(
            DEMO.contains(STRATIFIED),
            "the demo's suites changed: update this test"
        );
        let unstratified = DEMO.replace(STRATIFIED, "validation_per_cell = 20\ntest_per_cell = 10");
        let with = |ratios: &str| {
            unstratified.replace(
                "test_per_cell = 10",
                &format!("test_per_cell = 10\nwait_ratios = {ratios}"),
            )
        };
        // 20 and 10 split into 2 subsets.
        let p = LedgerPlan::parse(with("[0.25, 0.75]").as_bytes()).unwrap();
        assert_eq!(p.suites.wait_ratios, [0.25, 0.75]);
        let e = LedgerPlan::parse(with("[0.25, 0.5, 0.75]").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("suites.validation_per_cell") && e.contains("suites.wait_ratios"),
            "{e}"
        );
        let e = LedgerPlan::parse(with("[0.25, 0.5, 0.5, 0.75]").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("suites.wait_ratios") && e.contains("twice"),
            "{e}"
        );
        let e = LedgerPlan::parse(with("[1.5]").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("suites.wait_ratios"), "{e}");
        // Empty, the field adds nothing to the canonical encoding: plan hashes of plans
        // without it are what they were.
        let s = Suites::default();
        assert_eq!(
            codec::encode(&s),
            codec::encode(&(s.validation_per_cell, s.test_per_cell, s.max_size, s.seed))
        );
        let plain = LedgerPlan::parse(unstratified.as_bytes()).unwrap();
        assert_ne!(p.hash(), plain.hash());
    }

    #[test]
    fn new_fields_at_their_defaults_leave_the_plan_hash_unchanged() {
        // `train.dtype` (auto) and `grpo.micro_batch` (0) add nothing to the canonical
        // encoding: a plan written before them hashes as it did, so existing ledgers'
        // genesis plan_hash still matches.
        let t = Train::default();
        assert_eq!(
            codec::encode(&t),
            codec::encode(&(t.device.to_string(), t.torch_threads, t.metric))
        );
        let g = GrpoConfig::default();
        let with = GrpoConfig {
            micro_batch: 7,
            ..g.clone()
        };
        let (a, b) = (codec::encode(&g), codec::encode(&with));
        assert_eq!(
            &b[..a.len()],
            &a[..],
            "micro_batch is appended, nothing else moves"
        );
        assert_eq!(b.len(), a.len() + 1);
        let demo = LedgerPlan::parse(DEMO.as_bytes()).unwrap();
        let explicit = DEMO.replace("torch_threads = 2", "torch_threads = 2\ndtype = \"auto\"");
        assert_eq!(
            LedgerPlan::parse(explicit.as_bytes()).unwrap().hash(),
            demo.hash()
        );
        let bf16 = DEMO.replace("torch_threads = 2", "torch_threads = 2\ndtype = \"bf16\"");
        let bf16 = LedgerPlan::parse(bf16.as_bytes()).unwrap();
        assert_eq!(bf16.train.dtype, trainer::Dtype::Bf16);
        assert_ne!(bf16.hash(), demo.hash());
        let bad = DEMO.replace("torch_threads = 2", "torch_threads = 2\ndtype = \"f16\"");
        let e = LedgerPlan::parse(bad.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("f16") && e.contains("bf16"), "{e}");
    }

    #[test]
    fn rehearsal_needs_its_batch_and_leaves_old_hashes_alone() {
        let demo = LedgerPlan::parse(DEMO.as_bytes()).unwrap();
        assert_eq!(demo.grpo.rehearsal_coef, 0.0);
        let with = |v: &str| DEMO.replace("[grpo]", &format!("[grpo]\n{v}"));
        // Written out at their defaults, the fields leave the hash as it was.
        let zero = "rehearsal_coef = 0.0\nrehearsal_batch = 0\nrehearsal_instances = 0";
        assert_eq!(
            LedgerPlan::parse(with(zero).as_bytes()).unwrap().hash(),
            demo.hash()
        );
        let on = "rehearsal_coef = 0.5\nrehearsal_batch = 16\nrehearsal_instances = 2048";
        let set = LedgerPlan::parse(with(on).as_bytes()).unwrap();
        assert_eq!(
            (set.grpo.rehearsal_batch, set.grpo.rehearsal_instances),
            (16, 2048)
        );
        assert_ne!(set.hash(), demo.hash());
        for (bad, field) in [
            ("rehearsal_coef = 0.5", "grpo.rehearsal_batch"),
            (
                "rehearsal_coef = 0.5\nrehearsal_batch = 16",
                "grpo.rehearsal_instances",
            ),
            ("rehearsal_coef = -1.0", "grpo.rehearsal_coef"),
        ] {
            let e = LedgerPlan::parse(with(bad).as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "{bad}: {e}");
        }
    }

    #[test]
    fn agent_names_leave_old_hashes_alone_and_are_checked() {
        let demo = LedgerPlan::parse(DEMO.as_bytes()).unwrap();
        let with = |v: &str| DEMO.replace("[grpo]", &format!("[grpo]\n{v}"));
        let warm = |v: &str| DEMO.replace("[warmup]", &format!("[warmup]\n{v}"));
        // Both sections' names: skipped at 0 (the hash as it was), recorded when set.
        type Names = fn(&LedgerPlan) -> u32;
        let sections: [(&str, Names); 2] = [
            ("[grpo]", |p| p.grpo.agent_names),
            ("[warmup]", |p| p.warmup.agent_names),
        ];
        for (section, names) in sections {
            let plan = |v: &str| DEMO.replace(section, &format!("{section}\n{v}"));
            assert_eq!(names(&demo), 0);
            let zero = LedgerPlan::parse(plan("agent_names = 0").as_bytes()).unwrap();
            assert_eq!(zero.hash(), demo.hash());
            let set = LedgerPlan::parse(plan("agent_names = 5").as_bytes()).unwrap();
            assert_eq!(names(&set), 5);
            assert_ne!(set.hash(), demo.hash());
        }
        // Fewer names than the trained agents, or more than two digits, are refused;
        // so is the steps style, which tags agents by position.
        for bad in ["agent_names = 1", "agent_names = 100"] {
            let e = LedgerPlan::parse(with(bad).as_bytes())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("grpo.agent_names") && e.contains("2..=99"),
                "{bad}: {e}"
            );
        }
        // The warm-up's are checked against the most warmed agents.
        let e = LedgerPlan::parse(warm("agent_names = 3\nagents = [2, 4]").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("warmup.agent_names") && e.contains("4..=99"),
            "{e}"
        );
        let steps = with("agent_names = 5").replace("prompt = \"cells\"", "prompt = \"steps\"");
        assert!(steps.contains("prompt = \"steps\""));
        let e = LedgerPlan::parse(steps.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("grpo.agent_names") && e.contains("steps"), "{e}");
    }

    #[test]
    fn engineer_context_sizes_is_a_range_that_leaves_old_hashes_alone() {
        let demo = LedgerPlan::parse(DEMO.as_bytes()).unwrap();
        assert_eq!(demo.warmup.engineer_context_sizes, None);
        let with = |v: &str| {
            DEMO.replace(
                "[warmup]",
                &format!("[warmup]\nengineer_context_sizes = {v}"),
            )
        };
        let set = LedgerPlan::parse(with("[3, 8]").as_bytes()).unwrap();
        assert_eq!(set.warmup.engineer_context_sizes, Some([3, 8]));
        assert_ne!(set.hash(), demo.hash());
        for bad in ["[5, 3]", "[0, 4]", "[2, 40]"] {
            let e = LedgerPlan::parse(with(bad).as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.contains("warmup.engineer_context_sizes"), "{bad}: {e}");
        }
    }

    #[test]
    fn engineer_suite_items_are_a_list_that_leaves_old_hashes_alone() {
        let demo = LedgerPlan::parse(DEMO.as_bytes()).unwrap();
        assert_eq!(demo.warmup.engineer_suite_items, None);
        let with =
            |v: &str| DEMO.replace("[warmup]", &format!("[warmup]\nengineer_suite_items = {v}"));
        let set = LedgerPlan::parse(with("[20, 48, 150]").as_bytes()).unwrap();
        assert_eq!(set.warmup.engineer_suite_items, Some(vec![20, 48, 150]));
        assert_ne!(set.hash(), demo.hash());
        for bad in ["[]", "[0, 20]", "[20, 100000]"] {
            let e = LedgerPlan::parse(with(bad).as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.contains("warmup.engineer_suite_items"), "{bad}: {e}");
        }
    }

    #[test]
    fn engineer_edits_are_a_list_that_leaves_old_hashes_alone() {
        let demo = LedgerPlan::parse(DEMO.as_bytes()).unwrap();
        assert_eq!(demo.warmup.engineer_edits, None);
        let with = |v: &str| DEMO.replace("[warmup]", &format!("[warmup]\nengineer_edits = {v}"));
        let set = LedgerPlan::parse(with("[1, 2, 2]").as_bytes()).unwrap();
        assert_eq!(set.warmup.engineer_edits, Some(vec![1, 2, 2]));
        assert_ne!(set.hash(), demo.hash());
        for bad in ["[]", "[0, 1]", "[2, 9]"] {
            let e = LedgerPlan::parse(with(bad).as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.contains("warmup.engineer_edits"), "{bad}: {e}");
        }
    }

    #[test]
    fn policy_settings_are_plan_fields_that_leave_old_hashes_alone() {
        // At their defaults (no recompute, no chunking, no generation budget) the three
        // add nothing to the canonical encoding: every committed plan but the paper's
        // hashes as it did.
        let demo = LedgerPlan::parse(DEMO.as_bytes()).unwrap();
        assert_eq!(demo.policy_settings(), trainer::PolicySettings::default());
        let explicit = DEMO.replace("[grpo]", "[grpo]\nrecompute = false\nlog_prob_chunk = 0");
        assert_eq!(
            LedgerPlan::parse(explicit.as_bytes()).unwrap().hash(),
            demo.hash()
        );
        let set = DEMO
            .replace("[grpo]", "[grpo]\nrecompute = true\nlog_prob_chunk = 512")
            .replace("[lm]", "[lm]\ngeneration_memory = \"24576MiB\"");
        let set = LedgerPlan::parse(set.as_bytes()).unwrap();
        assert_eq!(
            set.policy_settings(),
            trainer::PolicySettings {
                generation_memory: Some(24 << 30),
                log_prob_chunk: 512,
                recompute: true,
                ..trainer::PolicySettings::default()
            }
        );
        assert_ne!(set.hash(), demo.hash());
        let explicit = DEMO.replace("[lm]", "[lm]\nlora_in_compute_dtype = false");
        assert_eq!(
            LedgerPlan::parse(explicit.as_bytes()).unwrap().hash(),
            demo.hash()
        );
        let on = DEMO.replace("[lm]", "[lm]\nlora_in_compute_dtype = true");
        let on = LedgerPlan::parse(on.as_bytes()).unwrap();
        assert!(on.policy_settings().lora_in_compute_dtype);
        assert_ne!(on.hash(), demo.hash());
        // The training kernels: the recorded ones by default, named or not, and either
        // lever a different plan.
        let named = DEMO.replace(
            "[lm]",
            "[lm]\ntraining_attention = \"masked\"\ntraining_norms = \"eager\"",
        );
        assert_eq!(
            LedgerPlan::parse(named.as_bytes()).unwrap().hash(),
            demo.hash()
        );
        for (line, memory) in [
            (
                "training_attention = \"causal\"",
                trainer::PolicySettings {
                    training_attention: trainer::TrainingAttention::Causal,
                    ..demo.policy_settings()
                },
            ),
            (
                "training_norms = \"fused\"",
                trainer::PolicySettings {
                    training_norms: trainer::TrainingNorms::Fused,
                    ..demo.policy_settings()
                },
            ),
        ] {
            let plan = DEMO.replace("[lm]", &format!("[lm]\n{line}"));
            let plan = LedgerPlan::parse(plan.as_bytes()).unwrap();
            assert_eq!(plan.policy_settings(), memory, "{line}");
            assert_ne!(plan.hash(), demo.hash(), "{line}");
        }
        let bad = DEMO.replace("[lm]", "[lm]\ntraining_attention = \"flash\"");
        let err = LedgerPlan::parse(bad.as_bytes()).unwrap_err().to_string();
        assert!(
            err.contains("training_attention") || err.contains("flash"),
            "{err}"
        );
        // The same size in another unit is the same plan.
        let gib = DEMO.replace("[lm]", "[lm]\ngeneration_memory = \"24GiB\"");
        let mib = DEMO.replace("[lm]", "[lm]\ngeneration_memory = \"24576MiB\"");
        assert_eq!(
            LedgerPlan::parse(gib.as_bytes()).unwrap().hash(),
            LedgerPlan::parse(mib.as_bytes()).unwrap().hash()
        );
        let bad = DEMO.replace("[lm]", "[lm]\ngeneration_memory = \"24\"");
        let e = LedgerPlan::parse(bad.as_bytes()).unwrap_err().to_string();
        assert!(
            e.contains("generation_memory") || e.contains("give a unit"),
            "{e}"
        );
    }

    #[test]
    fn optimiser_and_advantage_fields_are_plan_fields_that_leave_old_hashes_alone() {
        // At their defaults the Adam settings and the advantage epsilons add nothing to
        // the canonical encoding (a plan written before them hashes as it did) and give
        // the optimiser every stage always had.
        let g = GrpoConfig::default();
        let old_fields = (
            (
                g.steps,
                g.lr,
                g.group_size,
                g.clip_eps,
                g.kl_coef,
                g.batch_size,
            ),
            (
                g.instances_per_stage,
                g.entropy_coef,
                g.epochs,
                g.valid_reward,
            ),
            (
                g.optimal_bonus,
                g.format_reward,
                g.agent_reward,
                g.cost_reward,
            ),
            (g.zero_variance, g.checkpoint_every),
        );
        assert_eq!(codec::encode(&g), codec::encode(&old_fields));
        let adam = trainer::AdamConfig {
            lr: g.lr,
            ..Default::default()
        };
        assert_eq!(g.adam(), adam);
        // Set in a plan, each one is read, recorded in the hash and handed to the loop.
        let demo = LedgerPlan::parse(DEMO.as_bytes()).unwrap();
        let set = DEMO.replace(
            "[grpo]\n",
            "[grpo]\nbeta2 = 0.99\nweight_decay = 0.01\nmax_grad_norm = 0.5\nadvantage_eps = 1e-4\n",
        );
        let set = LedgerPlan::parse(set.as_bytes()).unwrap();
        assert_ne!(set.hash(), demo.hash());
        let a = set.grpo.adam();
        assert_eq!(
            (a.beta2, a.weight_decay, a.max_grad_norm),
            (0.99, 0.01, 0.5)
        );
        assert_eq!(set.grpo.advantage_eps, 1e-4);
        for (bad, field) in [
            ("beta1 = 1.0", "grpo.beta1"),
            ("adam_eps = 0.0", "grpo.adam_eps"),
            ("signal_eps = -1.0", "grpo.signal_eps"),
        ] {
            let text = DEMO.replace("[grpo]\n", &format!("[grpo]\n{bad}\n"));
            let e = LedgerPlan::parse(text.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(field), "{bad}: {e}");
        }
    }

    #[test]
    fn out_of_range_field_is_named() {
        let bad = DEMO.replace("group_size = 8", "group_size = 1");
        let e = LedgerPlan::parse(bad.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("grpo.group_size"), "{e}");
        let bad = DEMO.replace("hole_ratio = 0.2", "hole_ratio = 0.9");
        let e = LedgerPlan::parse(bad.as_bytes()).unwrap_err().to_string();
        assert!(
            e.contains("initial_config") && e.contains("hole_ratio"),
            "{e}"
        );
    }
}
