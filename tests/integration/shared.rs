//! `--shared`: any number of shared runs hold a key together, a run without
//! it holds it alone, and the line stays first come, first served across
//! both kinds: no stream of shared runs starves an exclusive one, and the
//! shared runs at the head of the line are admitted together.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::*;

const NAME: &str = "data";

/// A shared holder of `NAME`, waiting for it if need be.
fn shared_holder(redis: &Server) -> Holder {
    redis
        .lockrun(NAME)
        .args(["--shared", "--ttl", "10s", "--wait", "30s"])
        .hold()
}

fn exclusive_holder(redis: &Server) -> Holder {
    redis
        .lockrun(NAME)
        .args(["--ttl", "10s", "--wait", "30s"])
        .hold()
}

/// A run of `NAME`, shared or not, waiting in line once this returns. Its
/// place lasts 20 s between refreshes (`--ttl 60s`): only being told lets it
/// start sooner.
fn waiter(redis: &Server, shared: bool) -> Holder {
    let shared: &[&str] = if shared { &["--shared"] } else { &[] };
    redis
        .lockrun(NAME)
        .args(shared)
        .args(["--ttl", "60s", "--wait", "40s"])
        .wait_in_line(redis, NAME)
}

fn status_json(redis: &Server) -> serde_json::Value {
    let (code, json) = redis.lockrun(NAME).status_json();
    assert_eq!(code, Some(0), "held: {json}");
    json
}

#[test]
fn shared_runs_hold_the_key_together() {
    let redis = Server::start();
    // Each returns once it holds, while the ones before still hold.
    let mut holders: Vec<Holder> = (0..3).map(|_| shared_holder(&redis)).collect();
    assert!(holders.iter_mut().all(|h| h.run.running()));
    assert!(
        holders.iter().all(|h| h.slot().is_none()),
        "no LOCKRUN_SLOT"
    );
    let fences: Vec<u64> = holders.iter().map(Holder::fence).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert_eq!(redis.slot_holders(NAME).len(), 3);
    assert!(!redis.is_locked(NAME), "no exclusive lease");

    // An exclusive run without --wait finds the key busy.
    let dir = scratch();
    let busy = redis.lockrun(NAME).touch(dir.path().join("ran")).run();
    busy.assert(
        Expect::code(75)
            .stderr_starts("lockrun: data is held by 3 runs together (--slots or --shared), ")
            .stderr_has("; not running touch (exit 75)")
            .stderr_one_line(),
    );
    assert!(!dir.path().join("ran").exists());

    let json = status_json(&redis);
    assert_eq!(json["held"], true, "{json}");
    assert_eq!(json["slots"], 1, "{json}");
    assert!(json["holder"].is_null(), "{json}");
    let listed = json["holders"].as_array().expect("holders");
    assert_eq!(listed.len(), 3, "{json}");
    for holder in &holders {
        let entry = listed_holder(&json, &holder.token);
        assert_eq!(entry["shared"], true, "{entry}");
        assert!(entry["slot"].is_null(), "{entry}");
        assert_eq!(entry["pid"], holder.run.pid().as_raw(), "{entry}");
        assert_eq!(entry["fencing_token"], holder.fence(), "{entry}");
    }
    let text = redis.lockrun(NAME).subcommand("status").run();
    let listed = holders.iter().fold(Expect::success(), |expect, holder| {
        expect.stdout_has(format!("pid {}", holder.run.pid()))
    });
    text.assert(listed);

    for holder in &mut holders {
        holder.finish();
    }
    redis.assert_only_fence(NAME);
}

#[test]
fn shared_an_exclusive_run_waits_for_every_shared_holder_and_then_runs_alone() {
    let redis = Server::start();
    let mut first = shared_holder(&redis);
    let mut second = shared_holder(&redis);
    let mut exclusive = waiter(&redis, false);
    // Behind a waiting exclusive run, a shared run waits though shared runs
    // hold the key.
    let mut late = waiter(&redis, true);
    assert_eq!(redis.in_line(NAME), 2);
    assert!(!exclusive.entered() && !late.entered());
    let json = status_json(&redis);
    let kinds: Vec<(&serde_json::Value, &serde_json::Value)> = json["waiters"]
        .as_array()
        .expect("waiters")
        .iter()
        .map(|w| (&w["shared"], &w["slots"]))
        .collect();
    let (yes, no, one) = (true.into(), false.into(), 1.into());
    assert_eq!(kinds, [(&no, &one), (&yes, &one)], "{json}");

    first.finish();
    assert!(
        eventually(PATIENCE, || redis.slot_holders(NAME).len() == 1),
        "the first shared holder's place stayed"
    );
    assert!(!exclusive.entered(), "entered beside a shared holder");
    assert!(!late.entered(), "overtook the exclusive run");

    second.finish();
    exclusive.until_entered();
    assert!(exclusive.slot().is_none());
    assert!(exclusive.fence() > second.fence());
    assert!(redis.is_locked(NAME), "the exclusive lease");
    assert!(redis.slot_holders(NAME).is_empty());
    assert!(!late.entered(), "entered beside the exclusive run");
    // The exclusive holder is `holder`, and one of `holders` too.
    let json = status_json(&redis);
    let token = redis.lock_value(NAME).expect("the exclusive lease");
    assert_eq!(json["holder"]["fencing_token"], exclusive.fence(), "{json}");
    let listed = json["holders"].as_array().expect("holders");
    assert_eq!(listed.len(), 1, "{json}");
    assert_eq!(listed[0]["token"], token.as_str(), "{json}");
    assert_eq!(listed[0]["shared"], false, "{json}");
    assert!(listed[0]["slot"].is_null(), "{json}");
    assert_eq!(listed[0]["fencing_token"], exclusive.fence(), "{json}");
    let busy = redis.lockrun(NAME).arg("--shared").command(["true"]).run();
    busy.assert(
        Expect::code(75)
            .stderr_starts("lockrun: data is held by ")
            .stderr_has("; not running true (exit 75)")
            .stderr_one_line(),
    );

    exclusive.finish();
    late.until_entered();
    assert!(late.fence() > exclusive.fence());
    late.finish();
    redis.assert_only_fence(NAME);
}

