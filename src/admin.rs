//! The operator's subcommands: `lockrun status` and `lockrun release`.

use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use futures_util::future::join_all;
use serde::Serialize;

use crate::clock::show;
use crate::config::LockConfig;
use crate::error::Error;
use crate::lock::{Holder, Inspector, Occupancy, Status, Waiter};
use crate::quorum::majority;
use crate::redis_conn::RedisError;

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
    /// With `--redis` given three or more times, each member's own view,
    /// in the order given; the fields above are then the majority's view.
    /// Absent for one server.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) members: Vec<MemberJson>,
    /// In a quorum, whether a majority of members agrees on one holder
    /// (held) or that the lock is free. Absent for one server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) majority_agrees: Option<bool>,
}

/// One quorum member's view of the lock, in `lockrun status`.
#[derive(Debug, Serialize)]
pub(crate) struct MemberJson {
    /// The member's address, as given to `--redis`, without credentials.
    pub(crate) redis: String,
    pub(crate) reachable: bool,
    pub(crate) held: bool,
    pub(crate) ttl_left_ms: Option<u64>,
    pub(crate) holder: Option<HolderJson>,
    pub(crate) last_fencing_token: Option<u64>,
    /// Why it could not be asked, when unreachable.
    pub(crate) error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
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

fn holder_json(status: &Status) -> Option<HolderJson> {
    status.holder.as_ref().map(|h| HolderJson {
        host: h.host.clone(),
        pid: h.pid,
        command: h.command.clone(),
        acquired_at_ms: h.acquired_us / 1000,
        held_for_ms: status.now_us.saturating_sub(h.acquired_us) / 1000,
        fencing_token: h.fence,
        finished_at_ms: h.finished_us.map(|us| us / 1000),
    })
}

fn ttl_left_ms(occupancy: Occupancy) -> Option<u64> {
    match occupancy {
        Occupancy::Leased(left) => Some(u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
        Occupancy::Free | Occupancy::NoExpiry => None,
    }
}

/// `lockrun status`: prints the lock's state; 0 when held, 1 when free.
pub(crate) async fn status(lock: LockConfig, json: bool) -> Result<u8, Error> {
    if !lock.quorum.is_empty() {
        return quorum_status(lock, json).await;
    }
    let mut inspector = Inspector::new(lock.target, CALL_TIMEOUT, lock.keys);
    let status = inspector.status().await??;
    let state = StatusJson {
        key: lock.name,
        redis_key: inspector.keys().lock.clone(),
        held: status.occupancy != Occupancy::Free,
        ttl_left_ms: ttl_left_ms(status.occupancy),
        holder: holder_json(&status),
        last_fencing_token: status.last_fence,
        waiters: status
            .waiters
            .iter()
            .map(|waiter| WaiterJson::new(waiter, status.now_us))
            .collect(),
        redis_node: status.node.clone(),
        members: Vec::new(),
        majority_agrees: None,
    };
    print_status(&state, json)?;
    Ok(if state.held { 0 } else { FREE })
}

/// `lockrun status` on a quorum: every member asked at once; the lock is
/// held when a majority shows the same holder (host, pid and fencing
/// token), free when a majority shows it free. 69 when fewer than a
/// majority answer.
async fn quorum_status(lock: LockConfig, json: bool) -> Result<u8, Error> {
    let of = lock.quorum.len();
    let asked = join_all(lock.quorum.iter().map(|target| {
        let mut inspector = Inspector::new(target.clone(), CALL_TIMEOUT, lock.keys.clone());
        async move { inspector.status().await }
    }))
    .await;
    let mut members = Vec::with_capacity(of);
    let mut why = Vec::new();
    for (target, answer) in lock.quorum.iter().zip(asked) {
        let redis = target.to_string();
        let member = match answer {
            Ok(Ok(status)) => MemberJson {
                redis,
                reachable: true,
                held: status.occupancy != Occupancy::Free,
                ttl_left_ms: ttl_left_ms(status.occupancy),
                holder: holder_json(&status),
                last_fencing_token: status.last_fence,
                error: None,
            },
            Ok(Err(foreign)) => {
                why.push(foreign.to_string());
                unreachable_member(redis, foreign.to_string())
            }
            Err(err) => {
                why.push(err.to_string());
                unreachable_member(redis, err.to_string())
            }
        };
        members.push(member);
    }
    let answered = of - why.len();
    if answered < majority(of) {
        return Err(RedisError::no_majority(answered, of, &why).into());
    }
    let free = members.iter().filter(|m| m.reachable && !m.held).count();
    let (agreed, ttl_left) = majority_holder(&members, of);
    let state = StatusJson {
        key: lock.name,
        redis_key: lock.keys.lock.clone(),
        held: agreed.is_some(),
        ttl_left_ms: ttl_left,
        last_fencing_token: members.iter().filter_map(|m| m.last_fencing_token).max(),
        majority_agrees: Some(agreed.is_some() || free >= majority(of)),
        holder: agreed,
        waiters: Vec::new(),
        redis_node: None,
        members,
    };
    print_status(&state, json)?;
    Ok(if state.held { 0 } else { FREE })
}

/// The holder that a majority of `members` (of `of`) show, and the least
/// lease time left among them.
fn majority_holder(members: &[MemberJson], of: usize) -> (Option<HolderJson>, Option<u64>) {
    let agreed = members
        .iter()
        .filter_map(|m| m.holder.as_ref())
        .find(|h| showing(members, h).count() >= majority(of))
        .cloned();
    let ttl_left = agreed
        .as_ref()
        .and_then(|h| showing(members, h).filter_map(|m| m.ttl_left_ms).min());
    (agreed, ttl_left)
}

/// The members that show `holder`.
fn showing<'a>(
    members: &'a [MemberJson],
    holder: &'a HolderJson,
) -> impl Iterator<Item = &'a MemberJson> + 'a {
    members
        .iter()
        .filter(move |m| m.holder.as_ref().is_some_and(|o| same_holder(o, holder)))
}

fn unreachable_member(redis: String, error: String) -> MemberJson {
    MemberJson {
        redis,
        reachable: false,
        held: false,
        ttl_left_ms: None,
        holder: None,
        last_fencing_token: None,
        error: Some(error),
    }
}

/// Whether two members show the same acquisition: the same run and token
/// (each member has its own clock for the times).
fn same_holder(a: &HolderJson, b: &HolderJson) -> bool {
    (&a.host, a.pid, &a.command, a.fencing_token) == (&b.host, b.pid, &b.command, b.fencing_token)
}

fn print_status(state: &StatusJson, json: bool) -> Result<(), Error> {
    let text = if json {
        serde_json::to_string(&state).map_err(|err| Error::Internal {
            doing: "print the status as JSON",
            source: err.into(),
        })?
    } else {
        status_text(state)
    };
    print_line(&text);
    Ok(())
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
    if !lock.quorum.is_empty() {
        return quorum_release(lock).await;
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

/// `lockrun release --force` on a quorum: removed on every member at once;
/// fails (69) when fewer than a majority could be asked, having removed it
/// where it could.
async fn quorum_release(lock: LockConfig) -> Result<u8, Error> {
    let of = lock.quorum.len();
    let answers = join_all(lock.quorum.iter().map(|target| {
        let mut inspector = Inspector::new(target.clone(), CALL_TIMEOUT, lock.keys.clone());
        async move { inspector.force_release().await }
    }))
    .await;
    let mut removed = Vec::new();
    let mut why = Vec::new();
    for answer in answers {
        match answer {
            Ok(Ok(Some(holder))) => removed.push(holder),
            Ok(Ok(None)) => {}
            Ok(Err(foreign)) => why.push(foreign.to_string()),
            Err(err) => why.push(err.to_string()),
        }
    }
    let answered = of - why.len();
    if answered < majority(of) {
        return Err(RedisError::no_majority(answered, of, &why).into());
    }
    match removed.first() {
        Some(holder) => print_line(&format!(
            "released {} on {} of {of} servers, held by {}",
            lock.name,
            removed.len(),
            describe(holder)
        )),
        None => print_line(&format!(
            "{} was not held on any of {of} servers",
            lock.name
        )),
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
    if let Some(agrees) = json.majority_agrees {
        let _ = write!(
            text,
            "\n  {} of {} servers{}:",
            json.members.iter().filter(|m| m.reachable).count(),
            json.members.len(),
            if agrees {
                ", a majority agrees"
            } else {
                " answer, no majority agrees"
            }
        );
    }
    for member in &json.members {
        let view = match (&member.error, &member.holder) {
            (Some(error), _) => format!("unreachable: {error}"),
            (None, Some(h)) => format!(
                "held by {} pid {}, {}, fencing token {}",
                h.host,
                h.pid,
                member.ttl_left_ms.map_or_else(
                    || "no expiry".into(),
                    |ms| format!("lease expires in {}", show(Duration::from_millis(ms)))
                ),
                h.fencing_token
            ),
            (None, None) if member.held => "held (holder unknown)".into(),
            (None, None) => match member.last_fencing_token {
                Some(fence) => format!("free (last fencing token {fence})"),
                None => "free".into(),
            },
        };
        let _ = write!(text, "\n  {}: {view}", member.redis);
    }
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
