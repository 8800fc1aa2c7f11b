//! The one grammar for naming things in a ledger, used by every command:
//!
//! * a stage number: `stageN` or `N`, N >= 0 (stage 0 is the warm-up / base model);
//! * a reference: `BRANCH`, `BRANCH@stageN` (the branch through stage N), or a hash
//!   prefix of 4+ hex digits. A name that is both a branch and a hash prefix is the
//!   branch (as in git).
use super::event::EventBody;
use super::hash::{is_hex_prefix, Hash};
use super::Ledger;
use crate::ledger::refs::validate_branch;
use crate::ledger::LedgerError;

/// A parsed reference, before it is looked up in a ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reference {
    /// A branch name or a hash prefix (decided against the ledger).
    Name(String),
    /// `BRANCH@stageN`.
    Stage { branch: String, stage: u32 },
}

fn bad(text: &str, expected: &str) -> LedgerError {
    LedgerError::BadReference {
        text: text.to_string(),
        expected: expected.to_string(),
    }
}

/// Parse a stage number, `stageN` or `N` (N >= 0).
pub fn parse_stage(s: &str) -> Result<u32, LedgerError> {
    s.strip_prefix("stage")
        .unwrap_or(s)
        .parse::<u32>()
        .map_err(|_| bad(s, "stageN or N, N >= 0"))
}

impl Reference {
    pub fn parse(s: &str) -> Result<Reference, LedgerError> {
        const EXPECTED: &str = "BRANCH, BRANCH@stageN (N >= 0) or a hash prefix";
        match s.split_once('@') {
            Some((b, st)) => {
                validate_branch(b).map_err(|_| bad(s, EXPECTED))?;
                let stage = st
                    .strip_prefix("stage")
                    .and_then(|n| n.parse::<u32>().ok())
                    .ok_or_else(|| bad(s, EXPECTED))?;
                Ok(Reference::Stage {
                    branch: b.to_string(),
                    stage,
                })
            }
            None if s.is_empty() => Err(bad(s, EXPECTED)),
            None => Ok(Reference::Name(s.to_string())),
        }
    }

    /// Parse a reference that must name a branch or a branch through a stage
    /// (`bundle --branch`): `BRANCH` or `BRANCH@stageN`.
    pub fn parse_branch(s: &str) -> Result<(String, Option<u32>), LedgerError> {
        match Reference::parse(s)? {
            Reference::Stage { branch, stage } => Ok((branch, Some(stage))),
            Reference::Name(n) => {
                validate_branch(&n).map_err(|_| bad(s, "BRANCH or BRANCH@stageN"))?;
                Ok((n, None))
            }
        }
    }
}

/// What a reference resolved to in a ledger.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolved {
    Event(Hash),
    Branch { name: String, head: Hash },
    Stage { branch: String, stage: u32 },
}

impl Ledger {
    /// Resolve a reference (the grammar of [`super::Reference`]): `BRANCH@stageN` (the
    /// stage must exist on the branch), a branch name, or a hash prefix.
    pub fn resolve(&self, r: &str) -> Result<Resolved, LedgerError> {
        let reference = Reference::parse(r)?;
        let (Reference::Name(name) | Reference::Stage { branch: name, .. }) = &reference;
        if crate::ledger::refs::is_scratch(name) {
            return Err(LedgerError::ScratchRef { name: name.clone() });
        }
        let name = match reference {
            Reference::Stage { branch, stage } => {
                self.stage_end(&branch, stage)?;
                return Ok(Resolved::Stage { branch, stage });
            }
            Reference::Name(n) => n,
        };
        if let Ok(head) = self.head(&name) {
            return Ok(Resolved::Branch { name, head });
        }
        let p = name.to_ascii_lowercase();
        if p.len() >= 4 && is_hex_prefix(&p) {
            let m = self.index().with_prefix(&p);
            return match m.len() {
                0 => Err(LedgerError::Store(ledger_store::StoreError::UnknownEvent {
                    what: r.to_string(),
                })),
                1 => Ok(Resolved::Event(m[0])),
                n => Err(LedgerError::Ambiguous {
                    what: r.to_string(),
                    count: n,
                }),
            };
        }
        Err(self.unknown_branch(&name))
    }

    /// "No branch `name`", with the branch whose name is nearest to it when one is
    /// close (a typo: `mian` for `main`).
    pub fn unknown_branch(&self, name: &str) -> LedgerError {
        let names = self.branches().unwrap_or_default();
        LedgerError::UnknownBranch {
            name: name.to_string(),
            nearest: nearest(name, names.iter().map(|(n, _)| n.as_str())),
        }
    }

