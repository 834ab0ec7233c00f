//! Many runs on one key: busy with and without --wait, and no two commands ever overlap.

use std::time::{Duration, Instant};

use crate::harness::*;

#[test]
fn a_busy_lock_is_refused_as_configured() {
    let redis = Server::start();
    let dir = scratch();
    let marker = dir.path().join("ran");
    let mut holder = redis.lockrun("job").args(["--ttl", "2s"]).hold();
    // One attempt on the held lock, whose command would leave `marker` behind.
    let attempt = |args: &[&str]| redis.lockrun("job").args(args).touch(&marker).run();

    // No --wait: one attempt, the default busy status, one line naming the holder.
    let ran = attempt(&[]);
    ran.assert(
        Expect::code(75)
            .stderr_starts("lockrun: job is held by ")
            .stderr_has(format!("pid {}", holder.run.pid()))
            .stderr_has("; not running touch (exit 75)")
            .stderr_one_line(),
    );

    // For cron: skip quietly.
    let ran = attempt(&["--busy-exit-code", "0"]);
    ran.assert(Expect::success());

    let ran = attempt(&["--quiet"]);
    ran.assert(Expect::code(75));

    // A bounded wait tries until its limit, then gives up the same way.
    let started = Instant::now();
    let ran = attempt(&["--wait", "500ms"]);
    let waited = started.elapsed();
    ran.assert(
        Expect::code(75)
            .stderr_starts("lockrun: job is held by ")
            .stderr_has("; not running touch after waiting 500ms (exit 75)")
            .stderr_one_line(),
    );
    assert!(
        waited >= Duration::from_millis(500),
        "gave up after {waited:?}"
    );

    assert!(!marker.exists(), "a refused run ran its command");
    assert_eq!(
        redis.lock_value("job").as_deref(),
        Some(holder.token.as_str())
    );
    holder.go();
    holder.end().assert(Expect::success());
    redis.assert_only_fence("job");
}

#[test]
fn a_command_that_outlives_several_ttls_keeps_the_lock() {
    // The command runs over three ttls: only renewals can keep the lock.
    const TTL: Duration = Duration::from_secs(1);
    let redis = Server::start();
    let dir = scratch();
    let (started, done) = (dir.path().join("started"), dir.path().join("done"));
    let first_stderr = dir.path().join("first.stderr");
    let long = r#"touch "$1/started"; sleep 3.5; touch "$1/done""#;
    let mut first = redis
        .lockrun("job")
        .args(["--ttl", "1s"])
        .sh(long, dir.path())
        .stderr(log_file(&first_stderr))
        .spawn();
    let first_says = || std::fs::read_to_string(&first_stderr).unwrap_or_default();
    assert!(
        eventually(PATIENCE, || started.exists()),
        "the first run never started its command: {}",
        first_says()
    );

    // A second command that finds the first one unfinished has overlapped it.
    let second = r#"[ -e "$1/done" ] || touch "$1/overlap""#;
    let mut refused = Vec::new();
    while !done.exists() {
        let ran = redis.lockrun("job").sh(second, dir.path()).run();
        // Only an attempt that ended before the first command did must have
        // been refused: a later one may rightly find the lock released.
        if done.exists() {
            break;
        }
        ran.assert(
            Expect::code(75)
                .stderr_starts("lockrun: job is held by ")
                .stderr_has("; not running sh (exit 75)")
                .stderr_one_line(),
        );
        refused.push(Instant::now());
        std::thread::sleep(Duration::from_millis(100));
    }
    first.exits_saying(Expect::success(), || {
        format!("the lease must survive the long command: {}", first_says())
    });
    let span = match (refused.first(), refused.last()) {
        (Some(first), Some(last)) => *last - *first,
        _ => Duration::ZERO,
    };
    assert!(
        refused.len() >= 3 && span > 2 * TTL,
        "{} refusals over {span:?}: not enough to span several ttls",
        refused.len()
    );
    assert!(
        !dir.path().join("overlap").exists(),
        "a second run overlapped the first"
    );
    redis.assert_only_fence("job");
}

#[test]
fn release_leaves_only_the_fencing_counter() {
    let redis = Server::start();
    // Long enough for a few renewals, which touch the holder record too.
    let ran = redis
        .lockrun("job")
        .args(["-v", "--ttl", "2s"])
        .command(["sleep", "1.5"])
        .run();
    ran.assert(
        Expect::success()
            .stderr_has("lockrun: renewed lockrun:{job}")
            .stderr_has("lockrun: released lockrun:{job}"),
    );
    redis.assert_only_fence("job");
}

#[test]
fn twenty_waiting_runs_never_overlap_and_all_complete() {
    const RUNS: usize = 20;
    let redis = Server::start();
    let dir = scratch();
    let mut runs: Vec<Running> = (0..RUNS)
        .map(|_| {
            redis
                .lockrun("job")
                .args(["--wait", "60s"])
                .no_overlap_job(dir.path(), "0.05")
                .spawn()
        })
        .collect();
    for run in &mut runs {
        let overlapped = || "exit 3 means two jobs overlapped".to_owned();
        run.exits_within(Duration::from_secs(90), Expect::success(), overlapped);
    }
    let fences = no_overlap_fences(dir.path());
    assert_eq!(fences.len(), RUNS, "{fences:?}");
    // Written inside the lock, so in the order the lock was taken.
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens out of order: {fences:?}"
    );
    redis.assert_only_fence("job");
}
