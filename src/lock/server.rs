//! One server's part in a lock: the scripts sent to it, what this run may
//! have left there, waiting for its replicas, and a waiting run's wake-up
//! subscription. A lock on one server has one of these; a quorum has one
//! per member (`lock.rs` asks them all). The same operations one key at a
//! time, while the lock's cluster slot is being migrated, are `one_key`'s.

mod one_key;

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::oneshot;
use tokio::time::Instant;

use self::one_key::OneKey;
use super::error::{Foreign, LockError};
use super::history::ToRecord;
use super::keys::{Keys, Token};
use super::records::Requester;
use super::scripts::{
    AckedArgs, Acquire, AcquireArgs, Call, ForceRelease, ForceReleaseArgs, Guarded, RaiseFenceArgs,
    Raised, ReleaseArgs, Released, RenewArgs, RenewTogetherArgs, Reply, StatusArgs,
};
use super::status::Status;
use super::wake::{SubscriptionRefused, Wakes};
use super::{Attempt, Grant, Holding, Mode, Removed, Renewal, ReplicaAcks, Role};
use crate::clock::{whole_up, BootInstant, MS, SECOND};
use crate::lease::Timing;
use crate::redis_conn::{ErrorKind, RedisError, Request, Scripts, Session, Target};

/// How long setting up the wake-up subscription may take. Nothing is held
/// while waiting, so this need not fit any lease; past it, the waiter polls.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One server's handle on a lock, for one run.
pub(crate) struct Server {
    session: Session,
    keys: Keys,
    /// Also this run's id in the queue: a lease handed over to it is then
    /// already its own.
    token: Token,
    acks: ReplicaAcks,
    holding: Holding,
    /// Fixed for the run: the lease's ttl, the renewal period a hand-over
    /// must fit, and every call's time limit.
    timing: Timing,
    /// When the first acquire request went out. A release can hand the
    /// lease over only once this run is in line, that is after this.
    first_sent: Option<BootInstant>,
    /// Whether Redis may keep something of this run's that `abandon` must
    /// give back: a lease taken by a call whose reply never came, a place in
    /// line, or the note that it was superseded.
    in_redis: bool,
    /// This run's place in line, so that it gets the same place back if it
    /// was dropped while cut off from Redis.
    arrival: Option<String>,
    /// The fencing token of the lease this run holds: while the lock's slot
    /// is being migrated, it tells this run's holder record from another's
    /// (`one_key.rs`).
    fence: Option<u64>,
    /// How many replicas acknowledged the lease at the last acquisition or
    /// renewal that asked them, as noted in the holder record; `None` when
    /// none asked yet.
    acked: Option<u32>,
    /// Whether the server did not know WAIT when last asked.
    lacks_wait: bool,
    /// Where this run's wake-up messages come from.
    listening: Listening,
    /// The server's refusal to let this run tell the runs in line that it
    /// gave the lock up, when its release was otherwise done.
    unheard: Option<RedisError>,
}

/// A write that replicas may have to acknowledge: how many the node that
/// took it had online, that node's cluster id (`None`: the node owning the
/// lock's slot), and when the call began, which bounds the wait.
struct ReplicatedWrite {
    replicas: i64,
    node: Option<String>,
    started: Instant,
}

/// Where this run's wake-up subscription is.
#[derive(Default)]
struct Listening {
    /// The id of the cluster node it is on; `None` outside a cluster.
    node: Option<String>,
    /// Ends the subscription's messages when dropped: the waiter then
    /// subscribes again, where the lock's slot is now.
    end: Option<oneshot::Sender<()>>,
}

impl Server {
    /// Leases last `timing.ttl`; every call is limited to its
    /// `redis_timeout`, replica acknowledgement included. With `listens`,
    /// this run's wake-up messages ride on the connection it calls on,
    /// where the topology allows. Nothing is sent yet.
    pub(super) fn new(
        target: Target,
        timing: Timing,
        keys: Keys,
        role: &Role,
        listens: bool,
    ) -> Self {
        // A run gives back what a call made as another user may have taken
        // (`first_call.rs`); the operator, whose token is empty, has nothing to
        // give back with.
        let run = !role.token.as_str().is_empty();
        Server {
            session: Session::new(target, timing.redis_timeout, listens, run),
            timing,
            keys,
            token: role.token.clone(),
            acks: role.acks,
            holding: role.holding,
            first_sent: None,
            in_redis: false,
            arrival: None,
            fence: None,
            acked: None,
            lacks_wait: false,
            listening: Listening::default(),
            unheard: None,
        }
    }

