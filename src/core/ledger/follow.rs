//! Following a branch while a writer appends to it (`ledger log --follow`): each poll
//! reads `REFS` (a reader's snapshot never waits for the writer) and yields the events
//! committed since the last one, oldest first; the follow ends once no process writes
//! the ledger and everything committed was yielded.
use super::{Hash, Ledger, LedgerError};
use std::path::{Path, PathBuf};

/// A branch being followed.
pub struct Follower {
    dir: PathBuf,
    branch: String,
    /// The head the events yielded so far end at.
    seen: Option<Hash>,
    /// Of the first poll's history, at most this many newest events.
    limit: Option<usize>,
    first: bool,
}

/// What one poll found.
pub struct Poll {
    /// The snapshot the new events were read from (None when the head did not move).
    pub ledger: Option<Ledger>,
    /// The events committed since the last poll, oldest first.
    pub new: Vec<Hash>,
    /// The branch's head when it moved to history that does not continue what was
    /// yielded before (the new events are then its whole history).
    pub diverged: Option<Hash>,
    /// Whether a writer was at work when the poll began; when not, this poll was the
    /// last one and the follow is over.
    pub writing: bool,
}

impl Follower {
    /// Follow `branch` of the ledger at `dir`, starting with the `limit` newest events
    /// of its history (all of them without a limit).
    pub fn new(dir: &Path, branch: &str, limit: Option<usize>) -> Follower {
        Follower {
            dir: dir.to_path_buf(),
            branch: branch.to_string(),
            seen: None,
            limit,
            first: true,
        }
    }

    /// The events committed since the last poll. An unknown branch is an error at the
    /// first poll; a branch deleted later yields nothing more.
    pub fn poll(&mut self) -> Result<Poll, LedgerError> {
        let writing = Ledger::writer_active(&self.dir);
        let head = Ledger::current_heads(&self.dir)?
            .get(&self.branch)
            .copied();
        let mut poll = Poll {
            ledger: None,
            new: Vec::new(),
            diverged: None,
            writing,
        };
        if head.is_some() && head != self.seen {
            let l = Ledger::open_read_only(&self.dir)?;
            let head = l.head(&self.branch)?;
            let mut new = l.ancestry(&head)?;
            let whole = new.len();
            if let Some(i) = new.iter().position(|h| Some(*h) == self.seen) {
                new.truncate(i);
            }
            if self.seen.is_some() && new.len() == whole {
                poll.diverged = Some(head);
            }
            if self.first {
                if let Some(n) = self.limit {
                    new.truncate(n);
                }
            }
            new.reverse();
            poll.new = new;
            poll.ledger = Some(l);
            self.seen = Some(head);
        } else if head.is_none() && self.first {
            let l = Ledger::open_read_only(&self.dir)?;
            return Err(l.unknown_branch(&self.branch));
        }
        self.first = false;
        Ok(poll)
    }
}
