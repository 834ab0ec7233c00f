//! The majority rule: how the answers of a lock's servers to one request
//! become the lock's answer. Every operation on a lock (connect, acquire,
//! renew, release, status, force-release) asks all its servers at once and
//! counts here, as the answers come in: a run's own operations stop waiting
//! once the answers so far decide (`gather`), so that a member that stalls
//! (its socket open, nothing answering) holds up nobody while a majority
//! answers. One server is a quorum of one: its majority is itself, and its
//! failure is the lock's failure, word for word.

use std::future::Future;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::error::{Foreign, LockError, NoMajority};
use crate::clock::MS;

/// How long the servers that have not answered when the answers decide get
/// to answer still, at least: as long again as the decision took. A healthy
/// server answers within about the same time as the others, and should hold
/// the lease as they do, so that the run rides through the failure of as
/// many members as before; a server that stalls costs the run no more. A
/// call still connecting when it is dropped is never sent.
const LATE_GRACE: Duration = MS.saturating_mul(5);

/// How many of `of` servers make a majority.
pub(crate) fn majority(of: usize) -> usize {
    of / 2 + 1
}

/// What every server of a lock answered to one request, in their order.
#[derive(Debug)]
pub(crate) struct Tally<T>(Vec<Result<T, LockError>>);

impl<T> Tally<T> {
    #[cfg(test)]
    pub(crate) fn new(results: Vec<Result<T, LockError>>) -> Self {
        Tally(results)
    }

    /// Runs `asked`, one future per server, all at once, and counts each
    /// answer as it comes; stops once `settled` says the answers so far
    /// decide and the others have had `LATE_GRACE` more, or every server has
    /// answered. A server that has not answered by then keeps its entry of
    /// `unanswered` (`LockError::Unanswered`), and its future is dropped:
    /// whatever it sent stays queued on its connection, ahead of the next
    /// call there, and its reply is read and thrown away when it comes.
    pub(crate) async fn gather<Asked>(
        asked: impl IntoIterator<Item = Asked>,
        unanswered: Vec<LockError>,
        settled: impl Fn(&Tally<T>) -> bool,
    ) -> Tally<T>
    where
        Asked: Future<Output = Result<T, LockError>>,
    {
        let started = Instant::now();
        let mut tally = Tally(unanswered.into_iter().map(Err).collect());
        let mut pending: FuturesUnordered<_> = asked
            .into_iter()
            .enumerate()
            .map(|(at, asked)| async move { (at, asked.await) })
            .collect();
        let mut until = None;
        loop {
            let next = match until {
                None => pending.next().await,
                Some(until) => tokio::time::timeout_at(until, pending.next())
                    .await
                    .ok()
                    .flatten(),
            };
            let Some((at, result)) = next else {
                break;
            };
            if let Some(slot) = tally.0.get_mut(at) {
                *slot = result;
            }
            if until.is_none() && settled(&tally) {
                until = Some(Instant::now() + started.elapsed().max(LATE_GRACE));
            }
        }
        tally
    }

    /// How many servers were asked.
    pub(crate) fn of(&self) -> usize {
        self.0.len()
    }

    /// Each server's answer or failure, in the servers' order.
    pub(crate) fn results(&self) -> &[Result<T, LockError>] {
        &self.0
    }

    pub(crate) fn answers(&self) -> impl Iterator<Item = &T> {
        self.0.iter().filter_map(|result| result.as_ref().ok())
    }

    fn failures(&self) -> impl Iterator<Item = &LockError> {
        self.0.iter().filter_map(|result| result.as_ref().err())
    }

    /// How many servers have not answered (yet).
    pub(crate) fn unanswered(&self) -> usize {
        self.failures()
            .filter(|failure| matches!(failure, LockError::Unanswered { .. }))
            .count()
    }

