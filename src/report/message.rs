//! Everything lockrun says, one variant each. A message's one arm in `said`
//! makes both its line for people and its event for `--log-format json`,
//! from the same fields, and says who sees it. The error that ends a run is
//! said the same way, its arms in `failure`.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::clock::{show, show_exact};
use crate::error::{Error, Unreleased};
use crate::exit_code;
use crate::lease::Loss;
use crate::lock::{DoneRecord, Servers};

use super::event::Event;
use super::failure;

/// One thing lockrun says, with what it says of it.
#[derive(Debug)]
pub(crate) enum Message<'a> {
    /// The settings file that was read.
    Config {
        path: &'a Path,
    },
    /// `--redis-key-file` that users other than its owner may read.
    KeyFileReadable {
        path: &'a Path,
        mode: u32,
    },
    /// The lock is taken and the command started.
    Acquired {
        lock: &'a str,
        on: &'a Servers,
        fence: u64,
        slot: Option<u32>,
        waited: Duration,
        pid: i32,
    },
    /// `--replica-acks all` against a primary that does not know WAIT.
    NoWait {
        lock: &'a str,
    },
    /// `--replica-acks all` found no replica connected to the primary.
    NoReplica {
        lock: &'a str,
    },
    /// `--redis` given an even number of times.
    EvenQuorum {
        servers: usize,
    },
    /// The job ran already this period (`--once-per`): who ran it, when,
    /// and when the period ends, on Redis's clock.
    Skipped {
        lock: &'a str,
        done: &'a DoneRecord,
    },
    /// Waiting in line (`place` is this run's, the last when it joined), or
    /// trying again without a place (`place: None`).
    Waiting {
        lock: &'a str,
        waiting: u64,
        place: Option<u64>,
        /// The lock is held, rather than short of a majority.
        held: bool,
    },
    /// What an attempt may have taken could not be given back on `server`.
    GiveBackFailed {
        server: &'a str,
        cause: String,
        expires_within: Duration,
    },
    /// No wake-up messages: the waiting run polls.
    Polling {
        why: &'a str,
    },
    /// The ACL refused the wake-up messages; `why` names the rule to add.
    PollingRefused {
        why: &'a str,
    },
    /// The lock's servers fail while the run waits.
    RedisFailing {
        error: String,
    },
    /// The lock's servers answer again.
    RedisBack {
        servers: &'a str,
    },
    /// The lease was renewed.
    Renewed {
        key: &'a str,
        lease_left: Duration,
    },
    /// The lease was renewed after renewals failed.
    RenewedAgain {
        lock: &'a str,
        lease_left: Duration,
    },
    /// A renewal failed; `repeated` when the same kind of failure was just
    /// said.
    RenewalFailed {
        lock: &'a str,
        error: String,
        retry_for: Duration,
        repeated: bool,
    },
    /// A signal lockrun got, passed on to the command.
    Forwarded {
        signal: Signal,
    },
    /// lockrun stops the command: `signal` first, then SIGKILL `grace`
    /// later.
    StoppingLost {
        lock: &'a str,
        loss: Loss,
        signal: Signal,
        grace: Duration,
    },
    StoppingTimedOut {
        signal: Signal,
        grace: Duration,
    },
    /// A signal asking the command to end, passed on: the command decides
    /// how long it takes.
    StoppingForwarded {
        signal: Signal,
    },
    /// Something the command started outlived SIGKILL.
    Stragglers,
    /// The runs waiting could not be told how the lock stands now.
    WaitersNotTold {
        lock: &'a str,
        error: String,
    },
    /// The lock is given back; `exit_status` None when the command did not
    /// start or its status is unknown.
    Released {
        lock: &'a str,
        held: Duration,
        exit_status: Option<u8>,
    },
    /// The lock is kept `kept` longer for `--min-hold`.
    Kept {
        lock: &'a str,
        held: Duration,
        exit_status: Option<u8>,
        kept: Duration,
    },
    /// At the release, the lock no longer held this run's token.
    GoneAtRelease {
        lock: &'a str,
    },
    /// The lock could not be given back after the command ended by itself.
    Unreleased(&'a Unreleased),
    /// The metrics file cannot be written.
    MetricsUnwritable {
        path: &'a Path,
        cause: String,
    },
    /// lockrun cannot speak to systemd at `NOTIFY_SOCKET`: said whatever
    /// the verbosity, or the unit would hang in "activating" without a word.
    NotifySocketFailed {
        socket: &'a OsStr,
        error: String,
    },
    /// The command's notifications cannot be relayed: said whatever the
    /// verbosity, as `NotifySocketFailed`.
    RelayFailed {
        error: String,
    },
    /// One notification could not be sent.
    NotifySendFailed {
        error: String,
    },
    /// The command's notifications could not be read.
    NotifyReadFailed {
        error: String,
    },
    /// What the command sent that systemd does not get.
    NotifyDropped {
        what: &'a str,
    },
    /// Lines went missing on a full stderr.
    Dropped {
        count: u64,
    },
    /// The error that ends this invocation (`failure` says it).
    Failed(&'a Error),
}

/// Who sees a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shown {
    /// Whatever the verbosity.
    Always,
    /// Unless `--quiet`.
    UnlessQuiet,
    /// Only with `--verbose`.
    Verbose,
}

