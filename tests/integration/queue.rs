//! The wait queue: first come first served, dead waiters drop out, runs
//! without --wait do not overtake it, --supersede, and `status` shows it.
//!
//! Every wait is a poll with a deadline; the bounds asserted are far from
//! what a slow, busy machine needs, and from what a broken queue would take.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

/// Appends the run's name ($2) and fencing token to `order` in the
/// directory given as $1, so a test sees in which order the lock was granted.
const NOTE_ORDER: &str = r#"echo "$2 $LOCKRUN_FENCING_TOKEN" >> "$1/order""#;

/// Starts a run of `NOTE_ORDER` for lock `job` as `name`, with `args`
/// before the `--`, its stderr in `NAME.stderr` in `dir`.
fn spawn_run(redis: &Server, args: &[&str], dir: &Path, name: &str) -> Running {
    redis
        .lockrun("job")
        .args(args)
        .sh(NOTE_ORDER, dir)
        .command([name])
        .stderr(log_file(&dir.join(format!("{name}.stderr"))))
        .spawn()
}

fn stderr_of(dir: &Path, name: &str) -> String {
    read_log(&dir.join(format!("{name}.stderr")))
}

/// Starts a waiting run and returns once it has its place in line and
/// listens for its wake-up message, so that runs started one after the
/// other arrive in that order.
fn wait_in_line(redis: &Server, args: &[&str], dir: &Path, name: &str) -> Running {
    let before = redis.in_line("job");
    let mut run = spawn_run(redis, args, dir, name);
    let queued = eventually(PATIENCE, || {
        !run.running() || (redis.in_line("job") > before && redis.listening_waiters("job") > before)
    });
    assert!(
        queued && run.running(),
        "{name} never took its place in line: {}",
        stderr_of(dir, name)
    );
    run
}

/// The names in `order`, in the order the lock was granted, after checking
/// that the fencing tokens grew in that order.
fn grant_order(dir: &Path) -> Vec<String> {
    let log = std::fs::read_to_string(dir.join("order")).unwrap_or_default();
    let entries: Vec<(String, u64)> = log
        .lines()
        .map(|line| {
            let (name, fence) = line.split_once(' ').expect("name and token");
            (name.to_string(), fence.parse().expect("fencing token"))
        })
        .collect();
    assert!(
        entries.windows(2).all(|w| w[0].1 < w[1].1),
        "fencing tokens out of grant order: {log}"
    );
    entries.into_iter().map(|(name, _)| name).collect()
}

fn finish_all(runs: &mut [Running], dir: &Path, names: &[&str]) {
    for (run, name) in runs.iter_mut().zip(names) {
        run.exits_saying(Expect::success(), || {
            format!("{name}: {}", stderr_of(dir, name))
        });
    }
}

/// Waits for `run`, the one run left in line, and checks that it got the
/// lock, within `bound` of `since` (what `what` names), and that nothing of
/// the queue is left in Redis.
fn only_run_within(
    redis: &Server,
    dir: &Path,
    run: Running,
    name: &str,
    (since, what): (Instant, &str),
    bound: Duration,
) {
    finish_all(&mut [run], dir, &[name]);
    let took = since.elapsed();
    assert!(took < bound, "{name} started {took:?} after {what}");
    assert_eq!(grant_order(dir), [name]);
    redis.assert_only_fence("job");
}

#[test]
fn the_lock_goes_to_waiters_in_arrival_order() {
    let redis = Server::start();
    let dir = scratch();
    let mut holder = redis.lockrun("job").hold();
    let names = ["w1", "w2", "w3", "w4", "w5", "w6"];
    let mut runs: Vec<Running> = names
        .iter()
        .map(|name| wait_in_line(&redis, &["--wait", "1m"], dir.path(), name))
        .collect();
    assert!(!dir.path().join("order").exists(), "nobody ran while held");

    holder.go();
    holder.run.exits(Expect::success());
    finish_all(&mut runs, dir.path(), &names);
    assert_eq!(grant_order(dir.path()), names);
    redis.assert_only_fence("job");
}

