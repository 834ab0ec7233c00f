//! `--slots` with the rest of lockrun: status and release --force for every
//! holder, Sentinel and Cluster URLs, JSON events, --min-hold, --timeout,
//! and the keys' expiry.

use std::collections::BTreeSet;
use std::process::Stdio;

use crate::harness::*;
use crate::slots::{slot_holder, slot_waiter, NAME};

/// The fields of each entry of `holders` in `status --json`.
const HOLDER_FIELDS: [&str; 12] = [
    "acquired_at_ms",
    "command",
    "fencing_token",
    "finished_at_ms",
    "gone",
    "held_for_ms",
    "host",
    "pid",
    "shared",
    "slot",
    "token",
    "ttl_left_ms",
];

#[test]
fn slots_status_shows_every_holder_and_release_force_frees_one_or_all() {
    let redis = Server::start();
    // Each run renews often, so that it finds its lease removed at once.
    let slot = [
        "--slots",
        "3",
        "--ttl",
        "10s",
        "--renew-every",
        "300ms",
        "--wait",
        "30s",
    ];
    let mut holders: Vec<Holder> = (0..3)
        .map(|_| redis.lockrun(NAME).args(slot).hold())
        .collect();
    let mut waiter = redis.lockrun(NAME).args(slot).wait_in_line(&redis, NAME);

    let (code, json) = redis.lockrun(NAME).status_json();
    assert_eq!(code, Some(0), "held: {json}");
    assert_eq!(json["held"], true, "{json}");
    assert_eq!(json["slots"], 3, "{json}");
    assert!(json["holder"].is_null(), "no exclusive holder: {json}");
    assert!(
        json["ttl_left_ms"].as_u64().is_some_and(|ms| ms <= 10_000),
        "{json}"
    );
    let listed = json["holders"].as_array().expect("a holders array");
    assert_eq!(listed.len(), 3, "{json}");
    for holder in &holders {
        let entry = listed_holder(&json, &holder.token);
        assert_eq!(field_names(entry), HOLDER_FIELDS, "{entry}");
        assert_eq!(entry["slot"], holder.slot().expect("a slot"), "{entry}");
        assert_eq!(entry["shared"], false, "{entry}");
        assert_eq!(entry["pid"], holder.run.pid().as_raw(), "{entry}");
        assert_eq!(entry["fencing_token"], holder.fence(), "{entry}");
        assert!(entry["finished_at_ms"].is_null(), "{entry}");
        assert_eq!(entry["gone"], false, "{entry}");
        assert!(
            entry["ttl_left_ms"].as_u64().is_some_and(|ms| ms <= 10_000),
            "{entry}"
        );
        assert!(entry["command"]
            .as_str()
            .is_some_and(|c| c.starts_with("sh -c ")));
        assert!(entry["host"].is_string() && entry["acquired_at_ms"].is_u64());
        assert!(entry["held_for_ms"].is_u64(), "{entry}");
    }
    let waiters = json["waiters"].as_array().expect("waiters");
    assert_eq!(waiters.len(), 1, "{json}");
    assert_eq!(waiters[0]["slots"], 3, "{json}");
    assert_eq!(waiters[0]["shared"], false, "{json}");
    assert_eq!(waiters[0]["pid"], waiter.run.pid().as_raw(), "{json}");

    // The text lists every holder, a line each.
    let text = redis.lockrun(NAME).subcommand("status").run();
    text.assert(Expect::success().stdout_starts("wave: held in 3 of 3 slots\n"));
    for holder in &holders {
        let pid = format!("pid {}", holder.run.pid());
        let lines = text.stdout.lines().filter(|l| l.contains(&pid)).count();
        assert_eq!(lines, 1, "{pid}: {}", text.stdout);
    }

    // One holder, named by its token: only it stops, and the waiter gets its
    // place.
    redis.force_release(NAME, &["--holder", &holders[1].token]);
    holders[1].lost();
    waiter.until_entered();
    assert_eq!(waiter.slot(), Some(1));
    assert!(holders[0].run.running() && holders[2].run.running());

    let nobody = redis
        .lockrun(NAME)
        .subcommand("release")
        .args(["--force", "--holder", "0123456789abcdef"])
        .run();
    nobody.assert(Expect::code(1).stdout("no holder of wave has the token 0123456789abcdef\n"));
    assert_eq!(redis.slot_holders(NAME).len(), 3);

    // Every holder.
    redis.force_release(NAME, &[]);
    holders[0].lost();
    holders[2].lost();
    waiter.end().assert(Expect::code(76).stderr(
        "lockrun: lost the lock wave: its key no longer holds this run's token (it expired, was \
         removed with `lockrun release --force`, or Redis restarted empty); stopped the command\n",
    ));
    let (code, json) = redis.lockrun(NAME).status_json();
    assert_eq!(code, Some(1), "free: {json}");
    assert_eq!(json["held"], false, "{json}");
    assert_eq!(json["holders"], serde_json::json!([]), "{json}");
    assert!(json["slots"].is_null(), "nobody holds or waits: {json}");
    redis.assert_only_fence(NAME);
}

