//! Stopping the command, and saying so. Every way a run stops its command
//! starts here, in the one function that both says `stopping` and sends the
//! first signal: lines leave in the order they are said, so the `stopping`
//! event always comes before what the command's end brings (`released`,
//! `lost`, `timed_out`). Said after the fact, a log shipper would see the
//! stop after the release, and never learn which signal went out.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::child::Child;
use crate::clock::BootInstant;
use crate::lease::{Lease, Loss, Timing};
use crate::notify::{self, Systemd};
use crate::report::{self, Message};

/// Why lockrun stopped the command before it finished on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    Lost(Loss),
    TimedOut,
}

/// Where the signals of a stop go: the command is the one target; tests
/// count what would have been sent.
pub(crate) trait Target {
    /// Everything the command started: lockrun's own stop.
    fn signal_all(&self, signal: Signal);
    /// The command's process group: what a forwarded signal reaches.
    fn signal_group(&self, signal: Signal);
}

impl Target for Child {
    fn signal_all(&self, signal: Signal) {
        Child::signal_all(self, signal);
    }

    fn signal_group(&self, signal: Signal) {
        Child::signal_group(self, signal);
    }
}

/// How far lockrun got in stopping the command.
pub(super) struct Stopping<'a> {
    timing: Timing,
    timeout_at: Option<BootInstant>,
    /// The lock's name, for the text lines.
    lock: &'a str,
    /// Told why, as the unit's status.
    systemd: &'a Systemd,
    pub(super) reason: Option<Stop>,
    pub(super) kill_at: Option<BootInstant>,
    pub(super) killed: bool,
    /// A signal asking the command to end was passed on: a second one is
    /// only `forwarded`, the stop having been said.
    pub(super) asked: bool,
}

impl<'a> Stopping<'a> {
    pub(super) fn new(
        timing: Timing,
        timeout_at: Option<BootInstant>,
        lock: &'a str,
        systemd: &'a Systemd,
    ) -> Self {
        Stopping {
            timing,
            timeout_at,
            lock,
            systemd,
            reason: None,
            kill_at: None,
            killed: false,
            asked: false,
        }
    }

    /// The lease comes first: past its deadline the lock may already be
    /// someone else's, so nothing else may happen before the command is
    /// killed.
    pub(super) fn enforce_deadline(&mut self, target: &impl Target, lease: &Lease) {
        if lease.has_lapsed() {
            if self.reason.is_none() {
                // Not even SIGTERM went out: lockrun could not run (paused,
                // suspended) until past the deadline. SIGKILL is the stop.
                let reason = Stop::Lost(Loss::Lapsed);
                self.start(target, reason, Signal::SIGKILL, Duration::ZERO);
            }
            self.lapsed();
            self.kill(target);
        } else if self.kill_at.is_some_and(BootInstant::has_passed) {
            self.kill(target);
        }
    }

    /// A moment from `next_wake` came.
    pub(super) fn on_wake(&mut self, target: &impl Target, lease: &Lease) {
        // Renewals may have moved the deadline while this slept.
        if lease.has_lapsed() {
            // lockrun could not run (paused, suspended) until past the
            // deadline: `enforce_deadline` kills and says so, rather than
            // blaming renewals that never got the chance.
        } else if (lease.deadline() - self.timing.kill_grace).has_passed() {
            // Stop while there is still time for a graceful exit.
            let left = lease.deadline().remaining();
            self.begin(target, Stop::Lost(Loss::Unconfirmed), left);
        } else if self.timeout_at.is_some_and(BootInstant::has_passed) {
            self.begin_soon(target, lease, Stop::TimedOut);
        }
    }

    /// SIGTERM now, SIGKILL after the kill grace, or at the lease's deadline
    /// if that comes first.
    pub(super) fn begin_soon(&mut self, target: &impl Target, lease: &Lease, reason: Stop) {
        let grace = self.timing.kill_grace.min(lease.deadline().remaining());
        self.begin(target, reason, grace);
    }

    /// SIGTERM now, SIGKILL `grace` later. Only the first reason counts.
    fn begin(&mut self, target: &impl Target, reason: Stop, grace: Duration) {
        if self.reason.is_none() {
            self.start(target, reason, Signal::SIGTERM, grace);
        }
    }

    /// Says that the stop starts, then starts it: `signal` to everything the
    /// command started, and SIGKILL `grace` later.
    fn start(&mut self, target: &impl Target, reason: Stop, signal: Signal, grace: Duration) {
        report::say(stop_said(reason, signal, grace, self.lock));
        let lost = match reason {
            Stop::Lost(loss) => Some(loss),
            Stop::TimedOut => None,
        };
        self.systemd.stopping(notify::lost_or_timed_out(lost));
        self.reason = Some(reason);
        self.kill_at = Some(BootInstant::now() + grace);
        target.signal_all(signal);
        self.killed |= signal == Signal::SIGKILL;
    }

    /// Passes on a signal lockrun got. The first that asks the command to
    /// end, while lockrun is not stopping it already, is the start of a
    /// stop: the command decides how long it takes, and lockrun keeps the
    /// lease meanwhile.
    pub(super) fn forward(&mut self, target: &impl Target, signal: Signal) {
        let ends = matches!(
            signal,
            Signal::SIGTERM | Signal::SIGINT | Signal::SIGQUIT | Signal::SIGABRT
        );
        if ends && !self.asked && self.reason.is_none() {
            self.asked = true;
            self.systemd
                .stopping(&format!("{signal} passed on to the command"));
            report::say(Message::StoppingForwarded { signal });
        } else {
            report::say(Message::Forwarded { signal });
        }
        target.signal_group(signal);
    }

    /// The lease ran out. That outranks a timeout (the lock is what matters)
    /// but not an earlier, more precise reason for the same loss.
    pub(super) fn lapsed(&mut self) {
        if matches!(self.reason, None | Some(Stop::TimedOut)) {
            self.reason = Some(Stop::Lost(Loss::Lapsed));
        }
    }

    fn kill(&mut self, target: &impl Target) {
        if !std::mem::replace(&mut self.killed, true) {
            target.signal_all(Signal::SIGKILL);
        }
    }

    /// The next moment the supervisor must act, or None when only the
    /// command's exit is left to wait for. A moment already acted on must not
    /// count again: a sleep that is always ready, polled first in a biased
    /// select, would starve the command's exit forever.
    pub(super) fn next_wake(&self, deadline: BootInstant) -> Option<BootInstant> {
        if self.killed {
            return None;
        }
        let due = match self.reason {
            // SIGTERM went out: SIGKILL is next, at kill_at or when the lease lapses.
            Some(_) => [self.kill_at, None],
            None => [Some(deadline - self.timing.kill_grace), self.timeout_at],
        };
        Some(due.into_iter().flatten().fold(deadline, BootInstant::min))
    }
}

/// The `stopping` message of a stop lockrun makes: why, the signal sent
/// first, and how long until SIGKILL.
pub(super) fn stop_said(reason: Stop, signal: Signal, grace: Duration, lock: &str) -> Message<'_> {
    match reason {
        Stop::TimedOut => Message::StoppingTimedOut { signal, grace },
        Stop::Lost(loss) => Message::StoppingLost {
            lock,
            loss,
            signal,
            grace,
        },
    }
}

#[cfg(test)]
mod tests;
