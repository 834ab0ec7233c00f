//! One run, step by step: acquire → start the command → supervise → finish
//! (stop leftovers, release or keep for `--min-hold`) → exit status. This is
//! the only module that knows the lock, the lease and the command together.

use std::time::Duration;

use crate::child::{Child, Inherited, SpawnError};
use crate::clock::{whole, BootInstant, MS};
use crate::config::RunConfig;
use crate::error::{Busy, Error, Unreleased};
use crate::exit_code::{self, Exit};
use crate::lease::Lease;
use crate::lock::{
    Attempt, DoneRecord, Grant, HoldersAndWaiters, Holding, Keys, Lock, LockError, Released,
    Requester, Role, Run, Servers, ToRecord, Token,
};
use crate::notify::{self, Systemd};
use crate::report::{self, Message};
use crate::secrets;
use crate::signals::Signals;
use crate::supervise::{self, Ended, Stop};
use crate::wait;

mod metrics_file;
use metrics_file::MetricsFile;

/// Runs the configured command under the lock. `signals` and `token` are
/// made by the caller, so that they exist before anything can go wrong.
pub(crate) async fn run(config: RunConfig, signals: Signals, token: Token) -> Result<Exit, Error> {
    // The one place that sees how every run ends, for the metrics file.
    let mut metrics = MetricsFile::new(&config);
    // Dropped when the run ends, however it ends: that removes the command's
    // notification socket.
    let mut systemd = Systemd::from_env();
    let result = run_steps(config, signals, token, &mut metrics, &mut systemd).await;
    if let Err(err) = &result {
        // A oneshot unit keeps it after lockrun exits: `systemctl status`
        // says who had the lock.
        systemd.exiting(err);
    }
    metrics.ended(&result).await;
    result
}

async fn run_steps(
    config: RunConfig,
    mut signals: Signals,
    token: Token,
    metrics: &mut MetricsFile,
    systemd: &mut Systemd,
) -> Result<Exit, Error> {
    let mut lock = lock(&config, &token);
    let asked = BootInstant::now();
    // Who this run is, for its holder record, its place in line and its
    // history: said once, for host name and pid do not change.
    let requester = Requester::new(&config.command);
    // The command's environment is copied, and the release's script made,
    // while the acquire (polled first) waits on Redis: not on the way from
    // the grant to the fork or from the command's end to the release, where
    // a hand-off would wait for them (BENCHMARKS.md).
    let (turn, inherited, ()) = tokio::join!(
        biased;
        acquire(&config, &requester, &mut lock, &mut signals, systemd),
        async { Inherited::read() },
        async { Lock::prepare_release() }
    );
    let grant = match turn? {
        RunOrSkip::Run(grant) => grant,
        RunOrSkip::Skip(done) => {
            say_skipped(&done, lock.keys());
            return Ok(Exit::Status(0));
        }
    };
    metrics.acquired();
    warn_if_unprotected(&lock);
    let child = match start(&config, grant, inherited, systemd) {
        Ok(started) => started,
        Err(cause) => {
            return Err(not_started(config.program(), cause, &mut lock).await);
        }
    };
    let slot = config.holding.slot(grant.slot);
    let on = &config.lock.servers;
    let waited = asked.elapsed();
    say_acquired(&lock, on, grant.fence, slot, &child, waited);
    systemd.holding(&config.lock.name, grant.fence, std::time::SystemTime::now());
    let mut active = ActiveRun {
        lease: Lease::new(config.timing.deadline_after(grant.sent)),
        started: BootInstant::now(),
        lock,
        child,
        fence: grant.fence,
        slot,
        waited,
        user: user_name(),
        requester,
    };
    let timeout_at = config.timeout.map(|limit| active.started + limit);
    let ended = supervise::supervise(
        &mut active.child,
        &mut signals,
        &mut active.lock,
        &active.lease,
        grant.sent,
        timeout_at,
        systemd,
    )
    .await;
    systemd.ended(&config.lock.name, ended.status.as_ref().ok().copied());
    let unreleased = active.finish(&config, &ended).await;
    exit_status(ended, &active.lock, unreleased)
}

