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
//! labels it writes) and its records of the runs that hold a lock
//! (`holders`), and drops every other line when it rewrites it.

mod file;
mod holders;
mod text;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::time::Duration;

use file::{failed, lock, replace, with_suffix};
pub(crate) use file::{UpdateError, LOCK_WAIT};
pub(crate) use holders::Process;
use holders::{Holder, RECORD};
use text::{escape, parse_seconds, sample, seconds};

use crate::clock::{whole, US};

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
/// that a time read back is the one written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct KeyMetrics {
    /// The runs on this host that hold the lock; `lockrun_running` counts
    /// them.
    holders: Vec<Holder>,
    /// When a run of the key first wrote the file: the "no recent success"
    /// alert's start for a key that has never succeeded.
    first_seen_us: Option<u64>,
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
    /// The run ended at `at_us`; `held` when it had taken the lock.
    Ended {
        outcome: Outcome,
        at_us: u64,
        waited: Duration,
        held: Option<HoldSummary>,
    },
}

/// The end of a run that held the lock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HoldSummary {
    pub(crate) acquired_us: u64,
    pub(crate) duration: Duration,
    pub(crate) exit_status: u8,
}

impl KeyMetrics {
    /// Applies `change` made by the run in process `by`.
    fn apply(&mut self, change: Change, by: &Process) {
        let (Change::Acquired { at_us, .. } | Change::Ended { at_us, .. }) = change;
        self.first_seen_us.get_or_insert(at_us);
        match change {
            Change::Acquired { at_us, waited } => {
                self.last_wait_us = Some(whole(waited, US));
                self.took(at_us);
                self.holders.retain(|h| h.process != *by);
                self.holders.push(Holder {
                    process: by.clone(),
                    acquired_us: at_us,
                });
            }
            Change::Ended {
                outcome,
                at_us,
                waited,
                held,
            } => {
                self.runs[outcome.index()] += 1;
                self.last_wait_us = Some(whole(waited, US));
                let Some(held) = held else { return };
                self.holders.retain(|h| h.process != *by);
                self.took(held.acquired_us);
                self.last_exit_status = Some(u64::from(held.exit_status));
                self.last_hold_us = Some(whole(held.duration, US));
                if outcome == Outcome::Ok {
                    self.last_success_us = Some(at_us);
                }
            }
        }
    }

    /// This host took the lock at `at_us`: the newest acquisition stands,
    /// whichever run's write comes last.
    fn took(&mut self, at_us: u64) {
        self.acquired_us = Some(self.acquired_us.map_or(at_us, |known| known.max(at_us)));
    }
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
    /// None for a gauge worked out from the holders' records, not read back.
    set: Option<fn(&mut KeyMetrics, u64)>,
    /// Whether the value is in microseconds, written as seconds.
    seconds: bool,
}

const GAUGES: [Gauge; 8] = [
    Gauge {
        name: "lockrun_running",
        help: "Runs on this host that hold the lock of the key now.",
        get: |m| Some(m.holders.len() as u64),
        set: None,
        seconds: false,
    },
    Gauge {
        name: "lockrun_running_since_timestamp_seconds",
        help: "When the oldest of the runs on this host that hold the lock took it (Unix time).",
        get: |m| m.holders.iter().map(|h| h.acquired_us).min(),
        set: None,
        seconds: true,
    },
    Gauge {
        name: "lockrun_acquired_timestamp_seconds",
        help: "When this host last took the lock (Unix time).",
        get: |m| m.acquired_us,
        set: Some(|m, v| m.acquired_us = Some(v)),
        seconds: true,
    },
    Gauge {
        name: "lockrun_first_seen_timestamp_seconds",
        help: "When a run of the key on this host first wrote this file (Unix time).",
        get: |m| m.first_seen_us,
        set: Some(|m, v| m.first_seen_us = Some(v)),
        seconds: true,
    },
    Gauge {
        name: "lockrun_last_exit_status",
        help: "Exit status of the last run on this host that took the lock.",
        get: |m| m.last_exit_status,
        set: Some(|m, v| m.last_exit_status = Some(v)),
        seconds: false,
    },
    Gauge {
        name: "lockrun_last_success_timestamp_seconds",
        help: "When the command last exited 0 on this host (Unix time).",
        get: |m| m.last_success_us,
        set: Some(|m, v| m.last_success_us = Some(v)),
        seconds: true,
    },
    Gauge {
        name: "lockrun_last_wait_seconds",
        help: "How long the last run waited before it took the lock or gave up.",
        get: |m| m.last_wait_us,
        set: Some(|m, v| m.last_wait_us = Some(v)),
        seconds: true,
    },
    Gauge {
        name: "lockrun_last_hold_seconds",
        help: "How long the last run that took the lock held it on this host.",
        get: |m| m.last_hold_us,
        set: Some(|m, v| m.last_hold_us = Some(v)),
        seconds: true,
    },
];

