//! A lock held on a majority of independent Redis servers, when `--redis`
//! is given three or more times (Redlock), and the one type the run and its
//! supervisor hold a lock through, whichever kind it is.
//!
//! - Acquire: the acquire script goes to every member at once, each call
//!   within `--redis-timeout`. The lock is held when a majority granted it
//!   and the lease, counted from the first send less the drift allowance,
//!   still has more than a renewal period plus the kill grace left;
//!   otherwise it is given back on every member at once.
//! - A member that restarted less than one ttl (plus the drift allowance)
//!   ago does not vote: it may have lost a lease it granted to another run.
//! - Fencing, in two phases: each member that granted the lease hands out
//!   its own next token, `max(counter + 1, server time in µs)`; the run takes
//!   the highest, T, and raises every member's counter to at least T, which
//!   a majority must confirm before the command starts with T. Any later
//!   majority shares a member with this one, so its token is higher.
//! - Renew: on every member; proven by a majority of successes among the
//!   renewals of one round, the deadline counted from that round's send. A
//!   member that lost our token is a "no".
//! - Release: compare-and-delete on every member, those that said no or did
//!   not answer included.
//!
//! The wait queue is per server: a quorum run does not queue but tries
//! again (`wait`), after a jittered pause, so that runs that collided do not
//! collide again.

use std::time::Duration;

use futures_util::future::join_all;

use crate::clock::BootInstant;
use crate::lease::Timing;
use crate::lock::{
    Attempt, Foreign, Grant, Keys, Lock, Me, Released, ReplicaAcks, Taken, Token, Vote,
};
use crate::redis_conn::{RedisError, Target};

/// The lock a run holds: on one server (or Sentinel service, or cluster),
/// or on a quorum.
pub(crate) enum Locks {
    One(Box<Lock>),
    Quorum(Quorum),
}

impl Locks {
    pub(crate) fn keys(&self) -> &Keys {
        match self {
            Locks::One(lock) => lock.keys(),
            Locks::Quorum(quorum) => quorum.keys(),
        }
    }

    /// Extends the lease to `ttl` from now; see `Lock::renew` and
    /// `Quorum::renew`.
    pub(crate) async fn renew(&mut self, ttl: Duration) -> Result<bool, RedisError> {
        match self {
            Locks::One(lock) => lock.renew(ttl).await,
            Locks::Quorum(quorum) => quorum.renew(ttl).await,
        }
    }

    pub(crate) async fn release(
        &mut self,
        keep_for: Option<Duration>,
    ) -> Result<Released, RedisError> {
        match self {
            Locks::One(lock) => lock.release(keep_for).await,
            Locks::Quorum(quorum) => quorum.release(keep_for).await,
        }
    }

    pub(crate) async fn abandon(&mut self) -> Result<(), RedisError> {
        match self {
            Locks::One(lock) => lock.abandon().await,
            Locks::Quorum(quorum) => quorum.abandon().await,
        }
    }
}

/// One run's handle on a lock held on a majority of independent servers.
pub(crate) struct Quorum {
    /// Three or more, never empty.
    members: Vec<Lock>,
}

impl Quorum {
    /// A handle on lock `keys` on every server of `targets`, each call
    /// limited to `timeout`. Nothing is sent yet.
    pub(crate) fn new(
        targets: Vec<Target>,
        timeout: Duration,
        keys: &Keys,
        token: &Token,
        acks: ReplicaAcks,
    ) -> Self {
        Quorum {
            members: targets
                .into_iter()
                .map(|target| Lock::new(target, timeout, keys.clone(), token.clone(), acks))
                .collect(),
        }
    }

    pub(crate) fn keys(&self) -> &Keys {
        // `config` makes a quorum of three or more.
        self.members[0].keys()
    }

    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    fn majority(&self) -> usize {
        majority(self.members.len())
    }

    /// Connects to every member at once, allowing `within`; fails when a
    /// majority cannot be reached.
    pub(crate) async fn connect(&mut self, within: Duration) -> Result<(), RedisError> {
        let of = self.len();
        let results = join_all(self.members.iter_mut().map(|m| m.connect(within))).await;
        let why: Vec<String> = results
            .iter()
            .filter_map(|r| r.as_ref().err().map(ToString::to_string))
            .collect();
        let able = of - why.len();
        if able >= majority(of) {
            Ok(())
        } else {
            Err(RedisError::no_majority(able, of, &why))
        }
    }

    /// One attempt on every member at once; see the module's description.
    /// `Attempt::Busy` when no majority granted it (or too late), an error
    /// when so few members could vote that no majority could have.
    pub(crate) async fn try_acquire(
        &mut self,
        timing: Timing,
        me: &Me,
    ) -> Result<Attempt, RedisError> {
        let of = self.len();
        let min_uptime = timing.ttl + timing.drift();
        let sent = BootInstant::now();
        let votes = join_all(
            self.members
                .iter_mut()
                .map(|m| m.vote(timing.ttl, me, min_uptime)),
        )
        .await;
        let Tally {
            yes,
            fence,
            taken,
            foreign,
            why,
        } = Tally::count(votes, &self.members);
        if yes >= self.majority() {
            if let Err(err) = self.raise_fences(fence).await {
                let _ = self.abandon().await;
                return Err(err);
            }
            let left = timing.deadline_after(sent).remaining();
            if left > timing.renew_every + timing.kill_grace {
                return Ok(Attempt::Acquired(Grant { fence, sent }));
            }
        }
        // Given back on every member at once, those that did not answer
        // included: their grant may only have been slow.
        let _ = self.abandon().await;
        if let Some(foreign) = foreign {
            return Ok(Attempt::Foreign(foreign));
        }
        let able = of - why.len();
        if able < self.majority() {
            return Err(RedisError::no_majority(able, of, &why));
        }
        Ok(Attempt::Busy(taken.unwrap_or(Taken {
            held: true,
            left: None,
            holder: None,
            waiting: 0,
        })))
    }

