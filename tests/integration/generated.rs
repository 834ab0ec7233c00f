//! The man page and shell completions are generated from the clap definition; this test fails when the checked-in files drift.

#[allow(unused_imports)]
use crate::harness::*;