    /// Whether the servers yet to answer can no longer change whether a
    /// majority says yes (by `yes`): it does already, or it cannot even if
    /// they all do.
    pub(crate) fn decided(&self, yes: impl Fn(&T) -> bool) -> bool {
        let yes = self.count(yes);
        self.is_majority(yes) || !self.is_majority(yes + self.unanswered())
    }

    /// How many answers `counts` says yes to.
    pub(crate) fn count(&self, counts: impl Fn(&T) -> bool) -> usize {
        self.answers().filter(|answer| counts(answer)).count()
    }

    pub(crate) fn is_majority(&self, count: usize) -> bool {
        count >= majority(self.of())
    }

    /// The first server that found someone else's data at a lock key.
    pub(crate) fn foreign(&self) -> Option<&Foreign> {
        self.failures().find_map(|failure| match failure {
            LockError::Foreign(foreign) => Some(foreign),
            _ => None,
        })
    }

    /// The answers, when a majority of the servers gave one.
    pub(crate) fn of_a_majority(self) -> Result<Vec<T>, LockError> {
        let answered = self.count(|_| true);
        if !self.is_majority(answered) {
            return Err(self.short_of_majority(answered, []));
        }
        Ok(self.0.into_iter().filter_map(Result::ok).collect())
    }

    /// Why only `able` servers could take part: a lone server's own
    /// failure; in a quorum, how many of how many, with each failure's
    /// reason and the `also` ones (servers that answered, but no).
    pub(crate) fn short_of_majority(
        &self,
        able: usize,
        also: impl IntoIterator<Item = String>,
    ) -> LockError {
        match self.0.as_slice() {
            [Err(lone)] => lone.clone(),
            _ => LockError::NoMajority(NoMajority {
                able,
                of: self.of(),
                refused_for_now: self
                    .is_majority(able + self.failures().filter(|f| f.is_refused_for_now()).count()),
                why: self
                    .failures()
                    .map(ToString::to_string)
                    .chain(also)
                    .collect(),
            }),
        }
    }

