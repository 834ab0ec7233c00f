//! Getting the lock, waiting for it in line if asked to.
//!
//! A waiter takes its place in the lock's queue with its first failed
//! attempt, and the lock goes to waiters in arrival order: a release hands
//! it straight to the first one and says so on that waiter's own channel, so
//! each release wakes one process. A place lasts one ttl, like a lease, and
//! the waiter refreshes it every renewal period, so that one that died drops
//! out of line by itself. Without a message, the first waiter looks again
//! when the lease could have run out unreleased (its holder died), the
//! others when the first one's place could have. Once Redis has answered,
//! losing it while waiting is not the end of the wait: nothing is held yet,
//! so lockrun keeps trying until the wait runs out. The same goes for a Redis
//! that answers "not yet" (loading its data set, busy with a script, a
//! failover, too few replicas), from the first attempt on.

use std::ops::ControlFlow;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::Timing;
use crate::lock::{Attempt, Lock, Me, Mode, Wake, Wakes};
use crate::quorum::Quorum;
use crate::redis_conn::{ErrorKind, RedisError};
use crate::report::Report;

/// Polling period when the wake-up subscription failed or Redis does not
/// answer.
const POLL_UNSUBSCRIBED: Duration = Duration::from_millis(200);
/// A little past an expiry, so the retry finds the key or place gone.
const EXPIRY_MARGIN: Duration = Duration::from_millis(2);

/// How long a run waits for a lock that someone else holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    Up(Duration),
    Forever,
}

impl Wait {
    /// The bound on the wait, if it has one.
    pub(crate) fn limit(self) -> Option<Duration> {
        match self {
            Wait::Up(limit) => Some(limit),
            Wait::Forever => None,
        }
    }
}

/// Tries once, then, if `wait` allows, waits in line for the lock. Returns
/// `Attempt::Busy` when the wait ran out with the lock still taken, and
/// `Attempt::Superseded` when a newer `--supersede` run took this one's
/// place.
pub(crate) async fn acquire(
    lock: &mut Lock,
    timing: Timing,
    me: &Me,
    wait: Option<Wait>,
    supersede: bool,
    report: Report,
) -> Result<Attempt, RedisError> {
    let started = Instant::now();
    let give_up = give_up_at(wait, started);
    let waited_out = || give_up.is_some_and(|t| t <= Instant::now());
    let mode = if give_up.is_none_or(|t| t > started) {
        Mode::Wait {
            listening: false,
            supersede,
            refresh: timing.renew_every,
        }
    } else {
        Mode::Once
    };
    let mut failing = false;
    match lock.try_acquire(timing.ttl, me, mode).await {
        Ok(Attempt::Queued { taken, .. }) if waited_out() => return Ok(Attempt::Busy(taken)),
        Ok(Attempt::Queued { taken, .. }) => report.verbose(format_args!(
            "{} is busy; waiting, {} in line",
            lock.keys().lock,
            taken.waiting
        )),
        Ok(done) => return Ok(done),
        // Loading, busy with a script, a failover, too few replicas: Redis
        // answered "not yet", which a waiter waits through like a held lock.
        Err(err) if err.is_transient() && !waited_out() => {
            report.error(format_args!("{err}; still waiting"));
            failing = true;
        }
        Err(err) => return Err(err),
    }
    // The attempt after subscribing catches a hand-over that came before
    // the subscription, and tells Redis this run now listens.
    let wakes = match lock.subscribe_wakes().await {
        Ok(wakes) => Some(wakes),
        Err(err) => {
            report.verbose(format_args!("no wake-up messages, polling instead: {err}"));
            None
        }
    };
    Waiter {
        lock,
        timing,
        me,
        supersede,
        give_up,
        // A Redis that was not ready may not have taken the subscription
        // either: try again once it answers.
        resubscribe: wakes.is_none() && failing,
        wakes,
        failing,
        report,
    }
    .until_acquired_or_out()
    .await
}