    pub(super) fn target(&self) -> &Target {
        self.session.target()
    }

    pub(super) async fn connect(&mut self, within: Duration) -> Result<(), LockError> {
        Ok(self.session.open_within(within).await?)
    }

    /// Runs a script behind `lock/scripts/guard.lua`; a key it found holding
    /// someone else's data is `LockError::Foreign`.
    async fn invoke<R: Reply>(&mut self, call: &Call<R>) -> Result<R, LockError> {
        let reply = match self.session.invoke::<Guarded<R>>(call).await {
            Ok(reply) => reply,
            Err(err) => {
                let err = err.under_prefix(self.keys.prefix());
                return Err(self.with_channels_checked(err).await.into());
            }
        };
        match reply {
            Guarded::Ran(reply) => Ok(reply),
            Guarded::Stopped { key, holds } => Err(LockError::Foreign(Foreign {
                part: self.keys.part_of(&key),
                key,
                holds,
            })),
        }
    }

    /// A refusal of the lock's keys, with the channel rule if the user
    /// lacks that too: the first command of every script is on a key, so
    /// the missing channel rule would otherwise be named only once the key
    /// rule is in place, one run later. Asked only after such a refusal.
    async fn with_channels_checked(&mut self, err: RedisError) -> RedisError {
        if !err.is_key_refusal() {
            return err;
        }
        let probe = Publish(self.keys.wake_channel("acl-check"));
        match self.session.invoke::<redis::Value>(&probe).await {
            Err(refused) if refused.is_channel_refusal() => {
                err.and_channels_refused(self.keys.prefix())
            }
            _ => err,
        }
    }

    /// The refusal that kept a release from telling the runs in line, taken
    /// once: the release itself was done.
    pub(super) fn take_unheard(&mut self) -> Option<RedisError> {
        self.unheard.take()
    }

    /// One acquisition attempt. With `min_uptime` (a quorum member), a
    /// server up for less than that does not vote.
    pub(super) async fn acquire(
        &mut self,
        requester: &Requester,
        mode: Mode,
        min_uptime: Option<Duration>,
    ) -> Result<Attempt, LockError> {
        let call = self.acquire_call(requester, mode, min_uptime);
        let sent = BootInstant::now();
        let started = Instant::now();
        self.first_sent.get_or_insert(sent);
        // A call whose reply never came may have taken the lease.
        let before = std::mem::replace(&mut self.in_redis, true);
        // The count of acknowledging replicas in the new holder record, when
        // the acquire script wrote it (acquire.lua, `acquired`).
        let mut noted = None;
        let (attempt, written) = match self.invoke(&call).await {
            Err(LockError::Foreign(foreign)) => {
                // The script stopped before touching anything.
                self.in_redis = before;
                return Err(LockError::Foreign(foreign));
            }
            Err(err) => {
                let waits = matches!(mode, Mode::Wait { .. });
                OneKey::after(err, self)?
                    .acquire(requester, sent, waits)
                    .await?
            }
            Ok(reply) => {
                noted = (self.acks == ReplicaAcks::All && !self.holding.together()).then_some(0);
                self.attempt(reply, sent, started)?
            }
        };
        self.in_redis = !matches!(
            attempt,
            Attempt::Busy(_)
                | Attempt::Superseded { .. }
                | Attempt::Done(_)
                | Attempt::Mismatch { .. }
        );
        if let Attempt::Acquired(grant) = &attempt {
            self.fence = Some(grant.fence);
            // A new holder record: the count is noted afresh, unless the
            // script wrote it, so that no call of its own notes that no
            // replica acknowledged when there is none to wait for.
            self.acked = noted;
            if let Err(err) = self.replicated(&written).await {
                // Too few copies: a failover now could hand the lock to a
                // second run while the command runs. Give it back and let
                // the caller treat Redis as unavailable (a waiter keeps its
                // place: its next attempt asks for it back).
                let _ = self.release(None, None, None).await;
                return Err(err);
            }
        }
        Ok(attempt)
    }

