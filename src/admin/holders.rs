//! Every holder of a lock in `lockrun status`: the run holding it alone, or
//! the runs holding it together (`--slots`, `--shared`), each with its slot
//! and token, so that the operator can release one of them.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::{gone_note, HolderJson};
use crate::clock::show;
use crate::lock::{Holder, Status};

/// One holder of a lock, in `lockrun status --json`'s `holders`: what
/// `holder` shows of the one alone, and what tells holders apart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct HoldingJson {
    /// Its slot, 0 to N-1, with `--slots`; null otherwise.
    pub(crate) slot: Option<u32>,
    /// Whether it holds the lock with other `--shared` runs.
    pub(crate) shared: bool,
    /// Its lease's token, for `lockrun release --force --holder`.
    pub(crate) token: Option<String>,
    /// Its lease's time left; null when the key has no expiry.
    pub(crate) ttl_left_ms: Option<u64>,
    #[serde(flatten)]
    pub(crate) holder: HolderJson,
}

impl HoldingJson {
    fn new(holder: &Holder, left_ms: Option<u64>, now_us: u64) -> Self {
        HoldingJson {
            slot: holder.slot,
            shared: holder.shared,
            token: holder.token.clone(),
            ttl_left_ms: left_ms,
            holder: HolderJson::new(holder, now_us),
        }
    }
}

/// Every holder `held` shows: the one alone (its lease `left`), then those
/// together, by slot.
pub(crate) fn holders_json(held: &Status, left_ms: Option<u64>) -> Vec<HoldingJson> {
    let alone = held
        .holder
        .iter()
        .map(|holder| HoldingJson::new(holder, left_ms, held.now_us));
    let mut together: Vec<_> = held
        .together
        .iter()
        .map(|holder| HoldingJson::new(holder, holder.left_ms, held.now_us))
        .collect();
    together.sort_by_key(|h| (h.slot, h.holder.acquired_at_ms));
    alone.chain(together).collect()
}

/// The latest lease of the runs holding the lock together.
pub(crate) fn latest_left_ms(held: &Status) -> Option<u64> {
    held.together.iter().filter_map(|h| h.left_ms).max()
}

/// The first line of `lockrun status` for a lock held together, then one
/// line per holder.
pub(crate) fn together_text(key: &str, slots: Option<u32>, holders: &[HoldingJson]) -> String {
    let mut text = match slots {
        Some(n) if n > 1 => format!("{key}: held in {} of {n} slots", holders.len()),
        _ => format!("{key}: held by {} --shared runs", holders.len()),
    };
    for h in holders {
        let place = h
            .slot
            .map_or_else(|| "shared".to_owned(), |slot| format!("slot {slot}"));
        let lease = match (h.holder.finished_at_ms, h.ttl_left_ms) {
            (Some(_), Some(ms)) => format!(
                "finished, kept for --min-hold for {}",
                show(Duration::from_millis(ms))
            ),
            (None, Some(ms)) => format!("lease expires in {}", show(Duration::from_millis(ms))),
            (_, None) => "no expiry".to_owned(),
        };
        let _ = write!(
            text,
            "\n  {place}: {} pid {} for {}{}, {lease}, fencing token {}, token {}\n    command: {}",
            h.holder.host,
            h.holder.pid,
            show(Duration::from_millis(h.holder.held_for_ms)),
            gone_note(&h.holder),
            h.holder.fencing_token,
            h.token.as_deref().unwrap_or("?"),
            h.holder.command
        );
    }
    text
}
