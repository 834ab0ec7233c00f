//! `acked.lua`: notes in the holder record how many replicas acknowledged
//! the lease. Its reply, 1 or 0, is not read: the note only informs.

use super::{args, Lua, Takes};
use crate::lock::keys::Part;

pub(super) static ACKED: Lua = Lua::new::<AckedArgs>("acked", &[], include_str!("acked.lua"));

args! {
    /// Notes the count while the lease still holds the run's token.
    AckedArgs<'a> takes Takes::Parts(&[Part::Lease, Part::Holder]), runs ACKED, returns i64 {
        token: &'a str,
        replicas_acked: u32,
    }
}
