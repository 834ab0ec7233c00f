//! `release.lua`: gives the lock up, straight to the first waiter, or keeps
//! it for `--min-hold`; records the run in the history.

use redis::ParsingError;

use super::reply::{Fields, Reply};
use super::{args, Lua, Takes, GUARD, QUEUE, STEPS};

pub(super) static RELEASE: Lua = Lua::new::<ReleaseArgs>(
    "release",
    &[GUARD, STEPS, QUEUE],
    include_str!("release.lua"),
);

args! {
    /// Gives the lock up, straight to the first waiter, or keeps it for
    /// `--min-hold`.
    ReleaseArgs<'a> takes Takes::Lock, runs RELEASE, returns Released {
        token: &'a str,
        /// How long to keep it (0: release now).
        keep_ms: u64,
        /// `--once-per`'s period when the command succeeded (0: none).
        period_ms: u64,
        /// How many runs the history keeps (`--history`; 0: this run is not
        /// recorded).
        keep_runs: u32,
        /// The run's record (a JSON object), which the script puts in the
        /// history with the server's time and what the release found;
        /// empty for a run that did not start its command.
        record: &'a str,
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

#[cfg(test)]
mod tests {
    use redis::FromRedisValue;

    use super::*;
    use crate::lock::scripts::reply::given::{bulk, pairs};
    use crate::lock::scripts::reply::Guarded;

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
    fn an_unknown_outcome_is_an_error() {
        let reply = pairs(&[("outcome", bulk("maybe"))]);
        assert!(Guarded::<Released>::from_redis_value(reply).is_err());
    }
}
