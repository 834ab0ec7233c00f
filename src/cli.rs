//! The command line: flags and help text (value parsers in `cli/values`), nothing else.
//!
//! Rules that clap cannot express (timing that must fit inside the ttl,
//! defaults that scale with it) live in `config`, which turns these raw flags
//! into validated settings.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueHint};

use crate::error::Error;
use crate::lock::ReplicaAcks;
use crate::report::Format;
use crate::wait::Wait;

mod usage;
mod values;

use values::{log_format_parser, parse_duration, parse_replica_acks, parse_wait};

pub(crate) use usage::{check, closest, log_format_hint};

const ABOUT: &str = "Run a command under a distributed lock held in Redis";

const LONG_ABOUT: &str = "\
Run a command under a distributed lock held in Redis, so that two copies of the \
same job never run at once, across machines.

lockrun takes a lease on the key with a random token, renews it while the command \
runs, and releases it when the command exits. If the lease can no longer be proven \
(Redis unreachable, the key gone or taken over), lockrun stops the command's whole \
process group before the lease can expire for anyone else, and exits 76. The command \
gets a fencing token in LOCKRUN_FENCING_TOKEN that grows with every acquisition, so \
the resource it writes to can reject a stale holder.

Name the Redis server on every host: --redis URL, LOCKRUN_REDIS_URL, or the line \
`redis = URL` in /etc/lockrun.conf (LOCKRUN_CONFIG names another file), in that \
order. With none, lockrun exits 64 and sends nothing: it never guesses a local \
server, which would give each host a lock of its own.

Durations take a unit: 500ms, 30s, 2m, 1h30m; none may be longer than 1y (365.25 days). \
A flag given twice takes its last value, except --redis: three or more \
--redis make a quorum, a lock held on a majority of independent servers.";

// Each line fits an 80-column terminal.
const EXAMPLES: &str = "\
Examples:
  lockrun --redis redis://10.0.0.5:6379 --key billing -- ./invoice.sh
  # with the server in /etc/lockrun.conf or LOCKRUN_REDIS_URL:
  # cron: skip silently when another host runs it
  lockrun --key billing --busy-exit-code 0 -- ./invoice.sh
  # CI: queue behind the running deploy for at most 15 minutes
  lockrun --key deploy --wait 15m -- ./deploy.sh
  # who holds it
  lockrun status --key billing";

/// Where `-h` sends the reader for what it leaves out.
const MORE: &str = "\
Every option (TLS, passwords, slots, metrics...) and the exit statuses: lockrun --help.
The manual, with the configuration file: man lockrun.";

const EXIT_STATUS: &str = "\
Exit status:
  N        the command's own exit status
  128+N    the command died of signal N, or lockrun got signal N while waiting:
           lockrun ends by signal N itself, after releasing the lock
  75       the lock is busy (see --busy-exit-code); the command did not run
  79       superseded in line by a newer --supersede run; the command did not run
  76       the lease was lost while the command ran; lockrun stopped it
  69       Redis unreachable, failing or loading before the command started,
           or a lock key holds another type
  64       usage error, bad configuration file, or no Redis server named
  70       internal error
  124      --timeout elapsed; lockrun stopped the command
  126/127  command not executable / not found";

/// Where the settings come from, in `--help`.
const SETTINGS: &str = "\
Settings:
  An option wins over its environment variable, which wins over the
  configuration file: /etc/lockrun.conf, or the file LOCKRUN_CONFIG names
  (LOCKRUN_CONFIG= reads none). See FILES in lockrun(1).";

