//! `one_key.lua`: one key of a lock whose cluster slot is being migrated
//! (`server/one_key.rs` says how the lock is handled then).

use std::collections::HashMap;

use redis::ParsingError;

use super::reply::{Fields, Reply};
use super::{args, Lua, Takes, GUARD, REPLICAS, STEPS};
use crate::lock::records::Holder;

pub(super) static ONE_KEY: Lua = Lua::new::<OneKeyArgs>(
    "one_key",
    &[GUARD, STEPS, REPLICAS],
    include_str!("one_key.lua"),
);

args! {
    /// One key of a lock whose cluster slot is being migrated.
    OneKeyArgs<'a> takes Takes::One, runs ONE_KEY, returns Piece {
        /// The operation (`one_key.lua` lists them).
        op: &'a str,
        /// The type lockrun keeps in the key (`Key::holds`): the script
        /// touches nothing while the key holds another.
        holds: &'a str,
        /// To return the id of the node that ran it.
        name_node: bool,
        ..
        /// The operation's own arguments.
        operands: &'a [&'a str],
    }
}

/// What `one_key.lua` found or did with one key.
pub(in crate::lock) struct Piece {
    pub(in crate::lock) kind: String,
    /// The cluster id of the node that ran it; empty unless asked for.
    pub(in crate::lock) node: String,
    pub(in crate::lock) replicas: i64,
    pub(in crate::lock) now_us: u64,
    pub(in crate::lock) pttl: Option<i64>,
    pub(in crate::lock) fence: Option<u64>,
    pub(in crate::lock) holder: Option<Holder>,
    /// The first ids in line.
    pub(in crate::lock) ids: Vec<String>,
    /// How many are in line.
    pub(in crate::lock) waiting: Option<u64>,
    /// When a place runs out, ms of server time; -1 for no place.
    pub(in crate::lock) deadline: Option<i64>,
    /// A waiter's record (JSON); empty for none.
    pub(in crate::lock) record: Option<String>,
}

impl Reply for Piece {
    const SCRIPT: &'static str = "one_key";
    fn decode(fields: &Fields) -> Result<Self, ParsingError> {
        let kind: String = fields.get("kind")?;
        let fence = match fields.optional::<String>("fence")? {
            Some(_) => fields.fence()?,
            None => None,
        };
        if kind == "next" && fence.is_none() {
            return Err("no new fencing token".into());
        }
        Ok(Piece {
            fence,
            now_us: fields.get("now_us")?,
            pttl: fields.optional("pttl")?,
            holder: fields
                .optional::<HashMap<String, String>>("holder")?
                .and_then(|record| Holder::from_fields(&record)),
            node: fields.get("node")?,
            replicas: fields.get("replicas")?,
            ids: fields.optional("ids")?.unwrap_or_default(),
            waiting: fields.optional("waiting")?,
            deadline: fields.optional("deadline")?,
            record: fields.optional("record")?,
            kind,
        })
    }
}
