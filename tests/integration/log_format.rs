//! `--log-format json`: every line on stderr is one JSON object with the
//! common fields and its event's own, each of the type the man page's LOG
//! FORMAT section gives. The schema is read from that section, so the page
//! and the test cannot drift apart.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::generated::read;
use crate::harness::*;

/// Field name → documented type ("integer", "string or null", ...), in the
/// order documented.
type Fields = Vec<(String, String)>;

/// The LOG FORMAT section as data: the common fields, and each event's own.
struct Schema {
    common: Fields,
    events: BTreeMap<String, Fields>,
}

/// Reads the schema from the man page: each `.SS` is "common fields" or an
/// event, and each `.TP` tag `\fBNAME\fR \fITYPE\fR` under it a field.
fn schema() -> Schema {
    let page = read("man/sections.roff");
    let start = page
        .find(".SH \"LOG FORMAT\"\n")
        .expect("man/sections.roff has a LOG FORMAT section");
    let section = &page[start..];
    let section = &section[..section[1..]
        .find("\n.SH ")
        .map_or(section.len(), |end| end + 1)];
    let mut schema = Schema {
        common: Vec::new(),
        events: BTreeMap::new(),
    };
    let mut current: Option<String> = None;
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if let Some(heading) = line.strip_prefix(".SS ") {
            let name = heading.trim_matches('"').to_string();
            if name != "common fields" {
                assert!(
                    name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                    "event heading {name:?} in LOG FORMAT"
                );
                schema.events.insert(name.clone(), Vec::new());
            }
            current = Some(name);
        } else if line == ".TP" {
            let Some(current) = &current else { continue };
            let tag = lines.next().expect("a .TP tag");
            let field = parse_field(tag);
            match schema.events.get_mut(current) {
                Some(fields) => fields.push(field),
                None => schema.common.push(field),
            }
        }
    }
    assert!(
        !schema.common.is_empty() && !schema.events.is_empty(),
        "LOG FORMAT is empty"
    );
    schema
}

/// `\fBname\fR \fItype\fR` → (name, type).
fn parse_field(tag: &str) -> (String, String) {
    let parsed = tag.strip_prefix("\\fB").and_then(|rest| {
        let (name, rest) = rest.split_once("\\fR \\fI")?;
        Some((name.to_string(), rest.strip_suffix("\\fR")?.to_string()))
    });
    let (name, kind) = parsed
        .unwrap_or_else(|| panic!("LOG FORMAT field {tag:?} is not `\\fBname\\fR \\fItype\\fR`"));
    let base = kind.strip_suffix(" or null").unwrap_or(&kind);
    assert!(
        ["string", "integer", "boolean", "object"].contains(&base),
        "field {name}: unknown type {kind:?}"
    );
    (name, kind)
}

fn has_type(value: &Value, kind: &str) -> bool {
    let (base, nullable) = match kind.strip_suffix(" or null") {
        Some(base) => (base, true),
        None => (kind, false),
    };
    match value {
        Value::Null => nullable,
        Value::String(_) => base == "string",
        Value::Number(n) => base == "integer" && (n.is_u64() || n.is_i64()),
        Value::Bool(_) => base == "boolean",
        Value::Object(_) => base == "object",
        Value::Array(_) => false,
    }
}

/// Checks every line of `stderr` against the schema and returns the events,
/// in order, as parsed objects.
#[track_caller]
pub fn checked_events(stderr: &str, key: Option<&str>) -> Vec<serde_json::Map<String, Value>> {
    let schema = schema();
    let mut parsed = Vec::new();
    for line in stderr.lines() {
        let object: serde_json::Map<String, Value> = serde_json::from_str(line)
            .unwrap_or_else(|err| panic!("not one JSON object ({err}): {line:?}\n{stderr}"));
        let names: Vec<&String> = object.keys().collect();
        let event = object
            .get("event")
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no event: {line}"));
        let own = schema
            .events
            .get(event)
            .unwrap_or_else(|| panic!("event {event:?} is not in LOG FORMAT: {line}"));
        let documented: Vec<&String> = schema
            .common
            .iter()
            .chain(own)
            .map(|(name, _)| name)
            .collect();
        let (mut want, mut got) = (documented.clone(), names.clone());
        want.sort();
        got.sort();
        assert_eq!(
            got, want,
            "fields of {event} differ from LOG FORMAT: {line}"
        );
        for (name, kind) in schema.common.iter().chain(own) {
            assert!(
                has_type(&object[name], kind),
                "{name} is not {kind}: {line}"
            );
        }
        assert_eq!(object["key"].as_str(), key, "{line}");
        assert_eq!(object["host"], hostname(), "{line}");
        assert!(
            ["error", "warning", "info"].contains(&object["level"].as_str().unwrap_or("")),
            "{line}"
        );
        assert_ts(object["ts"].as_str().unwrap_or(""), line);
        assert!(
            !object["message"]
                .as_str()
                .unwrap_or("lockrun: ")
                .starts_with("lockrun: "),
            "{line}"
        );
        parsed.push(object);
    }
    parsed
}

