//! Many runs on one key: busy with and without --wait, and no two commands ever overlap.

#[allow(unused_imports)]
use crate::harness::*;
