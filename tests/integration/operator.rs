//! The operator's controls: status, release --force, --min-hold, --timeout,
//! fencing tokens across a Redis restart.

use std::borrow::BorrowMut;
use std::process::{Command, Stdio};

use crate::harness::*;

/// Runs a one-shot lockrun and returns (status code, stdout, stderr).
fn run(mut command: impl BorrowMut<Command>) -> (Option<i32>, String, String) {
    let output = command
        .borrow_mut()
        .stdin(Stdio::null())
        .output()
        .expect("run lockrun");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Starts `lockrun -k job ... -- sleep 60` and waits until it holds the lock.
fn hold(redis: &RedisServer, extra: &[&str]) -> Running {
    let mut args = vec!["--key", "job"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sleep", "60"]);
    let holder = Running::spawn(lockrun_at(redis, &args).stdin(Stdio::null()));
    assert!(
        eventually(PATIENCE, || redis.is_locked("job")),
        "holder never acquired"
    );
    holder
}

fn fence_of(redis: &RedisServer) -> u64 {
    let (code, stdout, _) = run(lockrun_at(
        redis,
        &["-k", "job", "--", "sh", "-c", "echo $LOCKRUN_FENCING_TOKEN"],
    ));
    assert_eq!(code, Some(0));
    stdout.trim().parse().expect("fencing token is a number")
}

#[test]
fn status_reports_holder_and_free_lock() {
    let redis = RedisServer::start();
    let (code, stdout, _) = run(admin(&redis, &["status", "--key", "job"]));
    assert_eq!(code, Some(1), "free lock exits 1");
    assert!(stdout.contains("job: free"), "{stdout}");

    let mut holder = hold(&redis, &["--ttl", "10s"]);
    let (code, stdout, _) = run(admin(&redis, &["status", "-k", "job"]));
    assert_eq!(code, Some(0), "held lock exits 0");
    let pid = holder.child.id().to_string();
    assert!(stdout.contains(&format!("pid {pid}")), "{stdout}");
    assert!(stdout.contains("fencing token"), "{stdout}");
    assert!(stdout.contains("command: sleep 60"), "{stdout}");

    let (code, stdout, _) = run(admin(&redis, &["status", "-k", "job", "--json"]));
    assert_eq!(code, Some(0));
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    let mut fields: Vec<&str> = json
        .as_object()
        .expect("object")
        .keys()
        .map(|k| k.as_str())
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "held",
            "holder",
            "key",
            "last_fencing_token",
            "redis_key",
            "redis_node",
            "ttl_left_ms"
        ]
    );
    assert_eq!(
        json["redis_node"],
        redis.url().trim_start_matches("unix://"),
        "the server that answered"
    );
    let holder_json = &json["holder"];
    let mut holder_fields: Vec<&str> = holder_json
        .as_object()
        .expect("holder object")
        .keys()
        .map(|k| k.as_str())
        .collect();
    holder_fields.sort_unstable();
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

    holder.signal(nix::sys::signal::Signal::SIGTERM);
    holder.wait();
    let (code, stdout, _) = run(admin(&redis, &["status", "-k", "job", "--json"]));
    assert_eq!(code, Some(1));
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON");
    assert_eq!(json["held"], false);
    assert!(json["holder"].is_null());
}

#[test]
fn status_with_redis_down_exits_69() {
    let mut redis = RedisServer::start();
    redis.kill();
    let (code, stdout, stderr) = run(admin(&redis, &["status", "-k", "job"]));
    assert_eq!(code, Some(69));
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with("lockrun: cannot reach Redis"),
        "{stderr}"
    );
}

