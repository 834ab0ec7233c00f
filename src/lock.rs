//! The Redis lock protocol: acquire, renew, release, and the operator's
//! status and force-release, each one atomic Lua script that touches the key
//! only while it still holds the caller's token.
//!
//! Runs that wait form a queue per lock, served first come, first served: a
//! release hands the lease straight to the first waiter and tells that waiter
//! alone, on its own channel. The queue's rules live in `lock/queue.lua`,
//! which every script that touches the queue starts with.
//!
//! Keys for lock NAME under prefix P all share the hash tag `{NAME}`, so they
//! live in one cluster slot and one script can touch them together:
//!
//! | key                    | holds                                         |
//! |------------------------|-----------------------------------------------|
//! | `P{NAME}`              | the lease: our random token, with the ttl     |
//! | `P{NAME}:holder`       | who holds it (host, pid, command, since, fence) |
//! | `P{NAME}:fence`        | the last fencing token handed out (no expiry) |
//! | `P{NAME}:queue`        | waiting runs' tokens, scored by arrival       |
//! | `P{NAME}:places`       | the same tokens, scored by when their place runs out |
//! | `P{NAME}:waiters`      | each waiting run's record (JSON)              |
//! | `P{NAME}:supersedable` | waiting runs that gave `--supersede`          |
//! | `P{NAME}:wake:TOKEN`   | pub/sub channel (not a key) of one waiting run |
//!
//! Every script but renew's starts with `lock/guard.lua`: it stops before
//! touching anything while one of these keys holds another type than lockrun
//! keeps there (someone else's data), and the caller gets `Foreign`.
//!
//! With replica acknowledgement (`ReplicaAcks`), the acquire and renew scripts
//! also report how many replicas are connected, and lockrun then asks the
//! primary to `WAIT` for them: a lease only counts once enough replicas have
//! it, so that a failover cannot hand the lock to a second run. A lease that
//! a release handed over is confirmed by its new holder with one more acquire
//! call, so that the same `WAIT` covers it before its command starts.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use futures_util::StreamExt;
use redis::{FromRedisValue, ParsingError, Value};
use tokio::time::Instant;

use crate::clock::BootInstant;
use crate::redis_conn::{RedisError, Session, Target};

mod script;

use script::{Call, Lua, ACQUIRE, FORCE_RELEASE, RAISE_FENCE, RELEASE, RENEW, STATUS, VOTE};

/// The longest command line recorded as the holder.
const MAX_COMMAND_CHARS: usize = 200;
/// How long setting up the wake-up subscription may take. Nothing is held
/// while waiting, so this need not fit any lease; past it, the waiter polls.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The Redis names belonging to one lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    /// The name given to `--key`, for the operator's messages; the Redis
    /// names appear only with --verbose and in `lockrun status`.
    pub(crate) name: String,
    pub(crate) lock: String,
    pub(crate) holder: String,
    pub(crate) fence: String,
    pub(crate) queue: String,
    pub(crate) places: String,
    pub(crate) waiters: String,
    pub(crate) supersedable: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let lock = format!("{prefix}{{{name}}}");
        Keys {
            holder: format!("{lock}:holder"),
            fence: format!("{lock}:fence"),
            queue: format!("{lock}:queue"),
            places: format!("{lock}:places"),
            waiters: format!("{lock}:waiters"),
            supersedable: format!("{lock}:supersedable"),
            lock,
            name: name.to_owned(),
        }
    }

    /// The channel on which the run with `token` is told, while it waits,
    /// that the lock is its own, that it is first in line, or that it was
    /// superseded.
    fn wake_channel(&self, token: &Token) -> String {
        format!("{}:wake:{}", self.lock, token.0)
    }

    /// Every key of the lock, in the order `lock/queue.lua` expects them.
    fn add_to(&self, call: &mut Call) {
        for key in [
            &self.lock,
            &self.holder,
            &self.fence,
            &self.queue,
            &self.places,
            &self.waiters,
            &self.supersedable,
        ] {
            call.key(key);
        }
    }
}

