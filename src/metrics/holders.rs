//! Which runs on this host hold a key's lock: one comment line per run in
//! the metrics file itself, so that `lockrun_running` counts runs that exist
//! and is replaced by the same rename as the gauge. A record names its
//! process by pid, start time, boot id and pid namespace, since pids are
//! reused and the file outlives a reboot; what is dropped when is in
//! lockrun(1), METRICS.

use std::fmt::Write as _;

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

use super::text::{escape, seconds};

/// The name a record is written under, after `# `.
pub(super) const RECORD: &str = "lockrun_holder";

/// A process as the records name it. A field that could not be read is
/// empty, and a record with one is never taken for gone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Process {
    pub(super) pid: u32,
    /// Start time in clock ticks since boot.
    pub(super) start: String,
    /// `/proc/sys/kernel/random/boot_id`.
    pub(super) boot: String,
    /// The pid namespace's inode number.
    pub(super) ns: String,
}

impl Process {
    /// This process. Without a /proc that shows it under its own pid (none
    /// mounted, or another pid namespace's), only the pid is known.
    pub(crate) fn me() -> Process {
        let pid = std::process::id();
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let shown: Option<u32> = stat.split(' ').next().and_then(|p| p.parse().ok());
        if shown != Some(pid) {
            return Process {
                pid,
                ..Process::default()
            };
        }
        Process {
            pid,
            start: start_time(&stat).unwrap_or_default(),
            boot: boot_id(),
            ns: pid_namespace("self"),
        }
    }

    /// Whether every field is known.
    fn known(&self) -> bool {
        !(self.start.is_empty() || self.boot.is_empty() || self.ns.is_empty())
    }

    /// The labels of a record, after `key`.
    pub(super) fn labels(&self) -> String {
        format!(
            "pid=\"{}\",start=\"{}\",boot=\"{}\",ns=\"{}\"",
            self.pid,
            escape(&self.start),
            escape(&self.boot),
            escape(&self.ns)
        )
    }

    /// The process that the labels of a record after `key` name; None when
    /// one is missing or unknown, or the pid is not a number.
    pub(super) fn from_labels(labels: &[(String, String)]) -> Option<Process> {
        let label = |wanted: &str| {
            labels
                .iter()
                .find(|(name, _)| name == wanted)
                .map(|(_, value)| value.clone())
        };
        let process = Process {
            pid: label("pid")?.parse().ok()?,
            start: label("start")?,
            boot: label("boot")?,
            ns: label("ns")?,
        };
        (labels.len() == 4).then_some(process)
    }
}

/// One run that holds a key's lock on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Holder {
    pub(super) process: Process,
    /// When it took the lock (Unix time, microseconds).
    pub(super) acquired_us: u64,
}

impl Holder {
    pub(super) fn render(&self, out: &mut String, key: &str) {
        let _ = writeln!(
            out,
            "# {RECORD}{{key=\"{}\",{}}} {}",
            escape(key),
            self.process.labels(),
            seconds(self.acquired_us)
        );
    }
}

/// Whether the process a record names is known to be gone, as `me` can
/// tell: another boot's, or no process with that pid and start time in
/// `me`'s boot and pid namespace. What cannot be told is kept.
pub(super) fn gone(record: &Process, me: &Process) -> bool {
    if !(record.known() && me.known()) {
        return false;
    }
    if record.boot != me.boot {
        return true;
    }
    if record.ns != me.ns {
        return false;
    }
    let Ok(pid) = i32::try_from(record.pid) else {
        return true;
    };
    // kill(0) tells whether the pid exists even where /proc hides other
    // users' processes (hidepid); EPERM means it does.
    if kill(Pid::from_raw(pid), None) == Err(Errno::ESRCH) {
        return true;
    }
    // A pid in use by a process that started at another time was reused; a
    // zombie (killed, not yet reaped by its parent) holds nothing.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let exited = matches!(field(&stat, 3), Some("Z" | "X" | "x"));
    exited || start_time(&stat).is_some_and(|start| start != record.start)
}

/// Field 22 of a `/proc/PID/stat` line, the start time in clock ticks since
/// boot.
pub(super) fn start_time(stat: &str) -> Option<String> {
    let ticks = field(stat, 22)?;
    ticks
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| ticks.to_owned())
}

/// Field `n` (from 3 on, as proc(5) numbers them) of a `/proc/PID/stat` line.
fn field(stat: &str, n: usize) -> Option<&str> {
    // The command name is in parentheses and may hold anything, ')' and
    // spaces included: the fields after it start after the last ')', with
    // field 3 (the state) first.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(n.checked_sub(3)?)
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .unwrap_or_default()
}

/// The inode of `/proc/WHO/ns/pid` (a link to `pid:[INODE]`), or empty.
pub(super) fn pid_namespace(who: &str) -> String {
    std::fs::read_link(format!("/proc/{who}/ns/pid"))
        .ok()
        .and_then(|link| {
            let link = link.to_str()?;
            let inode = link.strip_prefix("pid:[")?.strip_suffix(']')?;
            Some(inode.to_owned())
        })
        .unwrap_or_default()
}
