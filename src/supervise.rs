//! Watching a running command under a lease: renew the lease, forward
//! signals, follow terminal stops, reap the orphans it leaves, and stop the
//! command when the lease can no longer be proven or `--timeout` passes.

use std::fmt;
use std::future::Future;
use std::io;
use std::process::ExitStatus;

use nix::sys::signal::Signal;

use crate::child::Child;
use crate::clock::{self, BootInstant};
use crate::lease::{Lease, Loss, Timing};
use crate::lock::{Lock, LockError, Renewal};
use crate::notify::Systemd;
use crate::redis_conn::ErrorKind;
use crate::report::{self, Message};
use crate::signals::Signals;

mod stopping;
pub(crate) use stopping::Stop;
use stopping::Stopping;

/// How supervision ended: the command's exit, and lockrun's reason if it
/// stopped the command.
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) status: io::Result<ExitStatus>,
    pub(crate) stop: Option<Stop>,
}

/// Watches the command until it exits: renews the lease on `lock`, passes
/// `signals` on, and stops the command when the lease can no longer be
/// proven or `timeout_at` passes, telling `systemd` why. `signals` holds
/// SIGCHLD too, blocked since before the spawn so that not even an
/// immediate exit is missed; the lease, and so its renewals, count from
/// `granted`, no later than the grant.
pub(crate) async fn supervise(
    child: &mut Child,
    signals: &mut Signals,
    lock: &mut Lock,
    lease: &Lease,
    granted: BootInstant,
    timeout_at: Option<BootInstant>,
    systemd: &Systemd,
) -> Ended {
    let timing = lock.timing();
    let name = lock.keys().name.clone();
    let keeper = keep_lease(lock, lease, granted, timing);
    tokio::pin!(keeper);
    let mut keeper_running = true;
    // Every stop starts in `stopping`, which says so before it signals.
    let mut stopping = Stopping::new(timing, timeout_at, &name, systemd);
    loop {
        stopping.enforce_deadline(&*child, lease);
        let wake = stopping.next_wake(lease.deadline());
        tokio::select! {
            biased;
            () = clock::sleep_until_some(wake) => stopping.on_wake(&*child, lease),
            loss = &mut keeper, if keeper_running => {
                keeper_running = false;
                // A lapse is the deadline's to handle, at the top of the loop.
                if loss == Loss::TokenGone {
                    stopping.begin_soon(&*child, lease, Stop::Lost(Loss::TokenGone));
                }
            }
            signal = signals.recv() => match signal {
                Ok(Signal::SIGCHLD) => {
                    if let Some(status) = child_changed(child, lease) {
                        if lease.has_lapsed() {
                            // It may have finished only after the lease ran out.
                            stopping.lapsed();
                        }
                        return Ended { status, stop: stopping.reason };
                    }
                }
                Ok(signal) => stopping.forward(&*child, signal),
                Err(err) => return Ended { status: Err(err), stop: stopping.reason },
            },
        }
    }
}

/// What a SIGCHLD asks lockrun to do: the command's exit status if it
/// exited; else reap the orphans that did, and follow the command into a
/// terminal stop (Ctrl-Z).
fn child_changed(child: &mut Child, lease: &Lease) -> Option<io::Result<ExitStatus>> {
    match child.try_wait() {
        Ok(Some(status)) => return Some(Ok(status)),
        Ok(None) => {}
        Err(err) => return Some(Err(err)),
    }
    child.reap_orphans();
    if child.has_terminal() && child.stopped_from_terminal() {
        child.stop_along();
        // Stopped, lockrun could not renew: a lapsed lease is the
        // deadline's to handle, and the command stays stopped for its
        // SIGKILL.
        if !lease.has_lapsed() {
            child.resume();
        }
    }
    None
}

/// What `keep_lease` needs of a lock: a seam, so that the keeper's timing
/// can be tested against scripted answers on paused time.
pub(crate) trait Renew {
    type Error: fmt::Display;

    /// Extends the lease to the lock's ttl from now.
    fn renew(&mut self) -> impl Future<Output = Result<Renewal, Self::Error>>;

    /// The name given to `--key`, for the operator's messages.
    fn name(&self) -> &str;

    /// The Redis key, for --verbose.
    fn redis_key(&self) -> &str;

    /// What kind of failure `err` is: a renewal that fails for a new kind
    /// of reason (a dropped connection, then a refused password) is said
    /// without --verbose too.
    fn failure_kind(_err: &Self::Error) -> Option<ErrorKind> {
        None
    }
}

impl Renew for Lock {
    type Error = LockError;

    fn renew(&mut self) -> impl Future<Output = Result<Renewal, LockError>> {
        Lock::renew(self)
    }

    fn name(&self) -> &str {
        &self.keys().name
    }

    fn redis_key(&self) -> &str {
        &self.keys().lock
    }

    fn failure_kind(err: &LockError) -> Option<ErrorKind> {
        match err {
            LockError::Redis(err) => Some(err.kind),
            _ => None,
        }
    }
}

/// Renews the lease every `renew_every`, retrying failures while time
/// remains. Returns only when the lease is lost for good.
async fn keep_lease<L: Renew>(
    lock: &mut L,
    lease: &Lease,
    granted: BootInstant,
    timing: Timing,
) -> Loss {
    let mut next = granted + timing.renew_every;
    let mut failing = false;
    // The kind of the last failure said without --verbose.
    let mut said = None;
    loop {
        clock::sleep_until(next).await;
        // After a pause, a renewal must not revive a lease that lapsed.
        if lease.has_lapsed() {
            return Loss::Lapsed;
        }
        let sent = BootInstant::now();
        match lock.renew().await {
            Ok(Renewal::Extended) => {
                lease.extend_to(timing.deadline_after(sent));
                next = sent + timing.renew_every;
                let lease_left = lease.deadline().remaining();
                report::say(if std::mem::take(&mut failing) {
                    Message::RenewedAgain {
                        lock: lock.name(),
                        lease_left,
                    }
                } else {
                    Message::Renewed {
                        key: lock.redis_key(),
                        lease_left,
                    }
                });
            }
            Ok(Renewal::Lost) => return Loss::TokenGone,
            Err(err) => {
                let kind = L::failure_kind(&err);
                let repeated = std::mem::replace(&mut failing, true) && said == kind;
                said = kind;
                report::say(Message::RenewalFailed {
                    lock: lock.name(),
                    error: err.to_string(),
                    retry_for: lease
                        .deadline()
                        .remaining()
                        .saturating_sub(timing.kill_grace),
                    repeated,
                });
                next = BootInstant::now() + timing.retry_delay();
            }
        }
    }
}

#[cfg(test)]
mod tests;
