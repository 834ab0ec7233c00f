//! The run history: what a run that started its command leaves next to the
//! lock when it releases (`lock/scripts/release.lua` writes it in the
//! release's own call), and how `lockrun history`, `status` and `check` read
//! it back. Only shown, never trusted for safety.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a run sends with its release to be recorded: who ran what, with
/// which token, how long it waited and held the lock (on its own boot
/// clock), and how the command ended. The script adds when it ended on the
/// server's clock and what the release found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Run {
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) user: String,
    /// The program's file name only: the arguments may hold secrets.
    pub(crate) command: String,
    pub(crate) fence: u64,
    /// With `--slots`, the slot held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) slot: Option<u32>,
    /// `--shared`: held beside other runs, so a later token is no sign of
    /// being superseded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) shared: bool,
    pub(crate) waited_ms: u64,
    pub(crate) held_ms: u64,
    /// The command's exit status, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) exit: Option<i32>,
    /// The signal that killed it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) signal: Option<i32>,
    /// Why lockrun stopped it, if it did: `lost` (the lease could not be
    /// kept) or `timeout` (`--timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stop: Option<String>,
}

/// What a release sends to be recorded: the record, and how many runs the
/// history keeps (`--history`).
#[derive(Clone, Debug)]
pub(crate) struct ToRecord {
    pub(crate) keep: u32,
    pub(crate) record: String,
}

impl ToRecord {
    /// `run` to be recorded in a history of `keep` runs; `None` for 0.
    pub(crate) fn new(keep: u32, run: &Run) -> Option<ToRecord> {
        let record = serde_json::to_string(run).ok()?;
        (keep > 0).then_some(ToRecord { keep, record })
    }
}

/// One run as the history holds it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub(crate) struct Recorded {
    /// When the release ran, on the server's clock (µs since the epoch).
    pub(crate) ended_us: u64,
    /// What the release found: `released`, `kept` (`--min-hold`), `lost`
    /// or `superseded`.
    pub(crate) release: String,
    pub(crate) run: Run,
}

impl Recorded {
    /// One entry of the history list; `None` for one lockrun cannot read
    /// (written by hand, or by a later version that changed it).
    pub(crate) fn parse(entry: &str) -> Option<Recorded> {
        serde_json::from_str(entry).ok()
    }

    /// When the command started: the server's time at release less how
    /// long the run held the lock.
    pub(crate) fn started_us(&self) -> u64 {
        self.ended_us.saturating_sub(self.run.held_ms * 1000)
    }

    /// When the run asked for the lock.
    pub(crate) fn asked_us(&self) -> u64 {
        self.started_us().saturating_sub(self.run.waited_ms * 1000)
    }

    /// How the run ended, in a word or two: `exit N`, `signal NAME`,
    /// `lost`, `timeout`, `superseded`. A lease found gone at release
    /// overrides an exit: another run may have overlapped this one.
    pub(crate) fn outcome(&self) -> String {
        if self.release == "superseded" {
            return "superseded".into();
        }
        if let Some(stop) = &self.run.stop {
            return stop.clone();
        }
        if self.release == "lost" {
            return "lost".into();
        }
        match (self.run.exit, self.run.signal) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(signal)) => signal_name(signal),
            (None, None) => "unknown".into(),
        }
    }

    /// Whether the command exited 0 by itself, its lease held to the end.
    pub(crate) fn succeeded(&self) -> bool {
        self.outcome() == "exit 0"
    }
}

/// `SIGTERM` for 15; `signal N` for a number nix does not name.
fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_owned())
}

/// The histories of several servers (a quorum's members) as one, newest
/// first: one entry per fencing token (and slot). A run records on every
/// member its release reached; where they differ, a member that found its
/// lease released or kept tells the run's end better than one that never
/// granted it (`lost` there).
pub(crate) fn merge<'a>(histories: impl IntoIterator<Item = &'a [Recorded]>) -> Vec<Recorded> {
    let mut runs: BTreeMap<(u64, Option<u32>), Recorded> = BTreeMap::new();
    for history in histories {
        for run in history {
            let key = (run.run.fence, run.run.slot);
            let better = runs.get(&key).is_none_or(|seen| {
                !matches!(seen.release.as_str(), "released" | "kept")
                    && matches!(run.release.as_str(), "released" | "kept")
            });
            if better {
                runs.insert(key, run.clone());
            }
        }
    }
    runs.into_values().rev().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(fence: u64, release: &str, exit: Option<i32>) -> Recorded {
        Recorded {
            ended_us: 10_000_000 + fence,
            release: release.into(),
            run: Run {
                host: "a".into(),
                fence,
                held_ms: 2000,
                waited_ms: 500,
                exit,
                ..Run::default()
            },
        }
    }

    #[test]
    fn the_record_reads_back_as_the_script_wraps_it() {
        let run = Run {
            host: "host-a".into(),
            pid: 7,
            user: "ops".into(),
            command: "invoice.sh".into(),
            fence: 1_765_000_000_000_123,
            slot: Some(2),
            exit: Some(0),
            ..Run::default()
        };
        let sent = ToRecord::new(20, &run).expect("a record");
        let entry = format!(
            r#"{{"ended_us":1765000000500000,"release":"released","run":{}}}"#,
            sent.record
        );
        let back = Recorded::parse(&entry).expect("readable");
        assert_eq!(back.run, run);
        assert!(back.succeeded());
        assert!(ToRecord::new(0, &run).is_none());
    }

    #[test]
    fn times_count_back_from_the_end() {
        let r = recorded(1, "released", Some(0));
        assert_eq!(r.started_us(), 10_000_001 - 2_000_000);
        assert_eq!(r.asked_us(), 10_000_001 - 2_500_000);
    }

    #[test]
    fn outcomes() {
        assert_eq!(recorded(1, "released", Some(3)).outcome(), "exit 3");
        assert_eq!(recorded(1, "lost", Some(0)).outcome(), "lost");
        assert_eq!(recorded(1, "superseded", Some(0)).outcome(), "superseded");
        let mut killed = recorded(1, "released", None);
        killed.run.signal = Some(15);
        assert_eq!(killed.outcome(), "SIGTERM");
        killed.run.stop = Some("timeout".into());
        assert_eq!(killed.outcome(), "timeout");
        assert!(!killed.succeeded());
    }

    #[test]
    fn members_merge_by_token_preferring_a_release() {
        let a = [
            recorded(2, "lost", Some(0)),
            recorded(1, "released", Some(0)),
        ];
        let b = [
            recorded(3, "released", Some(1)),
            recorded(2, "released", Some(0)),
        ];
        let merged = merge([&a[..], &b[..]]);
        let tokens: Vec<u64> = merged.iter().map(|r| r.run.fence).collect();
        assert_eq!(tokens, [3, 2, 1]);
        assert_eq!(merged[1].release, "released");
    }
}
