//! Every way a lockrun invocation can fail, with the exit status it returns;
//! `report/failure` says it. `lib::main` reports an error and maps it to an
//! exit status in exactly one place.

use std::io;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::child::SpawnError;
use crate::exit_code::{self, Exit};
use crate::lease::Loss;
use crate::lock::{HoldersAndWaiters, LockError};

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

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(exit: u8) -> Error {
        Error::Busy(Box::new(Busy {
            lock: "job".into(),
            found: HoldersAndWaiters::unknown(),
            superseded_by: None,
            command: "true".into(),
            waited: None,
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
        assert_eq!(Error::Interrupted(Signal::SIGTERM).exit_code(), 143);
        assert_eq!(Error::TimedOut { unreleased: None }.exit_code(), 124);
        let lost = Error::LeaseLost {
            lock: "k".into(),
            loss: Loss::Unconfirmed,
            unreleased: None,
        };
        assert_eq!(lost.exit_code(), 76);
    }
}
