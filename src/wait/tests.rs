//! The wait loop under tokio's paused clock, against a scripted lock: when
//! it looks again, when it gives up, and when a handed-over lease is used.

use std::collections::VecDeque;

use futures_util::stream::{self, StreamExt};

use super::*;
use crate::clock::BootInstant;
use crate::lease::Timing;
use crate::lock::{AttemptResult, Grant, HoldersAndWaiters, LockError, SubscriptionRefused};

const S: Duration = Duration::from_secs(1);

fn timing() -> Timing {
    Timing {
        ttl: 30 * S,
        renew_every: 10 * S,
        redis_timeout: 2 * S,
        kill_grace: 5 * S,
    }
}

/// What the scripted lock answers to one attempt.
#[derive(Clone, Copy)]
enum Says {
    Queued(Option<Duration>),
    Busy,
    Acquired,
    ShortOfMajority,
    Foreign,
}

use Says::{Acquired, Busy, Queued, ShortOfMajority};

impl Says {
    fn attempt(self) -> Result<Attempt, LockError> {
        match self {
            Queued(retry) => Ok(Attempt::Queued {
                found: HoldersAndWaiters::unknown(),
                retry,
            }),
            Busy => Ok(Attempt::Busy(HoldersAndWaiters::unknown())),
            Acquired => Ok(Attempt::Acquired(Grant {
                fence: 7,
                sent: BootInstant::now(),
                slot: None,
            })),
            ShortOfMajority => Err(LockError::Restarted {
                server: "redis://a".into(),
                uptime_secs: 1,
            }),
            Says::Foreign => Err(LockError::Foreign(crate::lock::Foreign {
                key: "lockrun:{job}".into(),
                holds: "list".into(),
                part: crate::lock::Part::Lease,
            })),
        }
    }
}

/// A lock that answers from a script (and, once the script runs out, with
/// its last line again), and notes when each attempt came and how.
struct Scripted {
    answers: VecDeque<Says>,
    last: Says,
    wakes: Option<Wakes>,
    /// Whether a handed-over lease can be used as it is (what
    /// `Server::handed_over` decides, tested beside it).
    handed_as_it_is: bool,
    start: Instant,
    tries: Vec<(Duration, Mode)>,
    /// How many attempts came before each subscription.
    subscribed_after: Vec<usize>,
    /// Connections that fail before one succeeds.
    unreachable_for: usize,
    /// When each connection was asked for, and within how long.
    connects: Vec<(Duration, Duration)>,
}

impl Scripted {
    fn new(answers: &[Says]) -> Self {
        Scripted {
            answers: answers.iter().copied().collect(),
            last: *answers.last().expect("at least one answer"),
            wakes: None,
            handed_as_it_is: true,
            start: Instant::now(),
            tries: Vec::new(),
            subscribed_after: Vec::new(),
            unreachable_for: 0,
            connects: Vec::new(),
        }
    }

    /// Connections fail `times` times (the servers short of a majority)
    /// before one succeeds.
    fn unreachable_for(mut self, times: usize) -> Self {
        self.unreachable_for = times;
        self
    }

    /// Wake-up messages, each after its delay from the subscription.
    fn with_wakes(mut self, messages: &[(Duration, &'static str)]) -> Self {
        let messages = messages.to_vec();
        let delayed = stream::iter(messages).then(|(delay, text)| async move {
            tokio::time::sleep(delay).await;
            text.to_owned()
        });
        self.wakes = Some(Wakes::new(delayed.chain(stream::pending()).map(Ok)));
        self
    }

    fn times(&self) -> Vec<Duration> {
        self.tries.iter().map(|(at, _)| *at).collect()
    }
}

impl Contended for Scripted {
    fn timing(&self) -> Timing {
        timing()
    }

    async fn try_acquire(&mut self, _: &Requester, mode: Mode) -> AttemptResult {
        self.tries.push((self.start.elapsed(), mode));
        AttemptResult {
            outcome: self.answers.pop_front().unwrap_or(self.last).attempt(),
            not_given_back: Vec::new(),
        }
    }

    async fn subscribe_wakes(&mut self) -> Subscription {
        self.subscribed_after.push(self.tries.len());
        self.wakes
            .take()
            .map_or(Subscription::NoMessages, Subscription::Wakes)
    }

    fn handed_over(&mut self, fence: u64, _: Option<u32>) -> Option<Grant> {
        self.handed_as_it_is.then(|| Grant {
            fence,
            sent: BootInstant::now(),
            slot: None,
        })
    }

    fn redis_key(&self) -> &'static str {
        "lockrun:{job}"
    }

    fn name(&self) -> &'static str {
        "job"
    }

