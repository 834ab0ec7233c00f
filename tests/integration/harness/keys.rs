//! What lockrun left in a `Server` for lock NAME under the default prefix: lease, fencing counter, wait queue.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{eventually, Server};

/// The prefix lockrun puts before every key unless told otherwise.
pub(super) const DEFAULT_PREFIX: &str = "lockrun:";

/// The key of lock `name` under `prefix`, as lockrun names it.
pub(super) fn lock_key(prefix: &str, name: &str) -> String {
    format!("{prefix}{{{name}}}")
}

/// `lockrun:{NAME}:SUFFIX`, one of the keys that go with a lock.
fn key(name: &str, suffix: &str) -> String {
    format!("{}:{suffix}", lock_key(DEFAULT_PREFIX, name))
}

/// Whether a lease is renewed within `patience`. Without a renewal its time
/// left only shrinks (a failover's snapshot included), so a PTTL that `pttl`
/// reads above the one before proves one; a reading that fails (`None`: an
/// interrupted call) is skipped.
pub fn renewal_seen(patience: Duration, mut pttl: impl FnMut() -> Option<i64>) -> bool {
    let mut last = pttl();
    eventually(patience, || {
        let now = pttl();
        let up = matches!((last, now), (Some(last), Some(now)) if last < now);
        last = now.or(last);
        up
    })
}

impl Server {
    /// Whether the lease of lock `name` here is renewed within `patience`.
    pub fn renewed(&self, name: &str, patience: Duration) -> bool {
        let lease = lock_key(DEFAULT_PREFIX, name);
        renewal_seen(patience, || self.query(redis::cmd("PTTL").arg(&lease)).ok())
    }

    /// The lease: the value lockrun set on the lock key, if it is held.
    pub fn lock_value(&self, name: &str) -> Option<String> {
        self.get(&lock_key(DEFAULT_PREFIX, name))
    }

    pub fn is_locked(&self, name: &str) -> bool {
        self.lock_value(name).is_some()
    }

    /// A field of the holder record of lock `name` (`host`, `pid`,
    /// `fence`...), if it is held.
    pub fn holder_field(&self, name: &str, field: &str) -> Option<String> {
        self.query(redis::cmd("HGET").arg(key(name, "holder")).arg(field))
            .expect("HGET")
    }

    /// Ends the lease of lock `name` and its holder record now, as their
    /// expiry would: for a test whose holder is dead, so that it need not
    /// wait out the ttl. Redis still expires the keys itself.
    pub fn expire_lease(&self, name: &str) {
        for key in [lock_key(DEFAULT_PREFIX, name), key(name, "holder")] {
            let _: i64 = self
                .query(redis::cmd("PEXPIRE").arg(key).arg(1))
                .expect("PEXPIRE");
        }
    }

    /// The lease's time left in ms (negative: no key, or no expiry).
    pub fn pttl(&self, name: &str) -> i64 {
        self.query(redis::cmd("PTTL").arg(lock_key(DEFAULT_PREFIX, name)))
            .expect("PTTL")
    }

    /// The fencing counter of lock `name`, if there is one.
    pub fn fence(&self, name: &str) -> Option<u64> {
        self.get(&key(name, "fence")).map(|text| {
            text.parse()
                .unwrap_or_else(|_| panic!("{text:?} is not a fencing counter"))
        })
    }

    /// Sets the fencing counter of lock `name`, as a long history would.
    pub fn set_fence(&self, name: &str, value: u64) {
        let _: () = self
            .query(redis::cmd("SET").arg(key(name, "fence")).arg(value))
            .expect("SET");
    }

    /// How many runs wait in line for lock `name` (see src/lock/scripts/queue.lua).
    pub fn in_line(&self, name: &str) -> usize {
        self.query(redis::cmd("ZCARD").arg(key(name, "queue")))
            .expect("ZCARD")
    }

    /// The records of the runs waiting in line for lock `name` (JSON, in no
    /// order).
    pub fn waiter_records(&self, name: &str) -> Vec<String> {
        self.query(redis::cmd("HVALS").arg(key(name, "waiters")))
            .expect("HVALS")
    }

