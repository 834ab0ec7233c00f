//! Validated settings: the timing rules and scaled defaults that clap cannot
//! express, checked once so the rest of lockrun can rely on them. clap has
//! already taken each setting from its option, its environment variable or
//! the configuration file (`config/file`), in that order; this is where they
//! become the domain's types, a refusal naming the file's line when the file
//! gave the value. Nothing below this module sees clap.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{Action, Cli, ListArgs, RedisArgs, RunArgs};
use crate::clock::{limit, show_exact};
use crate::error::Error;
use crate::lease::Timing;
use crate::lock::{Holding, Keys, ReplicaAcks, Servers};
use crate::redis_conn::{url_refusal, Target, UrlSource};
use crate::report::Format;
use crate::report::Verbosity;
use crate::secrets;
use crate::wait::Wait;

pub(crate) mod file;
mod tls_files;

pub(crate) use file::FileSettings;
pub(crate) use tls_files::ExposedKey;

/// The longest default kill grace; shorter ttls scale it down.
const MAX_DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);
/// The longest default Redis call timeout; shorter ttls scale it down.
const MAX_DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_secs(2);
/// `--prefix` when neither an option nor the file gives one.
const DEFAULT_PREFIX: &str = "lockrun:";

/// The longest value any duration flag takes: one year as humantime counts
/// it (365.25 days, written `1y`). No lease or job needs more, and with every
/// flag at most this, whatever lockrun derives from them (a sum of four, a
/// deadline from now) fits Redis's `PX` (milliseconds in a signed 64-bit
/// count) and the clocks with room to spare, so nothing downstream can wrap,
/// overflow or be refused by Redis after the lock is taken.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(31_557_600);
/// `MAX_DURATION` as the operator writes it.
const MAX_DURATION_TEXT: &str = "1y";

/// What this invocation of lockrun is asked to do, validated.
#[derive(Debug)]
pub(crate) enum Invocation {
    Run(RunConfig),
    Status {
        lock: LockConfig,
        json: bool,
    },
    Release {
        lock: LockConfig,
        force: bool,
        /// `--holder`: the token of the one holder to remove.
        holder: Option<String>,
    },
    List(ListConfig),
    History {
        lock: LockConfig,
        /// `-n`: only the last this many.
        last: Option<usize>,
        json: bool,
    },
    Check {
        lock: LockConfig,
        check: CheckConfig,
    },
}

/// What `lockrun check` holds a lock's runs to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CheckConfig {
    /// CRITICAL without a success this recent.
    pub(crate) critical: Duration,
    /// WARNING without a success this recent.
    pub(crate) warning: Option<Duration>,
    pub(crate) json: bool,
}

/// Runs a lock's history keeps without `--history`: about a day of an
/// hourly job, under 10 KB per lock.
const DEFAULT_HISTORY: u32 = 20;

/// Everything a run needs.
#[derive(Debug)]
pub(crate) struct RunConfig {
    pub(crate) lock: LockConfig,
    pub(crate) timing: Timing,
    pub(crate) replica_acks: ReplicaAcks,
    pub(crate) wait: Option<Wait>,
    /// `--supersede`: a newer waiter with it takes this run's place.
    pub(crate) supersede: bool,
    pub(crate) busy_exit_code: u8,
    pub(crate) min_hold: Option<Duration>,
    /// `--slots`, `--shared`, `--once-per`.
    pub(crate) holding: Holding,
    pub(crate) timeout: Option<Duration>,
    /// `--metrics-file`.
    pub(crate) metrics_file: Option<PathBuf>,
    /// `--history`: how many runs the lock's history keeps.
    pub(crate) history: u32,
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
    pub(crate) servers: Servers,
    /// `--redis-key-file`, if others than its owner may read it.
    pub(crate) exposed_key: Option<ExposedKey>,
}

/// What `lockrun list` shows, and where.
#[derive(Debug)]
pub(crate) struct ListConfig {
    pub(crate) servers: Servers,
    /// `--redis-key-file`, if others than its owner may read it.
    pub(crate) exposed_key: Option<ExposedKey>,
    pub(crate) prefix: String,
    /// Redis glob over lock names.
    pub(crate) glob: String,
    pub(crate) json: bool,
    /// Free locks too, of which only the fencing counter is left.
    pub(crate) all: bool,
}

/// Where the lock lives and how to reach it, each setting from its option,
/// its environment variable or the configuration file, in that order (as
/// `cli::parse` gave them); and which settings the file gave.
#[derive(Debug)]
pub(crate) struct RedisSettings {
    /// The URLs, each with where it was given.
    pub(crate) urls: Vec<(String, UrlSource)>,
    pub(crate) password_file: Option<PathBuf>,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) cert_file: Option<PathBuf>,
    pub(crate) key_file: Option<PathBuf>,
    pub(crate) prefix: String,
    /// The configuration file read, to name in the line that asks for a
    /// server.
    file: Option<PathBuf>,
    /// The settings that the file gave, with their lines: any option, not
    /// only those above.
    from_file: Vec<(&'static str, usize)>,
}

