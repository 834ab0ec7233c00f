//! The order of a run's JSON events when lockrun stops its command:
//! `stopping` is written when the stop starts, with why, the signal sent
//! first and the time left before SIGKILL, and always before the
//! `released`, `lost` or `timed_out` that the command's end brings. One
//! test per way a run stops its command: `--timeout`, a lost lease (token
//! gone, renewals failing, lockrun paused past its lease) and a signal
//! lockrun passes on.

use nix::sys::signal::Signal;
use serde_json::{json, Map, Value};

use crate::harness::*;
use crate::log_format::checked_events;

type Events = Vec<Map<String, Value>>;

/// The event names in order, without those whose number depends on timing
/// alone: `renewed`, and the `timed` ones a test names.
fn story(events: &Events, timed: &[&str]) -> Vec<String> {
    names(events)
        .into_iter()
        .filter(|name| *name != "renewed" && !timed.contains(name))
        .map(str::to_owned)
        .collect()
}

fn names(events: &Events) -> Vec<&str> {
    events
        .iter()
        .map(|event| event["event"].as_str().unwrap_or(""))
        .collect()
}

/// The `stopping` event's level and own fields: level, reason, signal,
/// grace_ms, exit_status.
fn stopping(events: &Events) -> Value {
    let event = events
        .iter()
        .find(|event| event["event"] == "stopping")
        .expect("a stopping event");
    json!([
        event["level"],
        event["reason"],
        event["signal"],
        event["grace_ms"],
        event["exit_status"]
    ])
}

fn field<'a>(events: &'a Events, name: &str, field: &str) -> &'a Value {
    let event = events
        .iter()
        .find(|event| event["event"] == name)
        .unwrap_or_else(|| panic!("no {name} event"));
    &event[field]
}

#[test]
fn a_timeout_says_stopping_then_released_then_timed_out() {
    let redis = Server::start();
    let ran = redis
        .lockrun("job")
        .args(["--log-format", "json", "-v", "--timeout", "300ms"])
        .args(["--kill-grace", "2s"])
        .command(["sleep", "30"])
        .run();
    ran.assert(Expect::code(124).stderr_any());
    let events = checked_events(&ran.stderr, Some("job"));
    assert_eq!(
        story(&events, &[]),
        ["acquired", "stopping", "released", "timed_out"]
    );
    assert_eq!(
        stopping(&events),
        json!(["warning", "timeout", "SIGTERM", 2000, 124])
    );
    assert_eq!(
        field(&events, "stopping", "message"),
        "the command ran longer than --timeout; stopping the command: SIGTERM now, SIGKILL in 2s"
    );
    // sleep died of the SIGTERM, well before the SIGKILL was due.
    assert_eq!(field(&events, "released", "exit_status"), 143);
    assert_eq!(field(&events, "timed_out", "level"), "error");
    assert_eq!(field(&events, "timed_out", "exit_status"), 124);

    // A command that ignores SIGTERM gets the SIGKILL the event announced.
    let ignores = redis
        .lockrun("job")
        .args(["--log-format", "json", "-v", "--timeout", "300ms"])
        .args(["--kill-grace", "700ms"])
        .command(["sh", "-c", "trap '' TERM; sleep 30"])
        .run();
    ignores.assert(Expect::code(124).stderr_any());
    let events = checked_events(&ignores.stderr, Some("job"));
    assert_eq!(
        story(&events, &[]),
        ["acquired", "stopping", "released", "timed_out"]
    );
    assert_eq!(
        stopping(&events),
        json!(["warning", "timeout", "SIGTERM", 700, 124])
    );
    assert_eq!(field(&events, "released", "exit_status"), 137);
    let held = field(&events, "released", "held_ms").as_u64().unwrap_or(0);
    assert!(
        held >= 1000,
        "killed after {held} ms, before the grace ended"
    );
}

#[test]
fn a_lease_whose_token_is_gone_says_stopping_then_lost() {
    let redis = Server::start();
    // Renewals every second find the loss soon; with a 10 s lease, the
    // whole kill grace is left when they do.
    let mut holder = redis
        .lockrun("job")
        .args(["--log-format", "json", "-v", "--ttl", "10s"])
        .args(["--renew-every", "1s", "--kill-grace", "500ms"])
        .hold();
    redis.force_release("job", &[]);
    holder.end().assert(Expect::code(76).stderr_any());
    let events = checked_events(&holder.stderr(), Some("job"));
    assert_eq!(story(&events, &[]), ["acquired", "stopping", "lost"]);
    assert_eq!(
        stopping(&events),
        json!(["warning", "lost", "SIGTERM", 500, 76])
    );
    let message = field(&events, "stopping", "message").as_str().unwrap_or("");
    assert!(
        message.starts_with("lost the lock job: its key no longer holds this run's token")
            && message.ends_with("; stopping the command: SIGTERM now, SIGKILL in 500ms"),
        "{message}"
    );
    assert_eq!(field(&events, "lost", "reason"), "token_gone");
    assert_eq!(field(&events, "lost", "exit_status"), 76);
}

