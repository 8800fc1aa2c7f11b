//! Stages another branch of the ledger already trained. A GRPO stage's training is a
//! function of its inputs: the stage number, the checkpoint it starts from, the KL
//! reference (stage 0's model), the stage's seed, the configuration it trains on, the
//! plan (with every training setting, the ledger's), and where it runs: the device,
//! torch thread count and kernels (libtorch, ATen's CPU capability, the processor, the
//! GPU, the kernel variables set), since GRPO rounds per processor. Where another branch
//! completed a stage on the same inputs, what it recorded after its decision is what
//! this stage would record: an oracle's search takes a candidate's validation table and
//! model from it ([`super::oracle`]), and a stage about to train copies those events
//! instead ([`Pipeline::copy_stage`]). So a study's oracle arm trains nothing its
//! replicate's other arms trained.
//!
//! Either way the branch records what training would: the same event bodies in the
//! same order, so the same head. Only the unhashed metadata differs (wall times, and no
//! stage timing on a copied stage). `replay --verify` turns this off
//! ([`Pipeline::reuse_trained_stages`]) and recomputes, so a verification never takes
//! the stage it checks as given. Stages with engineer RL are never reused (their
//! evaluated model is not the plain stage's).
use super::*;
use std::collections::BTreeMap;

/// The kernel facts a stage's bits depend on, as metadata records them: libtorch, ATen's
/// CPU capability, the processor, the GPU, the compute dtype and the kernel variables
/// set.
fn kernels(meta: &Meta) -> ([Option<&String>; 5], BTreeMap<String, String>) {
    use crate::train::kernels::{CAPABILITY_KEY, CPU_KEY, GPU_KEY};
    (
        [
            "libtorch",
            CAPABILITY_KEY,
            CPU_KEY,
            GPU_KEY,
            "compute_dtype",
        ]
        .map(|k| meta.versions.get(k)),
        meta.kernel_env(),
    )
}

/// A stage's inputs, as the pipeline is about to train it.
pub(super) struct StageInputs<'s> {
    /// The branch training it (never its own source).
    pub branch: &'s str,
    pub n: u32,
    pub state: &'s BranchState,
    /// The checkpoint the stage starts from, and its seed.
    pub from: Hash,
    pub seed: Seed,
    pub applied: &'s GeneratorConfig,
}

/// Another branch's completed stage on the same inputs.
pub(super) struct TrainedStage {
    pub branch: String,
    /// That branch's head when it was found (the stage lies in its history).
    head: Hash,
    /// The validation table of the stage's final model, and that model's parameters.
    pub validation: ResultTable,
    pub params: Hash,
}

impl Pipeline<'_> {
    /// The first branch by name, other than `s.branch`, that completed stage `s.n` on
    /// the inputs `s` (see the module's doc), evaluating its final checkpoint on the
    /// validation suite with no engineer RL. None when there is none, or when reuse is
    /// off.
    pub(super) fn trained_elsewhere(
        &self,
        s: &StageInputs<'_>,
    ) -> Result<Option<TrainedStage>, StageError> {
        if !self.reuse_trained_stages {
            return Ok(None);
        }
        let reference = |st: &BranchState| st.stage(0).and_then(|x| x.checkpoint).map(|c| c.0);
        let ours = reference(s.state);
        let seed = Hash(*s.seed.bytes());
        for (name, head) in self.ledger.branches()? {
            if name == s.branch {
                continue;
            }
            let state = self.ledger.state_at(&head)?;
            let Some(st) = state.stage(s.n) else {
                continue;
            };
            let (Some(started), Some(completed), Some((blob, params, _))) =
                (st.started, st.completed, st.checkpoint)
            else {
                continue;
            };
            if st.config.as_ref() != Some(s.applied)
                || st.engineer_rl.steps > 0
                || reference(&state) != ours
            {
                continue;
            }
            match self.ledger.event(&started)?.body {
                EventBody::StageStarted(x)
                    if x.from_checkpoint == Some(s.from) && x.seed == seed => {}
                _ => continue,
            }
            // Trained where this run would compute the same bits: the same device,
            // thread count and kernels (libtorch, ATen's CPU capability, processor,
            // GPU, compute dtype, kernel variables), as the stage's metadata records
            // them.
            let (_, meta) = self.ledger.event_with_meta(&completed)?;
            if meta.device != Some(self.device_name())
                || meta.threads != Some(self.plan.train.torch_threads)
                || kernels(&meta) != kernels(&self.base_meta)
            {
                continue;
            }
            // The validation evaluated the stage's final checkpoint.
            let Some(eval) = st.evaluation_events.get("val") else {
                continue;
            };
            match self.ledger.event(eval)?.body {
                EventBody::Evaluation(e) if e.checkpoint == Some(blob) => {}
                _ => continue,
            }
            let Some(validation) = crate::views::compare::table(st, "val") else {
                continue;
            };
            return Ok(Some(TrainedStage {
                branch: name,
                head,
                validation,
                params,
            }));
        }
        Ok(None)
    }

    /// Record on `branch`, as one durable batch, the events `source` recorded in stage
    /// `n` after its decision, through its completion: the training instances, every
    /// step, checkpoint and evaluation. Returns how many, or None (nothing recorded)
    /// when its stage has no decision before a completion.
    pub(super) fn copy_stage(
        &mut self,
        branch: &str,
        n: u32,
        source: &TrainedStage,
    ) -> Result<Option<usize>, StageError> {
        let stage: Vec<EventBody> = self
            .ledger
            .history_to(&source.head)?
            .into_iter()
            .filter(|(_, e)| e.stage == n)
            .map(|(_, e)| e.body)
            .collect();
        let end = stage
            .iter()
            .position(|b| matches!(b, EventBody::StageCompleted(_)));
        let decided = stage
            .iter()
            .take(end.unwrap_or(0))
            .rposition(|b| matches!(b, EventBody::EngineerDecision(_)));
        let (Some(end), Some(decided)) = (end, decided) else {
            return Ok(None);
        };
        let mut rec = self.recorder(branch);
        for body in stage.into_iter().take(end + 1).skip(decided + 1) {
            rec.push(n, body);
        }
        rec.flush()?;
        Ok(Some(end - decided))
    }
}