    /// What the acquire script's reply means for this run.
    fn attempt(
        &mut self,
        reply: Acquire,
        sent: BootInstant,
        started: Instant,
    ) -> Result<(Attempt, ReplicatedWrite), LockError> {
        let (attempt, replicas) = match reply {
            Acquire::Acquired {
                fence,
                replicas,
                slot,
            } => (Attempt::Acquired(Grant { fence, sent, slot }), replicas),
            Acquire::Busy(found) => (Attempt::Busy(found), 0),
            Acquire::Queued {
                found,
                arrival,
                retry,
                node,
            } => {
                self.arrival = Some(arrival);
                self.follow_slot(node.as_deref());
                (Attempt::Queued { found, retry }, 0)
            }
            Acquire::Superseded { by } => (Attempt::Superseded { by }, 0),
            Acquire::Done(done) => (Attempt::Done(done), 0),
            Acquire::Mismatch { slots } => (Attempt::Mismatch { slots }, 0),
            Acquire::Restarted { uptime_secs } => {
                self.in_redis = false;
                return Err(LockError::Restarted {
                    server: self.target().to_string(),
                    uptime_secs,
                });
            }
        };
        let written = ReplicatedWrite {
            replicas,
            node: None,
            started,
        };
        Ok((attempt, written))
    }

    /// The acquire script's call, its arguments filled in.
    fn acquire_call(
        &self,
        requester: &Requester,
        mode: Mode,
        min_uptime: Option<Duration>,
    ) -> Call<Acquire> {
        let (waits, listening, supersede, refresh) = match mode {
            Mode::Once => (false, false, false, Duration::ZERO),
            Mode::Wait {
                listening,
                supersede,
                refresh,
            } => (true, listening, supersede, refresh),
        };
        let args = AcquireArgs {
            token: self.token.as_str(),
            ttl_ms: whole_up(self.timing.ttl, MS),
            host: &requester.host,
            pid: requester.pid,
            command: &requester.command,
            waits,
            arrival: self.arrival.as_deref().unwrap_or(""),
            listening,
            listens_on: self
                .listening
                .node
                .as_deref()
                .filter(|_| listening)
                .unwrap_or(""),
            supersede,
            refresh_ms: whole_up(refresh, MS),
            once_per: self.holding.once_per().is_some(),
            slots: self.holding.slots(),
            shared: self.holding == Holding::Shared,
            count_replicas: self.acks == ReplicaAcks::All,
            // Whole seconds, as Redis counts its uptime.
            min_uptime_s: min_uptime.map_or(0, |uptime| whole_up(uptime, SECOND)),
        };
        Call::new(&self.keys, &args)
    }

    /// The grant a wake-up message announced: the release that sent it
    /// handed this run the lease with fencing token `fence`, which is this
    /// run's from now on. The lease is counted from this run's first
    /// request, which the hand-over followed.
    ///
    /// The one place that decides whether such a lease is used as it is.
    /// It is not (`None`), and the next acquire call confirms it (the
    /// script finds it is ours already and renews it), when:
    /// - the first request went out a renewal period or more ago: the first
    ///   renewal would already be late;
    /// - replicas must acknowledge the lease: the call waits for them, as
    ///   for a lease this run took itself;
    /// - the run is `--once-per`: the call checks for the success its last
    ///   holder may just have recorded.
    pub(super) fn handed_over(&mut self, fence: u64, slot: Option<u32>) -> Option<Grant> {
        self.fence = Some(fence);
        let sent = self.first_sent?;
        let as_it_is = self.acks == ReplicaAcks::Count(0)
            && self.holding.once_per().is_none()
            && sent.elapsed() < self.timing.renew_every;
        as_it_is.then_some(Grant { fence, sent, slot })
    }