/// 128 bits from the OS CSPRNG, as hex: unique per acquisition and
/// unguessable, so no other run can renew or release our lease by accident.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Token(String);

impl Token {
    pub(crate) fn generate() -> std::io::Result<Self> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|err| match err.raw_os_error() {
            Some(errno) => std::io::Error::from_raw_os_error(errno),
            None => std::io::Error::other(err.to_string()),
        })?;
        let hex = bytes
            .iter()
            .fold(String::with_capacity(32), |mut hex, byte| {
                let _ = write!(hex, "{byte:02x}");
                hex
            });
        Ok(Token(hex))
    }
}

/// Who is asking for the lock, as recorded next to it.
#[derive(Clone, Debug)]
pub(crate) struct Me {
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) command: String,
}

impl Me {
    pub(crate) fn new(command: &[std::ffi::OsString]) -> Self {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "unknown".into());
        let mut line = command
            .iter()
            .map(|arg| arg.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        if line.chars().count() > MAX_COMMAND_CHARS {
            line = line.chars().take(MAX_COMMAND_CHARS - 3).collect::<String>() + "...";
        }
        Me {
            host,
            pid: std::process::id(),
            command: line,
        }
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
}

impl Holder {
    fn from_fields(fields: &[String]) -> Option<Holder> {
        let map: HashMap<String, String> = fields
            .chunks_exact(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect();
        if map.is_empty() {
            return None;
        }
        let number = |name: &str| map.get(name).and_then(|v| v.parse().ok()).unwrap_or(0);
        Some(Holder {
            host: map.get("host").cloned().unwrap_or_default(),
            pid: number("pid").try_into().unwrap_or(0),
            command: map.get("command").cloned().unwrap_or_default(),
            acquired_us: number("acquired_us"),
            fence: number("fence"),
            finished_us: map.get("finished_us").and_then(|v| v.parse().ok()),
        })
    }
}

/// One of a lock's keys holds another type than lockrun keeps there (a list
/// where the lease should be, say): someone else's data, which lockrun
/// neither takes for a lock nor touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Foreign {
    /// The Redis key.
    pub(crate) key: String,
    /// The Redis type it holds: "list", "set", "zset", "hash", "stream"...
    pub(crate) holds: String,
    /// What lockrun keeps under that key.
    pub(crate) part: Part,
}

/// The keys of a lock, by what lockrun keeps in them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    Lease,
    Holder,
    Fence,
    /// The waiting runs in arrival order.
    Queue,
    /// When each waiting run's place runs out.
    Places,
    /// Each waiting run's record.
    Waiters,
    /// The waiting runs that gave `--supersede`.
    Supersedable,
}

/// The reply of a script behind `lock/guard.lua`: its own reply `T`, or the
/// key that stopped it.
struct Guarded<T>(Result<T, (String, String)>);

impl<T: FromRedisValue> FromRedisValue for Guarded<T> {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        if let Value::Array(items) = &value {
            if let [Value::BulkString(tag), key, holds] = items.as_slice() {
                if tag.as_slice() == b"wrongtype" {
                    let key = String::from_redis_value_ref(key)?;
                    let holds = String::from_redis_value_ref(holds)?;
                    return Ok(Guarded(Err((key, holds))));
                }
            }
        }
        T::from_redis_value(value).map(|reply| Guarded(Ok(reply)))
    }
}

impl Keys {
    /// The guard's reply as the key it names, with what lockrun keeps there.
    fn foreign<T>(&self, reply: Guarded<T>) -> Result<T, Foreign> {
        reply.0.map_err(|(key, holds)| {
            let part = [
                (&self.holder, Part::Holder),
                (&self.fence, Part::Fence),
                (&self.queue, Part::Queue),
                (&self.places, Part::Places),
                (&self.waiters, Part::Waiters),
                (&self.supersedable, Part::Supersedable),
            ]
            .into_iter()
            .find_map(|(name, part)| (*name == key).then_some(part))
            .unwrap_or(Part::Lease);
            Foreign { key, holds, part }
        })
    }
}

