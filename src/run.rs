//! One run: acquire → spawn → supervise {command exit, lease loss, timeout,
//! signals} → stop → release. This is the only module that knows the lock,
//! the lease and the command together.

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::child::{self, Child, SpawnError};
use crate::config::{show, RunConfig};
use crate::exit_code;
use crate::lease::{self, BootInstant, Lease, Timing};
use crate::lock::{Holder, Keys, Lock, Me, Released, Token};
use crate::redis_conn::Session;
use crate::report::Report;
use crate::signals::{self, Signals};
use crate::wait::{self, Outcome};

/// How long lockrun waits for its first connection to Redis.
const FIRST_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why lockrun stopped the command before it finished on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Renewals failed until only the kill grace was left.
    Unconfirmed,
    /// Redis says the key no longer holds our token.
    TokenGone,
    /// The deadline passed while lockrun could not act (paused, suspended).
    Lapsed,
    /// `--timeout` elapsed.
    TimedOut,
}

/// Why the lease keeper gave up.
enum Lost {
    TokenGone,
    Lapsed,
}

pub async fn run(config: RunConfig) -> u8 {
    let report = Report {
        verbosity: config.verbosity,
    };
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(err) => {
            report.error(format_args!("cannot install signal handlers: {err}"));
            return exit_code::INTERNAL;
        }
    };
    let token = match Token::generate() {
        Ok(token) => token,
        Err(err) => {
            report.error(format_args!(
                "cannot read random bytes for the lock token: {err}"
            ));
            return exit_code::INTERNAL;
        }
    };
    let timing = config.timing;
    let keys = Keys::new(&config.prefix, &config.key);
    let session = Session::new(config.target.clone(), timing.redis_timeout);
    let mut lock = Lock::new(session, keys, token);
    let me = Me::new(&config.command);

    let acquire = async {
        // Only the first connection gets longer than a Redis call may take:
        // nothing is held yet, and a slow handshake is no reason to give up.
        lock.session()
            .open_within(timing.redis_timeout.max(FIRST_CONNECT_TIMEOUT))
            .await?;
        wait::acquire(&mut lock, timing.ttl, &me, config.wait, report).await
    };
    let attempt = tokio::select! {
        signal = signals.recv_interrupt() => Err(signal),
        result = acquire => Ok(result),
    };
    let (fence, acquired) = match attempt {
        Ok(Ok(Outcome::Acquired { fence, sent })) => (fence, sent),
        Ok(Ok(Outcome::Busy { left, holder })) => {
            let message = busy_message(&lock.keys().lock, left, holder.as_ref(), &config);
            // --busy-exit-code 0 means "skip quietly": cron mails any output.
            if config.busy_exit_code == 0 {
                report.verbose(message);
            } else {
                report.busy(message);
            }
            return config.busy_exit_code;
        }
        Ok(Err(err)) => {
            report.error(&err);
            // A call that timed out may still have taken the lock.
            lock.abandon().await;
            return exit_code::REDIS_UNAVAILABLE;
        }
        Err(signal) => {
            // The SET may have won the race with the signal; give it back.
            lock.abandon().await;
            report.verbose(format_args!(
                "got {signal} while waiting for the lock; giving up"
            ));
            return exit_code::from_signal(signal as i32);
        }
    };

    // Made before the spawn, so that not even an immediate stop is missed.
    let mut child_changed = match signals::child_changes() {
        Ok(stream) => stream,
        Err(err) => {
            let _ = lock.release(None).await;
            report.error(format_args!("cannot install signal handlers: {err}"));
            return exit_code::INTERNAL;
        }
    };
    let env = [
        ("LOCKRUN_KEY", config.key.clone()),
        ("LOCKRUN_FENCING_TOKEN", fence.to_string()),
    ];
    let mut child = match Child::spawn(&config.command, &env) {
        Ok(child) => child,
        Err(err) => {
            let _ = lock.release(None).await;
            let program = config.command[0].to_string_lossy();
            return match err {
                SpawnError::NotFound(_) => {
                    report.error(format_args!("{program}: command not found"));
                    exit_code::NOT_FOUND
                }
                // exec reports a directory as "Permission denied", which sends
                // people chasing file modes.
                SpawnError::NotExecutable(_)
                    if std::path::Path::new(&config.command[0]).is_dir() =>
                {
                    report.error(format_args!("{program}: cannot execute: is a directory"));
                    exit_code::NOT_EXECUTABLE
                }
                SpawnError::NotExecutable(e) => {
                    report.error(format_args!("{program}: cannot execute: {e}"));
                    exit_code::NOT_EXECUTABLE
                }
                SpawnError::Other(e) => {
                    report.error(format_args!("{program}: cannot start: {e}"));
                    exit_code::NOT_EXECUTABLE
                }
            };
        }
    };
    report.verbose(format_args!(
        "acquired {} with fencing token {fence}; started pid {}",
        lock.keys().lock,
        child.pid()
    ));

    let lease = Lease::new(timing.deadline_after(acquired));
    let deadline = config.timeout.map(|limit| acquired + limit);
    let (status, stop) = supervise(
        &mut child,
        &mut lock,
        &lease,
        acquired,
        deadline,
        &mut signals,
        &mut child_changed,
        timing,
        report,
    )
    .await;

    // Whatever the command left running must not outlive the lock.
    if stop.is_some_and(|s| s != Stop::TimedOut) {
        child.signal_group(Signal::SIGKILL);
    } else {
        child
            .stop_stragglers((BootInstant::now() + timing.kill_grace).min(lease.deadline()))
            .await;
    }

    let keep = match (stop, config.min_hold) {
        (None | Some(Stop::TimedOut), Some(min_hold)) => {
            Some(min_hold.saturating_sub(acquired.elapsed())).filter(|d| !d.is_zero())
        }
        _ => None,
    };
    match lock.release(keep).await {
        Ok(Released::Deleted) => report.verbose(format_args!("released {}", lock.keys().lock)),
        Ok(Released::Kept) => report.verbose(format_args!(
            "kept {} for {} more to honour --min-hold",
            lock.keys().lock,
            show(keep.unwrap_or_default())
        )),
        Ok(Released::NotOurs) if stop.is_none() => report.error(format_args!(
            "{} no longer held this run's token when the command exited (it expired or was \
             removed); another run may have overlapped the end of this one",
            lock.keys().lock
        )),
        Ok(Released::NotOurs) => {}
        Err(err) => report.error(format_args!(
            "could not release the lock, it will expire within {}: {err}",
            show(timing.ttl)
        )),
    }

    let Some(status) = status else {
        return exit_code::INTERNAL;
    };
    match stop {
        None => exit_code::from_child(status),
        Some(Stop::TimedOut) => {
            report.error(format_args!(
                "the command ran longer than --timeout; stopped it"
            ));
            exit_code::TIMED_OUT
        }
        Some(reason) => {
            report.error(lost_message(&lock.keys().lock, reason));
            exit_code::LEASE_LOST
        }
    }
}

