//! Phase timers: how the trainer measures where a stage's time goes. [`Phases`] sums the
//! seconds of named phases (the names of [`crate::record::timing::phase`]) and the work
//! each did ([`Work`]: tokens sampled and prefilled, decode forwards and the bytes they
//! must read), and turns them into the [`StageTiming`] a stage records in the unhashed
//! metadata of its `stage_completed` event. Nothing here reaches a hashed event.
//!
//! Use it around anything, not only a stage. One GRPO step's phase split:
//!
//! ```ignore
//! use mapf_ledger::train::{grpo, timing::Phases};
//! let mut phases = Phases::new(state.policy.device());
//! let (records, stats) =
//!     grpo::step_timed(&mut state, None, &cfg, metric, &data, &blobs, &[], seed, 0, &mut phases);
//! let timing = phases.timing(); // wall time, and per phase seconds, calls and tokens
//! for p in &timing.phases {
//!     println!("{:<16} {:>8.3} s  {:?} tokens", p.name, p.seconds, p.sampled_tokens);
//! }
//! ```
//!
//! `mapf_ledger::views::timing::phase_rows(&timing, bandwidth)` adds shares, tokens/s
//! and the memory roofline, and `render_table` prints them: the table `ledger show
//! BRANCH@stageN --timing` prints (`views::timing::bandwidth_of(Some("cuda"),
//! timing.gpu.as_deref())` gives the bandwidth of a GPU in its table).
//!
//! Phases nest without double counting: a phase begun while another is open pauses the
//! outer one until it ends, so the phases' seconds never add up to more than the wall
//! time. On CUDA the device runs asynchronously, so a phase boundary synchronises the
//! device (`tch::Cuda::synchronize`) before reading the clock, and only there: at most
//! two synchronisations per phase run, never one per token. [`Phases::off`] times
//! nothing and never synchronises (what [`super::grpo::step`] passes).
//! [`Phases::echoing`] also writes a line to stderr as each phase run ends, so a bench
//! killed by its time limit still says which phases finished and what they took.
use super::lm::model::Model;
use super::policy::{Policy, Rollout};
use crate::env::Instance;
use crate::record::timing::{Phase, StageTiming};
use std::time::Instant;
use tch::Device;

/// The line [`Phases::echoing`] writes when a run of phase `name` ends: the run's
/// seconds, the phase's so far, and the wall time since the timers started.
pub fn echo_line(name: &str, run: f64, total: f64, wall: f64) -> String {
    format!("phase {name}: {run:.2} s ({total:.2} s in all), {wall:.1} s in")
}

/// Work a phase did besides taking time (each `None` when not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Tokens generated (or scored, for a training forward).
    pub sampled_tokens: Option<u64>,
    /// Prompt tokens run through the model.
    pub prefilled_tokens: Option<u64>,
    /// Decode forwards, at least (see [`decode_work`]).
    pub decode_steps: Option<u64>,
    /// Bytes those decode forwards must read, at least (see [`decode_work`]).
    pub decode_bytes: Option<u64>,
}

impl std::ops::AddAssign for Work {
    fn add_assign(&mut self, o: Work) {
        fn add(a: &mut Option<u64>, b: Option<u64>) {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0) + b);
            }
        }
        add(&mut self.sampled_tokens, o.sampled_tokens);
        add(&mut self.prefilled_tokens, o.prefilled_tokens);
        add(&mut self.decode_steps, o.decode_steps);
        add(&mut self.decode_bytes, o.decode_bytes);
    }
}

/// Named phases' seconds and work, measured on one device.
pub struct Phases {
    device: Device,
    on: bool,
    started: Instant,
    phases: Vec<Phase>,
    /// Open phases, innermost last: the index of each and when its running segment began.
    open: Vec<(usize, Instant)>,
    resumed: bool,
    /// Write each phase run's end to stderr ([`Phases::echoing`]).
    echo: bool,
}

impl Phases {
    /// Timers on `device`, the wall clock starting now.
    pub fn new(device: Device) -> Phases {
        Phases {
            device,
            on: true,
            started: Instant::now(),
            phases: Vec::new(),
            open: Vec::new(),
            resumed: false,
            echo: false,
        }
    }

    /// These timers, also writing to stderr, as each phase run ends, the line
    /// [`echo_line`] makes (for benches whose time limit may cut them short).
    pub fn echoing(self) -> Phases {
        Phases { echo: true, ..self }
    }

