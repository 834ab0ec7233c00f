//! Watching a running command under a lease: renew the lease, forward
//! signals, follow terminal stops, reap the orphans it leaves, and stop the
//! command when the lease can no longer be proven or `--timeout` passes.

use std::fmt;
use std::future::Future;
use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::child::Child;
use crate::clock::{self, show, BootInstant};
use crate::lease::{Lease, Loss, Timing};
use crate::quorum::Locks;
use crate::redis_conn::RedisError;
use crate::report::Report;
use crate::signals::Signals;

/// Why lockrun stopped the command before it finished on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    Lost(Loss),
    TimedOut,
}

/// How supervision ended: the command's exit, and lockrun's reason if it
/// stopped the command.
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) status: io::Result<ExitStatus>,
    pub(crate) stop: Option<Stop>,
}

/// Everything one supervision needs, borrowed from the run that owns it.
pub(crate) struct Supervisor<'a> {
    pub(crate) child: &'a mut Child,
    pub(crate) lock: &'a mut Locks,
    pub(crate) lease: &'a Lease,
    pub(crate) signals: &'a mut Signals,
    /// SIGCHLD, made before the spawn so that not even an immediate stop is
    /// missed; orphans reparented to lockrun report their exit here too.
    pub(crate) child_changes: &'a mut tokio::signal::unix::Signal,
    pub(crate) timing: Timing,
    /// No later than the grant: the lease, and so its renewals, count from
    /// here.
    pub(crate) acquired: BootInstant,
    pub(crate) timeout_at: Option<BootInstant>,
    pub(crate) report: Report,
}

impl Supervisor<'_> {
    /// Runs until the command exits.
    pub(crate) async fn supervise(self) -> Ended {
        let Supervisor {
            child,
            lock,
            lease,
            signals,
            child_changes,
            timing,
            acquired,
            timeout_at,
            report,
        } = self;
        let keeper = keep_lease(lock, lease, acquired, timing, report);
        tokio::pin!(keeper);
        let mut keeper_running = true;
        let mut stopping = Stopping::new(timing, timeout_at);
        loop {
            stopping.enforce_deadline(child, lease);
            let wake = stopping.next_wake(lease.deadline());
            tokio::select! {
                biased;
                () = clock::sleep_until_some(wake) => stopping.on_wake(child, lease),
                loss = &mut keeper, if keeper_running => {
                    keeper_running = false;
                    // A lapse is the deadline's to handle, at the top of the loop.
                    if loss == Loss::TokenGone {
                        stopping.begin_soon(child, Stop::Lost(Loss::TokenGone));
                    }
                }
                status = child.wait() => {
                    if lease.has_lapsed() {
                        // It may have finished only after the lease ran out.
                        stopping.lapsed();
                    }
                    return Ended { status, stop: stopping.reason };
                }
                signal = signals.recv() => {
                    report.verbose(format_args!("forwarding {signal} to the command"));
                    child.signal_group(signal);
                }
                _ = child_changes.recv() => {
                    child.reap_orphans();
                    if child.has_terminal() && child.stopped_from_terminal() {
                        child.stop_along();
                        // Stopped, lockrun could not renew: a lapsed lease is
                        // the deadline's to handle, and the command stays
                        // stopped for its SIGKILL.
                        if !lease.has_lapsed() {
                            child.resume();
                        }
                    }
                }
            }
        }
    }
}

/// How far lockrun got in stopping the command.
struct Stopping {
    timing: Timing,
    timeout_at: Option<BootInstant>,
    reason: Option<Stop>,
    kill_at: Option<BootInstant>,
    killed: bool,
}

impl Stopping {
    fn new(timing: Timing, timeout_at: Option<BootInstant>) -> Self {
        Stopping {
            timing,
            timeout_at,
            reason: None,
            kill_at: None,
            killed: false,
        }
    }

    /// The lease comes first: past its deadline the lock may already be
    /// someone else's, so nothing else may happen before the command is
    /// killed.
    fn enforce_deadline(&mut self, child: &Child, lease: &Lease) {
        if lease.has_lapsed() {
            self.lapsed();
            self.kill(child);
        } else if self.kill_at.is_some_and(BootInstant::has_passed) {
            self.kill(child);
        }
    }