/// Says, with --verbose, that the lock is taken on which servers and the
/// command started.
fn say_acquired(
    lock: &Lock,
    on: &Servers,
    fence: u64,
    slot: Option<u32>,
    child: &Child,
    waited: Duration,
) {
    report::say(Message::Acquired {
        lock: &lock.keys().lock,
        on,
        fence,
        slot,
        waited,
        pid: child.group().as_raw(),
    });
}

/// Says, once per run, that `--replica-acks all` found no replica to copy
/// the lease to: the operator asked for protection against a failover and
/// does not have it.
fn warn_if_unprotected(lock: &Lock) {
    let lock_key = &lock.keys().lock;
    if lock.lacks_wait() {
        report::say(Message::NoWait { lock: lock_key });
    } else if lock.unprotected() {
        report::say(Message::NoReplica { lock: lock_key });
    }
}

/// The lock, on one server or on a quorum of them when `--redis` was given
/// three times or more.
fn lock(config: &RunConfig, token: &Token) -> Lock {
    let servers = &config.lock.servers;
    if let Servers::Quorum(members) = servers {
        if members.len().is_multiple_of(2) {
            report::say(Message::EvenQuorum {
                servers: members.len(),
            });
        }
    }
    let role = Role {
        token: token.clone(),
        holding: config.holding,
        acks: config.replica_acks,
        may_wait: config.wait.is_some_and(wait::Wait::may_wait),
    };
    Lock::new(servers, config.timing, config.lock.keys.clone(), &role)
}

/// Says, with `--verbose`, that the job ran already this period
/// (`--once-per`): who ran it, when, and when the period ends, on Redis's
/// clock.
fn say_skipped(done: &DoneRecord, keys: &Keys) {
    report::say(Message::Skipped {
        lock: &keys.name,
        done,
    });
}

/// What a run does once it asked for the lock.
enum RunOrSkip {
    /// Runs the command under this lease.
    Run(Grant),
    /// Skips it: the job is done this period (`--once-per`), and the lock
    /// went on to the next waiter.
    Skip(DoneRecord),
}

/// Connects, then takes the lock, waiting for it if asked to. A signal ends
/// the wait.
async fn acquire(
    config: &RunConfig,
    requester: &Requester,
    lock: &mut Lock,
    signals: &mut Signals,
    systemd: &Systemd,
) -> Result<RunOrSkip, Error> {
    let (wait, supersede) = (config.wait, config.supersede);
    let attempt = wait::acquire(lock, requester, wait, supersede, systemd);
    let outcome = tokio::select! {
        signal = signals.recv_interrupt() => Err(match signal {
            Ok(signal) => Error::Interrupted(signal),
            Err(source) => Error::Internal { doing: "read the signals lockrun catches", source },
        }),
        result = attempt => result.map_err(Error::from),
    };
    let busy = |found: Option<HoldersAndWaiters>, superseded_by: Option<String>| {
        Error::Busy(Box::new(Busy {
            lock: lock.keys().name.clone(),
            found: found.unwrap_or_else(HoldersAndWaiters::unknown),
            command: config.program(),
            waited: config.wait.and_then(wait::Wait::limit),
            // Superseded is no busy lock: its own status, whatever
            // --busy-exit-code says.
            exit: if superseded_by.is_some() {
                exit_code::SUPERSEDED
            } else {
                config.busy_exit_code
            },
            superseded_by,
        }))
    };
    let err = match outcome {
        Ok(Attempt::Acquired(grant)) => return Ok(RunOrSkip::Run(grant)),
        Ok(Attempt::Done(done)) => return Ok(RunOrSkip::Skip(done)),
        Ok(Attempt::Busy(found) | Attempt::Queued { found, .. }) => busy(Some(found), None),
        Ok(Attempt::Superseded { by }) => busy(None, Some(by)),
        Ok(Attempt::Mismatch { slots }) => Error::Usage(mismatch(config, slots)),
        // Only a failure that waiting may see pass outlasts a bounded wait.
        Err(Error::Lock(last)) if last.is_retryable() => {
            match config.wait.and_then(wait::Wait::limit) {
                Some(waited) if !waited.is_zero() => Error::WaitedOut { last, waited },
                _ => Error::Lock(last),
            }
        }
        Err(err) => err,
    };
    // A run that stops waiting leaves the line; a call that timed out, or
    // the signal, may have come after the lock was taken after all, or a
    // release may have handed it over: give it back.
    let gave_back = lock.abandon().await;
    Err(match (err, gave_back) {
        (Error::Lock(err), Err(later)) => Error::Lock(err.then_giving_back(&later)),
        (Error::WaitedOut { last, waited }, Err(later)) => Error::WaitedOut {
            last: last.then_giving_back(&later),
            waited,
        },
        (err, _) => err,
    })
}

