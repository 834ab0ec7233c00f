//! The line, one key at a time, while the lock's slot is being migrated
//! (docs/design.md, "A slot being migrated"): a waiting run keeps its
//! place, a run that does not wait does not overtake the ones that do, and
//! a release hands the lock to the first of them.

use crate::lock::error::LockError;
use crate::lock::keys::Part;
use crate::lock::records::Waiter;
use crate::lock::reply::Released;
use crate::lock::server::Server;

/// How many of the line's first ids are read: a waiter whose place ran out
/// stays in line until a script that names all the lock's keys drops it,
/// once the slot settled, and one read skips that many.
const FRONT: &str = "4";

/// The first run in line whose place is still live.
pub(super) struct First {
    /// Its id, which is its lock token.
    pub(super) id: String,
    pub(super) waiter: Waiter,
}

/// The line as a migration leaves it readable.
pub(super) struct Line {
    pub(super) first: Option<First>,
    /// How many runs are in it, live or not.
    pub(super) waiting: u64,
}

impl Server {
    /// Reads the front of the line: the queue, then the first places and
    /// their records, each a call of its own.
    pub(super) async fn line(&mut self) -> Result<Line, LockError> {
        let front = self.piece(Part::Queue, "line_front", &[FRONT]).await?;
        let waiting = front.waiting.unwrap_or(0);
        for id in front.ids {
            let place = self.piece(Part::Places, "place_get", &[&id]).await?;
            let now_ms = i64::try_from(place.now_us / 1000).unwrap_or(i64::MAX);
            if place.deadline.is_none_or(|deadline| deadline < now_ms) {
                continue;
            }
            let record = self.piece(Part::Waiters, "waiter_get", &[&id]).await?;
            let waiter = Waiter::from_record("", &record.record.unwrap_or_default());
            return Ok(Line {
                first: Some(First { id, waiter }),
                waiting,
            });
        }
        Ok(Line {
            first: None,
            waiting,
        })
    }

    /// Refreshes this run's place for `ttl_ms`, with the keys of the line
    /// that it needs; `false` when it has no place.
    pub(super) async fn keep_place(&mut self, ttl_ms: &str) -> Result<bool, LockError> {
        let token = self.token.as_str().to_owned();
        let place = self
            .piece(Part::Places, "place_refresh", &[&token, ttl_ms])
            .await?;
        if place.kind != "refreshed" {
            return Ok(false);
        }
        for part in [Part::Queue, Part::Waiters] {
            self.piece(part, "line_keep", &[ttl_ms]).await?;
        }
        Ok(true)
    }

    /// Takes the run `id` out of line once it holds the lock: its place,
    /// its arrival, then its record, as queue.lua's `forget` does, so that
    /// nothing of it outlasts the migration. Only tidies: a place left
    /// behind is skipped once its time runs out. The record goes only after
    /// both, for a run without one is taken to be in none of the line's
    /// keys.
    pub(super) async fn leave_line(&mut self, id: &str) {
        let mut left = true;
        for part in [Part::Places, Part::Queue] {
            left &= self.piece(part, "line_drop", &[id]).await.is_ok();
        }
        if left {
            let _ = self.piece(Part::Waiters, "waiter_drop", &[id]).await;
        }
    }

    /// Hands the lease this run holds with fencing token `fence` to
    /// `first`, whose id is its token, with a new fencing token, told on
    /// its channel in the same call. The holder record goes first and
    /// only informs. Whether `first` still lives cannot be asked here:
    /// its subscription may be on the other node. A dead one holds the
    /// lock up for its ttl, as a waiter that died while first in line does.
    pub(super) async fn pass_to(
        &mut self,
        first: &First,
        fence: u64,
    ) -> Result<Released, LockError> {
        let next = self.piece(Part::Fence, "fence_next", &[]).await?;
        let handed = next.fence.unwrap_or_default().to_string();
        let waiter = &first.waiter;
        let (ttl, pid, mine) = (
            waiter.ttl_ms.to_string(),
            waiter.pid.to_string(),
            fence.to_string(),
        );
        let record = [&mine, &waiter.host, &pid, &waiter.command, &handed, &ttl];
        let _ = self
            .piece(Part::Holder, "holder_pass", &record.map(String::as_str))
            .await;
        let token = self.token.as_str().to_owned();
        let channel = self.keys.wake_channel(&first.id);
        let message = format!("granted {handed}");
        let lease = self
            .piece(
                Part::Lease,
                "lease_pass",
                &[&token, &first.id, &ttl, &channel, &message],
            )
            .await?;
        if lease.kind != "passed" {
            return Ok(Released::NotOurs);
        }
        self.leave_line(&first.id).await;
        Ok(Released::Deleted)
    }
}