    /// The event a reference names: a branch's head, where `BRANCH@stageN` ended, or the
    /// event of a hash prefix (read commands take any of them as `--branch`).
    pub fn head_of(&self, r: &str) -> Result<Hash, LedgerError> {
        match self.resolve(r)? {
            Resolved::Branch { head, .. } => Ok(head),
            Resolved::Stage { branch, stage } => self.stage_end(&branch, stage),
            Resolved::Event(h) => Ok(h),
        }
    }

    /// The stage `reference` names (`BRANCH@stageN`), for what a command shows of one
    /// stage (`shows`, as in `--timing shows one stage's phases`); a branch or an event
    /// is [`LedgerError::NotAStage`].
    pub fn stage_of(&self, reference: &str, shows: &str) -> Result<(String, u32), LedgerError> {
        match self.resolve(reference)? {
            Resolved::Stage { branch, stage } => Ok((branch, stage)),
            _ => Err(LedgerError::NotAStage {
                shows: shows.to_string(),
                reference: reference.to_string(),
            }),
        }
    }

    /// The history a reference names (see [`Ledger::head_of`]), newest first: at most
    /// `limit` events when given (`ledger log`).
    pub fn newest_first(&self, r: &str, limit: Option<usize>) -> Result<Vec<Hash>, LedgerError> {
        let mut hs = self.ancestry(&self.head_of(r)?)?;
        if let Some(n) = limit {
            hs.truncate(n);
        }
        Ok(hs)
    }

    /// The checkpoint blob a reference names: `BRANCH@stageN` (that stage's), a branch
    /// (its latest), or the hash prefix of a `checkpoint_saved` or `stage_completed`
    /// event.
    pub fn checkpoint_of(&mut self, r: &str) -> Result<Hash, LedgerError> {
        let none = |why: String| LedgerError::NotACheckpoint {
            reference: r.to_string(),
            why,
        };
        match self.resolve(r)? {
            Resolved::Stage { branch, stage: n } => {
                let state = self.projection(&branch)?;
                state
                    .stage(n)
                    .and_then(|s| s.checkpoint)
                    .map(|c| c.0)
                    .ok_or_else(|| none(format!("stage {n} of {branch} has no checkpoint")))
            }
            Resolved::Branch { name, .. } => {
                let state = self.projection(&name)?;
                state
                    .stages
                    .iter()
                    .rev()
                    .find_map(|s| s.checkpoint.map(|c| c.0))
                    .ok_or_else(|| none(format!("branch {name} has no checkpoint yet")))
            }
            Resolved::Event(h) => match self.event(&h)?.body {
                EventBody::CheckpointSaved(c) => Ok(c.blob),
                EventBody::StageCompleted(c) => c
                    .checkpoint
                    .ok_or_else(|| none("the stage has no checkpoint".into())),
                other => Err(none(format!("a {} event, not a checkpoint", other.kind()))),
            },
        }
    }
}

/// The `; did you mean ...?` of an unknown branch's message (empty without one).
pub fn did_you_mean(nearest: Option<&str>) -> String {
    nearest.map_or(String::new(), |n| format!("; did you mean `{n}`?"))
}

/// The candidate nearest to `name` by edit distance (a swap of two neighbours counts
/// one edit), if it is within a third of the name's length (at least 2 edits); ties go
/// to the first in order.
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let limit = (name.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .filter(|c| *c != name)
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.to_string())
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions and
/// swaps of adjacent characters each cost one.
fn edit_distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_the_nearest_branch() {
        let names = ["base-at2", "main", "main-random-at2"];
        assert_eq!(nearest("mian", names).as_deref(), Some("main"));
        assert_eq!(nearest("base-at3", names).as_deref(), Some("base-at2"));
        assert_eq!(nearest("zzzzzzzz", names), None);
        assert_eq!(edit_distance("mian", "main"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn one_grammar() {
        assert_eq!(parse_stage("stage0").unwrap(), 0);
        assert_eq!(parse_stage("3").unwrap(), 3);
        assert!(parse_stage("stage-1").is_err() && parse_stage("x").is_err());
        assert_eq!(
            Reference::parse("main@stage0").unwrap(),
            Reference::Stage {
                branch: "main".into(),
                stage: 0
            }
        );
        assert_eq!(
            Reference::parse("w1/main@stage12").unwrap(),
            Reference::Stage {
                branch: "w1/main".into(),
                stage: 12
            }
        );
        for bad in ["main@stagex", "main@3", "@stage1", "", "a b@stage1"] {
            let e = Reference::parse(bad).unwrap_err().to_string();
            assert!(e.contains("BRANCH@stageN"), "{bad}: {e}");
        }
        assert_eq!(
            Reference::parse_branch("main").unwrap(),
            ("main".to_string(), None)
        );
        assert!(Reference::parse_branch("not a branch").is_err());
    }
}
