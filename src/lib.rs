//! lockrun runs a command under a distributed lock held in Redis.
//!
//! Module map. Each module imports only modules listed after it, so the
//! graph has no cycle and points from the binary's edge inwards:
//!
//! - `admin`: `lockrun status` and `lockrun release`; `admin/list`:
//!   `lockrun list`, every lock under a prefix; `admin/history`: `lockrun
//!   history`, the last runs; `admin/check`: `lockrun check`, for
//!   monitoring;
//! - `run`: one run, step by step: acquire, start, supervise, finish;
//!   - `run/metrics_file`: what a run writes to the metrics file, and when,
//!     off the runtime's thread;
//! - `config`: turns `cli` into validated settings; `config/file`:
//!   /etc/lockrun.conf or LOCKRUN_CONFIG's, each line checked by its
//!   option's parser and given to clap as that option's default, so an
//!   option or its variable wins over the file; nothing after it sees clap;
//! - `cli`: the command line (clap): flags, help text, one-line usage errors;
//! - `supervise`: the running command under its lease: renewals, signals,
//!   terminal stops, stopping the command when the lease cannot be proven;
//! - `wait`: getting the lock, waiting for it if asked: one loop and one
//!   give-up rule for one server and for a quorum;
//! - `notify`: systemd's notification protocol: lockrun's status and a
//!   standby's readiness, and `notify/relay`, the command's notifications
//!   passed on from lockrun's pid;
//! - `report`: the one-line messages on stderr, as loud as asked, never
//!   holding up the deadline; `report/message`: everything lockrun says, each
//!   message once, as a line and as a typed event (`report/event`) for
//!   `--log-format json`; `report/failure`: the error that ends an
//!   invocation, said the same way;
//! - `secrets`: the Redis password from the environment or a file, kept out
//!   of the command's environment;
//! - `error`: every failure and its exit status;
//! - `child`: the command in its own process group, tied to lockrun's life;
//! - `descendants`: lockrun as the subreaper of everything the command
//!   started, in any group or session: finding it, reaping it;
//! - `signals`: which signals lockrun catches and forwards;
//! - `lock`: a lock held on a set of servers, one server a quorum of one;
//!   every operation asks them all and counts by one majority rule; with
//!   `redis_conn`, the only modules that name a redis type. Its parts, each
//!   importing only parts listed after it (`lock.rs` itself uses them all):
//!   - `lock/role`: whose handle it is and how that run holds the lock,
//!     fixed when the handle is made;
//!   - `lock/attempt`: what an acquisition attempt asks for and finds;
//!   - `lock/server`: one server's part in a lock: scripts, replicas, what
//!     this run may have left there, its wake-up subscription, which
//!     follows the lock's cluster slot; `lock/server/one_key`: the same
//!     operations and the line one key at a time, while the lock's cluster
//!     slot is being migrated;
//!   - `lock/scripts`: the atomic Lua scripts, sent by hash, each in a
//!     module beside its file (`scripts/NAME.rs`, `NAME.lua`) with its
//!     keys and arguments, its call and its reply's decoding;
//!   - `lock/status`: each server's view and what a majority agrees on;
//!   - `lock/tally`: the majority rule;
//!   - `lock/error`: a server's failure, someone else's data at a lock key,
//!     a quorum short of a majority;
//!   - `lock/keys`: the lock's keys, declared once for Rust and the
//!     scripts, their Redis names, and the run's token;
//!   - `lock/records`: holder, waiter and done records;
//!   - `lock/history`: the run history's records, written by the release
//!     and merged over a quorum;
//!   - `lock/wake`: the wake-up messages of a waiting run;
//! - `redis_conn`: where Redis is and how to talk to it: `target` (URLs,
//!   one server, the primary Sentinel names, or a cluster; credentials kept
//!   out of messages; where each URL was given, `UrlSource`), `error` (what a failure means), `session` (one
//!   connection, time limits, `WAIT` for replicas, subscriptions, `SCAN`),
//!   `sentinel`, `cluster`, `hosts`;
//! - `secret_file`: reading a small file that holds a secret (a password, a
//!   TLS key), refused when every user may read or write it;
//! - `lease`: the lease deadline and renewal timing;
//! - `metrics`: the metrics file's format (`text`), its records of the runs
//!   that hold a lock and which of them are gone (`holders`), and one run's
//!   change merged into it under its lock file and replaced atomically
//!   (`file`);
//! - `clock`: the boot clock, sleeps that survive suspend, durations shown;
//! - `exit_code`: every status lockrun returns.

mod admin;
mod child;
pub mod cli;
mod clock;
mod config;
mod descendants;
mod error;
pub mod exit_code;
mod lease;
mod lock;
mod metrics;
mod notify;
mod redis_conn;
mod report;
mod run;
mod secret_file;
mod secrets;
mod signals;
mod supervise;
mod wait;

pub use crate::secrets::{PASSWORD_ENV, SENTINEL_PASSWORD_ENV};

use std::io;
use std::process::ExitCode;

use crate::config::{Invocation, Passwords};
use crate::error::Error;
use crate::exit_code::Exit;
use crate::lock::Token;
use crate::report::Message;
use crate::signals::{Blocked, Signals};

