//! Getting the lock, waiting for it in line if asked to: one loop, for one
//! server and for a quorum, with one give-up rule. How the line, hand-overs,
//! wake-ups and the pauses between attempts work is in docs/design.md ("The
//! wait queue and wake-ups", "The quorum").

use std::ops::ControlFlow;
use std::time::Duration;

use tokio::time::Instant;

use crate::lock::{
    Attempt, Contended, LockError, Mode, NotGivenBack, Requester, Subscription, Wake, Wakes,
};
use crate::notify::Systemd;
use crate::redis_conn::ErrorKind;
use crate::report::{self, Message};

/// How long the first connection to the lock's servers may take, unless a
/// bounded wait has less left.
const FIRST_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Polling period when the wake-up subscription failed or Redis does not
/// answer.
const POLL_UNSUBSCRIBED: Duration = Duration::from_millis(200);
/// The longest pause between attempts while Redis refuses or fails: the
/// pause doubles from the polling period up to this, so that runs turned
/// away by a server at its client limit do not all come back at once.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// A little past an expiry, so the retry finds the key or place gone.
const EXPIRY_MARGIN: Duration = Duration::from_millis(2);

/// How long a run waits for a lock that someone else holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    Up(Duration),
    Forever,
}

impl Wait {
    /// Whether a run with this wait may wait at all: `--wait 0` only tries
    /// once.
    pub(crate) fn may_wait(self) -> bool {
        self != Wait::Up(Duration::ZERO)
    }

    /// The bound on the wait, if it has one.
    pub(crate) fn limit(self) -> Option<Duration> {
        match self {
            Wait::Up(limit) => Some(limit),
            Wait::Forever => None,
        }
    }
}

/// Connects to the lock's servers (allowing `FIRST_CONNECT_TIMEOUT`, or
/// what is left of a bounded wait if that is less), tries once, then, if `wait`
/// allows, waits for the lock. Returns `Attempt::Busy` when the wait ran out
/// with the lock still taken, and `Attempt::Superseded` when a newer
/// `--supersede` run took this one's place.
///
/// A run that may wait rides through servers it cannot reach yet (down,
/// restarting, a Sentinel primary failing over, a quorum short of a
/// majority) as it rides through a busy lock, from the first connection on:
/// `--wait` bounds the whole, connecting included. One that may not, or a
/// failure that waiting cannot mend (a refused password or command, a TLS
/// certificate, someone else's data at a key), ends at once.
pub(crate) async fn acquire(
    lock: &mut impl Contended,
    requester: &Requester,
    wait: Option<Wait>,
    supersede: bool,
    systemd: &Systemd,
) -> Result<Attempt, LockError> {
    let started = Instant::now();
    let timing = lock.timing();
    let mut waiter = Waiter {
        lock,
        requester,
        supersede,
        started,
        give_up: give_up_at(wait, started),
        wakes: None,
        resubscribe: true,
        failing: None,
        failures: 0,
        place: None,
        systemd,
        refused_wakes: None,
    };
    // Only the first connection gets longer than a Redis call may take:
    // nothing is held yet, and a slow handshake is no reason to give up.
    waiter
        .connect(timing.redis_timeout.max(FIRST_CONNECT_TIMEOUT))
        .await?;
    waiter.until_acquired_or_out().await
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
struct Waiter<'a, L> {
    lock: &'a mut L,
    requester: &'a Requester,
    supersede: bool,
    started: Instant,
    /// When the wait runs out; `None` waits forever.
    give_up: Option<Instant>,
    /// Wake-up messages; `None` when there are none, or the subscription
    /// failed or broke.
    wakes: Option<Wakes>,
    /// Whether to subscribe before the next attempt (`subscribe_if_due`).
    resubscribe: bool,
    /// Why the servers failed, while they fail during the wait: the reason
    /// given if the wait runs out before they answer again.
    failing: Option<LockError>,
    /// Attempts in a row that Redis failed or refused, for the backoff.
    failures: u32,
    /// This run's place in line, as far as it knows: the last when it
    /// joined, no later than the length of the line since, first once told
    /// so.
    place: Option<u64>,
    /// Told that this run stands by, and where.
    systemd: &'a Systemd,
    /// The ACL's refusal of the wake-up subscription, until said.
    refused_wakes: Option<String>,
}

