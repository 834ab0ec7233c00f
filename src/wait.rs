//! Getting the lock, waiting for it if asked to.
//!
//! A waiter subscribes to the lock's release channel, so it retries the
//! moment the holder lets go instead of polling. Polling stays as the fallback,
//! with jitter so waiters spread out, and never sleeps past the holder's
//! remaining lease: a holder that died publishes nothing, and its lease
//! running out must be noticed at once. Once Redis has answered, losing it
//! while waiting is not the end of the wait: nothing is held yet, so lockrun
//! keeps trying until the wait runs out. The same goes for a Redis that
//! answers "not yet" (loading its data set, busy with a script), from the
//! first attempt on.

use std::ops::ControlFlow;
use std::time::Duration;

use tokio::time::Instant;

use crate::lock::{Attempt, Lock, Me, Releases};
use crate::redis_conn::{ErrorKind, RedisError};
use crate::report::Report;

/// Polling period while subscribed (only a safety net for lost messages).
const POLL_SUBSCRIBED: Duration = Duration::from_secs(1);
/// Polling period when the subscription failed.
const POLL_UNSUBSCRIBED: Duration = Duration::from_millis(200);
/// A little past the holder's expiry, so the retry finds the key gone.
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

/// Tries once, then, if `wait` allows, waits for the lock. Returns
/// `Attempt::Busy` when the wait ran out with the lock still held.
pub(crate) async fn acquire(
    lock: &mut Lock,
    ttl: Duration,
    me: &Me,
    wait: Option<Wait>,
    report: Report,
) -> Result<Attempt, RedisError> {
    let give_up = match wait {
        None => Some(Instant::now()),
        // `config` bounds the wait; a moment past the clock's range would
        // never come, so it is the same as forever.
        Some(wait) => wait
            .limit()
            .and_then(|limit| Instant::now().checked_add(limit)),
    };
    let waited_out = || give_up.is_some_and(|t| t <= Instant::now());
    let mut failing = false;
    match lock.try_acquire(ttl, me).await {
        Ok(first @ (Attempt::Acquired(_) | Attempt::Foreign(_))) => return Ok(first),
        Ok(busy) if waited_out() => return Ok(busy),
        Ok(_) => report.verbose(format_args!("{} is busy; waiting", lock.keys().lock)),
        // Loading, busy with a script, a failover, too few replicas: Redis
        // answered "not yet", which a waiter waits through like a held lock.
        Err(err) if err.is_transient() && !waited_out() => {
            report.error(format_args!("{err}; still waiting"));
            failing = true;
        }
        Err(err) => return Err(err),
    }
    // Subscribe before the next attempt, so a release between that attempt
    // and the wait cannot be missed.
    let releases = match lock.subscribe_releases().await {
        Ok(releases) => Some(releases),
        Err(err) => {
            report.verbose(format_args!(
                "no release notifications, polling instead: {err}"
            ));
            None
        }
    };
    let mut waiter = Waiter {
        lock,
        ttl,
        me,
        give_up,
        releases,
        failing,
        report,
    };
    waiter.until_acquired_or_out().await
}

/// A run waiting for the lock.
struct Waiter<'a> {
    lock: &'a mut Lock,
    ttl: Duration,
    me: &'a Me,
    /// When the wait runs out; `None` waits forever.
    give_up: Option<Instant>,
    /// Release announcements; `None` when the subscription failed or broke.
    releases: Option<Releases>,
    /// Whether Redis stopped answering during the wait.
    failing: bool,
    report: Report,
}

impl Waiter<'_> {
    async fn until_acquired_or_out(&mut self) -> Result<Attempt, RedisError> {
        loop {
            let attempt = self.lock.try_acquire(self.ttl, self.me).await;
            let now = Instant::now();
            let waited_out = self.give_up.is_some_and(|t| t <= now);
            match self.judge(attempt, waited_out)? {
                ControlFlow::Break(done) => return Ok(done),
                ControlFlow::Continue(left) => self.pause(left, now).await,
            }
        }
    }

    /// Whether an attempt ends the wait; if not, the holder's lease time
    /// left, when known.
    fn judge(
        &mut self,
        attempt: Result<Attempt, RedisError>,
        waited_out: bool,
    ) -> Result<ControlFlow<Attempt, Option<Duration>>, RedisError> {
        match attempt {
            // A key that is not lockrun's will not go away by waiting.
            Ok(done @ (Attempt::Acquired(_) | Attempt::Foreign(_))) => Ok(ControlFlow::Break(done)),
            Ok(busy @ Attempt::Busy { .. }) if waited_out => Ok(ControlFlow::Break(busy)),
            Ok(Attempt::Busy { left, .. }) => {
                if std::mem::take(&mut self.failing) {
                    self.report.error("Redis answers again; still waiting");
                }
                Ok(ControlFlow::Continue(left))
            }
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

    /// Sleeps until the next attempt is due: a release announcement, the
    /// holder's expiry, the end of the wait, or the polling period.
    async fn pause(&mut self, holder_left: Option<Duration>, now: Instant) {
        let period = if self.releases.is_some() && !self.failing {
            POLL_SUBSCRIBED
        } else {
            POLL_UNSUBSCRIBED
        };
        let mut pause = jitter(period);
        if let Some(left) = holder_left {
            pause = pause.min(left + EXPIRY_MARGIN);
        }
        if let Some(give_up) = self.give_up {
            pause = pause.min(give_up - now);
        }
        let Some(releases) = self.releases.as_mut() else {
            return tokio::time::sleep(pause).await;
        };
        tokio::select! {
            alive = releases.next() => {
                if !alive {
                    // The subscription connection broke: fall back to polling.
                    self.releases = None;
                }
            }
            () = tokio::time::sleep(pause) => {}
        }
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