#[test]
fn shared_a_stream_of_shared_runs_does_not_starve_a_waiting_exclusive_one() {
    let redis = Server::start();
    let dir = scratch();
    let shared = |name: &str| {
        redis
            .lockrun(NAME)
            .args(["--shared", "--wait", "40s"])
            .inside_job(dir.path(), &format!("shared:{name}"), "0.6")
            .stderr(Stdio::null())
            .spawn()
    };
    let entered = |name: &str| read_log(&dir.path().join("log")).contains(&format!(":{name} "));
    // The stream: a shared run starts every 100 ms or so,
    // so that the key is never free of shared holders while they come;
    // the first three start one after the other, each inside for 600 ms.
    let mut runs = Vec::new();
    for at in 0..3 {
        runs.push(shared(&format!("s{at}")));
        let name = format!("s{at}");
        assert!(eventually(PATIENCE, || entered(&name)), "{name} never ran");
    }
    let before = redis.in_line(NAME);
    let mut exclusive = redis
        .lockrun(NAME)
        .args(["--wait", "40s"])
        .inside_job(dir.path(), "exclusive:x", "0.4")
        .stderr(Stdio::null())
        .spawn();
    assert!(
        eventually(PATIENCE, || redis.in_line(NAME) > before),
        "the exclusive run never took its place in line"
    );
    let queued = Instant::now();
    for at in 3..12 {
        runs.push(shared(&format!("s{at}")));
        // Pacing the stream, not waiting for anything.
        std::thread::sleep(Duration::from_millis(100));
    }
    exclusive.exits(Expect::code(0));
    let took = queued.elapsed();
    for run in &mut runs {
        run.exits(Expect::code(0));
    }
    // The replay fails if the exclusive run entered beside anyone.
    let replay = Replay::of(dir.path(), Limit::SharedOrExclusive);
    assert_eq!(replay.entries.len(), 13, "{:?}", replay.entries);
    let (x, _) = replay.named("x");
    for at in 3..12 {
        let (s, _) = replay.named(&format!("s{at}"));
        assert!(s > x, "s{at}, started after x was in line, went first");
    }
    assert!(
        took < Duration::from_secs(15),
        "the exclusive run waited {took:?}"
    );
    assert!(replay.shared_together, "the stream never overlapped");
    redis.assert_only_fence(NAME);
}

#[test]
fn shared_waiters_at_the_head_of_the_line_are_admitted_together() {
    let redis = Server::start();
    let mut holder = exclusive_holder(&redis);
    let mut group: Vec<Holder> = (0..3).map(|_| waiter(&redis, true)).collect();
    let mut next = waiter(&redis, false);

    let released = Instant::now();
    holder.go();
    holder.end().assert(Expect::success());
    for waiter in &mut group {
        waiter.until_entered();
    }
    // Each was told on its own: none waited for its place's refresh (20 s).
    let took = released.elapsed();
    assert!(took < Duration::from_secs(10), "admitted {took:?} after");
    // All three are inside at once, each with its own token in line order.
    assert!(group.iter_mut().all(|w| w.run.running()));
    assert_eq!(redis.slot_holders(NAME).len(), 3);
    let fences: Vec<u64> = group.iter().map(Holder::fence).collect();
    assert!(fences[0] > holder.fence(), "{fences:?}");
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert!(!next.entered(), "the exclusive run entered beside them");
    assert_eq!(redis.in_line(NAME), 1);

    for waiter in &mut group[..2] {
        waiter.finish();
    }
    assert!(!next.entered(), "entered beside the last shared run");
    group[2].finish();
    next.until_entered();
    assert!(next.fence() > fences[2]);
    next.finish();
    redis.assert_only_fence(NAME);
}

#[test]
fn shared_and_exclusive_release_force_frees_every_holder() {
    let redis = Server::start();
    // They renew often, so that each finds its lease removed at once.
    let mut holders: Vec<Holder> = (0..2)
        .map(|_| {
            redis
                .lockrun(NAME)
                .args(["--shared", "--ttl", "10s", "--renew-every", "300ms"])
                .hold()
        })
        .collect();
    let mut exclusive = waiter(&redis, false);
    redis.force_release(NAME, &["--holder", &holders[0].token]);
    holders[0].lost();
    assert!(holders[1].run.running());
    assert!(!exclusive.entered(), "entered beside a shared holder");

    redis.force_release(NAME, &[]);
    holders[1].lost();
    // The freed key goes to the waiting exclusive run.
    exclusive.until_entered();
    exclusive.finish();
    redis.assert_only_fence(NAME);
}