impl<L: Contended> Waiter<'_, L> {
    /// The first connection, within `within` or what is left of a bounded
    /// wait. A failure that waiting may see pass is the wait's first
    /// failure, said once, when the run may wait; anything else ends it.
    async fn connect(&mut self, within: Duration) -> Result<(), LockError> {
        let within = match self.give_up {
            Some(at) if at > self.started => within.min(at - Instant::now()),
            _ => within,
        };
        if let Err(err) = self.lock.connect(within).await {
            self.failed(err, self.give_up.is_some_and(|at| at <= Instant::now()))?;
            // Not subscribed yet: no message can end this pause early.
            let _ = self.pause(None, Instant::now()).await;
        }
        Ok(())
    }

    async fn until_acquired_or_out(&mut self) -> Result<Attempt, LockError> {
        let mut first = true;
        loop {
            if let Some(failure) = &self.failing {
                // Nothing answered since the last look: the wait, once run
                // out, ends on the last reason rather than on one more try
                // that could outlast it; before that, a connection is asked
                // for within what is left of it.
                let now = Instant::now();
                if self.give_up.is_some_and(|at| at <= now) {
                    return Err(failure.clone());
                }
                let left = self
                    .give_up
                    .map_or(self.lock.timing().redis_timeout, |at| at - now);
                if let Err(err) = self
                    .lock
                    .connect(left.min(self.lock.timing().redis_timeout))
                    .await
                {
                    self.failed(err, false)?;
                    if let Some(done) = self.pause(None, Instant::now()).await {
                        return Ok(done);
                    }
                    continue;
                }
            }
            self.subscribe_if_due().await;
            let result = self.lock.try_acquire(self.requester, self.mode()).await;
            self.not_given_back(&result.not_given_back);
            let attempt = result.outcome;
            let now = Instant::now();
            let waited_out = self.give_up.is_some_and(|t| t <= now);
            let retry = match self.judge(attempt, waited_out, std::mem::take(&mut first))? {
                ControlFlow::Break(done) => return Ok(done),
                ControlFlow::Continue(retry) => retry,
            };
            if let Some(done) = self.pause(retry, now).await {
                return Ok(done);
            }
        }
    }

    /// Subscribes to this run's wake-up messages before an attempt that
    /// takes or keeps a place in line: at first, and after the subscription
    /// broke (a Redis restart, a network blip) once Redis answers again,
    /// since polling costs a call each time. Subscribed before the attempt,
    /// the run hears any hand-over that follows it, and the attempt can tell
    /// Redis that it listens.
    async fn subscribe_if_due(&mut self) {
        if !self.resubscribe || self.failing.is_some() || self.mode() == Mode::Once {
            return;
        }
        self.resubscribe = false;
        match self.lock.subscribe_wakes().await {
            Subscription::Wakes(wakes) => self.wakes = Some(wakes),
            Subscription::Failed(LockError::Redis(err)) if err.kind == ErrorKind::NoPerm => {
                self.refused_wakes = Some(err.to_string());
            }
            // Refused a connection for now (its client limit, say):
            // subscribe again once Redis lets this run in, since it may wait
            // long after that.
            Subscription::Failed(err) if err.is_refused_for_now() => self.resubscribe = true,
            Subscription::Failed(err) => report::say(Message::Polling {
                why: &err.to_string(),
            }),
            Subscription::NoMessages => {}
        }
    }

    /// Says, with `--verbose`, each server that could not be given back what
    /// the last attempt may have taken there: other runs may wait for it
    /// until it runs out.
    fn not_given_back(&self, servers: &[NotGivenBack]) {
        for NotGivenBack { server, cause } in servers {
            report::say(Message::GiveBackFailed {
                server,
                cause: cause.to_string(),
                expires_within: self.lock.timing().ttl,
            });
        }
    }

    /// Says, once and without `--verbose`, that the ACL refused this run
    /// its wake-up messages, once it has to wait in line: the line names
    /// the rule to add. Polling meanwhile, a waiting run learns of a release
    /// only at its next look, so hand-overs slow down until an operator adds
    /// the rule.
    fn say_refused_wakes(&mut self) {
        let Some(why) = self.refused_wakes.take() else {
            return;
        };
        report::say(Message::PollingRefused { why: &why });
    }

    /// A wait that is over before it began only tries once; any other
    /// takes (or keeps) a place in line.
    fn mode(&self) -> Mode {
        if self.give_up.is_some_and(|t| t <= self.started) {
            return Mode::Once;
        }
        Mode::Wait {
            listening: self.wakes.is_some(),
            supersede: self.supersede,
            refresh: self.lock.timing().renew_every,
        }
    }

    /// Whether an attempt ends the wait; if not, how long until a change
    /// could come without a message, when known. The one give-up rule: a
    /// lock still taken, or a failure that waiting may see pass, ends the
    /// wait only once it has run out.
    fn judge(
        &mut self,
        attempt: Result<Attempt, LockError>,
        waited_out: bool,
        first: bool,
    ) -> Result<ControlFlow<Attempt, Option<Duration>>, LockError> {
        match attempt {
            Ok(Attempt::Busy(found) | Attempt::Queued { found, .. }) if waited_out => {
                Ok(ControlFlow::Break(Attempt::Busy(found)))
            }
            Ok(Attempt::Queued { found, retry }) => {
                self.answers_again();
                let place = self.place.map_or(found.waiting, |p| p.min(found.waiting));
                self.place = Some(place);
                self.systemd.waiting(self.lock.name(), &found, self.place);
                self.say_refused_wakes();
                if first {
                    report::say(Message::Waiting {
                        lock: self.lock.redis_key(),
                        waiting: found.waiting,
                        place: Some(found.waiting),
                        held: found.held,
                    });
                }
                Ok(ControlFlow::Continue(retry))
            }
            Ok(Attempt::Busy(found)) => {
                self.systemd.waiting(self.lock.name(), &found, None);
                if !self.answers_again() {
                    report::say(Message::Waiting {
                        lock: self.lock.redis_key(),
                        waiting: found.waiting,
                        place: None,
                        held: found.held,
                    });
                }
                Ok(ControlFlow::Continue(None))
            }
            // Acquired, or superseded.
            Ok(done) => Ok(ControlFlow::Break(done)),
            // Nothing is held while waiting: a restart, a network blip, a
            // data set loading, a long script, a failover or a quorum short
            // of a majority is worth waiting through, as long as the wait
            // lasts. A wrong password or URL failed long before.
            Err(err) => self
                .failed(err, waited_out)
                .map(|()| ControlFlow::Continue(None)),
        }
    }

    /// A failure of the servers: the end of the run, unless it may wait and
    /// the failure may pass (a server that went away or is not ready yet, a
    /// quorum short of a majority), in which case the first one in a row is
    /// said once, and the wait goes on. A wrong password or URL, a TLS
    /// certificate or a refused command end it at once.
    fn failed(&mut self, err: LockError, waited_out: bool) -> Result<(), LockError> {
        if !err.is_retryable() || waited_out || !self.may_wait() {
            return Err(err);
        }
        self.failures = self.failures.saturating_add(1);
        if self.failing.is_none() {
            report::say(Message::RedisFailing {
                error: err.to_string(),
            });
        }
        self.failing = Some(err);
        Ok(())
    }

    /// Says so when the lock's servers answer again after failing; returns
    /// whether they had been failing.
    fn answers_again(&mut self) -> bool {
        self.failures = 0;
        let was_failing = self.failing.take().is_some();
        if was_failing {
            report::say(Message::RedisBack {
                servers: self.lock.servers(),
            });
        }
        was_failing
    }

    /// Sleeps until the next attempt is due: the refresh of this run's
    /// place, the moment `retry` after `now`, the end of the wait, or a
    /// wake-up message. Returns the outcome when a message settles it.
    async fn pause(&mut self, retry: Option<Duration>, now: Instant) -> Option<Attempt> {
        let refresh = if self.wakes.is_some() && self.failing.is_none() {
            now + self.lock.timing().renew_every
        } else {
            now + jitter(self.backoff())
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
                    Some(Wake::Granted { fence, slot }) => {
                        // `None` (not usable as it is): the attempt that
                        // follows confirms the lease, which is ours already.
                        return self
                            .lock
                            .handed_over(fence, slot)
                            .map(Attempt::Acquired);
                    }
                    Some(Wake::Superseded(by)) => return Some(Attempt::Superseded { by }),
                    // The attempt just made said it listens: look again at
                    // once to say it does not, then poll. An ACL refusal is
                    // said after that attempt (`judge`): said before it, a
                    // release in between would still find this run listening
                    // and, hearing nobody on its channel, take it for dead.
                    Some(Wake::Refused(refused)) => {
                        self.wakes = None;
                        if refused.by_acl {
                            self.refused_wakes = Some(refused.why);
                        } else {
                            report::say(Message::Polling { why: &refused.why });
                        }
                        return None;
                    }
                    // First in line now: only the lease's expiry is left to
                    // watch for.
                    Some(Wake::First(left)) => {
                        self.place = Some(1);
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
}

impl<L: Contended> Waiter<'_, L> {
    /// Whether this run may wait at all: `--wait 0` and no `--wait` try
    /// once.
    fn may_wait(&self) -> bool {
        self.give_up.is_none_or(|at| at > self.started)
    }

    /// The polling period, doubled for each failure in a row after the
    /// first, up to `MAX_BACKOFF`.
    fn backoff(&self) -> Duration {
        let period = POLL_UNSUBSCRIBED.min(self.lock.timing().renew_every);
        let doublings = self.failures.saturating_sub(1).min(8);
        period
            .saturating_mul(1 << doublings)
            .min(MAX_BACKOFF.max(period))
    }
}

/// A random pause between half and all of `period`, so that waiters which
/// started together do not keep retrying together.
fn jitter(period: Duration) -> Duration {
    let fraction = f64::from(getrandom::u32().unwrap_or(u32::MAX / 2)) / f64::from(u32::MAX);
    period.mul_f64(0.5 + 0.5 * fraction)
}

#[cfg(test)]
mod tests;
