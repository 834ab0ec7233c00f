//! lockrun under systemd's `NOTIFY_SOCKET`: its own status and a standby's
//! readiness, the command's notifications relayed from lockrun's pid, and
//! the command's pid in `WATCHDOG_PID` and `LISTEN_PID`.
//!
//! A socket of the test's stands where systemd's would be, with
//! `SO_PASSCRED`, so that each message comes with the pid that sent it, as
//! systemd sees it. The senders are real clients: `systemd-notify`, and a
//! short Python script speaking the protocol.

use std::io::IoSliceMut;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, UnixAddr};
use tempfile::TempDir;

use crate::harness::*;

/// One notification as systemd would get it: the sender's pid, from the
/// kernel, and the text.
#[derive(Clone, Debug)]
struct Message {
    pid: i32,
    text: String,
}

/// A stand-in for systemd's notification socket, read by a thread of its
/// own as systemd reads it: the kernel keeps only a few datagrams waiting.
struct Systemd {
    dir: TempDir,
    messages: Arc<Mutex<Vec<Message>>>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

impl Systemd {
    fn listen() -> Systemd {
        let dir = scratch();
        let socket = UnixDatagram::bind(dir.path().join("notify")).expect("bind");
        setsockopt(&socket, sockopt::PassCred, &true).expect("SO_PASSCRED");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("a read timeout");
        let messages = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (messages, stop) = (Arc::clone(&messages), Arc::clone(&stop));
            std::thread::spawn(move || loop {
                match receive(&socket) {
                    Some(message) => messages.lock().expect("messages").push(message),
                    None if stop.load(Ordering::SeqCst) => return,
                    None => {}
                }
            })
        };
        Systemd {
            dir,
            messages,
            stop,
            reader: Some(reader),
        }
    }

    /// What `NOTIFY_SOCKET` names.
    fn socket(&self) -> PathBuf {
        self.dir.path().join("notify")
    }

    /// Waits until a message has `needle`, failing the test after `PATIENCE`.
    #[track_caller]
    fn wait_for(&self, needle: &str) {
        let got = eventually(PATIENCE, || {
            self.messages().iter().any(|m| m.text.contains(needle))
        });
        assert!(got, "no message with {needle:?}: {:?}", self.messages());
    }

    fn messages(&self) -> Vec<Message> {
        self.messages.lock().expect("messages").clone()
    }

    /// Every message, once the last one sent is in.
    fn finish(mut self) -> Vec<Message> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the reader");
        }
        let messages = self.messages();
        // For the record: `--nocapture` shows what systemd would get.
        for message in &messages {
            eprintln!("from pid {}: {:?}", message.pid, message.text);
        }
        messages
    }
}

/// One datagram and its sender's credentials; None after the read timeout.
fn receive(socket: &UnixDatagram) -> Option<Message> {
    let mut buffer = [0u8; 4096];
    let mut iov = [IoSliceMut::new(&mut buffer)];
    let mut space = nix::cmsg_space!(nix::sys::socket::UnixCredentials);
    let got = recvmsg::<UnixAddr>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::empty(),
    )
    .ok()?;
    let pid = got
        .cmsgs()
        .expect("control messages")
        .find_map(|cmsg| match cmsg {
            ControlMessageOwned::ScmCredentials(credentials) => Some(credentials.pid()),
            _ => None,
        })
        .expect("SO_PASSCRED gives every message its sender");
    let len = got.bytes;
    Some(Message {
        pid,
        text: String::from_utf8_lossy(&buffer[..len]).into_owned(),
    })
}

/// The texts, after checking that every message came from `pid`.
#[track_caller]
fn all_from(messages: &[Message], pid: i32) -> Vec<String> {
    for message in messages {
        assert_eq!(message.pid, pid, "sent by another process: {messages:?}");
    }
    messages.iter().map(|m| m.text.clone()).collect()
}

fn host() -> String {
    let host = nix::unistd::gethostname().expect("the host name");
    host.to_string_lossy().into_owned()
}

/// The part of a holding status that does not change from run to run.
fn holding(fence: u64) -> String {
    format!("STATUS=holding job (fencing token {fence}) since ")
}

