//! `acquire.lua`: takes the lock, or a place in its line, or refreshes the
//! place.

use std::time::Duration;

use redis::ParsingError;

use super::reply::{Fields, Reply};
use super::{args, Lua, Takes, GUARD, QUEUE, REPLICAS, STEPS};
use crate::lock::records::{DoneRecord, HoldersAndWaiters};

pub(super) static ACQUIRE: Lua = Lua::new::<AcquireArgs>(
    "acquire",
    &[GUARD, STEPS, QUEUE, REPLICAS],
    include_str!("acquire.lua"),
);

args! {
    /// Takes the lock, or a place in its line, or refreshes the place.
    AcquireArgs<'a> takes Takes::Lock, runs ACQUIRE, returns Acquire {
        /// The run's lock token, also its id in line.
        token: &'a str,
        ttl_ms: u64,
        host: &'a str,
        pid: u32,
        command: &'a str,
        /// To take a place in line when the lock cannot be the run's now;
        /// otherwise it only tries.
        waits: bool,
        /// Its place from an earlier reply, so that a waiter that was
        /// dropped (cut off from Redis too long) gets it back; empty at
        /// first.
        arrival: &'a str,
        /// Whether it listens on its wake-up channel.
        listening: bool,
        /// In a cluster, the id of the node its wake-up subscription is on
        /// (`CLUSTER MYID`); empty elsewhere.
        listens_on: &'a str,
        supersede: bool,
        /// How often it refreshes its place.
        refresh_ms: u64,
        /// `--once-per`: a run that would get the lock while a success is
        /// recorded does not take it.
        once_per: bool,
        /// `--slots N` (1: alone).
        slots: u32,
        shared: bool,
        /// To count the online replicas, for a run that waits for all of
        /// them to acknowledge (`--replica-acks all`): INFO is not cheap.
        count_replicas: bool,
        /// A quorum member up for less than this many seconds does not
        /// vote; 0 outside a quorum.
        min_uptime_s: u64,
    }
}

/// What `acquire.lua` did.
#[derive(Debug)]
pub(in crate::lock) enum Acquire {
    Acquired {
        fence: u64,
        replicas: i64,
        /// With `--slots`, the slot this run holds.
        slot: Option<u32>,
    },
    Busy(HoldersAndWaiters),
    Queued {
        found: HoldersAndWaiters,
        /// The place in line, to ask for again if it is ever lost.
        arrival: String,
        /// How long until a change could come without a message.
        retry: Option<Duration>,
        /// The id of the cluster node that answered, for a run that said
        /// where it listens.
        node: Option<String>,
    },
    Superseded {
        by: String,
    },
    Restarted {
        uptime_secs: u64,
    },
    /// `--once-per`: the job succeeded this period; nothing was taken.
    Done(DoneRecord),
    /// The lock's holders and waiters agreed on this many slots, and this
    /// run asked for another number; nothing was taken.
    Mismatch {
        slots: u32,
    },
}

impl Reply for Acquire {
    const SCRIPT: &'static str = "acquire";
    fn decode(fields: &Fields) -> Result<Self, ParsingError> {
        Ok(match fields.kind()?.as_str() {
            "acquired" => Acquire::Acquired {
                fence: fields.get("fence")?,
                replicas: fields.get("replicas")?,
                slot: fields.optional("slot")?,
            },
            "busy" => Acquire::Busy(fields.holders_and_waiters()?),
            "queued" => Acquire::Queued {
                found: fields.holders_and_waiters()?,
                arrival: fields.get("arrival")?,
                retry: fields.millis("retry")?,
                node: fields
                    .optional::<String>("node")?
                    .filter(|node| !node.is_empty()),
            },
            "superseded" => Acquire::Superseded {
                by: fields.get("by")?,
            },
            "restarted" => Acquire::Restarted {
                uptime_secs: fields.get("uptime")?,
            },
            "done" => Acquire::Done(fields.done()?.ok_or("an empty success record")?),
            "mismatch" => Acquire::Mismatch {
                slots: fields.get("slots")?,
            },
            other => return Err(format!("unknown kind {other:?}").into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use redis::{FromRedisValue, Value};

    use super::*;
    use crate::lock::scripts::reply::given::{bulk, pairs};
    use crate::lock::scripts::reply::Guarded;

    #[test]
    fn fields_are_read_by_name_in_any_order() {
        let reply = pairs(&[
            ("replicas", Value::Int(2)),
            ("fence", bulk("1732924800123456")),
            ("kind", bulk("acquired")),
        ]);
        let Ok(Guarded::Ran(Acquire::Acquired {
            fence,
            replicas,
            slot: None,
        })) = Guarded::<Acquire>::from_redis_value(reply)
        else {
            panic!("an acquired reply");
        };
        assert_eq!((fence, replicas), (1_732_924_800_123_456, 2));
    }

    #[test]
    fn a_queued_reply_carries_the_holder_and_the_place() {
        let reply = pairs(&[
            ("kind", bulk("queued")),
            ("pttl", Value::Int(1500)),
            ("waiting", Value::Int(2)),
            (
                "holder",
                Value::Array(vec![bulk("host"), bulk("h1"), bulk("pid"), bulk("42")]),
            ),
            ("holding", Value::Int(0)),
            ("arrival", bulk("17")),
            ("retry", Value::Int(-1)),
        ]);
        let Ok(Guarded::Ran(Acquire::Queued {
            found,
            arrival,
            retry,
            node: None,
        })) = Guarded::<Acquire>::from_redis_value(reply)
        else {
            panic!("a queued reply");
        };
        assert_eq!(arrival, "17");
        assert_eq!(retry, None);
        assert_eq!(found.left, Some(Duration::from_millis(1500)));
        assert_eq!(found.waiting, 2);
        assert_eq!(
            found.holder.map(|h| (h.host, h.pid)),
            Some(("h1".into(), 42))
        );
    }

    #[test]
    fn a_done_reply_carries_who_succeeded_and_until_when() {
        let record = Value::Array(
            [
                "host",
                "h1",
                "pid",
                "42",
                "fence",
                "17",
                "until",
                "1732928400123",
            ]
            .iter()
            .map(|text| bulk(text))
            .collect(),
        );
        let reply = pairs(&[("kind", bulk("done")), ("done", record)]);
        let Ok(Guarded::Ran(Acquire::Done(done))) = Guarded::<Acquire>::from_redis_value(reply)
        else {
            panic!("a done reply");
        };
        assert_eq!((done.by.host.as_str(), done.by.pid), ("h1", 42));
        assert_eq!((done.by.fence, done.until_ms), (17, 1_732_928_400_123));
        let empty = pairs(&[("kind", bulk("done")), ("done", Value::Array(vec![]))]);
        assert!(Guarded::<Acquire>::from_redis_value(empty).is_err());
    }

    #[test]
    fn a_reply_without_a_field_it_needs_is_an_error() {
        let reply = pairs(&[("kind", bulk("acquired"))]);
        assert!(Guarded::<Acquire>::from_redis_value(reply).is_err());
    }
}
