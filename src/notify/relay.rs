//! The command's notification socket: a datagram socket in a directory of
//! lockrun's own (mode 0700, so that only lockrun's user can send to it),
//! whose messages lockrun passes on to systemd from its own pid, keeping
//! only what systemd may hear from a unit's main process without changing
//! who that is.

use std::io::{self, IoSliceMut};
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use nix::sys::socket::{recvmsg, MsgFlags, UnixAddr};
use tokio::io::Interest;
use tokio::net::UnixDatagram;

use super::Link;
use crate::report::{self, Message};

/// What the command may say, passed on as it is: exact lines, and prefixes
/// of lines that carry a value. Not `MAINPID=` (lockrun stays the main
/// process, which it must to keep the command supervised), nor
/// `FDSTORE=1` and the file descriptors that come with it (the store would
/// hand systemd descriptors of a process it does not know), nor anything
/// unknown.
const EXACT: [&[u8]; 5] = [
    b"READY=1",
    b"RELOADING=1",
    b"STOPPING=1",
    b"WATCHDOG=1",
    b"WATCHDOG=trigger",
];
const WITH_VALUE: [&[u8]; 4] = [
    b"STATUS=",
    b"ERRNO=",
    b"MONOTONIC_USEC=",
    b"EXTEND_TIMEOUT_USEC=",
];
/// systemd reads at most this much of a notification (its
/// NOTIFY_BUFFER_MAX); a longer one is cut short and dropped.
const DATAGRAM_MAX: usize = 4096;

/// The command's socket, and the directory it is in; removed when dropped.
pub(super) struct Relay {
    dir: PathBuf,
    path: PathBuf,
    /// Read by the task that passes messages on, and by `drain`.
    socket: Option<Arc<UnixDatagram>>,
    link: Arc<Link>,
}

impl Relay {
    /// Binds the command's socket and starts passing on what comes to it,
    /// on the runtime's thread.
    pub(super) fn start(link: Arc<Link>) -> io::Result<Relay> {
        let dir = private_dir()?;
        let path = dir.join("notify");
        // The directory is made before anything can fail, so that `Relay`
        // owns it, and its drop removes it, on every path out of here.
        let mut relay = Relay {
            dir,
            path,
            socket: None,
            link,
        };
        // Close-on-exec, as tokio makes every socket.
        let socket = Arc::new(UnixDatagram::bind(&relay.path)?);
        tokio::spawn(pass_on(Arc::clone(&socket), Arc::clone(&relay.link)));
        relay.socket = Some(socket);
        Ok(relay)
    }

