//! The signals lockrun catches, and why.
//!
//! These are the ones an operator, a terminal or a service manager sends to
//! ask a job to stop, reload or redraw. While lockrun waits for the lock they
//! abort the wait; while the command runs they are forwarded to its process
//! group, and lockrun keeps renewing until the command exits. Catching them
//! also means lockrun never dies of one of them and leaves a lock behind.
//! Handlers stay installed for lockrun's whole life (tokio cannot remove
//! them), which is what we want.

use std::io;
use std::task::Poll;

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};

pub(crate) const FORWARDED: [Signal; 7] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// Streams of every forwarded signal.
pub(crate) struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    pub(crate) fn install() -> io::Result<Self> {
        let streams = FORWARDED
            .iter()
            .map(|&sig| Ok((sig, signal(SignalKind::from_raw(sig as i32))?)))
            .collect::<io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal that should end a wait for the lock: any but
    /// SIGWINCH, which only says a terminal was resized (with no command
    /// running yet there is no one to tell).
    pub(crate) async fn recv_interrupt(&mut self) -> Signal {
        loop {
            let signal = self.recv().await;
            if signal != Signal::SIGWINCH {
                return signal;
            }
        }
    }

    /// The next signal that arrived.
    pub(crate) async fn recv(&mut self) -> Signal {
        std::future::poll_fn(|cx| {
            for (sig, stream) in &mut self.streams {
                if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                    return Poll::Ready(*sig);
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// A stream of SIGCHLD, for noticing the command stopped from the terminal
/// (tokio's own SIGCHLD handling only reaps exits).
pub(crate) fn child_changes() -> io::Result<tokio::signal::unix::Signal> {
    signal(SignalKind::child())
}
