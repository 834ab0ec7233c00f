//! The supervised command: spawned directly (no shell) in a process group of
//! its own, tied to lockrun's life, and stopped as a group.
//!
//! Its own group lets lockrun stop everything the command started (a shell
//! script's children included) and keeps terminal signals from reaching it
//! twice: lockrun forwards them instead. When lockrun runs in the foreground
//! of a terminal, the command's group is made the terminal's foreground group
//! so that it can read the terminal and Ctrl-C reaches it directly; Ctrl-Z
//! stops both, and the shell's `fg` continues both.
//!
//! Stopping the command reaches further than its group: whatever it started
//! and left running, in any group or session, is stopped with it (see
//! `descendants`).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::process::ExitStatus;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{self, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::clock::BootInstant;
use crate::descendants;

mod spawn;
pub(crate) use spawn::Inherited;

/// How often lockrun looks whether a stopped group is gone.
const GROUP_POLL: Duration = Duration::from_millis(10);
/// How long lockrun waits for the kernel to take down what it SIGKILLed. A
/// SIGKILLed process runs no more of its own code; only one stuck in the
/// kernel (D state, a hung NFS mount) takes longer than this to go.
const KILL_SETTLE: Duration = Duration::from_secs(1);

/// Why the command could not be started.
#[derive(Debug)]
pub(crate) enum SpawnError {
    NotFound,
    /// exec reports a directory as "Permission denied", which sends people
    /// chasing file modes: it gets a variant of its own.
    IsDirectory,
    NotExecutable(io::Error),
    Other(io::Error),
}

impl SpawnError {
    fn from_io(err: io::Error, program: &OsStr) -> Self {
        match err.raw_os_error() {
            Some(libc::ENOENT) => SpawnError::NotFound,
            Some(libc::EACCES | libc::ENOEXEC | libc::EISDIR | libc::EPERM) => {
                if std::path::Path::new(program).is_dir() {
                    SpawnError::IsDirectory
                } else {
                    SpawnError::NotExecutable(err)
                }
            }
            _ => SpawnError::Other(err),
        }
    }
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::NotFound => f.write_str("command not found"),
            SpawnError::IsDirectory => f.write_str("cannot execute: is a directory"),
            SpawnError::NotExecutable(err) => write!(f, "cannot execute: {err}"),
            SpawnError::Other(err) => write!(f, "cannot start: {err}"),
        }
    }
}

impl std::error::Error for SpawnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpawnError::NotExecutable(err) | SpawnError::Other(err) => Some(err),
            SpawnError::NotFound | SpawnError::IsDirectory => None,
        }
    }
}

/// A running command and its process group.
pub(crate) struct Child {
    /// The command's pid, which is its group's id too.
    group: Pid,
    process: std::process::Child,
    /// Its exit status, once `try_wait` reaped it: from then on every
    /// exited child of lockrun is an orphan for lockrun to reap.
    status: Option<ExitStatus>,
    /// Set when the child's group took over the terminal; lockrun takes it
    /// back when the child is gone.
    terminal: bool,
}

impl Child {
    /// Starts `argv` in lockrun's environment, `inherited`, changed by `env`:
    /// a value sets the variable, None removes it; the variables named in
    /// `own_pid` are set to the command's own pid.
    pub(crate) fn spawn(
        argv: &[OsString],
        inherited: Inherited,
        env: &[(&str, Option<OsString>)],
        own_pid: &[&str],
    ) -> Result<Child, SpawnError> {
        let Some(program) = argv.first() else {
            return Err(SpawnError::NotFound);
        };
        let terminal = in_terminal_foreground();
        let process = spawn::spawn(argv, inherited, env, own_pid, terminal)
            .map_err(|err| SpawnError::from_io(err, program))?;
        let group = Pid::from_raw(
            i32::try_from(process.id())
                .map_err(|_| SpawnError::Other(io::Error::from_raw_os_error(libc::EOVERFLOW)))?,
        );
        Ok(Child {
            group,
            process,
            status: None,
            terminal,
        })
    }

    /// Sends `signal` to every process in the child's group: what a signal
    /// forwarded to the command reaches.
    pub(crate) fn signal_group(&self, signal: Signal) {
        // ESRCH only means the group is already empty.
        let _ = signal::killpg(self.group, signal);
    }

    /// Sends `signal` to everything the command started: its group, and every
    /// descendant that left the group (setsid, a daemon's double fork). Each
    /// process gets it once, so that a second SIGTERM cannot read as "force
    /// quit".
    pub(crate) fn signal_all(&self, signal: Signal) {
        self.signal_group(signal);
        for process in descendants::live(self.group).into_iter().flatten() {
            if process.group != self.group {
                let _ = signal::kill(process.pid, signal);
            }
        }
    }