/// Everything lockrun accepts on its command line.
#[derive(Debug, Parser)]
#[command(
    name = "lockrun",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = format!("{EXAMPLES}\n\n{MORE}"),
    after_long_help = format!("{EXAMPLES}\n\n{EXIT_STATUS}\n\n{SETTINGS}"),
    subcommand_value_name = "SUBCOMMAND",
    subcommand_help_heading = "Subcommands",
    subcommand_negates_reqs = true,
    // -h and --help cover every form; a `help` subcommand would be a third
    // spelling to document and to complete next to status and release.
    disable_help_subcommand = true,
    // The last of a repeated flag wins (`--wait forever --wait 1s` waits 1s),
    // so that a wrapper can append its own flags to the caller's. A global
    // setting: it holds in the subcommands too.
    args_override_self = true,
    max_term_width = 100
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) action: Option<Action>,

    /// Where the lock lives: global, so that it goes before or after a
    /// subcommand alike (`lockrun --redis URL status --key K`).
    #[command(flatten)]
    pub(crate) redis: RedisArgs,

    #[command(flatten)]
    pub(crate) run: RunArgs,

    /// The long options whose values came from the configuration file, for
    /// messages: set by `parse`, from clap's own record.
    #[arg(skip)]
    pub(crate) from_file: Vec<&'static str>,
}

/// The subcommands an operator uses to inspect or clear a lock.
#[derive(Debug, Subcommand)]
pub(crate) enum Action {
    /// Show who holds a lock, for how long, its fencing token, and who waits
    #[command(
        long_about = "Show who holds a lock: host, pid, command, time held, lease time left \
                      and fencing token; then the runs waiting in line, first come first. \
                      Exits 0 when the lock is held, 1 when it is free, 69 when Redis cannot \
                      be asked."
    )]
    #[command(override_usage = "lockrun status [OPTIONS] --key <NAME>")]
    Status(StatusArgs),
    /// Remove a lock whoever holds it (needs --force)
    #[command(
        long_about = "Remove a lock whoever holds it and print what was removed. The run that \
                      held it notices at its next renewal, stops its command and exits 76. \
                      Refuses without --force."
    )]
    #[command(override_usage = "lockrun release [OPTIONS] --key <NAME> --force")]
    Release(ReleaseArgs),
    /// List the locks that are held or have runs waiting, one line each
    #[command(
        long_about = "List every lock under the prefix that is held or has runs waiting: \
                      holder, time held, lease time left, fencing token and how many wait, \
                      one line each. Finds them with SCAN, reads each as lockrun status \
                      does. Exits 0 when it lists any, 1 when there is none, 69 when Redis \
                      cannot be asked."
    )]
    List(ListArgs),
    /// Show the last runs of a lock, newest first, one line each
    #[command(
        long_about = "Show the last runs of a lock as their releases recorded them, newest \
                      first, one line each: fencing token, start, host, pid, command, how \
                      long it held the lock and how it ended; the slot and the wait where \
                      they apply. Exits 0 when any run is recorded, 1 when none is, 69 when \
                      Redis cannot be asked."
    )]
    #[command(override_usage = "lockrun history [OPTIONS] --key <NAME>")]
    History(HistoryArgs),
    /// Say whether a lock's job succeeded recently, for monitoring systems
    #[command(
        long_about = "Say, as a monitoring plugin does, whether the lock's job succeeded \
                      within --succeeded-within: one line of text first, then exit 0 OK, 1 \
                      WARNING (the success is older than --warn-within, the last run \
                      failed, or the lock is held far longer than its runs take), 2 CRITICAL \
                      (no success within --succeeded-within) or 3 UNKNOWN (Redis cannot be \
                      asked)."
    )]
    #[command(
        override_usage = "lockrun check [OPTIONS] --key <NAME> --succeeded-within <DURATION>"
    )]
    Check(CheckArgs),
}

/// Flags of `lockrun [OPTIONS] --key NAME -- COMMAND...`.
#[derive(Debug, Args)]
// A command line's switches are bools; clap reads each into its own field.
#[allow(clippy::struct_excessive_bools)]
pub(crate) struct RunArgs {
    /// Lock name; runs that share it never overlap
    ///
    /// The command gets it in LOCKRUN_KEY.
    #[arg(short, long, value_name = "NAME", required = true, value_hint = ValueHint::Other)]
    pub(crate) key: Option<String>,

    /// Lease length written to Redis
    ///
    /// A run that dies holds the lock at most this long. One renewal period,
    /// one Redis timeout, the kill grace and ttl/100 + 2ms must fit inside it.
    /// At most 1y, like every duration.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, value_hint = ValueHint::Other)]
    pub(crate) ttl: Duration,