/// Runs until the command exits, renewing the lease and stopping the
/// command when the lease can no longer be proven or the timeout passes.
#[allow(clippy::too_many_arguments)]
async fn supervise(
    child: &mut Child,
    lock: &mut Lock,
    lease: &Lease,
    acquired: BootInstant,
    timeout_at: Option<BootInstant>,
    signals: &mut Signals,
    child_changed: &mut tokio::signal::unix::Signal,
    timing: Timing,
    report: Report,
) -> (Option<ExitStatus>, Option<Stop>) {
    let keeper = keep_lease(lock, lease, acquired, timing, report);
    tokio::pin!(keeper);
    let mut keeper_running = true;
    let mut stopping = Stopping::default();

    loop {
        // The lease comes first: past its deadline the lock may already be
        // someone else's, so nothing else may happen before the command is
        // killed.
        if lease.has_lapsed() {
            stopping.lapsed();
            stopping.kill(child);
        } else if stopping.kill_at.is_some_and(BootInstant::has_passed) {
            stopping.kill(child);
        }
        let term_at = lease.deadline() - timing.kill_grace;
        let wake = stopping.next_wake(lease.deadline(), term_at, timeout_at);
        let (group, in_terminal) = (child.group(), child.has_terminal());

        tokio::select! {
            biased;
            _ = sleep_until_some(wake) => {
                // Renewals may have moved the deadline while this slept.
                if lease.has_lapsed() {
                    // lockrun could not run (paused, suspended) until past the
                    // deadline: the top of the loop kills and says so, rather
                    // than blaming renewals that never got the chance.
                } else if (lease.deadline() - timing.kill_grace).has_passed() {
                    // Stop while there is still time for a graceful exit.
                    stopping.begin(child, Stop::Unconfirmed, lease.deadline());
                } else if timeout_at.is_some_and(BootInstant::has_passed) {
                    stopping.begin(child, Stop::TimedOut, BootInstant::now() + timing.kill_grace);
                }
            }
            lost = &mut keeper, if keeper_running => {
                keeper_running = false;
                if let Lost::TokenGone = lost {
                    stopping.begin(child, Stop::TokenGone, BootInstant::now() + timing.kill_grace);
                } // Lost::Lapsed is handled at the top of the loop.
            }
            status = child.wait() => {
                if lease.has_lapsed() {
                    // It may have finished only after the lease ran out.
                    stopping.lapsed();
                }
                return (status.ok(), stopping.reason);
            }
            signal = signals.recv() => {
                report.verbose(format_args!("forwarding {signal} to the command"));
                child.signal_group(signal);
            }
            _ = child::stopped_from_terminal(group, child_changed), if in_terminal => {
                child.stop_along();
                // Stopped, lockrun could not renew: a lapsed lease is the top
                // of the loop's to handle, and the command stays stopped for
                // its SIGKILL.
                if !lease.has_lapsed() {
                    child.resume();
                }
            }
        }
    }
}