    /// Nothing but the first failure, if any server failed; a server that
    /// had not answered yet is not one.
    pub(crate) fn first_failure(self) -> Result<(), LockError> {
        self.0.into_iter().try_for_each(|result| match result {
            Err(LockError::Unanswered { .. }) => Ok(()),
            result => result.map(drop),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::keys::Part;

    fn restarted(server: &str) -> LockError {
        LockError::Restarted {
            server: server.into(),
            uptime_secs: 3,
        }
    }

    #[test]
    fn a_majority_is_more_than_half() {
        for (of, needed) in [(1, 1), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)] {
            assert_eq!(majority(of), needed, "of {of}");
        }
    }

    #[test]
    fn one_server_is_a_quorum_of_one_and_its_failure_is_the_locks() {
        let tally = Tally::<()>::new(vec![Err(restarted("a"))]);
        assert_eq!(tally.of(), 1);
        let err = tally.of_a_majority().expect_err("nobody answered");
        assert_eq!(err.to_string(), restarted("a").to_string());

        let tally = Tally::new(vec![Ok(true)]);
        assert!(tally.is_majority(tally.count(|yes| *yes)));
    }

    #[test]
    fn a_quorum_needs_more_than_half_and_says_why_the_others_did_not() {
        let tally = Tally::new(vec![Ok(1), Err(restarted("b")), Ok(3)]);
        assert_eq!(tally.of_a_majority().expect("2 of 3"), vec![1, 3]);

        let tally = Tally::new(vec![Ok(1), Err(restarted("b")), Err(restarted("c"))]);
        let LockError::NoMajority(short) = tally.short_of_majority(1, ["d said no".into()]) else {
            panic!("a quorum's failure is its own");
        };
        assert_eq!((short.able, short.of), (1, 3));
        assert_eq!(short.why.len(), 3);
        assert!(short.why[0].starts_with("b restarted"), "{:?}", short.why);
        assert_eq!(short.why[2], "d said no");
    }

    #[test]
    fn a_majority_kept_from_only_by_full_servers_is_refused_for_now() {
        let target = crate::redis_conn::Target::parse("redis://h:1", None).expect("valid");
        let full = || {
            let err = redis::make_extension_error(
                "ERR".into(),
                Some("max number of clients reached".into()),
            );
            LockError::Redis(target.error(&err))
        };
        let down = || {
            let err = redis::RedisError::from(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            ));
            LockError::Redis(target.error(&err))
        };
        assert!(full().is_refused_for_now() && !down().is_refused_for_now());
        let short = |results: Vec<Result<(), LockError>>| {
            let tally = Tally::new(results);
            let able = tally.count(|()| true);
            tally.short_of_majority(able, []).is_refused_for_now()
        };
        assert!(short(vec![Ok(()), Err(full()), Err(full())]));
        assert!(short(vec![Ok(()), Err(full()), Err(down())]));
        assert!(!short(vec![Err(full()), Err(down()), Err(down())]));
    }

    type Asked = std::pin::Pin<Box<dyn Future<Output = Result<bool, LockError>>>>;

    fn says(yes: bool) -> Asked {
        Box::pin(std::future::ready(Ok(yes)))
    }

    /// A member that stalls: its socket open, no answer ever.
    fn stalls() -> Asked {
        Box::pin(std::future::pending())
    }

    fn says_after(yes: bool, delay: Duration) -> Asked {
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(yes)
        })
    }

    fn unanswered(of: usize) -> Vec<LockError> {
        (0..of)
            .map(|at| LockError::Unanswered {
                server: format!("s{at}"),
            })
            .collect()
    }

    async fn gather(asked: Vec<Asked>) -> Tally<bool> {
        let of = asked.len();
        Tally::gather(asked, unanswered(of), |tally| tally.decided(|yes| *yes)).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_majority_decides_without_the_member_that_stalls() {
        let yes = gather(vec![says(true), stalls(), says(true)]).await;
        assert_eq!((yes.count(|y| *y), yes.unanswered()), (2, 1));
        assert_eq!(
            yes.results()[1]
                .as_ref()
                .err()
                .map(ToString::to_string)
                .as_deref(),
            Some("s1 had not answered yet")
        );
        assert!(
            yes.first_failure().is_ok(),
            "not answering yet is no failure"
        );

        let no = gather(vec![says(false), stalls(), says(false)]).await;
        assert_eq!((no.count(|y| *y), no.unanswered()), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_a_moment_behind_the_majority_is_counted_too() {
        let moment = Duration::from_millis(2);
        let tally = gather(vec![says(true), says_after(true, moment), says(true)]).await;
        assert_eq!((tally.count(|y| *y), tally.unanswered()), (3, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_split_waits_for_the_member_that_can_still_decide_it() {
        let slow = Duration::from_secs(1);
        let tally = gather(vec![says(true), says(false), says_after(true, slow)]).await;
        assert_eq!((tally.count(|y| *y), tally.unanswered()), (2, 0));
        // Of five, two yes and two no leave it to the fifth, however slow.
        let tally = gather(vec![
            says(true),
            says(false),
            says_after(true, slow),
            says(false),
            says_after(false, slow * 2),
        ])
        .await;
        assert_eq!((tally.count(|y| !*y), tally.unanswered()), (3, 0));
    }

    #[test]
    fn someone_elses_data_is_found_among_the_failures() {
        let foreign = Foreign {
            key: "k".into(),
            holds: "list".into(),
            part: Part::Lease,
        };
        let tally = Tally::<()>::new(vec![
            Err(restarted("a")),
            Err(LockError::Foreign(foreign.clone())),
        ]);
        assert_eq!(tally.foreign(), Some(&foreign));
        assert_eq!(Tally::<()>::new(vec![Err(restarted("a"))]).foreign(), None);
    }
}
