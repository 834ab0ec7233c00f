//! What a run writes to its metrics file (`--metrics-file`): once when it
//! takes the lock, once when it ends, with how it ended.
//!
//! The writes run on tokio's blocking pool, not on the runtime's one thread:
//! an update may wait up to `metrics::LOCK_WAIT` for another lockrun's, and a
//! file system may stall, while from the moment the lock is taken the lease
//! keeper on that thread must renew on time. The end waits for both writes,
//! in order, so that a late acquisition write cannot undo the end, but no
//! longer than `END_LIMIT`: a hung file system must not keep lockrun from
//! exiting.

use std::fmt::Display;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::clock::{unix_now_us, BootInstant};
use crate::config::RunConfig;
use crate::error::Error;
use crate::exit_code::Exit;
use crate::metrics::{self, Change, HoldSummary, Outcome, Process};
use crate::report::{self, Message};

/// How long the end of a run waits for its writes: both may wait for the
/// lock file, and then some for the file system.
const END_LIMIT: Duration = Duration::from_secs(2 * metrics::LOCK_WAIT.as_secs() + 1);

/// One run's writes to the metrics file; does nothing without one.
pub(super) struct MetricsFile {
    file: Option<Arc<Writer>>,
    began: BootInstant,
    /// When the lock was taken, on the boot clock and as Unix time, and how
    /// long the run waited for it.
    acquired: Option<(BootInstant, u64, Duration)>,
    /// The acquisition's write, still under way.
    pending: Option<JoinHandle<()>>,
}

/// The file and the key it is written for.
struct Writer {
    path: PathBuf,
    key: String,
    /// This process, as the file's records of the runs that hold a lock
    /// name it.
    me: Process,
    /// A run says once that the file cannot be written, however often it
    /// tries.
    warned: AtomicBool,
}

impl Writer {
    fn write(&self, change: Change) {
        if let Err(err) = metrics::update(&self.path, &self.key, change, &self.me) {
            self.warn(err);
        }
    }

    fn warn(&self, cause: impl Display) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            report::say(Message::MetricsUnwritable {
                path: &self.path,
                cause: cause.to_string(),
            });
        }
    }
}

impl MetricsFile {
    pub(super) fn new(config: &RunConfig) -> Self {
        let file = config.metrics_file.clone().map(|path| {
            Arc::new(Writer {
                path,
                key: config.lock.name.clone(),
                me: Process::me(),
                warned: AtomicBool::new(false),
            })
        });
        MetricsFile {
            file,
            began: BootInstant::now(),
            acquired: None,
            pending: None,
        }
    }

    /// The lock is taken: the file says that this host runs the command.
    pub(super) fn acquired(&mut self) {
        let (now, at_us, waited) = (BootInstant::now(), unix_now_us(), self.began.elapsed());
        self.acquired = Some((now, at_us, waited));
        if let Some(file) = &self.file {
            let file = Arc::clone(file);
            let change = Change::Acquired { at_us, waited };
            self.pending = Some(tokio::task::spawn_blocking(move || file.write(change)));
        }
    }

    /// The run ended with `result`, after the lock was given back or lost:
    /// counts its outcome and, if it held the lock, how it ended.
    pub(super) async fn ended(self, result: &Result<Exit, Error>) {
        let Some(file) = self.file else { return };
        let at_us = unix_now_us();
        let change = outcome(result).map(|outcome| match self.acquired {
            Some((at, acquired_us, waited)) => Change::Ended {
                outcome,
                at_us,
                waited,
                held: Some(HoldSummary {
                    acquired_us,
                    duration: at.elapsed(),
                    exit_status: result
                        .as_ref()
                        .map_or_else(Error::exit_code, |exit| exit.status()),
                }),
            },
            None => Change::Ended {
                outcome,
                at_us,
                waited: self.began.elapsed(),
                held: None,
            },
        });
        let writes = async {
            if let Some(pending) = self.pending {
                let _ = pending.await;
            }
            if let Some(change) = change {
                let file = Arc::clone(&file);
                let _ = tokio::task::spawn_blocking(move || file.write(change)).await;
            }
        };
        if tokio::time::timeout(END_LIMIT, writes).await.is_err() {
            file.warn(format_args!(
                "the file system did not finish within {}s",
                END_LIMIT.as_secs()
            ));
        }
    }
}

/// The `outcome` label for how a run ended; None for a run that a signal
/// ended while it waited, which leaves the file as it was.
fn outcome(result: &Result<Exit, Error>) -> Option<Outcome> {
    Some(match result {
        Ok(Exit::Status(0)) => Outcome::Ok,
        // The command ran, or was to run, and did not succeed.
        Ok(_) | Err(Error::Spawn { .. } | Error::Internal { .. }) => Outcome::Failed,
        Err(Error::Busy(_)) => Outcome::Busy,
        Err(Error::LeaseLost { .. }) => Outcome::Lost,
        Err(Error::TimedOut { .. }) => Outcome::Timeout,
        Err(Error::Lock(_) | Error::WaitedOut { .. }) => Outcome::Unavailable,
        Err(Error::Interrupted(_) | Error::Usage(_)) => return None,
    })
}
