//! `--slots N`: up to N runs hold one key at once, each with its own slot,
//! token and lease; N agreed on by everyone who holds or waits; status and
//! release --force for every holder; through Sentinel and Cluster URLs.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

const NAME: &str = "wave";

/// A holder of one of `n` slots of `NAME`, with lease `ttl`, that waits for
/// its place if need be.
fn slot_holder(redis: &Server, n: &str, ttl: &str) -> Holder {
    redis
        .lockrun(NAME)
        .args(["--slots", n, "--ttl", ttl, "--wait", "30s"])
        .hold_slot()
}

/// A run of `NAME` with `--slots n`, waiting in line once this returns.
fn slot_waiter(redis: &Server, n: &str, ttl: &str) -> Waiter {
    redis
        .lockrun(NAME)
        .args(["--slots", n, "--ttl", ttl, "--wait", "30s"])
        .wait_in_line(redis, NAME)
}

#[test]
fn ten_runs_on_three_slots_never_more_than_three_inside() {
    let redis = Server::start();
    let dir = scratch();
    let mut runs: Vec<Running> = (0..10)
        .map(|_| {
            redis
                .lockrun(NAME)
                .args(["--slots", "3", "--wait", "60s"])
                .inside_job(dir.path(), "slot", "0.4")
                .stderr(Stdio::null())
                .spawn()
        })
        .collect();
    for run in &mut runs {
        assert_eq!(run.wait().code(), Some(0));
    }
    // The replay fails at an entry with 3 inside already, a slot taken
    // twice, or a token out of grant order.
    let replay = Replay::of(dir.path(), Limit::Slots(3));
    assert_eq!(replay.entries.len(), 10, "all ran: {:?}", replay.entries);
    assert!(replay.inside.is_empty(), "{:?}", replay.inside);
    let slots: BTreeSet<Option<u32>> = replay.entries.iter().map(|e| e.slot).collect();
    assert_eq!(slots, BTreeSet::from([Some(0), Some(1), Some(2)]));
    assert_eq!(replay.most_inside, 3, "{:?}", replay.entries);
    redis.assert_only_fence(NAME);
}

#[test]
fn slots_go_to_waiters_in_arrival_order_each_taking_the_place_freed() {
    let redis = Server::start();
    let mut holders: Vec<Holder> = (0..3).map(|_| slot_holder(&redis, "3", "10s")).collect();
    let slots: Vec<Option<u32>> = holders.iter().map(Holder::slot).collect();
    assert_eq!(slots, [Some(0), Some(1), Some(2)], "the lowest free slot");
    let fences: Vec<u64> = holders.iter().map(Holder::fence).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert_eq!(redis.slot_holders(NAME).len(), 3);
    assert_eq!(redis.slot_leases(NAME).len(), 3);
    let mut waiters: Vec<Waiter> = (0..4).map(|_| slot_waiter(&redis, "3", "10s")).collect();
    assert!(
        waiters.iter().all(|w| !w.entered()),
        "none runs while 3 hold"
    );

    // Each place is freed only once the run before has started, so the
    // order in which they start is the order in which they were granted.
    holders[1].go();
    waiters[0].until_entered();
    holders[0].go();
    waiters[1].until_entered();
    waiters[0].go();
    waiters[2].until_entered();
    holders[2].go();
    waiters[3].until_entered();
    let slots: Vec<Option<u32>> = waiters.iter().map(Waiter::slot).collect();
    assert_eq!(slots, [Some(1), Some(0), Some(1), Some(2)]);
    let tokens: Vec<u64> = fences
        .iter()
        .copied()
        .chain(waiters.iter().map(Waiter::fence))
        .collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens out of grant order: {tokens:?}"
    );
    for holder in &mut holders {
        assert_eq!(holder.run.wait().code(), Some(0), "{}", holder.stderr());
    }
    for waiter in &mut waiters {
        waiter.finish();
    }
    redis.assert_only_fence(NAME);
}

