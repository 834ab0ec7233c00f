//! The operator's subcommands: `lockrun status` and `lockrun release`.

use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use crate::clock::show;
use crate::config::LockConfig;
use crate::error::Error;
use crate::lock::{Holder, Inspector, Occupancy, Waiter};

/// Limit on each Redis call of a subcommand.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Exit status of `lockrun status` for a free lock.
const FREE: u8 = 1;

/// `lockrun status --json` prints one object of this shape. Field names are
/// part of lockrun's interface: add fields, never rename or remove them.
#[derive(Debug, Serialize)]
pub(crate) struct StatusJson {
    pub(crate) key: String,
    pub(crate) redis_key: String,
    pub(crate) held: bool,
    /// Lease time left in ms; null when free or when the key has no expiry.
    pub(crate) ttl_left_ms: Option<u64>,
    pub(crate) holder: Option<HolderJson>,
    /// The last fencing token handed out for this name (null if never).
    pub(crate) last_fencing_token: Option<u64>,
    /// The runs waiting in line, first come first (empty when none).
    pub(crate) waiters: Vec<WaiterJson>,
    /// The server that answered: `host:port` or a socket path; behind
    /// Sentinel the primary it named, in a cluster the node owning the key's
    /// slot. Null when it cannot be told.
    pub(crate) redis_node: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct HolderJson {
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) command: String,
    /// Server time of the acquisition, ms since the Unix epoch.
    pub(crate) acquired_at_ms: u64,
    pub(crate) held_for_ms: u64,
    /// Server time the command finished, ms since the Unix epoch, when the
    /// lock is only kept for --min-hold; null while the command runs.
    pub(crate) finished_at_ms: Option<u64>,
    pub(crate) fencing_token: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct WaiterJson {
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) command: String,
    /// Server time it took its place in line, ms since the Unix epoch.
    pub(crate) queued_at_ms: u64,
    pub(crate) waited_ms: u64,
    /// Whether it gave --supersede (a newer run with it takes its place).
    pub(crate) supersede: bool,
}

impl WaiterJson {
    fn new(waiter: &Waiter, now_us: u64) -> Self {
        WaiterJson {
            host: waiter.host.clone(),
            pid: waiter.pid,
            command: waiter.command.clone(),
            queued_at_ms: waiter.arrived_us / 1000,
            waited_ms: now_us.saturating_sub(waiter.arrived_us) / 1000,
            supersede: waiter.supersede,
        }
    }
}

/// `lockrun status`: prints the lock's state; 0 when held, 1 when free.
pub(crate) async fn status(lock: LockConfig, json: bool) -> Result<u8, Error> {
    let mut inspector = Inspector::new(lock.target, CALL_TIMEOUT, lock.keys);
    let status = inspector.status().await??;
    let holder = status.holder.as_ref().map(|h| HolderJson {
        host: h.host.clone(),
        pid: h.pid,
        command: h.command.clone(),
        acquired_at_ms: h.acquired_us / 1000,
        held_for_ms: status.now_us.saturating_sub(h.acquired_us) / 1000,
        fencing_token: h.fence,
        finished_at_ms: h.finished_us.map(|us| us / 1000),
    });
    let state = StatusJson {
        key: lock.name,
        redis_key: inspector.keys().lock.clone(),
        held: status.occupancy != Occupancy::Free,
        ttl_left_ms: match status.occupancy {
            Occupancy::Leased(left) => Some(u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
            Occupancy::Free | Occupancy::NoExpiry => None,
        },
        holder,
        last_fencing_token: status.last_fence,
        waiters: status
            .waiters
            .iter()
            .map(|waiter| WaiterJson::new(waiter, status.now_us))
            .collect(),
        redis_node: status.node.clone(),
    };
    let text = if json {
        serde_json::to_string(&state).map_err(|err| Error::Internal {
            doing: "print the status as JSON",
            source: err.into(),
        })?
    } else {
        status_text(&state)
    };
    print_line(&text);
    Ok(if state.held { 0 } else { FREE })
}

/// `lockrun release`: removes the lock whoever holds it, with `--force`.
pub(crate) async fn release(lock: LockConfig, force: bool) -> Result<u8, Error> {
    if !force {
        return Err(Error::Usage(format!(
            "refusing to release {}: another run may hold it, and removing its lock lets a \
             second copy start while the first is still being stopped; add --force to \
             remove it anyway",
            lock.name
        )));
    }
    let mut inspector = Inspector::new(lock.target, CALL_TIMEOUT, lock.keys);
    match inspector.force_release().await?? {
        Some(holder) => print_line(&format!(
            "released {} held by {}",
            lock.name,
            describe(&holder)
        )),
        None => print_line(&format!("{} was not held", lock.name)),
    }
    Ok(0)
}

/// The subcommands' answer goes to stdout; a closed stdout is no reason to
/// fail an operation that already happened.
fn print_line(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

fn describe(holder: &Holder) -> String {
    if holder.host.is_empty() {
        return "an unknown holder".into();
    }
    format!(
        "{} pid {} (fencing token {}): {}",
        holder.host, holder.pid, holder.fence, holder.command
    )
}

fn status_text(json: &StatusJson) -> String {
    let mut text = holder_text(json);
    if !json.waiters.is_empty() {
        let _ = write!(
            text,
            "\n  {} waiting, first come first:",
            json.waiters.len()
        );
    }
    for (n, w) in json.waiters.iter().enumerate() {
        let _ = write!(
            text,
            "\n  {}. {} pid {}, waiting {}{}: {}",
            n + 1,
            w.host,
            w.pid,
            show(Duration::from_millis(w.waited_ms)),
            if w.supersede { " (--supersede)" } else { "" },
            w.command
        );
    }
    text
}

fn holder_text(json: &StatusJson) -> String {
    if !json.held {
        return match json.last_fencing_token {
            Some(fence) => format!("{}: free (last fencing token {fence})", json.key),
            None => format!("{}: free", json.key),
        };
    }
    let left = json.ttl_left_ms.map_or_else(
        || "no expiry (set outside lockrun?)".into(),
        |ms| format!("lease expires in {}", show(Duration::from_millis(ms))),
    );
    match &json.holder {
        Some(h) if h.finished_at_ms.is_some() => {
            let now_ms = h.acquired_at_ms + h.held_for_ms;
            let ago = now_ms.saturating_sub(h.finished_at_ms.unwrap_or(now_ms));
            let left = json
                .ttl_left_ms
                .map_or_else(|| "ever".into(), |ms| show(Duration::from_millis(ms)));
            format!(
                "{}: kept for --min-hold for {left} more; the command finished {} ago on {} \
                 (pid {}), fencing token {}\n  command: {}",
                json.key,
                show(Duration::from_millis(ago)),
                h.host,
                h.pid,
                h.fencing_token,
                h.command
            )
        }
        Some(h) => format!(
            "{}: held by {} pid {} for {}, {left}, fencing token {}\n  command: {}",
            json.key,
            h.host,
            h.pid,
            show(Duration::from_millis(h.held_for_ms)),
            h.fencing_token,
            h.command
        ),
        None => format!("{}: held (holder unknown), {left}", json.key),
    }
}