/// How many replicas must have a write before lockrun counts it done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplicaAcks {
    /// This many; 0 does not wait at all.
    Count(u32),
    /// Every replica connected to the primary when the script ran, counted
    /// by the script itself: after a failover the new primary may have
    /// fewer, and a renewal there must still succeed.
    All,
}

/// A granted lease.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grant {
    /// The fencing token handed to the command.
    pub(crate) fence: u64,
    /// A moment no later than the grant, on this host's clock: the lease is
    /// counted from here. For a lease this run's own request took, that
    /// request's send.
    pub(crate) sent: BootInstant,
}

/// How an acquisition attempt treats the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Take the lock if it is free and nobody waits for it; never queue.
    Once,
    /// Take the lock, or a place in line (or refresh the one this run has).
    Wait {
        /// Whether this run listens on its wake-up channel: a release skips
        /// a waiter that said so but whose connection is gone (it died).
        listening: bool,
        /// `--supersede`: take the place of older waiters that gave it too.
        supersede: bool,
        /// How often this run refreshes its place (and so looks again).
        refresh: Duration,
    },
}

/// Who has the lock, and who waits for it, when an attempt did not get it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Taken {
    /// Whether a lease exists: a free lock is busy too while others wait.
    pub(crate) held: bool,
    /// Lease time the holder has left, if the key has an expiry.
    pub(crate) left: Option<Duration>,
    pub(crate) holder: Option<Holder>,
    /// Runs waiting in line (this one included once it has a place).
    pub(crate) waiting: u64,
}

/// What one acquisition attempt found.
#[derive(Debug)]
pub(crate) enum Attempt {
    Acquired(Grant),
    /// Not acquired, and not in line (`Mode::Once`).
    Busy(Taken),
    /// In line.
    Queued {
        taken: Taken,
        /// How long until a change could come without a message: the
        /// lease's expiry when this run is first, or else the first
        /// waiter's place running out.
        retry: Option<Duration>,
    },
    /// A newer run with `--supersede` took this run's place.
    Superseded {
        /// "HOST pid N" of that run.
        by: String,
    },
    /// Nothing was taken or changed: a key is not lockrun's.
    Foreign(Foreign),
}

/// A quorum member's answer to one acquisition attempt.
#[derive(Debug)]
pub(crate) enum Vote {
    /// Granted, with this member's own next fencing token.
    Yes(u64),
    Busy(Taken),
    /// Up for only this many seconds: too recently restarted to vote.
    Restarted(u64),
    Foreign(Foreign),
}

/// What a release did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Released {
    Deleted,
    /// Kept until the minimum hold time is over.
    Kept,
    /// The key no longer held our token: it expired or was taken over.
    NotOurs,
}

/// One acquisition's handle on the lock.
pub(crate) struct Lock {
    session: Session,
    keys: Keys,
    /// Also this run's id in the queue: a lease handed over to it is then
    /// already its own.
    token: Token,
    acks: ReplicaAcks,
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
}

