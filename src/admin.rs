//! The operator's subcommands: `lockrun status` and `lockrun release`;
//! `lockrun list` in `admin/list`, `lockrun history` in `admin/history`,
//! `lockrun check` in `admin/check`.

mod check;
mod history;
mod holders;
mod list;

use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use crate::clock::{show, whole, MS};
use crate::config::LockConfig;
use crate::error::Error;
use crate::lock::{
    is_gone_from_here, Holder, Keys, Lock, Occupancy, Removed, Servers, Status, View, Views, Waiter,
};

pub(crate) use self::check::check;
pub(crate) use self::history::history;
use self::history::{last_and_success, runs, RunJson};
use self::holders::{holders_json, latest_left_ms, together_text, HoldingJson};
pub(crate) use self::list::list;

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
    /// Where lockrun asked: the URL without its credentials
    /// (`redis://host:port`, `unix:///path`, or the Sentinel or Cluster URL);
    /// null for a quorum, whose `members` each name theirs.
    pub(crate) server: Option<String>,
    /// The ACL user the URL names, whom lockrun logs in as; null when it
    /// names none (`default`) and for a quorum.
    pub(crate) user: Option<String>,
    /// The server that answered: `host:port` or a socket path; behind
    /// Sentinel the primary it named, in a cluster the node owning the key's
    /// slot. Null when it cannot be told.
    pub(crate) redis_node: Option<String>,
    /// How many replicas acknowledged the current lease, as its holder
    /// noted; null when free, or when the holder asked for no
    /// acknowledgement (or has not had it yet, after a hand-over).
    pub(crate) replicas_acknowledged: Option<u32>,
    /// With `--redis` given three or more times, each member's own view,
    /// in the order given; the fields above are then the majority's view.
    /// Absent for one server.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) members: Vec<MemberJson>,
    /// In a quorum, whether a majority of members agrees on one holder
    /// (held) or that the lock is free. Absent for one server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) majority_agrees: Option<bool>,
    /// The success a `--once-per` run recorded, until its period ends;
    /// null when none.
    pub(crate) done: Option<DoneJson>,
    /// The number of slots the holders and waiters agreed on (1 for runs
    /// alone or --shared); null when nobody holds or waits.
    pub(crate) slots: Option<u32>,
    /// Every holder: the one alone (also in `holder`), or each of those
    /// holding the lock together.
    pub(crate) holders: Vec<HoldingJson>,
    /// The newest run in the lock's history (`lockrun history`); null when
    /// none is recorded.
    pub(crate) last_run: Option<RunJson>,
    /// The newest run in it that succeeded; null when none did.
    pub(crate) last_success: Option<RunJson>,
}

/// A recorded success (`--once-per`), in `lockrun status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct DoneJson {
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) command: String,
    pub(crate) fencing_token: u64,
    /// Server time that run got the lock, ms since the Unix epoch.
    pub(crate) at_ms: u64,
    /// Server time the period ends, ms since the Unix epoch.
    pub(crate) until_ms: u64,
    pub(crate) left_ms: u64,
}

fn done_json(views: &Views) -> Option<DoneJson> {
    views.done().map(|(done, now_us)| DoneJson {
        host: done.by.host.clone(),
        pid: done.by.pid,
        command: done.by.command.clone(),
        fencing_token: done.by.fence,
        at_ms: done.by.acquired_us / 1000,
        until_ms: done.until_ms,
        left_ms: done.until_ms.saturating_sub(now_us / 1000),
    })
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
    /// Whether it ran on this host and its process is gone: the lock is
    /// free only when its lease expires. False for a holder on another
    /// host, which this host cannot check.
    pub(crate) gone: bool,
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
    /// Whether it gave --shared.
    pub(crate) shared: bool,
    /// Its --slots (1 without).
    pub(crate) slots: u32,
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
            shared: waiter.shared,
            slots: waiter.slots.unwrap_or(1),
        }
    }
}

impl HolderJson {
    /// `h` as seen at server time `now_us`.
    fn new(h: &Holder, now_us: u64) -> Self {
        HolderJson {
            host: h.host.clone(),
            pid: h.pid,
            command: h.command.clone(),
            acquired_at_ms: h.acquired_us / 1000,
            held_for_ms: now_us.saturating_sub(h.acquired_us) / 1000,
            fencing_token: h.fence,
            finished_at_ms: h.finished_us.map(|us| us / 1000),
            gone: is_gone_from_here(&h.host, h.pid),
        }
    }
}

