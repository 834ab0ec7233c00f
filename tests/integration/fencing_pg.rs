//! The PostgreSQL fencing example: a stale holder's late write is rejected by the database.

#[allow(unused_imports)]
use crate::harness::*;
