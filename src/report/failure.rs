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
mod tests;
