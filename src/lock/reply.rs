//! The scripts' replies, one type per script, decoded by field name. Each
//! script returns its fields as name-value pairs (`{'kind', 'acquired',
//! 'fence', 7, ...}`), so that a field a script adds cannot shift another,
//! and a script stopped by `lock/guard.lua` says so the same way for all.

use std::collections::HashMap;
use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use super::records::{DoneRecord, Holder, Taken};

/// A reply's fields by name. A handful each: a search is cheaper than a
/// hash map.
pub(super) struct Fields(Vec<(String, Value)>);

impl Fields {
    fn parse(reply: Value) -> Result<Fields, ParsingError> {
        FromRedisValue::from_redis_value(reply).map(Fields)
    }

    pub(super) fn get<T: FromRedisValue>(&self, name: &str) -> Result<T, ParsingError> {
        let (_, value) = self
            .0
            .iter()
            .find(|(field, _)| field == name)
            .ok_or_else(|| ParsingError::from(format!("no field {name:?}")))?;
        T::from_redis_value_ref(value)
    }

    /// A field that the script returns only in some cases; `None` when
    /// absent, an error when there but not a `T`.
    pub(super) fn optional<T: FromRedisValue>(
        &self,
        name: &str,
    ) -> Result<Option<T>, ParsingError> {
        match self.0.iter().find(|(field, _)| field == name) {
            Some((_, value)) => T::from_redis_value_ref(value).map(Some),
            None => Ok(None),
        }
    }

    fn kind(&self) -> Result<String, ParsingError> {
        self.get("kind")
    }

    /// A pttl or a wait as the scripts return it: negative means none.
    fn millis(&self, name: &str) -> Result<Option<Duration>, ParsingError> {
        Ok(u64::try_from(self.get::<i64>(name)?)
            .ok()
            .map(Duration::from_millis))
    }

    fn holder(&self) -> Result<Option<Holder>, ParsingError> {
        Ok(Holder::from_fields(&self.get("holder")?))
    }

    fn done(&self) -> Result<Option<DoneRecord>, ParsingError> {
        Ok(DoneRecord::from_fields(&self.get("done")?))
    }

    fn taken(&self) -> Result<Taken, ParsingError> {
        let pttl: i64 = self.get("pttl")?;
        Ok(Taken {
            held: pttl != -2,
            left: self.millis("pttl")?,
            holder: self.holder()?,
            waiting: self.get("waiting")?,
            holding: self.get("holding")?,
        })
    }

    /// The last fencing token, which the scripts return as a string: empty
    /// when there is none.
    pub(super) fn fence(&self) -> Result<Option<u64>, ParsingError> {
        match self.get::<String>("fence")?.as_str() {
            "" => Ok(None),
            fence => fence
                .parse()
                .map(Some)
                .map_err(|_| format!("fencing token {fence:?}").into()),
        }
    }

    /// Holder records in a list, each as name-value pairs.
    fn holders(&self, name: &str) -> Result<Vec<Holder>, ParsingError> {
        let records: Vec<HashMap<String, String>> = self.get(name)?;
        Ok(records.iter().filter_map(Holder::from_fields).collect())
    }
}

/// A script's reply once it ran to its end, or the key that stopped it
/// (`lock/guard.lua`): the Redis key and the type it holds.
pub(super) enum Guarded<R> {
    Ran(R),
    Stopped { key: String, holds: String },
}

impl<R: Reply> FromRedisValue for Guarded<R> {
    fn from_redis_value(reply: Value) -> Result<Self, ParsingError> {
        Guarded::decode(reply)
            .map_err(|err| ParsingError::from(format!("to the {} script: {err}", R::SCRIPT)))
    }
}

impl<R: Reply> Guarded<R> {
    fn decode(reply: Value) -> Result<Self, ParsingError> {
        let fields = Fields::parse(reply)?;
        if fields
            .get::<String>("kind")
            .is_ok_and(|kind| kind == "wrongtype")
        {
            return Ok(Guarded::Stopped {
                key: fields.get("key")?,
                holds: fields.get("holds")?,
            });
        }
        R::decode(&fields).map(Guarded::Ran)
    }
}

/// One script's reply.
pub(super) trait Reply: Sized {
    /// The script's name, for a message about a reply lockrun cannot read.
    const SCRIPT: &'static str;
    fn decode(fields: &Fields) -> Result<Self, ParsingError>;
}

