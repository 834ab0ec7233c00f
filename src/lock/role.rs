//! Whose handle on a lock it is, and how that run holds the lock: given
//! when the handle is made, and the same for its whole life, so that what
//! each call sends follows from it rather than from the calls before.

use std::time::Duration;

use super::keys::Token;

/// A run's part in a lock, or the operator's. Not `Debug`, as `Token` is
/// not: a token is never printed.
#[derive(Clone)]
pub(crate) struct Role {
    /// The run's token, also its id in the line; the operator's is empty.
    pub(crate) token: Token,
    pub(crate) holding: Holding,
    pub(crate) acks: ReplicaAcks,
    /// Whether the run may wait in line: then, on one server, its wake-up
    /// messages ride on the connection it calls on (where the topology
    /// allows). A quorum does not queue, so nobody sends it any.
    pub(crate) may_wait: bool,
}

impl Role {
    /// The operator's: it holds no token, waits for nothing and takes no
    /// lease, so it asks no replica.
    pub(crate) fn operator() -> Self {
        Role {
            token: Token::default(),
            holding: Holding::ALONE,
            acks: ReplicaAcks::Count(0),
            may_wait: false,
        }
    }
}

/// How a run holds the lock (`--slots`, `--shared`, `--once-per`), made
/// once by `config`: what its acquisitions ask the scripts for, which keys
/// its lease is on, what the command is told and what its records say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holding {
    /// Alone: the default, and `--slots 1`.
    Alone {
        /// `--once-per`: every acquisition checks for the job's success
        /// this period, which a success records for this long; a lease
        /// handed over is confirmed by one more call that checks too.
        once_per: Option<Duration>,
        /// `--slots 1`: the lock alone as slot 0, which the command is told.
        slot_zero: bool,
    },
    /// With any number of other `--shared` runs, and nobody who holds it
    /// alone.
    Shared,
    /// In one of this many slots, 2 or more (`--slots N`).
    Slots(u32),
}

impl Holding {
    /// A run alone, with neither `--once-per` nor `--slots`.
    pub(crate) const ALONE: Holding = Holding::Alone {
        once_per: None,
        slot_zero: false,
    };

    /// Whether the lease is one of those held together (on their own keys,
    /// not the lease of a run alone).
    pub(crate) fn together(self) -> bool {
        matches!(self, Holding::Shared | Holding::Slots(_))
    }

    /// The number of slots, as runs of one lock must agree on it: 1 for a
    /// run alone or shared.
    pub(crate) fn slots(self) -> u32 {
        match self {
            Holding::Slots(n) => n,
            Holding::Alone { .. } | Holding::Shared => 1,
        }
    }

    /// `--once-per`'s period, for a run alone that gave it.
    pub(crate) fn once_per(self) -> Option<Duration> {
        match self {
            Holding::Alone { once_per, .. } => once_per,
            Holding::Shared | Holding::Slots(_) => None,
        }
    }

    /// The slot of a run granted `grant_slot`: with `--slots`, the one
    /// granted (0 when one slot is the lock alone); none otherwise.
    pub(crate) fn slot(self, grant_slot: Option<u32>) -> Option<u32> {
        let numbered = matches!(
            self,
            Holding::Slots(_)
                | Holding::Alone {
                    slot_zero: true,
                    ..
                }
        );
        numbered.then(|| grant_slot.unwrap_or(0))
    }
}

/// How many replicas must have a write before lockrun counts on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplicaAcks {
    /// This many; 0 does not wait at all.
    Count(u32),
    /// Every replica connected to the primary when the script ran, counted
    /// by the script itself: after a failover the new primary may have
    /// fewer, and a renewal there must still succeed.
    All,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_runs_with_slots_have_one_and_only_shared_or_slots_hold_together() {
        let slot_zero = Holding::Alone {
            once_per: None,
            slot_zero: true,
        };
        assert_eq!(Holding::ALONE.slot(None), None);
        assert_eq!(slot_zero.slot(None), Some(0));
        assert_eq!(Holding::Slots(3).slot(Some(2)), Some(2));
        assert_eq!(Holding::Shared.slot(None), None);
        assert!(!Holding::ALONE.together() && !slot_zero.together());
        assert!(Holding::Shared.together() && Holding::Slots(3).together());
        assert_eq!((slot_zero.slots(), Holding::Slots(3).slots()), (1, 3));
    }
}