    /// Timers that record nothing and never synchronise a device.
    pub fn off() -> Phases {
        Phases {
            on: false,
            ..Phases::new(Device::Cpu)
        }
    }

    /// Whether anything is recorded (callers skip counting work when not).
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Mark the timing as covering only part of its stage (a resumed stage).
    pub fn set_resumed(&mut self) {
        self.resumed = true;
    }

    /// Wait for the device's queued work, so the clock read next includes it.
    fn sync(&self) {
        if let Device::Cuda(i) = self.device {
            tch::Cuda::synchronize(i as i64);
        }
    }

    fn index(&mut self, name: &str) -> usize {
        match self.phases.iter().position(|p| p.name == name) {
            Some(i) => i,
            None => {
                self.phases.push(Phase {
                    name: name.to_string(),
                    ..Phase::default()
                });
                self.phases.len() - 1
            }
        }
    }

    /// Start phase `name`, counting one call of it (pausing the phase open around it,
    /// if any). Every `begin` needs its [`Phases::end`].
    pub fn begin(&mut self, name: &str) {
        self.open_phase(name, 1);
    }

    /// Go on with phase `name` without counting another call (a phase whose work is
    /// split by other phases, such as training around the KL reference). Needs its
    /// [`Phases::end`] as `begin` does.
    pub fn resume(&mut self, name: &str) {
        self.open_phase(name, 0);
    }

    fn open_phase(&mut self, name: &str, calls: u64) {
        if !self.on {
            return;
        }
        self.sync();
        let now = Instant::now();
        if let Some(&(outer, since)) = self.open.last() {
            self.phases[outer].seconds += (now - since).as_secs_f64();
        }
        let i = self.index(name);
        self.phases[i].calls += calls;
        self.open.push((i, now));
    }

    /// End the innermost open phase (resuming the one around it).
    pub fn end(&mut self) {
        if !self.on {
            return;
        }
        self.sync();
        let now = Instant::now();
        if let Some((i, since)) = self.open.pop() {
            let run = (now - since).as_secs_f64();
            self.phases[i].seconds += run;
            if self.echo {
                let p = &self.phases[i];
                let wall = (now - self.started).as_secs_f64();
                eprintln!("{}", echo_line(&p.name, run, p.seconds, wall));
            }
        }
        if let Some(outer) = self.open.last_mut() {
            outer.1 = now;
        }
    }

    /// Run `f` as phase `name`.
    pub fn time<T>(&mut self, name: &str, f: impl FnOnce() -> T) -> T {
        self.begin(name);
        let out = f();
        self.end();
        out
    }

    /// Run `f` as more of phase `name`, without counting another call (see
    /// [`Phases::resume`]).
    pub fn time_resumed<T>(&mut self, name: &str, f: impl FnOnce() -> T) -> T {
        self.resume(name);
        let out = f();
        self.end();
        out
    }

    /// Add `work` to phase `name` (created, with no time, if it has not run).
    pub fn count(&mut self, name: &str, work: Work) {
        if !self.on {
            return;
        }
        let i = self.index(name);
        let p = &mut self.phases[i];
        let mut w = Work {
            sampled_tokens: p.sampled_tokens,
            prefilled_tokens: p.prefilled_tokens,
            decode_steps: p.decode_steps,
            decode_bytes: p.decode_bytes,
        };
        w += work;
        p.sampled_tokens = w.sampled_tokens;
        p.prefilled_tokens = w.prefilled_tokens;
        p.decode_steps = w.decode_steps;
        p.decode_bytes = w.decode_bytes;
    }

    /// What has been measured so far: the wall time since [`Phases::new`] and every
    /// phase (an open phase counted up to now), with the GPU's name on CUDA.
    pub fn timing(&self) -> StageTiming {
        let now = Instant::now();
        let mut phases = self.phases.clone();
        if let Some(&(i, since)) = self.open.last() {
            phases[i].seconds += (now - since).as_secs_f64();
        }
        StageTiming {
            wall_seconds: (now - self.started).as_secs_f64(),
            phases,
            resumed: self.resumed,
            gpu: match self.device {
                Device::Cuda(i) => gpu_name(i),
                _ => None,
            },
        }
    }
}

/// The work of one generation call of `policy` that sampled `rollouts` for `instances`
/// (each distinct instance prefilled once): its tokens, and for a language model its
/// decode forwards and bytes ([`decode_work`]). A `grid` policy's tokens are its moves.
pub fn generation_work(policy: &dyn Policy, instances: &[Instance], rollouts: &[Rollout]) -> Work {
    sampling_work(
        policy,
        prompt_tokens(policy, instances).as_deref(),
        rollouts,
    )
}

