//! The operator's controls: status, release --force, --min-hold, --timeout,
//! fencing tokens across a Redis restart.

use crate::harness::*;

#[test]
fn status_reports_holder_and_free_lock() {
    let redis = Server::start();
    let ran = redis.lockrun("job").subcommand("status").run();
    // A free lock exits 1.
    ran.assert(Expect::code(1).stdout_has("job: free"));

    let mut holder = redis
        .lockrun("job")
        .args(["--ttl", "10s"])
        .command(["sleep", "60"])
        .hold();
    let ran = redis.lockrun("job").subcommand("status").run();
    let pid = holder.run.pid().to_string();
    ran.assert(
        Expect::success()
            .stdout_has(format!("pid {pid}"))
            .stdout_has("fencing token")
            .stdout_has("command: sleep 60"),
    );

    let ran = redis
        .lockrun("job")
        .subcommand("status")
        .arg("--json")
        .run();
    ran.assert(Expect::success().stdout_any());
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
            "last_run",
            "last_success",
            "redis_key",
            "redis_node",
            "replicas_acknowledged",
            "server",
            "slots",
            "ttl_left_ms",
            "user",
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
            "gone",
            "held_for_ms",
            "host",
            "pid"
        ]
    );
    assert_eq!(holder_json["gone"], false, "its lockrun runs");
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
    ran.assert(Expect::code(1).stdout_any());
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
    let host = nix::unistd::gethostname().expect("hostname");
    ran.assert(
        Expect::code(75)
            .stderr_starts(format!(
                "lockrun: job is held by {} pid {} for ",
                host.to_string_lossy(),
                holder.run.pid()
            ))
            .stderr_has("; not running true (exit 75)")
            .stderr_one_line(),
    );
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
    // Refused without --force.
    ran.assert(Expect::code(64).stderr_has("--force"));
    assert!(redis.is_locked("job"));

    let ran = redis
        .lockrun("job")
        .subcommand("release")
        .arg("--force")
        .run();
    let host = nix::unistd::gethostname().expect("hostname");
    ran.assert(
        Expect::success()
            .stdout_starts(format!(
                "released job held by {} pid {} (fencing token ",
                host.to_string_lossy(),
                holder.run.pid()
            ))
            .stdout_has("): sleep 60\n"),
    );
    // The old holder notices at its next renewal and stops its command.
    holder.end().assert(Expect::code(76).stderr(
        "lockrun: lost the lock job: its key no longer holds this run's token (it expired, was \
         removed with `lockrun release --force`, or Redis restarted empty); stopped the command\n",
    ));

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
    // A second run inside the minimum hold is refused.
    let ran = redis.lockrun("job").arg("-q").command(["true"]).run();
    ran.assert(Expect::code(75));
    // Once the minimum is over (the test ends it rather than wait), the
    // next run gets in.
    redis.expire_lease("job");
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
    status.assert(
        Expect::success()
            .stdout_starts("job: kept for --min-hold for ")
            .stdout_has("; the command finished ")
            .context("still held"),
    );
    let json = redis
        .lockrun("job")
        .subcommand("status")
        .arg("--json")
        .run();
    let json: serde_json::Value = serde_json::from_str(&json.stdout).expect("one JSON object");
    assert!(json["holder"]["finished_at_ms"].is_u64(), "{json}");

    let busy = redis.lockrun("job").command(["true"]).run();
    busy.assert(
        Expect::code(75)
            .stderr_starts("lockrun: job is kept for --min-hold for ")
            .stderr_has("; the command (true on ")
            .stderr_has("; not running true (exit 75)\n")
            .stderr_one_line(),
    );
    let released = redis
        .lockrun("job")
        .subcommand("release")
        .arg("--force")
        .run();
    released.assert(Expect::success().stdout_starts("released job held by "));
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
    ran.assert(
        Expect::code(124).stderr("lockrun: the command ran longer than --timeout; stopped it\n"),
    );
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
    ran.assert(
        Expect::code(124).stderr("lockrun: the command ran longer than --timeout; stopped it\n"),
    );
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
    // Free under the other prefix.
    ran.assert(Expect::code(1).stdout_has("job: free"));
    let ran = redis
        .lockrun("job")
        .subcommand("status")
        .args(["--prefix", "team-a:"])
        .run();
    ran.assert(Expect::success().stdout_starts("job: held by "));
    let ran = redis
        .lockrun("job")
        .subcommand("status")
        .env("LOCKRUN_PREFIX", "team-a:")
        .run();
    // LOCKRUN_PREFIX is read.
    ran.assert(Expect::success().stdout_starts("job: held by "));
}
