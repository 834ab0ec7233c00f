//! What the scripts' replies share. Each script returns its fields as
//! name-value pairs (`{'kind', 'acquired', 'fence', 7, ...}`), so that a
//! field a script adds cannot shift another, and each reply type (in its
//! script's module) reads them by name; a script stopped by `guard.lua`
//! says so the same way for all.

use std::collections::HashMap;
use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use crate::lock::records::{DoneRecord, Holder, HoldersAndWaiters};

/// A reply's fields by name. A handful each: a search is cheaper than a
/// hash map.
pub(in crate::lock) struct Fields(Vec<(String, Value)>);

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

    pub(super) fn kind(&self) -> Result<String, ParsingError> {
        self.get("kind")
    }

    /// A pttl or a wait as the scripts return it: negative means none.
    pub(super) fn millis(&self, name: &str) -> Result<Option<Duration>, ParsingError> {
        Ok(u64::try_from(self.get::<i64>(name)?)
            .ok()
            .map(Duration::from_millis))
    }

    pub(super) fn holder(&self) -> Result<Option<Holder>, ParsingError> {
        Ok(Holder::from_fields(&self.get("holder")?))
    }

    pub(super) fn done(&self) -> Result<Option<DoneRecord>, ParsingError> {
        Ok(DoneRecord::from_fields(&self.get("done")?))
    }

    pub(super) fn holders_and_waiters(&self) -> Result<HoldersAndWaiters, ParsingError> {
        let pttl: i64 = self.get("pttl")?;
        Ok(HoldersAndWaiters {
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
    pub(super) fn holders(&self, name: &str) -> Result<Vec<Holder>, ParsingError> {
        let records: Vec<HashMap<String, String>> = self.get(name)?;
        Ok(records.iter().filter_map(Holder::from_fields).collect())
    }
}

/// A script's reply once it ran to its end, or the key that stopped it
/// (`guard.lua`): the Redis key and the type it holds.
pub(in crate::lock) enum Guarded<R> {
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
pub(in crate::lock) trait Reply: Sized {
    /// The script's name, for a message about a reply lockrun cannot read.
    const SCRIPT: &'static str;
    fn decode(fields: &Fields) -> Result<Self, ParsingError>;
}

/// Replies as Redis gives them, for the reply types' tests.
#[cfg(test)]
pub(super) mod given {
    use redis::Value;

    pub(in crate::lock) fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    pub(in crate::lock) fn pairs(fields: &[(&str, Value)]) -> Value {
        Value::Array(
            fields
                .iter()
                .flat_map(|(name, value)| [bulk(name), value.clone()])
                .collect(),
        )
    }
}
