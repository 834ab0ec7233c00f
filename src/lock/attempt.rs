//! What one acquisition attempt asks for and what it found: the grant of a
//! lease, a place in line, or why not.

use std::time::Duration;

use super::records::{DoneRecord, HoldersAndWaiters};
use crate::clock::BootInstant;

/// A granted lease.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grant {
    /// The fencing token handed to the command.
    pub(crate) fence: u64,
    /// A moment no later than the grant, on this host's clock: the lease is
    /// counted from here. For a lease this run's own request took, that
    /// request's send.
    pub(crate) sent: BootInstant,
    /// With `--slots`, the slot this run holds (0 to N-1).
    pub(crate) slot: Option<u32>,
}

/// How an acquisition attempt treats the line of waiting runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Take the lock if it is free and nobody waits for it; never queue.
    Once,
    /// Take the lock, or a place in line (or refresh the one this run has).
    Wait {
        /// Whether this run listens on its wake-up channel: a release skips
        /// a waiter that said so but whose connection is gone (it died).
        listening: bool,
        /// `--supersede`: take the place of older waiters that gave it too.
        supersede: bool,
        /// How often this run refreshes its place (and so looks again).
        refresh: Duration,
    },
}

/// What one acquisition attempt found.
#[derive(Debug)]
pub(crate) enum Attempt {
    Acquired(Grant),
    /// Not acquired, and not in line.
    Busy(HoldersAndWaiters),
    /// In line.
    Queued {
        found: HoldersAndWaiters,
        /// How long until a change could come without a message: the
        /// lease's expiry when this run is first, or else the first
        /// waiter's place running out.
        retry: Option<Duration>,
    },
    /// A newer run with `--supersede` took this run's place.
    Superseded {
        /// "HOST pid N" of that run.
        by: String,
    },
    /// `--once-per`: the job succeeded this period. Nothing is held: the
    /// lock went on to the next waiter.
    Done(DoneRecord),
    /// The lock's holders and waiters agreed on this many slots, another
    /// number than this run's; nothing was taken.
    Mismatch {
        slots: u32,
    },
}

/// The answer that tells the most about a lock that was not acquired: a
/// run that superseded this one, this run's place in line, a server that
/// shows a holder, any that said no.
pub(super) fn most_telling(answers: Vec<Attempt>) -> Attempt {
    let rank = |attempt: &Attempt| match attempt {
        Attempt::Mismatch { .. } => 6,
        Attempt::Done(_) => 5,
        Attempt::Superseded { .. } => 4,
        Attempt::Queued { .. } => 3,
        Attempt::Busy(found) if found.held => 2,
        Attempt::Busy(_) => 1,
        Attempt::Acquired(_) => 0,
    };
    answers
        .into_iter()
        .filter(|attempt| rank(attempt) > 0)
        .max_by_key(rank)
        .unwrap_or_else(|| Attempt::Busy(HoldersAndWaiters::unknown()))
}
