//! The operator's controls: status, release --force, --min-hold, --timeout,
//! fencing tokens across a Redis restart.

use crate::harness::*;

#[test]
fn status_reports_holder_and_free_lock() {
    let redis = Server::start();
    let ran = redis.lockrun("job").subcommand("status").run();
    assert_eq!(ran.code, Some(1), "free lock exits 1");
    ran.assert_stdout_has("job: free");

    let mut holder = redis
        .lockrun("job")
        .args(["--ttl", "10s"])
        .command(["sleep", "60"])
        .hold();
    let ran = redis.lockrun("job").subcommand("status").run();
    assert_eq!(ran.code, Some(0), "held lock exits 0");
    let pid = holder.run.pid().to_string();
    ran.assert_stdout_has(&format!("pid {pid}"));
    ran.assert_stdout_has("fencing token");
    ran.assert_stdout_has("command: sleep 60");

    let ran = redis
        .lockrun("job")
        .subcommand("status")
        .arg("--json")
        .run();
    ran.assert(Expect::success());
    let json: serde_json::Value = serde_json::from_str(ran.stdout.trim()).expect("one JSON object");
    let fields = field_names(&json);
    assert_eq!(
        fields,
        [
            "done",
            "held",
            "holder",
            "holders",
            "key",
            "last_fencing_token",
            "redis_key",
            "redis_node",
            "replicas_acknowledged",
            "slots",
            "ttl_left_ms",
            "waiters"
        ]
    );
    assert_eq!(json["waiters"], serde_json::json!([]), "nobody waits");
    assert_eq!(
        json["replicas_acknowledged"],
        serde_json::Value::Null,
        "no acks asked"
    );
    assert_eq!(
        json["redis_node"],
        redis.url().trim_start_matches("unix://"),
        "the server that answered"
    );
    let holder_json = &json["holder"];
    let holder_fields = field_names(holder_json);
    assert_eq!(
        holder_fields,
        [
            "acquired_at_ms",
            "command",
            "fencing_token",
            "finished_at_ms",
            "held_for_ms",
            "host",
            "pid"
        ]
    );
    assert_eq!(
        holder_json["finished_at_ms"],
        serde_json::Value::Null,
        "still running"
    );
    assert_eq!(json["held"], true);
    assert_eq!(json["key"], "job");
    assert_eq!(holder_json["pid"].to_string(), pid);
    assert!(json["ttl_left_ms"].as_u64().is_some_and(|ms| ms <= 10_000));
    assert_eq!(holder_json["fencing_token"], json["last_fencing_token"]);

    holder.run.signal(nix::sys::signal::Signal::SIGTERM);
    holder.run.wait();
    let ran = redis
        .lockrun("job")
        .subcommand("status")
        .arg("--json")
        .run();
    ran.assert(Expect::code(1));
    let json: serde_json::Value = serde_json::from_str(ran.stdout.trim()).expect("JSON");
    assert_eq!(json["held"], false);
    assert!(json["holder"].is_null());
}

#[test]
fn status_with_redis_down_exits_69() {
    let mut redis = Server::start();
    redis.kill();
    redis
        .lockrun("job")
        .subcommand("status")
        .run()
        .assert_redis_unreachable();
}

#[test]
fn busy_message_names_the_holder() {
    let redis = Server::start();
    let holder = redis.lockrun("job").command(["sleep", "60"]).hold();
    let ran = redis.lockrun("job").command(["true"]).run();
    ran.assert(Expect::code(75));
    let host = nix::unistd::gethostname().expect("hostname");
    let expected = format!(
        "held by {} pid {}",
        host.to_string_lossy(),
        holder.run.pid()
    );
    ran.assert_stderr_has(&expected);
    assert_eq!(ran.stderr.lines().count(), 1, "one line: {}", ran.stderr);
}

#[test]
fn force_release_stops_the_old_holder() {
    let redis = Server::start();
    let mut holder = redis
        .lockrun("job")
        .args(["--ttl", "2s"])
        .command(["sleep", "60"])
        .hold();

    let ran = redis.lockrun("job").subcommand("release").run();
    assert_eq!(ran.code, Some(64), "refuses without --force");
    ran.assert_stderr_has("--force");
    assert!(redis.is_locked("job"));

    let ran = redis
        .lockrun("job")
        .subcommand("release")
        .arg("--force")
        .run();
    ran.assert(Expect::success());
    ran.assert_stdout_has(&format!("pid {}", holder.run.pid()));
    // The old holder notices at its next renewal and stops its command.
    holder.end().assert(Expect::code(76));

    let ran = redis
        .lockrun("job")
        .subcommand("release")
        .arg("--force")
        .run();
    ran.assert(Expect::success().stdout_has("was not held"));
}

