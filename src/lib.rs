//! lockrun runs a command under a distributed lock held in Redis.
//!
//! Module map:
//!
//! - `cli`: the command line (clap), nothing else;
//! - `config`: validated settings, the timing rules clap cannot express;
//! - `redis_conn`: where Redis is, credentials kept out of messages, timeouts;
//! - `lock` (+ `lock/*.lua`): the Redis protocol as atomic scripts;
//! - `wait`: getting the lock, waiting for a release if asked;
//! - `lease`: the lease deadline on the boot clock, renewal timing;
//! - `child`: the command in its own process group, tied to lockrun's life;
//! - `signals`: which signals lockrun catches and forwards;
//! - `run`: the one place that puts lock, lease and command together;
//! - `admin`: `lockrun status` and `lockrun release`;
//! - `exit_code`: every status lockrun returns;
//! - `report`: the one-line messages on stderr.

pub mod admin;
pub mod child;
pub mod cli;
pub mod config;
pub mod exit_code;
pub mod lease;
pub mod lock;
pub mod redis_conn;
pub mod report;
pub mod run;
pub mod signals;
pub mod wait;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Action, Cli};
use crate::config::{RunConfig, UsageError};
use crate::report::Report;

/// Environment variable with the Redis password, so it never shows in `ps`.
pub const PASSWORD_ENV: &str = "LOCKRUN_REDIS_PASSWORD";

/// The whole program: parse, then run on a single-threaded runtime.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version are not errors.
        Err(err) if !err.use_stderr() => {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            Report::default().error(one_line(&err));
            return ExitCode::from(exit_code::USAGE);
        }
    };
    // One thread: the command is spawned from the thread that lives as long
    // as lockrun, which the parent-death signal depends on.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            Report::default().error(format_args!("cannot start: {err}"));
            return ExitCode::from(exit_code::INTERNAL);
        }
    };
    let status = runtime.block_on(dispatch(cli));
    // Dropping the runtime would wait for its blocking threads, and a DNS
    // lookup for the Redis host runs on one: after a lookup that outlived
    // its timeout, lockrun would hang there after reporting the failure.
    runtime.shutdown_background();
    ExitCode::from(status)
}

async fn dispatch(cli: Cli) -> u8 {
    let password = std::env::var(PASSWORD_ENV).ok();
    let report = Report::default();
    let usage = |err: UsageError| {
        report.error(err);
        exit_code::USAGE
    };
    match cli.action {
        None => match RunConfig::from_args(cli.run, password) {
            Ok(config) => run::run(config).await,
            Err(err) => usage(err),
        },
        Some(Action::Status(args)) => {
            match admin::Admin::new(&args.key, &args.redis, password, report) {
                Ok(admin) => admin.status(&args).await,
                Err(err) => usage(err),
            }
        }
        Some(Action::Release(args)) => {
            match admin::Admin::new(&args.key, &args.redis, password, report) {
                Ok(admin) => admin.release(&args).await,
                Err(err) => usage(err),
            }
        }
    }
}

/// clap's usage error as one line, like every other lockrun error: what is
/// wrong (and clap's tip, if any), then where to look. clap's own rendering
/// spreads it over a paragraph with a usage block, which a cron mail or a
/// journal line cuts apart.
fn one_line(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let mut line = String::new();
    for part in rendered
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(|l| l.trim().trim_start_matches("error: "))
        .filter(|l| !l.is_empty())
    {
        if !line.is_empty() {
            line += if line.ends_with(':') { " " } else { "; " };
        }
        line += part;
    }
    line + "; see 'lockrun --help'"
}
