//! A lock whose cluster slot is being migrated: Redis refuses, with
//! TRYAGAIN, a script naming keys split between two nodes, so after such a
//! refusal each step is done one key at a time (`lock/scripts/one_key.lua`),
//! the lease only ever changed on its own. How each operation does it, and
//! what it gives up, is in docs/design.md ("A slot being migrated").
//!
//! `OneKey` is that path: a server's method that gets TRYAGAIN hands the
//! refusal to it, and it decides, in one place, which operations have a
//! one-key-at-a-time form for which runs.

use std::time::Duration;

use tokio::time::Instant;

use super::{ReplicatedWrite, Server};
use crate::clock::{whole_up, BootInstant, MS};
use crate::lock::error::LockError;
use crate::lock::keys::Part;
use crate::lock::records::{Holder, HoldersAndWaiters, Requester, Waiter};
use crate::lock::scripts::{self, Call, OneKeyArgs, OneKeyReply, Released};
use crate::lock::status::Status;
use crate::lock::{Attempt, Grant, Holding, Renewal, ReplicaAcks};
use crate::redis_conn::{ErrorKind, Unready};

/// A server that refused a script because the lock's keys may be split
/// between two nodes: the operations that can be made one key at a time.
pub(super) struct OneKey<'a> {
    server: &'a mut Server,
    /// What an operation that has no one-key-at-a-time form returns, as a
    /// run gets it for any TRYAGAIN: it waits for the slot to settle.
    refusal: LockError,
}

impl<'a> OneKey<'a> {
    /// The one-key-at-a-time path on `server` after `err`, when `err` is the
    /// cluster refusing a call that names keys of a slot being migrated, not
    /// all of them on the node asked (TRYAGAIN, or an ASK that the cluster
    /// client had no retry left to follow); any other `err` as it is.
    pub(super) fn after(err: LockError, server: &'a mut Server) -> Result<Self, LockError> {
        match &err {
            LockError::Redis(redis) if redis.kind == ErrorKind::Transient(Unready::TryAgain) => {
                Ok(OneKey {
                    server,
                    refusal: err,
                })
            }
            _ => Err(err),
        }
    }

    /// The line first, which a run takes the lease past only when it is
    /// first or nobody waits; then the lease, and only once it is taken a
    /// new fencing token and the holder record. A run in line keeps its
    /// place; nobody takes a new one. One key at a time, a done record
    /// cannot be checked atomically with taking the lease, nor the holders
    /// of a lock held together counted: only a run alone acquires this way.
    pub(super) async fn acquire(
        self,
        requester: &Requester,
        sent: BootInstant,
        waits: bool,
    ) -> Result<(Attempt, ReplicatedWrite), LockError> {
        let OneKey { server, refusal } = self;
        if !matches!(server.holding, Holding::Alone { once_per: None, .. }) {
            return Err(refusal);
        }
        let ttl = whole_up(server.timing.ttl, MS).to_string();
        let started = Instant::now();
        let token = server.token.as_str().to_owned();
        let line = server.line().await?;
        let first = line.first.as_ref().map(|first| first.id == token);
        // Behind another run in line, this one takes no free lease, but
        // may have been handed it, and been taken out of line then.
        let op = match first {
            Some(false) => "lease_renew",
            _ => "lease_take",
        };
        let lease = server.piece(Part::Lease, op, &[&token, &ttl]).await?;
        let fence = match lease.kind.as_str() {
            "busy" => {
                return server
                    .behind(&ttl, Some(lease), waits, &line, started)
                    .await
            }
            "gone" => return server.behind(&ttl, None, waits, &line, started).await,
            // Ours already: a reply that never came, or a hand-over.
            "mine" => match server.piece(Part::Holder, "holder_get", &[]).await?.holder {
                Some(holder) => {
                    let fence = holder.fence.to_string();
                    server
                        .piece(Part::Holder, "holder_renew", &[&fence, &ttl])
                        .await?;
                    holder.fence
                }
                None => server.grant_one_key(&ttl, requester).await?,
            },
            _ => server.grant_one_key(&ttl, requester).await?,
        };
        if server.arrival.is_some() {
            server.leave_line(&token).await;
        }
        let written = Server::written(&lease, started);
        Ok((
            Attempt::Acquired(Grant {
                fence,
                sent,
                slot: None,
            }),
            written,
        ))
    }

