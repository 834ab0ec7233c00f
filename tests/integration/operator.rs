//! The operator's controls: status, release --force, --min-hold, --timeout, fencing tokens across a Redis restart.

#[allow(unused_imports)]
use crate::harness::*;