/// RFC 3339, UTC, milliseconds: 2026-12-01T15:04:05.123Z.
#[track_caller]
fn assert_ts(ts: &str, line: &str) {
    let shape = ts.len() == 24
        && ts.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            10 => b == b'T',
            13 | 16 => b == b':',
            19 => b == b'.',
            23 => b == b'Z',
            _ => b.is_ascii_digit(),
        });
    assert!(
        shape,
        "ts {ts:?} is not RFC 3339 UTC with milliseconds: {line}"
    );
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

fn names(events: &[serde_json::Map<String, Value>]) -> Vec<&str> {
    events
        .iter()
        .map(|event| event["event"].as_str().unwrap_or(""))
        .collect()
}

fn find<'a>(
    events: &'a [serde_json::Map<String, Value>],
    name: &str,
) -> &'a serde_json::Map<String, Value> {
    events
        .iter()
        .find(|event| event["event"] == name)
        .unwrap_or_else(|| panic!("no {name} event in {:?}", names(events)))
}

/// Every event lockrun writes is made in src/report/ (its messages, and the
/// error that ends a run), and each names itself once there as a literal:
/// `Event::info("acquired")`, or `Event::new(level, "busy")`.
#[test]
fn every_documented_event_is_one_lockrun_can_write_and_every_written_one_is_documented() {
    let dir = crate::generated::repo().join("src/report");
    let mut source = std::fs::read_to_string(dir.with_extension("rs")).expect("read report.rs");
    for entry in std::fs::read_dir(&dir).expect("read src/report").flatten() {
        source += &std::fs::read_to_string(entry.path()).expect("read source");
    }
    let documented = schema().events;
    for event in documented.keys() {
        assert!(
            source.contains(&format!("\"{event}\")")),
            "LOG FORMAT documents {event}, which src/report never names"
        );
    }
    for made in [
        "Event::info(\"",
        "Event::warning(\"",
        "Event::error(\"",
        "level, \"",
    ] {
        for (at, _) in source.match_indices(made) {
            let name = &source[at + made.len()..];
            let name = &name[..name.find('"').expect("a closing quote")];
            assert!(
                documented.contains_key(name),
                "src/report writes the event {name}, which LOG FORMAT does not document"
            );
        }
    }
}

#[test]
fn a_busy_run_writes_one_busy_event_with_its_holder() {
    let redis = Server::start();
    let holder = redis.lockrun("job").hold();
    let ran = redis
        .lockrun("job")
        .args(["--log-format", "json"])
        .command(["true"])
        .run();
    // stderr: checked_events reads every line.
    ran.assert(Expect::code(75).stderr_any());
    let events = checked_events(&ran.stderr, Some("job"));
    assert_eq!(names(&events), ["busy"]);
    let busy = &events[0];
    assert_eq!(busy["level"], "warning");
    assert_eq!(busy["exit_status"], 75);
    assert_eq!(busy["holder"]["fencing_token"], holder.fence());
    assert!(busy["holder"]["pid"].is_u64() && busy["holder"]["host"].is_string());
    assert!(busy["lease_left_ms"]
        .as_u64()
        .is_some_and(|ms| ms <= 30_000));
    assert!(busy["message"]
        .as_str()
        .unwrap_or("")
        .starts_with("job is held by "));

    let quiet = redis
        .lockrun("job")
        .args(["--log-format", "json", "-q"])
        .command(["true"])
        .run();
    quiet.assert(Expect::code(75));
    holder.go();
}

#[test]
fn a_waiting_run_says_its_place_then_acquires_and_releases() {
    let redis = Server::start();
    let mut holder = redis.lockrun("job").hold();
    let dir = scratch();
    let log = dir.path().join("stderr");
    // The environment variable, this time.
    let mut waiter = redis
        .lockrun("job")
        .args(["--wait", "30s", "-v"])
        .env("LOCKRUN_LOG_FORMAT", "json")
        .command(["true"])
        .stderr(log_file(&log))
        .spawn();
    assert!(
        eventually(PATIENCE, || redis.in_line("job") == 1),
        "the waiter never took its place: {}",
        read_log(&log)
    );
    holder.go();
    holder.end().assert(Expect::success());
    waiter.exits_saying(Expect::success(), || read_log(&log));
    let events = checked_events(&read_log(&log), Some("job"));
    assert_eq!(names(&events), ["waiting", "acquired", "released"]);
    let waiting = &events[0];
    assert_eq!(
        (&waiting["queued"], &waiting["place"], &waiting["waiting"]),
        (&true.into(), &1.into(), &1.into())
    );
    let acquired = &events[1];
    assert!(acquired["fencing_token"]
        .as_u64()
        .is_some_and(|token| token > holder.fence()));
    assert!(acquired["waited_ms"].as_u64().is_some());
    assert_eq!(events[2]["exit_status"], 0);
}