    /// Raises this server's fence counter to at least `to`.
    pub(super) async fn raise_fence(&mut self, to: u64) -> Result<(), LockError> {
        let args = RaiseFenceArgs {
            token: self.token.as_str(),
            at_least: to,
        };
        let call = Call::new(&self.keys, &args);
        self.invoke(&call).await.map(|Raised| ())
    }

    /// Extends the lease to its ttl from now. With replica acknowledgement, a
    /// renewal that too few replicas acknowledged is an error, like one
    /// Redis never answered.
    pub(super) async fn renew(&mut self) -> Result<Renewal, LockError> {
        let (token, ttl_ms) = (self.token.as_str(), whole_up(self.timing.ttl, MS));
        let call = if self.holding.together() {
            Call::new(&self.keys, &RenewTogetherArgs { token, ttl_ms })
        } else {
            Call::new(&self.keys, &RenewArgs { token, ttl_ms })
        };
        let started = Instant::now();
        let reply = match self.invoke(&call).await {
            Err(err) => return OneKey::after(err, self)?.renew().await,
            Ok(reply) => reply,
        };
        if !reply.renewed {
            return Ok(Renewal::Lost);
        }
        let written = ReplicatedWrite {
            replicas: reply.replicas,
            node: None,
            started,
        };
        self.replicated(&written).await?;
        Ok(Renewal::Extended)
    }

    /// Waits until as many replicas as asked for have the last write, within
    /// the time limit of the call that made it. `written.replicas` is the
    /// node's count of replicas, read by the script that wrote.
    async fn replicated(&mut self, written: &ReplicatedWrite) -> Result<(), LockError> {
        let wanted = match self.acks {
            ReplicaAcks::Count(0) => return Ok(()),
            ReplicaAcks::Count(wanted) => wanted,
            ReplicaAcks::All => u32::try_from(written.replicas).unwrap_or(0),
        };
        // `all` with no replica connected: nothing to wait for, and nothing
        // protects the lease from a failover; `unprotected` says so.
        let acked = if wanted == 0 {
            0
        } else {
            let replicated = self
                .session
                .replicate(
                    &self.keys.lock,
                    written.node.as_deref(),
                    wanted,
                    written.started,
                )
                .await;
            self.lacks_wait = matches!(&replicated, Err(err) if err.kind == ErrorKind::NoWait);
            match replicated {
                // `all`, the default of a replicated URL, on a server that
                // cannot count acknowledgements: like no replica connected,
                // which `unprotected` says. An explicit count fails.
                Err(_) if self.lacks_wait && self.acks == ReplicaAcks::All => 0,
                replicated => replicated?,
            }
        };
        if acked < wanted && !self.lacks_wait {
            return Err(self.session.unacknowledged(acked, wanted).into());
        }
        if self.acked != Some(acked) {
            self.note_acked(acked, written.started).await;
        }
        Ok(())
    }

    /// Notes `acked` in the holder record for `lockrun status`, within what
    /// is left of the time limit of the call that began at `started`. Only
    /// when replicas were asked and the count changed: no round trip is
    /// added otherwise. A note that fails is left out; it only informs.
    async fn note_acked(&mut self, acked: u32, started: Instant) {
        let args = AckedArgs {
            token: self.token.as_str(),
            replicas_acked: acked,
        };
        let call = Call::new(&self.keys, &args);
        self.acked = Some(acked);
        let left = self.timing.redis_timeout.saturating_sub(started.elapsed());
        let _ = tokio::time::timeout(left, self.session.invoke::<i64>(&call)).await;
    }

    /// Whether `--replica-acks all` found no replica to acknowledge the
    /// lease this run last acquired here: then nothing protects it from a
    /// failover.
    pub(super) fn unprotected(&self) -> bool {
        self.acks == ReplicaAcks::All && self.acked == Some(0)
    }

    /// Whether that was because the server does not know WAIT.
    pub(super) fn lacks_wait(&self) -> bool {
        self.lacks_wait
    }