impl RedisSettings {
    fn new(args: RedisArgs, from_file: &[&'static str], file: Option<&FileSettings>) -> Self {
        let from_file: Vec<_> = file.map_or_else(Vec::new, |file| {
            let line = |name: &&'static str| Some((*name, file.line(name)?));
            from_file.iter().filter_map(line).collect()
        });
        let url_line = from_file.iter().find(|(name, _)| *name == "redis");
        let source = match (file, url_line) {
            (Some(file), Some((_, line))) => UrlSource::File {
                path: file.path.clone(),
                line: *line,
            },
            _ if args.url_from_env => UrlSource::Env,
            _ => UrlSource::Option,
        };
        RedisSettings {
            urls: args
                .url
                .into_iter()
                .map(|url| (url, source.clone()))
                .collect(),
            password_file: args.password_file,
            ca_file: args.ca_file,
            cert_file: args.cert_file,
            key_file: args.key_file,
            prefix: args.prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned()),
            file: file.map(|file| file.path.clone()),
            from_file,
        }
    }

    /// How a message names the setting of `option` (`--redis-ca-file`):
    /// the option, or the configuration file's line when the file gave it.
    pub(crate) fn named(&self, option: &str) -> String {
        let name = option.trim_start_matches('-');
        match (&self.file, self.from_file.iter().find(|(n, _)| *n == name)) {
            (Some(path), Some((_, line))) => format!("{} line {line}: {name}", path.display()),
            _ => option.to_owned(),
        }
    }

    /// The line for a run or subcommand that names no server: lockrun
    /// never guesses one (a local Redis nobody named would give each host
    /// a lock of its own).
    fn none_named(&self) -> Error {
        let file = self
            .file
            .as_deref()
            .unwrap_or_else(|| std::path::Path::new(file::DEFAULT_PATH));
        Error::Usage(format!(
            "no Redis server named, so nothing was sent anywhere; give --redis URL, set \
             LOCKRUN_REDIS_URL, or write redis = URL in {} (e.g. redis://10.0.0.5:6379)",
            file.display()
        ))
    }
}

/// The log format a run asked for: `--log-format`, LOCKRUN_LOG_FORMAT or
/// the configuration file's, else text.
pub(crate) fn log_format(cli: &Cli) -> Format {
    cli.run.log_format.unwrap_or(Format::Text)
}

impl Invocation {
    /// Validates the parsed command line; `passwords` come from the
    /// environment, `file` is the configuration file's settings, if one was
    /// read.
    pub(crate) fn from_cli(
        cli: Cli,
        passwords: Passwords,
        file: Option<&FileSettings>,
    ) -> Result<Self, Error> {
        let redis = RedisSettings::new(cli.redis, &cli.from_file, file);
        Ok(match cli.action {
            None => Invocation::Run(RunConfig::from_args(cli.run, &redis, passwords)?),
            Some(Action::Status(args)) => Invocation::Status {
                lock: LockConfig::new(args.key.unwrap_or_default(), &redis, passwords)?,
                json: args.json,
            },
            Some(Action::Release(args)) => Invocation::Release {
                lock: LockConfig::new(args.key.unwrap_or_default(), &redis, passwords)?,
                force: args.force,
                holder: args.holder,
            },
            Some(Action::History(args)) => Invocation::History {
                lock: LockConfig::new(args.key.unwrap_or_default(), &redis, passwords)?,
                last: args.last,
                json: args.json,
            },
            Some(Action::Check(args)) => {
                let critical = args.succeeded_within.unwrap_or(MAX_DURATION);
                if args.warn_within.is_some_and(|warning| warning >= critical) {
                    return Err(Error::Usage(
                        "--warn-within must be shorter than --succeeded-within".into(),
                    ));
                }
                Invocation::Check {
                    lock: LockConfig::new(args.key.unwrap_or_default(), &redis, passwords)?,
                    check: CheckConfig {
                        critical,
                        warning: args.warn_within,
                        json: args.json,
                    },
                }
            }
            Some(Action::List(ListArgs { glob, json, all })) => {
                let (servers, exposed_key) = LockConfig::servers(&redis, passwords)?;
                Invocation::List(ListConfig {
                    servers,
                    exposed_key,
                    prefix: redis.prefix,
                    glob,
                    json,
                    all,
                })
            }
        })
    }

