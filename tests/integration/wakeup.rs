//! Waiters wake on a release, and still acquire when a holder dies without releasing.
//!
//! These check outcomes, not speed: how soon a waiter starts after a release
//! is measured by bench/run.sh. Every wait here is a poll with a deadline, and
//! every bound is far from what a slow, busy machine needs.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

/// Waits until `count` runs wait in line for lock `name`, listening.
fn wait_for_subscribers(redis: &Server, name: &str, count: usize) {
    let mut seen = 0;
    let subscribed = eventually(PATIENCE, || {
        seen = redis.listening_waiters(name);
        seen == count
    });
    assert!(
        subscribed,
        "expected {count} waiters listening in line, saw {seen}"
    );
}

#[test]
fn a_waiter_starts_on_release_long_before_the_holders_lease_would_end() {
    let redis = Server::start();
    let dir = scratch();
    // A long lease, so that only the release, not its expiry, can let the
    // waiter in before the deadline checked below.
    let mut holder = redis.lockrun("job").args(["--ttl", "30s"]).hold();
    let mut waiter = redis
        .lockrun("job")
        .args(["--wait", "forever"])
        .sh(r#"echo started > "$1/started""#, dir.path())
        .spawn();
    wait_for_subscribers(&redis, "job", 1);
    assert!(waiter.running(), "the waiter must still be waiting");
    assert!(!dir.path().join("started").exists());

    // Read before the PTTL query, so that this errs early.
    let now = Instant::now();
    let pttl = redis.pttl("job");
    assert!(pttl > 10_000, "the holder's lease has {pttl} ms left");
    let lease_ends = now + Duration::from_millis(pttl as u64);
    let released = Instant::now();
    holder.go();

    read_when_ready(&dir.path().join("started"));
    let started = Instant::now();
    assert!(
        started < lease_ends,
        "the waiter started {:?} after the release, only once the holder's lease could have run out",
        started - released
    );
    holder.run.exits(Expect::success());
    waiter.exits(Expect::success());
    redis.assert_only_fence("job");
}

#[test]
fn a_waiter_listens_on_the_connection_it_calls_on() {
    let redis = Server::start();
    let mut holder = redis.lockrun("job").args(["--ttl", "30s"]).hold();
    let mut waiter = redis
        .lockrun("job")
        .args(["--wait", "forever"])
        .command(["true"])
        .spawn();
    wait_for_subscribers(&redis, "job", 1);
    let clients: String = redis
        .query(redis::cmd("CLIENT").arg("LIST"))
        .expect("CLIENT LIST");
    let runs: Vec<&str> = clients
        .lines()
        .filter(|client| !client.contains("cmd=client"))
        .collect();
    // The holder's connection and the waiter's: subscribed, and the one
    // its place was taken and is refreshed on.
    assert_eq!(runs.len(), 2, "one connection per run: {clients}");
    let subscribed: Vec<&&str> = runs.iter().filter(|c| c.contains(" sub=1 ")).collect();
    assert_eq!(subscribed.len(), 1, "{clients}");
    assert!(subscribed[0].contains("cmd=evalsha"), "{clients}");
    holder.go();
    holder.run.exits(Expect::success());
    waiter.exits(Expect::success());
    redis.assert_only_fence("job");
}

#[test]
fn a_waiter_acquires_after_the_holder_is_killed_and_its_lease_runs_out() {
    let redis = Server::start();
    let dir = scratch();
    let mut holder = redis.lockrun("job").args(["--ttl", "1s"]).hold();
    let first = holder.fence();
    let mut waiter = redis
        .lockrun("job")
        .args(["--wait", "60s"])
        .sh(
            r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/started""#,
            dir.path(),
        )
        .spawn();
    wait_for_subscribers(&redis, "job", 1);

    // SIGKILL: no release, no message; the key stays until its ttl ends.
    holder.run.signal(Signal::SIGKILL);
    holder.run.wait();
    // Read before the PTTL query, so that this errs early.
    let now = Instant::now();
    let pttl = redis.pttl("job");
    let expires = now + Duration::from_millis(pttl.max(0) as u64);

    let second = read_fence(&dir.path().join("started"));
    // Never before the dead holder's key expired (a little slack for the
    // two clocks: Redis's and this test's).
    let early = expires.saturating_duration_since(Instant::now());
    assert!(
        early < Duration::from_millis(100),
        "the waiter started {early:?} before the old lease ran out"
    );
    assert!(second > first, "fencing token {second} after {first}");
    waiter.exits(Expect::success());
}

#[test]
fn each_release_lets_one_waiter_through_and_all_complete() {
    const WAITERS: usize = 6;
    let redis = Server::start();
    let dir = scratch();
    let mut holder = redis.lockrun("job").args(["--ttl", "30s"]).hold();
    let mut waiters: Vec<Running> = (0..WAITERS)
        .map(|_| {
            redis
                .lockrun("job")
                .args(["--wait", "2m"])
                .no_overlap_job(dir.path(), "0.2")
                .spawn()
        })
        .collect();
    wait_for_subscribers(&redis, "job", WAITERS);
    assert!(!dir.path().join("fences").exists(), "nobody ran while held");

    holder.go();
    holder.run.exits(Expect::success());
    for waiter in &mut waiters {
        waiter.exits(Expect::success());
    }

    let fences = no_overlap_fences(dir.path());
    assert_eq!(fences.len(), WAITERS, "{fences:?}");
    // Appended while holding the lock, so in the order of acquisition.
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    redis.assert_only_fence("job");
}

#[test]
fn a_waiter_keeps_waiting_through_a_redis_restart() {
    let mut redis = Server::start();
    let dir = scratch();
    // A short lease: the holder stops its command when Redis goes, at the
    // lease's end.
    let mut holder = redis.lockrun("job").args(["--ttl", "1s"]).hold();
    let stderr = dir.path().join("stderr");
    let mut waiter = redis
        .lockrun("job")
        .args(["--wait", "60s"])
        .sh(
            r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/started""#,
            dir.path(),
        )
        .stderr(log_file(&stderr))
        .spawn();
    wait_for_subscribers(&redis, "job", 1);

    // Redis goes away under both runs: the holder stops its command (76),
    // the waiter, which holds nothing, keeps trying.
    redis.kill();
    assert!(
        wait_for_text(&stderr, "still waiting"),
        "the waiter never saw Redis go"
    );
    // The retries before the loss vary with timing.
    holder
        .end()
        .assert(Expect::code(76).stderr_has("lockrun: lost the lock job: "));
    assert!(waiter.running(), "the wait ended with Redis down");

    // Back, empty: the waiter gets the lock and runs its command.
    redis.restart_empty();
    waiter.exits_saying(Expect::success(), || read_log(&stderr));
    assert!(dir.path().join("started").exists());
    redis.assert_only_fence("job");
}