    /// Gives the lock up, handing it to the first waiter, or with `keep_for`
    /// leaves it to expire after that long; with `done_for`, writes the done
    /// record for that period (`--once-per`). Never touches a lock that no
    /// longer holds our token. Leaves the queue too.
    pub(super) async fn release(
        &mut self,
        keep_for: Option<Duration>,
        done_for: Option<Duration>,
        record: Option<&ToRecord>,
    ) -> Result<Released, LockError> {
        let args = ReleaseArgs {
            token: self.token.as_str(),
            keep_ms: keep_for.map_or(0, |d| whole_up(d, MS)),
            period_ms: done_for.map_or(0, |d| whole_up(d, MS)),
            keep_runs: record.map_or(0, |r| r.keep),
            record: record.map_or("", |r| r.record.as_str()),
        };
        let mut call = Call::new(&self.keys, &args);
        // A cluster call follows its redirections only as a single
        // command, not in a pipeline (`cluster.rs`).
        if !self.target().is_cluster() {
            call.reply_last();
        }
        let released = match self.invoke(&call).await {
            // release.lua publishes only after it gave the lease up (or
            // kept it for `keep_for`): a refused PUBLISH ends the script
            // there, the release done, and the runs in line find the lock
            // at their next look instead of being told. (A lease no longer
            // ours is said as given up then: the script also publishes
            // after taking this run out of line, and the refusal does not
            // say which it was.)
            Err(LockError::Redis(err)) if err.is_channel_refusal() => {
                self.unheard = Some(err);
                if keep_for.is_some() {
                    Released::Kept
                } else {
                    Released::Deleted
                }
            }
            Err(err) => OneKey::after(err, self)?.release(keep_for).await?,
            Ok(released) => released,
        };
        self.in_redis = false;
        Ok(released)
    }

    /// Gives back what an interrupted, failed or given-up acquisition may
    /// have left here: a lease taken after all (a call that timed out, a
    /// signal in mid-call, a hand-over nobody heard), a place in line. When
    /// nothing can be there, Redis is not asked: with Redis unreachable, that
    /// would only add one more timeout to the failure.
    pub(super) async fn abandon(&mut self) -> Result<(), LockError> {
        if self.in_redis {
            self.release(None, None, None).await?;
        }
        Ok(())
    }

    /// The lock's state as this server sees it.
    pub(super) async fn status(&mut self) -> Result<Status, LockError> {
        let call = Call::new(&self.keys, &StatusArgs {});
        let mut status = match self.invoke(&call).await {
            Err(err) => OneKey::after(err, self)?.status().await?,
            Ok(status) => status,
        };
        status.node = self.session.node_for(&self.keys.lock).await;
        Ok(status)
    }

    /// Every key on this server matching `pattern` (`keys::scan_pattern`).
    pub(super) async fn scan(&mut self, pattern: &str) -> Result<Vec<String>, LockError> {
        Ok(self.session.scan(pattern).await?)
    }

    /// Points this handle at another lock, on the same connection. Only the
    /// operator's handle moves: it holds no token and left nothing behind.
    pub(super) fn look_at(&mut self, keys: Keys) {
        self.keys = keys;
    }

    /// Removes the lock whoever holds it (or only the holder with token
    /// `only`), handing what it frees to the first waiters.
    pub(super) async fn force_release(&mut self, only: Option<&str>) -> Result<Removed, LockError> {
        let args = ForceReleaseArgs {
            only: only.unwrap_or(""),
        };
        let call = Call::new(&self.keys, &args);
        match self.invoke(&call).await {
            Err(err) => Ok(Removed {
                holders: OneKey::after(err, self)?
                    .force_release(only)
                    .await?
                    .into_iter()
                    .collect(),
                done_cleared: false,
            }),
            Ok(ForceRelease(holders, done_cleared)) => Ok(Removed {
                holders,
                done_cleared,
            }),
        }
    }
}

/// `PUBLISH channel ""`: whether lockrun's user may publish there. Nobody
/// listens on the channel it is sent to.
struct Publish(String);

impl Request for Publish {
    async fn send(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        _scripts: &mut Scripts,
    ) -> redis::RedisResult<redis::Value> {
        redis::cmd("PUBLISH")
            .arg(&self.0)
            .arg("")
            .query_async(conn)
            .await
    }
}