#[test]
fn status_lists_the_waiters_in_order() {
    let redis = Server::start();
    let dir = scratch();
    let mut holder = redis.lockrun("job").hold();
    let names = ["w1", "w2", "w3"];
    let mut runs: Vec<Running> = names
        .iter()
        .map(|name| wait_in_line(&redis, &["--wait", "1m"], dir.path(), name))
        .collect();
    runs.push(wait_in_line(
        &redis,
        &["--wait", "1m", "--supersede"],
        dir.path(),
        "w4",
    ));

    let status = |args: &[&str]| redis.lockrun("job").subcommand("status").args(args).run();
    let ran = status(&["--json"]);
    ran.assert(Expect::success().stdout_any().context("held"));
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("JSON");
    let waiters = json["waiters"].as_array().expect("a waiters array");
    let pids: Vec<u64> = waiters
        .iter()
        .map(|w| w["pid"].as_u64().expect("pid"))
        .collect();
    let want: Vec<u64> = runs.iter().map(|r| r.pid().as_raw() as u64).collect();
    assert_eq!(pids, want, "{json}");
    let waited: Vec<u64> = waiters
        .iter()
        .map(|w| w["waited_ms"].as_u64().expect("waited_ms"))
        .collect();
    assert!(
        waited.windows(2).all(|w| w[0] >= w[1]),
        "the first waited longest: {waited:?}"
    );
    assert!(waiters.iter().all(|w| w["host"].as_str().is_some()
        && w["queued_at_ms"].as_u64().is_some()
        && w["command"]
            .as_str()
            .is_some_and(|c| c.starts_with("sh -c "))));
    assert_eq!(waiters[3]["supersede"], true);
    assert_eq!(waiters[0]["supersede"], false);

    let text = status(&[]).stdout;
    assert!(text.contains("4 waiting, first come first:"), "{text}");
    let first = text.find("1. ").expect("numbered");
    let line_of = |pid: u64| {
        text.find(&format!(" pid {pid}, waiting "))
            .unwrap_or_else(|| panic!("pid {pid} listed: {text}"))
    };
    assert!(first < line_of(want[0]));
    assert!(
        want.windows(2).all(|w| line_of(w[0]) < line_of(w[1])),
        "{text}"
    );

    holder.go();
    holder.run.exits(Expect::success());
    finish_all(&mut runs, dir.path(), &["w1", "w2", "w3", "w4"]);
    let json: serde_json::Value = serde_json::from_str(&status(&["--json"]).stdout).expect("JSON");
    assert_eq!(json["waiters"], serde_json::json!([]), "{json}");
}

#[test]
fn a_run_without_wait_does_not_overtake_the_line() {
    let redis = Server::start();
    let dir = scratch();
    let mut holder = redis.lockrun("job").args(["--ttl", "1s"]).hold();
    let mut first = wait_in_line(&redis, &["--wait", "1m"], dir.path(), "first");
    // Held up between the lock coming free and taking it: the lock is free
    // while a live waiter is first in line.
    first.signal(Signal::SIGSTOP);
    holder.run.signal(Signal::SIGKILL);
    holder.run.wait();
    redis.expire_lease("job");
    assert!(
        eventually(PATIENCE, || !redis.is_locked("job")),
        "the dead holder's lease never ran out"
    );

    let ran = redis
        .lockrun("job")
        .touch(dir.path().join("overtook"))
        .run();
    ran.assert(Expect::code(75).stderr(
        "lockrun: job is free, but 1 run waiting in line came first; not running touch (exit 75)\n",
    ));
    assert!(!dir.path().join("overtook").exists());

    first.signal(Signal::SIGCONT);
    first.exits_saying(Expect::success(), || stderr_of(dir.path(), "first"));
    assert_eq!(grant_order(dir.path()), ["first"]);
    redis.assert_only_fence("job");
}

