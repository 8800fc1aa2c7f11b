//! The one grammar for naming things in a ledger, used by every command:
//!
//! * a stage number: `stageN` or `N`, N >= 0 (stage 0 is the warm-up / base model);
//! * a reference: `BRANCH`, `BRANCH@stageN` (the branch through stage N), or a hash
//!   prefix of 4+ hex digits. A name that is both a branch and a hash prefix is the
//!   branch (as in git).
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

#[cfg(test)]
mod tests {
    use super::*;

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
