//! A run's per-instance outcomes kept in a study report ([`StudyItems`]): taken from a
//! summary when the study is written, and checked and put back when a later study
//! reuses the report (`ledger study --reuse`), so that reused runs still pair item by
//! item.
use super::model::{ItemsMismatch, RecordedOutcomes, StudyItems};
use crate::views::compare::BranchSummary;

impl StudyItems {
    /// The items of a summary whose outcomes were loaded (`compare::load_outcomes`);
    /// None when it has none.
    pub fn of(summary: &BranchSummary) -> Option<StudyItems> {
        let recorded = |v: &[(
            crate::ledger::Hash,
            crate::record::event::EvaluationOutcomes,
        )]| {
            v.iter()
                .map(|(event, outcomes)| RecordedOutcomes {
                    event: *event,
                    outcomes: outcomes.clone(),
                })
                .collect::<Vec<_>>()
        };
        let items = StudyItems {
            final_stage: recorded(&summary.outcomes),
            stage0: recorded(&summary.stage0_outcomes),
            needs_coordination: summary.coordination_flags.clone(),
        };
        (!items.final_stage.is_empty()).then_some(items)
    }

    /// Put the items back into a summary read from a report, where the pairing
    /// functions look for them. Refused (the summary untouched) when they cannot be
    /// this run's: a layout that does not account for its bytes, coordination flags of
    /// another length than their suite's outcomes, or final test outcomes whose counts
    /// per cell are not the summary's test table.
    pub fn restore(&self, summary: &mut BranchSummary) -> Result<(), ItemsMismatch> {
        use crate::record::event::{OUTCOME_OPTIMAL, OUTCOME_VALID};
        for r in self.final_stage.iter().chain(&self.stage0) {
            let o = &r.outcomes;
            if !o.is_well_formed() {
                return Err(ItemsMismatch::Layout {
                    suite: o.suite.clone(),
                });
            }
            if let Some(f) = self.needs_coordination.get(&o.suite) {
                if f.len() != o.outcomes.len() {
                    return Err(ItemsMismatch::Flags {
                        suite: o.suite.clone(),
                        flags: f.len(),
                        items: o.outcomes.len(),
                    });
                }
            }
        }
        if let Some(t) = self.final_stage.iter().find(|r| r.outcomes.suite == "test") {
            let mut counted = Vec::new();
            let mut items = t.outcomes.outcomes.iter();
            for &(agents, size, n) in &t.outcomes.cells {
                let cell: Vec<u8> = items.by_ref().take(n as usize).copied().collect();
                let valid = cell.iter().filter(|&&b| b >= OUTCOME_VALID).count() as u32;
                let optimal = cell.iter().filter(|&&b| b == OUTCOME_OPTIMAL).count() as u32;
                counted.push((agents as usize, size as usize, n, valid, optimal));
            }
            let mut table = summary.test_cells.clone();
            table.sort();
            counted.sort();
            if counted != table {
                return Err(ItemsMismatch::TestTable);
            }
        }
        let pairs = |v: &[RecordedOutcomes]| {
            v.iter()
                .map(|r| (r.event, r.outcomes.clone()))
                .collect::<Vec<_>>()
        };
        summary.outcomes = pairs(&self.final_stage);
        summary.stage0_outcomes = pairs(&self.stage0);
        summary.coordination_flags = self.needs_coordination.clone();
        Ok(())
    }
}