#[test]
fn a_standby_is_ready_says_who_holds_the_lock_and_takes_over() {
    let redis = Server::start();
    let systemd = Systemd::listen();
    let mut holder = redis.lockrun("job").hold();
    let dir = scratch();
    let mut standby = redis
        .lockrun("job")
        .args(["--wait", "forever"])
        .env("NOTIFY_SOCKET", systemd.socket())
        .sh(
            r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/fence"
            systemd-notify --ready --status="scheduling""#,
            dir.path(),
        )
        .spawn();
    systemd.wait_for("READY=1");
    let standing_by = format!(
        "READY=1\nSTATUS=standing by: job is held by {} pid {} (fencing token {}); place 1 of 1 \
         in line\n",
        host(),
        holder.run.pid(),
        holder.fence()
    );
    assert_eq!(systemd.messages()[0].text, standing_by);
    holder.go();
    holder.run.exits(Expect::success());
    standby.exits(Expect::success());
    let fence = read_fence(&dir.path().join("fence"));
    let texts = all_from(&systemd.finish(), standby.pid().as_raw());
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert_eq!(texts[0], standing_by);
    assert!(texts[1].starts_with(&holding(fence)), "{texts:?}");
    // systemd-notify's own message, passed on from lockrun's pid.
    assert_eq!(texts[2], "READY=1\nSTATUS=scheduling\n");
    assert_eq!(
        texts[3],
        "STATUS=the command exited with status 0; releasing job\n"
    );
}

#[test]
fn a_standby_feeds_the_watchdog_until_its_command_starts() {
    let redis = Server::start();
    let systemd = Systemd::listen();
    let mut holder = redis.lockrun("job").hold();
    let mut standby = redis
        .lockrun("job")
        .args(["--wait", "forever"])
        .env("NOTIFY_SOCKET", systemd.socket())
        .env("WATCHDOG_USEC", "100000")
        .command(["sleep", "1"])
        .spawn();
    systemd.wait_for("WATCHDOG=1");
    holder.go();
    holder.run.exits(Expect::success());
    standby.exits(Expect::success());
    let texts = all_from(&systemd.finish(), standby.pid().as_raw());
    let holding = texts
        .iter()
        .position(|text| text.starts_with("STATUS=holding "))
        .expect("a holding status");
    // Only lockrun pings, and only while it has no command: a command that
    // sends none lets the watchdog fire, as it should.
    assert!(
        texts[..holding].contains(&"WATCHDOG=1\n".to_owned()),
        "{texts:?}"
    );
    assert!(
        !texts[holding..].contains(&"WATCHDOG=1\n".to_owned()),
        "{texts:?}"
    );
}

#[test]
fn a_holder_says_its_lock_and_the_command_s_status_replaces_it_until_lockrun_stops_it() {
    let redis = Server::start();
    let systemd = Systemd::listen();
    let dir = scratch();
    // The command's own status must arrive before --timeout passes: a
    // second or two to start sh and systemd-notify on a loaded machine.
    let ran = redis
        .lockrun("job")
        .args(["--timeout", "4s", "--kill-grace", "5s"])
        .env("NOTIFY_SOCKET", systemd.socket())
        .sh(
            r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/fence"
            systemd-notify --status="working"
            # lockrun's holding status is not said again over the command's.
            exec sleep 30"#,
            dir.path(),
        )
        .run();
    ran.assert(Expect::code(124).stderr_has("--timeout"));
    let fence = read_fence(&dir.path().join("fence"));
    let messages = systemd.finish();
    let texts = all_from(&messages, messages[0].pid);
    assert_eq!(texts.len(), 5, "{texts:?}");
    // No READY=1 of lockrun's own: with the lock free, the command's says
    // when the unit is ready.
    assert!(texts[0].starts_with(&holding(fence)), "{texts:?}");
    assert_eq!(texts[1], "STATUS=working\n");
    assert_eq!(texts[2], "STATUS=stopping the command: --timeout passed\n");
    assert_eq!(
        texts[3],
        "STATUS=the command was killed by SIGTERM; releasing job\n"
    );
    // Why lockrun exits, as it says on stderr.
    assert_eq!(
        texts[4],
        format!("STATUS={}", ran.stderr.trim_start_matches("lockrun: "))
    );
}

#[test]
fn a_run_that_finds_the_lock_busy_leaves_who_holds_it_as_its_status() {
    let redis = Server::start();
    let systemd = Systemd::listen();
    let mut holder = redis.lockrun("job").hold();
    let ran = redis
        .lockrun("job")
        .env("NOTIFY_SOCKET", systemd.socket())
        .command(["true"])
        .run();
    ran.assert(Expect::code(75).stderr_has(" is held by "));
    holder.go();
    holder.run.exits(Expect::success());
    let messages = systemd.finish();
    let texts = all_from(&messages, messages[0].pid);
    // No READY=1: a run that does not wait does not stand by. The line on
    // stderr, whose durations were counted a moment apart.
    assert_eq!(texts.len(), 1, "{texts:?}");
    let held_by = format!(
        "STATUS=job is held by {} pid {} for ",
        host(),
        holder.run.pid()
    );
    assert!(texts[0].starts_with(&held_by), "{texts:?}");
    assert!(
        texts[0].ends_with("; not running true (exit 75)\n"),
        "{texts:?}"
    );
}

