//! The error that ends an invocation, said as every message is: one arm per
//! error makes its line for people, its event for `--log-format json` and
//! how loudly it is said, from the same fields. The line is also the error's
//! `Display`, which settings errors and systemd's status read.

use std::fmt;
use std::time::Duration;

use crate::child::SpawnError;
use crate::clock::{show, show_exact, unix_now_us, whole, MS};
use crate::error::{Busy, Error, Unreleased};
use crate::lease::Loss;
use crate::lock::{is_gone_from_here, Holder};

use super::event::Event;
use super::message::{Said, Shown};

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&said(self).text)
    }
}

/// How `err` is said, its exit status in its event.
pub(super) fn said(err: &Error) -> Said {
    let always = |event: Event, text: String| (Shown::Always, event, text);
    let (shown, event, text) = match err {
        Error::Usage(message) => always(Event::error("error"), message.clone()),
        Error::Lock(err) => always(Event::error("error"), err.to_string()),
        Error::WaitedOut { last, waited } => always(
            Event::error("error"),
            format!("{last}; gave up after waiting {}", show(*waited)),
        ),
        // --busy-exit-code 0 means "skip quietly": cron mails any output.
        Error::Busy(busy) if busy.exit == 0 => (
            Shown::Verbose,
            busy_event(Event::info("busy"), busy),
            busy.to_string(),
        ),
        Error::Busy(busy) => (
            Shown::UnlessQuiet,
            busy_event(Event::warning("busy"), busy),
            busy.to_string(),
        ),
        Error::Spawn {
            program,
            cause,
            unreleased,
        } => always(
            Event::error("error"),
            format!(
                "{program}: {cause}{}{}",
                shell_hint(program, cause),
                then_unreleased(unreleased.as_deref())
            ),
        ),
        // The caller sent the signal; it knows why the run ended.
        Error::Interrupted(signal) => (
            Shown::Verbose,
            Event::info("interrupted").with("signal", signal.as_str()),
            format!("got {signal} while waiting for the lock; giving up"),
        ),
        Error::LeaseLost {
            lock,
            loss,
            unreleased,
        } => always(
            Event::error("lost").with("reason", loss_name(*loss)),
            format!(
                "lost the lock {lock}: {loss}; stopped the command{}",
                then_unreleased(unreleased.as_deref())
            ),
        ),
        // The stop itself was `stopping`, when it began.
        Error::TimedOut { unreleased } => always(
            Event::error("timed_out"),
            format!(
                "the command ran longer than --timeout; stopped it{}",
                then_unreleased(unreleased.as_deref())
            ),
        ),
        Error::Internal { doing, source } => {
            always(Event::error("error"), format!("cannot {doing}: {source}"))
        }
    };
    let event = event.with("exit_status", err.exit_code());
    Said { shown, event, text }
}

/// The `reason` of a `lost` event.
fn loss_name(loss: Loss) -> &'static str {
    match loss {
        Loss::Unconfirmed => "unconfirmed",
        Loss::TokenGone => "token_gone",
        Loss::Lapsed => "lapsed",
    }
}

/// For a command not found that is a shell line given as one word (`--
/// 'echo a; echo b'`), how to give it: no program is named like that.
fn shell_hint(program: &str, cause: &SpawnError) -> String {
    let shell_line = program
        .chars()
        .any(|c| c.is_whitespace() || ";|&<>()$`*?{}'\"\\".contains(c));
    if matches!(cause, SpawnError::NotFound) && shell_line {
        // Single-quoted, as sh reads it back.
        let quoted = format!("'{}'", program.replace('\'', r"'\''"));
        format!(
            "; lockrun runs a command without a shell: for a shell line, give -- sh -c {quoted}"
        )
    } else {
        String::new()
    }
}

/// A lock left unreleased, after why the run ended.
impl fmt::Display for Unreleased {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "could not release {}, it will expire within {}: {}",
            self.lock,
            show_exact(self.within),
            self.cause
        )
    }
}

/// What is left to say after why a run ended: the reason comes first.
fn then_unreleased(unreleased: Option<&Unreleased>) -> String {
    unreleased.map_or_else(String::new, |unreleased| format!("; {unreleased}"))
}

/// A busy lock's fields, after `event`'s name and level.
fn busy_event(event: Event, busy: &Busy) -> Event {
    let holder = busy.found.holder.as_ref().map(|h| {
        serde_json::json!({
            "host": h.host,
            "pid": h.pid,
            "command": h.command,
            "fencing_token": h.fence,
            "finished": h.finished_us.is_some(),
        })
    });
    event
        .with("held", busy.found.held)
        .with("holder", holder)
        .with("lease_left_ms", busy.found.left.map(|left| whole(left, MS)))
        .with("waiting", busy.found.waiting)
        .with("holding", busy.found.holding)
        .with("waited_ms", busy.waited.map(|waited| whole(waited, MS)))
        .with("superseded_by", busy.superseded_by.clone())
}

