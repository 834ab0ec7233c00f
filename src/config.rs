//! Validated settings: the timing rules and scaled defaults that clap cannot
//! express, checked once so the rest of lockrun can rely on them. This is
//! where the command line (`cli`) and the environment become the domain's
//! types; nothing below this module sees clap.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::time::Duration;

use crate::cli::{Action, Cli, RedisArgs, RunArgs};
use crate::clock::show;
use crate::error::Error;
use crate::lease::Timing;
use crate::lock::{Keys, ReplicaAcks};
use crate::redis_conn::Target;
use crate::report::Verbosity;
use crate::wait::Wait;

/// Environment variable with the Redis password, so it never shows in `ps`.
pub const PASSWORD_ENV: &str = "LOCKRUN_REDIS_PASSWORD";
/// Environment variable with the password of the sentinels themselves
/// (`redis+sentinel://` URLs); never a flag, for the same reason.
pub const SENTINEL_PASSWORD_ENV: &str = "LOCKRUN_SENTINEL_PASSWORD";

/// The longest default kill grace; shorter ttls scale it down.
const MAX_DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);
/// The longest default Redis call timeout; shorter ttls scale it down.
const MAX_DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_secs(2);

/// What this invocation of lockrun is asked to do, validated.
#[derive(Debug)]
pub(crate) enum Invocation {
    Run(RunConfig),
    Status { lock: LockConfig, json: bool },
    Release { lock: LockConfig, force: bool },
}

/// Everything a run needs.
#[derive(Debug)]
pub(crate) struct RunConfig {
    pub(crate) lock: LockConfig,
    pub(crate) timing: Timing,
    pub(crate) replica_acks: ReplicaAcks,
    pub(crate) wait: Option<Wait>,
    pub(crate) busy_exit_code: u8,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) verbosity: Verbosity,
    pub(crate) command: Vec<OsString>,
}

/// The passwords lockrun takes from its environment.
#[derive(Debug, Default)]
pub(crate) struct Passwords {
    /// LOCKRUN_REDIS_PASSWORD: the servers holding the lock.
    pub(crate) redis: Option<String>,
    /// LOCKRUN_SENTINEL_PASSWORD: the sentinels.
    pub(crate) sentinel: Option<String>,
}

/// Which lock, and where it lives.
#[derive(Debug)]
pub(crate) struct LockConfig {
    /// The name given to `--key`.
    pub(crate) name: String,
    pub(crate) keys: Keys,
    pub(crate) target: Target,
}

impl Invocation {
    /// Validates the parsed command line; `passwords` come from the
    /// environment.
    pub(crate) fn from_cli(cli: Cli, passwords: Passwords) -> Result<Self, Error> {
        Ok(match cli.action {
            None => Invocation::Run(RunConfig::from_args(cli.run, passwords)?),
            Some(Action::Status(args)) => Invocation::Status {
                lock: LockConfig::new(args.key, &args.redis, passwords)?,
                json: args.json,
            },
            Some(Action::Release(args)) => Invocation::Release {
                lock: LockConfig::new(args.key, &args.redis, passwords)?,
                force: args.force,
            },
        })
    }

    pub(crate) fn verbosity(&self) -> Verbosity {
        match self {
            Invocation::Run(config) => config.verbosity,
            Invocation::Status { .. } | Invocation::Release { .. } => Verbosity::Normal,
        }
    }
}

impl RunConfig {
    fn from_args(args: RunArgs, passwords: Passwords) -> Result<Self, Error> {
        let lock = LockConfig::new(args.key.unwrap_or_default(), &args.redis, passwords)?;
        // Sentinel and Cluster exist to survive a failover; without
        // acknowledgement a failover can lose the lease.
        let replica_acks = args.replica_acks.unwrap_or(if lock.target.is_replicated() {
            ReplicaAcks::All
        } else {
            ReplicaAcks::Count(0)
        });
        let timing = timing(
            args.ttl,
            args.renew_every,
            args.redis_timeout,
            args.kill_grace,
        )?;
        let verbosity = match (args.quiet, args.verbose) {
            (true, _) => Verbosity::Quiet,
            (_, true) => Verbosity::Verbose,
            _ => Verbosity::Normal,
        };
        Ok(RunConfig {
            lock,
            timing,
            replica_acks,
            wait: args.wait,
            busy_exit_code: args.busy_exit_code,
            min_hold: positive("--min-hold", args.min_hold)?,
            timeout: positive("--timeout", args.timeout)?,
            verbosity,
            command: args.command,
        })
    }