/// Speaks the protocol as a daemon would: one datagram per message, and
/// file descriptors with FDSTORE=1.
const DAEMON: &str = r#"
import os, socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
to = os.environ["NOTIFY_SOCKET"]
def say(text, fds=()):
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(memoryview(__import__("array").array("i", fds))))] if fds else []
    s.sendmsg([text.encode()], ancillary, 0, to)
say("READY=1")
say("RELOADING=1\nMONOTONIC_USEC=123456")
say("WATCHDOG=1")
say("MAINPID=1\nSTATUS=main")
say("FDSTORE=1\nFDNAME=cache", [os.open("/dev/null", os.O_RDONLY)])
say("X_UNKNOWN=1")
say("STATUS=done")
"#;

#[test]
fn the_command_s_messages_are_relayed_from_lockrun_s_pid_and_the_rest_dropped() {
    let redis = Server::start();
    let systemd = Systemd::listen();
    let ran = redis
        .lockrun("job")
        .arg("-v")
        .env("NOTIFY_SOCKET", systemd.socket())
        .command(["python3", "-c", DAEMON])
        .run();
    ran.assert(
        Expect::success()
            .stderr_has("not passed on to systemd from the command: MAINPID=1")
            .stderr_has("not passed on to systemd from the command: FDSTORE=1")
            .stderr_has("not passed on to systemd from the command: FDNAME=cache")
            .stderr_has("not passed on to systemd from the command: file descriptors")
            .stderr_has("not passed on to systemd from the command: X_UNKNOWN=1"),
    );
    let messages = systemd.finish();
    let texts = all_from(&messages, messages[0].pid);
    assert_eq!(
        texts[1..],
        [
            "READY=1\n",
            "RELOADING=1\nMONOTONIC_USEC=123456\n",
            "WATCHDOG=1\n",
            "STATUS=main\n",
            "STATUS=done\n",
            "STATUS=the command exited with status 0; releasing job\n",
        ],
        "{texts:?}"
    );
}

/// Lists the open descriptors of the shell that runs it into `$DIR/NAME`
/// (`ls` lists its parent's, and only `ls` is redirected).
const LIST_FDS: &str = r#"ls /proc/$$/fd > "$DIR/"#;