/// The line for a run whose `--slots` is not the number the lock's holders
/// and waiters agreed on.
fn mismatch(config: &RunConfig, theirs: u32) -> String {
    let given = |n: u32| match n {
        1 => "no --slots (or --slots 1)".to_owned(),
        n => format!("--slots {n}"),
    };
    format!(
        "{} is held or waited for with {}, and this run gave {}; give the same, or change \
         it when nobody holds or waits",
        config.lock.name,
        given(theirs),
        given(config.holding.slots())
    )
}

/// Starts the command in lockrun's environment, `inherited`, with its
/// fencing token (and slot), and, under systemd, lockrun's notification
/// socket and its own pid where systemd gave lockrun's.
fn start(
    config: &RunConfig,
    grant: Grant,
    inherited: Inherited,
    systemd: &mut Systemd,
) -> Result<Child, SpawnError> {
    let mut env = secrets::hidden_from_command();
    env.push(("LOCKRUN_KEY", Some(config.lock.name.clone().into())));
    env.push((
        "LOCKRUN_FENCING_TOKEN",
        Some(grant.fence.to_string().into()),
    ));
    if let Some(slot) = config.holding.slot(grant.slot) {
        env.push(("LOCKRUN_SLOT", Some(slot.to_string().into())));
    }
    env.extend(systemd.for_command());
    Child::spawn(&config.command, inherited, &env, &notify::pid_vars())
}

/// A command that could not be started gives the lock back at once, and
/// says so with --verbose; a lock that could not be given back is said
/// after why the command did not start, with when it expires.
async fn not_started(program: String, cause: SpawnError, lock: &mut Lock) -> Error {
    let unreleased = match lock.release(None, None, None).await {
        // Taken just now, and already not ours: nothing to give back.
        Ok(Released::NotOurs) => None,
        Ok(Released::Deleted | Released::Kept) => {
            report::say(Message::Released {
                lock: &lock.keys().lock,
                held: Duration::ZERO,
                exit_status: None,
            });
            None
        }
        Err(cause) => Some(Box::new(Unreleased {
            lock: lock.keys().name.clone(),
            within: lock.timing().ttl,
            cause,
        })),
    };
    Error::Spawn {
        program,
        cause,
        unreleased,
    }
}

/// What a run holds once its command started.
struct ActiveRun {
    lock: Lock,
    lease: Lease,
    /// When the command started: `--timeout` and `--min-hold` count from
    /// here (a lease handed over counts from earlier).
    started: BootInstant,
    child: Child,
    /// For the run's record in the history.
    fence: u64,
    slot: Option<u32>,
    waited: Duration,
    /// Looked up (from /etc/passwd) once the command has started, while it
    /// runs: not on the way from its exit to the release.
    user: String,
    requester: Requester,
}

impl ActiveRun {
    /// Stops whatever the command left running, then gives the lock back,
    /// or keeps it until `--min-hold` is over. A lock that could not be
    /// given back is returned, to be said after why the run ended.
    async fn finish(&mut self, config: &RunConfig, ended: &Ended) -> Option<Box<Unreleased>> {
        let (timing, stop) = (self.lock.timing(), ended.stop);
        // Whatever the command left running must not outlive the lock.
        let gone = if matches!(stop, Some(Stop::Lost(_))) {
            self.child.kill_all().await
        } else {
            let kill_at = (BootInstant::now() + timing.kill_grace).min(self.lease.deadline());
            self.child.stop_stragglers(kill_at).await
        };
        if !gone {
            report::say(Message::Stragglers);
        }
        let keep = match (stop, config.min_hold) {
            (None | Some(Stop::TimedOut), Some(min_hold)) => {
                Some(min_hold.saturating_sub(self.started.elapsed())).filter(|d| !d.is_zero())
            }
            _ => None,
        };
        // Only a command that exited 0 by itself, its lease held to the
        // end, makes the job done this period: any failure lets the next
        // run through.
        let succeeded = stop.is_none() && matches!(ended.status, Ok(s) if s.success());
        let done_for = config.holding.once_per().filter(|_| succeeded);
        let record = ToRecord::new(config.history, &self.record(config, ended));
        let released = self.lock.release(keep, done_for, record.as_ref()).await;
        if let Some(unheard) = self.lock.take_unheard() {
            report::say(Message::WaitersNotTold {
                lock: &self.lock.keys().name,
                error: unheard.to_string(),
            });
        }
        self.say_released(released, keep, ended)
    }