/// A busy lock's line.
impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runs = |n: u64| {
            if n == 1 {
                "1 run".to_owned()
            } else {
                format!("{n} runs")
            }
        };
        if let Some(by) = &self.superseded_by {
            write!(
                f,
                "{}: superseded by {by}, a newer run with --supersede",
                self.lock
            )?;
        } else if !self.found.held {
            write!(
                f,
                "{} is free, but {} waiting in line came first",
                self.lock,
                runs(self.found.waiting)
            )?;
        } else {
            holder_said(self, f)?;
            if self.found.waiting > 0 {
                write!(f, ", {} waiting in line", runs(self.found.waiting))?;
            }
        }
        write!(f, "; not running {}", self.command)?;
        if let Some(waited) = self.waited.filter(|_| self.superseded_by.is_none()) {
            write!(f, " after waiting {}", show(waited))?;
        }
        write!(f, " (exit {})", self.exit)
    }
}

/// Who holds the busy lock, and how much longer.
fn holder_said(busy: &Busy, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let since = |us: u64| show(Duration::from_micros(unix_now_us().saturating_sub(us)));
    let left = busy.found.left.map(show);
    if busy.found.holding > 0 {
        let runs = if busy.found.holding == 1 {
            "run"
        } else {
            "runs"
        };
        write!(
            f,
            "{} is held by {} {runs} together (--slots or --shared)",
            busy.lock, busy.found.holding
        )?;
        if let Some(left) = left {
            write!(f, ", the first lease expires in {left}")?;
        }
        return Ok(());
    }
    match &busy.found.holder {
        Some(
            h @ Holder {
                finished_us: Some(finished),
                ..
            },
        ) => {
            // Only kept for its --min-hold: the lease's end is the hold's.
            return write!(
                f,
                "{} is kept for --min-hold for {} more; the command ({} on {} pid {}) \
                 finished {} ago",
                busy.lock,
                left.as_deref().unwrap_or("a while"),
                h.command,
                h.host,
                h.pid,
                since(*finished)
            );
        }
        Some(h) if is_gone_from_here(&h.host, h.pid) => {
            return write!(
                f,
                "{} is held by {} pid {}, which is gone (no such process on this host): the \
                 lock is free when its lease expires{}",
                busy.lock,
                h.host,
                h.pid,
                left.map_or_else(String::new, |left| format!(" in {left}"))
            );
        }
        Some(h) => write!(
            f,
            "{} is held by {} pid {} for {}",
            busy.lock,
            h.host,
            h.pid,
            since(h.acquired_us)
        )?,
        None => write!(f, "{} is held by another run", busy.lock)?,
    }
    if let Some(left) = left {
        write!(f, ", lease expires in {left}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use nix::sys::signal::Signal;
    use serde_json::Value;

    use super::*;
    use crate::lock::HoldersAndWaiters;
    use crate::report::event::Context;

    /// `err` as said: who sees it, its JSON line raw and parsed.
    fn said_as_json(err: &Error) -> (Shown, String, Value) {
        let context = Context {
            key: Some("job".into()),
            host: "web-2".into(),
            pid: 41,
        };
        let Said { shown, event, text } = said(err);
        let line = context.json_line(event, &text, SystemTime::UNIX_EPOCH);
        let parsed = serde_json::from_str(&line).expect("one JSON object");
        (shown, line, parsed)
    }

    /// The names of `line`'s own fields, after the common ones, in order.
    fn own_fields<'a>(line: &str, names: &[&'a str]) -> Vec<&'a str> {
        let at = |name: &str| line.find(&format!("\"{name}\":"));
        let mut found: Vec<_> = names
            .iter()
            .filter_map(|name| Some((at(name)?, *name)))
            .collect();
        found.sort_unstable();
        found.into_iter().map(|(_, name)| name).collect()
    }

    fn busy(exit: u8) -> Box<Busy> {
        Box::new(Busy {
            lock: "lockrun:{job}".into(),
            found: HoldersAndWaiters {
                left: Some(Duration::from_millis(1500)),
                ..HoldersAndWaiters::unknown()
            },
            superseded_by: None,
            command: "true".into(),
            waited: Some(Duration::from_secs(2)),
            exit,
        })
    }

    #[test]
    fn a_command_not_found_says_how_to_give_a_shell_line() {
        let not_found = |program: &str| Error::Spawn {
            program: program.into(),
            cause: SpawnError::NotFound,
            unreleased: None,
        };
        assert_eq!(not_found("nope").to_string(), "nope: command not found");
        assert_eq!(
            not_found("echo 'a'; echo b").to_string(),
            "echo 'a'; echo b: command not found; lockrun runs a command without a shell: \
             for a shell line, give -- sh -c 'echo '\\''a'\\''; echo b'"
        );
    }

    #[test]
    fn an_error_is_its_own_event_with_the_exit_status() {
        let mut quiet = busy(0);
        quiet.found.waiting = 2;
        quiet.waited = None;
        let (shown, line, event) = said_as_json(&Error::Busy(quiet));
        assert_eq!(shown, Shown::Verbose);
        assert_eq!(
            (&event["event"], &event["level"]),
            (&"busy".into(), &"info".into())
        );
        let fields = [
            "held",
            "holder",
            "lease_left_ms",
            "waiting",
            "holding",
            "waited_ms",
            "superseded_by",
            "exit_status",
        ];
        assert_eq!(own_fields(&line, &fields), fields);
        assert_eq!(event["lease_left_ms"], 1500);
        let lost = Error::LeaseLost {
            lock: "job".into(),
            loss: Loss::TokenGone,
            unreleased: None,
        };
        let (shown, line, event) = said_as_json(&lost);
        assert_eq!(shown, Shown::Always);
        assert_eq!(
            (&event["event"], &event["level"]),
            (&"lost".into(), &"error".into())
        );
        assert_eq!(
            own_fields(&line, &["reason", "exit_status"]),
            ["reason", "exit_status"]
        );
        assert_eq!(
            (&event["reason"], &event["exit_status"]),
            (&"token_gone".into(), &76.into())
        );
        // The stop was said when it began: the end is an event of its own.
        let (_, line, event) = said_as_json(&Error::TimedOut { unreleased: None });
        assert_eq!(
            (&event["event"], &event["level"]),
            (&"timed_out".into(), &"error".into())
        );
        assert!(line.ends_with(",\"exit_status\":124}\n"), "{line}");
        let (_, _, event) = said_as_json(&Error::Usage("no".into()));
        assert_eq!(event["event"], "error");
        let (shown, _, event) = said_as_json(&Error::Interrupted(Signal::SIGTERM));
        assert_eq!(shown, Shown::Verbose);
        assert_eq!(
            (&event["event"], &event["signal"]),
            (&"interrupted".into(), &"SIGTERM".into())
        );
    }

    #[test]
    fn a_lock_kept_for_min_hold_says_its_command_finished() {
        let finished = unix_now_us() - 2_000_000;
        let busy = Busy {
            lock: "job".into(),
            found: HoldersAndWaiters {
                left: Some(Duration::from_secs(3)),
                holder: Some(Holder {
                    host: "web-2".into(),
                    pid: 7,
                    command: "./invoice.sh".into(),
                    acquired_us: finished - 1_000_000,
                    fence: 1,
                    finished_us: Some(finished),
                    ..Holder::default()
                }),
                ..HoldersAndWaiters::unknown()
            },
            superseded_by: None,
            command: "./invoice.sh".into(),
            waited: None,
            exit: 75,
        };
        let line = busy.to_string();
        assert!(
            line.starts_with(
                "job is kept for --min-hold for 3s more; the command (./invoice.sh on web-2 \
                 pid 7) finished 2s"
            ),
            "{line}"
        );
        assert!(
            line.ends_with("; not running ./invoice.sh (exit 75)"),
            "{line}"
        );
    }

    #[test]
    fn busy_says_who_waits_and_who_superseded() {
        let mut busy = busy(75);
        busy.found.waiting = 2;
        assert_eq!(
            busy.to_string(),
            "lockrun:{job} is held by another run, lease expires in 2s, 2 runs waiting in \
             line; not running true after waiting 2s (exit 75)"
        );
        busy.found.held = false;
        busy.found.left = None;
        busy.found.waiting = 1;
        busy.waited = None;
        assert_eq!(
            busy.to_string(),
            "lockrun:{job} is free, but 1 run waiting in line came first; not running true \
             (exit 75)"
        );
        busy.superseded_by = Some("ci-7 pid 42".into());
        busy.waited = Some(Duration::from_secs(3));
        assert_eq!(
            busy.to_string(),
            "lockrun:{job}: superseded by ci-7 pid 42, a newer run with --supersede; not \
             running true (exit 75)"
        );
    }

    #[test]
    fn busy_with_exit_zero_is_only_verbose() {
        assert_eq!(said(&Error::Busy(busy(75))).shown, Shown::UnlessQuiet);
        assert_eq!(said(&Error::Busy(busy(0))).shown, Shown::Verbose);
        assert_eq!(
            Error::Busy(busy(75)).to_string(),
            "lockrun:{job} is held by another run, lease expires in 2s; not running true \
             after waiting 2s (exit 75)"
        );
    }
}
