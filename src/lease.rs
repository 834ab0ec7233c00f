//! Lease timing: when to renew, and the local deadline after which the lock
//! may belong to someone else.
//!
//! The deadline is kept on CLOCK_BOOTTIME, which keeps counting while the
//! machine is suspended or the process is stopped: a lease that lapsed while
//! lockrun could not run must be seen as lapsed the moment it runs again.
//! tokio's timers use CLOCK_MONOTONIC, which stops during suspend, so every
//! wait on a deadline is cut into short slices that re-read this clock.

use std::ops::{Add, Sub};
use std::time::Duration;

use nix::time::{clock_gettime, ClockId};

/// The longest a single timer sleeps before re-reading the boot clock.
const SLICE: Duration = Duration::from_millis(250);

/// A point on CLOCK_BOOTTIME.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootInstant(Duration);

impl BootInstant {
    pub fn now() -> Self {
        let ts = clock_gettime(ClockId::CLOCK_BOOTTIME)
            .expect("CLOCK_BOOTTIME exists on every Linux since 2.6.39");
        // The clock starts at boot, so neither field is negative.
        let secs = u64::try_from(ts.tv_sec()).unwrap_or(0);
        let nanos = u32::try_from(ts.tv_nsec()).unwrap_or(0);
        BootInstant(Duration::new(secs, nanos))
    }

    /// Time left until `self`, zero when it has passed.
    pub fn remaining(self) -> Duration {
        self.0.saturating_sub(BootInstant::now().0)
    }

    pub fn has_passed(self) -> bool {
        BootInstant::now() >= self
    }

    pub fn elapsed(self) -> Duration {
        BootInstant::now().0.saturating_sub(self.0)
    }
}

impl Add<Duration> for BootInstant {
    type Output = BootInstant;
    fn add(self, rhs: Duration) -> BootInstant {
        BootInstant(self.0 + rhs)
    }
}

impl Sub<Duration> for BootInstant {
    type Output = BootInstant;
    fn sub(self, rhs: Duration) -> BootInstant {
        BootInstant(self.0.saturating_sub(rhs))
    }
}

/// Sleeps until `when` on the boot clock (see the module comment for why it
/// sleeps in slices).
pub async fn sleep_until(when: BootInstant) {
    loop {
        let left = when.remaining();
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(SLICE)).await;
    }
}

/// The timing of one lease, validated so that a renewal attempt and a
/// graceful stop both fit before the lease can lapse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Lease length written to Redis.
    pub ttl: Duration,
    /// Heartbeat period.
    pub renew_every: Duration,
    /// Limit on every Redis call.
    pub redis_timeout: Duration,
    /// SIGTERM → SIGKILL delay.
    pub kill_grace: Duration,
}

impl Timing {
    /// How much earlier than Redis we assume the lease ends, for clock-rate
    /// differences between this host and the server (the Redlock allowance).
    pub fn drift(&self) -> Duration {
        self.ttl / 100 + Duration::from_millis(2)
    }

    /// Until when a lease whose acquire or renew request was sent at `sent`
    /// is ours for sure. Counting from the send, not the reply, is what keeps
    /// this conservative however slow the reply was.
    pub fn deadline_after(&self, sent: BootInstant) -> BootInstant {
        sent + self.ttl.saturating_sub(self.drift())
    }

    /// How long after a failed renewal the next attempt is made.
    pub fn retry_delay(&self) -> Duration {
        (self.renew_every / 4).max(Duration::from_millis(20))
    }

    /// The time one full renewal cycle plus a graceful stop needs; it must be
    /// shorter than the ttl.
    pub fn needed(&self) -> Duration {
        self.renew_every + self.redis_timeout + self.kill_grace + self.drift()
    }
}

/// The lease as the supervisor sees it: until when it is proven ours.
#[derive(Debug)]
pub struct Lease {
    deadline: std::cell::Cell<BootInstant>,
}

impl Lease {
    pub fn new(deadline: BootInstant) -> Self {
        Lease {
            deadline: std::cell::Cell::new(deadline),
        }
    }

    pub fn deadline(&self) -> BootInstant {
        self.deadline.get()
    }

    /// Records a successful renewal. A renewal never shortens the lease: a
    /// late reply to an older request must not pull the deadline back.
    pub fn extend_to(&self, deadline: BootInstant) {
        if deadline > self.deadline.get() {
            self.deadline.set(deadline);
        }
    }

    pub fn has_lapsed(&self) -> bool {
        self.deadline.get().has_passed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let sent = BootInstant(Duration::from_secs(100));
        assert_eq!(
            t.deadline_after(sent),
            BootInstant(Duration::from_millis(100_000 + 10_000 - 102))
        );
    }

    #[test]
    fn lease_never_moves_back() {
        let lease = Lease::new(BootInstant(Duration::from_secs(10)));
        lease.extend_to(BootInstant(Duration::from_secs(5)));
        assert_eq!(lease.deadline(), BootInstant(Duration::from_secs(10)));
        lease.extend_to(BootInstant(Duration::from_secs(20)));
        assert_eq!(lease.deadline(), BootInstant(Duration::from_secs(20)));
    }

    #[test]
    fn boot_clock_moves_forward() {
        let a = BootInstant::now();
        let b = BootInstant::now();
        assert!(b >= a);
        assert!(!(a + Duration::from_secs(3600)).has_passed());
    }
}
