//! The signals lockrun catches: those an operator, a terminal or a service
//! manager sends to stop, reload or redraw a job (SIGABRT is systemd's
//! watchdog signal), and SIGCHLD. They abort a wait and are forwarded to a
//! running command, so lockrun never dies of one with the lock held; it dies
//! of one only at the very end, by choice (`die_of`), after the release.
//! Why they are blocked from the start and read from a signalfd, and which
//! ignored ones it takes back, is in docs/design.md ("Stopping the command").

use std::io;
use std::marker::PhantomData;

use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::exit_code;

pub(crate) const FORWARDED: [Signal; 8] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGABRT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// The forwarded signals and SIGCHLD: the ones lockrun handles.
fn handled() -> SigSet {
    let mut set: SigSet = FORWARDED.into_iter().collect();
    set.add(Signal::SIGCHLD);
    set
}

/// Proof that the calling thread blocked the handled signals, made only by
/// `Blocked::now`, which `lockrun::main` calls first: the signalfd can be
/// opened only with it.
pub(crate) struct Blocked {
    /// The mask lockrun started with.
    before: SigSet,
    /// Not `Send`: a mask is a thread's, and the proof holds on the thread
    /// that made it (and those it started afterwards).
    _thread: PhantomData<*const ()>,
}

impl Blocked {
    /// Blocks the handled signals in the calling thread, and so in every
    /// thread it starts afterwards.
    pub(crate) fn now() -> io::Result<Blocked> {
        let mut before = SigSet::empty();
        nix::sys::signal::pthread_sigmask(
            SigmaskHow::SIG_BLOCK,
            Some(&handled()),
            Some(&mut before),
        )?;
        Ok(Blocked {
            before,
            _thread: PhantomData,
        })
    }

    /// Gives the handled signals back their effect, for an invocation that
    /// takes no lock (`status`, `release`, `list`): there nothing is left
    /// behind if one ends lockrun, as Ctrl-C should.
    pub(crate) fn undo(self) {
        let _ =
            nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&self.before), None);
    }
}

/// Every forwarded signal and SIGCHLD, as they arrive.
pub(crate) struct Signals {
    fd: AsyncFd<SignalFd>,
    /// Kept for as long as the signalfd is read: they stay blocked.
    _blocked: Blocked,
}

impl Signals {
    /// Opens the signalfd that reads the signals `blocked` holds back, less
    /// those left ignored (see the module's comment).
    pub(crate) fn install(blocked: Blocked) -> io::Result<Self> {
        let mut taken = handled();
        for signal in FORWARDED {
            if stays_ignored(signal)? {
                taken.remove(signal);
                unblock(signal)?;
            }
        }
        let fd = SignalFd::with_flags(&taken, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        // SAFETY: the SignalFd owns its fd, which stays open and the same
        // until the AsyncFd drops it: nothing replaces the SignalFd inside.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(Signals {
            fd,
            _blocked: blocked,
        })
    }

    /// The next signal that should end a wait for the lock: any but
    /// SIGWINCH, which only says a terminal was resized, and SIGCHLD (with
    /// no command running yet there is no one to tell or reap).
    pub(crate) async fn recv_interrupt(&mut self) -> io::Result<Signal> {
        loop {
            let signal = self.recv().await?;
            if !matches!(signal, Signal::SIGWINCH | Signal::SIGCHLD) {
                return Ok(signal);
            }
        }
    }

    /// The next signal that arrived. Two of one kind that arrive before it
    /// is read are one, as with handlers: SIGCHLD says "look", not how many.
    pub(crate) async fn recv(&mut self) -> io::Result<Signal> {
        loop {
            let mut ready = self.fd.readable().await?;
            match ready.get_inner().read_signal() {
                Ok(Some(info)) => {
                    if let Ok(signal) = Signal::try_from(i32::try_from(info.ssi_signo).unwrap_or(0))
                    {
                        return Ok(signal);
                    }
                }
                Ok(None) => ready.clear_ready(),
                Err(errno) => return Err(errno.into()),
            }
        }
    }
}

/// Sets `signal`'s action to the default, which the command inherits,
/// unless it was ignored on purpose when lockrun started: then it stays
/// ignored, and the answer is true.
fn stays_ignored(signal: Signal) -> io::Result<bool> {
    let background_job = matches!(signal, Signal::SIGINT | Signal::SIGQUIT);
    // SAFETY: SIG_DFL and SIG_IGN are no handlers: no code of lockrun's
    // ever runs in a signal's context.
    let before = unsafe { nix::sys::signal::signal(signal, SigHandler::SigDfl) }?;
    if before == SigHandler::SigIgn && !background_job {
        // SAFETY: as above.
        unsafe { nix::sys::signal::signal(signal, SigHandler::SigIgn) }?;
        return Ok(true);
    }
    Ok(false)
}

/// Ends lockrun by `signal`, the way its command ended (or the way the
/// signal that ended its wait would have ended it), so that its parent
/// sees that death: `exit_code::Exit` says why. Called last, once the lock
/// is released and everything is said. A core file of lockrun's is not what
/// a SIGABRT or SIGQUIT asked for (the command's is): undumpable, lockrun
/// leaves none, not even to a core_pattern pipe; the size limit is for an
/// emulator (qemu-user) that writes its guest's core itself. Returns, with
/// the shell's 128+N, only for a signal whose default action does not end
/// a process.
pub(crate) fn die_of(signal: Signal) -> u8 {
    let _ = nix::sys::prctl::set_dumpable(false);
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
    // SAFETY: SIG_DFL is no handler: no code runs in the signal's context.
    let _ = unsafe { nix::sys::signal::signal(signal, SigHandler::SigDfl) };
    // Still blocked, as lockrun's signals are: the signal waits for this
    // thread, and the unblocking delivers it.
    let _ = nix::sys::signal::raise(signal);
    let _ = unblock(signal);
    exit_code::from_signal(signal as i32)
}

/// Unblocks `signal` in the calling thread.
fn unblock(signal: Signal) -> io::Result<()> {
    let mut one = SigSet::empty();
    one.add(signal);
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&one), None)?;
    Ok(())
}