    /// What the history keeps of this run: the release adds when it ended
    /// and what it found.
    fn record(&self, config: &RunConfig, ended: &Ended) -> Run {
        let status = ended.status.as_ref().ok();
        Run {
            host: self.requester.host.clone(),
            pid: self.requester.pid,
            user: self.user.clone(),
            command: program_name(config),
            fence: self.fence,
            slot: self.slot,
            shared: config.holding == Holding::Shared,
            waited_ms: whole(self.waited, MS),
            held_ms: whole(self.started.elapsed(), MS),
            exit: status.and_then(std::process::ExitStatus::code),
            signal: status.and_then(std::os::unix::process::ExitStatusExt::signal),
            stop: ended.stop.map(|stop| {
                match stop {
                    Stop::Lost(_) => "lost",
                    Stop::TimedOut => "timeout",
                }
                .to_owned()
            }),
        }
    }

    /// Says how the lock was given back, if that is news; a lock that could
    /// not be given back is returned instead.
    fn say_released(
        &self,
        released: Result<Released, LockError>,
        keep: Option<Duration>,
        ended: &Ended,
    ) -> Option<Box<Unreleased>> {
        let Keys { name, lock, .. } = self.lock.keys().clone();
        let exit_status = ended
            .status
            .as_ref()
            .ok()
            .map(|s| exit_code::from_child(*s));
        let held = self.started.elapsed();
        match released {
            Ok(Released::Deleted) => report::say(Message::Released {
                lock: &lock,
                held,
                exit_status,
            }),
            Ok(Released::Kept) => report::say(Message::Kept {
                lock: &lock,
                held,
                exit_status,
                kept: keep.unwrap_or_default(),
            }),
            Ok(Released::NotOurs) if ended.stop.is_none() => {
                report::say(Message::GoneAtRelease { lock: &name });
            }
            Ok(Released::NotOurs) => {}
            Err(cause) => {
                return Some(Box::new(Unreleased {
                    lock: name,
                    within: self.lock.timing().ttl,
                    cause,
                }))
            }
        }
        None
    }
}

/// lockrun's exit status: the command's, unless lockrun stopped it. A lock
/// left unreleased is said after the reason lockrun stopped the command,
/// within the same line, or alone when the command ended by itself.
fn exit_status(
    ended: Ended,
    lock: &Lock,
    unreleased: Option<Box<Unreleased>>,
) -> Result<Exit, Error> {
    match ended.stop {
        None => {
            if let Some(unreleased) = unreleased {
                report::say(Message::Unreleased(&unreleased));
            }
            ended
                .status
                .map(Exit::of_child)
                .map_err(|source| Error::Internal {
                    doing: "wait for the command",
                    source,
                })
        }
        Some(Stop::TimedOut) => Err(Error::TimedOut { unreleased }),
        Some(Stop::Lost(loss)) => Err(Error::LeaseLost {
            lock: lock.keys().name.clone(),
            loss,
            unreleased,
        }),
    }
}

/// The user running lockrun, as the history records it: the name, or the
/// uid where it has none.
fn user_name() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        _ => uid.to_string(),
    }
}

/// The command's file name, without its directory or arguments (which may
/// hold secrets), for the history.
fn program_name(config: &RunConfig) -> String {
    let program = config.program();
    std::path::Path::new(&program)
        .file_name()
        .map_or(program.clone(), |name| name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests;
