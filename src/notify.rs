//! systemd's notification protocol (sd_notify(3)), both ways, for a
//! lockrun that systemd started with `NOTIFY_SOCKET`: lockrun is the unit's
//! main process, so it speaks for itself and relays what the command says
//! (`relay`). Sending never holds up or fails a run. Why, and why not the
//! `sd-notify` crate: docs/design.md ("Under systemd").

use std::ffi::OsString;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use crate::exit_code::Exit;
use crate::lease::Loss;
use crate::lock::HoldersAndWaiters;
use crate::report::{self, Message};

mod relay;

/// Where systemd listens, and where the command finds lockrun's relay.
pub(crate) const SOCKET_ENV: &str = "NOTIFY_SOCKET";
/// Variables that name the process systemd's watchdog and socket
/// activation are meant for: lockrun's pid, to become the command's.
const PID_ENVS: [&str; 2] = ["WATCHDOG_PID", "LISTEN_PID"];

/// lockrun's side of systemd's notification socket; silent when systemd
/// gave none.
#[derive(Default)]
pub(crate) struct Systemd {
    link: Option<Arc<Link>>,
    /// The command's socket, once the command is about to start; dropping
    /// it removes the socket and its directory.
    relay: Option<relay::Relay>,
}

/// A socket that sends to systemd, and what lockrun said on it.
struct Link {
    socket: UnixDatagram,
    to: SocketAddr,
    /// Whether lockrun said READY=1 already.
    ready: AtomicBool,
    /// Whether the command started: its own pings feed the watchdog then.
    command_started: AtomicBool,
    /// Whether the command said a STATUS= of its own, which lockrun's
    /// "holding" then does not replace: the command knows best what it does.
    command_status: AtomicBool,
    /// The last STATUS= lockrun sent, so that a waiter refreshing its place
    /// does not repeat it.
    said: Mutex<String>,
}

impl Systemd {
    /// The socket systemd named in `NOTIFY_SOCKET`, if any.
    /// Feeds systemd's watchdog, if it set one for lockrun, until the
    /// command starts.
    pub(crate) fn from_env() -> Systemd {
        let systemd = match std::env::var_os(SOCKET_ENV) {
            Some(name) if !name.is_empty() => Systemd::at(&name),
            _ => Systemd::default(),
        };
        if let (Some(link), Some(every)) = (&systemd.link, watchdog_interval()) {
            tokio::spawn(feed_watchdog(Arc::clone(link), every));
        }
        systemd
    }

    /// The socket named `name`, as `NOTIFY_SOCKET` names it.
    fn at(name: &std::ffi::OsStr) -> Systemd {
        match Link::to(name) {
            Ok(link) => Systemd {
                link: Some(Arc::new(link)),
                relay: None,
            },
            Err(err) => {
                report::say(Message::NotifySocketFailed {
                    socket: name,
                    error: err.to_string(),
                });
                Systemd::default()
            }
        }
    }

    /// The changes to the command's environment: `NOTIFY_SOCKET` names
    /// lockrun's relay, which starts here. None without systemd's socket,
    /// and none (the command keeps systemd's, as before) if the relay
    /// cannot be made.
    pub(crate) fn for_command(&mut self) -> Vec<(&'static str, Option<OsString>)> {
        let Some(link) = &self.link else {
            return Vec::new();
        };
        link.command_started.store(true, Ordering::Relaxed);
        match relay::Relay::start(Arc::clone(link)) {
            Ok(relay) => {
                let path = relay.path().as_os_str().to_owned();
                self.relay = Some(relay);
                vec![(SOCKET_ENV, Some(path))]
            }
            Err(err) => {
                report::say(Message::RelayFailed {
                    error: err.to_string(),
                });
                Vec::new()
            }
        }
    }

    /// lockrun waits for `lock`: it stands by, so the unit is ready. `place`
    /// is this run's place in line, when it has one.
    pub(crate) fn waiting(&self, lock: &str, found: &HoldersAndWaiters, place: Option<u64>) {
        let Some(link) = &self.link else { return };
        let held_by = match &found.holder {
            Some(holder) => format!(
                "held by {} pid {} (fencing token {})",
                holder.host, holder.pid, holder.fence
            ),
            None if found.held => "held".to_owned(),
            None => "free, with runs ahead in line".to_owned(),
        };
        let in_line = match place {
            Some(place) => format!("; place {place} of {} in line", found.waiting.max(place)),
            None => "; trying again".to_owned(),
        };
        let status = format!("standing by: {lock} is {held_by}{in_line}");
        let ready = !link.ready.swap(true, Ordering::Relaxed);
        link.status(&status, ready);
    }

