//! `raise_fence.lua`: in a quorum, raises a member's fence counter to the
//! run's token.

use redis::ParsingError;

use super::reply::{Fields, Reply};
use super::{args, Lua, Takes, GUARD, QUEUE, STEPS};

pub(super) static RAISE_FENCE: Lua = Lua::new::<RaiseFenceArgs>(
    "raise_fence",
    &[GUARD, STEPS, QUEUE],
    include_str!("raise_fence.lua"),
);

args! {
    /// Raises the counter to at least `at_least`.
    RaiseFenceArgs<'a> takes Takes::Lock, runs RAISE_FENCE, returns Raised {
        token: &'a str,
        at_least: u64,
    }
}

/// The counter is at least the token asked for.
pub(in crate::lock) struct Raised;

impl Reply for Raised {
    const SCRIPT: &'static str = "raise_fence";
    fn decode(fields: &Fields) -> Result<Self, ParsingError> {
        fields.get::<u64>("fence").map(|_| Raised)
    }
}