    fn servers(&self) -> &'static str {
        "Redis"
    }

    async fn connect(&mut self, within: Duration) -> Result<(), LockError> {
        self.connects.push((self.start.elapsed(), within));
        if self.unreachable_for == 0 {
            return Ok(());
        }
        self.unreachable_for -= 1;
        Err(LockError::NoMajority(crate::lock::NoMajority {
            able: 0,
            of: 1,
            why: vec![format!("down {}", self.unreachable_for)],
            refused_for_now: false,
        }))
    }
}

async fn wait_on(lock: &mut Scripted, wait: Option<Wait>) -> Result<Attempt, LockError> {
    let requester = Requester::new(&["job".into()]);
    let systemd = crate::notify::Systemd::default();
    acquire(lock, &requester, wait, false, &systemd).await
}

#[tokio::test(start_paused = true)]
async fn without_wait_one_attempt_that_never_queues() {
    let mut lock = Scripted::new(&[Busy]);
    let found = wait_on(&mut lock, None).await.expect("an answer");
    assert!(matches!(found, Attempt::Busy(_)), "{found:?}");
    assert_eq!(lock.tries.len(), 1);
    assert_eq!(lock.tries[0].1, Mode::Once);
    assert!(lock.subscribed_after.is_empty(), "never subscribes");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_subscribes_before_its_first_attempt_and_says_it_listens() {
    let mut lock = Scripted::new(&[Queued(None)]).with_wakes(&[(S, "granted 42")]);
    let found = wait_on(&mut lock, Some(Wait::Forever))
        .await
        .expect("handed over");
    assert!(matches!(found, Attempt::Acquired(_)), "{found:?}");
    assert_eq!(lock.subscribed_after, [0]);
    assert!(matches!(
        lock.tries[..],
        [(
            _,
            Mode::Wait {
                listening: true,
                ..
            }
        )]
    ));
}

#[tokio::test(start_paused = true)]
async fn a_wait_ends_busy_when_it_runs_out_and_not_before() {
    let mut lock = Scripted::new(&[Queued(None)]);
    let started = Instant::now();
    let found = wait_on(&mut lock, Some(Wait::Up(5 * S)))
        .await
        .expect("an answer");
    assert!(matches!(found, Attempt::Busy(_)), "{found:?}");
    assert_eq!(started.elapsed(), 5 * S, "gave up at its limit");
    assert!(lock.tries.iter().all(|(_, mode)| *mode != Mode::Once));
}

#[tokio::test(start_paused = true)]
async fn failures_that_may_pass_are_waited_through_until_the_wait_runs_out() {
    let mut lock = Scripted::new(&[ShortOfMajority, ShortOfMajority, Acquired]);
    let found = wait_on(&mut lock, Some(Wait::Up(60 * S)))
        .await
        .expect("acquired");
    assert!(matches!(found, Attempt::Acquired(_)), "{found:?}");
    assert_eq!(lock.tries.len(), 3);

    let mut lock = Scripted::new(&[ShortOfMajority]);
    let started = Instant::now();
    let err = wait_on(&mut lock, Some(Wait::Up(2 * S)))
        .await
        .expect_err("ran out");
    assert!(err.is_retryable(), "{err}");
    assert_eq!(started.elapsed(), 2 * S);
}

#[tokio::test(start_paused = true)]
async fn failures_in_a_row_double_the_pause_up_to_a_second() {
    let mut answers = [ShortOfMajority; 7].to_vec();
    answers.push(Acquired);
    let mut lock = Scripted::new(&answers);
    wait_on(&mut lock, Some(Wait::Forever))
        .await
        .expect("acquired");
    let ms = Duration::from_millis;
    let gaps: Vec<Duration> = lock
        .times()
        .windows(2)
        .map(|pair| pair[1].saturating_sub(pair[0]))
        .collect();
    let most = [200, 400, 800, 1000, 1000, 1000, 1000].map(ms);
    assert_eq!(gaps.len(), most.len());
    for (gap, most) in gaps.iter().zip(most) {
        assert!(*gap >= most / 2 && *gap <= most, "{gaps:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_failure_that_cannot_pass_ends_the_wait_at_once() {
    let mut lock = Scripted::new(&[Says::Foreign]);
    let err = wait_on(&mut lock, Some(Wait::Forever))
        .await
        .expect_err("foreign");
    assert!(!err.is_retryable());
    assert_eq!(lock.tries.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn without_messages_the_waiter_polls_between_half_and_all_of_200ms() {
    let mut lock = Scripted::new(&[Busy, Busy, Busy, Busy, Acquired]);
    let found = wait_on(&mut lock, Some(Wait::Forever))
        .await
        .expect("acquired");
    assert!(matches!(found, Attempt::Acquired(_)), "{found:?}");
    for gap in lock
        .times()
        .windows(2)
        .map(|pair| pair[1].saturating_sub(pair[0]))
    {
        assert!(
            gap >= Duration::from_millis(100) && gap <= Duration::from_millis(200),
            "{gap:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_listening_waiter_looks_again_when_the_lease_could_have_run_out() {
    let mut lock = Scripted::new(&[Queued(Some(S)), Acquired]).with_wakes(&[]);
    let found = wait_on(&mut lock, Some(Wait::Forever))
        .await
        .expect("acquired");
    assert!(matches!(found, Attempt::Acquired(_)), "{found:?}");
    // Subscribed before its first attempt, which says it listens, it looks
    // again just past the lease's expiry, not at its 10 s refresh.
    assert_eq!(lock.times(), [Duration::ZERO, S + EXPIRY_MARGIN]);
    assert!(matches!(
        lock.tries[0].1,
        Mode::Wait {
            listening: true,
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_listening_waiter_refreshes_its_place_every_renewal_period() {
    let mut lock = Scripted::new(&[Queued(None), Queued(None), Acquired]).with_wakes(&[]);
    wait_on(&mut lock, Some(Wait::Forever))
        .await
        .expect("acquired");
    assert_eq!(lock.times(), [Duration::ZERO, 10 * S, 20 * S]);
}

#[tokio::test(start_paused = true)]
async fn a_lease_handed_over_that_is_usable_as_it_is_is_used_at_once() {
    let mut lock = Scripted::new(&[Queued(None)]).with_wakes(&[(3 * S, "granted 42")]);
    let started = Instant::now();
    let found = wait_on(&mut lock, Some(Wait::Forever))
        .await
        .expect("handed over");
    let Attempt::Acquired(grant) = found else {
        panic!("not acquired: {found:?}");
    };
    assert_eq!(grant.fence, 42);
    assert_eq!(
        started.elapsed(),
        3 * S,
        "no attempt between message and start"
    );
    assert_eq!(lock.tries.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_lease_handed_over_that_is_not_usable_as_it_is_is_confirmed_at_once() {
    let mut lock = Scripted::new(&[Queued(None), Acquired]).with_wakes(&[(S, "granted 42")]);
    lock.handed_as_it_is = false;
    let found = wait_on(&mut lock, Some(Wait::Forever))
        .await
        .expect("acquired");
    let Attempt::Acquired(grant) = found else {
        panic!("not acquired: {found:?}");
    };
    assert_eq!(
        grant.fence, 7,
        "the next attempt's grant, not the message's"
    );
    assert_eq!(lock.times(), [Duration::ZERO, S]);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_whose_subscription_was_refused_says_so_at_once_then_polls() {
    let mut lock = Scripted::new(&[Queued(None), Queued(None), Queued(None), Acquired]);
    let refused = stream::iter([Err(SubscriptionRefused {
        why: "NOPERM no permissions to access a channel".to_owned(),
        by_acl: true,
    })]);
    lock.wakes = Some(Wakes::new(refused.chain(stream::pending())));
    wait_on(&mut lock, Some(Wait::Forever))
        .await
        .expect("acquired");
    let listening: Vec<bool> = lock
        .tries
        .iter()
        .map(|(_, mode)| {
            matches!(
                mode,
                Mode::Wait {
                    listening: true,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(listening, [true, false, false, false]);
    assert_eq!(lock.subscribed_after, [0], "subscribes once");
    let times = lock.times();
    assert_eq!(
        times[1],
        Duration::ZERO,
        "says at once that it does not listen"
    );
    assert!(
        times[2] <= Duration::from_millis(200),
        "then polls: {times:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_superseded_waiter_stops_waiting_when_told() {
    let mut lock = Scripted::new(&[Queued(None)]).with_wakes(&[(2 * S, "superseded ci-7 pid 9")]);
    let found = wait_on(&mut lock, Some(Wait::Forever))
        .await
        .expect("an answer");
    assert!(
        matches!(&found, Attempt::Superseded { by } if by == "ci-7 pid 9"),
        "{found:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn without_wait_servers_out_of_reach_end_the_run_at_once() {
    for wait in [None, Some(Wait::Up(Duration::ZERO))] {
        let mut lock = Scripted::new(&[Acquired]).unreachable_for(1);
        let err = wait_on(&mut lock, wait).await.expect_err("unreachable");
        assert!(err.is_retryable(), "{err}");
        assert!(lock.tries.is_empty(), "{wait:?}: tried {:?}", lock.tries);
        assert_eq!(lock.connects.len(), 1, "{wait:?}");
        assert_eq!(
            lock.connects[0].1,
            5 * S,
            "{wait:?}: the first connection's own limit"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiter_rides_through_servers_out_of_reach_from_the_first_connection() {
    let mut lock = Scripted::new(&[Acquired]).unreachable_for(4);
    let found = wait_on(&mut lock, Some(Wait::Up(60 * S)))
        .await
        .expect("acquired");
    assert!(matches!(found, Attempt::Acquired(_)), "{found:?}");
    assert_eq!(lock.connects.len(), 5);
    assert_eq!(lock.tries.len(), 1, "tried once connected");
    // The pause doubles from 100-200 ms, jittered, as for any failure.
    let ms = Duration::from_millis;
    let gaps: Vec<Duration> = lock
        .connects
        .windows(2)
        .map(|pair| pair[1].0.saturating_sub(pair[0].0))
        .collect();
    for (gap, most) in gaps.iter().zip([200, 400, 800, 1000].map(ms)) {
        assert!(*gap >= most / 2 && *gap <= most, "{gaps:?}");
    }
    // Each later connection is one call's worth.
    assert!(lock.connects[1..]
        .iter()
        .all(|(_, within)| *within == 2 * S));
}

#[tokio::test(start_paused = true)]
async fn a_wait_bounds_connecting_and_ends_on_the_last_reason() {
    let mut lock = Scripted::new(&[Acquired]).unreachable_for(usize::MAX);
    let started = Instant::now();
    let err = wait_on(&mut lock, Some(Wait::Up(3 * S)))
        .await
        .expect_err("never reached");
    assert_eq!(started.elapsed(), 3 * S, "gave up at its limit");
    assert!(lock.tries.is_empty());
    assert_eq!(
        lock.connects[0].1,
        3 * S,
        "the first connection within the wait"
    );
    let (last_at, last_within) = *lock.connects.last().expect("connections");
    assert!(last_at + last_within <= 3 * S, "{:?}", lock.connects);
    let last = lock.connects.len() - 1;
    assert!(
        err.to_string()
            .ends_with(&format!("down {}", usize::MAX - 1 - last)),
        "{err}"
    );
}

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