/// `--slots 2` through a topology URL: two hold at once, a third is busy,
/// and a waiter takes the place that one of them frees. `holders` counts the
/// holder records on the server that has the key.
fn two_slots_via(url: &str, holders: impl Fn() -> usize) {
    let args = ["--slots", "2", "--wait", "20s"];
    let mut first = Lockrun::via(url).key(NAME).args(args).hold();
    let mut second = Lockrun::via(url).key(NAME).args(args).hold();
    let slots: BTreeSet<Option<u32>> = [first.slot(), second.slot()].into();
    assert_eq!(slots, BTreeSet::from([Some(0), Some(1)]));
    assert!(second.fence() > first.fence());
    assert_eq!(holders(), 2);

    let busy = Lockrun::via(url)
        .key(NAME)
        .args(["--slots", "2"])
        .command(["true"])
        .run();
    busy.assert(
        Expect::code(75)
            .stderr_starts("lockrun: wave is held by 2 runs together (--slots or --shared), ")
            .stderr_has("; not running true (exit 75)")
            .stderr_one_line(),
    );

    let status = Lockrun::via(url)
        .key(NAME)
        .subcommand("status")
        .arg("--json")
        .run();
    let json: serde_json::Value = serde_json::from_str(&status.stdout).expect("JSON");
    assert_eq!(json["slots"], 2, "{json}");
    assert_eq!(json["holders"].as_array().map(Vec::len), Some(2), "{json}");

    let mut waiter = Lockrun::via(url).key(NAME).args(args).spawn_waiter();
    first.go();
    first.end().assert(Expect::success());
    waiter.until_entered();
    assert_eq!(waiter.slot(), first.slot());
    assert!(waiter.fence() > second.fence());
    second.finish();
    waiter.finish();
    assert!(
        eventually(PATIENCE, || holders() == 0),
        "holders left behind"
    );
}

#[test]
fn slots_2_through_a_sentinel_url() {
    let set = SentinelSet::start();
    two_slots_via(&set.url(), || set.primary().slot_holders(NAME).len());
}

#[test]
fn slots_2_through_a_cluster_url() {
    let cluster = Cluster::start();
    let (owner, _) = cluster.owner(&format!("lockrun:{{{NAME}}}"));
    let other = cluster
        .primaries()
        .into_iter()
        .find(|&port| port != owner)
        .expect("another primary");
    // Given a node that does not own the key's slot: it follows MOVED.
    two_slots_via(&cluster.url_via(&[other]), || {
        cluster.node(owner).slot_holders(NAME).len()
    });
}

/// The events lockrun wrote with `--log-format json`, one JSON object a line.
/// The `acquired` event among a run's JSON lines.
fn acquired_event(ran: &Ran) -> serde_json::Value {
    ran.stderr
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line)
                .unwrap_or_else(|_| panic!("not JSON: {line}"))
        })
        .find(|event| event["event"] == "acquired")
        .unwrap_or_else(|| panic!("no acquired event: {}", ran.stderr))
}

#[test]
fn slots_acquired_event_says_the_slot() {
    let redis = Server::start();
    let _first = slot_holder(&redis, "3", "10s");
    let ran = redis
        .lockrun(NAME)
        .args(["--slots", "3", "--log-format", "json", "-v"])
        .command(["true"])
        .run();
    ran.assert(Expect::success().stderr_any());
    let acquired = acquired_event(&ran);
    assert_eq!(acquired["slot"], 1, "{acquired}");

    // Without --slots: no slot to tell (absent, or null).
    let ran = redis
        .lockrun("plain")
        .args(["--log-format", "json", "-v"])
        .command(["true"])
        .run();
    ran.assert(Expect::success().stderr_any());
    let acquired = acquired_event(&ran);
    assert!(acquired["slot"].is_null(), "{acquired}");
}