#[test]
fn a_verbose_run_writes_each_acquire_renewal_and_release() {
    let redis = Server::start();
    let ran = redis
        .lockrun("job")
        .args(["--log-format", "json", "-v", "--ttl", "900ms"])
        .command(["sh", "-c", "sleep 1; exit 3"])
        .run();
    ran.assert(Expect::code(3).stderr_any());
    let events = checked_events(&ran.stderr, Some("job"));
    let names = names(&events);
    assert_eq!(names.first(), Some(&"acquired"), "{names:?}");
    assert_eq!(names.last(), Some(&"released"), "{names:?}");
    assert!(names.contains(&"renewed"), "{names:?}");
    let acquired = find(&events, "acquired");
    assert!(acquired["message"]
        .as_str()
        .unwrap_or("")
        .starts_with("acquired lockrun:{job} on "));
    assert!(acquired["server"]
        .as_str()
        .is_some_and(|server| server.ends_with(" (from --redis)")));
    assert!(events.iter().all(|event| event["pid"] == events[0]["pid"]));
    let released = find(&events, "released");
    assert_eq!(released["exit_status"], 3);
    assert!(released["held_ms"].as_u64().is_some_and(|ms| ms >= 900));

    let kept = redis
        .lockrun("kept")
        .args(["--log-format", "json", "-v", "--min-hold", "1m"])
        .command(["true"])
        .run();
    kept.assert(Expect::success().stderr_any());
    let events = checked_events(&kept.stderr, Some("kept"));
    assert!(find(&events, "kept")["kept_ms"]
        .as_u64()
        .is_some_and(|ms| ms > 50_000));
}

#[test]
fn a_lost_lease_is_a_lost_event() {
    let mut redis = Server::start();
    let mut holder = redis
        .lockrun("job")
        .args(["--log-format", "json", "--ttl", "2s"])
        .hold();
    redis.restart_empty();
    holder.end().assert(Expect::code(76).stderr_any());
    let events = checked_events(&holder.stderr(), Some("job"));
    let lost = events.last().expect("a line");
    assert_eq!(
        (&lost["event"], &lost["level"]),
        (&"lost".into(), &"error".into()),
        "{events:?}"
    );
    assert_eq!(lost["exit_status"], 76);
    assert!(["token_gone", "unconfirmed"].contains(&lost["reason"].as_str().unwrap_or("")));
}

#[test]
fn a_timeout_ends_with_a_timed_out_event() {
    let redis = Server::start();
    let ran = redis
        .lockrun("job")
        .args([
            "--log-format",
            "json",
            "--timeout",
            "300ms",
            "--kill-grace",
            "1s",
        ])
        .command(["sleep", "30"])
        .run();
    ran.assert(Expect::code(124).stderr_any());
    let events = checked_events(&ran.stderr, Some("job"));
    // Without --verbose, only the end: `stopping` is progress (events.rs).
    assert_eq!(names(&events), ["timed_out"]);
    assert_eq!(events[0]["level"], "error");
    assert_eq!(events[0]["exit_status"], 124);
    assert!(ran.took < Duration::from_secs(20));
}

#[test]
fn errors_are_error_events_even_before_the_command_line_is_read() {
    let nothing = free_port();
    let ran = Lockrun::via(&format!("redis://127.0.0.1:{nothing}"))
        .key("job")
        .args(["--log-format", "json"])
        .command(["true"])
        .run();
    ran.assert(Expect::code(69).stderr_any());
    let events = checked_events(&ran.stderr, Some("job"));
    assert_eq!(names(&events), ["error"]);
    assert_eq!(
        (&events[0]["level"], &events[0]["exit_status"]),
        (&"error".into(), &69.into())
    );
    assert!(events[0]["message"]
        .as_str()
        .unwrap_or("")
        .starts_with("cannot reach Redis at "));

    let usage = Lockrun::new()
        .args(["--bogus", "--log-format", "json"])
        .command(["true"])
        .run();
    usage.assert(Expect::code(64).stderr_any());
    let events = checked_events(&usage.stderr, None);
    assert_eq!(events[0]["exit_status"], 64);

    let text = Lockrun::via(&format!("redis://127.0.0.1:{nothing}"))
        .key("job")
        .command(["true"])
        .run();
    text.assert_redis_unreachable();
}
