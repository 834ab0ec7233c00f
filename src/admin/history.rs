//! `lockrun history`: the last runs of a lock, newest first, as their
//! releases recorded them (`lock/history`); and the one-run view that
//! `status` and `check` share.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::clock::show;
use crate::config::LockConfig;
use crate::error::Error;
use crate::lock::{merge_histories, Lock, Recorded, Views};

use super::{print_line, to_json, CALL_TIMEOUT};

/// Exit status of `lockrun history` when no run is recorded.
const NONE_RECORDED: u8 = 1;

/// One recorded run, in `lockrun history --json`, and as `last_run` and
/// `last_success` in `lockrun status --json` and `check --json`. Field
/// names are part of lockrun's interface: add fields, never rename or
/// remove them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct RunJson {
    pub(crate) fencing_token: u64,
    /// With `--slots`, the slot it held; null otherwise.
    pub(crate) slot: Option<u32>,
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) user: String,
    /// The program's file name, without its arguments.
    pub(crate) command: String,
    /// Server time it asked for the lock, ms since the Unix epoch.
    pub(crate) asked_at_ms: u64,
    /// Server time the command started, ms since the Unix epoch.
    pub(crate) started_at_ms: u64,
    /// Server time its release ran, ms since the Unix epoch.
    pub(crate) ended_at_ms: u64,
    pub(crate) waited_ms: u64,
    /// How long it held the lock, command and stop included.
    pub(crate) duration_ms: u64,
    /// `exit N`, a signal's name (`SIGTERM`), `lost`, `timeout` or
    /// `superseded`.
    pub(crate) outcome: String,
    /// The command's exit status, when it exited by itself.
    pub(crate) exit_status: Option<i32>,
    /// What the release found: released, kept, lost or superseded.
    pub(crate) release: String,
    /// Whether the command exited 0, its lease held to the end.
    pub(crate) succeeded: bool,
}

impl RunJson {
    pub(crate) fn new(r: &Recorded) -> RunJson {
        RunJson {
            fencing_token: r.run.fence,
            slot: r.run.slot,
            host: r.run.host.clone(),
            pid: r.run.pid,
            user: r.run.user.clone(),
            command: r.run.command.clone(),
            asked_at_ms: r.asked_us() / 1000,
            started_at_ms: r.started_us() / 1000,
            ended_at_ms: r.ended_us / 1000,
            waited_ms: r.run.waited_ms,
            duration_ms: r.run.held_ms,
            outcome: r.outcome(),
            exit_status: r.run.exit,
            release: r.release.clone(),
            succeeded: r.succeeded(),
        }
    }

    /// One line: token, host, start, duration, outcome; wait and slot where
    /// they apply.
    pub(crate) fn line(&self) -> String {
        let mut line = format!(
            "{} {} {} pid {} {} in {}: {}",
            self.fencing_token,
            wall(self.started_at_ms),
            self.host,
            self.pid,
            self.command,
            show(Duration::from_millis(self.duration_ms)),
            self.outcome
        );
        if let Some(slot) = self.slot {
            let _ = write!(line, ", slot {slot}");
        }
        // A wait under a second is the round trip, not a wait.
        if self.waited_ms >= 1000 {
            let _ = write!(
                line,
                ", waited {}",
                show(Duration::from_millis(self.waited_ms))
            );
        }
        line
    }
}

/// A time on the server's clock, as a person reads it (UTC, to the second).
pub(crate) fn wall(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The runs every answering server recorded, as one history, newest first.
pub(crate) fn runs(views: &Views) -> Vec<Recorded> {
    merge_histories(
        views
            .0
            .iter()
            .filter_map(|view| view.seen.as_ref().ok())
            .map(|status| status.history.as_slice()),
    )
}

/// The newest run, and the newest that succeeded.
pub(crate) fn last_and_success(runs: &[Recorded]) -> (Option<RunJson>, Option<RunJson>) {
    (
        runs.first().map(RunJson::new),
        runs.iter().find(|r| r.succeeded()).map(RunJson::new),
    )
}

/// `lockrun history`: the last `count` runs (all kept, without), newest
/// first; 0 when there is any, 1 when none is recorded, 69 when fewer than a
/// majority of the lock's servers answer.
pub(crate) async fn history(
    lock: LockConfig,
    count: Option<usize>,
    json: bool,
) -> Result<u8, Error> {
    let views = Lock::for_operator(&lock.servers, CALL_TIMEOUT, lock.keys.clone())
        .status()
        .await?;
    let shown: Vec<RunJson> = runs(&views)
        .iter()
        .take(count.unwrap_or(usize::MAX))
        .map(RunJson::new)
        .collect();
    if json {
        print_line(&to_json(&shown)?);
    } else if shown.is_empty() {
        print_line(&format!("{}: no run recorded", lock.name));
    } else {
        for run in &shown {
            print_line(&run.line());
        }
    }
    Ok(if shown.is_empty() { NONE_RECORDED } else { 0 })
}
