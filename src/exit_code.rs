//! Every exit status lockrun can return, in one place.
//!
//! The numbers follow the conventions operators already know: sysexits(3) for
//! lockrun's own failures (64 usage, 69 unavailable, 75 temporary failure),
//! timeout(1) for 124, and the shell's 126/127/128+N for the child. The two
//! outcomes sysexits has no name for sit right next to its range: 76 for a
//! lost lease, 79 for a run superseded in line.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::Signal;

/// Bad flag, bad duration, missing command, unsafe timing (EX_USAGE).
pub const USAGE: u8 = 64;
/// Redis unreachable, authentication failed, not Redis, loading or busy, a
/// Redis error before the command started, or a lock key holding another
/// type: the command did not run (EX_UNAVAILABLE).
pub const REDIS_UNAVAILABLE: u8 = 69;
/// lockrun itself could not work (no signalfd, no randomness, a
/// child that could not be waited for): an OS failure (EX_SOFTWARE).
pub const INTERNAL: u8 = 70;
/// The lock is held by another run: the default of `--busy-exit-code`
/// (EX_TEMPFAIL, "try again later").
pub const BUSY_DEFAULT: u8 = 75;
/// The lease was lost while the child ran; lockrun stopped the child.
pub const LEASE_LOST: u8 = 76;
/// A newer `--supersede` run took this waiting run's place in line; the
/// command did not run, and the newer run will. Not 75: a deploy script
/// must tell this harmless outcome from a lock still held after `--wait`
/// (a stuck deploy); not 0: the command did not run here. 79 is the first
/// status past sysexits(3)'s last (78), so no tool reads it as one of
/// theirs, and lockrun's own statuses stay together.
pub const SUPERSEDED: u8 = 79;
/// `--timeout` elapsed; lockrun stopped the child (as timeout(1) does).
pub const TIMED_OUT: u8 = 124;
/// The command was found but could not be executed.
pub const NOT_EXECUTABLE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;

/// How lockrun ends: with an exit status, or by dying of the signal its
/// command died of (or that ended its wait), so that its parent sees the
/// death it would have seen without lockrun, as coreutils' timeout(1) does:
/// a shell stops its script on Ctrl-C only when its child died of SIGINT,
/// and systemd counts death by SIGTERM as a clean stop, but not status 143.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Status(u8),
    Signal(Signal),
}

impl Exit {
    /// How the command ended, as lockrun passes it on.
    #[must_use]
    pub fn of_child(status: ExitStatus) -> Exit {
        match status.signal().map(Signal::try_from) {
            Some(Ok(signal)) => Exit::Signal(signal),
            _ => Exit::Status(from_child(status)),
        }
    }

    /// The status a shell reports for this ending: 128+N for signal N.
    #[must_use]
    pub fn status(self) -> u8 {
        match self {
            Exit::Status(status) => status,
            Exit::Signal(signal) => from_signal(signal as i32),
        }
    }
}

/// The shell's convention for "killed by signal N".
#[must_use]
pub fn from_signal(signal: i32) -> u8 {
    // Signal numbers on Linux are 1..=64, so 128 + N always fits in a byte.
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

/// The status a shell would report for this child.
#[must_use]
pub fn from_child(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        // A Unix exit code is already the low byte of what the child passed.
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
        (None, Some(signal)) => from_signal(signal),
        // Neither exited nor signalled cannot happen for a reaped child; never
        // report success for a status we do not understand.
        (None, None) => u8::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_codes_pass_through() {
        assert_eq!(from_child(ExitStatus::from_raw(0)), 0);
        assert_eq!(from_child(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(from_child(ExitStatus::from_raw(255 << 8)), 255);
    }

    #[test]
    fn signal_deaths_are_128_plus_n() {
        assert_eq!(from_child(ExitStatus::from_raw(9)), 137);
        assert_eq!(from_child(ExitStatus::from_raw(15)), 143);
        assert_eq!(from_signal(2), 130);
    }

    #[test]
    fn a_signal_death_is_passed_on_as_one() {
        assert_eq!(
            Exit::of_child(ExitStatus::from_raw(15)),
            Exit::Signal(Signal::SIGTERM)
        );
        assert_eq!(
            Exit::of_child(ExitStatus::from_raw(3 << 8)),
            Exit::Status(3)
        );
        // A core dump is still a death by the signal.
        assert_eq!(
            Exit::of_child(ExitStatus::from_raw(6 | 0x80)),
            Exit::Signal(Signal::SIGABRT)
        );
        assert_eq!(Exit::Signal(Signal::SIGINT).status(), 130);
    }

    #[test]
    fn lockrun_codes_do_not_collide() {
        let mut all = [
            USAGE,
            REDIS_UNAVAILABLE,
            BUSY_DEFAULT,
            LEASE_LOST,
            SUPERSEDED,
            INTERNAL,
            TIMED_OUT,
            NOT_EXECUTABLE,
            NOT_FOUND,
        ];
        all.sort_unstable();
        let before = all.len();
        let mut unique = all.to_vec();
        unique.dedup();
        assert_eq!(unique.len(), before);
    }
}