#[test]
fn slots_place_of_a_sigkilled_holder_goes_to_the_next_waiter() {
    let redis = Server::start();
    let mut holders: Vec<Holder> = (0..3).map(|_| slot_holder(&redis, "3", "2s")).collect();
    let mut waiter = slot_waiter(&redis, "3", "2s");
    let mut later = slot_waiter(&redis, "3", "2s");

    let killed = Instant::now();
    holders[1].run.signal(Signal::SIGKILL);
    assert_eq!(holders[1].run.wait().code(), None);
    assert!(
        eventually(PATIENCE, || !alive(holders[1].child())),
        "the command outlived lockrun"
    );
    // Nobody released the dead run's place: its lease runs out (2s), and the
    // first waiter, not the second, takes it.
    waiter.until_entered();
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(12), "{took:?}");
    assert_eq!(waiter.slot(), Some(1));
    assert!(waiter.fence() > holders[2].fence());
    assert!(!later.entered(), "the second waiter got a place too");
    assert!(holders[0].run.running() && holders[2].run.running());
    let tokens: BTreeSet<String> = redis.slot_holders(NAME).into_keys().collect();
    assert!(!tokens.contains(&holders[1].token), "{tokens:?}");
    assert!(tokens.contains(&holders[0].token) && tokens.contains(&holders[2].token));
    assert_eq!(tokens.len(), 3, "{tokens:?}");

    holders[0].finish();
    later.until_entered();
    assert_eq!(later.slot(), Some(0));
    holders[2].finish();
    waiter.finish();
    later.finish();
    redis.assert_only_fence(NAME);
}

#[test]
fn slots_holder_paused_past_its_ttl_loses_its_place_and_its_command_is_stopped() {
    let redis = Server::start();
    let mut holders: Vec<Holder> = (0..3).map(|_| slot_holder(&redis, "3", "2s")).collect();
    let mut waiter = slot_waiter(&redis, "3", "2s");

    // Freeze lockrun only: its command keeps running, its lease runs out.
    holders[2].run.signal(Signal::SIGSTOP);
    waiter.until_entered();
    assert_eq!(waiter.slot(), Some(2), "the paused run's slot");
    assert!(waiter.fence() > holders[2].fence());
    assert!(holders[2].run.running(), "still paused");

    holders[2].run.signal(Signal::SIGCONT);
    assert_eq!(
        holders[2].run.wait().code(),
        Some(76),
        "{}",
        holders[2].stderr()
    );
    assert!(
        holders[2].stderr().contains("paused or suspended"),
        "the message must say why: {}",
        holders[2].stderr()
    );
    assert!(
        !alive(holders[2].child()),
        "the paused run's command survived its lease"
    );
    // The others' places are untouched: the paused run took nothing with it.
    let tokens: BTreeSet<String> = redis.slot_holders(NAME).into_keys().collect();
    let leases: BTreeSet<String> = redis.slot_leases(NAME).into_keys().collect();
    assert_eq!(tokens, leases);
    assert_eq!(tokens.len(), 3, "{tokens:?}");
    assert!(tokens.contains(&holders[0].token) && tokens.contains(&holders[1].token));
    assert!(!tokens.contains(&holders[2].token));
    assert!(holders[0].run.running() && holders[1].run.running());

    holders[0].finish();
    holders[1].finish();
    waiter.finish();
    redis.assert_only_fence(NAME);
}

#[test]
fn slots_lockrun_slot_is_set_only_with_slots() {
    let redis = Server::start();
    let print = r#"echo "${LOCKRUN_SLOT-unset}""#;
    for (args, want) in [
        (&["--slots", "1"][..], "0"),
        (&["--slots", "4"], "0"),
        (&[], "unset"),
        (&["--shared"], "unset"),
    ] {
        let ran = redis
            .lockrun(NAME)
            .args(args)
            .command(["sh", "-c", print])
            .run();
        assert_eq!(ran.code, Some(0), "{args:?}: {}", ran.stderr);
        assert_eq!(ran.stdout.trim(), want, "{args:?}");
    }
    // LOCKRUN_SLOTS gives the number too.
    let ran = redis
        .lockrun(NAME)
        .env("LOCKRUN_SLOTS", "2")
        .command(["sh", "-c", print])
        .run();
    assert_eq!(
        (ran.code, ran.stdout.trim()),
        (Some(0), "0"),
        "{}",
        ran.stderr
    );
    redis.assert_only_fence(NAME);
}

