//! How an operation on a lock fails: one server's Redis error, someone
//! else's data at one of the lock's keys, or, on a quorum, too few servers
//! to make a majority.

use std::fmt;

use super::keys::Part;
use crate::redis_conn::{ErrorKind, RedisError};

#[derive(Clone, Debug)]
pub(crate) enum LockError {
    /// One server failed: unreachable, refused, not ready, timed out.
    Redis(RedisError),
    /// A key of the lock holds another type than lockrun keeps there.
    /// Nothing was taken or changed.
    Foreign(Foreign),
    /// A quorum member restarted too recently to vote (it may have lost a
    /// lease it granted to another run).
    Restarted { server: String, uptime_secs: u64 },
    /// Too few members of a quorum answered to make a majority.
    NoMajority(NoMajority),
    /// A quorum member had not answered when the others' answers decided;
    /// what was sent to it is still on its way (`Tally::gather`).
    Unanswered { server: String },
}

impl LockError {
    /// Whether a run that holds nothing yet should try again while its wait
    /// lasts, as waiting may see the failure pass: a server that went away
    /// or is not ready yet, a quorum short of a majority. A key that is not
    /// lockrun's, a wrong password or URL will not go away.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            LockError::Redis(err) => err.kind == ErrorKind::Unreachable || err.is_transient(),
            LockError::Restarted { .. }
            | LockError::NoMajority(_)
            | LockError::Unanswered { .. } => true,
            LockError::Foreign(_) => false,
        }
    }

    /// Whether a server refused a connection for now: it said it is at its
    /// client limit or loading its data set, or closed the connection as it
    /// opened. Not a server that is not there at all.
    pub(crate) fn is_refused_for_now(&self) -> bool {
        match self {
            LockError::Redis(err) => err.is_transient(),
            LockError::NoMajority(short) => short.refused_for_now,
            LockError::Restarted { .. } | LockError::Foreign(_) | LockError::Unanswered { .. } => {
                false
            }
        }
    }

    /// This failure, followed by `later`, which giving back what the failed
    /// call may have taken ran into; see `RedisError::then_giving_back`.
    pub(crate) fn then_giving_back(self, later: &LockError) -> LockError {
        match (self, later) {
            (LockError::Redis(err), LockError::Redis(later)) => {
                LockError::Redis(err.then_giving_back(later))
            }
            (err, _) => err,
        }
    }
}

impl From<RedisError> for LockError {
    fn from(err: RedisError) -> Self {
        LockError::Redis(err)
    }
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Redis(err) => err.fmt(f),
            LockError::Foreign(foreign) => foreign.fmt(f),
            LockError::Restarted {
                server,
                uptime_secs,
            } => write!(
                f,
                "{server} restarted {uptime_secs}s ago and does not vote until it has been up \
                 for one ttl"
            ),
            LockError::NoMajority(short) => short.fmt(f),
            LockError::Unanswered { server } => write!(f, "{server} had not answered yet"),
        }
    }
}

impl std::error::Error for LockError {}

/// One of a lock's keys holds another type than lockrun keeps there (a list
/// where the lease should be, say): someone else's data, which lockrun
/// neither takes for a lock nor touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Foreign {
    /// The Redis key.
    pub(crate) key: String,
    /// The Redis type it holds: "list", "set", "zset", "hash", "stream"...
    pub(crate) holds: String,
    /// What lockrun keeps under that key.
    pub(crate) part: Part,
}

impl fmt::Display for Foreign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = self.part.key().what;
        write!(
            f,
            "{} holds a {}, not {what}; remove it or choose another --key/--prefix",
            self.key, self.holds
        )
    }
}

/// A quorum of `of` servers in which only `able` could take part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NoMajority {
    pub(crate) able: usize,
    pub(crate) of: usize,
    /// What became of the others, one reason each.
    pub(crate) why: Vec<String>,
    /// Whether a majority is still to be had once the servers that turned
    /// this run away for now (at their client limit, loading) let it in.
    pub(crate) refused_for_now: bool,
}

impl fmt::Display for NoMajority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no majority of the Redis servers agrees, only {} of {}: {}",
            self.able,
            self.of,
            self.why.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_majority_says_how_many_and_why_the_others_did_not() {
        let err = NoMajority {
            able: 2,
            of: 5,
            why: vec!["one is down".into(), "one restarted".into()],
            refused_for_now: false,
        };
        assert_eq!(
            err.to_string(),
            "no majority of the Redis servers agrees, only 2 of 5: one is down; one restarted"
        );
    }
}
