//! Each error's line, event and loudness, from its one arm.

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
