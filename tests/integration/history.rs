//! The run history: each run's release records it with the lock; `lockrun
//! history`, `status` and `check` read it back, from any host.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::harness::*;

/// `lockrun history --json` of `name` through `lockrun`: the runs, newest
/// first.
fn history(lockrun: Lockrun<'_>) -> Vec<serde_json::Value> {
    let ran = lockrun.subcommand("history").arg("--json").run();
    assert!(
        matches!(ran.code, Some(0 | 1)),
        "lockrun history: {}",
        ran.stderr
    );
    let runs: serde_json::Value = serde_json::from_str(ran.stdout.trim())
        .unwrap_or_else(|_| panic!("not JSON: {} {}", ran.stdout, ran.stderr));
    runs.as_array().expect("an array").clone()
}

fn field<'a>(runs: &'a [serde_json::Value], name: &str) -> Vec<&'a serde_json::Value> {
    runs.iter().map(|run| &run[name]).collect()
}

/// `lockrun check` of `name` on `server` with these thresholds: its exit
/// status and first line.
fn check(server: &Server, name: &str, args: &[&str]) -> (Option<i32>, String) {
    let ran = server.lockrun(name).subcommand("check").args(args).run();
    let line = ran.stdout.lines().next().unwrap_or_default().to_owned();
    (ran.code, line)
}

#[test]
fn two_hosts_alternate_and_a_third_reads_who_ran_what() {
    let redis = Server::start();
    let run = |host, argv: &[&str]| redis.lockrun("billing").on_host(host).command(argv).run();
    run("host-a", &["true"]).assert(Expect::success());
    run("host-b", &["sh", "-c", "sleep 0.2; exit 3"]).assert(Expect::code(3));
    run("host-a", &["sleep", "0.1"]).assert(Expect::success());

    let runs = history(redis.lockrun("billing"));
    assert_eq!(field(&runs, "host"), ["host-a", "host-b", "host-a"]);
    assert_eq!(field(&runs, "outcome"), ["exit 0", "exit 3", "exit 0"]);
    assert_eq!(field(&runs, "command"), ["sleep", "sh", "true"]);
    let tokens: Vec<u64> = runs
        .iter()
        .map(|r| r["fencing_token"].as_u64().expect("a token"))
        .collect();
    assert!(
        tokens.windows(2).all(|w| w[0] > w[1]),
        "newest first: {tokens:?}"
    );
    let failed = &runs[1];
    assert!(
        failed["duration_ms"].as_u64().expect("ms") >= 200,
        "{failed}"
    );
    assert!(failed["started_at_ms"].as_u64() <= failed["ended_at_ms"].as_u64());
    assert_eq!(failed["user"], "root");
    assert_eq!(failed["release"], "released");

    let text = redis.lockrun("billing").subcommand("history").run();
    text.assert(Expect::success().stdout_any());
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", text.stdout);
    assert!(
        lines[1].contains(" host-b pid ") && lines[1].ends_with(": exit 3"),
        "{}",
        lines[1]
    );
    let last = redis
        .lockrun("billing")
        .subcommand("history")
        .args(["-n", "1"])
        .run();
    assert_eq!(last.stdout.lines().count(), 1, "{}", last.stdout);

    let (code, json) = redis.lockrun("billing").status_json();
    assert_eq!(code, Some(1), "free");
    assert_eq!(json["last_run"]["host"], "host-a");
    assert_eq!(
        json["last_success"]["fencing_token"],
        runs[0]["fencing_token"]
    );
    let status = redis.lockrun("billing").subcommand("status").run();
    status.assert(
        Expect::code(1)
            .stdout_has("  last run: ")
            .stdout_has(" host-a pid "),
    );
}

#[test]
fn check_says_each_status_with_its_exit_code() {
    let mut redis = Server::start();
    let (code, line) = check(&redis, "job", &["--succeeded-within", "1h"]);
    assert_eq!(
        (code, line.as_str()),
        (Some(2), "LOCKRUN CRITICAL - job: no run recorded | runs=0")
    );

    redis
        .lockrun("job")
        .on_host("host-b")
        .command(["true"])
        .run()
        .assert(Expect::success());
    let (code, line) = check(&redis, "job", &["--succeeded-within", "25h"]);
    assert_eq!(code, Some(0), "{line}");
    assert!(
        line.starts_with("LOCKRUN OK - job succeeded ") && line.contains(" ago on host-b in "),
        "{line}"
    );

    std::thread::sleep(Duration::from_millis(1100));
    let (code, line) = check(
        &redis,
        "job",
        &["--succeeded-within", "1h", "--warn-within", "1s"],
    );
    assert_eq!(code, Some(1), "{line}");
    assert!(line.starts_with("LOCKRUN WARNING - "), "{line}");
    let (code, line) = check(&redis, "job", &["--succeeded-within", "1s"]);
    assert_eq!(code, Some(2), "{line}");
    assert!(
        line.starts_with("LOCKRUN CRITICAL - job succeeded "),
        "{line}"
    );

    // A last run that failed is a warning, its success still recent.
    redis
        .lockrun("job")
        .command(["false"])
        .run()
        .assert(Expect::code(1));
    let (code, line) = check(&redis, "job", &["--succeeded-within", "1h"]);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.contains("; the last run, ") && line.contains("ended exit 1"),
        "{line}"
    );

    // A lock held far longer than its runs take.
    for _ in 0..3 {
        redis
            .lockrun("job")
            .command(["true"])
            .run()
            .assert(Expect::success());
    }
    let mut holder = redis.lockrun("job").hold();
    let held_long = eventually(PATIENCE, || {
        check(&redis, "job", &["--succeeded-within", "1h"])
            .1
            .contains("; held for ")
    });
    let (code, line) = check(&redis, "job", &["--succeeded-within", "1h"]);
    assert!(held_long && code == Some(1), "{code:?} {line}");
    let ran = redis
        .lockrun("job")
        .subcommand("check")
        .args(["--succeeded-within", "1h", "--json"])
        .run();
    let json: serde_json::Value = serde_json::from_str(ran.stdout.trim()).expect("JSON");
    assert_eq!(json["status"], "WARNING");
    assert_eq!(json["exit_status"], 1);
    assert!(json["held_for_ms"].as_u64().is_some() && json["usual_duration_ms"].as_u64().is_some());
    holder.finish();

    redis.kill();
    let (code, line) = check(&redis, "job", &["--succeeded-within", "1h"]);
    assert_eq!(code, Some(3), "{line}");
    assert!(line.starts_with("LOCKRUN UNKNOWN - job: "), "{line}");
}