fn holder_json(status: &Status) -> Option<HolderJson> {
    status
        .holder
        .as_ref()
        .map(|h| HolderJson::new(h, status.now_us))
}

fn lease_left(occupancy: Occupancy) -> Option<Duration> {
    match occupancy {
        Occupancy::Leased(left) => Some(left),
        Occupancy::Free | Occupancy::NoExpiry => None,
    }
}

/// `lockrun status`: prints the lock's state; 0 when held, 1 when free; 69
/// when fewer than a majority of its servers answer.
pub(crate) async fn status(lock: LockConfig, json: bool) -> Result<u8, Error> {
    let views = Lock::for_operator(&lock.servers, CALL_TIMEOUT, lock.keys.clone())
        .status()
        .await?;
    let state = status_json(&lock.keys, &lock.servers, &views);
    print_status(&state, json)?;
    Ok(if state.held { 0 } else { FREE })
}

/// The lock as a majority of its servers show it. One server is a quorum of
/// one; only a quorum lists its members' own views, and only one server
/// keeps a line of waiters (a quorum does not queue).
fn status_json(keys: &Keys, servers: &Servers, views: &Views) -> StatusJson {
    let held = views.held();
    let one = match views.0.as_slice() {
        [View { seen: Ok(one), .. }] => Some(one),
        _ => None,
    };
    let left = held
        .and_then(|held| views.left(held))
        .map(|left| whole(left, MS));
    let (last_run, last_success) = last_and_success(&runs(views));
    StatusJson {
        key: keys.name.clone(),
        redis_key: keys.lock.clone(),
        held: held.is_some(),
        ttl_left_ms: left.or_else(|| held.and_then(latest_left_ms)),
        holder: held.and_then(holder_json),
        last_fencing_token: views.last_fence(),
        waiters: one.map_or_else(Vec::new, |one| {
            let now_us = one.now_us;
            one.waiters
                .iter()
                .map(|w| WaiterJson::new(w, now_us))
                .collect()
        }),
        server: match servers {
            Servers::One(target) => Some(target.to_string()),
            Servers::Quorum(_) => None,
        },
        user: match servers {
            Servers::One(target) => target.user().map(str::to_owned),
            Servers::Quorum(_) => None,
        },
        redis_node: one.and_then(|one| one.node.clone()),
        replicas_acknowledged: held
            .and_then(|held| held.holder.as_ref())
            .and_then(|holder| holder.replicas_acked),
        members: if one.is_some() {
            Vec::new()
        } else {
            views.0.iter().map(member_json).collect()
        },
        majority_agrees: one.is_none().then(|| views.majority_agrees()),
        done: done_json(views),
        slots: one.and_then(Status::slots),
        holders: held.map_or_else(Vec::new, |held| holders_json(held, left)),
        last_run,
        last_success,
    }
}

fn member_json(view: &View) -> MemberJson {
    let redis = view.server.clone();
    match &view.seen {
        Ok(status) => MemberJson {
            redis,
            reachable: true,
            held: status.occupancy != Occupancy::Free,
            ttl_left_ms: lease_left(status.occupancy).map(|left| whole(left, MS)),
            holder: holder_json(status),
            last_fencing_token: status.last_fence,
            error: None,
        },
        Err(error) => MemberJson {
            redis,
            reachable: false,
            held: false,
            ttl_left_ms: None,
            holder: None,
            last_fencing_token: None,
            error: Some(error.clone()),
        },
    }
}

fn print_status(state: &StatusJson, json: bool) -> Result<(), Error> {
    let text = if json {
        to_json(state)?
    } else {
        status_text(state)
    };
    print_line(&text);
    Ok(())
}

fn to_json(value: &impl Serialize) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|err| Error::Internal {
        doing: "print the status as JSON",
        source: err.into(),
    })
}