#[test]
fn slots_a_full_house_is_busy_without_wait() {
    let redis = Server::start();
    let mut holders: Vec<Holder> = (0..2).map(|_| slot_holder(&redis, "2", "10s")).collect();
    let dir = scratch();
    let ran = redis
        .lockrun(NAME)
        .args(["--slots", "2"])
        .touch(dir.path().join("ran"))
        .run();
    assert_eq!(ran.code, Some(75), "{}", ran.stderr);
    assert_eq!(ran.stderr.lines().count(), 1, "{}", ran.stderr);
    assert!(!dir.path().join("ran").exists());
    for holder in &mut holders {
        holder.finish();
    }
    redis.assert_only_fence(NAME);
}

#[test]
fn slots_mismatched_n_exits_64_names_both_numbers_and_changes_nothing() {
    let redis = Server::start();
    let dir = scratch();
    let marker = dir.path().join("ran");
    // A long lease: no renewal changes Redis while the test compares it.
    let mut holder = slot_holder(&redis, "5", "60s");
    let before = redis.snapshot();
    let cases: [(&[&str], &str); 4] = [
        (&["--slots", "3"], "--slots 3"),
        (&["--slots", "3", "--wait", "20s"], "--slots 3"),
        (&[], "--slots 1"),
        (&["--shared", "--wait", "20s"], "--slots 1"),
    ];
    for (args, gave) in cases {
        let ran = redis.lockrun(NAME).args(args).touch(&marker).run();
        assert_eq!(ran.code, Some(64), "{args:?}: {}", ran.stderr);
        let line = ran.one_line();
        assert!(
            line.contains(NAME) && line.contains("--slots 5"),
            "{args:?}: {line}"
        );
        if args.first() == Some(&"--slots") {
            assert!(line.contains(gave), "{args:?}: {line}");
        }
        assert!(
            ran.took < Duration::from_secs(10),
            "{args:?}: {:?}",
            ran.took
        );
        assert!(!marker.exists(), "{args:?}: the command ran");
        assert_eq!(redis.snapshot(), before, "{args:?} changed Redis");
    }
    holder.finish();

    // While a plain run holds and another waits, N is 1.
    let mut plain = redis.lockrun(NAME).args(["--ttl", "60s"]).hold_slot();
    let mut waiting = redis
        .lockrun(NAME)
        .args(["--ttl", "60s", "--wait", "30s"])
        .wait_in_line(&redis, NAME);
    let before = redis.snapshot();
    let ran = redis
        .lockrun(NAME)
        .args(["--slots", "3", "--wait", "20s"])
        .touch(&marker)
        .run();
    assert_eq!(ran.code, Some(64), "{}", ran.stderr);
    let line = ran.one_line();
    assert!(
        line.contains("--slots 1") && line.contains("--slots 3"),
        "{line}"
    );
    assert_eq!(redis.snapshot(), before, "the refused run changed Redis");
    plain.finish();
    waiting.until_entered();
    waiting.finish();

    // Once nobody holds or waits, a new N takes effect.
    redis.assert_only_fence(NAME);
    let holders: Vec<Holder> = (0..3).map(|_| slot_holder(&redis, "3", "10s")).collect();
    let slots: BTreeSet<Option<u32>> = holders.iter().map(Holder::slot).collect();
    assert_eq!(slots, BTreeSet::from([Some(0), Some(1), Some(2)]));
    for mut holder in holders {
        holder.finish();
    }
    assert!(!marker.exists(), "a refused run ran its command");
}

