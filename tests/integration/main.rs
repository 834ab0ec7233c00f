//! lockrun's integration tests: the built binary against real redis-server
//! processes that the harness starts, pauses, kills and restarts.

// The pedantic set and the `pub` discipline are for the shipped code; the
// harness's helpers are `pub` for the sibling test modules.
#![allow(clippy::pedantic, unreachable_pub)]

mod harness;

mod acks;
mod acl;
mod basics;
mod completion;
mod connection;
mod contention;
mod cron;
mod docs;
mod empty_root;
mod events;
mod examples;
mod faults;
mod fencing_pg;
mod generated;
mod hardening;
mod history;
mod limits;
mod list;
mod log_format;
mod messages;
mod metrics;
mod migration;
mod migration_line;
mod module_map;
mod monitoring;
mod notify;
mod once_per;
mod operator;
mod ordering;
mod process;
mod queue;
mod quorum;
mod reference;
mod repeated_flags;
mod resharding;
mod ride_through;
mod rotation;
mod roundtrips;
mod second_contact;
mod settings;
mod shared;
mod signals;
mod slots;
mod slots_race;
mod slots_with;
mod stalls;
mod supervision;
mod supervisors;
mod tls;
mod topology;
mod wakeup;
