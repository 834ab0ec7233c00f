//! Whose handle on a lock it is, and how that run holds the lock: given
//! when the handle is made, and the same for its whole life, so that what
//! each call sends follows from it rather than from the calls before.

use super::keys::Token;
use super::records::Share;

/// A run's part in a lock, or the operator's. Not `Debug`, as `Token` is
/// not: a token is never printed.
#[derive(Clone)]
pub(crate) struct Role {
    /// The run's token, also its id in the line; the operator's is empty.
    pub(crate) token: Token,
    pub(crate) hold: Hold,
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
            hold: Hold::Alone,
            acks: ReplicaAcks::Count(0),
            may_wait: false,
        }
    }
}

/// How a run holds the lock, as far as the calls to Redis differ: which
/// keys its lease is on, and what its acquisitions check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Alone: the default, and `--slots 1`.
    Alone,
    /// Alone, once per period (`--once-per`): every acquisition checks for
    /// the job's success this period, and a lease handed over is confirmed
    /// by one more call that checks too.
    OncePer,
    /// With others (`--slots N`, `--shared`): on the keys of the leases held
    /// together, not the lease of a run alone.
    Together,
}

impl Hold {
    /// A run's, from its `--slots`/`--shared` and whether it gave
    /// `--once-per` (which `config` allows only alone).
    pub(crate) fn of(share: Share, once_per: bool) -> Self {
        match (share.together(), once_per) {
            (true, _) => Hold::Together,
            (false, true) => Hold::OncePer,
            (false, false) => Hold::Alone,
        }
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
    fn a_run_holds_together_with_slots_or_shared_and_once_per_only_alone() {
        assert_eq!(Hold::of(Share::Alone, false), Hold::Alone);
        assert_eq!(Hold::of(Share::Slots(1), false), Hold::Alone);
        assert_eq!(Hold::of(Share::Alone, true), Hold::OncePer);
        assert_eq!(Hold::of(Share::Slots(3), false), Hold::Together);
        assert_eq!(Hold::of(Share::Shared, false), Hold::Together);
    }
}