#[test]
fn supersede_ends_older_waiting_runs_but_never_the_holder() {
    let redis = Server::start();
    let dir = scratch();
    let supersede = ["--wait", "1m", "--supersede"];
    // Three pushes of a deploy, and a run of something else in between.
    let mut first = redis.lockrun("job").args(supersede).hold();
    let mut second = wait_in_line(&redis, &supersede, dir.path(), "second");
    let other = wait_in_line(&redis, &["--wait", "1m"], dir.path(), "other");
    // Its place replaces the second's, so the line does not grow.
    let third = spawn_run(&redis, &supersede, dir.path(), "third");

    second.exits_saying(
        Expect::code(i32::from(lockrun::exit_code::SUPERSEDED)),
        || stderr_of(dir.path(), "second"),
    );
    let said = stderr_of(dir.path(), "second");
    // Its own status, not the busy one: nothing is stuck.
    assert!(said.ends_with("(exit 79)\n"), "{said}");
    assert!(
        said.contains("superseded by ") && said.contains(&format!(" pid {}", third.pid())),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(first.run.running(), "the holder was touched");
    assert_eq!(
        redis.lock_value("job").as_deref(),
        Some(first.token.as_str())
    );

    first.go();
    first.end().assert(Expect::success());
    finish_all(&mut [other, third], dir.path(), &["other", "third"]);
    // `other` came before `third`, and did not give --supersede.
    assert_eq!(grant_order(dir.path()), ["other", "third"]);
    redis.assert_only_fence("job");
}

#[test]
fn a_waiter_interrupted_by_sigint_leaves_the_line() {
    let redis = Server::start();
    let dir = scratch();
    let mut holder = redis.lockrun("job").hold();
    let mut quitter = wait_in_line(&redis, &["--wait", "1m"], dir.path(), "quitter");
    let stayer = wait_in_line(&redis, &["--wait", "1m"], dir.path(), "stayer");
    assert_eq!(redis.in_line("job"), 2);

    quitter.signal(Signal::SIGINT);
    quitter.exits_saying(Expect::killed_by(Signal::SIGINT), || {
        stderr_of(dir.path(), "quitter")
    });
    // Gone from line by the time it exited, not when its place runs out.
    assert_eq!(redis.in_line("job"), 1);
    let records = redis.waiter_records("job");
    assert_eq!(records.len(), 1, "{records:?}");

    holder.go();
    holder.run.exits(Expect::success());
    finish_all(&mut [stayer], dir.path(), &["stayer"]);
    assert_eq!(grant_order(dir.path()), ["stayer"]);
    redis.assert_only_fence("job");
}

#[test]
fn a_release_skips_a_first_waiter_that_was_killed() {
    let redis = Server::start();
    let dir = scratch();
    let mut holder = redis.lockrun("job").hold();
    // A place that lasts 30s: only skipping it lets the next run in sooner.
    let mut dead = wait_in_line(&redis, &["--wait", "1m"], dir.path(), "dead");
    let next = wait_in_line(&redis, &["--wait", "1m"], dir.path(), "next");
    dead.signal(Signal::SIGKILL);
    dead.wait();
    // Redis has seen its connections close: only one waiter listens now.
    assert!(
        eventually(PATIENCE, || redis.wake_channels("job") == 1),
        "still {}",
        redis.wake_channels("job")
    );

    let released = Instant::now();
    holder.go();
    holder.run.exits(Expect::success());
    only_run_within(
        &redis,
        dir.path(),
        next,
        "next",
        (released, "the release"),
        Duration::from_secs(10),
    );
}

#[test]
fn a_dead_first_waiter_blocks_the_line_no_longer_than_its_ttl() {
    let redis = Server::start();
    let dir = scratch();
    let mut holder = redis.lockrun("job").args(["--ttl", "1s"]).hold();
    let mut dead = wait_in_line(&redis, &["--wait", "1m", "--ttl", "1s"], dir.path(), "dead");
    let next = wait_in_line(&redis, &["--wait", "1m"], dir.path(), "next");
    // No release, and no hand-over to notice it by: the holder's lease and
    // the first waiter's place run out on their own, each within 1s.
    let killed = Instant::now();
    holder.run.signal(Signal::SIGKILL);
    dead.signal(Signal::SIGKILL);
    holder.run.wait();
    dead.wait();

    only_run_within(
        &redis,
        dir.path(),
        next,
        "next",
        (killed, "the deaths"),
        Duration::from_secs(1) + Duration::from_secs(8),
    );
}

#[test]
fn a_lease_that_runs_out_unreleased_goes_to_the_first_waiter() {
    let redis = Server::start();
    let dir = scratch();
    let mut holder = redis.lockrun("job").args(["--ttl", "1s"]).hold();
    let names = ["w1", "w2", "w3"];
    let mut runs: Vec<Running> = names
        .iter()
        .map(|name| wait_in_line(&redis, &["--wait", "1m"], dir.path(), name))
        .collect();
    holder.run.signal(Signal::SIGKILL);
    holder.run.wait();
    finish_all(&mut runs, dir.path(), &names);
    assert_eq!(grant_order(dir.path()), names);
    redis.assert_only_fence("job");
}

#[test]
fn a_waiter_that_becomes_first_notices_a_lease_shorter_than_its_own_refresh() {
    let redis = Server::start();
    let dir = scratch();
    let mut holder = redis.lockrun("job").args(["--ttl", "1s"]).hold();
    let mut ahead = wait_in_line(&redis, &["--wait", "1m"], dir.path(), "ahead");
    // It refreshes its place every 20s: only being told that it is first,
    // and how long the lease has left, lets it notice the lease run out.
    let slow = wait_in_line(
        &redis,
        &["--wait", "1m", "--ttl", "60s"],
        dir.path(),
        "slow",
    );
    ahead.signal(Signal::SIGINT);
    ahead.exits(Expect::killed_by(Signal::SIGINT));
    let killed = Instant::now();
    holder.run.signal(Signal::SIGKILL);
    holder.run.wait();

    only_run_within(
        &redis,
        dir.path(),
        slow,
        "slow",
        (killed, "the holder died with 1s of lease left"),
        Duration::from_secs(12),
    );
}