#[test]
fn slots_and_shared_refusals_exit_64_before_anything_reaches_redis() {
    let redis = Server::start();
    let dir = scratch();
    let marker = dir.path().join("ran");
    let cases: [&[&str]; 7] = [
        &["--shared", "--slots", "3"],
        &["--once-per", "1h", "--slots", "3"],
        &["--once-per", "1h", "--shared"],
        &["--slots", "0"],
        &["--slots", "1001"],
        &["--slots", "many"],
        &["--once-per", "1h", "--slots", "2", "--wait", "10s"],
    ];
    for args in cases {
        let ran = redis.lockrun(NAME).args(args).touch(&marker).run();
        assert_eq!(ran.code, Some(64), "{args:?}: {}", ran.stderr);
        assert!(ran.stdout.is_empty(), "{args:?}: {}", ran.stdout);
        ran.one_line();
    }
    // The variable counts as the flag.
    let ran = redis
        .lockrun(NAME)
        .arg("--shared")
        .env("LOCKRUN_SLOTS", "3")
        .touch(&marker)
        .run();
    assert_eq!(
        ran.code,
        Some(64),
        "LOCKRUN_SLOTS=3 --shared: {}",
        ran.stderr
    );
    ran.one_line();
    assert!(redis.keys().is_empty(), "{:?}", redis.keys());

    // Over a quorum: refused, and no member is touched.
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    for args in [&["--slots", "3"][..], &["--shared"]] {
        let ran = Lockrun::on_all(&servers)
            .key(NAME)
            .args(args)
            .touch(&marker)
            .run();
        assert_eq!(ran.code, Some(64), "quorum {args:?}: {}", ran.stderr);
        ran.one_line();
    }
    for server in &servers {
        assert!(server.keys().is_empty(), "{:?}", server.keys());
    }
    assert!(!marker.exists(), "a refused run ran its command");
}

/// The fields of each entry of `holders` in `status --json`.
const HOLDER_FIELDS: [&str; 11] = [
    "acquired_at_ms",
    "command",
    "fencing_token",
    "finished_at_ms",
    "held_for_ms",
    "host",
    "pid",
    "shared",
    "slot",
    "token",
    "ttl_left_ms",
];

fn status_json(redis: &Server) -> (Option<i32>, serde_json::Value) {
    let ran = redis.lockrun(NAME).subcommand("status").arg("--json").run();
    let json = serde_json::from_str(ran.stdout.trim())
        .unwrap_or_else(|_| panic!("not JSON: {} {}", ran.stdout, ran.stderr));
    (ran.code, json)
}