    /// Heartbeat period [default: ttl/3]
    ///
    /// Must fit inside the ttl (see --ttl).
    #[arg(hide_short_help = true, long, value_name = "DURATION", value_parser = parse_duration, value_hint = ValueHint::Other)]
    pub(crate) renew_every: Option<Duration>,

    /// Time limit of each Redis call [default: ttl/10, at most 2s]
    ///
    /// Must fit inside the ttl (see --ttl). A call takes at least one round
    /// trip to Redis (two where the server lacks lockrun's scripts, or a
    /// connection is opened again): over a slow link, give more than that,
    /// or a longer --ttl.
    #[arg(hide_short_help = true, long, value_name = "DURATION", value_parser = parse_duration, value_hint = ValueHint::Other)]
    pub(crate) redis_timeout: Option<Duration>,

    /// Replicas that must have the lease before it counts: N, or all
    /// [default: all with redis+sentinel:// and redis+cluster://, else 0]
    ///
    /// After acquiring and after each renewal, lockrun asks the primary to
    /// WAIT until this many replicas have the write, within --redis-timeout;
    /// "all" means every replica online that acknowledged within 2s, 0 not
    /// to wait.
    /// With too few, the command does not start (the lock is given back and
    /// lockrun exits 69, or keeps waiting under --wait), and a renewal counts
    /// as failed.
    #[arg(hide_short_help = true, long, value_name = "N|all", value_parser = parse_replica_acks)]
    pub(crate) replica_acks: Option<ReplicaAcks>,

    /// Grace between SIGTERM and SIGKILL [default: ttl/4, at most 5s]
    ///
    /// Used when lockrun itself must stop the command: the lease is lost or
    /// --timeout elapsed. 0 means no grace: SIGKILL right after SIGTERM.
    /// Must fit inside the ttl (see --ttl).
    #[arg(hide_short_help = true, long, value_name = "DURATION", value_parser = parse_duration, value_hint = ValueHint::Other)]
    pub(crate) kill_grace: Option<Duration>,

    /// Wait this long for a held lock, or "forever" [default: no wait]
    ///
    /// Waiting runs get the lock first come, first served: the moment the
    /// holder releases it, or when its lease runs out. A run without --wait
    /// is busy while others wait in line. A waiting run also keeps trying
    /// while Redis cannot be reached or refuses it for now (down or
    /// restarting, a failover, maxclients reached, loading, a quorum short
    /// of a majority); --wait bounds connecting too. At most 1y, or forever.
    #[arg(short, long, value_name = "DURATION|forever", value_parser = parse_wait, value_hint = ValueHint::Other)]
    pub(crate) wait: Option<Wait>,

    /// Give up the place in line to a newer run with --supersede
    ///
    /// For deploys: a waiting run with this flag ends (exit 79, "superseded
    /// by HOST pid N") as soon as a newer run with it starts waiting for the
    /// same key. Three pushes in quick succession deploy the first and the
    /// last. The run holding the lock is never touched.
    #[arg(hide_short_help = true, long, requires = "wait")]
    pub(crate) supersede: bool,

    /// Let up to N runs of the key hold it at once, each in its own slot
    ///
    /// Each holder has its own lease and gets its slot, 0 to N-1 (the lowest
    /// free one), in LOCKRUN_SLOT; fencing tokens come from the key's one
    /// counter. Runs of one key must agree on N while any holds or waits (a
    /// run without --slots counts as 1); another N exits 64. At most 1000.
    #[arg(hide_short_help = true, long, value_name = "N", env = "LOCKRUN_SLOTS", hide_env_values = true, value_parser = clap::value_parser!(u32).range(1..=1000), value_hint = ValueHint::Other)]
    pub(crate) slots: Option<u32>,

    /// Hold the lock together with other --shared runs, as readers do
    ///
    /// A run without it holds the key alone, after every shared run ends.
    /// The line stays first come, first served across both: a shared run
    /// behind a waiting exclusive one waits behind it, and shared runs first
    /// in line are let in together.
    #[arg(hide_short_help = true, long)]
    pub(crate) shared: bool,

