//! The metrics file (`--metrics-file`): Prometheus text exposition for
//! node_exporter's textfile collector, one file that every lockrun on a host
//! may share.
//!
//! An update takes an flock on `PATH.lock`, reads the file, merges one run's
//! change into what it holds, writes a temporary file beside it and renames
//! it over the file. The lock is on a file of its own because the rename
//! replaces the metrics file: a lock on it would be on an inode that the
//! next writer no longer opens. The rename makes a reader (the collector)
//! see the old file or the new one, never a part.
//!
//! lockrun owns the file: it keeps its own samples (`lockrun_*` with the
//! labels it writes) and drops every other line when it rewrites it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

#[cfg(test)]
mod tests;

/// How a run ended, the `outcome` label of `lockrun_runs_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    Failed,
    Busy,
    Lost,
    Timeout,
    Unavailable,
}

impl Outcome {
    const ALL: [Outcome; 6] = [
        Outcome::Ok,
        Outcome::Failed,
        Outcome::Busy,
        Outcome::Lost,
        Outcome::Timeout,
        Outcome::Unavailable,
    ];

    fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Busy => "busy",
            Outcome::Lost => "lost",
            Outcome::Timeout => "timeout",
            Outcome::Unavailable => "unavailable",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One key's samples. Times are kept in whole microseconds, as written, so
/// that an acquisition read back compares exactly with the one that wrote it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct KeyMetrics {
    running: Option<bool>,
    acquired_us: Option<u64>,
    last_exit_status: Option<u64>,
    last_success_us: Option<u64>,
    last_wait_us: Option<u64>,
    last_hold_us: Option<u64>,
    runs: [u64; Outcome::ALL.len()],
}

/// What one run changes in its key's samples.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Change {
    /// This host took the lock at `at_us` (Unix time), after waiting.
    Acquired { at_us: u64, waited: Duration },
    /// The run ended; `held` when it had taken the lock.
    Ended {
        outcome: Outcome,
        waited: Duration,
        held: Option<Held>,
    },
}

/// The end of a run that held the lock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held {
    pub(crate) acquired_us: u64,
    pub(crate) ended_us: u64,
    pub(crate) duration: Duration,
    pub(crate) exit_status: u8,
}