#[test]
fn slots_status_shows_every_holder_and_release_force_frees_one_or_all() {
    let redis = Server::start();
    let mut holders: Vec<Holder> = (0..3).map(|_| slot_holder(&redis, "3", "10s")).collect();
    let mut waiter = slot_waiter(&redis, "3", "10s");

    let (code, json) = status_json(&redis);
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
        let entry = listed
            .iter()
            .find(|e| e["token"] == holder.token.as_str())
            .unwrap_or_else(|| panic!("{} not listed: {json}", holder.token));
        let mut fields: Vec<&str> = entry
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort_unstable();
        assert_eq!(fields, HOLDER_FIELDS, "{entry}");
        assert_eq!(entry["slot"], holder.slot().expect("a slot"), "{entry}");
        assert_eq!(entry["shared"], false, "{entry}");
        assert_eq!(entry["pid"], holder.run.pid().as_raw(), "{entry}");
        assert_eq!(entry["fencing_token"], holder.fence(), "{entry}");
        assert!(entry["finished_at_ms"].is_null(), "{entry}");
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
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    for holder in &holders {
        let pid = format!("pid {}", holder.run.pid());
        let lines = text.stdout.lines().filter(|l| l.contains(&pid)).count();
        assert_eq!(lines, 1, "{pid}: {}", text.stdout);
    }

    // One holder, named by its token: only it stops, and the waiter gets its
    // place.
    let released = redis
        .lockrun(NAME)
        .subcommand("release")
        .args(["--force", "--holder", &holders[1].token])
        .run();
    assert_eq!(released.code, Some(0), "{}", released.stderr);
    assert_eq!(
        holders[1].run.wait().code(),
        Some(76),
        "{}",
        holders[1].stderr()
    );
    waiter.until_entered();
    assert_eq!(waiter.slot(), Some(1));
    assert!(holders[0].run.running() && holders[2].run.running());

    let nobody = redis
        .lockrun(NAME)
        .subcommand("release")
        .args(["--force", "--holder", "0123456789abcdef"])
        .run();
    assert_eq!(nobody.code, Some(1), "{}", nobody.stderr);
    assert_eq!(
        (nobody.stdout.lines().count() + nobody.stderr.lines().count()),
        1,
        "one line: {} {}",
        nobody.stdout,
        nobody.stderr
    );
    assert_eq!(redis.slot_holders(NAME).len(), 3);

    // Every holder.
    let released = redis
        .lockrun(NAME)
        .subcommand("release")
        .arg("--force")
        .run();
    assert_eq!(released.code, Some(0), "{}", released.stderr);
    for at in [0, 2] {
        let holder = &mut holders[at];
        assert_eq!(holder.run.wait().code(), Some(76), "{}", holder.stderr());
    }
    assert_eq!(waiter.run.wait().code(), Some(76), "{}", waiter.stderr());
    let (code, json) = status_json(&redis);
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
    let mut first = Lockrun::via(url).key(NAME).args(args).hold_slot();
    let mut second = Lockrun::via(url).key(NAME).args(args).hold_slot();
    let slots: BTreeSet<Option<u32>> = [first.slot(), second.slot()].into();
    assert_eq!(slots, BTreeSet::from([Some(0), Some(1)]));
    assert!(second.fence() > first.fence());
    assert_eq!(holders(), 2);

    let busy = Lockrun::via(url)
        .key(NAME)
        .args(["--slots", "2"])
        .command(["true"])
        .run();
    assert_eq!(busy.code, Some(75), "{}", busy.stderr);

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
    assert_eq!(first.run.wait().code(), Some(0), "{}", first.stderr());
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
fn json_events(stderr: &str) -> Vec<serde_json::Value> {
    stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect()
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
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let events = json_events(&ran.stderr);
    let acquired = events
        .iter()
        .find(|event| event["event"] == "acquired")
        .unwrap_or_else(|| panic!("no acquired event: {}", ran.stderr));
    assert_eq!(acquired["slot"], 1, "{acquired}");

    // Without --slots: no slot to tell (absent, or null).
    let ran = redis
        .lockrun("plain")
        .args(["--log-format", "json", "-v"])
        .command(["true"])
        .run();
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let events = json_events(&ran.stderr);
    let acquired = events
        .iter()
        .find(|event| event["event"] == "acquired")
        .unwrap_or_else(|| panic!("no acquired event: {}", ran.stderr));
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
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
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
    assert_eq!(busy.code, Some(75), "{}", busy.stderr);
    let (code, json) = status_json(&redis);
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
    assert_eq!(
        (again.code, again.stdout.trim()),
        (Some(0), "1"),
        "{}",
        again.stderr
    );
    let released = redis
        .lockrun(NAME)
        .subcommand("release")
        .arg("--force")
        .run();
    assert_eq!(released.code, Some(0), "{}", released.stderr);
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
    assert_eq!(timed.wait().code(), Some(124));
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
    let short = slot_holder(&redis, "2", "3s");
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
    // A dead set of holders leaves nothing behind but the fencing counter.
    assert!(
        eventually(PATIENCE, || redis.keys().len() == 1),
        "left behind: {:?}",
        redis.keys()
    );
    redis.assert_only_fence(NAME);
}