/// Tries once on a quorum, then, if `wait` allows, again after a jittered
/// pause until the wait runs out. The queue is per server, so a quorum run
/// does not take a place in line: it polls, and is not served in arrival
/// order. Safety never depends on how soon it looks again.
pub(crate) async fn acquire_quorum(
    quorum: &mut Quorum,
    timing: Timing,
    me: &Me,
    wait: Option<Wait>,
    report: Report,
) -> Result<Attempt, RedisError> {
    let give_up = give_up_at(wait, Instant::now());
    let mut failing = false;
    loop {
        let attempt = quorum.try_acquire(timing, me).await;
        let now = Instant::now();
        let waited_out = give_up.is_some_and(|t| t <= now);
        match attempt {
            Ok(Attempt::Busy(taken)) if waited_out => return Ok(Attempt::Busy(taken)),
            Ok(Attempt::Busy(taken)) => {
                if std::mem::take(&mut failing) {
                    report.error("a majority of the Redis servers answers again; still waiting");
                } else {
                    report.verbose(format_args!(
                        "{} is busy{}; trying again",
                        quorum.keys().lock,
                        if taken.held { "" } else { " (no majority)" }
                    ));
                }
            }
            Ok(done) => return Ok(done),
            Err(err)
                if matches!(err.kind, ErrorKind::Unreachable | ErrorKind::NoMajority)
                    || err.is_transient() =>
            {
                if waited_out {
                    return Err(err);
                }
                if !std::mem::replace(&mut failing, true) {
                    report.error(format_args!("{err}; still waiting"));
                }
            }
            Err(err) => return Err(err),
        }
        let due = now + jitter(POLL_UNSUBSCRIBED.min(timing.renew_every));
        tokio::time::sleep_until(give_up.map_or(due, |t| t.max(now).min(due))).await;
    }
}

/// When a wait that began at `started` runs out; `None` waits forever.
fn give_up_at(wait: Option<Wait>, started: Instant) -> Option<Instant> {
    match wait {
        None => Some(started),
        // `config` bounds the wait; a moment past the clock's range would
        // never come, so it is the same as forever.
        Some(wait) => wait.limit().and_then(|limit| started.checked_add(limit)),
    }
}

/// A run waiting for the lock.
struct Waiter<'a> {
    lock: &'a mut Lock,
    timing: Timing,
    me: &'a Me,
    supersede: bool,
    /// When the wait runs out; `None` waits forever.
    give_up: Option<Instant>,
    /// Wake-up messages; `None` when the subscription failed or broke.
    wakes: Option<Wakes>,
    /// Whether to subscribe again once Redis answers: the subscription broke
    /// (a Redis restart, a network blip), and polling costs a call each time.
    resubscribe: bool,
    /// Whether Redis stopped answering during the wait.
    failing: bool,
    report: Report,
}

