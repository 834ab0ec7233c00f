//! `lockrun check`: whether a lock's job succeeded recently enough, for
//! monitoring systems, in the monitoring plugin convention (one line first;
//! exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN). "The job silently stopped
//! running" is the failure nobody notices: the history already holds the
//! answer, on the store every run talks to.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::clock::{show, whole, MS};
use crate::config::{CheckConfig, LockConfig};
use crate::lock::{Lock, Recorded, Views};

use super::history::{runs, RunJson};
use super::{print_line, to_json, CALL_TIMEOUT};

/// A lock held this many times longer than its runs' median duration is
/// flagged (and at least `HELD_SLACK` longer): a run that hangs holds the
/// lock, and every later run skips as busy, which no failure reports.
const HELD_FACTOR: u64 = 3;
const HELD_SLACK: Duration = Duration::from_secs(1);
/// Runs needed before a median says how long runs usually take.
const HELD_MIN_RUNS: usize = 3;

/// The monitoring plugin statuses, in order of severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum Level {
    Ok,
    Warning,
    Critical,
    Unknown,
}

impl Level {
    fn code(self) -> u8 {
        self as u8
    }

    fn word(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Warning => "WARNING",
            Level::Critical => "CRITICAL",
            Level::Unknown => "UNKNOWN",
        }
    }
}

/// `lockrun check --json`. Field names are part of lockrun's interface.
#[derive(Debug, Serialize)]
pub(crate) struct CheckJson {
    pub(crate) key: String,
    /// OK, WARNING, CRITICAL or UNKNOWN.
    pub(crate) status: Level,
    /// The exit status: 0, 1, 2 or 3.
    pub(crate) exit_status: u8,
    /// The line of text, as printed without --json.
    pub(crate) message: String,
    pub(crate) last_run: Option<RunJson>,
    pub(crate) last_success: Option<RunJson>,
    /// How long ago the last success ended; null without one.
    pub(crate) last_success_age_ms: Option<u64>,
    /// How long the current holder has held the lock; null when free.
    pub(crate) held_for_ms: Option<u64>,
    /// The median duration of the recorded runs; null with fewer than 3.
    pub(crate) usual_duration_ms: Option<u64>,
}

/// `lockrun check`: prints the verdict and returns its exit status.
pub(crate) async fn check(lock: LockConfig, check: CheckConfig) -> u8 {
    let seen = Lock::for_operator(&lock.servers, CALL_TIMEOUT, lock.keys.clone())
        .status()
        .await;
    let verdict = match seen {
        Ok(views) => judge(&lock.name, &views, check),
        Err(err) => CheckJson {
            key: lock.name.clone(),
            status: Level::Unknown,
            exit_status: Level::Unknown.code(),
            message: format!("LOCKRUN UNKNOWN - {}: {err}", lock.name),
            last_run: None,
            last_success: None,
            last_success_age_ms: None,
            held_for_ms: None,
            usual_duration_ms: None,
        },
    };
    let text = if check.json {
        to_json(&verdict).unwrap_or_else(|_| verdict.message.clone())
    } else {
        verdict.message.clone()
    };
    print_line(&text);
    verdict.exit_status
}

/// The verdict on lock `name` as `views` show it.
fn judge(name: &str, views: &Views, check: CheckConfig) -> CheckJson {
    let runs = runs(views);
    let now_ms = views
        .0
        .iter()
        .filter_map(|view| view.seen.as_ref().ok())
        .map(|status| status.now_us / 1000)
        .max()
        .unwrap_or(0);
    let last = runs.first();
    let success = runs.iter().find(|r| r.succeeded());
    let age = success.map(|s| Duration::from_millis(now_ms.saturating_sub(s.ended_us / 1000)));
    let held_for = views.held().and_then(|held| {
        let since = held
            .holder
            .as_ref()
            .map(|h| h.acquired_us)
            .or_else(|| held.together.iter().map(|h| h.acquired_us).min())?;
        Some(Duration::from_millis(now_ms.saturating_sub(since / 1000)))
    });
    let usual = usual_duration(&runs);

    let (mut level, mut message) = match (success, age) {
        (Some(s), Some(age)) => {
            let level = if age > check.critical {
                Level::Critical
            } else if check.warning.is_some_and(|w| age > w) {
                Level::Warning
            } else {
                Level::Ok
            };
            let said = format!(
                "{name} succeeded {} ago on {} in {}",
                show(age),
                s.run.host,
                show(Duration::from_millis(s.run.held_ms))
            );
            (level, said)
        }
        _ if runs.is_empty() => (Level::Critical, format!("{name}: no run recorded")),
        _ => (
            Level::Critical,
            format!(
                "{name}: no successful run among the {} recorded",
                runs.len()
            ),
        ),
    };
    if let Some(last) = last.filter(|last| !last.succeeded()) {
        level = level.max(Level::Warning);
        let ago = Duration::from_millis(now_ms.saturating_sub(last.ended_us / 1000));
        let _ = write!(
            message,
            "; the last run, {} ago on {}, ended {}",
            show(ago),
            last.run.host,
            last.outcome()
        );
    }
    if let (Some(held), Some(usual)) = (held_for, usual) {
        let bound =
            (usual * u32::try_from(HELD_FACTOR).unwrap_or(u32::MAX)).max(usual + HELD_SLACK);
        if held > bound {
            level = level.max(Level::Warning);
            let _ = write!(
                message,
                "; held for {} now, where runs usually take {}",
                show(held),
                show(usual)
            );
        }
    }
    let age_ms = age.map(|d| whole(d, MS));
    let mut perf = format!(" | runs={}", runs.len());
    if let Some(age_ms) = age_ms {
        let _ = write!(
            perf,
            " last_success_age={}s;{};{}",
            age_ms / 1000,
            check
                .warning
                .map_or(String::new(), |w| w.as_secs().to_string()),
            check.critical.as_secs()
        );
    }
    CheckJson {
        key: name.to_owned(),
        status: level,
        exit_status: level.code(),
        message: format!("LOCKRUN {} - {message}{perf}", level.word()),
        last_run: last.map(RunJson::new),
        last_success: success.map(RunJson::new),
        last_success_age_ms: age_ms,
        held_for_ms: held_for.map(|d| whole(d, MS)),
        usual_duration_ms: usual.map(|d| whole(d, MS)),
    }
}

/// The median duration of the recorded runs: how long they usually take.
fn usual_duration(runs: &[Recorded]) -> Option<Duration> {
    if runs.len() < HELD_MIN_RUNS {
        return None;
    }
    let mut held: Vec<u64> = runs.iter().map(|r| r.run.held_ms).collect();
    held.sort_unstable();
    held.get(held.len() / 2)
        .map(|ms| Duration::from_millis(*ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_the_plugin_exit_statuses() {
        assert_eq!(
            [Level::Ok, Level::Warning, Level::Critical, Level::Unknown].map(Level::code),
            [0, 1, 2, 3]
        );
        assert!(Level::Critical > Level::Warning);
    }
}