    /// A moment from `next_wake` came.
    fn on_wake(&mut self, child: &Child, lease: &Lease) {
        // Renewals may have moved the deadline while this slept.
        if lease.has_lapsed() {
            // lockrun could not run (paused, suspended) until past the
            // deadline: `enforce_deadline` kills and says so, rather than
            // blaming renewals that never got the chance.
        } else if (lease.deadline() - self.timing.kill_grace).has_passed() {
            // Stop while there is still time for a graceful exit.
            self.begin(child, Stop::Lost(Loss::Unconfirmed), lease.deadline());
        } else if self.timeout_at.is_some_and(BootInstant::has_passed) {
            self.begin_soon(child, Stop::TimedOut);
        }
    }

    /// SIGTERM now, SIGKILL after the kill grace.
    fn begin_soon(&mut self, child: &Child, reason: Stop) {
        self.begin(child, reason, BootInstant::now() + self.timing.kill_grace);
    }

    /// SIGTERM now, SIGKILL at `kill_at`. Only the first reason counts.
    fn begin(&mut self, child: &Child, reason: Stop, kill_at: BootInstant) {
        if self.reason.is_none() {
            self.reason = Some(reason);
            self.kill_at = Some(kill_at);
            child.signal_all(Signal::SIGTERM);
        }
    }

    /// The lease ran out. That outranks a timeout (the lock is what matters)
    /// but not an earlier, more precise reason for the same loss.
    fn lapsed(&mut self) {
        if matches!(self.reason, None | Some(Stop::TimedOut)) {
            self.reason = Some(Stop::Lost(Loss::Lapsed));
        }
    }

    fn kill(&mut self, child: &Child) {
        if !std::mem::replace(&mut self.killed, true) {
            child.signal_all(Signal::SIGKILL);
        }
    }

    /// The next moment the supervisor must act, or None when only the
    /// command's exit is left to wait for. A moment already acted on must not
    /// count again: a sleep that is always ready, polled first in a biased
    /// select, would starve the command's exit forever.
    fn next_wake(&self, deadline: BootInstant) -> Option<BootInstant> {
        if self.killed {
            return None;
        }
        let due = match self.reason {
            // SIGTERM went out: SIGKILL is next, at kill_at or when the lease lapses.
            Some(_) => [self.kill_at, None],
            None => [Some(deadline - self.timing.kill_grace), self.timeout_at],
        };
        Some(due.into_iter().flatten().fold(deadline, BootInstant::min))
    }
}

/// What `keep_lease` needs of a lock: a seam, so that the keeper's timing
/// can be tested against scripted answers on paused time.
pub(crate) trait Renew {
    type Error: fmt::Display;

    /// Extends the lease to `ttl` from now: `Ok(false)` when the key no
    /// longer holds this run's token.
    fn renew(&mut self, ttl: Duration) -> impl Future<Output = Result<bool, Self::Error>>;

    /// The name given to `--key`, for the operator's messages.
    fn name(&self) -> &str;

    /// The Redis key, for --verbose.
    fn redis_key(&self) -> &str;
}

impl Renew for Locks {
    type Error = RedisError;

    fn renew(&mut self, ttl: Duration) -> impl Future<Output = Result<bool, RedisError>> {
        Locks::renew(self, ttl)
    }

    fn name(&self) -> &str {
        &self.keys().name
    }

    fn redis_key(&self) -> &str {
        &self.keys().lock
    }
}