#[test]
fn busy_message_names_the_holder() {
    let redis = RedisServer::start();
    let holder = hold(&redis, &[]);
    let (code, _, stderr) = run(lockrun_at(&redis, &["-k", "job", "--", "true"]));
    assert_eq!(code, Some(75));
    let host = nix::unistd::gethostname().expect("hostname");
    let expected = format!(
        "held by {} pid {}",
        host.to_string_lossy(),
        holder.child.id()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

#[test]
fn force_release_stops_the_old_holder() {
    let redis = RedisServer::start();
    let mut holder = hold(&redis, &["--ttl", "2s"]);

    let (code, _, stderr) = run(admin(&redis, &["release", "-k", "job"]));
    assert_eq!(code, Some(64), "refuses without --force");
    assert!(stderr.contains("--force"), "{stderr}");
    assert!(redis.is_locked("job"));

    let (code, stdout, _) = run(admin(&redis, &["release", "-k", "job", "--force"]));
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains(&format!("pid {}", holder.child.id())),
        "{stdout}"
    );
    // The old holder notices at its next renewal and stops its command.
    assert_eq!(holder.wait().code(), Some(76));

    let (code, stdout, _) = run(admin(&redis, &["release", "-k", "job", "--force"]));
    assert_eq!(code, Some(0));
    assert!(stdout.contains("was not held"), "{stdout}");
}

#[test]
fn min_hold_keeps_a_late_second_run_out_then_lets_it_in() {
    let redis = RedisServer::start();
    let (code, _, _) = run(lockrun_at(
        &redis,
        &["-k", "job", "--min-hold", "3s", "--", "true"],
    ));
    assert_eq!(code, Some(0));
    assert!(redis.is_locked("job"), "kept after the command ended");
    let pttl = redis.pttl("job");
    assert!(
        pttl > 0 && pttl <= 3000,
        "kept for what remains of 3s: {pttl}"
    );
    let (code, _, _) = run(lockrun_at(&redis, &["-k", "job", "-q", "--", "true"]));
    assert_eq!(
        code,
        Some(75),
        "a second run inside the minimum hold is refused"
    );
    // Once the minimum is over, the next run gets in.
    assert!(eventually(PATIENCE, || !redis.is_locked("job")));
    let (code, _, _) = run(lockrun_at(&redis, &["-k", "job", "--", "true"]));
    assert_eq!(code, Some(0));
    assert_eq!(redis.keys(), ["lockrun:{job}:fence"]);
}

#[test]
fn timeout_stops_the_command_and_releases() {
    let redis = RedisServer::start();
    let (code, _, stderr) = run(lockrun_at(
        &redis,
        &["-k", "job", "--timeout", "500ms", "--", "sleep", "30"],
    ));
    assert_eq!(code, Some(124));
    assert!(stderr.contains("--timeout"), "{stderr}");
    assert_eq!(redis.keys(), ["lockrun:{job}:fence"], "released");
}

#[test]
fn timeout_kills_a_command_that_ignores_sigterm() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let pidfile = dir.path().join("pid");
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.1; done",
        pidfile.display()
    );
    let (code, _, _) = run(lockrun_at(
        &redis,
        &[
            "-k",
            "job",
            "--timeout",
            "500ms",
            "--kill-grace",
            "500ms",
            "--",
            "sh",
            "-c",
            &script,
        ],
    ));
    assert_eq!(code, Some(124));
    let pid: i32 = read_when_ready(&pidfile).parse().expect("pid");
    assert!(eventually(PATIENCE, || !alive(pid)), "command killed");
    assert!(!redis.is_locked("job"));
}

#[test]
fn fencing_tokens_grow_across_a_redis_restart_that_lost_everything() {
    let mut redis = RedisServer::start();
    let first = fence_of(&redis);
    redis.restart_empty();
    assert!(redis.keys().is_empty(), "restarted empty");
    let second = fence_of(&redis);
    assert!(second > first, "{second} > {first}");
}

#[test]
fn fencing_tokens_stay_above_a_counter_ahead_of_the_clock() {
    let redis = RedisServer::start();
    let ahead: u64 = 8_000_000_000_000_000;
    let _: () = redis::cmd("SET")
        .arg("lockrun:{job}:fence")
        .arg(ahead)
        .query(&mut redis.client())
        .expect("SET");
    assert_eq!(fence_of(&redis), ahead + 1);
    assert_eq!(fence_of(&redis), ahead + 2);
}

#[test]
fn status_and_release_honour_the_prefix() {
    let redis = RedisServer::start();
    let _holder = hold_with_prefix(&redis, "team-a:");
    assert!(redis.keys().contains(&"team-a:{job}".to_string()));
    let (code, _, _) = run(admin(&redis, &["status", "-k", "job"]));
    assert_eq!(code, Some(1), "other prefix: free");
    let (code, _, _) = run(admin(
        &redis,
        &["status", "-k", "job", "--prefix", "team-a:"],
    ));
    assert_eq!(code, Some(0));
    let mut env_status = admin(&redis, &["status", "-k", "job"]);
    env_status.env("LOCKRUN_PREFIX", "team-a:");
    assert_eq!(run(&mut env_status).0, Some(0), "LOCKRUN_PREFIX is read");
}

/// `lockrun SUBCOMMAND ARGS --redis URL`: a subcommand pointed at `redis`.
fn admin(redis: &RedisServer, args: &[&str]) -> Command {
    let mut command = lockrun();
    command.args(args).arg("--redis").arg(redis.url());
    command
}

fn hold_with_prefix(redis: &RedisServer, prefix: &str) -> Running {
    let holder = Running::spawn(
        lockrun_at(
            redis,
            &["--prefix", prefix, "-k", "job", "--", "sleep", "60"],
        )
        .stdin(Stdio::null()),
    );
    let key = format!("{prefix}{{job}}");
    assert!(eventually(PATIENCE, || redis.keys().contains(&key)));
    holder
}
