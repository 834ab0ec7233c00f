//! Who holds a lock and who waits for it, as the scripts record them next to
//! the lease: read by busy runs, `lockrun status` and the operator's
//! messages, never trusted for safety (only the token is).

use std::collections::HashMap;
use std::ffi::OsString;
use std::time::Duration;

/// The longest command line recorded as the holder.
const MAX_COMMAND_CHARS: usize = 200;

/// Who is asking for the lock, as recorded next to it.
#[derive(Clone, Debug)]
pub(crate) struct Requester {
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) command: String,
}

/// Whether the holder `host` pid `pid` ran on this host and has ended: a
/// run killed with SIGKILL leaves its lease until it expires. Only this
/// host's processes can be looked at; a pid reused since reads as alive,
/// which says no more than before.
pub(crate) fn is_gone_from_here(host: &str, pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    pid > 0
        && this_host() == host
        && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH)
}

/// The name a holder record gives this host.
fn this_host() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

impl Requester {
    pub(crate) fn new(command: &[OsString]) -> Self {
        let host = this_host();
        let mut line = command
            .iter()
            .map(|arg| arg.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        if line.chars().count() > MAX_COMMAND_CHARS {
            line = line.chars().take(MAX_COMMAND_CHARS - 3).collect::<String>() + "...";
        }
        Requester {
            host,
            pid: std::process::id(),
            command: line,
        }
    }
}

/// The done record: the job is done this period, as a `--once-per` run that
/// succeeded wrote (`lock/scripts/release.lua`): who ran it, and until when
/// (server time, ms since the epoch) no run of the key runs it again. "Done" means
/// this and only this, in the code, the scripts (the `:done` key) and
/// `lockrun status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DoneRecord {
    /// The run that succeeded, as its holder record said.
    pub(crate) by: Holder,
    pub(crate) until_ms: u64,
}

impl DoneRecord {
    /// The record from its hash's fields; `None` when there is none.
    pub(crate) fn from_fields(fields: &HashMap<String, String>) -> Option<DoneRecord> {
        let by = Holder::from_fields(fields)?;
        let until_ms = fields
            .get("until")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Some(DoneRecord { by, until_ms })
    }
}

/// The holder record of a lock, as stored by whoever acquired it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) command: String,
    /// Server time of the acquisition, microseconds since the epoch.
    pub(crate) acquired_us: u64,
    pub(crate) fence: u64,
    /// Server time the command finished, when the lock is only kept for
    /// `--min-hold`.
    pub(crate) finished_us: Option<u64>,
    /// How many replicas acknowledged the lease, when the holder asked
    /// for acknowledgement (`--replica-acks`).
    pub(crate) replicas_acked: Option<u32>,
    /// Its lease's token: shown only to the operator, who may name it to
    /// `release --force --holder`.
    pub(crate) token: Option<String>,
    /// Its slot, with `--slots`.
    pub(crate) slot: Option<u32>,
    /// The `--slots` of a run holding it together.
    pub(crate) slots: Option<u32>,
    /// Whether it holds the lock with other `--shared` runs.
    pub(crate) shared: bool,
    /// Time left of a lease held together, as `lockrun status` saw it.
    pub(crate) left_ms: Option<u64>,
}

impl Holder {
    /// The record from its hash's fields; `None` when there is none. A field
    /// this version cannot read is left at its default: the record only
    /// informs.
    pub(crate) fn from_fields(fields: &HashMap<String, String>) -> Option<Holder> {
        if fields.is_empty() {
            return None;
        }
        let number = |name: &str| fields.get(name).and_then(|v| v.parse().ok());
        Some(Holder {
            host: fields.get("host").cloned().unwrap_or_default(),
            pid: number("pid")
                .and_then(|pid| u32::try_from(pid).ok())
                .unwrap_or(0),
            command: fields.get("command").cloned().unwrap_or_default(),
            acquired_us: number("acquired_us").unwrap_or(0),
            fence: number("fence").unwrap_or(0),
            finished_us: number("finished_us"),
            replicas_acked: number("replicas_acked").and_then(|n| u32::try_from(n).ok()),
            token: fields.get("token").cloned(),
            slot: number("slot").and_then(|n| u32::try_from(n).ok()),
            slots: number("slots").and_then(|n| u32::try_from(n).ok()),
            shared: fields.get("shared").is_some_and(|v| v == "1"),
            left_ms: number("left"),
        })
    }

