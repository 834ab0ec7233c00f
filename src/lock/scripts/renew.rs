//! `renew.lua` and `renew_together.lua`: extend a lease that is still the
//! run's, alone or held together; both reply alike.

use redis::ParsingError;

use super::reply::{Fields, Reply};
use super::{args, Lua, Takes, REPLICAS, STEPS};
use crate::lock::keys::Part;

pub(super) static RENEW: Lua =
    Lua::new::<RenewArgs>("renew", &[REPLICAS], include_str!("renew.lua"));

pub(super) static RENEW_TOGETHER: Lua = Lua::new::<RenewTogetherArgs>(
    "renew_together",
    &[REPLICAS, STEPS],
    include_str!("renew_together.lua"),
);

args! {
    /// Extends a lease held alone that still holds the run's token.
    RenewArgs<'a> takes Takes::Parts(&[Part::Lease, Part::Holder]), runs RENEW, returns Renew {
        token: &'a str,
        ttl_ms: u64,
    }
}

args! {
    /// Extends a lease held together (`--slots`, `--shared`) that is still
    /// the run's.
    RenewTogetherArgs<'a> takes Takes::Parts(&[Part::Leases, Part::Holders]),
        runs RENEW_TOGETHER, returns Renew {
        token: &'a str,
        ttl_ms: u64,
    }
}

/// Whether the lease was still the run's, and how many replicas the node
/// has online, to wait for.
pub(in crate::lock) struct Renew {
    pub(in crate::lock) renewed: bool,
    pub(in crate::lock) replicas: i64,
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