    /// Whether anything the command started is alive. Reaps lockrun's exited
    /// children before and after looking, so that a zombie neither counts
    /// nor stays behind.
    fn anything_left(&self) -> bool {
        self.reap_orphans();
        let left = match descendants::live(self.group) {
            Some(live) => !live.is_empty(),
            None => signal::killpg(self.group, None) != Err(Errno::ESRCH),
        };
        self.reap_orphans();
        left
    }

    /// Reaps the orphans that were reparented to lockrun and have exited.
    pub(crate) fn reap_orphans(&self) {
        descendants::reap_orphans(self.status.is_none().then_some(self.group));
    }

    /// The command's (the group leader's) exit status if it exited, reaping
    /// it; None while it runs. Asked on every SIGCHLD.
    pub(crate) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            // The command is our own child, which nothing else reaps
            // (`reap_orphans` leaves it).
            self.status = self.process.try_wait()?;
            if self.status.is_some() {
                self.give_back_terminal();
            }
        }
        Ok(self.status)
    }

    /// Stops what the command left running after it exited: SIGTERM, then
    /// SIGKILL at `kill_at`. Work started by the command must not outlive the
    /// lock. Returns false if something survived even SIGKILL.
    pub(crate) async fn stop_stragglers(&self, kill_at: BootInstant) -> bool {
        if !self.anything_left() {
            return true;
        }
        self.signal_all(Signal::SIGTERM);
        self.wait_gone(kill_at, None).await;
        self.kill_all().await
    }

    /// SIGKILLs everything the command started, and waits a little for the
    /// kernel to take it down. Returns false if something is still there.
    pub(crate) async fn kill_all(&self) -> bool {
        // Sent again every round: a process may have forked since the last.
        self.wait_gone(BootInstant::now() + KILL_SETTLE, Some(Signal::SIGKILL))
            .await
    }

    /// Polls until nothing the command started is left (true) or `until`
    /// passed (false), sending `resend` to what is left every round.
    async fn wait_gone(&self, until: BootInstant, resend: Option<Signal>) -> bool {
        loop {
            let looked = std::time::Instant::now();
            if !self.anything_left() {
                return true;
            }
            if until.has_passed() {
                return false;
            }
            if let Some(signal) = resend {
                self.signal_all(signal);
            }
            // A look through /proc takes longer the more processes the
            // machine runs: never spend more than half the time looking.
            tokio::time::sleep(GROUP_POLL.max(looked.elapsed())).await;
        }
    }

    /// Whether the command's group has the terminal, so that Ctrl-Z stops it.
    pub(crate) fn has_terminal(&self) -> bool {
        self.terminal
    }

    pub(crate) fn group(&self) -> Pid {
        self.group
    }

    /// Whether the command's leader is stopped from the terminal: Ctrl-Z, or
    /// reading or writing the terminal from the background. Asked on SIGCHLD.
    pub(crate) fn stopped_from_terminal(&self) -> bool {
        // WSTOPPED without WEXITED reports stops only: the exit stays for
        // `try_wait` to reap.
        let status = waitid(
            Id::Pid(self.group),
            WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG,
        );
        matches!(
            status,
            Ok(WaitStatus::Stopped(
                _,
                Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU
            ))
        )
    }

    /// Follows the command into a terminal stop (Ctrl-Z): takes the terminal
    /// back and stops lockrun the same way, so that the shell that started
    /// lockrun sees its job stopped and gives its prompt back. Returns once
    /// lockrun is continued (`fg`); `resume` then continues the command.
    pub(crate) fn stop_along(&mut self) {
        self.give_back_terminal();
        // In an orphaned process group (a parent outside the session, as
        // under a shell without job control) the kernel discards SIGTSTP:
        // lockrun then simply goes on.
        let _ = signal::raise(Signal::SIGTSTP);
    }

    /// Hands the terminal back to the command's group and continues it.
    pub(crate) fn resume(&mut self) {
        self.terminal = set_foreground(self.group);
        self.signal_group(Signal::SIGCONT);
    }

    fn give_back_terminal(&mut self) {
        if std::mem::take(&mut self.terminal) {
            set_foreground(nix::unistd::getpgrp());
        }
    }
}

/// Makes `group` the terminal's foreground process group.
fn set_foreground(group: Pid) -> bool {
    // lockrun's group is in the background while the command has the
    // terminal, and a background group that sets the foreground gets
    // SIGTTOU unless it blocks it.
    let ttou = SigSet::from(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    if signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old)).is_err() {
        return false;
    }
    let done = nix::unistd::tcsetpgrp(io::stdin().as_fd(), group).is_ok();
    let _ = signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    done
}

impl Drop for Child {
    fn drop(&mut self) {
        self.give_back_terminal();
    }
}

/// Whether stdin is a terminal whose foreground group is lockrun's own: only
/// then is the terminal lockrun's to hand over.
fn in_terminal_foreground() -> bool {
    let stdin = io::stdin();
    match nix::unistd::tcgetpgrp(stdin.as_fd()) {
        Ok(group) => group == nix::unistd::getpgrp() && stdin.as_raw_fd() == 0,
        Err(_) => false,
    }
}