impl Waiter<'_> {
    async fn until_acquired_or_out(&mut self) -> Result<Attempt, RedisError> {
        loop {
            let mode = Mode::Wait {
                listening: self.wakes.is_some(),
                supersede: self.supersede,
                refresh: self.timing.renew_every,
            };
            let attempt = self.lock.try_acquire(self.timing.ttl, self.me, mode).await;
            let now = Instant::now();
            let waited_out = self.give_up.is_some_and(|t| t <= now);
            match self.judge(attempt, waited_out)? {
                ControlFlow::Break(done) => return Ok(done),
                ControlFlow::Continue(retry) => {
                    if self.wakes.is_none()
                        && !self.failing
                        && std::mem::take(&mut self.resubscribe)
                    {
                        if let Ok(wakes) = self.lock.subscribe_wakes().await {
                            // Look again at once: to say it listens, and for
                            // a hand-over that came before the subscription.
                            self.wakes = Some(wakes);
                            continue;
                        }
                    }
                    if let Some(done) = self.pause(retry, now).await {
                        return Ok(done);
                    }
                }
            }
        }
    }

    /// Whether an attempt ends the wait; if not, how long until a change
    /// could come without a message, when known.
    fn judge(
        &mut self,
        attempt: Result<Attempt, RedisError>,
        waited_out: bool,
    ) -> Result<ControlFlow<Attempt, Option<Duration>>, RedisError> {
        match attempt {
            Ok(Attempt::Queued { taken, .. }) if waited_out => {
                Ok(ControlFlow::Break(Attempt::Busy(taken)))
            }
            Ok(Attempt::Queued { retry, .. }) => {
                if std::mem::take(&mut self.failing) {
                    self.report.error("Redis answers again; still waiting");
                }
                Ok(ControlFlow::Continue(retry))
            }
            // Acquired, superseded, or a key that is not lockrun's, which
            // will not go away by waiting.
            Ok(done) => Ok(ControlFlow::Break(done)),
            // Redis has answered before, and nothing is held while waiting:
            // a restart, a network blip, a data set loading, a long script or
            // a failover is worth waiting through, as long as the wait lasts.
            // A wrong password or URL failed long before.
            Err(err)
                if (err.kind == ErrorKind::Unreachable || err.is_transient()) && !waited_out =>
            {
                if !std::mem::replace(&mut self.failing, true) {
                    self.report.error(format_args!("{err}; still waiting"));
                }
                Ok(ControlFlow::Continue(None))
            }
            Err(err) => Err(err),
        }
    }

    /// Sleeps until the next attempt is due: the refresh of this run's
    /// place, the moment `retry` after `now`, the end of the wait, or a
    /// wake-up message. Returns the outcome when a message settles it.
    async fn pause(&mut self, retry: Option<Duration>, now: Instant) -> Option<Attempt> {
        let refresh = if self.wakes.is_some() && !self.failing {
            now + self.timing.renew_every
        } else {
            now + jitter(POLL_UNSUBSCRIBED)
        };
        let mut look = retry.map(|retry| now + retry + EXPIRY_MARGIN);
        loop {
            let due = [look, self.give_up]
                .into_iter()
                .flatten()
                .fold(refresh, Instant::min);
            let Some(wakes) = self.wakes.as_mut() else {
                tokio::time::sleep_until(due).await;
                return None;
            };
            tokio::select! {
                wake = wakes.next() => match wake {
                    Some(Wake::Granted(fence)) => return self.handed_over(fence),
                    Some(Wake::Superseded(by)) => return Some(Attempt::Superseded { by }),
                    // First in line now: only the lease's expiry is left to
                    // watch for.
                    Some(Wake::First(left)) => {
                        look = left.map(|left| Instant::now() + left + EXPIRY_MARGIN);
                    }
                    None => {
                        // The subscription broke: look now, then poll until
                        // it can be made again.
                        self.wakes = None;
                        self.resubscribe = true;
                        return None;
                    }
                },
                () = tokio::time::sleep_until(due) => return None,
            }
        }
    }

    /// A release handed this run the lease. It is counted from this run's
    /// first request; once that is longer ago than a renewal period, the
    /// first renewal would already be late, so the next attempt takes the
    /// lease afresh instead (the script sees it is ours and renews it). So
    /// does a run whose replicas must acknowledge the lease first.
    fn handed_over(&self, fence: u64) -> Option<Attempt> {
        let grant = self.lock.handed_over(fence)?;
        (grant.sent.elapsed() < self.timing.renew_every).then_some(Attempt::Acquired(grant))
    }
}

/// A random pause between half and all of `period`, so that waiters which
/// started together do not keep retrying together.
fn jitter(period: Duration) -> Duration {
    let fraction = f64::from(getrandom::u32().unwrap_or(u32::MAX / 2)) / f64::from(u32::MAX);
    period.mul_f64(0.5 + 0.5 * fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..100 {
            let d = jitter(Duration::from_millis(200));
            assert!(d >= Duration::from_millis(100) && d <= Duration::from_millis(200));
        }
    }

    #[test]
    fn only_a_bounded_wait_has_a_limit() {
        assert_eq!(
            Wait::Up(Duration::from_secs(2)).limit(),
            Some(Duration::from_secs(2))
        );
        assert_eq!(Wait::Forever.limit(), None);
    }
}