/// A message as it is said: its event and its line for people.
pub(super) struct Said {
    pub(super) shown: Shown,
    pub(super) event: Event,
    pub(super) text: String,
}

fn always(event: Event, text: String) -> Said {
    let shown = Shown::Always;
    Said { shown, event, text }
}

fn verbose(event: Event, text: String) -> Said {
    let shown = Shown::Verbose;
    Said { shown, event, text }
}

/// Where the lock is held, for people.
fn servers(on: &Servers) -> String {
    match on {
        Servers::One(target) => format!("{} (from {})", target.with_user_shown(), target.source()),
        Servers::Quorum(targets) => {
            let all: Vec<String> = targets.iter().map(ToString::to_string).collect();
            format!("a quorum of {}: {}", all.len(), all.join(", "))
        }
    }
}

/// A time on Redis's clock, for people.
fn wall(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

impl Message<'_> {
    // One short arm per message: a long catalogue, not a complicated one.
    #[allow(clippy::too_many_lines)]
    pub(super) fn said(self) -> Said {
        match self {
            Message::Config { path } => verbose(
                Event::info("config").with("path", path.display().to_string()),
                format!("read the settings in {}", path.display()),
            ),
            Message::KeyFileReadable { path, mode } => always(
                Event::warning("key_file_readable")
                    .with("path", path.display().to_string())
                    .with("mode", format!("{mode:04o}")),
                format!(
                    "--redis-key-file {path}: users other than its owner may read the private \
                     key (mode {mode:04o}); make it private: chmod 600 {path}",
                    path = path.display()
                ),
            ),
            Message::Acquired {
                lock,
                on,
                fence,
                slot,
                waited,
                pid,
            } => {
                let server = servers(on);
                verbose(
                    Event::info("acquired")
                        .with("server", server.as_str())
                        .with("fencing_token", fence)
                        .with("slot", slot)
                        .with_ms("waited_ms", waited)
                        .with("command_pid", pid),
                    format!(
                        "acquired {lock} on {server} with fencing token {fence}; started pid \
                         {pid}"
                    ),
                )
            }
            Message::NoWait { lock } => always(
                Event::warning("unacknowledged").with("cause", "no_wait"),
                format!(
                    "--replica-acks all: the primary holding {lock} cannot acknowledge \
                     replication (it does not know WAIT): the lease is not protected against a \
                     failover, which could give the lock to a second run; --replica-acks 0 runs \
                     without asking"
                ),
            ),
            Message::NoReplica { lock } => always(
                Event::warning("unacknowledged").with("cause", "no_replica"),
                format!(
                    "--replica-acks all found no replica connected to the primary holding \
                     {lock}: the lease is not protected against a failover, which could give \
                     the lock to a second run"
                ),
            ),
            Message::EvenQuorum { servers } => always(
                Event::warning("even_quorum").with("servers", servers),
                format!(
                    "--redis given {servers} times: an even number of servers survives no more \
                     failures than {} would; use an odd number",
                    servers - 1
                ),
            ),
            Message::Skipped { lock, done } => {
                let (by, ran_at_ms) = (&done.by, done.by.acquired_us / 1000);
                verbose(
                    Event::info("skipped")
                        .with(
                            "ran_by",
                            serde_json::json!({
                                "host": by.host,
                                "pid": by.pid,
                                "command": by.command,
                                "fencing_token": by.fence,
                            }),
                        )
                        .with("ran_at_ms", ran_at_ms)
                        .with("until_ms", done.until_ms),
                    format!(
                        "skipped: {lock} ran on {} pid {} at {} (fencing token {}); the period \
                         ends at {}",
                        by.host,
                        by.pid,
                        wall(ran_at_ms),
                        by.fence,
                        wall(done.until_ms)
                    ),
                )
            }
            Message::Waiting {
                lock,
                waiting,
                place,
                held,
            } => verbose(
                Event::info("waiting")
                    .with("queued", place.is_some())
                    .with("place", place)
                    .with("waiting", waiting),
                match place {
                    Some(_) => format!("{lock} is busy; waiting, {waiting} in line"),
                    None if held => format!("{lock} is busy; trying again"),
                    None => format!("{lock} is busy (no majority); trying again"),
                },
            ),
            Message::GiveBackFailed {
                server,
                cause,
                expires_within,
            } => verbose(
                Event::warning("give_back_failed")
                    .with("server", server)
                    .with("error", cause.as_str())
                    .with_ms("expires_within_ms", expires_within),
                format!(
                    "could not give back on {server} what this attempt may hold there, which \
                     expires within {}: {cause}",
                    show_exact(expires_within)
                ),
            ),
            Message::Polling { why } => verbose(
                Event::warning("polling").with("error", why),
                format!("no wake-up messages, polling instead: {why}"),
            ),
            Message::PollingRefused { why } => always(
                Event::warning("polling").with("error", why),
                format!(
                    "{why}; until then this run waits by polling instead of being woken, so the \
                     lock reaches it later after a release"
                ),
            ),
            Message::RedisFailing { error } => always(
                Event::warning("redis_failing").with("error", error.as_str()),
                format!("{error}; still waiting"),
            ),
            Message::RedisBack { servers } => always(
                Event::info("redis_back"),
                format!("{servers} answers again; still waiting"),
            ),
            Message::Renewed { key, lease_left } => verbose(
                Event::info("renewed").with_ms("lease_left_ms", lease_left),
                format!("renewed {key}"),
            ),
            Message::RenewedAgain { lock, lease_left } => always(
                Event::info("renewal_late").with_ms("lease_left_ms", lease_left),
                format!("renewed {lock} again"),
            ),
            Message::RenewalFailed {
                lock,
                error,
                retry_for,
                repeated,
            } => Said {
                shown: if repeated {
                    Shown::Verbose
                } else {
                    Shown::Always
                },
                text: format!(
                    "cannot renew {lock} ({error}); retrying for {} before stopping the command",
                    show(retry_for)
                ),
                event: Event::warning("renewal_failed")
                    .with("error", error)
                    .with_ms("retry_for_ms", retry_for),
            },
            Message::Forwarded { signal } => verbose(
                Event::info("forwarded").with("signal", signal.as_str()),
                format!("forwarding {signal} to the command"),
            ),
            Message::StoppingLost {
                lock,
                loss,
                signal,
                grace,
            } => verbose(
                stopping("lost", signal, grace, exit_code::LEASE_LOST),
                format!(
                    "lost the lock {lock}: {loss}; {}",
                    stopping_how(signal, grace)
                ),
            ),
            Message::StoppingTimedOut { signal, grace } => verbose(
                stopping("timeout", signal, grace, exit_code::TIMED_OUT),
                format!(
                    "the command ran longer than --timeout; {}",
                    stopping_how(signal, grace)
                ),
            ),
            Message::StoppingForwarded { signal } => verbose(
                Event::info("stopping")
                    .with("reason", "signal")
                    .with("signal", signal.as_str())
                    .with("grace_ms", None::<u64>)
                    .with("exit_status", None::<u8>),
                format!("forwarding {signal} to the command"),
            ),
            Message::Stragglers => always(
                Event::error("stragglers"),
                "a process the command started is still there after SIGKILL (stuck in the \
                 kernel?)"
                    .into(),
            ),
            Message::WaitersNotTold { lock, error } => always(
                Event::warning("waiters_not_told").with("error", error.as_str()),
                format!(
                    "{lock}: could not tell the runs waiting for it how it stands now (they find \
                     out at their next look): {error}"
                ),
            ),
            Message::Released {
                lock,
                held,
                exit_status,
            } => verbose(
                Event::info("released")
                    .with_ms("held_ms", held)
                    .with("exit_status", exit_status),
                format!("released {lock}"),
            ),
            Message::Kept {
                lock,
                held,
                exit_status,
                kept,
            } => verbose(
                Event::info("kept")
                    .with_ms("held_ms", held)
                    .with("exit_status", exit_status)
                    .with_ms("kept_ms", kept),
                format!("kept {lock} for {} more to honour --min-hold", show(kept)),
            ),
            Message::GoneAtRelease { lock } => always(
                Event::warning("lost")
                    .with("reason", "gone_at_release")
                    .with("exit_status", None::<u8>),
                format!(
                    "{lock} no longer held this run's token when the command exited (it expired \
                     or was removed); another run may have overlapped the end of this one"
                ),
            ),
            Message::Unreleased(unreleased) => always(
                Event::error("unreleased")
                    .with_ms("expires_within_ms", unreleased.within)
                    .with("cause", unreleased.cause.to_string()),
                unreleased.to_string(),
            ),
            Message::MetricsUnwritable { path, cause } => always(
                Event::warning("metrics_unwritable")
                    .with("path", path.display().to_string())
                    .with("cause", cause.as_str()),
                format!(
                    "cannot update the metrics file {}: {cause}; the run is not affected",
                    path.display()
                ),
            ),
            Message::NotifySocketFailed { socket, error } => {
                let text = format!("cannot notify systemd at {}: {error}", socket.display());
                always(
                    Event::warning("notify_failed").with("error", text.as_str()),
                    text,
                )
            }
            Message::RelayFailed { error } => {
                let text = format!(
                    "cannot relay the command's notifications to systemd ({error}); the command \
                     gets systemd's NOTIFY_SOCKET"
                );
                always(
                    Event::warning("notify_failed").with("error", text.as_str()),
                    text,
                )
            }
            Message::NotifySendFailed { error } => verbose(
                Event::warning("notify_failed").with("error", error.as_str()),
                format!("cannot notify systemd: {error}"),
            ),
            Message::NotifyReadFailed { error } => verbose(
                Event::warning("notify_failed").with("error", error.as_str()),
                format!("cannot read the command's notifications: {error}"),
            ),
            Message::NotifyDropped { what } => verbose(
                Event::info("notify_dropped").with("what", what),
                format!("not passed on to systemd from the command: {what}"),
            ),
            Message::Failed(err) => failure::said(err),
            Message::Dropped { count } => always(
                Event::warning("dropped").with("count", count),
                format!(
                    "{count} message{} dropped here: stderr was full (is anyone reading it?)",
                    if count == 1 { " was" } else { "s were" }
                ),
            ),
        }
    }
}

/// The `stopping` event of a stop lockrun makes.
fn stopping(reason: &str, signal: Signal, grace: Duration, exit_status: u8) -> Event {
    Event::warning("stopping")
        .with("reason", reason)
        .with("signal", signal.as_str())
        .with_ms("grace_ms", grace)
        .with("exit_status", exit_status)
}

/// How lockrun stops the command: `signal`, then SIGKILL `grace` later.
fn stopping_how(signal: Signal, grace: Duration) -> String {
    if signal == Signal::SIGKILL {
        format!("stopping the command: {signal}")
    } else {
        format!(
            "stopping the command: {signal} now, SIGKILL in {}",
            show_exact(grace)
        )
    }
}
