//! What a scratch model pretrains on: solver plans in its prompt format, and engineer
//! prompts answered by the teacher (and the tokenizer corpus built from both).
use super::*;

// The solver-plan half of the corpus is the trainer's own (`train::lm`, which its
// tests use too).
pub use crate::train::lm::pretraining_corpus;

/// The engineer examples of a scratch `lm` plan's pretraining: teacher contexts shaped
/// like the plan's own (its context modules, validation cell size and size limit) and
/// the teacher's replies. Empty for other plans.
pub fn engineer_examples(plan: &LedgerPlan, seed: Seed) -> Vec<(EngineerContext, String)> {
    use crate::engineer::teacher;
    let n = plan.warmup.engineer_examples;
    if plan.policy != crate::plan::PolicyKind::Lm || plan.lm.hf_dir().is_some() || n == 0 {
        return Vec::new();
    }
    let spec = teacher::TeacherSpec {
        modules: plan.engineer.context.clone(),
        stages: plan.engineer.stages.max(1),
        per_cell: plan.suites.validation_per_cell,
        max_size: plan.engineer.max_size as usize,
        examples_per_size: eval::EXAMPLES_PER_SIZE,
        revision: plan.engineer.revision,
    };
    (0..n as u64)
        .map(|i| {
            let ctx = teacher::context(
                seed.child("teacher-context", i),
                &spec,
                1 + (i % spec.stages as u64) as u32,
            );
            let reply =
                teacher::answer_revision(&ctx, seed.child("teacher-answer", i), spec.revision);
            (ctx, reply)
        })
        .collect()
}

/// The engineer examples as chat texts for the tokenizer's corpus (untrimmed prompts).
pub fn engineer_corpus(examples: &[(EngineerContext, String)]) -> Vec<String> {
    let chat = crate::train::lm::ChatFormat::ChatMl;
    examples
        .iter()
        .map(|(ctx, reply)| {
            let p = crate::engineer::model::prompt(
                ctx,
                &crate::engineer::prompt::TokenCounter::Approximate,
                u32::MAX,
            );
            format!(
                "{}{reply}<|im_end|>",
                chat.wrap_with_system(&p.system, &p.user)
            )
        })
        .collect()
}

/// The engineer examples as (prompt ids, reply ids) for `lm`: each prompt exactly as
/// the `current`/`base` engineer will read it (trimmed to `max_tokens` with the model's
/// tokenizer), each reply ending the assistant's turn.
pub fn engineer_pairs(
    lm: &crate::train::lm::LmPolicy,
    examples: &[(EngineerContext, String)],
    max_tokens: u32,
    revision: u32,
) -> Vec<(Vec<u32>, Vec<u32>)> {
    use crate::engineer::model;
    let counter = model::counter(lm);
    examples
        .iter()
        .map(|(ctx, reply)| {
            let p = model::prompt_ids(
                lm,
                &crate::engineer::prompt::build_revision(
                    ctx,
                    &[],
                    Some(max_tokens),
                    &counter,
                    revision,
                ),
            );
            let mut r = lm.encode(reply);
            r.extend(lm.tokenizer.token_to_id(lm.arch.chat.end_token()));
            (p, r)
        })
        .collect()
}
