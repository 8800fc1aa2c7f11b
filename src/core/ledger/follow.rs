//! Following a branch while a writer appends to it (`ledger log --follow`): each poll
//! reads `REFS` (a reader's snapshot never waits for the writer) and yields the events
//! committed since the last one, oldest first; the follow ends once no process writes
//! the ledger and everything committed was yielded. [`follow`] runs the whole follow.
use super::{Event, Hash, Ledger, LedgerError, Meta};
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
        let head = Ledger::current_heads(&self.dir)?.get(&self.branch).copied();
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

/// What [`follow`] hands its caller, in order. (Each is handed once and moved on:
/// boxing the event would buy nothing.)
#[allow(clippy::large_enum_variant)]
pub enum Followed<'a> {
    /// The branch moved to `0`, history that does not continue what was handed before
    /// (its whole history follows).
    Diverged(Hash),
    /// One event committed since the last poll, oldest first.
    Event(&'a Hash, Event, Meta),
    /// The end of one poll's events: a moment to flush what was written.
    Polled,
}

/// Why [`follow`] could not follow.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// Only a branch moves: a stage or an event reference has nothing to follow.
    #[error("--follow {branch}: follows a branch by name (BRANCH, not BRANCH@stageN or a hash)")]
    NotABranch { branch: String },
    #[error("{0}")]
    Ledger(#[from] LedgerError),
}

/// `ledger log --follow`: the `limit` newest events of `branch`'s history, oldest first,
/// then every event committed after them, polling every 200 ms until no process writes
/// the ledger any more (see [`Follower`]). `on` is handed each [`Followed`]; its error
/// ends the follow.
pub fn follow<E: From<FollowError>>(
    dir: &Path,
    branch: &str,
    limit: Option<usize>,
    mut on: impl FnMut(Followed<'_>) -> Result<(), E>,
) -> Result<(), E> {
    if super::refs::validate_branch(branch).is_err() {
        return Err(FollowError::NotABranch {
            branch: branch.to_string(),
        }
        .into());
    }
    let mut follower = Follower::new(dir, branch, limit);
    loop {
        let poll = follower.poll().map_err(FollowError::from)?;
        if let Some(head) = poll.diverged {
            on(Followed::Diverged(head))?;
        }
        if let Some(l) = &poll.ledger {
            for h in &poll.new {
                let (e, m) = l.event_with_meta(h).map_err(FollowError::from)?;
                on(Followed::Event(h, e, m))?;
            }
            on(Followed::Polled)?;
        }
        if !poll.writing {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
