//! The operator's subcommands: `lockrun status` and `lockrun release`.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use crate::cli::{RedisArgs, ReleaseArgs, StatusArgs};
use crate::config::{show, validate_key, UsageError};
use crate::exit_code;
use crate::lock::{self, Holder, Keys};
use crate::redis_conn::{Session, Target};
use crate::report::Report;

/// Limit on each Redis call of a subcommand.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Exit status of `lockrun status` for a free lock.
const FREE: u8 = 1;

/// `lockrun status --json` prints one object of this shape. Field names are
/// part of lockrun's interface: add fields, never rename or remove them.
#[derive(Debug, Serialize)]
pub struct StatusJson {
    pub key: String,
    pub redis_key: String,
    pub held: bool,
    /// Lease time left in ms; null when free or when the key has no expiry.
    pub ttl_left_ms: Option<u64>,
    pub holder: Option<HolderJson>,
    /// The last fencing token handed out for this name (null if never).
    pub last_fencing_token: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct HolderJson {
    pub host: String,
    pub pid: u32,
    pub command: String,
    /// Server time of the acquisition, ms since the Unix epoch.
    pub acquired_at_ms: u64,
    pub held_for_ms: u64,
    pub fencing_token: u64,
}

/// A validated subcommand target.
pub struct Admin {
    name: String,
    keys: Keys,
    session: Session,
    report: Report,
}

impl Admin {
    pub fn new(
        key: &str,
        redis: &RedisArgs,
        password: Option<String>,
        report: Report,
    ) -> Result<Self, UsageError> {
        let name = validate_key(key.to_owned())?;
        let target = Target::parse(&redis.url, password)?;
        Ok(Admin {
            keys: Keys::new(&redis.prefix, &name),
            name,
            session: Session::new(target, CALL_TIMEOUT),
            report,
        })
    }

    pub async fn status(mut self, args: &StatusArgs) -> u8 {
        let status = match lock::status(&mut self.session, &self.keys).await {
            Ok(status) => status,
            Err(err) => {
                self.report.error(err);
                return exit_code::REDIS_UNAVAILABLE;
            }
        };
        let holder = status.holder.as_ref().map(|h| HolderJson {
            host: h.host.clone(),
            pid: h.pid,
            command: h.command.clone(),
            acquired_at_ms: h.acquired_us / 1000,
            held_for_ms: status.now_us.saturating_sub(h.acquired_us) / 1000,
            fencing_token: h.fence,
        });
        let json = StatusJson {
            key: self.name.clone(),
            redis_key: self.keys.lock.clone(),
            held: status.held.is_some(),
            ttl_left_ms: status.held.flatten().map(|d| d.as_millis() as u64),
            holder,
            last_fencing_token: status.last_fence,
        };
        let text = if args.json {
            serde_json::to_string(&json).unwrap_or_default()
        } else {
            status_text(&json)
        };
        let _ = writeln!(std::io::stdout().lock(), "{text}");
        if json.held {
            0
        } else {
            FREE
        }
    }

    pub async fn release(mut self, args: &ReleaseArgs) -> u8 {
        if !args.force {
            self.report.error(format_args!(
                "refusing to release {}: another run may hold it, and removing its lock lets a \
                 second copy start while the first is still being stopped; add --force to \
                 remove it anyway",
                self.keys.lock
            ));
            return exit_code::USAGE;
        }
        match lock::force_release(&mut self.session, &self.keys).await {
            Ok(Some(holder)) => {
                let _ = writeln!(
                    std::io::stdout().lock(),
                    "released {} held by {}",
                    self.name,
                    describe(&holder)
                );
                0
            }
            Ok(None) => {
                let _ = writeln!(std::io::stdout().lock(), "{} was not held", self.name);
                0
            }
            Err(err) => {
                self.report.error(err);
                exit_code::REDIS_UNAVAILABLE
            }
        }
    }
}

fn describe(holder: &Holder) -> String {
    if holder.host.is_empty() {
        return "an unknown holder".into();
    }
    format!(
        "{} pid {} (fencing token {}): {}",
        holder.host, holder.pid, holder.fence, holder.command
    )
}

fn status_text(json: &StatusJson) -> String {
    if !json.held {
        return match json.last_fencing_token {
            Some(fence) => format!("{}: free (last fencing token {fence})", json.key),
            None => format!("{}: free", json.key),
        };
    }
    let left = json
        .ttl_left_ms
        .map(|ms| format!("lease expires in {}", show(Duration::from_millis(ms))))
        .unwrap_or_else(|| "no expiry (set outside lockrun?)".into());
    match &json.holder {
        Some(h) => format!(
            "{}: held by {} pid {} for {}, {left}, fencing token {}\n  command: {}",
            json.key,
            h.host,
            h.pid,
            show(Duration::from_millis(h.held_for_ms)),
            h.fencing_token,
            h.command
        ),
        None => format!("{}: held (holder unknown), {left}", json.key),
    }
}
