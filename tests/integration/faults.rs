//! Redis failing under a running lockrun: killed, restarted empty, paused; lockrun itself paused or killed.

#[allow(unused_imports)]
use crate::harness::*;