/// Runs lockrun from `sh`, whose `exec` keeps the shell's pid, so that
/// `prelude` can set variables to lockrun's pid before it starts. The
/// command writes its pid and its environment's pid variables to
/// `$1/seen`; the descriptors open in lockrun's shell and in the command are
/// returned, as `ls` lists them.
fn run_from_sh(redis: &Server, prelude: &str, dir: &Path) -> (String, Vec<u32>, Vec<u32>) {
    let command = format!(
        r#"echo "pid=$$ watchdog=$WATCHDOG_PID listen=$LISTEN_PID fds=$LISTEN_FDS names=$LISTEN_FDNAMES usec=$WATCHDOG_USEC" > "$1/seen"
        {LIST_FDS}after""#
    );
    let script = format!(r#"{prelude}; {LIST_FDS}before"; exec "$0" "$@""#);
    let mut run = Running::spawn(
        Command::new("sh")
            .args([
                "-c",
                &script,
                &LOCKRUN,
                "--redis",
                &redis.url(),
                "-k",
                "job",
            ])
            .args(["--", "sh", "-c", &command, "sh"])
            .arg(dir)
            .env("DIR", dir)
            .env(NO_CONFIG.0, NO_CONFIG.1)
            .env_remove("NOTIFY_SOCKET"),
    );
    run.exits(Expect::success());
    let fds = |name| {
        let listed = std::fs::read_to_string(dir.join(name)).expect(name);
        let mut fds: Vec<u32> = listed.lines().map(|fd| fd.parse().expect(fd)).collect();
        fds.sort_unstable();
        fds
    };
    (
        read_when_ready(&dir.join("seen")),
        fds("before"),
        fds("after"),
    )
}

#[test]
fn watchdog_and_listen_pids_of_lockrun_become_the_command_s_and_fds_pass_through() {
    let redis = Server::start();
    // With lockrun's sockets to systemd and for the command open too.
    let systemd = Systemd::listen();
    let dir = scratch();
    let prelude = format!(
        "exec 3</dev/null 4</dev/null; export WATCHDOG_PID=$$ LISTEN_PID=$$ LISTEN_FDS=2 \
         LISTEN_FDNAMES=a:b WATCHDOG_USEC=5000000 NOTIFY_SOCKET={}",
        systemd.socket().display()
    );
    let (seen, before, after) = run_from_sh(&redis, &prelude, dir.path());
    let pid = seen
        .strip_prefix("pid=")
        .and_then(|rest| rest.split(' ').next())
        .expect("the command's pid");
    assert_eq!(
        seen,
        format!("pid={pid} watchdog={pid} listen={pid} fds=2 names=a:b usec=5000000")
    );
    // The inherited descriptors, and none of lockrun's own sockets.
    assert_eq!(before[..5], [0, 1, 2, 3, 4], "{before:?}");
    assert_eq!(after, before);
    assert!(!systemd.finish().is_empty());
}

#[test]
fn pids_that_name_another_process_are_left_as_they_are() {
    let redis = Server::start();
    let dir = scratch();
    let (seen, _, _) = run_from_sh(&redis, "export WATCHDOG_PID=1 LISTEN_PID=1", dir.path());
    assert!(seen.contains(" watchdog=1 listen=1 "), "{seen}");
}

#[test]
fn without_notify_socket_the_command_gets_none() {
    let redis = Server::start();
    let ran = redis
        .lockrun("job")
        .command(["sh", "-c", r#"echo "${NOTIFY_SOCKET-unset}""#])
        .run();
    ran.assert(Expect::success().stdout("unset\n"));
}

#[test]
fn the_relay_lives_in_a_private_directory_removed_at_exit_even_when_the_command_cannot_start() {
    let redis = Server::start();
    let systemd = Systemd::listen();
    let runtime = scratch();
    let ran = redis
        .lockrun("job")
        .env("NOTIFY_SOCKET", systemd.socket())
        .env("XDG_RUNTIME_DIR", runtime.path())
        .command([
            "sh",
            "-c",
            r#"echo "$NOTIFY_SOCKET"; stat -c %a "${NOTIFY_SOCKET%/*}""#,
        ])
        .run();
    ran.assert(Expect::success().stdout_any());
    let (socket, mode) = ran.stdout.trim().split_once('\n').expect("two lines");
    assert!(
        socket.starts_with(&format!("{}/lockrun-", runtime.path().display())),
        "{socket}"
    );
    assert_eq!(mode, "700");
    let not_started = redis
        .lockrun("job")
        .env("NOTIFY_SOCKET", systemd.socket())
        .env("XDG_RUNTIME_DIR", runtime.path())
        .command(["/nonexistent/daemon"])
        .run();
    not_started.assert(Expect::code(127).stderr_has("command not found"));
    let left: Vec<_> = std::fs::read_dir(runtime.path())
        .expect("the runtime directory")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    systemd.finish();
}

#[test]
fn a_notify_socket_lockrun_cannot_use_is_left_to_the_command() {
    let redis = Server::start();
    let ran = redis
        .lockrun("job")
        .env("NOTIFY_SOCKET", "vsock:2:1")
        .command(["sh", "-c", r#"echo "$NOTIFY_SOCKET""#])
        .run();
    ran.assert(
        Expect::success()
            .stdout("vsock:2:1\n")
            .stderr_has("cannot notify systemd at vsock:2:1"),
    );
}

#[test]
fn a_sigterm_passed_on_is_the_stopping_status() {
    let redis = Server::start();
    let systemd = Systemd::listen();
    let mut run = redis
        .lockrun("job")
        .env("NOTIFY_SOCKET", systemd.socket())
        .command(["sleep", "30"])
        .spawn();
    systemd.wait_for("STATUS=holding job");
    run.signal(nix::sys::signal::Signal::SIGTERM);
    // The command's death: lockrun passed the signal on, and did not stop it.
    run.exits(Expect::killed_by(nix::sys::signal::Signal::SIGTERM));
    let texts = all_from(&systemd.finish(), run.pid().as_raw());
    assert!(texts[0].starts_with("STATUS=holding job "), "{texts:?}");
    assert_eq!(
        texts[1..],
        [
            "STATUS=stopping the command: SIGTERM passed on to the command\n",
            "STATUS=the command was killed by SIGTERM; releasing job\n",
        ],
        "{texts:?}"
    );
}

#[test]
fn what_is_dropped_and_what_fails_are_events_of_their_own() {
    let redis = Server::start();
    let ran = redis
        .lockrun("job")
        .args(["-v", "--log-format", "json"])
        .env("NOTIFY_SOCKET", "/nonexistent/notify")
        .command(["python3", "-c", DAEMON])
        .run();
    ran.assert(Expect::success().stderr_any());
    let events = crate::log_format::checked_events(&ran.stderr, Some("job"));
    let named = |name: &str| events.iter().filter(|event| event["event"] == name).count();
    // MAINPID=, FDSTORE=, FDNAME=, X_UNKNOWN= and the descriptors.
    assert_eq!(named("notify_dropped"), 5, "{}", ran.stderr);
    // Nothing reaches a socket that is not there: each send says so.
    assert!(named("notify_failed") >= 1, "{}", ran.stderr);
}