    /// Exit status when the lock is busy; 0 skips silently
    ///
    /// 0 suits cron and other callers that should treat "already running
    /// elsewhere" as success, and makes lockrun silent about it as well
    /// (--verbose still names the holder).
    #[arg(long, value_name = "N", default_value_t = crate::exit_code::BUSY_DEFAULT, value_hint = ValueHint::Other)]
    pub(crate) busy_exit_code: u8,

    /// Keep the lock at least this long after acquiring it
    ///
    /// When the command ends sooner, the lock is kept until then, so that a
    /// host whose cron fires a little later (clock skew) does not run the same
    /// job again. At most 1y.
    #[arg(hide_short_help = true, long, value_name = "DURATION", value_parser = parse_duration, value_hint = ValueHint::Other)]
    pub(crate) min_hold: Option<Duration>,

    /// Run the command at most once per this period: skip it after a success
    ///
    /// When the command exits 0, the success is recorded with the lock for
    /// this long, counted on Redis's clock from when the run got the lock.
    /// A run that gets the lock meanwhile exits 0 without running the
    /// command. A failed run records nothing. For exclusive runs; at most 1y.
    #[arg(hide_short_help = true, long, value_name = "DURATION", env = "LOCKRUN_ONCE_PER", hide_env_values = true, value_parser = parse_duration, value_hint = ValueHint::Other)]
    pub(crate) once_per: Option<Duration>,

    /// Stop the command after this long and exit 124
    ///
    /// As timeout(1) does: SIGTERM to the command's process group, then
    /// SIGKILL after the kill grace. At most 1y.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, value_hint = ValueHint::Other)]
    pub(crate) timeout: Option<Duration>,

    /// Keep Prometheus metrics of the runs in this file
    ///
    /// For node_exporter's textfile collector: a name ending in .prom in its
    /// directory. Per key: whether this host runs the command, when it took
    /// the lock, the last exit status, success, wait and hold time, and runs
    /// by outcome. Updated when the lock is taken and when the run ends, by
    /// rename under a lock on PATH.lock, so every lockrun on the host may
    /// share one file. A file that cannot be written costs one warning; the
    /// run goes on.
    #[arg(hide_short_help = true, long, value_name = "PATH", env = "LOCKRUN_METRICS_FILE", hide_env_values = true, value_hint = ValueHint::FilePath)]
    pub(crate) metrics_file: Option<PathBuf>,

    /// Keep the last N runs of the key in its history [default: 20]
    ///
    /// Each run that started the command records, in its release's own
    /// call: host, pid, user, fencing token (and slot), when it asked,
    /// started and ended, and how it ended; the command's name only, not
    /// its arguments. lockrun history, status and check read it. 0 records
    /// nothing (and leaves other runs' records). At most 10000.
    #[arg(hide_short_help = true, long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=10000), value_hint = ValueHint::Other)]
    pub(crate) history: Option<u32>,

    /// Print nothing when the lock is busy
    #[arg(short, long, conflicts_with = "verbose")]
    pub(crate) quiet: bool,

    /// Log each acquire, renewal and release to stderr
    #[arg(short, long)]
    pub(crate) verbose: bool,

    /// How lockrun writes its lines on stderr: text or json [default: text]
    ///
    /// json writes each line as one JSON object: ts, level, event, key, host,
    /// pid, message (the text line) and the event's own fields (see LOG
    /// FORMAT in lockrun(1)). The same lines as text: --quiet and --verbose
    /// choose which.
    #[arg(
        long,
        value_name = "FORMAT",
        env = "LOCKRUN_LOG_FORMAT",
        hide_env_values = true,
        hide_short_help = true,
        value_parser = log_format_parser()
    )]
    pub(crate) log_format: Option<Format>,

    /// The command to run and its arguments, after `--`
    ///
    /// Run directly, without a shell, in a process group of its own. It gets
    /// LOCKRUN_KEY and LOCKRUN_FENCING_TOKEN in its environment.
    #[arg(
        last = true,
        required = true,
        value_name = "COMMAND",
        value_hint = ValueHint::CommandWithArguments
    )]
    pub(crate) command: Vec<OsString>,
}