    /// Whether two records show the same acquisition: the same run and token
    /// (each server has its own clock for the times).
    pub(crate) fn same_acquisition(&self, other: &Holder) -> bool {
        (&self.host, self.pid, &self.command, self.fence)
            == (&other.host, other.pid, &other.command, other.fence)
    }
}

/// Who has the lock, and who waits for it, when an attempt did not get it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HoldersAndWaiters {
    /// Whether a lease exists: a free lock is busy too while others wait.
    pub(crate) held: bool,
    /// Lease time the holder has left, if the key has an expiry.
    pub(crate) left: Option<Duration>,
    pub(crate) holder: Option<Holder>,
    /// Runs waiting in line (this one included once it has a place).
    pub(crate) waiting: u64,
    /// How many runs hold it together (`--slots`, `--shared`); 0 when one
    /// holds it alone, or nobody.
    pub(crate) holding: u64,
}

impl HoldersAndWaiters {
    /// Taken by someone lockrun could not see: what a quorum says when no
    /// member showed a holder.
    pub(crate) fn unknown() -> Self {
        HoldersAndWaiters {
            held: true,
            left: None,
            holder: None,
            waiting: 0,
            holding: 0,
        }
    }
}

/// A run waiting in line, as recorded when it took its place.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub(crate) struct Waiter {
    pub(crate) host: String,
    #[serde(deserialize_with = "number_text")]
    pub(crate) pid: u32,
    pub(crate) command: String,
    /// Server time it took its place, microseconds since the epoch (its
    /// score in the queue, not part of the record).
    #[serde(skip)]
    pub(crate) arrived_us: u64,
    /// Whether it gave `--supersede`.
    pub(crate) supersede: bool,
    /// Whether it gave `--shared`.
    pub(crate) shared: bool,
    /// Its `--slots`; absent in a record of a run alone.
    pub(crate) slots: Option<u32>,
    /// Its `--ttl`, which a lease handed to it gets.
    #[serde(rename = "ttl", deserialize_with = "number_text")]
    pub(crate) ttl_ms: u64,
}

impl Waiter {
    /// A waiter from its place in line and its record (JSON, as
    /// `lock/scripts/acquire.lua` writes it). A record this version cannot
    /// read still counts as a waiter.
    pub(crate) fn from_record(arrival: &str, record: &str) -> Waiter {
        Waiter {
            arrived_us: arrival.parse().unwrap_or(0),
            ..serde_json::from_str(record).unwrap_or_default()
        }
    }
}

/// The scripts write numbers into JSON as text; one that does not parse is
/// unknown (0), not an unreadable record.
fn number_text<'de, D, N>(text: D) -> Result<N, D::Error>
where
    D: serde::Deserializer<'de>,
    N: std::str::FromStr + Default,
{
    let text: String = serde::Deserialize::deserialize(text)?;
    Ok(text.parse().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_commands_are_truncated() {
        let long = vec![OsString::from("x".repeat(500))];
        let requester = Requester::new(&long);
        assert_eq!(requester.command.chars().count(), MAX_COMMAND_CHARS);
        assert!(requester.command.ends_with("..."));
    }

    #[test]
    fn holder_parses_from_hash_fields() {
        let fields = [
            ("host", "h1"),
            ("pid", "42"),
            ("command", "job"),
            ("acquired_us", "7"),
            ("fence", "9"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
        assert_eq!(
            Holder::from_fields(&fields),
            Some(Holder {
                host: "h1".into(),
                pid: 42,
                command: "job".into(),
                acquired_us: 7,
                fence: 9,
                ..Holder::default()
            })
        );
        assert_eq!(Holder::from_fields(&HashMap::new()), None);
    }

    #[test]
    fn waiter_records_parse_and_odd_ones_still_count() {
        let waiter = Waiter::from_record(
            "1732924800123456",
            r#"{"host":"ci-3","pid":"77","command":"deploy.sh","ttl":"30000","listening":true,"supersede":true}"#,
        );
        assert_eq!(
            waiter,
            Waiter {
                host: "ci-3".into(),
                pid: 77,
                command: "deploy.sh".into(),
                arrived_us: 1_732_924_800_123_456,
                supersede: true,
                ttl_ms: 30_000,
                ..Waiter::default()
            }
        );
        assert_eq!(Waiter::from_record("1", "not json").arrived_us, 1);
        assert_eq!(Waiter::from_record("1", r#"{"pid":"x"}"#).pid, 0);
    }
}