    /// Passes on, now, what the command sent that the task has not read
    /// yet. A command sends its last messages and exits, and lockrun may
    /// see it gone (SIGCHLD) before the task reads them: what lockrun says
    /// next must come after them, as the command said them first. Every
    /// datagram the command sent is queued by the time it has exited.
    pub(super) fn drain(&self) {
        let Some(socket) = &self.socket else { return };
        let mut buffer = vec![0; DATAGRAM_MAX];
        while let Ok(received) = receive(socket, &mut buffer) {
            pass_on_one(&self.link, &received, &buffer);
        }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A new directory that only lockrun's user can enter, in
/// `$XDG_RUNTIME_DIR` when set, else in the temporary directory.
pub(super) fn private_dir() -> io::Result<PathBuf> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .unwrap_or_else(std::env::temp_dir);
    let mut builder = std::fs::DirBuilder::new();
    builder.mode(0o700);
    // A name nobody can guess, tried again in the unlikely case it exists.
    loop {
        let random = getrandom::u64()
            .map_err(|err| io::Error::other(format!("cannot read random bytes: {err}")))?;
        let dir = base.join(format!("lockrun-{random:016x}"));
        match builder.create(&dir) {
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
            made => return made.map(|()| dir),
        }
    }
}

/// Receives the command's notifications and passes on what systemd may
/// hear, until lockrun exits.
async fn pass_on(socket: Arc<UnixDatagram>, link: Arc<Link>) {
    let mut buffer = vec![0; DATAGRAM_MAX];
    loop {
        let received = socket
            .async_io(Interest::READABLE, || receive(&socket, &mut buffer))
            .await;
        match received {
            Ok(received) => pass_on_one(&link, &received, &buffer),
            Err(err) => {
                report::say(Message::NotifyReadFailed {
                    error: err.to_string(),
                });
                return;
            }
        }
    }
}

/// Passes on one datagram that `receive` put in `buffer`, or says why not.
fn pass_on_one(link: &Link, received: &Received, buffer: &[u8]) {
    if received.fds {
        dropped("file descriptors (the file descriptor store is not relayed)");
    }
    if received.truncated {
        dropped("a notification longer than systemd reads");
    } else {
        relay(link, &buffer[..received.len]);
    }
}

/// One datagram, as received.
struct Received {
    len: usize,
    truncated: bool,
    /// Whether it came with file descriptors, which the kernel closed: with
    /// no room for them, none is installed in lockrun.
    fds: bool,
}

fn receive(socket: &UnixDatagram, buffer: &mut [u8]) -> io::Result<Received> {
    let mut iov = [IoSliceMut::new(buffer)];
    let got = recvmsg::<UnixAddr>(socket.as_raw_fd(), &mut iov, None, MsgFlags::MSG_DONTWAIT)?;
    Ok(Received {
        len: got.bytes,
        truncated: got.flags.contains(MsgFlags::MSG_TRUNC),
        fds: got.flags.contains(MsgFlags::MSG_CTRUNC),
    })
}

/// Passes on the lines of `datagram` that systemd may hear, in one datagram
/// as they came (RELOADING=1 needs its MONOTONIC_USEC= beside it); says
/// each line dropped.
fn relay(link: &Link, datagram: &[u8]) {
    let (kept, dropped_lines) = sift(datagram);
    for line in dropped_lines {
        dropped(&String::from_utf8_lossy(line));
    }
    if kept.is_empty() {
        return;
    }
    if kept
        .split(|&b| b == b'\n')
        .any(|line| line.starts_with(b"STATUS="))
    {
        link.command_status.store(true, Ordering::Relaxed);
    }
    link.send(&kept);
}

/// The lines to pass on, newline-terminated, and the lines dropped.
fn sift(datagram: &[u8]) -> (Vec<u8>, Vec<&[u8]>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for line in datagram
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
    {
        if EXACT.contains(&line) || WITH_VALUE.iter().any(|prefix| line.starts_with(prefix)) {
            kept.extend_from_slice(line);
            kept.push(b'\n');
        } else {
            dropped.push(line);
        }
    }
    (kept, dropped)
}

/// Says, with `--verbose`, what the command sent that systemd does not get.
fn dropped(what: &str) {
    report::say(Message::NotifyDropped { what });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_systemd_may_hear_from_the_main_process_is_kept() {
        let (kept, dropped) = sift(
            b"READY=1\nMAINPID=42\nSTATUS=serving\nFDSTORE=1\nRELOADING=1\nMONOTONIC_USEC=5\n\
              WATCHDOG=trigger\nWATCHDOG=0\nX_CUSTOM=1\nEXTEND_TIMEOUT_USEC=10\nERRNO=2\n\
              STOPPING=1\nWATCHDOG=1",
        );
        assert_eq!(
            String::from_utf8_lossy(&kept),
            "READY=1\nSTATUS=serving\nRELOADING=1\nMONOTONIC_USEC=5\nWATCHDOG=trigger\n\
             EXTEND_TIMEOUT_USEC=10\nERRNO=2\nSTOPPING=1\nWATCHDOG=1\n"
        );
        let dropped: Vec<_> = dropped.iter().map(|l| String::from_utf8_lossy(l)).collect();
        assert_eq!(
            dropped,
            ["MAINPID=42", "FDSTORE=1", "WATCHDOG=0", "X_CUSTOM=1"]
        );
    }

    #[test]
    fn a_line_that_only_begins_like_an_exact_one_is_dropped() {
        let (kept, dropped) = sift(b"READY=10\nSTOPPING=yes\n");
        assert!(kept.is_empty());
        assert_eq!(dropped.len(), 2);
    }

    #[test]
    fn the_private_directory_is_for_lockrun_s_user_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = private_dir().expect("a directory");
        let mode = std::fs::metadata(&dir)
            .expect("its metadata")
            .permissions()
            .mode();
        std::fs::remove_dir(&dir).expect("removed");
        assert_eq!(mode & 0o777, 0o700);
    }
}
