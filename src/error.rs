//! Every way a lockrun invocation can fail, with the one line it prints and
//! the exit status it returns. `lib::main` reports an error and maps it to an
//! exit status in exactly one place.

use std::fmt;
use std::io;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::child::SpawnError;
use crate::clock::{show, show_exact, unix_now_us};
use crate::exit_code::{self, Exit};
use crate::lease::Loss;
use crate::lock::{is_gone_from_here, Holder, HoldersAndWaiters, LockError};

#[derive(Debug)]
pub(crate) enum Error {
    /// A command line lockrun refuses; the message says what would do.
    Usage(String),
    /// The lock's servers could not be reached or asked, or one of its keys
    /// holds someone else's data, before the command started.
    Lock(LockError),
    /// The lock's servers still could not serve it when `--wait` (`waited`)
    /// ran out, for the `last` reason they gave.
    WaitedOut { last: LockError, waited: Duration },
    /// Another run holds the lock.
    Busy(Box<Busy>),
    /// The command could not be started; the lock was given back, or is
    /// `unreleased`.
    Spawn {
        program: String,
        cause: SpawnError,
        unreleased: Option<Box<Unreleased>>,
    },
    /// A signal ended the wait for the lock; the command never ran.
    Interrupted(Signal),
    /// The lease could not be proven any more; lockrun stopped the command.
    LeaseLost {
        lock: String,
        loss: Loss,
        unreleased: Option<Box<Unreleased>>,
    },
    /// `--timeout` elapsed; lockrun stopped the command.
    TimedOut { unreleased: Option<Box<Unreleased>> },
    /// The OS refused lockrun something it needs.
    Internal {
        doing: &'static str,
        source: io::Error,
    },
}

/// What a run found when the lock was busy, for its one-line message.
#[derive(Debug)]
pub(crate) struct Busy {
    pub(crate) lock: String,
    /// Who held the lock and who waited for it, as the last attempt found.
    pub(crate) found: HoldersAndWaiters,
    /// "HOST pid N" of the newer `--supersede` run that took this run's
    /// place in line.
    pub(crate) superseded_by: Option<String>,
    pub(crate) command: String,
    /// How long this run waited, if it was asked to.
    pub(crate) waited: Option<Duration>,
    /// `--busy-exit-code`.
    pub(crate) exit: u8,
}

/// A lock that could not be given back after its command ended; it expires
/// on its own. Part of the line that says why the run ended, after the why.
#[derive(Debug)]
pub(crate) struct Unreleased {
    pub(crate) lock: String,
    /// The longest it can stay: one ttl.
    pub(crate) within: Duration,
    pub(crate) cause: LockError,
}

impl fmt::Display for Unreleased {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "could not release {}, it will expire within {}: {}",
            self.lock,
            show_exact(self.within),
            self.cause
        )
    }
}

/// How loudly an error is said on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loudness {
    /// Always printed.
    Error,
    /// The lock was busy: silenced by --quiet.
    Busy,
    /// Expected outcome the caller asked for: only with --verbose.
    Verbose,
}

impl Error {
    /// How lockrun ends for this error: a signal that ended the wait ends
    /// lockrun too, as it would have ended the command.
    pub(crate) fn exit(&self) -> Exit {
        match self {
            Error::Interrupted(signal) => Exit::Signal(*signal),
            _ => Exit::Status(self.exit_code()),
        }
    }

    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => exit_code::USAGE,
            Error::Lock(_) | Error::WaitedOut { .. } => exit_code::REDIS_UNAVAILABLE,
            Error::Busy(busy) => busy.exit,
            Error::Spawn {
                cause: SpawnError::NotFound,
                ..
            } => exit_code::NOT_FOUND,
            Error::Spawn { .. } => exit_code::NOT_EXECUTABLE,
            Error::Interrupted(signal) => exit_code::from_signal(*signal as i32),
            Error::LeaseLost { .. } => exit_code::LEASE_LOST,
            Error::TimedOut { .. } => exit_code::TIMED_OUT,
            Error::Internal { .. } => exit_code::INTERNAL,
        }
    }

    pub(crate) fn loudness(&self) -> Loudness {
        match self {
            // --busy-exit-code 0 means "skip quietly": cron mails any output.
            Error::Busy(busy) if busy.exit == 0 => Loudness::Verbose,
            Error::Busy(_) => Loudness::Busy,
            // The caller sent the signal; it knows why the run ended.
            Error::Interrupted(_) => Loudness::Verbose,
            _ => Loudness::Error,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(message) => f.write_str(message),
            Error::Lock(err) => err.fmt(f),
            Error::WaitedOut { last, waited } => {
                write!(f, "{last}; gave up after waiting {}", show(*waited))
            }
            Error::Busy(busy) => busy.fmt(f),
            Error::Spawn {
                program,
                cause,
                unreleased,
            } => {
                write!(f, "{program}: {cause}")?;
                if matches!(cause, SpawnError::NotFound) && is_shell_line(program) {
                    write!(
                        f,
                        "; lockrun runs a command without a shell: for a shell line, give -- \
                         sh -c {}",
                        shell_quoted(program)
                    )?;
                }
                then_unreleased(f, unreleased.as_deref())
            }
            Error::Interrupted(signal) => {
                write!(f, "got {signal} while waiting for the lock; giving up")
            }
            Error::LeaseLost {
                lock,
                loss,
                unreleased,
            } => {
                write!(f, "lost the lock {lock}: {loss}; stopped the command")?;
                then_unreleased(f, unreleased.as_deref())
            }
            Error::TimedOut { unreleased } => {
                f.write_str("the command ran longer than --timeout; stopped it")?;
                then_unreleased(f, unreleased.as_deref())
            }
            Error::Internal { doing, source } => write!(f, "cannot {doing}: {source}"),
        }
    }
}