    /// A lease held together is not on the key that this path renews.
    pub(super) async fn renew(self) -> Result<Renewal, LockError> {
        let OneKey { server, refusal } = self;
        if server.holding.together() {
            return Err(refusal);
        }
        let ttl = whole_up(server.timing.ttl, MS).to_string();
        let started = Instant::now();
        let token = server.token.as_str().to_owned();
        let lease = server
            .piece(Part::Lease, "lease_renew", &[&token, &ttl])
            .await?;
        if lease.kind != "mine" {
            return Ok(Renewal::Lost);
        }
        if let Some(fence) = server.fence {
            // The record only informs: a lease renewed without it holds.
            let fence = fence.to_string();
            let _ = server
                .piece(Part::Holder, "holder_renew", &[&fence, &ttl])
                .await;
        }
        server.replicated(&Server::written(&lease, started)).await?;
        Ok(Renewal::Extended)
    }

    /// To the first run in line, if one is and it holds the lock alone as
    /// this run does, else to nobody; a run that was in line leaves it, so
    /// that no release hands it the lock. No done record is written: the
    /// job may run again (docs/guarantees.md). A lease held together is not
    /// on the key that this path releases.
    pub(super) async fn release(self, keep_for: Option<Duration>) -> Result<Released, LockError> {
        let OneKey { server, refusal } = self;
        if server.holding.together() {
            return Err(refusal);
        }
        let token = server.token.as_str().to_owned();
        if server.arrival.is_some() {
            server.leave_line(&token).await;
        }
        if let (None, Holding::Alone { once_per: None, .. }, Some(fence)) =
            (keep_for, server.holding, server.fence)
        {
            // A line that cannot be read is passed over: the lock then goes
            // to nobody, and the runs in line find it free.
            if let Ok(Line {
                first: Some(first), ..
            }) = server.line().await
            {
                let waiter = &first.waiter;
                if first.id != token
                    && waiter.ttl_ms > 0
                    && !waiter.shared
                    && waiter.slots.unwrap_or(1) == 1
                {
                    return server.pass_to(&first, fence).await;
                }
            }
        }
        let keep = keep_for.map_or(0, |d| whole_up(d, MS)).to_string();
        let lease = server
            .piece(Part::Lease, "lease_release", &[&token, &keep])
            .await?;
        let released = match lease.kind.as_str() {
            "deleted" => Released::Deleted,
            "kept" => Released::Kept,
            _ => return Ok(Released::NotOurs),
        };
        if let Some(fence) = server.fence {
            let fence = fence.to_string();
            // A record left behind only informs, and expires with the lease.
            let _ = match released {
                Released::Kept => {
                    server
                        .piece(Part::Holder, "holder_finish", &[&fence, &keep])
                        .await
                }
                _ => server.piece(Part::Holder, "holder_drop", &[&fence]).await,
            };
        }
        Ok(released)
    }

    /// The line cannot be read: it shows empty.
    pub(super) async fn status(self) -> Result<Status, LockError> {
        let server = self.server;
        let lease = server.piece(Part::Lease, "lease_get", &[]).await?;
        let holder = server.piece(Part::Holder, "holder_get", &[]).await?;
        let fence = server.piece(Part::Fence, "fence_get", &[]).await?;
        let pttl = lease.pttl.unwrap_or(-2);
        Ok(scripts::view(
            pttl,
            holder.holder,
            lease.now_us,
            fence.fence,
        ))
    }

    /// Only a holder alone can be removed, and only whoever it is.
    pub(super) async fn force_release(
        self,
        only: Option<&str>,
    ) -> Result<Option<Holder>, LockError> {
        let OneKey { server, refusal } = self;
        if only.is_some() {
            return Err(refusal);
        }
        let lease = server.piece(Part::Lease, "lease_remove", &[]).await?;
        let holder = server.piece(Part::Holder, "holder_remove", &[]).await?;
        Ok((lease.kind == "deleted").then(|| holder.holder.unwrap_or_default()))
    }
}

impl Server {
    /// One operation of `one_key.lua` on the lock's key `part`.
    async fn piece(
        &mut self,
        part: Part,
        op: &str,
        args: &[&str],
    ) -> Result<OneKeyReply, LockError> {
        let args = OneKeyArgs {
            op,
            holds: part.key().holds,
            // Only a write that replicas must acknowledge needs its node named.
            name_node: self.acks != ReplicaAcks::Count(0),
            operands: args,
        };
        self.invoke(&Call::on_key(&self.keys, part, &args)).await
    }

    /// What the replicas of the node that wrote `reply` must acknowledge.
    fn written(reply: &OneKeyReply, started: Instant) -> ReplicatedWrite {
        ReplicatedWrite {
            replicas: reply.replicas,
            node: Some(reply.node.clone()).filter(|node| !node.is_empty()),
            started,
        }
    }