    /// The program's name, for messages.
    pub(crate) fn program(&self) -> String {
        self.command
            .first()
            .map(|program| program.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

impl LockConfig {
    fn new(name: String, redis: &RedisArgs, passwords: Passwords) -> Result<Self, Error> {
        if name.is_empty() {
            return Err(Error::Usage("--key must not be empty".into()));
        }
        let target = Target::parse(&redis.url, passwords.redis)
            .map_err(|err| Error::Usage(err.to_string()))?
            .with_sentinel_password(passwords.sentinel);
        Ok(LockConfig {
            keys: Keys::new(&redis.prefix, &name),
            name,
            target,
        })
    }
}

fn positive(flag: &str, value: Option<Duration>) -> Result<Option<Duration>, Error> {
    match value {
        Some(d) if d.is_zero() => Err(Error::Usage(format!("{flag} must be longer than zero"))),
        other => Ok(other),
    }
}

/// Fills in the defaults that scale with the ttl and checks that a renewal
/// attempt and a graceful stop fit inside one lease.
fn timing(
    ttl: Duration,
    renew_every: Option<Duration>,
    redis_timeout: Option<Duration>,
    kill_grace: Option<Duration>,
) -> Result<Timing, Error> {
    if ttl < Duration::from_millis(10) {
        return Err(Error::Usage(format!(
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
    Err(Error::Usage(unsafe_timing(&timing)))
}

/// Why `timing` does not fit its ttl, and the smallest change that would.
fn unsafe_timing(timing: &Timing) -> String {
    let ttl = timing.ttl;
    // The smallest ttl that fits: renew + timeout + grace + ttl/100 + 2ms < ttl.
    let fixed = timing.renew_every + timing.redis_timeout + timing.kill_grace;
    let min_ttl_ms = fixed.as_millis().saturating_add(2).saturating_mul(100) / 99 + 1;
    let min_ttl = Duration::from_millis(u64::try_from(min_ttl_ms).unwrap_or(u64::MAX));
    let grace_room = ttl.saturating_sub(timing.needed().saturating_sub(timing.kill_grace));
    let mut advice = format!("use --ttl {} or more", show(min_ttl));
    if grace_room > Duration::from_millis(1) {
        let grace = grace_room.saturating_sub(Duration::from_millis(1));
        let _ = write!(advice, ", or --kill-grace {} or less", show(grace));
    }
    format!(
        "unsafe timing: renew every {} + redis timeout {} + kill grace {} + clock-drift \
         allowance {} = {}, which does not fit inside the ttl of {}; {advice}",
        show(timing.renew_every),
        show(timing.redis_timeout),
        show(timing.kill_grace),
        show(timing.drift()),
        show(timing.needed()),
        show(ttl),
    )
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
        let err = timing(30 * S, None, None, Some(20 * S))
            .expect_err("does not fit")
            .to_string();
        assert!(err.starts_with("unsafe timing:"), "{err}");
        assert!(err.contains("--ttl 32s326ms or more"), "{err}");
        assert!(err.contains("--kill-grace 17s697ms or less"), "{err}");
    }

    #[test]
    fn zero_and_tiny_values_are_refused() {
        assert!(timing(Duration::from_millis(5), None, None, None).is_err());
        assert!(timing(30 * S, Some(Duration::ZERO), None, None).is_err());
        assert!(timing(30 * S, None, None, Some(Duration::ZERO)).is_ok());
    }
}