// A waiting run's wake-up subscription, and in a cluster the node it is
// on: a resharding may move the lock's slot away from that node, and the
// subscription follows it (docs/design.md, "Sentinel and Cluster", wake-ups).
impl Server {
    /// Subscribes to this run's wake-up channel, on the server that
    /// publishes it (behind Sentinel, the primary; in a cluster, the node
    /// owning the lock's slot).
    pub(in crate::lock) async fn subscribe_wakes(&mut self) -> Result<Wakes, LockError> {
        let channel = self.keys.wake_channel(self.token.as_str());
        let prefix = self.keys.prefix().to_owned();
        let subscribed = self
            .session
            .subscribe(&channel, SUBSCRIBE_TIMEOUT)
            .await
            .map_err(|err| err.under_prefix(&prefix))?;
        let messages = subscribed.messages.map(move |message| {
            message.map_err(|err| SubscriptionRefused {
                by_acl: err.kind == ErrorKind::NoPerm,
                why: LockError::from(err.under_prefix(&prefix)).to_string(),
            })
        });
        let (end, ended) = oneshot::channel();
        self.listening = Listening {
            node: subscribed.node,
            end: Some(end),
        };
        Ok(Wakes::new(messages.take_until(ended)))
    }

    /// After an attempt that the cluster node `ran_on` answered: if the
    /// lock's slot left the node this run listens on, ends the
    /// subscription, so that the waiter makes it again on `ran_on` and
    /// tells Redis so. Until then its messages still reach it, but the
    /// release that hands it the lock cannot see it listen.
    fn follow_slot(&mut self, ran_on: Option<&str>) {
        if ran_on.is_some() && ran_on != self.listening.node.as_deref() {
            self.listening.end = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RENEW_EVERY: Duration = Duration::from_secs(10);

    fn server(acks: ReplicaAcks, holding: Holding) -> Server {
        let target = Target::parse("redis://127.0.0.1", None).expect("a valid URL");
        let role = Role {
            holding,
            acks,
            ..Role::operator()
        };
        let keys = Keys::new("lockrun:", "job");
        let timing = Timing {
            ttl: Duration::from_secs(30),
            renew_every: RENEW_EVERY,
            redis_timeout: Duration::from_secs(2),
            kill_grace: Duration::from_secs(5),
        };
        Server::new(target, timing, keys, &role, false)
    }

    fn handed_over(server: &mut Server, asked_ago: Duration) -> Option<Grant> {
        server.first_sent = Some(BootInstant::now() - asked_ago);
        server.handed_over(42, None)
    }

    #[test]
    fn a_lease_handed_over_is_used_as_it_is_while_in_time_for_its_first_renewal() {
        let mut alone = server(ReplicaAcks::Count(0), Holding::ALONE);
        let grant = handed_over(&mut alone, Duration::from_secs(3)).expect("usable");
        assert_eq!(grant.fence, 42);
        let mut together = server(ReplicaAcks::Count(0), Holding::Shared);
        assert!(handed_over(&mut together, Duration::from_secs(3)).is_some());
    }

    #[test]
    fn a_lease_handed_over_is_confirmed_first_when_late_replicated_or_once_per() {
        let late = Duration::from_secs(11);
        let soon = Duration::from_secs(3);
        let once_per = Holding::Alone {
            once_per: Some(Duration::from_secs(3600)),
            slot_zero: false,
        };
        for (acks, holding, asked_ago) in [
            (ReplicaAcks::Count(0), Holding::ALONE, late),
            (ReplicaAcks::Count(1), Holding::ALONE, soon),
            (ReplicaAcks::All, Holding::ALONE, soon),
            (ReplicaAcks::Count(0), once_per, soon),
        ] {
            let mut server = server(acks, holding);
            assert!(
                handed_over(&mut server, asked_ago).is_none(),
                "{acks:?} {holding:?}"
            );
            assert_eq!(
                server.fence,
                Some(42),
                "the lease is this run's all the same"
            );
        }
    }

    #[test]
    fn nothing_is_handed_over_before_the_first_request() {
        let mut server = server(ReplicaAcks::Count(0), Holding::ALONE);
        assert!(server.handed_over(42, None).is_none());
    }
}
