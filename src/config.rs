//! Validated settings: the timing rules and scaled defaults that clap cannot
//! express, checked once so the rest of lockrun can rely on them.

use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

use crate::cli::{RunArgs, Wait};
use crate::lease::Timing;
use crate::redis_conn::Target;

/// The longest default kill grace; shorter ttls scale it down.
const MAX_DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);
/// The longest default Redis call timeout; shorter ttls scale it down.
const MAX_DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_secs(2);

/// A command line that lockrun refuses, with a message that says why and what
/// would be accepted.
#[derive(Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How much lockrun says on stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Verbosity {
    Quiet,
    #[default]
    Normal,
    Verbose,
}

/// Everything a run needs, validated.
#[derive(Debug)]
pub struct RunConfig {
    pub key: String,
    pub target: Target,
    pub prefix: String,
    pub timing: Timing,
    pub wait: Option<Wait>,
    pub busy_exit_code: u8,
    pub min_hold: Option<Duration>,
    pub timeout: Option<Duration>,
    pub verbosity: Verbosity,
    pub command: Vec<OsString>,
}

impl RunConfig {
    pub fn from_args(args: RunArgs, password: Option<String>) -> Result<Self, UsageError> {
        let key = validate_key(args.key.unwrap_or_default())?;
        let target = Target::parse(&args.redis.url, password)?;
        let timing = timing(
            args.ttl,
            args.renew_every,
            args.redis_timeout,
            args.kill_grace,
        )?;
        let min_hold = positive("--min-hold", args.min_hold)?;
        let timeout = positive("--timeout", args.timeout)?;
        let verbosity = match (args.quiet, args.verbose) {
            (true, _) => Verbosity::Quiet,
            (_, true) => Verbosity::Verbose,
            _ => Verbosity::Normal,
        };
        Ok(RunConfig {
            key,
            target,
            prefix: args.redis.prefix,
            timing,
            wait: args.wait,
            busy_exit_code: args.busy_exit_code,
            min_hold,
            timeout,
            verbosity,
            command: args.command,
        })
    }
}

pub fn validate_key(key: String) -> Result<String, UsageError> {
    if key.is_empty() {
        return Err(UsageError("--key must not be empty".into()));
    }
    Ok(key)
}

fn positive(flag: &str, value: Option<Duration>) -> Result<Option<Duration>, UsageError> {
    match value {
        Some(d) if d.is_zero() => Err(UsageError(format!("{flag} must be longer than zero"))),
        other => Ok(other),
    }
}

/// Fills in the defaults that scale with the ttl and checks that a renewal
/// attempt and a graceful stop fit inside one lease.
pub fn timing(
    ttl: Duration,
    renew_every: Option<Duration>,
    redis_timeout: Option<Duration>,
    kill_grace: Option<Duration>,
) -> Result<Timing, UsageError> {
    if ttl < Duration::from_millis(10) {
        return Err(UsageError(format!(
            "--ttl {} is too short; use 10ms or more (Redis keeps leases in whole milliseconds)",
            show(ttl)
        )));
    }
    let timing = Timing {
        ttl,
        renew_every: positive("--renew-every", renew_every)?.unwrap_or(ttl / 3),
        redis_timeout: positive("--redis-timeout", redis_timeout)?
            .unwrap_or((ttl / 10).min(MAX_DEFAULT_REDIS_TIMEOUT)),
        kill_grace: kill_grace.unwrap_or((ttl / 4).min(MAX_DEFAULT_KILL_GRACE)),
    };
    if timing.needed() < ttl {
        return Ok(timing);
    }
    // The smallest ttl that fits: renew + timeout + grace + ttl/100 + 2ms < ttl.
    let fixed = timing.renew_every + timing.redis_timeout + timing.kill_grace;
    let min_ttl_ms = (fixed.as_millis() + 2) * 100 / 99 + 1;
    let grace_room = ttl.saturating_sub(timing.needed() - timing.kill_grace);
    let mut advice = format!(
        "use --ttl {} or more",
        show(Duration::from_millis(min_ttl_ms as u64))
    );
    if grace_room > Duration::from_millis(1) {
        advice += &format!(
            ", or --kill-grace {} or less",
            show(grace_room - Duration::from_millis(1))
        );
    }
    Err(UsageError(format!(
        "unsafe timing: renew every {} + redis timeout {} + kill grace {} + clock-drift \
         allowance {} = {}, which does not fit inside the ttl of {}; {advice}",
        show(timing.renew_every),
        show(timing.redis_timeout),
        show(timing.kill_grace),
        show(timing.drift()),
        show(timing.needed()),
        show(ttl),
    )))
}

/// A duration as an operator would write it, to the millisecond.
pub fn show(d: Duration) -> String {
    let ms = Duration::from_millis(d.as_millis() as u64);
    if ms.is_zero() {
        return "0s".into();
    }
    humantime::format_duration(ms).to_string().replace(' ', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn defaults_scale_with_the_ttl() {
        let t = timing(30 * S, None, None, None).expect("defaults fit");
        assert_eq!(t.renew_every, 10 * S);
        assert_eq!(t.redis_timeout, 2 * S);
        assert_eq!(t.kill_grace, 5 * S);

        let t = timing(S, None, None, None).expect("a ttl of 1s alone is valid");
        assert_eq!(
            t.renew_every,
            Duration::from_millis(333) + Duration::from_nanos(333_333)
        );
        assert_eq!(t.redis_timeout, Duration::from_millis(100));
        assert_eq!(t.kill_grace, Duration::from_millis(250));
    }

    #[test]
    fn unsafe_timing_says_what_fits() {
        let err = timing(30 * S, None, None, Some(20 * S)).expect_err("does not fit");
        assert!(err.0.starts_with("unsafe timing:"), "{err}");
        assert!(err.0.contains("--ttl 32s326ms or more"), "{err}");
        assert!(err.0.contains("--kill-grace 17s697ms or less"), "{err}");
    }

    #[test]
    fn zero_and_tiny_values_are_refused() {
        assert!(timing(Duration::from_millis(5), None, None, None).is_err());
        assert!(timing(30 * S, Some(Duration::ZERO), None, None).is_err());
        assert!(timing(30 * S, None, None, Some(Duration::ZERO)).is_ok());
    }

    #[test]
    fn durations_show_compactly() {
        assert_eq!(show(Duration::from_millis(1500)), "1s500ms");
        assert_eq!(show(Duration::from_secs(90)), "1m30s");
        assert_eq!(show(Duration::ZERO), "0s");
    }
}
