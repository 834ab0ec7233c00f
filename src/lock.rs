//! The Redis lock protocol: acquire, renew, release, and the operator's
//! status and force-release, each one atomic Lua script that touches the key
//! only while it still holds the caller's token.
//!
//! Keys for lock NAME under prefix P all share the hash tag `{NAME}`, so they
//! live in one cluster slot and one script can touch them together:
//!
//! | key                | holds                                             |
//! |--------------------|---------------------------------------------------|
//! | `P{NAME}`          | the lease: our random token, with the ttl         |
//! | `P{NAME}:holder`   | who holds it (host, pid, command, since, fence)   |
//! | `P{NAME}:fence`    | the last fencing token handed out (no expiry)     |
//! | `P{NAME}:released` | pub/sub channel announcing each release           |
//!
//! With replica acknowledgement (`ReplicaAcks`), the acquire and renew scripts
//! also report how many replicas are connected, and lockrun then asks the
//! primary to `WAIT` for them: a lease only counts once enough replicas have
//! it, so that a failover cannot hand the lock to a second run.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::LazyLock;
use std::time::Duration;

use futures_util::StreamExt;
use redis::{FromRedisValue, ParsingError, Script, Value};
use tokio::time::Instant;

use crate::clock::BootInstant;
use crate::redis_conn::{RedisError, Session, Target};

/// A script that reads or removes a lock, behind `lock/guard.lua`, which
/// stops it before it touches a key of the wrong type.
macro_rules! guarded {
    ($file:literal) => {
        LazyLock::new(|| Script::new(concat!(include_str!("lock/guard.lua"), include_str!($file))))
    };
}

static ACQUIRE: LazyLock<Script> = guarded!("lock/acquire.lua");
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lock/renew.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lock/release.lua")));
static FORCE_RELEASE: LazyLock<Script> = guarded!("lock/force_release.lua");
static STATUS: LazyLock<Script> = guarded!("lock/status.lua");

/// The longest command line recorded as the holder.
const MAX_COMMAND_CHARS: usize = 200;
/// How long setting up the release subscription may take. Nothing is held
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
    pub(crate) channel: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let lock = format!("{prefix}{{{name}}}");
        Keys {
            holder: format!("{lock}:holder"),
            fence: format!("{lock}:fence"),
            channel: format!("{lock}:released"),
            lock,
            name: name.to_owned(),
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
            let part = if key == self.holder {
                Part::Holder
            } else if key == self.fence {
                Part::Fence
            } else {
                Part::Lease
            };
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
    /// When the winning request was sent: the lease is counted from here.
    pub(crate) sent: BootInstant,
}

/// What one acquisition attempt found.
#[derive(Debug)]
pub(crate) enum Attempt {
    Acquired(Grant),
    Busy {
        /// Lease time the holder has left, if the key has an expiry.
        left: Option<Duration>,
        holder: Option<Holder>,
    },
    /// Nothing was taken or changed: a key is not lockrun's.
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
    token: Token,
    acks: ReplicaAcks,
    /// Whether an acquire request went out: only then can the key hold our
    /// token without lockrun having seen the reply.
    sent_acquire: bool,
}

