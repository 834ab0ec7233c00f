//! The command's life: stdin and stdout pass through, process group, exec failures, a command killed by a signal.

#[allow(unused_imports)]
use crate::harness::*;
