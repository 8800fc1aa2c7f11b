//! Engineer text in one room: everything an engineer reads and writes as text, at the
//! plan's revision (`[engineer] revision`).
//!
//! * [`TextRevision`]: a revision as the features it has. [`TextRevision::of`] is the
//!   only code that knows which revision number has which feature; everything else
//!   asks for a feature by name (`text.weakest_first`), and every caller passes the
//!   plan's revision: nothing falls back to an older one without saying so.
//! * [`render`]: the context modules as text (the structured context and its evidence
//!   stay in `ledger-core`'s `context`, which knows no revision);
//! * [`prompt`]: the prompt every engineer that reads text gets (system and user
//!   messages), trimmed to a token budget;
//! * [`answer`]: the answer formats a prompt ends with.
//!
//! Earlier revisions render byte for byte as they did when ledgers recorded them, so
//! those ledgers replay (`teacher::tests::teacher_examples_are_pinned_per_revision`
//! pins every revision's contexts, prompts and teacher replies).
pub mod answer;
pub mod prompt;
pub mod render;

pub use prompt::{build, corpus_prompt, system_message, Prompt, TokenCounter, CHARS_PER_TOKEN};
pub use render::{
    config_changes, config_table, kinds_by_count, ratio, render, weakest_first, Trimmed,
};

/// A revision of the engineer text, as the features it has. Each feature, once on,
/// stays on in every later revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextRevision {
    number: u32,
    /// Revision 2: a module the prompt budget trimmed says what was cut ("2 earlier
    /// designed stage(s) omitted to fit the prompt"), and the notes count in the
    /// budget. Before, the trimmed context was rendered as it was, reading as empty.
    pub says_cuts: bool,
    /// Revision 2: a reply that names a key twice is a recorded repair (the last value
    /// is used, as JSON readers do, and the rationale says so), never a silent
    /// last-wins.
    pub repairs_duplicate_keys: bool,
    /// Revision 2: the pretraining teacher reads the evidence (its edits answer each
    /// weak size's dominant failure, and leave working sizes alone), and its contexts
    /// have one dominant failure kind per size and the suite sizes of real plans.
    pub teacher_reads_evidence: bool,
    /// Revision 3: the evidence is ordered weakest first: the summary by valid rate,
    /// the breakdown by failed count, each line's kinds by count, and each breakdown
    /// line ends with its size's settings.
    pub weakest_first: bool,
    /// Revision 3: the answer gives one line of evidence per changed size, copied from
    /// its breakdown line, before a JSON of only the values it changes (and the
    /// teacher answers so).
    pub evidence_first: bool,
    /// Revision 4: the teacher's contexts do not rank the sizes by map size (each
    /// size's difficulty and dominant failure are drawn on their own, and the
    /// validated sizes end at a random size from 5 up), so only reading finds the
    /// weakest.
    pub unranked_sizes: bool,
    /// Revision 5: the failure breakdown's lines close the prompt, weakest last, after
    /// the answer format; only its example plans stay in the module's place.
    pub breakdown_last: bool,
    /// Revision 6: a compact prompt for small models: a one-line role, a one-line
    /// answer format, and the failure breakdown's lines weakest last, each ending with
    /// its size's settings (so the configuration is there too); no other module and no
    /// example plans. The teacher's contexts hold 2 to 4 sizes (short reading tasks:
    /// find the weakest line, copy it, name the edit).
    pub compact: bool,
    /// Revision 7: the paper's whole configuration in one entry. A reply may set fields
    /// at every size at once (`{"all": {"wait_ratio": 0.75}}`, read by
    /// `engineer::reply`; a size's own entry overrides it), the compact answer format
    /// says so, and the teacher answers conflicts and holes with the whole-configuration
    /// edits the headroom pilot measured to help (`ledgers/results/headroom`).
    pub whole_configuration: bool,
    /// The tokenizer corpus of a scratch model holds revision 1's untrimmed prompts
    /// (every revision so far: the tokenizers of the shipped and recorded scratch
    /// models were trained on them; a revision that renders its own prompts there
    /// changes what a new scratch model's tokenizer is made from).
    pub corpus_of_first_revision: bool,
}

/// A revision number no [`TextRevision`] has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "engineer text revision {revision}: the revisions are 1 to {}",
    TextRevision::LATEST
)]
pub struct UnknownRevision {
    pub revision: u32,
}

impl TextRevision {
    /// The newest revision (a plan's `[engineer] revision` goes up to it).
    pub const LATEST: u32 = crate::plan::LATEST_ENGINEER_REVISION;

    /// Revision `n` (1 to [`Self::LATEST`]).
    pub fn of(n: u32) -> Result<TextRevision, UnknownRevision> {
        if !(1..=Self::LATEST).contains(&n) {
            return Err(UnknownRevision { revision: n });
        }
        Ok(TextRevision {
            number: n,
            says_cuts: n >= 2,
            repairs_duplicate_keys: n >= 2,
            teacher_reads_evidence: n >= 2,
            weakest_first: n >= 3,
            evidence_first: n >= 3,
            unranked_sizes: n >= 4,
            breakdown_last: n >= 5,
            compact: n >= 6,
            whole_configuration: n >= 7,
            corpus_of_first_revision: true,
        })
    }

    /// The revision a plan asks for (`[engineer] revision`).
    pub fn of_plan(plan: &crate::plan::LedgerPlan) -> Result<TextRevision, UnknownRevision> {
        TextRevision::of(plan.engineer.revision)
    }

    /// Every revision, oldest first.
    pub fn all() -> impl Iterator<Item = TextRevision> {
        (1..=Self::LATEST).map(|n| TextRevision::of(n).expect("in range"))
    }

    /// The revision's number, for messages and names (`teacher-v3`).
    pub fn number(&self) -> u32 {
        self.number
    }

    /// The revision whose untrimmed prompts a scratch tokenizer's corpus holds (see
    /// [`Self::corpus_of_first_revision`]).
    pub fn corpus_text(&self) -> TextRevision {
        if self.corpus_of_first_revision {
            TextRevision::of(1).expect("revision 1 exists")
        } else {
            *self
        }
    }
}

impl std::fmt::Display for TextRevision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "revision {}", self.number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_are_their_features_and_unknown_ones_are_errors() {
        let names: Vec<u32> = TextRevision::all().map(|t| t.number()).collect();
        assert_eq!(names, (1..=TextRevision::LATEST).collect::<Vec<_>>());
        let first = TextRevision::of(1).unwrap();
        assert!(!first.says_cuts && !first.weakest_first && !first.breakdown_last);
        assert!(!first.whole_configuration);
        let last = TextRevision::of(TextRevision::LATEST).unwrap();
        assert!(last.says_cuts && last.weakest_first && last.breakdown_last);
        assert!(last.whole_configuration);
        assert_eq!(last.corpus_text(), first);
        for bad in [0, TextRevision::LATEST + 1] {
            let e = TextRevision::of(bad).unwrap_err().to_string();
            assert!(e.contains(&bad.to_string()), "{e}");
        }
    }
}