/// Renews the lease every `renew_every`, retrying failures while time
/// remains. Returns only when the lease is lost for good.
async fn keep_lease<L: Renew>(
    lock: &mut L,
    lease: &Lease,
    acquired: BootInstant,
    timing: Timing,
    report: Report,
) -> Loss {
    let mut next = acquired + timing.renew_every;
    let mut failing = false;
    loop {
        clock::sleep_until(next).await;
        // After a pause, a renewal must not revive a lease that lapsed.
        if lease.has_lapsed() {
            return Loss::Lapsed;
        }
        let sent = BootInstant::now();
        match lock.renew(timing.ttl).await {
            Ok(true) => {
                lease.extend_to(timing.deadline_after(sent));
                next = sent + timing.renew_every;
                if std::mem::take(&mut failing) {
                    report.error(format_args!("renewed {} again", lock.name()));
                } else {
                    report.verbose(format_args!("renewed {}", lock.redis_key()));
                }
            }
            Ok(false) => return Loss::TokenGone,
            Err(err) => {
                let left = lease
                    .deadline()
                    .remaining()
                    .saturating_sub(timing.kill_grace);
                let message = format!(
                    "cannot renew {} ({err}); retrying for {} before stopping the command",
                    lock.name(),
                    show(left)
                );
                if std::mem::replace(&mut failing, true) {
                    report.verbose(message);
                } else {
                    report.error(message);
                }
                next = BootInstant::now() + timing.retry_delay();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// drift() is 32 ms, so a lease proven by a request sent at `t` lasts
    /// until `t + 2968`; retry_delay() is 250 ms.
    fn timing() -> Timing {
        Timing {
            ttl: ms(3000),
            renew_every: ms(1000),
            redis_timeout: ms(200),
            kill_grace: ms(500),
        }
    }

    /// Milliseconds from `t0` to `t`: the timelines below count from the
    /// grant's send.
    fn since(t0: BootInstant, t: BootInstant) -> u64 {
        u64::try_from(t.since(t0).as_millis()).expect("test timelines are short")
    }

    #[derive(Clone, Copy, Debug)]
    enum Answer {
        Renewed,
        Gone,
        Fails,
    }

    /// A lock that answers renewals from a script, each after its delay in
    /// milliseconds, and notes for each renewal sent when it was sent and
    /// until when the lease was proven at that moment.
    struct Scripted<'a> {
        t0: BootInstant,
        lease: &'a Lease,
        script: VecDeque<(Answer, u64)>,
        /// The answer once the script has run out.
        then: (Answer, u64),
        sent: Vec<(u64, u64)>,
    }

    impl<'a> Scripted<'a> {
        fn new(t0: BootInstant, lease: &'a Lease, script: &[(Answer, u64)]) -> Self {
            Scripted {
                t0,
                lease,
                script: script.iter().copied().collect(),
                then: (Answer::Renewed, 0),
                sent: Vec::new(),
            }
        }

        fn then(mut self, answer: Answer, delay: u64) -> Self {
            self.then = (answer, delay);
            self
        }
    }

    impl Renew for Scripted<'_> {
        type Error = &'static str;

        fn renew(&mut self, ttl: Duration) -> impl Future<Output = Result<bool, &'static str>> {
            assert_eq!(ttl, timing().ttl, "a renewal asks for the whole ttl");
            let now = BootInstant::now();
            self.sent
                .push((since(self.t0, now), since(self.t0, self.lease.deadline())));
            let (answer, delay) = self.script.pop_front().unwrap_or(self.then);
            async move {
                tokio::time::sleep(ms(delay)).await;
                match answer {
                    Answer::Renewed => Ok(true),
                    Answer::Gone => Ok(false),
                    Answer::Fails => Err("connection refused"),
                }
            }
        }

        fn name(&self) -> &'static str {
            "billing"
        }

        fn redis_key(&self) -> &'static str {
            "lockrun:{billing}"
        }
    }

    /// What a keeper did, in milliseconds since the grant was sent.
    #[derive(Debug, PartialEq, Eq)]
    struct Kept {
        /// None when it still kept the lease at the end of the test.
        loss: Option<Loss>,
        ended: u64,
        /// Per renewal: when it was sent, and the lease's deadline then.
        sent: Vec<(u64, u64)>,
        deadline: u64,
    }

    /// Runs a keeper on a lease granted at `t0` until it returns or `until`
    /// ms after `t0`.
    async fn keep(t0: BootInstant, lease: &Lease, mut lock: Scripted<'_>, until: u64) -> Kept {
        let limit = t0 + ms(until);
        let keeper = keep_lease(&mut lock, lease, t0, timing(), Report::default());
        let loss = tokio::time::timeout(limit.remaining(), keeper).await.ok();
        Kept {
            loss,
            ended: since(t0, BootInstant::now()),
            sent: lock.sent,
            deadline: since(t0, lease.deadline()),
        }
    }

    /// A lease granted by a request sent now.
    fn grant() -> (BootInstant, Lease) {
        let t0 = BootInstant::now();
        (t0, Lease::new(timing().deadline_after(t0)))
    }

    #[tokio::test(start_paused = true)]
    async fn each_renewal_is_due_renew_every_after_the_previous_send() {
        let (t0, lease) = grant();
        // Supervision starts after the grant's reply: the schedule still
        // counts from its send.
        tokio::time::advance(ms(200)).await;
        let script = [(Answer::Renewed, 100), (Answer::Renewed, 300)];
        let lock = Scripted::new(t0, &lease, &script).then(Answer::Renewed, 50);
        let kept = keep(t0, &lease, lock, 4500).await;
        assert_eq!(
            kept,
            Kept {
                loss: None,
                ended: 4500,
                // A slow reply (300 ms) does not delay the next renewal.
                sent: vec![(1000, 2968), (2000, 3968), (3000, 4968), (4000, 5968)],
                deadline: 6968,
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_never_moves_the_deadline_back() {
        let t0 = BootInstant::now();
        // A deadline further out than any one renewal proves.
        let lease = Lease::new(t0 + ms(6000));
        let kept = keep(t0, &lease, Scripted::new(t0, &lease, &[]), 4500).await;
        // Until 4000, renewals prove less than the grant did.
        assert_eq!(
            kept.sent,
            vec![(1000, 6000), (2000, 6000), (3000, 6000), (4000, 6000)]
        );
        assert_eq!(kept.deadline, 6968);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_is_retried_without_extending_the_lease() {
        let (t0, lease) = grant();
        // Each failure takes 200 ms to come back; the retry is 250 ms later.
        let script = [(Answer::Fails, 200), (Answer::Fails, 200)];
        let kept = keep(t0, &lease, Scripted::new(t0, &lease, &script), 3500).await;
        assert_eq!(
            kept,
            Kept {
                loss: None,
                ended: 3500,
                sent: vec![(1000, 2968), (1450, 2968), (1900, 2968), (2900, 4868)],
                deadline: 5868,
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_failing_past_the_deadline_end_in_a_lapse() {
        let (t0, lease) = grant();
        let lock = Scripted::new(t0, &lease, &[]).then(Answer::Fails, 200);
        let kept = keep(t0, &lease, lock, 60_000).await;
        assert_eq!(
            kept,
            Kept {
                loss: Some(Loss::Lapsed),
                // The retry due after the deadline is not sent.
                ended: 3250,
                sent: vec![
                    (1000, 2968),
                    (1450, 2968),
                    (1900, 2968),
                    (2350, 2968),
                    (2800, 2968)
                ],
                deadline: 2968,
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_past_the_deadline_sends_no_renewal() {
        let (t0, lease) = grant();
        let mut lock = Scripted::new(t0, &lease, &[]);
        let loss = {
            let keeper = keep_lease(&mut lock, &lease, t0, timing(), Report::default());
            tokio::pin!(keeper);
            let waiting = tokio::time::timeout(ms(500), &mut keeper).await;
            assert!(waiting.is_err(), "no renewal is due yet");
            // lockrun was stopped or the machine slept: the keeper ran no
            // more until well past the deadline.
            tokio::time::advance(ms(10_000)).await;
            // Bounded, so that a keeper that renews on fails rather than hangs.
            tokio::time::timeout(ms(60_000), keeper)
                .await
                .expect("the keeper gives up")
        };
        assert_eq!(loss, Loss::Lapsed);
        assert_eq!(since(t0, BootInstant::now()), 10_500);
        assert!(lock.sent.is_empty(), "renewals sent: {:?}", lock.sent);
        assert!(lease.has_lapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_that_comes_back_after_the_deadline_revives_nothing() {
        let (t0, lease) = grant();
        let lock = Scripted::new(t0, &lease, &[(Answer::Renewed, 5000)]);
        let kept = keep(t0, &lease, lock, 60_000).await;
        assert_eq!(kept.loss, Some(Loss::Lapsed));
        assert_eq!(kept.ended, 6000);
        assert_eq!(kept.sent, vec![(1000, 2968)]);
        assert!(lease.has_lapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_gone_ends_the_keeper_at_once() {
        let (t0, lease) = grant();
        let script = [(Answer::Renewed, 0), (Answer::Gone, 100)];
        let kept = keep(t0, &lease, Scripted::new(t0, &lease, &script), 60_000).await;
        assert_eq!(
            kept,
            Kept {
                loss: Some(Loss::TokenGone),
                ended: 2100,
                sent: vec![(1000, 2968), (2000, 3968)],
                deadline: 3968,
            }
        );

        // Also while retrying: no more retries once the token is known gone.
        let (t0, lease) = grant();
        let script = [(Answer::Fails, 200), (Answer::Gone, 0)];
        let kept = keep(t0, &lease, Scripted::new(t0, &lease, &script), 60_000).await;
        assert_eq!(kept.loss, Some(Loss::TokenGone));
        assert_eq!(kept.ended, 1450);
        assert_eq!(kept.sent, vec![(1000, 2968), (1450, 2968)]);
    }

    #[test]
    fn the_command_is_asked_to_stop_kill_grace_before_the_deadline() {
        let t0 = crate::clock::at(Duration::from_secs(1000));
        let stopping = Stopping::new(timing(), None);
        // Renewals move the deadline, and the moment to stop with it.
        for deadline in [2968, 3968, 5868] {
            let wake = stopping.next_wake(t0 + ms(deadline));
            assert_eq!(wake, Some(t0 + ms(deadline - 500)));
        }
        // A kill grace longer than what is left of the lease: the moment to
        // stop has already come.
        let long_grace = Stopping::new(
            Timing {
                kill_grace: ms(5000),
                ..timing()
            },
            None,
        );
        let wake = long_grace.next_wake(t0 + ms(2968)).expect("a wake");
        assert!(wake <= t0, "{wake:?}");
    }

    #[test]
    fn a_timeout_wakes_only_if_it_comes_first() {
        let t0 = crate::clock::at(Duration::from_secs(1000));
        let deadline = t0 + ms(2968);
        for (timeout, wake) in [
            (100, 100),
            (2467, 2467),
            (2468, 2468),
            (2469, 2468),
            (9000, 2468),
        ] {
            let stopping = Stopping::new(timing(), Some(t0 + ms(timeout)));
            assert_eq!(
                stopping.next_wake(deadline),
                Some(t0 + ms(wake)),
                "{timeout}"
            );
        }
    }

    #[test]
    fn after_sigterm_the_kill_comes_at_kill_at_or_the_deadline_whichever_is_first() {
        let t0 = crate::clock::at(Duration::from_secs(1000));
        let deadline = t0 + ms(2968);
        let cases = [
            // Renewals failed: SIGTERM at deadline - kill_grace, SIGKILL at the deadline.
            (Stop::Lost(Loss::Unconfirmed), 2968, 2968),
            // Timed out early: SIGKILL a kill grace later.
            (Stop::TimedOut, 600, 600),
            // The token went just before the deadline: the deadline will not wait
            // for the kill grace.
            (Stop::Lost(Loss::TokenGone), 3300, 2968),
        ];
        for (reason, kill_at, wake) in cases {
            let mut stopping = Stopping::new(timing(), Some(t0 + ms(100)));
            stopping.reason = Some(reason);
            stopping.kill_at = Some(t0 + ms(kill_at));
            assert_eq!(
                stopping.next_wake(deadline),
                Some(t0 + ms(wake)),
                "{reason:?}"
            );
            stopping.killed = true;
            assert_eq!(stopping.next_wake(deadline), None, "{reason:?}");
        }
    }

    #[test]
    fn a_lapse_outranks_a_timeout_but_not_a_known_loss() {
        for (before, after) in [
            (None, Stop::Lost(Loss::Lapsed)),
            (Some(Stop::TimedOut), Stop::Lost(Loss::Lapsed)),
            (
                Some(Stop::Lost(Loss::TokenGone)),
                Stop::Lost(Loss::TokenGone),
            ),
            (
                Some(Stop::Lost(Loss::Unconfirmed)),
                Stop::Lost(Loss::Unconfirmed),
            ),
        ] {
            let mut stopping = Stopping::new(timing(), None);
            stopping.reason = before;
            stopping.lapsed();
            assert_eq!(stopping.reason, Some(after), "{before:?}");
        }
    }

    #[test]
    fn a_moment_already_acted_on_is_never_a_wake() {
        let s = Duration::from_secs(1);
        let now = BootInstant::now() + 100 * s;
        let timing = Timing {
            ttl: 12 * s,
            renew_every: 4 * s,
            redis_timeout: s,
            kill_grace: 2 * s,
        };
        let deadline = now + 10 * s;
        let mut stopping = Stopping::new(timing, Some(now + 3 * s));
        assert_eq!(stopping.next_wake(deadline), Some(now + 3 * s));

        // SIGTERM went out when the timeout passed: only SIGKILL is left.
        stopping.reason = Some(Stop::TimedOut);
        stopping.kill_at = Some(now + 5 * s);
        assert_eq!(stopping.next_wake(deadline), Some(now + 5 * s));

        stopping.killed = true;
        assert_eq!(stopping.next_wake(deadline), None);
    }
}
