//! Waiters wake on a release, and still acquire when a holder dies without releasing.

#[allow(unused_imports)]
use crate::harness::*;