/// The whole program: parse, validate, run on a single-threaded runtime,
/// and turn the outcome into an exit status, reporting any error here and
/// nowhere else.
#[must_use]
pub fn main() -> ExitCode {
    // First of all, before any thread exists or any line is printed (the
    // first line starts stderr's writer thread): every thread inherits the
    // mask, and a thread that left these signals unblocked could be killed
    // by one with the lock held.
    let blocked = Blocked::now();
    ExitCode::from(start(blocked))
}

fn start(blocked: io::Result<Blocked>) -> u8 {
    // The file is read first, its values checked by the options' own
    // parsers, so that it can give the options their defaults; a file
    // that cannot be used is said after the command line's own mistakes.
    let options = cli::command();
    let file = config::file::load(std::env::var_os(config::file::CONFIG_ENV), &options);
    let presets = match &file {
        Ok(Some(file)) => file.presets(),
        _ => Vec::new(),
    };
    let cli = match cli::parse(options, presets) {
        Ok(Some(cli)) => cli,
        Ok(None) => return 0,
        // The key is not known yet: JSON says null.
        Err(err) => {
            report::set_format(cli::log_format_hint(), None);
            return exit(Err(err));
        }
    };
    // --log-format is a run's: status and release write for people.
    if cli.action.is_none() {
        report::set_format(config::log_format(&cli), cli.run.key.clone());
    }
    let file = match file {
        Ok(file) => file,
        Err(err) => return exit(Err(err)),
    };
    let passwords = Passwords {
        redis: std::env::var(PASSWORD_ENV).ok(),
        sentinel: std::env::var(SENTINEL_PASSWORD_ENV).ok(),
    };
    let invocation = match Invocation::from_cli(cli, passwords, file.as_ref()) {
        Ok(invocation) => invocation,
        Err(err) => return exit(Err(err)),
    };
    report::set_verbosity(invocation.verbosity());
    if let Some(file) = &file {
        report::say(Message::Config { path: &file.path });
    }
    if let Some(key) = invocation.exposed_key() {
        let (path, mode) = (&key.path, key.mode);
        report::say(Message::KeyFileReadable { path, mode });
    }
    // One thread: the command is spawned from the thread that lives as long
    // as lockrun, which the parent-death signal depends on.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(source) => {
            let doing = "start the async runtime";
            return exit(Err(Error::Internal { doing, source }));
        }
    };
    let outcome = runtime.block_on(execute(invocation, blocked));
    // Left to the exit, not dropped: dropping would wait for the runtime's
    // blocking threads, and a DNS lookup for the Redis host runs on one
    // (after a lookup that outlived its timeout, lockrun would hang there
    // after reporting the failure); shutting it down would close each of its
    // sockets and fds in turn, which the exit does anyway. Nothing in it has
    // work left: `execute` has returned, the command has been waited for.
    std::mem::forget(runtime);
    exit(outcome)
}

async fn execute(invocation: Invocation, blocked: io::Result<Blocked>) -> Result<Exit, Error> {
    match invocation {
        Invocation::Run(config) => {
            // Before anything is taken: a run that cannot catch signals or
            // make a token must not hold a lock.
            let signals = blocked
                .and_then(Signals::install)
                .map_err(|source| Error::Internal {
                    doing: "catch signals",
                    source,
                })?;
            let token = Token::generate().map_err(|source| Error::Internal {
                doing: "read random bytes for the lock token",
                source,
            })?;
            descendants::adopt_orphans().map_err(|source| Error::Internal {
                doing: "become the reaper of the command's orphans",
                source,
            })?;
            run::run(config, signals, token).await
        }
        Invocation::Status { lock, json } => {
            unblock(blocked);
            admin::status(lock, json).await.map(Exit::Status)
        }
        Invocation::Release {
            lock,
            force,
            holder,
        } => {
            unblock(blocked);
            admin::release(lock, force, holder.as_deref())
                .await
                .map(Exit::Status)
        }
        Invocation::List(list) => {
            unblock(blocked);
            admin::list(list).await.map(Exit::Status)
        }
        Invocation::History { lock, last, json } => {
            unblock(blocked);
            admin::history(lock, last, json).await.map(Exit::Status)
        }
        Invocation::Check { lock, check } => {
            unblock(blocked);
            Ok(Exit::Status(admin::check(lock, check).await))
        }
    }
}

/// For an invocation that takes no lock: a signal that ends it leaves
/// nothing behind, so Ctrl-C ends it as it ends any command.
fn unblock(blocked: io::Result<Blocked>) {
    if let Ok(blocked) = blocked {
        blocked.undo();
    }
}

/// The one place where an outcome becomes an exit status, and an error is
/// reported. A signal death is lockrun's own last act, once all is said.
fn exit(outcome: Result<Exit, Error>) -> u8 {
    let exit = outcome.unwrap_or_else(|err| {
        report::say(Message::Failed(&err));
        err.exit()
    });
    report::flush();
    match exit {
        Exit::Status(status) => status,
        Exit::Signal(signal) => signals::die_of(signal),
    }
}