/// How far lockrun got in stopping the command.
#[derive(Default)]
struct Stopping {
    reason: Option<Stop>,
    kill_at: Option<BootInstant>,
    killed: bool,
}

impl Stopping {
    /// SIGTERM now, SIGKILL at `kill_at`. Only the first reason counts.
    fn begin(&mut self, child: &Child, reason: Stop, kill_at: BootInstant) {
        if self.reason.is_none() {
            self.reason = Some(reason);
            self.kill_at = Some(kill_at);
            child.signal_group(Signal::SIGTERM);
        }
    }

    /// The lease ran out. That outranks a timeout (the lock is what matters)
    /// but not an earlier, more precise reason for the same loss.
    fn lapsed(&mut self) {
        if matches!(self.reason, None | Some(Stop::TimedOut)) {
            self.reason = Some(Stop::Lapsed);
        }
    }

    fn kill(&mut self, child: &Child) {
        if !std::mem::replace(&mut self.killed, true) {
            child.signal_group(Signal::SIGKILL);
        }
    }

    /// The next moment the supervisor must act, or None when only the
    /// command's exit is left to wait for. A moment already acted on must not
    /// count again: a sleep that is always ready, polled first in a biased
    /// select, would starve the command's exit forever.
    fn next_wake(
        &self,
        deadline: BootInstant,
        term_at: BootInstant,
        timeout_at: Option<BootInstant>,
    ) -> Option<BootInstant> {
        if self.killed {
            return None;
        }
        let due = match self.reason {
            // SIGTERM went out: SIGKILL is next, at kill_at or when the lease lapses.
            Some(_) => [self.kill_at, None],
            None => [Some(term_at), timeout_at],
        };
        Some(due.into_iter().flatten().fold(deadline, BootInstant::min))
    }
}

