//! `force_release.lua`: removes the lock whoever holds it (`lockrun release
//! --force`).

use redis::ParsingError;

use super::reply::{Fields, Reply};
use super::{args, Lua, Takes, GUARD, QUEUE, STEPS};
use crate::lock::records::Holder;

pub(super) static FORCE_RELEASE: Lua = Lua::new::<ForceReleaseArgs>(
    "force_release",
    &[GUARD, STEPS, QUEUE],
    include_str!("force_release.lua"),
);

args! {
    /// Removes every holder, or one.
    ForceReleaseArgs<'a> takes Takes::Lock, runs FORCE_RELEASE, returns ForceRelease {
        /// The token of the one holder to remove; empty for every holder.
        only: &'a str,
    }
}

/// The holder records removed (each with its token), and whether a
/// recorded success was cleared.
pub(in crate::lock) struct ForceRelease(pub(in crate::lock) Vec<Holder>, pub(in crate::lock) bool);

impl Reply for ForceRelease {
    const SCRIPT: &'static str = "force_release";
    fn decode(fields: &Fields) -> Result<Self, ParsingError> {
        let cleared = fields.get::<i64>("cleared")? == 1;
        Ok(ForceRelease(fields.holders("holders")?, cleared))
    }
}