/// The prompt tokens of each instance as a language-model `policy` reads them; None for
/// a policy without prompts (`grid`).
pub fn prompt_tokens(policy: &dyn Policy, instances: &[Instance]) -> Option<Vec<usize>> {
    let lm = policy.as_any().downcast_ref::<super::lm::LmPolicy>()?;
    Some(
        instances
            .iter()
            .map(|i| lm.chat_ids(&lm.task_text(i)).len())
            .collect(),
    )
}

/// [`generation_work`] with the instances' prompt tokens known ([`prompt_tokens`]).
pub fn sampling_work(policy: &dyn Policy, prompts: Option<&[usize]>, rollouts: &[Rollout]) -> Work {
    let lm = policy.as_any().downcast_ref::<super::lm::LmPolicy>();
    let (Some(lm), Some(prompts)) = (lm, prompts) else {
        return Work {
            sampled_tokens: Some(rollouts.iter().map(|r| r.actions.len() as u64).sum()),
            ..Work::default()
        };
    };
    let mut distinct = std::collections::BTreeSet::new();
    let lanes: Vec<(usize, usize)> = rollouts
        .iter()
        .map(|r| {
            distinct.insert(r.instance);
            (prompts[r.instance], r.actions.len())
        })
        .collect();
    let prefilled: Vec<usize> = distinct.into_iter().map(|i| prompts[i]).collect();
    decode_work(&lm.model, &prefilled, &lanes)
}

/// The work of a forward that scores `rollouts` (the training forward, the KL
/// reference): every rollout's tokens, and with `prompts` its prompt too.
pub fn scoring_work(prompts: Option<&[usize]>, rollouts: &[Rollout]) -> Work {
    Work {
        sampled_tokens: Some(rollouts.iter().map(|r| r.actions.len() as u64).sum()),
        prefilled_tokens: prompts.map(|p| rollouts.iter().map(|r| p[r.instance] as u64).sum()),
        ..Work::default()
    }
}

/// The work of one generation call of `model`: distinct prompts of `prompts` tokens
/// prefilled once each, and lanes of (prompt tokens, generated tokens).
///
/// Decode forwards are counted as the longest lane's tokens after the first (which the
/// prefill's logits give): exact when the call runs its lanes as one batch, and a lower
/// bound when it splits them into waves. The bytes a memory-bound decode must read are
/// every forward's weights in the compute dtype ([`weight_bytes`]) plus, for every lane
/// and generated position, its key/value cache up to there (prompt and tokens so far;
/// padding not counted). Both are lower bounds, so a roofline share computed from them
/// never flatters the decode.
pub fn decode_work(model: &Model, prompts: &[usize], lanes: &[(usize, usize)]) -> Work {
    decode_counts(
        prompts,
        lanes,
        weight_bytes(model),
        kv_bytes_per_token(model),
    )
}

/// [`decode_work`] for weights of `weights` bytes and a cache of `kv_per_token` bytes
/// per token.
fn decode_counts(
    prompts: &[usize],
    lanes: &[(usize, usize)],
    weights: u64,
    kv_per_token: u64,
) -> Work {
    let steps = lanes
        .iter()
        .map(|l| l.1)
        .max()
        .unwrap_or(0)
        .saturating_sub(1) as u64;
    let kv_tokens: u64 = lanes
        .iter()
        .map(|&(p, n)| {
            // The forwards after the first token read a cache of p+1, ..., p+n-1 tokens.
            let m = n.saturating_sub(1) as u64;
            m * p as u64 + m * (m + 1) / 2
        })
        .sum();
    Work {
        sampled_tokens: Some(lanes.iter().map(|l| l.1 as u64).sum()),
        prefilled_tokens: Some(prompts.iter().map(|&p| p as u64).sum()),
        decode_steps: Some(steps),
        decode_bytes: Some(steps * weights + kv_tokens * kv_per_token),
    }
}

/// Bytes of `model`'s weights in its compute dtype: every parameter of its architecture,
/// plus its LoRA adapters when it has them.
pub fn weight_bytes(model: &Model) -> u64 {
    let numel = |shape: &[i64]| shape.iter().product::<i64>().max(0) as u64;
    let mut n: u64 = super::lm::model::param_shapes(&model.cfg)
        .iter()
        .map(|(_, s)| numel(s))
        .sum();
    if model.lora.is_some() {
        n += model
            .vs
            .trainable_variables()
            .iter()
            .map(|t| numel(&t.size()))
            .sum::<u64>();
    }
    n * model.dtype.elt_size_in_bytes() as u64
}