    /// The second phase of fencing: every member's counter raised to at
    /// least `fence`; an error unless a majority confirmed it.
    async fn raise_fences(&mut self, fence: u64) -> Result<(), RedisError> {
        let of = self.len();
        let raised = join_all(self.members.iter_mut().map(|m| m.raise_fence(fence))).await;
        let mut why = Vec::new();
        for (result, member) in raised.into_iter().zip(&self.members) {
            match result {
                Ok(true) => {}
                Ok(false) => why.push(format!(
                    "{}: a key of the lock holds another type",
                    member.target()
                )),
                Err(err) => why.push(err.to_string()),
            }
        }
        let confirmed = of - why.len();
        if confirmed >= self.majority() {
            Ok(())
        } else {
            Err(RedisError::no_majority(confirmed, of, &why))
        }
    }

    /// Renews on every member at once. `Ok(true)` when a majority renewed;
    /// `Ok(false)` when so many members lost our token that no majority can
    /// ever renew again; otherwise an error, to retry while time is left.
    pub(crate) async fn renew(&mut self, ttl: Duration) -> Result<bool, RedisError> {
        let of = self.len();
        let results = join_all(self.members.iter_mut().map(|m| m.renew(ttl))).await;
        let mut yes = 0;
        let mut gone = 0;
        let mut why = Vec::new();
        for (result, member) in results.into_iter().zip(&self.members) {
            match result {
                Ok(true) => yes += 1,
                Ok(false) => {
                    gone += 1;
                    why.push(format!(
                        "{} no longer holds this run's token",
                        member.target()
                    ));
                }
                Err(err) => why.push(err.to_string()),
            }
        }
        if yes >= self.majority() {
            Ok(true)
        } else if of - gone < self.majority() {
            Ok(false)
        } else {
            Err(RedisError::no_majority(yes, of, &why))
        }
    }

    /// Compare-and-delete (or keep for `keep_for`) on every member at once.
    /// An error when fewer than a majority answered; `NotOurs` when fewer
    /// than a majority still held our token.
    pub(crate) async fn release(
        &mut self,
        keep_for: Option<Duration>,
    ) -> Result<Released, RedisError> {
        let of = self.len();
        let results = join_all(self.members.iter_mut().map(|m| m.release(keep_for))).await;
        let mut ours = 0;
        let mut kept = false;
        let mut why = Vec::new();
        for result in results {
            match result {
                Ok(Released::Deleted) => ours += 1,
                Ok(Released::Kept) => {
                    ours += 1;
                    kept = true;
                }
                Ok(Released::NotOurs) => {}
                Err(err) => why.push(err.to_string()),
            }
        }
        let answered = of - why.len();
        if answered < self.majority() {
            return Err(RedisError::no_majority(answered, of, &why));
        }
        Ok(if ours < self.majority() {
            Released::NotOurs
        } else if kept {
            Released::Kept
        } else {
            Released::Deleted
        })
    }

    /// Gives back, on every member at once, whatever a failed or given-up
    /// attempt may have left there.
    pub(crate) async fn abandon(&mut self) -> Result<(), RedisError> {
        let results = join_all(self.members.iter_mut().map(Lock::abandon)).await;
        results.into_iter().collect()
    }
}

/// How many of `of` members make a majority.
pub(crate) fn majority(of: usize) -> usize {
    of / 2 + 1
}

/// What the members answered to one acquisition round.
#[derive(Default)]
struct Tally {
    yes: usize,
    /// The highest fencing token a member that said yes handed out.
    fence: u64,
    /// The most telling busy answer: a member that shows a holder.
    taken: Option<Taken>,
    foreign: Option<Foreign>,
    /// Why the members that could not vote did not.
    why: Vec<String>,
}

impl Tally {
    fn count(votes: Vec<Result<Vote, RedisError>>, members: &[Lock]) -> Tally {
        let mut tally = Tally::default();
        for (vote, member) in votes.into_iter().zip(members) {
            match vote {
                Ok(Vote::Yes(granted)) => {
                    tally.yes += 1;
                    tally.fence = tally.fence.max(granted);
                }
                Ok(Vote::Busy(found)) => {
                    if tally.taken.as_ref().is_none_or(|t| !t.held && found.held) {
                        tally.taken = Some(found);
                    }
                }
                Ok(Vote::Restarted(uptime)) => tally.why.push(format!(
                    "{} restarted {uptime}s ago and does not vote until it has been up for \
                     one ttl",
                    member.target()
                )),
                Ok(Vote::Foreign(found)) => tally.foreign = Some(found),
                Err(err) => tally.why.push(err.to_string()),
            }
        }
        tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_is_more_than_half() {
        assert_eq!(majority(3), 2);
        assert_eq!(majority(4), 3);
        assert_eq!(majority(5), 3);
        assert_eq!(majority(6), 4);
        assert_eq!(majority(7), 4);
    }

    #[test]
    fn no_majority_says_how_many_and_why_the_others_did_not() {
        let err = RedisError::no_majority(2, 5, &["one is down".into(), "one restarted".into()]);
        assert_eq!(
            err.to_string(),
            "no majority of the Redis servers agrees, only 2 of 5: one is down; one restarted"
        );
    }
}