    /// lockrun holds `lock` and the command runs; said unless the command
    /// said a status of its own.
    pub(crate) fn holding(&self, lock: &str, fence: u64, since: SystemTime) {
        let Some(link) = &self.link else { return };
        if !link.command_status.load(Ordering::Relaxed) {
            let since = humantime::format_rfc3339_seconds(since);
            link.status(
                &format!("holding {lock} (fencing token {fence}) since {since}"),
                false,
            );
        }
    }

    /// lockrun stops the command, and `why`. Said over the command's own
    /// status: it is the news.
    pub(crate) fn stopping(&self, why: &str) {
        if let Some(link) = &self.link {
            link.status(&format!("stopping the command: {why}"), false);
        }
    }

    /// The command is gone, with `status` if it could be waited for:
    /// lockrun speaks for itself again.
    pub(crate) fn ended(&self, lock: &str, status: Option<ExitStatus>) {
        if let Some(relay) = &self.relay {
            relay.drain();
        }
        if let Some(link) = &self.link {
            link.command_status.store(false, Ordering::Relaxed);
            let how = match status {
                Some(status) => match Exit::of_child(status) {
                    Exit::Status(code) => format!("exited with status {code}"),
                    Exit::Signal(signal) => format!("was killed by {signal}"),
                },
                None => "is gone".to_owned(),
            };
            link.status(&format!("the command {how}; releasing {lock}"), false);
        }
    }

    /// lockrun exits without its command's status, and `why`.
    pub(crate) fn exiting(&self, why: &dyn std::fmt::Display) {
        if let Some(link) = &self.link {
            link.status(&why.to_string(), false);
        }
    }
}

/// Why lockrun stops the command, as its status says it.
pub(crate) fn lost_or_timed_out(loss: Option<Loss>) -> &'static str {
    match loss {
        None => "--timeout passed",
        Some(Loss::TokenGone) => "the lease was lost (the lock is no longer this run's)",
        Some(_) => "the lease could not be renewed in time",
    }
}

impl Link {
    /// A socket that sends to `name`: a path, or an abstract name after '@'.
    fn to(name: &std::ffi::OsStr) -> io::Result<Link> {
        let bytes = name.as_bytes();
        let to = match bytes.split_first() {
            Some((b'@', abstract_name)) => SocketAddr::from_abstract_name(abstract_name)?,
            Some((b'/', _)) => SocketAddr::from_pathname(name)?,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "not a path or an abstract socket name",
                ))
            }
        };
        // Close-on-exec, as std makes every socket: the command must not
        // inherit it.
        let socket = UnixDatagram::unbound()?;
        socket.set_nonblocking(true)?;
        Ok(Link {
            socket,
            to,
            ready: AtomicBool::new(false),
            command_started: AtomicBool::new(false),
            command_status: AtomicBool::new(false),
            said: Mutex::new(String::new()),
        })
    }

    /// Sends lockrun's status, with READY=1 before it if `ready`; a status
    /// said already is not said again.
    fn status(&self, status: &str, ready: bool) {
        let mut said = self.said.lock().unwrap_or_else(PoisonError::into_inner);
        if !ready && *said == status {
            return;
        }
        status.clone_into(&mut said);
        drop(said);
        let message = if ready {
            format!("READY=1\nSTATUS={status}\n")
        } else {
            format!("STATUS={status}\n")
        };
        self.send(message.as_bytes());
    }

    /// Sends one datagram, from lockrun's pid, never waiting.
    fn send(&self, message: &[u8]) {
        if let Err(err) = self.socket.send_to_addr(message, &self.to) {
            report::say(Message::NotifySendFailed {
                error: err.to_string(),
            });
        }
    }
}

/// Half the watchdog timeout systemd set for lockrun (`WATCHDOG_USEC`,
/// for lockrun's pid or any), as sd_watchdog_enabled(3) advises; None
/// without one.
fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    let for_lockrun =
        std::env::var("WATCHDOG_PID").map_or(true, |pid| pid == std::process::id().to_string());
    (usec > 0 && for_lockrun).then(|| Duration::from_micros(usec / 2))
}

/// A standby has no command to ping systemd's watchdog for it: lockrun
/// pings until the command starts, whose pings are relayed from then on
/// (its environment names it in `WATCHDOG_PID`).
async fn feed_watchdog(link: Arc<Link>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if link.command_started.load(Ordering::Relaxed) {
            return;
        }
        link.send(b"WATCHDOG=1\n");
    }
}

/// Which of `WATCHDOG_PID` and `LISTEN_PID` name lockrun: in the command's
/// environment they name the command, which systemd meant them for.
pub(crate) fn pid_vars() -> Vec<&'static str> {
    let me = std::process::id().to_string();
    PID_ENVS
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some_and(|value| value == me.as_str()))
        .collect()
}

#[cfg(test)]
mod tests;