#[test]
fn a_lost_lease_and_a_superseded_run_leave_their_record() {
    let redis = Server::start();
    let force = || {
        let ran = redis
            .lockrun("job")
            .subcommand("release")
            .arg("--force")
            .run();
        ran.assert(Expect::success().stdout_any());
    };
    // Renewals close together: the removal is noticed at the next one.
    let renewing = ["--ttl", "5s", "--renew-every", "100ms"];
    let mut lost = redis
        .lockrun("job")
        .args(renewing)
        .command(["sleep", "60"])
        .hold();
    force();
    lost.lost();
    // Removed, and another run took the lock before this one could tell:
    // it is stopped (SIGSTOP) meanwhile.
    let mut superseded = redis
        .lockrun("job")
        .args(renewing)
        .command(["sleep", "60"])
        .hold();
    superseded.run.signal(Signal::SIGSTOP);
    force();
    let mut next = redis.lockrun("job").hold();
    superseded.run.signal(Signal::SIGCONT);
    superseded.lost();
    next.finish();

    let runs = history(redis.lockrun("job"));
    assert_eq!(field(&runs, "outcome"), ["exit 0", "superseded", "lost"]);
    assert_eq!(field(&runs, "release"), ["released", "superseded", "lost"]);
    assert_eq!(field(&runs, "succeeded"), [true, false, false]);
}

#[test]
fn slots_record_their_slot_and_history_0_keeps_none() {
    let redis = Server::start();
    let first = redis.lockrun("pool").args(["--slots", "2"]).hold();
    let mut second = redis.lockrun("pool").args(["--slots", "2"]).hold();
    let mut first = first;
    first.finish();
    second.finish();
    let runs = history(redis.lockrun("pool"));
    let mut slots: Vec<u64> = runs.iter().filter_map(|r| r["slot"].as_u64()).collect();
    slots.sort_unstable();
    assert_eq!(slots, [0, 1]);
    let text = redis.lockrun("pool").subcommand("history").run();
    assert!(text.stdout.contains(", slot 1"), "{}", text.stdout);

    redis
        .lockrun("none")
        .args(["--history", "0"])
        .command(["true"])
        .run()
        .assert(Expect::success());
    assert!(!redis.keys().contains(&"lockrun:{none}:history".to_owned()));
    assert!(history(redis.lockrun("none")).is_empty());

    for _ in 0..3 {
        let run = redis
            .lockrun("few")
            .args(["--history", "2"])
            .command(["true"]);
        run.run().assert(Expect::success());
    }
    assert_eq!(history(redis.lockrun("few")).len(), 2);
}

#[test]
fn a_quorum_with_a_member_down_records_on_the_rest() {
    let mut servers = quorum(3);
    servers[2].kill();
    let ran = Lockrun::on_all(&servers)
        .key("job")
        .args(QUORUM_TIMING)
        .command(["true"])
        .run();
    ran.assert(Expect::success().stderr_any());
    let runs = history(Lockrun::on_all(&servers).key("job"));
    assert_eq!(runs.len(), 1, "one run, merged from two members: {runs:?}");
    assert_eq!(runs[0]["outcome"], "exit 0");
    let ran = Lockrun::on_all(&servers)
        .key("job")
        .subcommand("check")
        .args(["--succeeded-within", "1h"])
        .run();
    ran.assert(Expect::success().stdout_has("LOCKRUN OK - job succeeded "));
}

#[test]
fn a_cluster_keeps_the_history_in_the_lock_slot() {
    let cluster = Cluster::start();
    let url = cluster.url_via(&cluster.primaries());
    let ran = Lockrun::via(&url).key("job").command(["true"]).run();
    ran.assert(Expect::success().stderr_any());
    let runs = history(Lockrun::via(&url).key("job"));
    assert_eq!(field(&runs, "outcome"), ["exit 0"]);
}