const RUNS: &str = "lockrun_runs_total";
const RUNS_HELP: &str = "Runs of the key on this host, by outcome.";
/// Before the records, for whoever reads the file.
const RECORDS_HELP: &str = "# The runs that hold a lock (lockrun_running), for lockrun to check \
                            that they still exist; see lockrun(1), METRICS.\n";

impl Metrics {
    /// The samples lockrun wrote in `text`; any other line, and a sample it
    /// cannot read, is left out.
    pub(crate) fn parse(text: &str) -> Metrics {
        let mut metrics = Metrics::default();
        for line in text.lines() {
            if let Some((name, labels, value)) = sample(line) {
                metrics.take(name, &labels, value);
            } else if let Some((RECORD, labels, value)) = line.strip_prefix("# ").and_then(sample) {
                metrics.take_holder(&labels, value);
            }
        }
        metrics
    }

    /// A holder's record: its key, its process, when it took the lock.
    fn take_holder(&mut self, labels: &[(String, String)], value: &str) {
        let Some(((_, key), rest)) = labels.split_first().filter(|((n, _), _)| n == "key") else {
            return;
        };
        let process = Process::from_labels(rest);
        if let (Some(process), Some(acquired_us)) = (process, parse_seconds(value)) {
            let holder = Holder {
                process,
                acquired_us,
            };
            self.entry(key).holders.push(holder);
        }
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
        let Some((gauge, set)) = GAUGES
            .iter()
            .find(|g| g.name == name)
            .and_then(|g| Some((g, g.set?)))
        else {
            return;
        };
        let value = if gauge.seconds {
            parse_seconds(value)
        } else {
            value.parse().ok()
        };
        if let (Some(value), 1) = (value, labels.len()) {
            set(self.entry(key), value);
        }
    }

    fn entry(&mut self, key: &str) -> &mut KeyMetrics {
        self.keys.entry(key.to_owned()).or_default()
    }

    /// Applies `change` to `key`, made by the run in process `by`.
    pub(crate) fn apply(&mut self, key: &str, change: Change, by: &Process) {
        self.entry(key).apply(change, by);
    }

    /// Drops, of every key, the holders whose process is `gone`.
    fn prune(&mut self, gone: impl Fn(&Process) -> bool) {
        for m in self.keys.values_mut() {
            m.holders.retain(|h| !gone(&h.process));
        }
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
        if self.keys.values().any(|m| !m.holders.is_empty()) {
            out.push_str(RECORDS_HELP);
        }
        for (key, m) in &self.keys {
            for holder in &m.holders {
                holder.render(&mut out, key);
            }
        }
        out
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Merges `change` of `key` into the file at `path`, under the file's lock.
/// Blocks for up to `LOCK_WAIT` and then for the file system: call it where
/// that holds up nothing that has a deadline. `me` is the process that makes the change, and the one that checks the
/// other holders' records.
pub(crate) fn update(
    path: &Path,
    key: &str,
    change: Change,
    me: &Process,
) -> Result<(), UpdateError> {
    let lock_path = with_suffix(path, ".lock");
    let _locked = lock(&lock_path, LOCK_WAIT)?;
    let text = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(err) if err.kind() == io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(failed("read", path, &err)),
    };
    let mut metrics = Metrics::parse(&text);
    metrics.prune(|process| holders::gone(process, me));
    metrics.apply(key, change, me);
    replace(path, &metrics.render())
}
