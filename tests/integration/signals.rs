//! Signals to lockrun: forwarded while the command runs, abort the wait before it.

#[allow(unused_imports)]
use crate::harness::*;
