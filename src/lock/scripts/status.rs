//! `status.lua`: reads the lock and its line, changing nothing, as one
//! server's view (`lock::status`).

use std::time::Duration;

use redis::ParsingError;

use super::reply::{Fields, Reply};
use super::{args, Lua, Takes, GUARD, QUEUE, STEPS};
use crate::lock::history::Recorded;
use crate::lock::records::{Holder, Waiter};
use crate::lock::status::{Occupancy, Status};

pub(super) static STATUS: Lua =
    Lua::new::<StatusArgs>("status", &[GUARD, STEPS, QUEUE], include_str!("status.lua"));

args! {
    /// No arguments: it reads every key of the lock.
    StatusArgs takes Takes::Lock, runs STATUS, returns Status {}
}

impl Reply for Status {
    const SCRIPT: &'static str = "status";
    fn decode(fields: &Fields) -> Result<Self, ParsingError> {
        let lease: String = fields.get("lease")?;
        let holder = fields.holder()?.map(|holder| Holder {
            token: Some(lease).filter(|t| !t.is_empty()),
            ..holder
        });
        let history: Vec<String> = fields.get("history")?;
        let waiters: Vec<(String, String)> = fields.get("waiters")?;
        Ok(Status {
            done: fields.done()?,
            together: fields.holders("together")?,
            history: history
                .iter()
                .filter_map(|entry| Recorded::parse(entry))
                .collect(),
            waiters: waiters
                .iter()
                .map(|(arrival, record)| Waiter::from_record(arrival, record))
                .collect(),
            ..view(
                fields.get("pttl")?,
                holder,
                fields.get("now_us")?,
                fields.fence()?,
            )
        })
    }
}

/// The view from the lease's pttl, its holder record, the server's time
/// and the last fencing token, which are all that can be read one key at a
/// time while the lock's cluster slot moves (`server/one_key.rs`): the line,
/// the success recorded, the runs holding it together and the history show
/// empty. The node that answered is the server's to fill in.
pub(in crate::lock) fn view(
    pttl: i64,
    holder: Option<Holder>,
    now_us: u64,
    last_fence: Option<u64>,
) -> Status {
    let occupancy = match pttl {
        -2 => Occupancy::Free,
        -1 => Occupancy::NoExpiry,
        ms => Occupancy::Leased(Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
    };
    Status {
        holder: holder.filter(|_| occupancy != Occupancy::Free),
        occupancy,
        now_us,
        last_fence,
        ..Status::default()
    }
}