/// Sleeps until `when`, or forever when there is nothing to wake for.
async fn sleep_until_some(when: Option<BootInstant>) {
    match when {
        Some(when) => lease::sleep_until(when).await,
        None => std::future::pending().await,
    }
}

/// Renews the lease every `renew_every`, retrying failures while time
/// remains. Returns only when the lease is lost for good.
async fn keep_lease(
    lock: &mut Lock,
    lease: &Lease,
    acquired: BootInstant,
    timing: Timing,
    report: Report,
) -> Lost {
    let mut next = acquired + timing.renew_every;
    let mut failing = false;
    loop {
        lease::sleep_until(next).await;
        // After a pause, a renewal must not revive a lease that lapsed.
        if lease.has_lapsed() {
            return Lost::Lapsed;
        }
        let sent = BootInstant::now();
        match lock.renew(timing.ttl).await {
            Ok(true) => {
                lease.extend_to(timing.deadline_after(sent));
                next = sent + timing.renew_every;
                if std::mem::take(&mut failing) {
                    report.error(format_args!("renewed {} again", lock.keys().lock));
                } else {
                    report.verbose(format_args!("renewed {}", lock.keys().lock));
                }
            }
            Ok(false) => return Lost::TokenGone,
            Err(err) => {
                let left = lease
                    .deadline()
                    .remaining()
                    .saturating_sub(timing.kill_grace);
                let message = format!(
                    "cannot renew {} ({err}); retrying for {} before stopping the command",
                    lock.keys().lock,
                    show(left)
                );
                if std::mem::replace(&mut failing, true) {
                    report.verbose(message);
                } else {
                    report.error(message);
                }
                next = BootInstant::now() + timing.retry_delay();
            }
        }
    }
}

fn lost_message(lock: &str, reason: Stop) -> String {
    let why = match reason {
        Stop::TokenGone => {
            "its key no longer holds this run's token (it expired, was removed \
                            with `lockrun release --force`, or Redis restarted empty)"
        }
        Stop::Unconfirmed => "the lease could not be renewed in time",
        Stop::Lapsed => "the lease ran out while lockrun could not run (paused or suspended)",
        Stop::TimedOut => "the command timed out",
    };
    format!("lost the lock {lock}: {why}; stopped the command")
}

fn busy_message(
    lock: &str,
    left: Option<Duration>,
    holder: Option<&Holder>,
    config: &RunConfig,
) -> String {
    let who = match holder {
        Some(h) => {
            let now_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros() as u64)
                .unwrap_or(0);
            let held = Duration::from_micros(now_us.saturating_sub(h.acquired_us));
            format!("by {} pid {} for {}", h.host, h.pid, show(held))
        }
        None => "by another run".into(),
    };
    let expiry = match left {
        Some(left) => format!(", lease expires in {}", show(left)),
        None => String::new(),
    };
    let waited = match config.wait {
        Some(crate::cli::Wait::Up(limit)) => format!(" after waiting {}", show(limit)),
        _ => String::new(),
    };
    format!(
        "{lock} is held {who}{expiry}; not running {}{waited} (exit {})",
        config.command[0].to_string_lossy(),
        config.busy_exit_code
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_already_acted_on_is_never_a_wake() {
        let s = Duration::from_secs(1);
        let now = BootInstant::now() + 100 * s;
        let deadline = now + 10 * s;
        let mut stopping = Stopping::default();
        assert_eq!(
            stopping.next_wake(deadline, now + 8 * s, Some(now + 3 * s)),
            Some(now + 3 * s)
        );

        // SIGTERM went out when term_at and the timeout passed: only SIGKILL is left.
        stopping.reason = Some(Stop::Unconfirmed);
        stopping.kill_at = Some(now + 2 * s);
        assert_eq!(
            stopping.next_wake(deadline, now - s, Some(now - s)),
            Some(now + 2 * s)
        );

        stopping.killed = true;
        assert_eq!(stopping.next_wake(deadline, now - s, None), None);
    }
}
