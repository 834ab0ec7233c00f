//! `--once-per`: a success recorded with the lock, checked by the acquire
//! script and written by the release script.

use std::path::Path;

use crate::harness::{
    eventually, quorum, scratch, Expect, Lockrun, Server, PATIENCE, QUORUM_TIMING,
};

const NAME: &str = "hourly";

/// A run that appends a line to `ran` in `dir` when its command runs.
fn counting<'a>(run: Lockrun<'a>, dir: &Path, period: &str) -> Lockrun<'a> {
    run.args(["--once-per", period])
        .sh(r#"echo x >> "$1/ran""#, dir)
}

fn times_ran(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("ran"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn a_second_run_in_the_period_skips_silently_and_says_why_with_verbose() {
    let redis = Server::start();
    let dir = scratch();
    let first = counting(redis.lockrun(NAME), dir.path(), "1h").run();
    first.assert(Expect::success());
    assert_eq!(times_ran(dir.path()), 1);
    let second = counting(redis.lockrun(NAME), dir.path(), "1h").run();
    second.assert(Expect::success());
    let verbose = counting(redis.lockrun(NAME), dir.path(), "1h")
        .arg("-v")
        .run();
    verbose.assert(
        Expect::success()
            .stderr_starts("lockrun: skipped: hourly ran on ")
            .stderr_has("the period ends at ")
            .stderr_one_line(),
    );
    assert_eq!(times_ran(dir.path()), 1);
    assert!(!redis.is_locked(NAME), "a skipping run gives the lock back");
    // A run without --once-per ignores the record.
    let plain = redis
        .lockrun(NAME)
        .sh(r#"echo x >> "$1/ran""#, dir.path())
        .run();
    plain.assert(Expect::success());
    assert_eq!(times_ran(dir.path()), 2);
}

#[test]
fn a_failed_run_records_nothing_so_the_next_one_runs() {
    let redis = Server::start();
    let dir = scratch();
    let failed = redis
        .lockrun(NAME)
        .args(["--once-per", "1h"])
        .sh(r#"echo x >> "$1/ran"; exit 3"#, dir.path())
        .run();
    failed.assert(Expect::code(3));
    let next = counting(redis.lockrun(NAME), dir.path(), "1h").run();
    next.assert(Expect::success());
    assert_eq!(times_ran(dir.path()), 2);
}

#[test]
fn the_period_ends_on_redis_clock_and_then_a_run_runs_again() {
    let redis = Server::start();
    let dir = scratch();
    let first = counting(redis.lockrun(NAME), dir.path(), "1500ms").run();
    first.assert(Expect::success());
    let until: u64 = redis
        .query(
            redis::cmd("HGET")
                .arg(format!("lockrun:{{{NAME}}}:done"))
                .arg("until"),
        )
        .expect("the record's end");
    let ran_again = eventually(PATIENCE, || {
        let run = counting(redis.lockrun(NAME), dir.path(), "1500ms").run();
        run.assert(Expect::success());
        times_ran(dir.path()) == 2
    });
    assert!(ran_again, "no run ran after the period");
    let now: Vec<String> = redis.query(&redis::cmd("TIME")).expect("TIME");
    let now_ms = now[0].parse::<u64>().expect("secs") * 1000;
    assert!(now_ms + 1000 >= until, "ran again before the period's end");
}

#[test]
fn status_shows_the_record_and_release_force_clears_it() {
    let redis = Server::start();
    let dir = scratch();
    let first = counting(redis.lockrun(NAME), dir.path(), "1h").run();
    first.assert(Expect::success());
    let status = Lockrun::at(&redis)
        .subcommand("status")
        .key(NAME)
        .arg("--json")
        .run();
    let json: serde_json::Value = serde_json::from_str(&status.stdout).expect("status JSON");
    let done = &json["done"];
    assert!(
        done["fencing_token"].is_u64() && done["host"].is_string(),
        "{json}"
    );
    let left = done["left_ms"].as_u64().expect("left_ms");
    assert!(left > 3_500_000 && left <= 3_600_000, "{json}");
    let text = Lockrun::at(&redis).subcommand("status").key(NAME).run();
    text.assert_stdout_has("done: ran on ");
    let list = Lockrun::at(&redis).subcommand("list").run();
    list.assert_stdout_has("hourly: free");
    list.assert_stdout_has("done: ran on ");

    let cleared = Lockrun::at(&redis)
        .subcommand("release")
        .key(NAME)
        .arg("--force")
        .run();
    cleared
        .assert(Expect::success().stdout_has("cleared the --once-per success recorded for hourly"));
    let next = counting(redis.lockrun(NAME), dir.path(), "1h").run();
    next.assert(Expect::success());
    assert_eq!(times_ran(dir.path()), 2);
}

#[test]
fn five_concurrent_runs_in_one_period_run_the_command_once() {
    let redis = Server::start();
    let dir = scratch();
    let runs: Vec<_> = (0..5)
        .map(|_| {
            counting(redis.lockrun(NAME), dir.path(), "1h")
                .args(["--wait", "30s"])
                .spawn()
        })
        .collect();
    for mut run in runs {
        run.exits(Expect::success());
    }
    assert_eq!(times_ran(dir.path()), 1);
}

#[test]
fn a_waiter_behind_a_successful_holder_skips() {
    let redis = Server::start();
    let dir = scratch();
    let mut holder = redis.lockrun(NAME).args(["--once-per", "1h"]).hold();
    let mut waiter = counting(redis.lockrun(NAME), dir.path(), "1h")
        .args(["--wait", "30s"])
        .spawn();
    assert!(eventually(PATIENCE, || redis.in_line(NAME) == 1));
    holder.go();
    holder.run.exits(Expect::success());
    waiter.exits(Expect::success());
    assert_eq!(times_ran(dir.path()), 0, "the waiter ran its command");
    assert!(!redis.is_locked(NAME));
}

#[test]
fn over_a_quorum_with_one_member_down_it_records_and_skips() {
    let mut servers = quorum(3);
    servers[2].kill();
    let dir = scratch();
    let run = |dir: &Path| {
        Lockrun::on_all(&servers)
            .key(NAME)
            .args(["--once-per", "1h"])
            .args(QUORUM_TIMING)
            .sh(r#"echo x >> "$1/ran""#, dir)
            .run()
    };
    let first = run(dir.path());
    first.assert(Expect::success());
    let second = run(dir.path());
    second.assert(Expect::success());
    assert_eq!(times_ran(dir.path()), 1);
    // One member's record is enough: the other one loses its record.
    let done = format!("lockrun:{{{NAME}}}:done");
    let _: i64 = servers[0].query(redis::cmd("DEL").arg(&done)).expect("DEL");
    let third = run(dir.path());
    third.assert(Expect::success());
    assert_eq!(times_ran(dir.path()), 1);
}

#[test]
fn a_skipping_run_writes_a_skipped_event_with_verbose() {
    let redis = Server::start();
    let dir = scratch();
    let first = counting(redis.lockrun(NAME), dir.path(), "1h").run();
    first.assert(Expect::success());
    let ran = counting(redis.lockrun(NAME), dir.path(), "1h")
        .args(["--log-format", "json", "-v"])
        .run();
    ran.assert(Expect::success().stderr_one_line());
    let events = crate::log_format::checked_events(&ran.stderr, Some(NAME));
    let skipped = &events[0];
    assert_eq!(skipped["event"], "skipped");
    assert!(skipped["ran_by"]["fencing_token"].is_u64(), "{skipped:?}");
    let (at, until) = (skipped["ran_at_ms"].as_u64(), skipped["until_ms"].as_u64());
    assert_eq!(until.zip(at).map(|(u, a)| u - a), Some(3_600_000));
}