/// `lockrun release`: removes the lock whoever holds it, with `--force`;
/// with `holder`, only the holder with that token (1 when none has it).
pub(crate) async fn release(
    lock: LockConfig,
    force: bool,
    holder: Option<&str>,
) -> Result<u8, Error> {
    if !force {
        return Err(Error::Usage(format!(
            "refusing to release {}: another run may hold it, and removing its lock lets a \
             second copy start while the first is still being stopped; add --force to \
             remove it anyway",
            lock.name
        )));
    }
    let of = lock.servers.targets().len();
    let Removed {
        holders: removed,
        done_cleared,
    } = Lock::for_operator(&lock.servers, CALL_TIMEOUT, lock.keys)
        .force_release(holder)
        .await?;
    let name = lock.name;
    let on = if of == 1 {
        String::new()
    } else {
        format!(" on {} of {of} servers,", removed.len())
    };
    for holder in &removed {
        print_line(&format!("released {name}{on} held by {}", describe(holder)));
        if of > 1 {
            // A quorum's members all show the same holder.
            break;
        }
    }
    match holder {
        _ if !removed.is_empty() => {}
        Some(token) => {
            print_line(&format!("no holder of {name} has the token {token}"));
            return Ok(FREE);
        }
        None if of == 1 => print_line(&format!("{name} was not held")),
        None => print_line(&format!("{name} was not held on any of {of} servers")),
    }
    if done_cleared {
        print_line(&format!(
            "cleared the --once-per success recorded for {name}"
        ));
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
    let slot = holder
        .slot
        .map_or_else(String::new, |slot| format!(" in slot {slot}"));
    format!(
        "{} pid {}{slot} (fencing token {}): {}",
        holder.host, holder.pid, holder.fence, holder.command
    )
}

fn status_text(json: &StatusJson) -> String {
    let mut text = holder_text(json);
    members_text(json, &mut text);
    if let Some(done) = &json.done {
        let _ = write!(text, "\n  {}", done_text(done));
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
            match (w.supersede, w.shared) {
                (true, _) => " (--supersede)",
                (false, true) => " (--shared)",
                (false, false) => "",
            },
            w.command
        );
    }
    if let Some(run) = &json.last_run {
        let _ = write!(text, "\n  last run: {}", run.line());
    }
    if let Some(run) = json
        .last_success
        .as_ref()
        .filter(|s| Some(*s) != json.last_run.as_ref())
    {
        let _ = write!(text, "\n  last success: {}", run.line());
    }
    if let Some(server) = &json.server {
        let _ = write!(text, "\n  server: {server}");
        if let Some(user) = &json.user {
            let _ = write!(text, " as user '{user}'");
        }
    }
    text
}

/// A quorum's members, one line each, after whether a majority agrees.
fn members_text(json: &StatusJson, text: &mut String) {
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
                "held by {} pid {}{}, {}, fencing token {}",
                h.host,
                h.pid,
                gone_note(h),
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
}

/// What a holder line adds for a holder that is gone; nothing otherwise.
fn gone_note(holder: &HolderJson) -> &'static str {
    if holder.gone {
        " (gone: no such process on this host)"
    } else {
        ""
    }
}

/// A recorded success, as `status` and `list` say it.
fn done_text(done: &DoneJson) -> String {
    format!(
        "done: ran on {} pid {}, fencing token {}; --once-per runs skip it for {} more",
        done.host,
        done.pid,
        done.fencing_token,
        show(Duration::from_millis(done.left_ms))
    )
}

fn holder_text(json: &StatusJson) -> String {
    if !json.held {
        return match json.last_fencing_token {
            Some(fence) => format!("{}: free (last fencing token {fence})", json.key),
            None => format!("{}: free", json.key),
        };
    }
    if json.holder.is_none() && !json.holders.is_empty() {
        return together_text(&json.key, json.slots, &json.holders);
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
        Some(h) if h.gone => format!(
            "{}: held by {} pid {}, which is gone (no such process on this host): the lock is \
             free when its lease expires{}; fencing token {}\n  command: {}",
            json.key,
            h.host,
            h.pid,
            json.ttl_left_ms.map_or_else(
                || " (it has no expiry: set outside lockrun?)".into(),
                |ms| {
                    let at = std::time::SystemTime::now() + Duration::from_millis(ms);
                    let at = humantime::format_rfc3339_seconds(at);
                    format!(" in {}, at {at}", show(Duration::from_millis(ms)))
                }
            ),
            h.fencing_token,
            h.command
        ),
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
