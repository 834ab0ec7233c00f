//! Time as lockrun needs it: instants on the boot clock, sleeps that notice a
//! suspend, and durations shown the way an operator writes them.
//!
//! Deadlines are kept on CLOCK_BOOTTIME, which keeps counting while the
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
pub(crate) struct BootInstant(Duration);

impl BootInstant {
    #[cfg(not(test))]
    pub(crate) fn now() -> Self {
        BootInstant(since_boot())
    }

    /// In unit tests the boot clock follows tokio's clock, so that a test
    /// under `tokio::time::pause` decides when time passes and renewals,
    /// retries and deadlines can be checked to the millisecond without
    /// waiting for them. The release binary, and the integration tests that
    /// run it, read CLOCK_BOOTTIME as above: a suspend must count there.
    #[cfg(test)]
    pub(crate) fn now() -> Self {
        use std::sync::OnceLock;
        use std::time::Instant;
        // Taken once for the whole process: tests on separate runtimes, paused
        // or not, then map their clocks the same way, and one that starts
        // before the anchor was taken still gets the instants it should.
        static ANCHOR: OnceLock<(Duration, Instant)> = OnceLock::new();
        let &(boot, anchor) = ANCHOR.get_or_init(|| (since_boot(), Instant::now()));
        let now = tokio::time::Instant::now().into_std();
        BootInstant(match now.checked_duration_since(anchor) {
            Some(after) => boot + after,
            None => boot.saturating_sub(anchor - now),
        })
    }

    /// Time left until `self`, zero when it has passed.
    pub(crate) fn remaining(self) -> Duration {
        self.0.saturating_sub(BootInstant::now().0)
    }

    pub(crate) fn has_passed(self) -> bool {
        BootInstant::now() >= self
    }

    pub(crate) fn elapsed(self) -> Duration {
        BootInstant::now().0.saturating_sub(self.0)
    }
}

impl Add<Duration> for BootInstant {
    type Output = BootInstant;
    /// Saturates: a moment past the clock's range is one that never comes,
    /// which is what a deadline that far out means anyway.
    fn add(self, rhs: Duration) -> BootInstant {
        BootInstant(self.0.saturating_add(rhs))
    }
}

impl Sub<Duration> for BootInstant {
    type Output = BootInstant;
    fn sub(self, rhs: Duration) -> BootInstant {
        BootInstant(self.0.saturating_sub(rhs))
    }
}

/// The time since boot, suspends included.
fn since_boot() -> Duration {
    let ts = clock_gettime(ClockId::CLOCK_BOOTTIME)
        .expect("CLOCK_BOOTTIME exists on every Linux since 2.6.39");
    // The clock starts at boot, so neither field is negative.
    let secs = u64::try_from(ts.tv_sec()).unwrap_or(0);
    let nanos = u32::try_from(ts.tv_nsec()).unwrap_or(0);
    Duration::new(secs, nanos)
}

/// Sleeps until `when` on the boot clock (see the module comment for why it
/// sleeps in slices).
pub(crate) async fn sleep_until(when: BootInstant) {
    loop {
        let left = when.remaining();
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(SLICE)).await;
    }
}

/// Sleeps until `when`, or forever when there is nothing to wake for.
pub(crate) async fn sleep_until_some(when: Option<BootInstant>) {
    match when {
        Some(when) => sleep_until(when).await,
        None => std::future::pending().await,
    }
}

/// The units a duration is counted in by `whole` and `whole_up`.
pub(crate) const MS: Duration = Duration::from_millis(1);
pub(crate) const US: Duration = Duration::from_micros(1);
pub(crate) const SECOND: Duration = Duration::from_secs(1);

/// How many whole `unit`s `d` holds, at most `u64::MAX`: every duration
/// that becomes a number (a `_ms` field, a metric, a limit sent to Redis)
/// is counted here.
pub(crate) fn whole(d: Duration, unit: Duration) -> u64 {
    u64::try_from(d.as_nanos() / unit.as_nanos()).unwrap_or(u64::MAX)
}

/// As `whole`, rounded up: for an expiry sent to Redis, where a remainder
/// turned into 0 would mean "no expiry", and a wait that must not be cut
/// short.
pub(crate) fn whole_up(d: Duration, unit: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(unit.as_nanos())).unwrap_or(u64::MAX)
}

/// The precision a person reads and writes `d` at: milliseconds under a
/// second, whole seconds under an hour, whole minutes above.
fn person_unit(d: Duration) -> Duration {
    const MINUTE: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(60 * 60);
    match d {
        d if d < SECOND => MS,
        d if d < HOUR => SECOND,
        _ => MINUTE,
    }
}

/// A limit to suggest, at the precision a person writes it (milliseconds
/// under a second, whole seconds under an hour, whole minutes above),
/// rounded `up` for a least value and down for a most, so that the value
/// suggested still fits: `32s326ms or more` is `33s or more`. Shown with
/// `show_exact`.
pub(crate) fn limit(d: Duration, up: bool) -> Duration {
    let unit = person_unit(d);
    let units = if up {
        whole_up(d, unit)
    } else {
        whole(d, unit)
    };
    unit.saturating_mul(u32::try_from(units).unwrap_or(u32::MAX))
}