    /// How many runs wait in line for lock `name` and listen for their
    /// wake-up message: a waiter subscribes before it takes its place, and
    /// says so in its record.
    pub fn listening_waiters(&self, name: &str) -> usize {
        self.waiter_records(name)
            .iter()
            .filter(|record| record.contains(r#""listening":true"#))
            .count()
    }

    /// How many wake-up channels of lock `name` have subscribers here: one
    /// per waiting run whose connection this server has not seen close.
    pub fn wake_channels(&self, name: &str) -> usize {
        self.wake_channels_now(name).expect("PUBSUB CHANNELS")
    }

    /// `wake_channels`, or `None` when the server did not answer: for a
    /// poll, which asks again.
    pub fn wake_channels_now(&self, name: &str) -> Option<usize> {
        let channels = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg(key(name, "wake:*"))
            .clone();
        self.query::<Vec<String>>(&channels).ok().map(|c| c.len())
    }

    /// Asserts that all this server holds is the fencing counter of lock
    /// `name` (and its run history, if a run started its command): every
    /// run released its lease and holder record, and the counter stays so
    /// that tokens keep growing.
    #[track_caller]
    pub fn assert_only_fence(&self, name: &str) {
        let history = key(name, "history");
        let mut keys = self.keys();
        keys.retain(|k| *k != history);
        assert_eq!(
            keys,
            [key(name, "fence")],
            "want only the fencing counter of {name} left in Redis"
        );
    }

    /// Every key in this server, sorted.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.query(redis::cmd("KEYS").arg("*")).expect("KEYS");
        keys.sort();
        keys
    }

    /// The records of the holders with `--slots` or `--shared` of lock
    /// `name` (the `:holders` hash): token -> record, parsed.
    pub fn slot_holders(&self, name: &str) -> BTreeMap<String, serde_json::Value> {
        holder_records(self, &key(name, "holders"))
    }

    /// The lease deadlines of those holders (the `:leases` zset): token ->
    /// ms on Redis's clock.
    pub fn slot_leases(&self, name: &str) -> BTreeMap<String, u64> {
        let pairs: Vec<(String, u64)> = self
            .query(
                redis::cmd("ZRANGE")
                    .arg(key(name, "leases"))
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES"),
            )
            .expect("ZRANGE");
        pairs.into_iter().collect()
    }

    /// The token of the `--slots` or `--shared` holder whose lockrun has
    /// `pid`, with `lock` the lock's key (prefix included).
    pub(super) fn shared_holder_token(&self, lock: &str, pid: i32) -> Option<String> {
        holder_records(self, &format!("{lock}:holders"))
            .into_iter()
            .find(|(_, record)| {
                // A number, or the decimal digits in a string.
                let field = &record["pid"];
                field.as_i64() == Some(i64::from(pid)) || field.as_str() == Some(&pid.to_string())
            })
            .map(|(token, _)| token)
    }

    /// Every key with its type and value (a hash's fields and a zset's
    /// scores included, sorted), but not its expiry: what a run that must
    /// change nothing is compared against.
    pub fn snapshot(&self) -> Vec<(String, String)> {
        self.keys()
            .into_iter()
            .map(|name| {
                let kind: String = self.query(redis::cmd("TYPE").arg(&name)).expect("TYPE");
                let value = match kind.as_str() {
                    "string" => format!("{:?}", self.get(&name)),
                    "hash" => {
                        let fields: BTreeMap<String, String> = self
                            .query(redis::cmd("HGETALL").arg(&name))
                            .expect("HGETALL");
                        format!("{fields:?}")
                    }
                    "zset" => {
                        let pairs: Vec<(String, String)> = self
                            .query(
                                redis::cmd("ZRANGE")
                                    .arg(&name)
                                    .arg(0)
                                    .arg(-1)
                                    .arg("WITHSCORES"),
                            )
                            .expect("ZRANGE");
                        format!("{pairs:?}")
                    }
                    "list" => {
                        let items: Vec<String> = self
                            .query(redis::cmd("LRANGE").arg(&name).arg(0).arg(-1))
                            .expect("LRANGE");
                        format!("{items:?}")
                    }
                    "set" => {
                        let members: BTreeSet<String> = self
                            .query(redis::cmd("SMEMBERS").arg(&name))
                            .expect("SMEMBERS");
                        format!("{members:?}")
                    }
                    other => format!("a {other}"),
                };
                (name, format!("{kind}: {value}"))
            })
            .collect()
    }

    pub fn get(&self, key: &str) -> Option<String> {
        self.query(redis::cmd("GET").arg(key)).expect("GET")
    }
}

/// The hash at `key` of holder records, parsed; empty when there is none or
/// the server does not answer (a holder's start polls it).
fn holder_records(server: &Server, key: &str) -> BTreeMap<String, serde_json::Value> {
    let fields: BTreeMap<String, String> = server
        .query(redis::cmd("HGETALL").arg(key))
        .unwrap_or_default();
    fields
        .into_iter()
        .map(|(token, record)| {
            let parsed = serde_json::from_str(&record)
                .unwrap_or_else(|_| panic!("{record:?}, the record of {token}, is not JSON"));
            (token, parsed)
        })
        .collect()
}