/// Where the lock lives and how to reach it: the run's and every
/// subcommand's, given before or after the subcommand. Each may come from
/// the configuration file too (`config/file`), so none has a default here.
#[derive(Debug, Args)]
pub(crate) struct RedisArgs {
    /// Where Redis is: redis://HOST[:PORT], rediss://... (TLS), unix:///PATH
    ///
    /// Required, from this option, LOCKRUN_REDIS_URL or the configuration
    /// file, in that order (see FILES in lockrun(1)); with none, lockrun
    /// exits 64 and sends nothing anywhere. The forms:
    /// redis://[USER[:PASSWORD]@]HOST[:PORT][/DB], rediss://... (TLS,
    /// certificate verified), unix:///PATH or redis+unix:///PATH. Behind
    /// Sentinel: redis+sentinel://[USER[:PASSWORD]@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB]
    /// (the sentinels; port 26379 by default; their own password in
    /// LOCKRUN_SENTINEL_PASSWORD). A cluster:
    /// redis+cluster://[USER[:PASSWORD]@]HOST[:PORT][,HOST[:PORT]...]. rediss+sentinel://
    /// and rediss+cluster:// use TLS. Give the password in LOCKRUN_REDIS_PASSWORD
    /// or --redis-password-file instead, so that it stays out of ps and out of
    /// the command's environment. Given three or more times: a quorum of
    /// independent servers, the lock held on a majority of them (Redlock),
    /// with fencing tokens that grow across the quorum; an odd count
    /// survives as many failures as the next even one.
    #[arg(
        long = "redis",
        value_name = "URL",
        env = "LOCKRUN_REDIS_URL",
        hide_env_values = true,
        global = true,
        action = clap::ArgAction::Append,
        value_hint = ValueHint::Other
    )]
    pub(crate) url: Vec<String>,

    /// File holding the Redis password, on one line
    ///
    /// Instead of LOCKRUN_REDIS_PASSWORD (never both); either replaces a
    /// password in the URL. Refused if every user may read it. Suits systemd
    /// credentials: LoadCredential=NAME:PATH and
    /// LOCKRUN_REDIS_PASSWORD_FILE=%d/NAME. The command inherits
    /// LOCKRUN_REDIS_PASSWORD_FILE, so a nested lockrun finds the password.
    #[arg(
        long = "redis-password-file",
        value_name = "PATH",
        env = "LOCKRUN_REDIS_PASSWORD_FILE",
        hide_env_values = true,
        hide_short_help = true,
        global = true,
        value_hint = clap::ValueHint::FilePath
    )]
    pub(crate) password_file: Option<PathBuf>,

    /// CA certificates (PEM) to trust for TLS to Redis
    ///
    /// For rediss:// URLs signed by a private CA, as managed Redis services
    /// often use: the server's certificate must then chain to one of these,
    /// and the system's CAs are not consulted (as with redis-cli --cacert).
    /// Without it, the system's trust store (or SSL_CERT_FILE). Either way
    /// the certificate must name the host in the URL, or the address a
    /// sentinel or cluster gives.
    #[arg(
        long = "redis-ca-file",
        value_name = "PATH",
        env = "LOCKRUN_REDIS_CA_FILE",
        hide_env_values = true,
        hide_short_help = true,
        global = true,
        value_hint = clap::ValueHint::FilePath
    )]
    pub(crate) ca_file: Option<PathBuf>,

    /// Client certificate (PEM) to show Redis over TLS
    ///
    /// For servers that ask clients for a certificate (mutual TLS: Redis's
    /// tls-auth-clients, the default), as redis-cli --cert does. Any
    /// intermediate certificates follow it in the file. Shown to every
    /// server and sentinel lockrun reaches; needs --redis-key-file.
    #[arg(
        long = "redis-cert-file",
        value_name = "PATH",
        env = "LOCKRUN_REDIS_CERT_FILE",
        hide_env_values = true,
        hide_short_help = true,
        global = true,
        value_hint = clap::ValueHint::FilePath
    )]
    pub(crate) cert_file: Option<PathBuf>,

    /// Private key (PEM) of --redis-cert-file
    ///
    /// Unencrypted, as redis-cli --key takes it. lockrun warns when users
    /// other than the file's owner may read it.
    #[arg(
        long = "redis-key-file",
        value_name = "PATH",
        env = "LOCKRUN_REDIS_KEY_FILE",
        hide_env_values = true,
        hide_short_help = true,
        global = true,
        value_hint = clap::ValueHint::FilePath
    )]
    pub(crate) key_file: Option<PathBuf>,

    /// Prefix of every Redis key [default: lockrun:]
    ///
    /// Runs see each other's locks only under the same prefix.
    #[arg(
        long,
        value_name = "P",
        env = "LOCKRUN_PREFIX",
        hide_env_values = true,
        hide_short_help = true,
        global = true,
        value_hint = ValueHint::Other
    )]
    pub(crate) prefix: Option<String>,

    /// Whether the URLs came from LOCKRUN_REDIS_URL rather than `--redis`,
    /// for messages: set by `parse`, from clap's own record.
    #[arg(skip)]
    pub(crate) url_from_env: bool,
}