/// Bytes of one token's keys and values over every layer, in the compute dtype.
pub fn kv_bytes_per_token(model: &Model) -> u64 {
    let c = &model.cfg;
    (2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim).max(0) as u64
        * model.dtype.elt_size_in_bytes() as u64
}

/// The model name of CUDA device `index` as the NVIDIA driver reports it, when every GPU
/// it lists has the same name (the driver's order need not be CUDA's); else None. Read
/// once per process from `/proc/driver/nvidia/gpus/*/information`, else `nvidia-smi`.
pub fn gpu_name(index: usize) -> Option<String> {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let mut names = driver_names();
        if names.is_empty() {
            names = nvidia_smi_names();
        }
        names
    });
    let first = names.first()?;
    (index < names.len() && names.iter().all(|n| n == first)).then(|| first.clone())
}

fn driver_names() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/driver/nvidia/gpus") else {
        return Vec::new();
    };
    let mut paths: Vec<_> = dir.flatten().map(|e| e.path()).collect();
    paths.sort();
    paths
        .iter()
        .filter_map(|p| std::fs::read_to_string(p.join("information")).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("Model:"))
                .map(|m| m.trim().to_string())
                .filter(|m| !m.is_empty())
        })
        .collect()
}

fn nvidia_smi_names() -> Vec<String> {
    std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_phases_pause_the_outer_one() {
        let mut p = Phases::new(Device::Cpu);
        let nap = || std::thread::sleep(std::time::Duration::from_millis(20));
        p.begin("outer");
        nap();
        p.time("inner", nap);
        nap();
        p.end();
        p.time("inner", nap);
        p.count(
            "inner",
            Work {
                sampled_tokens: Some(5),
                ..Work::default()
            },
        );
        let t = p.timing();
        let (outer, inner) = (t.phase("outer").unwrap(), t.phase("inner").unwrap());
        assert_eq!((outer.calls, inner.calls), (1, 2));
        assert!(outer.seconds >= 0.04 && inner.seconds >= 0.04, "{t:?}");
        assert_eq!(inner.sampled_tokens, Some(5));
        assert_eq!(inner.prefilled_tokens, None);
        // Counted once each: the inner naps are not in the outer phase's seconds too
        // (that would make the phases cover more than the wall time).
        assert!(t.covered_seconds() <= t.wall_seconds, "{t:?}");
        assert!(t.wall_seconds - t.covered_seconds() < 0.02, "{t:?}");
        assert_eq!(t.gpu, None);
    }

    /// Two prompts (10 and 4 tokens); lanes of 3 and 1 tokens on the first, 2 on the
    /// second: the longest lane needs 2 forwards after the prefill, which read caches of
    /// 11 and 12 tokens (lane 1), none (lane 2), and 5 (lane 3).
    #[test]
    fn decode_counts_weights_per_forward_and_caches_per_position() {
        let w = decode_counts(&[10, 4], &[(10, 3), (10, 1), (4, 2)], 1000, 7);
        assert_eq!(w.sampled_tokens, Some(6));
        assert_eq!(w.prefilled_tokens, Some(14));
        assert_eq!(w.decode_steps, Some(2));
        assert_eq!(w.decode_bytes, Some(2 * 1000 + (11 + 12 + 5) * 7));
        assert_eq!(decode_counts(&[], &[], 1000, 7).decode_bytes, Some(0));
    }

    #[test]
    fn off_records_nothing() {
        let mut p = Phases::off();
        assert_eq!(p.time("x", || 3), 3);
        p.count("x", Work::default());
        assert!(p.timing().phases.is_empty());
    }

    #[test]
    fn work_adds_where_counted() {
        let mut w = Work::default();
        w += Work {
            sampled_tokens: Some(3),
            decode_steps: Some(2),
            ..Work::default()
        };
        w += Work {
            sampled_tokens: Some(4),
            prefilled_tokens: Some(10),
            ..Work::default()
        };
        assert_eq!(
            w,
            Work {
                sampled_tokens: Some(7),
                prefilled_tokens: Some(10),
                decode_steps: Some(2),
                decode_bytes: None,
            }
        );
    }
}
