//! `--slots N`: up to N runs hold one key at once, each with its own slot,
//! token and lease; N agreed on by everyone who holds or waits. The rest
//! (status, release --force, Sentinel and Cluster) is in `slots_with`.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

pub(super) const NAME: &str = "wave";

/// A holder of one of `n` slots of `NAME`, with lease `ttl`, that waits for
/// its place if need be.
pub(super) fn slot_holder(redis: &Server, n: &str, ttl: &str) -> Holder {
    redis
        .lockrun(NAME)
        .args(["--slots", n, "--ttl", ttl, "--wait", "30s"])
        .hold()
}

/// A run of `NAME` with `--slots n`, waiting in line once this returns.
pub(super) fn slot_waiter(redis: &Server, n: &str, ttl: &str) -> Holder {
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
        run.exits(Expect::code(0));
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
    let mut waiters: Vec<Holder> = (0..4).map(|_| slot_waiter(&redis, "3", "10s")).collect();
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
    let slots: Vec<Option<u32>> = waiters.iter().map(Holder::slot).collect();
    assert_eq!(slots, [Some(1), Some(0), Some(1), Some(2)]);
    let tokens: Vec<u64> = fences
        .iter()
        .copied()
        .chain(waiters.iter().map(Holder::fence))
        .collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens out of grant order: {tokens:?}"
    );
    for holder in &mut holders {
        holder.end().assert(Expect::success());
    }
    for waiter in &mut waiters {
        waiter.finish();
    }
    redis.assert_only_fence(NAME);
}

#[test]
fn slots_place_of_a_sigkilled_holder_goes_to_the_next_waiter() {
    let redis = Server::start();
    // The one to be killed holds the shortest lease, which the test waits out.
    let mut holders: Vec<Holder> = ["2s", "1s", "2s"]
        .into_iter()
        .map(|ttl| slot_holder(&redis, "3", ttl))
        .collect();
    let mut waiter = slot_waiter(&redis, "3", "2s");
    let mut later = slot_waiter(&redis, "3", "2s");

    let killed = Instant::now();
    holders[1].run.signal(Signal::SIGKILL);
    holders[1].run.exits(Expect::killed_by(Signal::SIGKILL));
    assert!(
        eventually(PATIENCE, || !alive(holders[1].child())),
        "the command outlived lockrun"
    );
    // Nobody released the dead run's place: its lease runs out (1s), and the
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
    // The message must say why.
    holders[2]
        .end()
        .assert(Expect::code(76).stderr_has("paused or suspended"));
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
        ran.assert(
            Expect::success()
                .stdout(format!("{want}\n"))
                .context(format!("{args:?}")),
        );
    }
    // LOCKRUN_SLOTS gives the number too.
    let ran = redis
        .lockrun(NAME)
        .env("LOCKRUN_SLOTS", "2")
        .command(["sh", "-c", print])
        .run();
    ran.assert(Expect::success().stdout("0\n"));
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
    ran.assert(Expect::code(75).stderr_one_line());
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
        let mut expect = Expect::code(64)
            .stderr_has(NAME)
            .stderr_has("--slots 5")
            .stderr_one_line();
        if args.first() == Some(&"--slots") {
            expect = expect.stderr_has(gave);
        }
        ran.assert(expect.context(format!("{args:?}")));
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
    let mut plain = redis.lockrun(NAME).args(["--ttl", "60s"]).hold();
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
    ran.assert(
        Expect::code(64)
            .stderr_has("--slots 1")
            .stderr_has("--slots 3")
            .stderr_one_line(),
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
        ran.assert(
            Expect::code(64)
                .context(format!("{args:?}"))
                .stderr_one_line(),
        );
    }
    // The variable counts as the flag.
    let ran = redis
        .lockrun(NAME)
        .arg("--shared")
        .env("LOCKRUN_SLOTS", "3")
        .touch(&marker)
        .run();
    ran.assert(
        Expect::code(64)
            .context("LOCKRUN_SLOTS=3 --shared")
            .stderr_one_line(),
    );
    assert!(redis.keys().is_empty(), "{:?}", redis.keys());

    // Over a quorum: refused, and no member is touched.
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    for args in [&["--slots", "3"][..], &["--shared"]] {
        let ran = Lockrun::on_all(&servers)
            .key(NAME)
            .args(args)
            .touch(&marker)
            .run();
        ran.assert(
            Expect::code(64)
                .context(format!("quorum {args:?}"))
                .stderr_one_line(),
        );
    }
    for server in &servers {
        assert!(server.keys().is_empty(), "{:?}", server.keys());
    }
    assert!(!marker.exists(), "a refused run ran its command");
}
