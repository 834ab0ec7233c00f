//! The test harness, modelled on ripgrep's `tests/util.rs`: one server type, one command builder, one bounded way to run lockrun.
//!
//! - `server`: `Server`, a redis-server (or sentinel) process a test owns.
//! - `keys`: what lockrun left in a `Server`: lease, fence, wait queue.
//! - `topology`: groups of `Server`s: a quorum, and what the others share.
//! - `sentinel`, `cluster`: a Sentinel set and a Redis Cluster.
//! - `migration`: `Move`, a cluster slot moved by hand, step by step.
//! - `reshard`: a real `redis-cli --cluster reshard` moving a cluster slot.
//! - `command`: `Lockrun`, the one builder, and `Ran`, a run to its end.
//! - `expect`: `Expect`, the status, stdout and stderr a run must end with,
//!   checked together by `Ran::assert`.
//! - `holder`: `Holder`, a run kept holding a lock or waiting for it, its
//!   `Gate` (a FIFO its command blocks on), and the no-overlap job.
//! - `slots`: runs that share a key (`--slots`, `--shared`): runs that take
//!   their place in line, the job that logs who is inside, and the check of
//!   that log.
//! - `process`: `Running`, pids, polling with deadlines, scratch files.
//! - `container`: `Container`, a host with systemd as PID 1 under
//!   systemd-nspawn, and the Redis its units share with the other hosts.
//! - `terminal`: `Terminal`, a command line on a pseudo-terminal.
//! - `postgres`: `PostgresServer`, for the fencing example.
//! - `tls`: `Certificates`, a private CA and a server certificate.

mod cluster;
mod command;
mod container;
mod expect;
mod holder;
mod keys;
mod migration;
mod postgres;
mod process;
mod reshard;
mod sentinel;
mod server;
mod slots;
mod terminal;
mod tls;
mod topology;

pub use cluster::*;
pub use command::*;
pub use container::{container_redis, epoch_seconds, Container, HostSetup, Unit, REDIS_PASSWORD};
pub use expect::Expect;
pub use holder::*;
pub use keys::renewal_seen;
pub use migration::*;
pub use postgres::PostgresServer;
pub use process::*;
pub use reshard::*;
pub use sentinel::*;
pub use server::*;
pub use slots::*;
pub use terminal::Terminal;
pub use tls::Certificates;
pub use topology::*;

use std::time::Duration;

/// How long any single wait in a test may take before it fails. Generous:
/// the machine has two cores and runs several tests at once.
pub const PATIENCE: Duration = Duration::from_secs(30);