/// `lock/acquire.lua`.
#[derive(Debug)]
pub(super) enum Acquire {
    Acquired {
        fence: u64,
        replicas: i64,
        /// With `--slots`, the slot this run holds.
        slot: Option<u32>,
    },
    Busy(Taken),
    Queued {
        taken: Taken,
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
            "busy" => Acquire::Busy(fields.taken()?),
            "queued" => Acquire::Queued {
                taken: fields.taken()?,
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

/// `lock/renew.lua`.
pub(super) struct Renew {
    pub(super) renewed: bool,
    pub(super) replicas: i64,
}

impl Reply for Renew {
    const SCRIPT: &'static str = "renew";
    fn decode(fields: &Fields) -> Result<Self, ParsingError> {
        Ok(Renew {
            renewed: fields.get::<i64>("renewed")? == 1,
            replicas: fields.get("replicas")?,
        })
    }
}

/// What a release did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Released {
    Deleted,
    /// Kept until the minimum hold time is over.
    Kept,
    /// The key no longer held our token: it expired or was taken over.
    NotOurs,
}

/// `lock/release.lua`.
impl Reply for Released {
    const SCRIPT: &'static str = "release";
    fn decode(fields: &Fields) -> Result<Self, ParsingError> {
        match fields.get::<String>("outcome")?.as_str() {
            "deleted" => Ok(Released::Deleted),
            "kept" => Ok(Released::Kept),
            "not_ours" => Ok(Released::NotOurs),
            other => Err(format!("unknown outcome {other:?}").into()),
        }
    }
}

/// `lock/raise_fence.lua`: the counter is at least the token asked for.
pub(super) struct Raised;

impl Reply for Raised {
    const SCRIPT: &'static str = "raise_fence";
    fn decode(fields: &Fields) -> Result<Self, ParsingError> {
        fields.get::<u64>("fence").map(|_| Raised)
    }
}

/// `lock/status.lua`.
pub(super) struct Status {
    pub(super) pttl: i64,
    pub(super) holder: Option<Holder>,
    pub(super) now_us: u64,
    pub(super) fence: Option<u64>,
    /// The live waiters' arrivals and records, first come first.
    pub(super) waiters: Vec<(String, String)>,
    /// The success a `--once-per` run recorded for this period.
    pub(super) done: Option<DoneRecord>,
    /// The runs holding the lock together, each with its lease's time left.
    pub(super) together: Vec<Holder>,
    /// The run history's entries, newest first.
    pub(super) history: Vec<String>,
}

impl Reply for Status {
    const SCRIPT: &'static str = "status";
    fn decode(fields: &Fields) -> Result<Self, ParsingError> {
        let lease: String = fields.get("lease")?;
        Ok(Status {
            pttl: fields.get("pttl")?,
            holder: fields.holder()?.map(|holder| Holder {
                token: Some(lease).filter(|t| !t.is_empty()),
                ..holder
            }),
            now_us: fields.get("now_us")?,
            fence: fields.fence()?,
            waiters: fields.get("waiters")?,
            done: fields.done()?,
            together: fields.holders("together")?,
            history: fields.get("history")?,
        })
    }
}

/// `lock/force_release.lua`: the holder records removed (each with its
/// token), and whether a recorded success was cleared.
pub(super) struct ForceRelease(pub(super) Vec<Holder>, pub(super) bool);

impl Reply for ForceRelease {
    const SCRIPT: &'static str = "force_release";
    fn decode(fields: &Fields) -> Result<Self, ParsingError> {
        let cleared = fields.get::<i64>("cleared")? == 1;
        Ok(ForceRelease(fields.holders("holders")?, cleared))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn pairs(fields: &[(&str, Value)]) -> Value {
        Value::Array(
            fields
                .iter()
                .flat_map(|(name, value)| [bulk(name), value.clone()])
                .collect(),
        )
    }

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
            taken,
            arrival,
            retry,
            node: None,
        })) = Guarded::<Acquire>::from_redis_value(reply)
        else {
            panic!("a queued reply");
        };
        assert_eq!(arrival, "17");
        assert_eq!(retry, None);
        assert_eq!(taken.left, Some(Duration::from_millis(1500)));
        assert_eq!(taken.waiting, 2);
        assert_eq!(
            taken.holder.map(|h| (h.host, h.pid)),
            Some(("h1".into(), 42))
        );
    }

    #[test]
    fn the_guard_names_the_key_of_the_wrong_type() {
        let reply = pairs(&[
            ("kind", bulk("wrongtype")),
            ("key", bulk("lockrun:{job}:holder")),
            ("holds", bulk("list")),
        ]);
        let Ok(Guarded::Stopped { key, holds }) = Guarded::<Released>::from_redis_value(reply)
        else {
            panic!("a stopped reply");
        };
        assert_eq!(
            (key.as_str(), holds.as_str()),
            ("lockrun:{job}:holder", "list")
        );
    }

    #[test]
    fn a_reply_without_a_field_it_needs_is_an_error() {
        let reply = pairs(&[("kind", bulk("acquired"))]);
        assert!(Guarded::<Acquire>::from_redis_value(reply).is_err());
        let reply = pairs(&[("outcome", bulk("maybe"))]);
        assert!(Guarded::<Released>::from_redis_value(reply).is_err());
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
}
