//! The lease keeper and the stopping schedule under tokio's paused clock,
//! against a scripted renewer: when renewals go out, what they prove, and
//! when the command is stopped.

use std::collections::VecDeque;
use std::time::Duration;

use super::*;

pub(super) const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// drift() is 32 ms, so a lease proven by a request sent at `t` lasts
/// until `t + 2968`; retry_delay() is 250 ms.
pub(super) fn timing() -> Timing {
    Timing {
        ttl: ms(3000),
        renew_every: ms(1000),
        redis_timeout: ms(200),
        kill_grace: ms(500),
    }
}

/// A stop schedule for the lock "billing", saying nothing.
fn new_stopping(timing: Timing, timeout_at: Option<BootInstant>) -> Stopping<'static> {
    Stopping::new(timing, timeout_at, "billing", no_systemd())
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

    fn renew(&mut self) -> impl Future<Output = Result<Renewal, &'static str>> {
        let now = BootInstant::now();
        self.sent
            .push((since(self.t0, now), since(self.t0, self.lease.deadline())));
        let (answer, delay) = self.script.pop_front().unwrap_or(self.then);
        async move {
            tokio::time::sleep(ms(delay)).await;
            match answer {
                Answer::Renewed => Ok(Renewal::Extended),
                Answer::Gone => Ok(Renewal::Lost),
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
    let keeper = keep_lease(&mut lock, lease, t0, timing());
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
        let keeper = keep_lease(&mut lock, &lease, t0, timing());
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
    let stopping = new_stopping(timing(), None);
    // Renewals move the deadline, and the moment to stop with it.
    for deadline in [2968, 3968, 5868] {
        let wake = stopping.next_wake(t0 + ms(deadline));
        assert_eq!(wake, Some(t0 + ms(deadline - 500)));
    }
    // A kill grace longer than what is left of the lease: the moment to
    // stop has already come.
    let long_grace = new_stopping(
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
        let stopping = new_stopping(timing(), Some(t0 + ms(timeout)));
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
        let mut stopping = new_stopping(timing(), Some(t0 + ms(100)));
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
        let mut stopping = new_stopping(timing(), None);
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
    let mut stopping = new_stopping(timing, Some(now + 3 * s));
    assert_eq!(stopping.next_wake(deadline), Some(now + 3 * s));

    // SIGTERM went out when the timeout passed: only SIGKILL is left.
    stopping.reason = Some(Stop::TimedOut);
    stopping.kill_at = Some(now + 5 * s);
    assert_eq!(stopping.next_wake(deadline), Some(now + 5 * s));

    stopping.killed = true;
    assert_eq!(stopping.next_wake(deadline), None);
}

/// No NOTIFY_SOCKET: nothing is told.
pub(super) fn no_systemd() -> &'static crate::notify::Systemd {
    Box::leak(Box::default())
}