pub(crate) fn millis(d: Duration) -> u64 {
    // Redis expiries are whole milliseconds; round up so a sub-millisecond
    // remainder is not turned into "no expiry".
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// A pttl or a wait as the scripts return it: negative means none.
fn some_millis(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// Element `at` of a script's reply, if it has that type.
fn element<T: FromRedisValue>(reply: &[Value], at: usize) -> Option<T> {
    reply
        .get(at)
        .and_then(|value| T::from_redis_value_ref(value).ok())
}

impl Lock {
    /// A handle on lock `keys` at `target`; every call is limited to
    /// `timeout`, replica acknowledgement included. Nothing is sent yet.
    pub(crate) fn new(
        target: Target,
        timeout: Duration,
        keys: Keys,
        token: Token,
        acks: ReplicaAcks,
    ) -> Self {
        Lock {
            session: Session::new(target, timeout),
            keys,
            token,
            acks,
            first_sent: None,
            in_redis: false,
            arrival: None,
        }
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Connects now, allowing `within` for it, so that an unreachable server
    /// is reported before anything else happens.
    pub(crate) async fn connect(&mut self, within: Duration) -> Result<(), RedisError> {
        self.session.open_within(within).await
    }

    /// Subscribes to this run's wake-up channel on a connection of its own,
    /// to the server that publishes it (behind Sentinel, the primary; in a
    /// cluster, any node).
    pub(crate) async fn subscribe_wakes(&mut self) -> Result<Wakes, RedisError> {
        let channel = self.keys.wake_channel(&self.token);
        let pubsub = self.session.subscribe(&channel, SUBSCRIBE_TIMEOUT).await?;
        Ok(Wakes(pubsub.into_on_message()))
    }

    /// The acquire script's call, its arguments filled in.
    fn acquire_call(&self, lua: &'static Lua, ttl: Duration, me: &Me, mode: Mode) -> Call {
        let (how, listening, supersede, refresh) = match mode {
            Mode::Once => ("once", false, false, Duration::ZERO),
            Mode::Wait {
                listening,
                supersede,
                refresh,
            } => ("wait", listening, supersede, refresh),
        };
        let mut call = lua.call();
        self.keys.add_to(&mut call);
        call.arg(&self.token.0)
            .arg(millis(ttl))
            .arg(&me.host)
            .arg(me.pid)
            .arg(&me.command)
            .arg(how)
            .arg(self.arrival.as_deref().unwrap_or(""))
            .arg(u8::from(listening))
            .arg(u8::from(supersede))
            .arg(millis(refresh));
        call
    }

    pub(crate) async fn try_acquire(
        &mut self,
        ttl: Duration,
        me: &Me,
        mode: Mode,
    ) -> Result<Attempt, RedisError> {
        let call = self.acquire_call(&ACQUIRE, ttl, me, mode);
        let sent = BootInstant::now();
        let started = Instant::now();
        self.first_sent.get_or_insert(sent);
        let before = std::mem::replace(&mut self.in_redis, true);
        let reply = self.session.invoke(&call).await?;
        let reply: Vec<Value> = match self.keys.foreign(reply) {
            Ok(reply) => reply,
            Err(foreign) => {
                // The script stopped before touching anything.
                self.in_redis = before;
                return Ok(Attempt::Foreign(foreign));
            }
        };
        let attempt = self.attempt_from(&reply, sent)?;
        self.in_redis = !matches!(attempt, Attempt::Busy(_) | Attempt::Superseded { .. });
        if matches!(attempt, Attempt::Acquired(_)) {
            let replicas = element(&reply, 2)
                .ok_or_else(|| self.protocol("acquire", &format!("{reply:?}")))?;
            if let Err(err) = self.replicated(replicas, started).await {
                // Too few copies: a failover now could hand the lock to a
                // second run while the command runs. Give it back and let
                // the caller treat Redis as unavailable (a waiter keeps its
                // place: its next attempt asks for it back).
                let _ = self.release(None).await;
                return Err(err);
            }
        }
        Ok(attempt)
    }

    fn attempt_from(&mut self, reply: &[Value], sent: BootInstant) -> Result<Attempt, RedisError> {
        let kind: String = element(reply, 0).unwrap_or_default();
        let taken = || {
            let pttl: i64 = element(reply, 1)?;
            let fields: Vec<String> = element(reply, 3)?;
            Some(Taken {
                held: pttl != -2,
                left: some_millis(pttl),
                holder: Holder::from_fields(&fields),
                waiting: element(reply, 2)?,
            })
        };
        let attempt = match kind.as_str() {
            "acquired" => element(reply, 1).map(|fence| Attempt::Acquired(Grant { fence, sent })),
            "busy" => taken().map(Attempt::Busy),
            "queued" => taken()
                .zip(element::<String>(reply, 4))
                .map(|(taken, arrival)| {
                    self.arrival = Some(arrival);
                    Attempt::Queued {
                        taken,
                        retry: element(reply, 5).and_then(some_millis),
                    }
                }),
            "superseded" => element(reply, 1).map(|by| Attempt::Superseded { by }),
            _ => None,
        };
        attempt.ok_or_else(|| self.protocol("acquire", &format!("{reply:?}")))
    }

    /// The grant a wake-up message announced: the release that sent it
    /// handed this run the lease with fencing token `fence`. The lease is
    /// counted from this run's first request, which the hand-over followed.
    /// `None` when replicas must acknowledge the lease first: then the next
    /// acquire call confirms it (the script finds it is ours already) and
    /// waits for them, as for a lease this run took itself.
    pub(crate) fn handed_over(&self, fence: u64) -> Option<Grant> {
        if self.acks != ReplicaAcks::Count(0) {
            return None;
        }
        self.first_sent.map(|sent| Grant { fence, sent })
    }

    /// One quorum member's vote on an acquisition: a queue-less attempt
    /// that a member up for less than `min_uptime` refuses. A member that
    /// votes yes returns its own next fencing token.
    pub(crate) async fn vote(
        &mut self,
        ttl: Duration,
        me: &Me,
        min_uptime: Duration,
    ) -> Result<Vote, RedisError> {
        let mut call = self.acquire_call(&VOTE, ttl, me, Mode::Once);
        let seconds = min_uptime.as_secs() + u64::from(min_uptime.subsec_nanos() > 0);
        call.arg(seconds);
        let started = Instant::now();
        // A call whose reply never came may have taken the lease.
        self.in_redis = true;
        let reply = self.session.invoke(&call).await?;
        let reply: Vec<Value> = match self.keys.foreign(reply) {
            Ok(reply) => reply,
            Err(foreign) => {
                self.in_redis = false;
                return Ok(Vote::Foreign(foreign));
            }
        };
        if element::<String>(&reply, 0).as_deref() == Some("restarted") {
            self.in_redis = false;
            return Ok(Vote::Restarted(element(&reply, 1).unwrap_or(0)));
        }
        match self.attempt_from(&reply, BootInstant::now())? {
            Attempt::Acquired(grant) => {
                let replicas = element(&reply, 2)
                    .ok_or_else(|| self.protocol("acquire", &format!("{reply:?}")))?;
                self.replicated(replicas, started).await?;
                Ok(Vote::Yes(grant.fence))
            }
            Attempt::Busy(taken) => {
                self.in_redis = false;
                Ok(Vote::Busy(taken))
            }
            _ => Err(self.protocol("acquire", &format!("{reply:?}"))),
        }
    }

    /// Raises this member's fence counter to at least `to`, the token a
    /// quorum run takes. `Ok(false)` when a key is not lockrun's.
    pub(crate) async fn raise_fence(&mut self, to: u64) -> Result<bool, RedisError> {
        let mut call = RAISE_FENCE.call();
        self.keys.add_to(&mut call);
        call.arg(&self.token.0).arg(to);
        let reply: Guarded<u64> = self.session.invoke(&call).await?;
        Ok(reply.0.is_ok())
    }

    /// Where this handle's server is, for messages.
    pub(crate) fn target(&self) -> &Target {
        self.session.target()
    }

    /// Gives back what an interrupted, failed or given-up acquisition may
    /// have left in Redis: a lease taken after all (a call that timed out, a
    /// signal in mid-call, a hand-over nobody heard), a place in line. When
    /// nothing can be there, Redis is not asked: with Redis unreachable, that
    /// would only add one more timeout to the failure.
    pub(crate) async fn abandon(&mut self) -> Result<(), RedisError> {
        if self.in_redis {
            self.release(None).await?;
        }
        Ok(())
    }

    /// Extends the lease to `ttl` from now. `Ok(false)` means the token is
    /// gone: the lease expired or someone removed or took the lock.
    /// With replica acknowledgement, a renewal that too few replicas
    /// acknowledged is an error, like one Redis never answered.
    pub(crate) async fn renew(&mut self, ttl: Duration) -> Result<bool, RedisError> {
        let mut call = RENEW.call();
        call.key(&self.keys.lock)
            .key(&self.keys.holder)
            .arg(&self.token.0)
            .arg(millis(ttl));
        let started = Instant::now();
        let (renewed, replicas): (i64, i64) = self.session.invoke(&call).await?;
        if renewed != 1 {
            return Ok(false);
        }
        self.replicated(replicas, started).await?;
        Ok(true)
    }

    /// Waits until as many replicas as asked for have the last write, within
    /// the time limit of the call that began at `started`. `connected` is
    /// the primary's count of replicas, read by the script that wrote.
    async fn replicated(&mut self, connected: i64, started: Instant) -> Result<(), RedisError> {
        let wanted = match self.acks {
            ReplicaAcks::Count(wanted) => wanted,
            ReplicaAcks::All => u32::try_from(connected).unwrap_or(0),
        };
        if wanted == 0 {
            return Ok(());
        }
        let acked = self
            .session
            .replicate(&self.keys.lock, wanted, started)
            .await?;
        if acked < wanted {
            return Err(self.session.unacknowledged(acked, wanted));
        }
        Ok(())
    }

    /// Gives the lock up, handing it to the first waiter, or with `keep_for`
    /// leaves it to expire after that long. Never touches a lock that no
    /// longer holds our token. Leaves the queue too.
    pub(crate) async fn release(
        &mut self,
        keep_for: Option<Duration>,
    ) -> Result<Released, RedisError> {
        let mut call = RELEASE.call();
        self.keys.add_to(&mut call);
        call.arg(&self.token.0).arg(keep_for.map_or(0, millis));
        let result: i64 = self.session.invoke(&call).await?;
        self.in_redis = false;
        Ok(match result {
            1 => Released::Deleted,
            2 => Released::Kept,
            _ => Released::NotOurs,
        })
    }

    fn protocol(&self, what: &str, detail: &str) -> RedisError {
        self.session
            .target()
            .unexpected_reply(&format!("to the {what} script: {detail}"))
    }
}

/// What a waiting run is told on its wake-up channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A release handed this run the lease, with this fencing token.
    Granted(u64),
    /// This run is first in line now, and the lease it waits for has this
    /// long left (`None`: no expiry; zero: free now).
    First(Option<Duration>),
    /// A newer run with `--supersede` took this run's place ("HOST pid N").
    Superseded(String),
}

impl Wake {
    fn parse(payload: &str) -> Wake {
        // Anything unexpected only means "look now": the next attempt
        // finds out what happened.
        let now = Wake::First(Some(Duration::ZERO));
        match payload.split_once(' ') {
            Some(("granted", fence)) => fence.parse().map_or(now, Wake::Granted),
            Some(("first", pttl)) => match pttl.parse::<i64>() {
                Ok(-1) => Wake::First(None),
                Ok(ms) => Wake::First(Some(some_millis(ms).unwrap_or_default())),
                Err(_) => now,
            },
            Some(("superseded", by)) => Wake::Superseded(by.to_owned()),
            _ => now,
        }
    }
}

/// The wake-up messages of one waiting run.
pub(crate) struct Wakes(redis::aio::PubSubStream);

impl Wakes {
    /// Waits for the next message. `None` means the subscription broke and
    /// no more messages will come.
    pub(crate) async fn next(&mut self) -> Option<Wake> {
        let message = self.0.next().await?;
        Some(Wake::parse(
            &message.get_payload::<String>().unwrap_or_default(),
        ))
    }
}

/// A lock's state, as `lockrun status` shows it.
#[derive(Debug)]
pub(crate) struct Status {
    pub(crate) occupancy: Occupancy,
    pub(crate) holder: Option<Holder>,
    /// Server time, microseconds since the epoch.
    pub(crate) now_us: u64,
    /// The server that answered (`host:port` or a socket path), when known.
    pub(crate) node: Option<String>,
    /// The last fencing token handed out for this name, if any.
    pub(crate) last_fence: Option<u64>,
    /// The runs waiting in line, first come first.
    pub(crate) waiters: Vec<Waiter>,
}

/// A run waiting in line, as recorded when it took its place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Waiter {
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) command: String,
    /// Server time it took its place, microseconds since the epoch.
    pub(crate) arrived_us: u64,
    /// Whether it gave `--supersede`.
    pub(crate) supersede: bool,
}