#[test]
fn min_hold_keeps_a_late_second_run_out_then_lets_it_in() {
    let redis = Server::start();
    let ran = redis
        .lockrun("job")
        .args(["--min-hold", "3s"])
        .command(["true"])
        .run();
    ran.assert(Expect::success());
    assert!(redis.is_locked("job"), "kept after the command ended");
    let pttl = redis.pttl("job");
    assert!(
        pttl > 0 && pttl <= 3000,
        "kept for what remains of 3s: {pttl}"
    );
    let ran = redis.lockrun("job").arg("-q").command(["true"]).run();
    assert_eq!(
        ran.code,
        Some(75),
        "a second run inside the minimum hold is refused"
    );
    // Once the minimum is over, the next run gets in.
    assert!(eventually(PATIENCE, || !redis.is_locked("job")));
    let ran = redis.lockrun("job").command(["true"]).run();
    ran.assert(Expect::success());
    redis.assert_only_fence("job");
}

#[test]
fn a_lock_kept_for_min_hold_is_shown_as_finished_not_as_a_live_holder() {
    let redis = Server::start();
    let ran = redis
        .lockrun("job")
        .args(["--min-hold", "60s"])
        .command(["true"])
        .run();
    ran.assert(Expect::success());

    let status = redis.lockrun("job").subcommand("status").run();
    status.assert(Expect::success().context("still held"));
    assert!(
        status.stdout.starts_with("job: kept for --min-hold for ")
            && status.stdout.contains("; the command finished "),
        "{}",
        status.stdout
    );
    let json = redis
        .lockrun("job")
        .subcommand("status")
        .arg("--json")
        .run();
    let json: serde_json::Value = serde_json::from_str(&json.stdout).expect("one JSON object");
    assert!(json["holder"]["finished_at_ms"].is_u64(), "{json}");

    let busy = redis.lockrun("job").command(["true"]).run();
    busy.assert(Expect::code(75));
    assert!(
        busy.stderr
            .starts_with("lockrun: job is kept for --min-hold for ")
            && busy.stderr.contains("; the command (true on ")
            && busy
                .stderr
                .trim_end()
                .ends_with("; not running true (exit 75)"),
        "{}",
        busy.stderr
    );
    let released = redis
        .lockrun("job")
        .subcommand("release")
        .arg("--force")
        .run();
    released.assert(Expect::success());
    redis.assert_only_fence("job");
}

#[test]
fn timeout_stops_the_command_and_releases() {
    let redis = Server::start();
    let ran = redis
        .lockrun("job")
        .args(["--timeout", "500ms"])
        .command(["sleep", "30"])
        .run();
    ran.assert(Expect::code(124).stderr_has("--timeout"));
    redis.assert_only_fence("job");
}

#[test]
fn timeout_kills_a_command_that_ignores_sigterm() {
    let redis = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let pidfile = dir.path().join("pid");
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.1; done",
        pidfile.display()
    );
    let ran = redis
        .lockrun("job")
        .args(["--timeout", "500ms", "--kill-grace", "500ms"])
        .command(["sh", "-c", &script])
        .run();
    ran.assert(Expect::code(124));
    let pid: i32 = read_when_ready(&pidfile).parse().expect("pid");
    assert!(eventually(PATIENCE, || !alive(pid)), "command killed");
    assert!(!redis.is_locked("job"));
}

#[test]
fn fencing_tokens_grow_across_a_redis_restart_that_lost_everything() {
    let mut redis = Server::start();
    let first = redis.lockrun("job").next_fence();
    redis.restart_empty();
    assert!(redis.keys().is_empty(), "restarted empty");
    let second = redis.lockrun("job").next_fence();
    assert!(second > first, "{second} > {first}");
}

#[test]
fn fencing_tokens_stay_above_a_counter_ahead_of_the_clock() {
    let redis = Server::start();
    let ahead: u64 = 8_000_000_000_000_000;
    redis.set_fence("job", ahead);
    assert_eq!(redis.lockrun("job").next_fence(), ahead + 1);
    assert_eq!(redis.lockrun("job").next_fence(), ahead + 2);
}

#[test]
fn status_and_release_honour_the_prefix() {
    let redis = Server::start();
    let _holder = redis
        .lockrun("job")
        .prefix("team-a:")
        .command(["sleep", "60"])
        .hold();
    assert!(redis.keys().contains(&"team-a:{job}".to_string()));
    let ran = redis.lockrun("job").subcommand("status").run();
    assert_eq!(ran.code, Some(1), "other prefix: free");
    let ran = redis
        .lockrun("job")
        .subcommand("status")
        .args(["--prefix", "team-a:"])
        .run();
    ran.assert(Expect::success());
    let ran = redis
        .lockrun("job")
        .subcommand("status")
        .env("LOCKRUN_PREFIX", "team-a:")
        .run();
    assert_eq!(ran.code, Some(0), "LOCKRUN_PREFIX is read");
}