    /// `--redis-key-file`, if others than its owner may read it: worth one
    /// warning line.
    pub(crate) fn exposed_key(&self) -> Option<&ExposedKey> {
        match self {
            Invocation::Run(config) => config.lock.exposed_key.as_ref(),
            Invocation::Status { lock, .. }
            | Invocation::Release { lock, .. }
            | Invocation::History { lock, .. }
            | Invocation::Check { lock, .. } => lock.exposed_key.as_ref(),
            Invocation::List(list) => list.exposed_key.as_ref(),
        }
    }

    pub(crate) fn verbosity(&self) -> Verbosity {
        match self {
            Invocation::Run(config) => config.verbosity,
            Invocation::Status { .. }
            | Invocation::Release { .. }
            | Invocation::List(_)
            | Invocation::History { .. }
            | Invocation::Check { .. } => Verbosity::Normal,
        }
    }
}

impl RunConfig {
    fn from_args(
        mut args: RunArgs,
        redis: &RedisSettings,
        passwords: Passwords,
    ) -> Result<Self, Error> {
        let key = args.key.take().unwrap_or_default();
        let mut lock = LockConfig::new(key, redis, passwords)?;
        // Sentinel and Cluster exist to survive a failover; without
        // acknowledgement a failover can lose the lease.
        let replicated = lock
            .servers
            .targets()
            .first()
            .is_some_and(Target::is_replicated);
        let replica_acks = args.replica_acks.unwrap_or(if replicated {
            ReplicaAcks::All
        } else {
            ReplicaAcks::Count(0)
        });
        // The one timing setting the configuration file may give.
        let redis_timeout = redis.named("--redis-timeout");
        let timing = timing(
            bounded("--ttl", args.ttl)?,
            bounded_if_given("--renew-every", args.renew_every)?,
            bounded_if_given(
                &redis_timeout,
                positive(&redis_timeout, args.redis_timeout)?,
            )?,
            bounded_if_given("--kill-grace", args.kill_grace)?,
        )?;
        if args.redis_timeout.is_none() {
            for target in lock.servers.targets_mut() {
                target.set_limit_from_ttl(timing.redis_timeout, timing.ttl);
            }
        }
        let holding = holding(&args, lock.servers.targets().len() > 1)?;
        let verbosity = match (args.quiet, args.verbose) {
            (true, _) => Verbosity::Quiet,
            (_, true) => Verbosity::Verbose,
            _ => Verbosity::Normal,
        };
        Ok(RunConfig {
            lock,
            timing,
            replica_acks,
            wait: match args.wait {
                Some(Wait::Up(limit)) => Some(Wait::Up(bounded("--wait", limit)?)),
                other => other,
            },
            supersede: args.supersede,
            busy_exit_code: args.busy_exit_code,
            min_hold: bounded_if_given("--min-hold", positive("--min-hold", args.min_hold)?)?,
            holding,
            timeout: bounded_if_given("--timeout", positive("--timeout", args.timeout)?)?,
            metrics_file: args.metrics_file,
            history: args.history.unwrap_or(DEFAULT_HISTORY),
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
    fn new(name: String, redis: &RedisSettings, passwords: Passwords) -> Result<Self, Error> {
        if name.is_empty() {
            return Err(Error::Usage("--key must not be empty".into()));
        }
        let (servers, exposed_key) = Self::servers(redis, passwords)?;
        Ok(LockConfig {
            keys: Keys::new(&redis.prefix, &name),
            name,
            servers,
            exposed_key,
        })
    }

    /// The servers that `--redis` names, with their passwords and TLS; and
    /// the key file, if others may read it.
    fn servers(
        redis: &RedisSettings,
        passwords: Passwords,
    ) -> Result<(Servers, Option<ExposedKey>), Error> {
        if redis.urls.is_empty() {
            return Err(redis.none_named());
        }
        let password = secrets::password(
            passwords.redis,
            redis.password_file.as_deref(),
            &redis.named("--redis-password-file"),
        )?;
        let mut targets = redis
            .urls
            .iter()
            .map(|(url, source)| {
                Target::parse(url, password.clone())
                    .map(|target| {
                        target
                            .with_source(source.clone())
                            .with_sentinel_password(passwords.sentinel.clone())
                            .with_password_file(redis.password_file.clone())
                    })
                    .map_err(|_| Error::Usage(url_refusal(url, source)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (tls, exposed_key) = tls_files::read(redis, targets.iter().any(Target::is_tls))?;
        if let Some(tls) = tls {
            targets = tls_files::using(targets, &tls)?;
        }
        let servers = match targets.len() {
            0 => return Err(redis.none_named()),
            1 => Servers::One(Box::new(targets.remove(0))),
            2 => {
                return Err(Error::Usage(
                    "--redis given twice: a quorum needs 3 or more servers (5 survives two \
                     failures); give one URL for a single server"
                        .into(),
                ))
            }
            _ => Servers::Quorum(targets),
        };
        Ok((servers, exposed_key))
    }
}

/// Refuses a duration past `MAX_DURATION`.
fn bounded(flag: &str, value: Duration) -> Result<Duration, Error> {
    if value <= MAX_DURATION {
        return Ok(value);
    }
    Err(Error::Usage(format!(
        "{flag} {} is too long; use {MAX_DURATION_TEXT} (365.25 days) or less",
        show_exact(value)
    )))
}

fn bounded_if_given(flag: &str, value: Option<Duration>) -> Result<Option<Duration>, Error> {
    value.map(|d| bounded(flag, d)).transpose()
}

/// How a run holds the lock, from `--slots`, `--shared` and `--once-per`,
/// refusing what lockrun cannot promise.
fn holding(args: &RunArgs, quorum: bool) -> Result<Holding, Error> {
    let holding = match (args.slots, args.shared) {
        (None | Some(1), false) => Holding::Alone {
            once_per: bounded_if_given("--once-per", positive("--once-per", args.once_per)?)?,
            slot_zero: args.slots.is_some(),
        },
        (None | Some(1), true) => Holding::Shared,
        (Some(n), false) => Holding::Slots(n),
        (Some(n), true) => {
            return Err(Error::Usage(format!(
                "--shared and --slots {n} do not combine: give --slots N for at most N at \
                 once, or --shared for readers beside an exclusive writer"
            )))
        }
    };
    let what = match holding {
        Holding::Alone { .. } => return Ok(holding),
        Holding::Shared => "--shared".to_owned(),
        Holding::Slots(n) => format!("--slots {n}"),
    };
    if args.once_per.is_some() {
        return Err(Error::Usage(format!(
            "--once-per is for runs that hold the lock alone, not with {what}"
        )));
    }
    if quorum {
        return Err(Error::Usage(format!(
            "{what} needs one server, a Sentinel service or a cluster: a quorum of \
             --redis servers holds the lock for one run at a time"
        )));
    }
    Ok(holding)
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
            show_exact(ttl)
        )));
    }
    let renew_every = positive("--renew-every", renew_every)?;
    let with_ttl = |ttl: Duration| Timing {
        ttl,
        renew_every: renew_every.unwrap_or(ttl / 3),
        redis_timeout: redis_timeout.unwrap_or((ttl / 10).min(MAX_DEFAULT_REDIS_TIMEOUT)),
        kill_grace: kill_grace.unwrap_or((ttl / 4).min(MAX_DEFAULT_KILL_GRACE)),
    };
    let timing = with_ttl(ttl);
    if timing.needed() < ttl {
        return Ok(timing);
    }
    Err(Error::Usage(unsafe_timing(&timing, with_ttl)))
}

/// Why `timing` does not fit its ttl, and the smallest change that would:
/// a ttl as a person writes it that fits with the other values as given
/// (`with_ttl`: those left to their defaults scale with the ttl).
fn unsafe_timing(timing: &Timing, with_ttl: impl Fn(Duration) -> Timing) -> String {
    let ttl = timing.ttl;
    // The smallest ttl that fits the values now: renew + timeout + grace +
    // ttl/100 + 2ms < ttl.
    let fixed = timing.renew_every + timing.redis_timeout + timing.kill_grace;
    let min_ttl_ms = fixed.as_millis().saturating_add(2).saturating_mul(100) / 99 + 1;
    let mut min_ttl = Duration::from_millis(u64::try_from(min_ttl_ms).unwrap_or(u64::MAX));
    // Rounded up to what a person writes, then up again while the defaults
    // that grow with it still do not fit: a few steps at most, as they add
    // up to less than the ttl.
    for _ in 0..100 {
        let shown = limit(min_ttl, true);
        let next = with_ttl(shown);
        if next.needed() < shown {
            min_ttl = shown;
            break;
        }
        min_ttl = next.needed().max(shown + Duration::from_millis(1));
    }
    let grace_room = ttl.saturating_sub(timing.needed().saturating_sub(timing.kill_grace));
    let mut advice = format!("use --ttl {} or more", show_exact(min_ttl));
    if grace_room > Duration::from_millis(1) {
        let grace = grace_room.saturating_sub(Duration::from_millis(1));
        let _ = write!(
            advice,
            ", or --kill-grace {} or less",
            show_exact(limit(grace, false))
        );
    }
    format!(
        "unsafe timing: renew every {} + redis timeout {} + kill grace {} + clock-drift \
         allowance {} = {}, which does not fit inside the ttl of {}; {advice}",
        show_exact(timing.renew_every),
        show_exact(timing.redis_timeout),
        show_exact(timing.kill_grace),
        show_exact(timing.drift()),
        show_exact(timing.needed()),
        show_exact(ttl),
    )
}

#[cfg(test)]
mod tests;