#[test]
fn renewals_that_fail_say_stopping_before_lost() {
    let redis = Server::start();
    let mut holder = redis
        .lockrun("job")
        .args(["--log-format", "json", "-v", "--ttl", "3s"])
        .args(["--kill-grace", "1s"])
        .hold();
    redis.pause();
    let ended = holder.end();
    redis.resume();
    ended.assert(Expect::code(76).stderr_any());
    let events = checked_events(&holder.stderr(), Some("job"));
    // Renewals are retried until the lease is lost for good, before and
    // after the stop began.
    assert_eq!(
        story(&events, &["renewal_failed"]),
        ["acquired", "stopping", "lost"]
    );
    let names = names(&events);
    let failed = names.iter().position(|&name| name == "renewal_failed");
    let stop = names.iter().position(|&name| name == "stopping");
    assert!(
        failed < stop,
        "no renewal failed before the stop: {names:?}"
    );
    // SIGTERM a kill grace before the deadline: SIGKILL comes at it.
    let [level, reason, signal, grace, status] = stopping(&events)
        .as_array()
        .cloned()
        .and_then(|fields| <[Value; 5]>::try_from(fields).ok())
        .expect("five fields");
    assert_eq!(
        json!([level, reason, signal, status]),
        json!(["warning", "lost", "SIGTERM", 76])
    );
    assert!(grace.as_u64().is_some_and(|ms| ms <= 1000), "grace {grace}");
    assert_eq!(field(&events, "lost", "reason"), "unconfirmed");
}

#[test]
fn a_lockrun_paused_past_its_lease_says_stopping_with_sigkill_then_lost() {
    let redis = Server::start();
    let mut holder = redis
        .lockrun("job")
        .args(["--log-format", "json", "-v", "--ttl", "2s"])
        .hold();
    holder.run.signal(Signal::SIGSTOP);
    // Redis expired the key: lockrun's own deadline, earlier, has passed.
    assert!(
        eventually(PATIENCE, || !redis.is_locked("job")),
        "the lease never expired"
    );
    holder.run.signal(Signal::SIGCONT);
    holder.end().assert(Expect::code(76).stderr_any());
    let events = checked_events(&holder.stderr(), Some("job"));
    assert_eq!(story(&events, &[]), ["acquired", "stopping", "lost"]);
    assert_eq!(
        stopping(&events),
        json!(["warning", "lost", "SIGKILL", 0, 76])
    );
    assert_eq!(field(&events, "lost", "reason"), "lapsed");
}

#[test]
fn a_forwarded_sigterm_says_stopping_then_released() {
    let redis = Server::start();
    let mut holder = redis
        .lockrun("job")
        .args(["--log-format", "json", "-v"])
        .hold_script("sh", r#"echo $$ > "$1/pid"; exec sleep 60"#);
    holder.run.signal(Signal::SIGTERM);
    holder
        .end()
        .assert(Expect::killed_by(Signal::SIGTERM).stderr_any());
    let events = checked_events(&holder.stderr(), Some("job"));
    assert_eq!(story(&events, &[]), ["acquired", "stopping", "released"]);
    // The command decides how long it takes: no SIGKILL of lockrun's own.
    assert_eq!(
        stopping(&events),
        json!(["info", "signal", "SIGTERM", null, null])
    );
    assert_eq!(
        field(&events, "stopping", "message"),
        "forwarding SIGTERM to the command"
    );
    assert_eq!(field(&events, "released", "exit_status"), 143);
}

/// Notes each SIGTERM it gets in `$1/log`, and exits 42 once the test opens
/// the holder's gate (bash's `read` returns when a trapped signal comes, so
/// that the trap runs at once, and then reads again). Its stderr is
/// lockrun's, which must hold JSON only: the shell's words go elsewhere.
const NOTES_TERM: &str = r#"exec 2>/dev/null
trap 'echo TERM >> "$1/log"' TERM
echo $$ > "$1/pid"
until read -r _ < "$1/go"; do :; done
exit 42"#;

#[test]
fn a_second_sigterm_is_only_forwarded() {
    let redis = Server::start();
    let mut holder = redis
        .lockrun("job")
        .args(["--log-format", "json", "-v"])
        .hold_script("bash", NOTES_TERM);
    let log = holder.dir().join("log");
    for times in ["TERM\n", "TERM\nTERM\n"] {
        holder.run.signal(Signal::SIGTERM);
        assert!(
            eventually(PATIENCE, || read_log(&log) == times),
            "the command never got SIGTERM: {:?}",
            read_log(&log)
        );
    }
    holder.go();
    holder.end().assert(Expect::code(42).stderr_any());
    let events = checked_events(&holder.stderr(), Some("job"));
    assert_eq!(
        story(&events, &[]),
        ["acquired", "stopping", "forwarded", "released"]
    );
    assert_eq!(field(&events, "forwarded", "signal"), "SIGTERM");
    assert_eq!(field(&events, "released", "exit_status"), 42);
}