pub(crate) fn millis(d: Duration) -> u64 {
    // Redis expiries are whole milliseconds; round up so a sub-millisecond
    // remainder is not turned into "no expiry".
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
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
            sent_acquire: false,
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

    /// Subscribes to this lock's release announcements on a connection of
    /// their own.
    pub(crate) async fn subscribe_releases(&mut self) -> Result<Releases, RedisError> {
        let pubsub = self
            .session
            .subscribe(&self.keys.channel, SUBSCRIBE_TIMEOUT)
            .await?;
        Ok(Releases(pubsub.into_on_message()))
    }

    pub(crate) async fn try_acquire(
        &mut self,
        ttl: Duration,
        me: &Me,
    ) -> Result<Attempt, RedisError> {
        let mut call = ACQUIRE.prepare_invoke();
        call.key(&self.keys.lock)
            .key(&self.keys.fence)
            .key(&self.keys.holder)
            .arg(&self.token.0)
            .arg(millis(ttl))
            .arg(&me.host)
            .arg(me.pid)
            .arg(&me.command);
        let sent = BootInstant::now();
        let started = Instant::now();
        self.sent_acquire = true;
        let reply = self.session.invoke(&call).await?;
        let (won, number, fields, replicas): (i64, i64, Vec<String>, i64) =
            match self.keys.foreign(reply) {
                Ok(reply) => reply,
                Err(foreign) => return Ok(Attempt::Foreign(foreign)),
            };
        if won == 1 {
            let fence = u64::try_from(number)
                .map_err(|_| self.protocol("acquire", &format!("fencing token {number}")))?;
            if let Err(err) = self.replicated(replicas, started).await {
                // Too few copies: a failover now could hand the lock to a
                // second run while the command runs. Give it back and let
                // the caller treat Redis as unavailable.
                let _ = self.release(None).await;
                return Err(err);
            }
            return Ok(Attempt::Acquired(Grant { fence, sent }));
        }
        Ok(Attempt::Busy {
            left: u64::try_from(number).ok().map(Duration::from_millis),
            holder: Holder::from_fields(&fields),
        })
    }

    /// Gives back a lock that an interrupted or failed acquisition may have
    /// taken after all (a call that timed out, a signal in mid-call). When no
    /// acquire request ever went out, Redis is not asked: with Redis
    /// unreachable, that would only add one more timeout to the failure.
    pub(crate) async fn abandon(&mut self) -> Result<(), RedisError> {
        if self.sent_acquire {
            self.release(None).await?;
        }
        Ok(())
    }

    /// Extends the lease to `ttl` from now. `Ok(false)` means the token is
    /// gone: the lease expired or someone removed or took the lock.
    /// With replica acknowledgement, a renewal that too few replicas
    /// acknowledged is an error, like one Redis never answered.
    pub(crate) async fn renew(&mut self, ttl: Duration) -> Result<bool, RedisError> {
        let mut call = RENEW.prepare_invoke();
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

    /// Gives the lock up, or with `keep_for` leaves it to expire after that
    /// long. Never touches a lock that no longer holds our token.
    pub(crate) async fn release(
        &mut self,
        keep_for: Option<Duration>,
    ) -> Result<Released, RedisError> {
        let mut call = RELEASE.prepare_invoke();
        call.key(&self.keys.lock)
            .key(&self.keys.holder)
            .arg(&self.token.0)
            .arg(keep_for.map_or(0, millis))
            .arg(&self.keys.channel);
        let result: i64 = self.session.invoke(&call).await?;
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

/// Release announcements of one lock.
pub(crate) struct Releases(redis::aio::PubSubStream);

impl Releases {
    /// Waits for the next release. `false` means the subscription broke and
    /// no more announcements will come.
    pub(crate) async fn next(&mut self) -> bool {
        self.0.next().await.is_some()
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
        let keys = &self.keys;
        let mut call = STATUS.prepare_invoke();
        call.key(&keys.lock).key(&keys.holder).key(&keys.fence);
        let reply = self.session.invoke(&call).await?;
        let (pttl, fields, secs, micros, fence): (i64, Vec<String>, u64, u64, String) =
            match self.keys.foreign(reply) {
                Ok(reply) => reply,
                Err(foreign) => return Ok(Err(foreign)),
            };
        let occupancy = match pttl {
            -2 => Occupancy::Free,
            -1 => Occupancy::NoExpiry,
            ms => Occupancy::Leased(Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
        };
        let node = self.session.node_for(&keys.lock).await;
        Ok(Ok(Status {
            node,
            holder: (occupancy != Occupancy::Free)
                .then(|| Holder::from_fields(&fields))
                .flatten(),
            occupancy,
            now_us: secs.saturating_mul(1_000_000).saturating_add(micros),
            last_fence: fence.parse().ok(),
        }))
    }

    /// Removes the lock whoever holds it. Returns the removed holder record,
    /// `Ok(Ok(None))` when there was no lock, and `Ok(Err(_))`, having
    /// removed nothing, when one of its keys is not lockrun's.
    pub(crate) async fn force_release(
        &mut self,
    ) -> Result<Result<Option<Holder>, Foreign>, RedisError> {
        let keys = &self.keys;
        let mut call = FORCE_RELEASE.prepare_invoke();
        call.key(&keys.lock).key(&keys.holder).arg(&keys.channel);
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
        assert_eq!(keys.channel, "lockrun:{billing}:released");
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
    fn a_guarded_reply_names_the_key_of_the_wrong_type() {
        let keys = Keys::new("lockrun:", "job");
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let stopped = Value::Array(vec![bulk("wrongtype"), bulk(&keys.holder), bulk("list")]);
        let reply = Guarded::<i64>::from_redis_value(stopped).expect("a guard reply");
        assert_eq!(
            keys.foreign(reply),
            Err(Foreign {
                key: "lockrun:{job}:holder".into(),
                holds: "list".into(),
                part: Part::Holder,
            })
        );
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