/// Flags of `lockrun status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Lock name
    ///
    /// Required, here or before the subcommand (`lockrun --key K status`).
    #[arg(short, long, value_name = "NAME", value_hint = ValueHint::Other)]
    pub(crate) key: Option<String>,

    /// Print one JSON object on stdout instead of text
    #[arg(long)]
    pub(crate) json: bool,
}

/// Flags of `lockrun release`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// Lock name
    ///
    /// Required, here or before the subcommand (`lockrun --key K release`).
    #[arg(short, long, value_name = "NAME", value_hint = ValueHint::Other)]
    pub(crate) key: Option<String>,

    /// Really remove a lock that another run may hold
    #[arg(long)]
    pub(crate) force: bool,

    /// Remove only the holder with this token (from lockrun status)
    ///
    /// For a lock held by several runs (--slots, --shared): the others keep
    /// theirs.
    #[arg(long, value_name = "TOKEN", requires = "force", value_hint = ValueHint::Other)]
    pub(crate) holder: Option<String>,
}

/// Flags of `lockrun history`.
#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// Lock name
    ///
    /// Required, here or before the subcommand (`lockrun --key K history`).
    #[arg(short, long, value_name = "NAME", value_hint = ValueHint::Other)]
    pub(crate) key: Option<String>,

    /// Show only the last N runs
    #[arg(short = 'n', long = "last", value_name = "N", value_hint = ValueHint::Other)]
    pub(crate) last: Option<usize>,

    /// Print one JSON array on stdout instead of text
    #[arg(long)]
    pub(crate) json: bool,
}

/// Flags of `lockrun check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Lock name
    ///
    /// Required, here or before the subcommand (`lockrun --key K check`).
    #[arg(short, long, value_name = "NAME", value_hint = ValueHint::Other)]
    pub(crate) key: Option<String>,

    /// CRITICAL unless a run succeeded within this long (25h for a nightly job)
    #[arg(long, value_name = "DURATION", required = true, value_parser = parse_duration, value_hint = ValueHint::Other)]
    pub(crate) succeeded_within: Option<Duration>,

    /// WARNING unless a run succeeded within this long (shorter than --succeeded-within)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, value_hint = ValueHint::Other)]
    pub(crate) warn_within: Option<Duration>,

    /// Print one JSON object on stdout instead of the line of text
    #[arg(long)]
    pub(crate) json: bool,
}

/// Flags of `lockrun list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only the locks whose name matches this Redis glob (*, ?, [abc])
    #[arg(value_name = "GLOB", default_value = "*", value_hint = ValueHint::Other)]
    pub(crate) glob: String,

    /// Print one JSON array on stdout instead of text
    #[arg(long)]
    pub(crate) json: bool,

    /// Also list free locks, of which only the fencing counter is left
    #[arg(long)]
    pub(crate) all: bool,
}