/// A waiter's record as `lock/acquire.lua` writes it.
#[derive(serde::Deserialize)]
struct WaiterRecord {
    #[serde(default)]
    host: String,
    #[serde(default)]
    pid: String,
    #[serde(default)]
    command: String,
    #[serde(default)]
    supersede: bool,
}

impl Waiter {
    fn from_record(arrival: &str, record: &str) -> Waiter {
        // A record this version cannot read still counts as a waiter.
        let record = serde_json::from_str(record).unwrap_or(WaiterRecord {
            host: String::new(),
            pid: String::new(),
            command: String::new(),
            supersede: false,
        });
        Waiter {
            host: record.host,
            pid: record.pid.parse().unwrap_or(0),
            command: record.command,
            arrived_us: arrival.parse().unwrap_or(0),
            supersede: record.supersede,
        }
    }
}

/// Whether a lock is held, and for how much longer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Occupancy {
    Free,
    /// Held, with this much lease time left.
    Leased(Duration),
    /// Held by a key without an expiry (set by hand).
    NoExpiry,
}

/// The operator's handle on a lock: look at it, or remove it whoever holds it.
pub(crate) struct Inspector {
    session: Session,
    keys: Keys,
}

impl Inspector {
    pub(crate) fn new(target: Target, timeout: Duration, keys: Keys) -> Self {
        Inspector {
            session: Session::new(target, timeout),
            keys,
        }
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The lock's state; `Ok(Err(_))` when one of its keys is not lockrun's.
    pub(crate) async fn status(&mut self) -> Result<Result<Status, Foreign>, RedisError> {
        let mut call = STATUS.call();
        self.keys.add_to(&mut call);
        let reply = self.session.invoke(&call).await?;
        let (pttl, fields, now_us, fence, line): (i64, Vec<String>, u64, String, Vec<String>) =
            match self.keys.foreign(reply) {
                Ok(reply) => reply,
                Err(foreign) => return Ok(Err(foreign)),
            };
        let occupancy = match pttl {
            -2 => Occupancy::Free,
            -1 => Occupancy::NoExpiry,
            ms => Occupancy::Leased(some_millis(ms).unwrap_or_default()),
        };
        let node = self.session.node_for(&self.keys.lock).await;
        Ok(Ok(Status {
            node,
            holder: (occupancy != Occupancy::Free)
                .then(|| Holder::from_fields(&fields))
                .flatten(),
            occupancy,
            now_us,
            last_fence: fence.parse().ok(),
            waiters: line
                .chunks_exact(2)
                .map(|pair| Waiter::from_record(&pair[0], &pair[1]))
                .collect(),
        }))
    }

    /// Removes the lock whoever holds it, handing it to the first waiter.
    /// Returns the removed holder record, `Ok(Ok(None))` when there was no
    /// lock, and `Ok(Err(_))`, having removed nothing, when one of its keys
    /// is not lockrun's.
    pub(crate) async fn force_release(
        &mut self,
    ) -> Result<Result<Option<Holder>, Foreign>, RedisError> {
        let mut call = FORCE_RELEASE.call();
        self.keys.add_to(&mut call);
        let reply = self.session.invoke(&call).await?;
        Ok(self
            .keys
            .foreign(reply)
            .map(|(removed, fields): (i64, Vec<String>)| {
                (removed == 1).then(|| Holder::from_fields(&fields).unwrap_or_default())
            }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = Keys::new("lockrun:", "billing");
        assert_eq!(keys.lock, "lockrun:{billing}");
        assert_eq!(keys.holder, "lockrun:{billing}:holder");
        assert_eq!(keys.fence, "lockrun:{billing}:fence");
        assert_eq!(keys.queue, "lockrun:{billing}:queue");
        assert_eq!(keys.supersedable, "lockrun:{billing}:supersedable");
    }

    #[test]
    fn tokens_are_128_random_bits() {
        let a = Token::generate().expect("OS randomness");
        let b = Token::generate().expect("OS randomness");
        assert_eq!(a.0.len(), 32);
        assert!(a != b);
    }

    #[test]
    fn long_commands_are_truncated() {
        let long = vec![std::ffi::OsString::from("x".repeat(500))];
        let me = Me::new(&long);
        assert_eq!(me.command.chars().count(), MAX_COMMAND_CHARS);
        assert!(me.command.ends_with("..."));
    }

    #[test]
    fn holder_parses_from_hash_fields() {
        let fields = [
            "host",
            "h1",
            "pid",
            "42",
            "command",
            "job",
            "acquired_us",
            "7",
            "fence",
            "9",
        ];
        let holder = Holder::from_fields(&fields.map(String::from));
        assert_eq!(
            holder,
            Some(Holder {
                host: "h1".into(),
                pid: 42,
                command: "job".into(),
                acquired_us: 7,
                fence: 9,
                finished_us: None,
            })
        );
        assert_eq!(Holder::from_fields(&[]), None);
    }

    #[test]
    fn wake_messages_parse_and_anything_else_means_look_now() {
        assert_eq!(
            Wake::parse("granted 1732924800123456"),
            Wake::Granted(1_732_924_800_123_456)
        );
        assert_eq!(
            Wake::parse("first 1500"),
            Wake::First(Some(Duration::from_millis(1500)))
        );
        assert_eq!(Wake::parse("first -1"), Wake::First(None));
        assert_eq!(Wake::parse("first -2"), Wake::First(Some(Duration::ZERO)));
        assert_eq!(
            Wake::parse("superseded ci-7 pid 42"),
            Wake::Superseded("ci-7 pid 42".into())
        );
        for odd in ["", "granted x", "released", "first soon"] {
            assert_eq!(
                Wake::parse(odd),
                Wake::First(Some(Duration::ZERO)),
                "{odd:?}"
            );
        }
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
            }
        );
        assert_eq!(Waiter::from_record("1", "not json").arrived_us, 1);
    }

    #[test]
    fn a_guarded_reply_names_the_key_of_the_wrong_type() {
        let keys = Keys::new("lockrun:", "job");
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let stopped = |key: &str| {
            let reply = Value::Array(vec![bulk("wrongtype"), bulk(key), bulk("list")]);
            keys.foreign(Guarded::<i64>::from_redis_value(reply).expect("a guard reply"))
        };
        assert_eq!(
            stopped(&keys.holder),
            Err(Foreign {
                key: "lockrun:{job}:holder".into(),
                holds: "list".into(),
                part: Part::Holder,
            })
        );
        for (key, part) in [
            (&keys.lock, Part::Lease),
            (&keys.fence, Part::Fence),
            (&keys.queue, Part::Queue),
            (&keys.places, Part::Places),
            (&keys.waiters, Part::Waiters),
            (&keys.supersedable, Part::Supersedable),
        ] {
            assert_eq!(stopped(key).map_err(|foreign| foreign.part), Err(part));
        }
        let done = Guarded::<i64>::from_redis_value(Value::Int(1)).expect("a plain reply");
        assert_eq!(keys.foreign(done), Ok(1));
    }

    #[test]
    fn expiries_round_up_to_whole_milliseconds() {
        assert_eq!(millis(Duration::from_micros(1500)), 2);
        assert_eq!(millis(Duration::from_nanos(1)), 1);
        assert_eq!(millis(Duration::from_secs(30)), 30_000);
    }
}
