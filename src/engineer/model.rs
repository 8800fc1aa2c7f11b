//! `current` and `base` for `lm` policies: the checkpoint itself is the engineer. It
//! reads the very prompt an HTTP LLM engineer gets (the five context modules and the
//! answer format; [`super::text::build`], trimmed to the model's prompt budget with its
//! own tokenizer), *generates* the reply in-process, seeded from the seed tree (a
//! replay regenerates it bit for bit), and the reply goes through the same parse ->
//! project -> clip -> record path as any LLM reply. An unparseable reply is a recorded
//! rejection, as for HTTP engineers, unless the plan allows more attempts
//! (`lm.engineer_attempts`): then the reply is resampled from the next seed of the
//! decision's node, and the rejected attempts are named in the rationale.
//!
//! `current` is the latest checkpoint of the branch; `base` is stage 0's model. A
//! scratch base model learns to answer these prompts in stage 0 from [`prompt_ids`] of
//! teacher contexts, so what it is trained on and what it reads here are one function.
use super::prompt::{self, Prompt, TokenCounter};
use super::text::TextRevision;
use super::{Decision, Engineer, EngineerContext};
use crate::seed::Seed;
use crate::train::lm::{LmPolicy, Sampling};

pub struct ModelEngineer {
    /// `current` or `base`.
    pub name: String,
    pub policy: LmPolicy,
    /// The seed of this decision (the stage's `engineer` node).
    pub seed: Seed,
    pub sampling: Sampling,
    /// Most prompt tokens (the context is trimmed as for registered engineers).
    pub max_prompt_tokens: u32,
    /// Replies sampled at most (>= 1) until one holds a usable proposal.
    pub attempts: u32,
    /// The plan's engineer text revision (`[engineer] revision`).
    pub text: TextRevision,
}

/// The token ids the model reads for `prompt`: the chat template around its system and
/// user messages, up to the assistant's turn.
pub fn prompt_ids(policy: &LmPolicy, prompt: &Prompt) -> Vec<u32> {
    policy.encode(
        &policy
            .arch
            .chat
            .wrap_with_system(&prompt.system, &prompt.user),
    )
}

/// The model's tokenizer as a prompt token counter.
pub fn counter(policy: &LmPolicy) -> TokenCounter {
    TokenCounter::Tokenizer(Box::new(policy.tokenizer.clone()))
}

impl ModelEngineer {
    /// The prompt this engineer reads for `ctx` (system and user messages).
    pub fn prompt(&self, ctx: &EngineerContext) -> Prompt {
        prompt::build(
            ctx,
            &[],
            Some(self.max_prompt_tokens),
            &counter(&self.policy),
            self.text,
        )
    }
}

impl Engineer for ModelEngineer {
    fn name(&self) -> &str {
        &self.name
    }

    fn reseed(&mut self, seed: Seed) {
        self.seed = seed;
    }

    fn decide(&mut self, ctx: &EngineerContext) -> Decision {
        let prompt = self.prompt(ctx);
        let ids = prompt_ids(&self.policy, &prompt);
        let mut rejected: Vec<String> = Vec::new();
        let attempts = self.attempts.max(1);
        // Every attempt's decoding, for the stage's timing.
        let mut work = crate::train::timing::Work::default();
        for attempt in 0..attempts {
            // Attempt 0 draws from the decision's own seed (so a plan with one attempt
            // records what it always did); later ones from its `retry` children.
            let seed = match attempt {
                0 => self.seed,
                n => self.seed.child("retry", n as u64),
            };
            let g = crate::train::lm::generate::generate(
                &self.policy.model,
                std::slice::from_ref(&ids),
                1,
                &[self.sampling.max_new_tokens],
                &self.sampling,
                false,
                &self.policy.stop,
                seed,
                true,
            )
            .remove(0);
            work += crate::train::timing::decode_work(
                &self.policy.model,
                &[ids.len()],
                &[(ids.len(), g.tokens.len())],
            );
            let reply = self.policy.decode(&g.tokens);
            let mut notes: Vec<String> = prompt
                .cut_note(Some(self.max_prompt_tokens))
                .into_iter()
                .collect();
            notes.extend(rejected.iter().cloned());
            notes.push(format!(
                "{} checkpoint wrote {} tokens ({}; temperature {}, top-p {}{})",
                self.name,
                g.tokens.len(),
                if g.stopped {
                    "ended its turn"
                } else {
                    "hit the token cap"
                },
                self.sampling.temperature,
                self.sampling.top_p,
                if attempts > 1 {
                    format!("; attempt {} of at most {attempts}", attempt + 1)
                } else {
                    String::new()
                }
            ));
            let mut d = Decision {
                prompt: Some(prompt.text()),
                reply: Some(reply.clone()),
                work: Some(work),
                ..Decision::default()
            };
            super::reply::read_reply(&mut d, &reply, notes, self.text);
            if d.proposal.is_some() || attempt + 1 == attempts {
                return d;
            }
            let head: String = reply.chars().take(60).collect();
            rejected.push(format!(
                "attempt {} rejected ({}); it began {head:?}",
                attempt + 1,
                d.rationale.lines().next().unwrap_or_default()
            ));
        }
        unreachable!("the last attempt returns")
    }
}