impl KeyMetrics {
    fn apply(&mut self, change: Change) {
        match change {
            Change::Acquired { at_us, waited } => {
                self.last_wait_us = Some(micros(waited));
                // A later acquisition on this host already wrote its own: this
                // write was delayed, and the newer run's state stands.
                if self.acquired_us.is_none_or(|known| known <= at_us) {
                    self.running = Some(true);
                    self.acquired_us = Some(at_us);
                }
            }
            Change::Ended {
                outcome,
                waited,
                held,
            } => {
                self.runs[outcome.index()] += 1;
                self.last_wait_us = Some(micros(waited));
                let Some(held) = held else { return };
                self.last_exit_status = Some(u64::from(held.exit_status));
                self.last_hold_us = Some(micros(held.duration));
                if outcome == Outcome::Ok {
                    self.last_success_us = Some(held.ended_us);
                }
                // Another run on this host may have taken the lock since (after
                // a lost lease, or straight after the release): it runs now.
                if self
                    .acquired_us
                    .is_none_or(|known| known <= held.acquired_us)
                {
                    self.running = Some(false);
                    self.acquired_us = Some(held.acquired_us);
                }
            }
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The samples of every key in the file.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Metrics {
    keys: BTreeMap<String, KeyMetrics>,
}

/// A gauge: its name, help text, and a key's value as written.
struct Gauge {
    name: &'static str,
    help: &'static str,
    get: fn(&KeyMetrics) -> Option<u64>,
    set: fn(&mut KeyMetrics, u64),
    /// Whether the value is in microseconds, written as seconds.
    seconds: bool,
}

const GAUGES: [Gauge; 6] = [
    Gauge {
        name: "lockrun_running",
        help: "1 while a lockrun on this host runs the command of the key, 0 after.",
        get: |m| m.running.map(u64::from),
        set: |m, v| m.running = Some(v != 0),
        seconds: false,
    },
    Gauge {
        name: "lockrun_acquired_timestamp_seconds",
        help: "When this host last took the lock (Unix time).",
        get: |m| m.acquired_us,
        set: |m, v| m.acquired_us = Some(v),
        seconds: true,
    },
    Gauge {
        name: "lockrun_last_exit_status",
        help: "Exit status of the last run on this host that took the lock.",
        get: |m| m.last_exit_status,
        set: |m, v| m.last_exit_status = Some(v),
        seconds: false,
    },
    Gauge {
        name: "lockrun_last_success_timestamp_seconds",
        help: "When the command last exited 0 on this host (Unix time).",
        get: |m| m.last_success_us,
        set: |m, v| m.last_success_us = Some(v),
        seconds: true,
    },
    Gauge {
        name: "lockrun_last_wait_seconds",
        help: "How long the last run waited before it took the lock or gave up.",
        get: |m| m.last_wait_us,
        set: |m, v| m.last_wait_us = Some(v),
        seconds: true,
    },
    Gauge {
        name: "lockrun_last_hold_seconds",
        help: "How long the last run that took the lock held it on this host.",
        get: |m| m.last_hold_us,
        set: |m, v| m.last_hold_us = Some(v),
        seconds: true,
    },
];

const RUNS: &str = "lockrun_runs_total";
const RUNS_HELP: &str = "Runs of the key on this host, by outcome.";

impl Metrics {
    /// The samples lockrun wrote in `text`; any other line, and a sample it
    /// cannot read, is left out.
    pub(crate) fn parse(text: &str) -> Metrics {
        let mut metrics = Metrics::default();
        for line in text.lines() {
            if let Some((name, labels, value)) = sample(line) {
                metrics.take(name, &labels, value);
            }
        }
        metrics
    }

    fn take(&mut self, name: &str, labels: &[(String, String)], value: &str) {
        let label = |wanted: &str| labels.iter().find(|(n, _)| n == wanted).map(|(_, v)| v);
        let Some(key) = label("key") else { return };
        if name == RUNS {
            let outcome = label("outcome")
                .and_then(|o| Outcome::ALL.into_iter().find(|x| x.label() == o.as_str()));
            if let (Some(outcome), Ok(count), 2) = (outcome, value.parse(), labels.len()) {
                self.entry(key).runs[outcome.index()] = count;
            }
            return;
        }
        let Some(gauge) = GAUGES.iter().find(|g| g.name == name) else {
            return;
        };
        let value = if gauge.seconds {
            parse_seconds(value)
        } else {
            value.parse().ok()
        };
        if let (Some(value), 1) = (value, labels.len()) {
            (gauge.set)(self.entry(key), value);
        }
    }

    fn entry(&mut self, key: &str) -> &mut KeyMetrics {
        self.keys.entry(key.to_owned()).or_default()
    }

    pub(crate) fn apply(&mut self, key: &str, change: Change) {
        self.entry(key).apply(change);
    }

    /// The file's text: `# HELP` and `# TYPE` once per metric that has a
    /// sample, then its samples, keys in order. Every outcome of a key is
    /// written, zeros included, so that `increase()` sees the first one.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for gauge in &GAUGES {
            let values: Vec<_> = self
                .keys
                .iter()
                .filter_map(|(key, m)| (gauge.get)(m).map(|v| (key, v)))
                .collect();
            if values.is_empty() {
                continue;
            }
            header(&mut out, gauge.name, gauge.help, "gauge");
            for (key, value) in values {
                let value = if gauge.seconds {
                    seconds(value)
                } else {
                    value.to_string()
                };
                let _ = writeln!(out, "{}{{key=\"{}\"}} {value}", gauge.name, escape(key));
            }
        }
        if !self.keys.is_empty() {
            header(&mut out, RUNS, RUNS_HELP, "counter");
        }
        for (key, m) in &self.keys {
            for outcome in Outcome::ALL {
                let _ = writeln!(
                    out,
                    "{RUNS}{{key=\"{}\",outcome=\"{}\"}} {}",
                    escape(key),
                    outcome.label(),
                    m.runs[outcome.index()]
                );
            }
        }
        out
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Microseconds as seconds with six decimals, exactly.
fn seconds(us: u64) -> String {
    format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
}

/// Seconds written as digits with an optional fraction, in microseconds
/// (beyond six decimals cut off); None for any other form.
fn parse_seconds(text: &str) -> Option<u64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) {
        return None;
    }
    let fraction: String = fraction.chars().chain("000000".chars()).take(6).collect();
    let whole: u64 = whole.parse().ok()?;
    whole
        .checked_mul(1_000_000)?
        .checked_add(fraction.parse().ok()?)
}

/// A label value as the exposition format writes it.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Label names and values, unescaped.
type Labels = Vec<(String, String)>;

/// A sample line `name{label="value",...} value [timestamp]`: its name,
/// labels (unescaped) and value; None for comments and what does not parse.
fn sample(line: &str) -> Option<(&str, Labels, &str)> {
    let (name, mut rest) = line.split_once('{')?;
    if !name.starts_with("lockrun_") {
        return None;
    }
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if let Some(after) = rest.strip_prefix('}') {
            let value = after.split_whitespace().next()?;
            return Some((name, labels, value));
        }
        let (label, after) = rest.split_once('=')?;
        let (value, after) = quoted(after.trim_start().strip_prefix('"')?)?;
        labels.push((label.trim().to_owned(), value));
        rest = after;
    }
}

