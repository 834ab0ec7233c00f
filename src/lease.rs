//! Lease timing: when to renew, and the local deadline after which the lock
//! may belong to someone else. Deadlines live on the boot clock (`clock`).

use std::cell::Cell;
use std::fmt;
use std::time::Duration;

use crate::clock::BootInstant;

/// The timing of one lease, validated so that a renewal attempt and a
/// graceful stop both fit before the lease can lapse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    /// Lease length written to Redis.
    pub(crate) ttl: Duration,
    /// Heartbeat period.
    pub(crate) renew_every: Duration,
    /// Limit on every Redis call.
    pub(crate) redis_timeout: Duration,
    /// SIGTERM → SIGKILL delay.
    pub(crate) kill_grace: Duration,
}

impl Timing {
    /// How much earlier than Redis we assume the lease ends, for clock-rate
    /// differences between this host and the server (the Redlock allowance).
    pub(crate) fn drift(&self) -> Duration {
        self.ttl / 100 + Duration::from_millis(2)
    }

    /// Until when a lease whose acquire or renew request was sent at `sent`
    /// is ours for sure. Counting from the send, not the reply, is what keeps
    /// this conservative however slow the reply was.
    pub(crate) fn deadline_after(&self, sent: BootInstant) -> BootInstant {
        sent + self.ttl.saturating_sub(self.drift())
    }

    /// How long after a failed renewal the next attempt is made.
    pub(crate) fn retry_delay(&self) -> Duration {
        (self.renew_every / 4).max(Duration::from_millis(20))
    }

    /// The time one full renewal cycle plus a graceful stop needs; it must be
    /// shorter than the ttl.
    pub(crate) fn needed(&self) -> Duration {
        self.renew_every + self.redis_timeout + self.kill_grace + self.drift()
    }
}

/// The lease as the supervisor sees it: until when it is proven ours.
#[derive(Debug)]
pub(crate) struct Lease {
    deadline: Cell<BootInstant>,
}

impl Lease {
    pub(crate) fn new(deadline: BootInstant) -> Self {
        Lease {
            deadline: Cell::new(deadline),
        }
    }

    pub(crate) fn deadline(&self) -> BootInstant {
        self.deadline.get()
    }

    /// Records a successful renewal. A renewal never shortens the lease: a
    /// late reply to an older request must not pull the deadline back.
    pub(crate) fn extend_to(&self, deadline: BootInstant) {
        if deadline > self.deadline.get() {
            self.deadline.set(deadline);
        }
    }

    pub(crate) fn has_lapsed(&self) -> bool {
        self.deadline.get().has_passed()
    }
}

/// Why a lease could no longer be proven ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loss {
    /// Renewals failed until only the kill grace was left.
    Unconfirmed,
    /// Redis says the key no longer holds our token.
    TokenGone,
    /// The deadline passed while lockrun could not act (paused, suspended).
    Lapsed,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Loss::TokenGone => {
                "its key no longer holds this run's token (it expired, was removed with \
                 `lockrun release --force`, or Redis restarted empty)"
            }
            Loss::Unconfirmed => "the lease could not be renewed in time",
            Loss::Lapsed => "the lease ran out while lockrun could not run (paused or suspended)",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::at;

    fn timing(ttl_ms: u64) -> Timing {
        Timing {
            ttl: Duration::from_millis(ttl_ms),
            renew_every: Duration::from_millis(ttl_ms / 3),
            redis_timeout: Duration::from_millis(ttl_ms / 10),
            kill_grace: Duration::from_millis(ttl_ms / 4),
        }
    }

    #[test]
    fn drift_follows_redlock() {
        assert_eq!(timing(30_000).drift(), Duration::from_millis(302));
        assert_eq!(timing(1_000).drift(), Duration::from_millis(12));
    }

    #[test]
    fn deadline_counts_from_the_send() {
        let t = timing(10_000);
        let sent = at(Duration::from_secs(100));
        assert_eq!(
            t.deadline_after(sent),
            at(Duration::from_millis(100_000 + 10_000 - 102))
        );
    }

    #[test]
    fn retries_come_four_times_a_period_but_not_too_fast() {
        assert_eq!(timing(30_000).retry_delay(), Duration::from_millis(2_500));
        assert_eq!(timing(3_000).retry_delay(), Duration::from_millis(250));
        // renew_every 33 ms: a quarter would hammer a struggling server.
        assert_eq!(timing(100).retry_delay(), Duration::from_millis(20));
    }

    #[test]
    fn a_lease_needs_a_period_a_redis_call_a_grace_and_the_drift() {
        // 10 s + 3 s + 7.5 s + 302 ms.
        assert_eq!(timing(30_000).needed(), Duration::from_millis(20_802));
        let t = timing(30_000);
        assert!(t.needed() < t.ttl);
        // What `needed() < ttl` promises: a renewal that took the whole
        // redis_timeout and failed still leaves the kill grace before the
        // deadline the previous one proved.
        let sent = at(Duration::from_secs(100));
        let next_try = sent + t.renew_every + t.redis_timeout;
        assert!(next_try + t.kill_grace < t.deadline_after(sent));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_lapses_at_its_deadline_and_not_before() {
        let ms = Duration::from_millis;
        let lease = Lease::new(BootInstant::now() + ms(1_000));
        tokio::time::advance(ms(999)).await;
        assert!(!lease.has_lapsed());
        tokio::time::advance(ms(1)).await;
        assert!(lease.has_lapsed());
    }

    #[test]
    fn lease_never_moves_back() {
        let lease = Lease::new(at(Duration::from_secs(10)));
        lease.extend_to(at(Duration::from_secs(5)));
        assert_eq!(lease.deadline(), at(Duration::from_secs(10)));
        lease.extend_to(at(Duration::from_secs(20)));
        assert_eq!(lease.deadline(), at(Duration::from_secs(20)));
    }
}