#[test]
fn slots_min_hold_keeps_that_runs_place_only() {
    let redis = Server::start();
    let ran = redis
        .lockrun(NAME)
        .args(["--slots", "2", "--min-hold", "60s"])
        .command(["true"])
        .run();
    ran.assert(Expect::success());
    // Its place is kept, finished; the other one is free.
    let holders = redis.slot_holders(NAME);
    assert_eq!(holders.len(), 1, "{holders:?}");
    let mut other = slot_holder(&redis, "2", "10s");
    assert_eq!(other.slot(), Some(1), "slot 0 is kept");
    let busy = redis
        .lockrun(NAME)
        .args(["--slots", "2"])
        .command(["true"])
        .run();
    busy.assert(
        Expect::code(75)
            .stderr_starts("lockrun: wave is held by 2 runs together (--slots or --shared), ")
            .stderr_has("; not running true (exit 75)")
            .stderr_one_line(),
    );
    let (code, json) = redis.lockrun(NAME).status_json();
    assert_eq!(code, Some(0), "{json}");
    let listed = json["holders"].as_array().expect("holders");
    let kept = listed
        .iter()
        .find(|entry| entry["slot"] == 0)
        .unwrap_or_else(|| panic!("slot 0 not listed: {json}"));
    assert!(kept["finished_at_ms"].is_u64(), "{kept}");
    let live = listed
        .iter()
        .find(|entry| entry["slot"] == 1)
        .unwrap_or_else(|| panic!("slot 1 not listed: {json}"));
    assert!(live["finished_at_ms"].is_null(), "{live}");
    other.finish();
    // Once the live one has left, its place is free again; the kept one stays.
    let again = redis
        .lockrun(NAME)
        .args(["--slots", "2"])
        .command(["sh", "-c", r#"echo "$LOCKRUN_SLOT""#])
        .run();
    again.assert(Expect::success().stdout("1\n"));
    let released = redis
        .lockrun(NAME)
        .subcommand("release")
        .arg("--force")
        .run();
    released.assert(Expect::success().stdout_starts("released wave held by "));
    redis.assert_only_fence(NAME);
}

#[test]
fn slots_timeout_stops_the_command_and_frees_its_place() {
    let redis = Server::start();
    let mut holder = slot_holder(&redis, "2", "10s");
    let mut timed = redis
        .lockrun(NAME)
        .args(["--slots", "2", "--timeout", "4s"])
        .command(["sleep", "30"])
        .stderr(Stdio::null())
        .spawn();
    assert!(
        eventually(PATIENCE, || redis.slot_holders(NAME).len() == 2),
        "the timed run never took the second slot"
    );
    let mut waiter = slot_waiter(&redis, "2", "10s");
    timed.exits(Expect::code(124));
    // The timed-out run's place goes to the waiter.
    waiter.until_entered();
    assert_eq!(waiter.slot(), Some(1));
    holder.finish();
    waiter.finish();
    redis.assert_only_fence(NAME);
}

#[test]
fn slots_keys_expire_with_the_latest_lease() {
    let redis = Server::start();
    let short = slot_holder(&redis, "2", "1s");
    let mut long = slot_holder(&redis, "2", "20s");
    let pttl = |suffix: &str| -> i64 {
        redis
            .query(redis::cmd("PTTL").arg(format!("lockrun:{{{NAME}}}:{suffix}")))
            .expect("PTTL")
    };
    // Both new keys last as long as the latest lease, no longer.
    for suffix in ["leases", "holders"] {
        let left = pttl(suffix);
        assert!(left > 3_000 && left <= 20_000, "{suffix}: {left} ms");
    }
    let leases = redis.slot_leases(NAME);
    let latest = leases.values().max().copied().expect("leases");
    assert_eq!(leases.len(), 2, "{leases:?}");
    assert!(latest > leases[&short.token], "{leases:?}");
    long.finish();
    drop(short);
    // A dead set of holders leaves nothing behind but the fencing counter
    // and the history of the run that finished.
    assert!(
        eventually(PATIENCE, || redis.keys().len() == 2),
        "left behind: {:?}",
        redis.keys()
    );
    redis.assert_only_fence(NAME);
}