/// Parses lockrun's own command line. `cmd` is `command()`; `file` the
/// configuration file's settings, each an option's long name and values,
/// which become that option's default: clap takes an option over its
/// environment variable, and either over a default. `Ok(None)` means clap
/// already printed what was asked for (`--help`, `--version`): nothing is
/// left to do.
pub(crate) fn parse(
    cmd: clap::Command,
    file: Vec<(&'static str, Vec<OsString>)>,
) -> Result<Option<Cli>, Error> {
    let args: Vec<_> = std::env::args_os().collect();
    match parse_from(cmd, file, &args) {
        Ok(cli) => Ok(Some(cli)),
        // --help and --version are not errors.
        Err(err) if !err.use_stderr() => {
            let _ = err.print();
            Ok(None)
        }
        Err(err) => Err(Error::Usage(usage::one_line(&err, &args))),
    }
}

/// `args` (program name first) as lockrun's command line over the settings
/// of `file` (see `parse`), with where the URLs and settings came from.
pub(crate) fn parse_from(
    mut cmd: clap::Command,
    file: Vec<(&'static str, Vec<OsString>)>,
    args: &[OsString],
) -> Result<Cli, clap::Error> {
    let mut preset = Vec::new();
    for (name, values) in file {
        let Some(arg) = cmd.get_arguments().find(|arg| arg.get_long() == Some(name)) else {
            continue;
        };
        let (id, global) = (arg.get_id().clone(), arg.is_global_set());
        // Hidden from --help: a URL there may hold a password.
        cmd = cmd.mut_arg(&id, |arg| {
            arg.default_values(values).hide_default_value(true)
        });
        preset.push((name, id, global));
    }
    let matches = cmd.try_get_matches_from_mut(args)?;
    // A global option's value is recorded where it was given; clap copies
    // it into the subcommand's matches, so the deepest level has it.
    let level = matches.subcommand().map_or(&matches, |(_, sub)| sub);
    if let Some((name, _)) = matches.subcommand() {
        // The Redis options are global and go before a subcommand too, and
        // so does the lock's name for the subcommands that take one; a
        // run's own options do not apply to a subcommand.
        let takes_key = matches!(name, "status" | "release" | "history" | "check");
        let given = cmd
            .get_arguments()
            .filter(|arg| !arg.is_global_set())
            .filter(|arg| !(takes_key && arg.get_id() == "key"))
            .find(|arg| {
                matches.value_source(arg.get_id().as_str())
                    == Some(clap::parser::ValueSource::CommandLine)
            })
            .map(|arg| {
                arg.get_long()
                    .map_or_else(String::new, |long| format!("--{long}"))
            });
        if let Some(flag) = given {
            return Err(cmd.error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("{flag} is an option of a run, not of 'lockrun {name}'"),
            ));
        }
    }
    let mut cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches)?;
    let before = cli.run.key.take();
    if let Some(key) = match &mut cli.action {
        Some(
            Action::Status(StatusArgs { key, .. })
            | Action::Release(ReleaseArgs { key, .. })
            | Action::History(HistoryArgs { key, .. })
            | Action::Check(CheckArgs { key, .. }),
        ) => Some(key),
        _ => None,
    } {
        if key.is_some() && before.is_some() && *key != before {
            return Err(cmd.error(
                clap::error::ErrorKind::ArgumentConflict,
                "--key is given twice, with two names: give it once",
            ));
        }
        *key = key.take().or(before);
        if key.is_none() {
            return Err(cmd.error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "the following required arguments were not provided: --key <NAME>",
            ));
        }
    } else {
        cli.run.key = before;
    }
    cli.redis.url_from_env =
        level.value_source("url") == Some(clap::parser::ValueSource::EnvVariable);
    cli.from_file = preset
        .into_iter()
        .filter(|(_, id, global)| {
            let at = if *global { level } else { &matches };
            at.value_source(id.as_str()) == Some(clap::parser::ValueSource::DefaultValue)
        })
        .map(|(name, _, _)| name)
        .collect();
    Ok(cli)
}

/// The clap definition, for generating the man page and completions.
#[must_use]
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[cfg(test)]
mod tests;