/// A label value up to its closing quote, unescaped, and what follows it.
fn quoted(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => value.push('\n'),
                c => value.push(c),
            },
            c => value.push(c),
        }
    }
    None
}

/// How long an update waits for another lockrun's update of the same file
/// before it gives up. Far longer than an update takes; short enough that a
/// lock file held by a stuck process delays a run's end only a little.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(2);
/// How often a waiting update tries the lock again.
const LOCK_POLL: Duration = Duration::from_millis(2);

/// Why the file could not be updated, with the file that refused.
#[derive(Debug)]
pub(crate) struct UpdateError(String);

impl std::fmt::Display for UpdateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn failed(doing: &str, path: &Path, err: &io::Error) -> UpdateError {
    UpdateError(format!("cannot {doing} {}: {err}", path.display()))
}

/// Merges `change` of `key` into the file at `path`, under the file's lock.
/// Blocks for up to `LOCK_WAIT` and then for the file system: call it where
/// that holds up nothing that has a deadline.
pub(crate) fn update(path: &Path, key: &str, change: Change) -> Result<(), UpdateError> {
    let lock_path = with_suffix(path, ".lock");
    let _locked = lock(&lock_path, LOCK_WAIT)?;
    let text = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(err) if err.kind() == io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(failed("read", path, &err)),
    };
    let mut metrics = Metrics::parse(&text);
    metrics.apply(key, change);
    replace(path, &metrics.render())
}

/// `path` with `suffix` appended to its file name: in the same directory.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The exclusive flock on `path`, created if missing and never removed (a
/// lock file removed while held would let the next writer lock another
/// inode), within `wait`.
fn lock(path: &Path, wait: Duration) -> Result<Flock<File>, UpdateError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
        // flock needs no write access: another user's lock file will do.
        .or_else(|err| match err.kind() {
            io::ErrorKind::PermissionDenied => File::open(path),
            _ => Err(err),
        })
        .map_err(|err| failed("open the lock file", path, &err))?;
    let give_up = Instant::now() + wait;
    loop {
        // Polled rather than blocking, so that the wait has a bound.
        file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => return Ok(locked),
            Err((file, Errno::EAGAIN | Errno::EINTR)) if Instant::now() < give_up => file,
            Err((_, Errno::EAGAIN)) => {
                return Err(UpdateError(format!(
                    "another process held {} for more than {}s",
                    path.display(),
                    wait.as_secs()
                )))
            }
            Err((_, errno)) => return Err(failed("lock", path, &errno.into())),
        };
        std::thread::sleep(LOCK_POLL);
    }
}

/// Replaces the file at `path` with `text`: a temporary file in the same
/// directory (so that the rename stays on one file system), then rename(2).
fn replace(path: &Path, text: &str) -> Result<(), UpdateError> {
    let temporary = with_suffix(path, &format!(".{}.tmp", std::process::id()));
    let written = write_synced(&temporary, text).map_err(|err| failed("write", &temporary, &err));
    let renamed = written.and_then(|()| {
        std::fs::rename(&temporary, path).map_err(|err| failed("replace", path, &err))
    });
    if renamed.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    renamed
}

fn write_synced(path: &Path, text: &str) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(path)?;
    file.write_all(text.as_bytes())?;
    // Without it, some file systems can keep the rename but not the data
    // across a crash, and leave an empty file.
    file.sync_data()
}