    /// A run that does not get the lease now: someone holds it, or is
    /// before this run in line. One in line keeps its place and looks
    /// again when the lease could run out if it is first; any other polls.
    async fn behind(
        &mut self,
        ttl: &str,
        lease: Option<OneKeyReply>,
        waits: bool,
        line: &Line,
        started: Instant,
    ) -> Result<(Attempt, ReplicatedWrite), LockError> {
        let lease = match lease {
            Some(lease) => lease,
            None => self.piece(Part::Lease, "lease_get", &[]).await?,
        };
        let holder = self.piece(Part::Holder, "holder_get", &[]).await;
        let left = lease
            .pttl
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Duration::from_millis);
        let found = HoldersAndWaiters {
            held: lease.pttl.is_some_and(|ms| ms != -2),
            left,
            holder: holder.ok().and_then(|found| found.holder),
            waiting: line.waiting,
            holding: 0,
        };
        let written = Self::written(&lease, started);
        let place = self.keep_place(ttl).await;
        if waits && place? == Place::Kept {
            let first = line
                .first
                .as_ref()
                .is_some_and(|first| first.id == self.token.as_str());
            let retry = if first { left } else { None };
            return Ok((Attempt::Queued { found, retry }, written));
        }
        Ok((Attempt::Busy(found), written))
    }

    /// The next fencing token and the holder record, for a lease just taken.
    async fn grant_one_key(&mut self, ttl: &str, requester: &Requester) -> Result<u64, LockError> {
        let next = self.piece(Part::Fence, "fence_next", &[]).await?;
        let fence = next.fence.unwrap_or_default();
        let (pid, shown) = (requester.pid.to_string(), fence.to_string());
        let record = [
            requester.host.as_str(),
            &pid,
            &requester.command,
            &shown,
            ttl,
        ];
        self.piece(Part::Holder, "holder_set", &record).await?;
        Ok(fence)
    }
}

// The line, one key at a time: a waiting run keeps its place, a run that
// does not wait does not overtake the ones that do, and a release hands the
// lock to the first of them.

/// How many of the line's first ids are read: a waiter whose place ran out
/// stays in line until a script that names all the lock's keys drops it,
/// once the slot settled, and one read skips that many.
const FRONT: &str = "4";

/// The first run in line whose place is still live.
struct First {
    /// Its id, which is its lock token.
    id: String,
    waiter: Waiter,
}

/// What `keep_place` found of this run's place in line.
#[derive(PartialEq, Eq)]
enum Place {
    /// Refreshed: the run keeps it.
    Kept,
    /// It has none: it never took one, or its time ran out.
    Gone,
}

/// The line as a migration leaves it readable.
struct Line {
    first: Option<First>,
    /// How many runs are in it, live or not.
    waiting: u64,
}

impl Server {
    /// Reads the front of the line: the queue, then the first places and
    /// their records, each a call of its own.
    async fn line(&mut self) -> Result<Line, LockError> {
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
    /// that it needs.
    async fn keep_place(&mut self, ttl_ms: &str) -> Result<Place, LockError> {
        let token = self.token.as_str().to_owned();
        let place = self
            .piece(Part::Places, "place_refresh", &[&token, ttl_ms])
            .await?;
        if place.kind != "refreshed" {
            return Ok(Place::Gone);
        }
        for part in [Part::Queue, Part::Waiters] {
            self.piece(part, "line_keep", &[ttl_ms]).await?;
        }
        Ok(Place::Kept)
    }

    /// Takes the run `id` out of line once it holds the lock, in the
    /// order of queue.lua's `forget`, so that nothing of it outlasts the
    /// migration: a call per key here, for the keys may be on two nodes.
    /// Only tidies: a place left behind is skipped once its time runs out.
    /// The record goes only after the others, for a run without one is
    /// taken to be in none of the line's keys.
    async fn leave_line(&mut self, id: &str) {
        let mut left = true;
        for part in [Part::Queue, Part::Places, Part::Supersedable] {
            left &= self.piece(part, "line_leave", &[id]).await.is_ok();
        }
        if left {
            let _ = self.piece(Part::Waiters, "line_leave", &[id]).await;
        }
    }

    /// Hands the lease this run holds with fencing token `fence` to
    /// `first`, whose id is its token, with a new fencing token, told on
    /// its channel in the same call. The holder record goes first and
    /// only informs. Whether `first` still lives cannot be asked here:
    /// its subscription may be on the other node. A dead one holds the
    /// lock up for its ttl, as a waiter that died while first in line does.
    async fn pass_to(&mut self, first: &First, fence: u64) -> Result<Released, LockError> {
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
        let lease = self
            .piece(
                Part::Lease,
                "lease_pass",
                &[&token, &first.id, &ttl, &handed],
            )
            .await?;
        if lease.kind != "passed" {
            return Ok(Released::NotOurs);
        }
        self.leave_line(&first.id).await;
        Ok(Released::Deleted)
    }
}