/// Whether a command name that was not found is a shell line given as one
/// word (`-- 'echo a; echo b'`): no program is named like that.
fn is_shell_line(program: &str) -> bool {
    program
        .chars()
        .any(|c| c.is_whitespace() || ";|&<>()$`*?{}'\"\\".contains(c))
}

/// `text` in single quotes, as sh reads it back.
fn shell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// What is left to say after why a run ended: the reason comes first.
fn then_unreleased(f: &mut fmt::Formatter<'_>, unreleased: Option<&Unreleased>) -> fmt::Result {
    match unreleased {
        Some(unreleased) => write!(f, "; {unreleased}"),
        None => Ok(()),
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Lock(err) | Error::WaitedOut { last: err, .. } => Some(err),
            Error::Spawn { cause, .. } => Some(cause),
            Error::Internal { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<LockError> for Error {
    fn from(err: LockError) -> Self {
        Error::Lock(err)
    }
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runs = |n: u64| {
            if n == 1 {
                "1 run".to_owned()
            } else {
                format!("{n} runs")
            }
        };
        if let Some(by) = &self.superseded_by {
            write!(
                f,
                "{}: superseded by {by}, a newer run with --supersede",
                self.lock
            )?;
        } else if !self.found.held {
            write!(
                f,
                "{} is free, but {} waiting in line came first",
                self.lock,
                runs(self.found.waiting)
            )?;
        } else {
            self.fmt_holder(f)?;
            if self.found.waiting > 0 {
                write!(f, ", {} waiting in line", runs(self.found.waiting))?;
            }
        }
        write!(f, "; not running {}", self.command)?;
        if let Some(waited) = self.waited.filter(|_| self.superseded_by.is_none()) {
            write!(f, " after waiting {}", show(waited))?;
        }
        write!(f, " (exit {})", self.exit)
    }
}

impl Busy {
    /// Who holds the lock, and how much longer.
    fn fmt_holder(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let since = |us: u64| show(Duration::from_micros(unix_now_us().saturating_sub(us)));
        let left = self.found.left.map(show);
        if self.found.holding > 0 {
            let runs = if self.found.holding == 1 {
                "run"
            } else {
                "runs"
            };
            write!(
                f,
                "{} is held by {} {runs} together (--slots or --shared)",
                self.lock, self.found.holding
            )?;
            if let Some(left) = left {
                write!(f, ", the first lease expires in {left}")?;
            }
            return Ok(());
        }
        match &self.found.holder {
            Some(
                h @ Holder {
                    finished_us: Some(finished),
                    ..
                },
            ) => write!(
                f,
                "{} is kept for --min-hold for {} more; the command ({} on {} pid {}) \
                 finished {} ago",
                self.lock,
                left.as_deref().unwrap_or("a while"),
                h.command,
                h.host,
                h.pid,
                since(*finished)
            )?,
            Some(h) if is_gone_from_here(&h.host, h.pid) => {
                return write!(
                    f,
                    "{} is held by {} pid {}, which is gone (no such process on this host): the \
                     lock is free when its lease expires{}",
                    self.lock,
                    h.host,
                    h.pid,
                    left.map_or_else(String::new, |left| format!(" in {left}"))
                );
            }
            Some(h) => write!(
                f,
                "{} is held by {} pid {} for {}",
                self.lock,
                h.host,
                h.pid,
                since(h.acquired_us)
            )?,
            None => write!(f, "{} is held by another run", self.lock)?,
        }
        if let (Some(left), false) = (left, self.is_min_hold()) {
            write!(f, ", lease expires in {left}")?;
        }
        Ok(())
    }

    /// Whether the holder's command already finished and the lock is only
    /// kept for its `--min-hold`.
    fn is_min_hold(&self) -> bool {
        self.found
            .holder
            .as_ref()
            .is_some_and(|h| h.finished_us.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(exit: u8) -> Error {
        Error::Busy(Box::new(Busy {
            lock: "lockrun:{job}".into(),
            found: HoldersAndWaiters {
                left: Some(Duration::from_millis(1500)),
                ..HoldersAndWaiters::unknown()
            },
            superseded_by: None,
            command: "true".into(),
            waited: Some(Duration::from_secs(2)),
            exit,
        }))
    }

    #[test]
    fn each_error_has_its_exit_status() {
        assert_eq!(Error::Usage(String::new()).exit_code(), 64);
        assert_eq!(busy(75).exit_code(), 75);
        assert_eq!(busy(0).exit_code(), 0);
        let not_found = Error::Spawn {
            program: "nope".into(),
            cause: SpawnError::NotFound,
            unreleased: None,
        };
        assert_eq!(not_found.exit_code(), 127);
        assert_eq!(not_found.to_string(), "nope: command not found");
        let shell_line = Error::Spawn {
            program: "echo 'a'; echo b".into(),
            cause: SpawnError::NotFound,
            unreleased: None,
        };
        assert_eq!(
            shell_line.to_string(),
            "echo 'a'; echo b: command not found; lockrun runs a command without a shell: \
             for a shell line, give -- sh -c 'echo '\\''a'\\''; echo b'"
        );
        assert_eq!(Error::Interrupted(Signal::SIGTERM).exit_code(), 143);
        assert_eq!(Error::TimedOut { unreleased: None }.exit_code(), 124);
        let lost = Error::LeaseLost {
            lock: "k".into(),
            loss: Loss::Unconfirmed,
            unreleased: None,
        };
        assert_eq!(lost.exit_code(), 76);
    }

    #[test]
    fn a_lock_kept_for_min_hold_says_its_command_finished() {
        let finished = unix_now_us() - 2_000_000;
        let busy = Busy {
            lock: "job".into(),
            found: HoldersAndWaiters {
                left: Some(Duration::from_secs(3)),
                holder: Some(Holder {
                    host: "web-2".into(),
                    pid: 7,
                    command: "./invoice.sh".into(),
                    acquired_us: finished - 1_000_000,
                    fence: 1,
                    finished_us: Some(finished),
                    ..Holder::default()
                }),
                ..HoldersAndWaiters::unknown()
            },
            superseded_by: None,
            command: "./invoice.sh".into(),
            waited: None,
            exit: 75,
        };
        let line = busy.to_string();
        assert!(
            line.starts_with(
                "job is kept for --min-hold for 3s more; the command (./invoice.sh on web-2 \
                 pid 7) finished 2s"
            ),
            "{line}"
        );
        assert!(
            line.ends_with("; not running ./invoice.sh (exit 75)"),
            "{line}"
        );
    }

    #[test]
    fn busy_says_who_waits_and_who_superseded() {
        let Error::Busy(mut busy) = busy(75) else {
            unreachable!()
        };
        busy.found.waiting = 2;
        assert_eq!(
            busy.to_string(),
            "lockrun:{job} is held by another run, lease expires in 2s, 2 runs waiting in \
             line; not running true after waiting 2s (exit 75)"
        );
        busy.found.held = false;
        busy.found.left = None;
        busy.found.waiting = 1;
        busy.waited = None;
        assert_eq!(
            busy.to_string(),
            "lockrun:{job} is free, but 1 run waiting in line came first; not running true \
             (exit 75)"
        );
        busy.superseded_by = Some("ci-7 pid 42".into());
        busy.waited = Some(Duration::from_secs(3));
        assert_eq!(
            busy.to_string(),
            "lockrun:{job}: superseded by ci-7 pid 42, a newer run with --supersede; not \
             running true (exit 75)"
        );
    }

    #[test]
    fn busy_with_exit_zero_is_only_verbose() {
        assert_eq!(busy(75).loudness(), Loudness::Busy);
        assert_eq!(busy(0).loudness(), Loudness::Verbose);
        assert_eq!(
            busy(75).to_string(),
            "lockrun:{job} is held by another run, lease expires in 2s; not running true \
             after waiting 2s (exit 75)"
        );
    }
}
