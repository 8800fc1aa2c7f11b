//! What a scratch model pretrains on: solver plans in its prompt format, and engineer
//! prompts answered by the teacher (and the tokenizer corpus built from both).
use super::*;
use crate::engineer::text::TextRevision;

// The solver-plan half of the corpus is the trainer's own (`train::lm`, which its
// tests use too).
pub use crate::train::lm::pretraining_corpus;

/// The engineer examples of an `lm` plan's warm-up (`warmup.engineer_examples` of them):
/// teacher contexts shaped like the plan's own (its context modules, validation cell
/// size and size limit) and the teacher's replies. A scratch model pretrains on them; a
/// model loaded from an HF directory continues its training on them (until 2026-11-25
/// such a plan's examples were silently dropped, and its warm-up trained plans only).
/// Empty for other policies. `text` is the plan's engineer text revision
/// (`TextRevision::of_plan`).
pub fn engineer_examples(
    plan: &LedgerPlan,
    text: TextRevision,
    seed: Seed,
) -> Vec<(EngineerContext, String)> {
    use crate::engineer::teacher;
    let n = plan.warmup.engineer_examples;
    if plan.policy != crate::plan::PolicyKind::Lm || n == 0 {
        return Vec::new();
    }
    let spec = teacher_spec(plan, text);
    (0..n as u64)
        .map(|i| {
            let ctx = teacher::context(
                seed.child("teacher-context", i),
                &spec,
                1 + (i % spec.stages as u64) as u32,
            );
            let reply = teacher::answer(
                &ctx,
                seed.child("teacher-answer", i),
                spec.text,
                spec.edits.as_deref(),
            );
            (ctx, reply)
        })
        .collect()
}

/// The teacher's contexts shaped like `plan`'s own (its context modules, stages,
/// validation cell size, size limit and reading-task length) at text revision `text`.
pub fn teacher_spec(
    plan: &LedgerPlan,
    text: TextRevision,
) -> crate::engineer::teacher::TeacherSpec {
    crate::engineer::teacher::TeacherSpec {
        modules: plan.engineer.context.clone(),
        stages: plan.engineer.stages.max(1),
        per_cell: plan.suites.validation_per_cell,
        max_size: plan.engineer.max_size as usize,
        examples_per_size: eval::EXAMPLES_PER_SIZE,
        text,
        context_sizes: plan
            .warmup
            .engineer_context_sizes
            .map_or(crate::engineer::teacher::CONTEXT_SIZES, |[a, b]| {
                [a as usize, b as usize]
            }),
        suite_items: plan.warmup.engineer_suite_items.clone(),
        edits: plan.warmup.engineer_edits.clone(),
    }
}

/// The engineer examples as chat texts for the tokenizer's corpus: untrimmed prompts at
/// the corpus text of the plan's revision `text` (`text::corpus_prompt`).
pub fn engineer_corpus(examples: &[(EngineerContext, String)], text: TextRevision) -> Vec<String> {
    let chat = crate::train::lm::ChatFormat::ChatMl;
    examples
        .iter()
        .map(|(ctx, reply)| {
            let p = crate::engineer::text::corpus_prompt(ctx, text);
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
    text: TextRevision,
) -> Vec<(Vec<u32>, Vec<u32>)> {
    use crate::engineer::model;
    let counter = model::counter(lm);
    examples
        .iter()
        .map(|(ctx, reply)| {
            let p = model::prompt_ids(
                lm,
                &crate::engineer::text::build(ctx, &[], Some(max_tokens), &counter, text),
            );
            let mut r = lm.encode(reply);
            r.extend(lm.tokenizer.token_to_id(lm.arch.chat.end_token()));
            (p, r)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan that loads an HF checkpoint and asks for teacher examples gets them (its
    /// warm-up trains on them), as a scratch plan does; a plan that asks for none gets none.
    #[test]
    fn an_hf_plan_that_asks_for_engineer_examples_gets_them() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/ledgers/base-indep-v3.toml"
        ))
        .unwrap();
        let mut plan = LedgerPlan::parse(text.as_bytes()).unwrap();
        assert!(plan.lm.hf_dir().is_some());
        plan.warmup.engineer_examples = 3;
        let text = TextRevision::of_plan(&plan).unwrap();
        let examples = engineer_examples(&plan, text, Seed::root(1));
        assert_eq!(examples.len(), 3);
        for (_, reply) in &examples {
            assert!(reply.starts_with("```json\n{\"sizes\": {"), "{reply}");
        }
        plan.warmup.engineer_examples = 0;
        assert!(engineer_examples(&plan, text, Seed::root(1)).is_empty());
    }
}
