//! Processes and files a test watches: `Running`, pids in /proc, polling with deadlines, scratch directories.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;
use wait_timeout::ChildExt;

use super::PATIENCE;

/// Polls `condition` every 10 ms until it holds or `limit` passes.
pub fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every port this test process handed out. The kernel may give a port
/// that a test just let go of (to start its server on it) to the next
/// `bind` to port 0 in another test's thread: without this, two tests'
/// servers could be started on one port, and a test would then talk to the
/// other's server.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Takes `port` (and `also`, a cluster node's bus port) for this test
/// process, unless a test already has either.
pub(super) fn take_port(port: u16, also: Option<u16>) -> bool {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    let taken = |p: &u16| handed_out.contains(p);
    if taken(&port) || also.as_ref().is_some_and(taken) {
        return false;
    }
    handed_out.extend(std::iter::once(port).chain(also));
    true
}

/// A free loopback port, never one handed out before in this test run.
/// Another process may take it before the server binds it; on a test
/// machine that window is acceptable.
pub fn free_port() -> u16 {
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        if take_port(port, None) {
            return port;
        }
    }
}

/// A spawned process, killed with its process group if the test fails.
pub struct Running {
    pub child: Child,
    /// Whether it leads a process group of its own (lockrun from `Lockrun`).
    group: bool,
    pub(super) began: Instant,
    /// The command line, for a failure's report.
    pub(super) command: String,
}

impl Running {
    pub fn spawn(command: &mut Command) -> Self {
        Self::start(command, false)
    }

    /// `command`, which puts the process in a group of its own.
    pub(super) fn spawn_group(command: &mut Command) -> Self {
        Self::start(command, true)
    }

    fn start(command: &mut Command, group: bool) -> Self {
        let child = command.spawn().unwrap_or_else(|err| {
            let program = command.get_program().to_string_lossy();
            panic!("cannot start {program}: {err} (scripts/test installs what the tests run)")
        });
        Running {
            child,
            group,
            began: Instant::now(),
            command: format!("{command:?}"),
        }
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).expect("signal lockrun");
    }

    /// Waits for the exit, failing the test after `PATIENCE`.
    pub fn wait(&mut self) -> ExitStatus {
        self.wait_for(PATIENCE)
            .expect("process did not exit in time")
    }

    pub fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
        self.child.wait_timeout(limit).expect("wait")
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills it (and its group) at once, stopped or not, and reaps it. It
    /// is continued first: a stopped process takes SIGKILL only once
    /// continued on some kernels' ptrace paths.
    pub(super) fn kill(&mut self) {
        if !self.running() {
            return;
        }
        if self.group {
            let _ = killpg(self.pid(), Signal::SIGCONT);
            let _ = killpg(self.pid(), Signal::SIGKILL);
        }
        let _ = kill(self.pid(), Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Fields of `/proc/PID/stat` after the command name: state, parent, group,
/// session. None once the process is gone (reaped).
pub fn stat(pid: i32) -> Option<(char, i32, i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; the last `)` ends it.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let number = |i: usize| fields.get(i).and_then(|f| f.parse().ok());
    Some((
        fields.first()?.chars().next()?,
        number(1)?,
        number(2)?,
        number(3)?,
    ))
}

/// The state letter of process `pid` (R, S, T for stopped, Z...), or None
/// when it is gone.
pub fn process_state(pid: i32) -> Option<char> {
    stat(pid).map(|(state, ..)| state)
}

/// Whether process `pid` exists (a zombie counts as gone).
pub fn alive(pid: i32) -> bool {
    process_state(pid).is_some_and(|state| state != 'Z')
}

pub fn parent(pid: i32) -> Option<i32> {
    stat(pid).map(|(_, parent, _, _)| parent)
}

/// Not even a zombie is left: the process was reaped.
pub fn reaped(pid: i32) -> bool {
    stat(pid).is_none()
}

/// A temporary directory for one test's own files: pid files, logs, markers.
pub fn scratch() -> TempDir {
    tempfile::Builder::new()
        .prefix("lockrun-test-")
        .tempdir()
        .expect("temp dir")
}

/// Waits until `path` holds a whole line and returns its trimmed contents.
pub fn read_when_ready(path: &Path) -> String {
    let mut text = String::new();
    let ready = eventually(PATIENCE, || {
        text = std::fs::read_to_string(path).unwrap_or_default();
        text.ends_with('\n')
    });
    assert!(ready, "{} never appeared", path.display());
    text.trim().to_string()
}

/// The number a command wrote to `path` (one line), once it is there.
fn read_number<T: std::str::FromStr>(path: &Path, what: &str) -> T {
    let text = read_when_ready(path);
    text.parse()
        .unwrap_or_else(|_| panic!("{} holds {text:?}, not a {what}", path.display()))
}

pub fn read_pid(path: &Path) -> i32 {
    read_number(path, "pid")
}

pub fn read_fence(path: &Path) -> u64 {
    read_number(path, "fencing token")
}

/// Waits up to `PATIENCE` until the file at `path` contains `needle`.
pub fn wait_for_text(path: &Path, needle: &str) -> bool {
    eventually(PATIENCE, || read_log(path).contains(needle))
}

/// What a spawned process has written to its log file at `path` so far;
/// empty when there is none yet.
pub fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A file for a spawned process's stderr, which the test can read while the
/// process runs.
pub fn log_file(path: &Path) -> std::fs::File {
    std::fs::File::create(path).expect("create log file")
}