/// A duration at the precision a person reads it: milliseconds under a
/// second, whole seconds under an hour, whole minutes above, each rounded
/// to the nearest (`49m59s972ms` is `50m`). Every time lockrun measured (a
/// lease's time left, how long a run held or waited) is shown this way.
pub(crate) fn show(d: Duration) -> String {
    let unit = person_unit(d);
    // Rounded half up; 59m59s600ms becomes 1h, which is right at either
    // precision.
    let units = whole(d.saturating_add(unit / 2), unit);
    show_exact(unit.saturating_mul(u32::try_from(units).unwrap_or(u32::MAX)))
}

/// A duration to the millisecond, as an operator would write it: for
/// values the operator gave and sums of them, which must add up as typed.
pub(crate) fn show_exact(d: Duration) -> String {
    let whole_ms = Duration::new(d.as_secs(), d.subsec_millis() * 1_000_000);
    if whole_ms.is_zero() {
        return "0s".into();
    }
    humantime::format_duration(whole_ms)
        .to_string()
        .replace(' ', "")
}

/// The wall clock in microseconds since the Unix epoch (0 before 1970).
pub(crate) fn unix_now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| whole(d, US))
}

#[cfg(test)]
pub(crate) fn at(since_boot: Duration) -> BootInstant {
    BootInstant(since_boot)
}

#[cfg(test)]
impl BootInstant {
    /// How long after `earlier` this is; tests state their timelines this
    /// way.
    pub(crate) fn since(self, earlier: BootInstant) -> Duration {
        self.0
            .checked_sub(earlier.0)
            .expect("a test timeline runs forward")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_clock_moves_forward() {
        let a = BootInstant::now();
        let b = BootInstant::now();
        assert!(b >= a);
        assert!(!(a + Duration::from_secs(3600)).has_passed());
    }

    #[test]
    fn far_deadlines_saturate_instead_of_panicking() {
        let far = BootInstant::now() + Duration::MAX;
        assert_eq!(far, BootInstant(Duration::MAX));
        assert!(!far.has_passed());
        assert_eq!(far - Duration::MAX, BootInstant(Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn under_paused_time_the_boot_clock_moves_only_with_tokio() {
        let start = BootInstant::now();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(BootInstant::now(), start);
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert_eq!(BootInstant::now(), start + Duration::from_millis(1_500));
    }

    #[tokio::test(start_paused = true)]
    async fn sleeps_in_slices_end_exactly_at_the_moment() {
        let start = BootInstant::now();
        let mut when = start;
        for ms in [1, 249, 250, 251, 1_234, 3_600_000] {
            when = start + Duration::from_millis(ms);
            sleep_until(when).await;
            assert_eq!(BootInstant::now(), when);
        }
        // A moment already passed does not wait at all.
        sleep_until(start).await;
        assert_eq!(BootInstant::now(), when);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_to_wake_for_sleeps_forever() {
        let forever = sleep_until_some(None);
        let waited = tokio::time::timeout(Duration::from_secs(86_400), forever).await;
        assert!(waited.is_err());
    }

    #[test]
    fn durations_count_in_whole_units_down_or_up() {
        assert_eq!(whole(Duration::from_micros(1500), MS), 1);
        assert_eq!(whole_up(Duration::from_micros(1500), MS), 2);
        assert_eq!(whole_up(Duration::from_nanos(1), MS), 1);
        assert_eq!(whole_up(Duration::from_secs(30), MS), 30_000);
        assert_eq!(whole(Duration::from_millis(2), US), 2000);
        assert_eq!(whole_up(Duration::from_millis(1001), SECOND), 2);
        assert_eq!(whole(Duration::MAX, US), u64::MAX);
    }

    #[test]
    fn durations_show_compactly() {
        assert_eq!(show_exact(Duration::from_millis(1500)), "1s500ms");
        assert_eq!(show_exact(Duration::from_micros(2_999_999)), "2s999ms");
        assert_eq!(show_exact(Duration::ZERO), "0s");
    }

    #[test]
    fn durations_show_at_the_precision_a_person_reads() {
        let ms = Duration::from_millis;
        let cases = [
            (ms(0), "0s"),
            (ms(250), "250ms"),
            (ms(999), "999ms"),
            (ms(1_499), "1s"),
            (ms(1_500), "2s"),
            (ms(2_999), "3s"),
            (ms(90_000), "1m30s"),
            (ms(29 * 60_000 + 59_412), "29m59s"),
            (ms(49 * 60_000 + 59_972), "50m"),
            (ms(3_599_600), "1h"),
            (ms(3_600_000 + 29 * 60_000 + 40_000), "1h30m"),
            (ms(26 * 3_600_000 + 10_000), "1day2h"),
        ];
        for (d, want) in cases {
            assert_eq!(show(d), want, "{d:?}");
        }
    }
}
