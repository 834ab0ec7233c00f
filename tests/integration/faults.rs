//! Redis failing under a running lockrun: killed, restarted empty, paused; lockrun itself paused or killed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

/// The lease length of the runs that Redis fails under: short, so the tests
/// stay fast, with room for two cores running several tests at once.
const TTL: Duration = Duration::from_secs(2);
const TTL_ARG: &str = "2s";

/// A command that records its fencing token and pid (in that order, so a
/// readable pid file means both are there), then runs until it is stopped.
const HOLD: &str =
    r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/fence"; echo $$ > "$1/pid"; exec sleep 60"#;

/// A command that records its fencing token and pid, then runs until the
/// test creates `go` in its directory.
const HOLD_UNTIL_GO: &str = r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/fence"; echo $$ > "$1/pid"
while [ ! -e "$1/go" ]; do sleep 0.05; done"#;

/// lockrun on key `job` with `args`, running `script` with `dir` as `$1` and
/// its stderr in `dir/stderr`.
fn job(redis: &RedisServer, args: &[&str], script: &str, dir: &Path) -> Command {
    let mut command = lockrun_at(redis, &[&["-k", "job"], args].concat());
    command
        .args(["--", "sh", "-c", script, "sh"])
        .arg(dir)
        .stderr(log_file(&dir.join("stderr")));
    command
}

/// The command's pid, once it has started (see `HOLD`).
fn started(run: &mut Running, dir: &Path) -> i32 {
    read_pid_of(run, &dir.join("pid"), &dir.join("stderr"))
}

fn fence(dir: &Path) -> u64 {
    let text = read_when_ready(&dir.join("fence"));
    text.parse()
        .unwrap_or_else(|_| panic!("fencing token {text:?} is not a number"))
}

fn stderr(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("stderr")).unwrap_or_default()
}

#[test]
fn redis_killed_mid_run_stops_the_command_before_the_lease_could_lapse() {
    let mut redis = RedisServer::start();
    let dir = scratch();
    let mut run = Running::spawn(&mut job(&redis, &["--ttl", TTL_ARG], HOLD, dir.path()));
    let child = started(&mut run, dir.path());

    // Every renewal lockrun could have made was sent before this moment, so
    // no lease it holds can outlast killed + ttl.
    let killed = Instant::now();
    redis.kill();
    assert!(
        eventually(PATIENCE, || !alive(child)),
        "the command was never stopped"
    );
    let gone = Instant::now();
    assert!(
        gone < killed + TTL,
        "the command outlived the lease: stopped {:?} after Redis died, ttl {TTL:?}",
        gone - killed
    );

    assert_eq!(run.wait().code(), Some(76), "{}", stderr(dir.path()));
    assert!(
        stderr(dir.path()).contains("lost the lock lockrun:{job}"),
        "{}",
        stderr(dir.path())
    );
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_when_the_lease_cannot_be_renewed() {
    let mut redis = RedisServer::start();
    let dir = scratch();
    let script = r#"trap '' TERM; echo $$ > "$1/pid"; while :; do sleep 0.05; done"#;
    let mut run = Running::spawn(&mut job(&redis, &["--ttl", TTL_ARG], script, dir.path()));
    let child = started(&mut run, dir.path());

    redis.kill();
    // SIGTERM is ignored, so only the SIGKILL at the lease deadline stops it.
    assert!(
        eventually(PATIENCE, || !alive(child)),
        "the command was never killed"
    );
    assert_eq!(run.wait().code(), Some(76), "{}", stderr(dir.path()));
}

#[test]
fn redis_paused_mid_run_stops_the_command_before_the_lease_could_lapse() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut run = Running::spawn(&mut job(&redis, &["--ttl", TTL_ARG], HOLD, dir.path()));
    let child = started(&mut run, dir.path());

    let paused = Instant::now();
    redis.pause();
    assert!(
        eventually(PATIENCE, || !alive(child)),
        "the command was never stopped"
    );
    let gone = Instant::now();
    assert!(
        gone < paused + TTL,
        "the command outlived the lease: stopped {:?} after Redis froze, ttl {TTL:?}",
        gone - paused
    );
    assert_eq!(run.wait().code(), Some(76), "{}", stderr(dir.path()));

    // Once Redis runs again the lease expires on its own (or the queued
    // release removes it): nothing stays locked.
    redis.resume();
    assert!(
        eventually(PATIENCE, || !redis.is_locked("job")),
        "the lock stayed behind"
    );
}

#[test]
fn redis_restarted_empty_mid_run_exits_76_and_fencing_tokens_keep_growing() {
    let mut redis = RedisServer::start();
    let dir = scratch();
    let mut run = Running::spawn(&mut job(&redis, &["--ttl", TTL_ARG], HOLD, dir.path()));
    let child = started(&mut run, dir.path());
    let before = fence(dir.path());

    let restarted = Instant::now();
    redis.restart_empty();
    assert!(
        eventually(PATIENCE, || !alive(child)),
        "the command was never stopped"
    );
    let gone = Instant::now();
    assert!(
        gone < restarted + TTL,
        "the command ran on {:?} after Redis lost its lock, ttl {TTL:?}",
        gone - restarted
    );
    assert_eq!(run.wait().code(), Some(76), "{}", stderr(dir.path()));
    assert!(
        !redis.is_locked("job"),
        "lockrun must not recreate the key it lost"
    );

    // The counter went with the restart, yet the next token is still larger.
    let next = scratch();
    let status = job(
        &redis,
        &[],
        r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/fence""#,
        next.path(),
    )
    .status()
    .expect("run");
    assert_eq!(status.code(), Some(0), "{}", stderr(next.path()));
    let after = fence(next.path());
    assert!(
        after > before,
        "fencing token went from {before} to {after} across the restart"
    );
}

#[test]
fn lockrun_paused_past_its_ttl_stops_its_command_and_spares_the_new_holder() {
    let redis = RedisServer::start();
    let first_dir = scratch();
    let second_dir = scratch();
    let mut first = Running::spawn(&mut job(
        &redis,
        &["--ttl", TTL_ARG],
        HOLD,
        first_dir.path(),
    ));
    let first_child = started(&mut first, first_dir.path());

    // Freeze lockrun only: its command keeps running, its lease runs out.
    first.signal(Signal::SIGSTOP);
    let mut second = Running::spawn(&mut job(
        &redis,
        &["--ttl", TTL_ARG, "--wait", "30s"],
        HOLD_UNTIL_GO,
        second_dir.path(),
    ));
    let second_child = started(&mut second, second_dir.path());
    let token = redis
        .lock_value("job")
        .expect("the second run holds the lock");
    assert!(fence(second_dir.path()) > fence(first_dir.path()));
    assert!(first.running(), "the first run must still be paused");

    first.signal(Signal::SIGCONT);
    assert_eq!(
        first.wait().code(),
        Some(76),
        "{}",
        stderr(first_dir.path())
    );
    assert!(
        stderr(first_dir.path()).contains("paused or suspended"),
        "the message must say why: {}",
        stderr(first_dir.path())
    );
    assert!(
        !alive(first_child),
        "the paused run's command survived its lease"
    );

    // The new holder's lease is untouched and still alive.
    assert_eq!(redis.lock_value("job").as_deref(), Some(token.as_str()));
    assert!(
        redis.pttl("job") > 0,
        "the new holder's lease lost its expiry or expired"
    );
    assert!(
        second.running() && alive(second_child),
        "the new holder was disturbed"
    );

    std::fs::write(second_dir.path().join("go"), "").expect("write go");
    assert_eq!(
        second.wait().code(),
        Some(0),
        "{}",
        stderr(second_dir.path())
    );
    assert_eq!(redis.keys(), ["lockrun:{job}:fence"]);
}

#[test]
fn sigkill_to_lockrun_kills_its_command_and_the_next_run_gets_a_larger_token() {
    let redis = RedisServer::start();
    let first_dir = scratch();
    let mut first = Running::spawn(&mut job(
        &redis,
        &["--ttl", TTL_ARG],
        HOLD,
        first_dir.path(),
    ));
    let first_child = started(&mut first, first_dir.path());

    first.signal(Signal::SIGKILL);
    assert_eq!(
        first.wait().code(),
        None,
        "lockrun cannot have exited on its own"
    );
    assert!(
        eventually(PATIENCE, || !alive(first_child)),
        "the command outlived lockrun"
    );

    // Nobody released the dead run's lease: the next run waits for it to expire.
    let second_dir = scratch();
    let status = job(
        &redis,
        &["--wait", "30s"],
        r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/fence""#,
        second_dir.path(),
    )
    .status()
    .expect("run");
    assert_eq!(status.code(), Some(0), "{}", stderr(second_dir.path()));
    let (before, after) = (fence(first_dir.path()), fence(second_dir.path()));
    assert!(
        after > before,
        "fencing token went from {before} to {after}"
    );
    assert_eq!(redis.keys(), ["lockrun:{job}:fence"]);
}

#[test]
fn redis_down_at_start_exits_69_and_runs_nothing() {
    let dir = scratch();
    let ran = dir.path().join("ran");
    let nothing = free_port();
    let urls = [
        format!("unix://{}", dir.path().join("no-server.sock").display()),
        format!("redis://127.0.0.1:{nothing}"),
    ];
    for url in urls {
        let output = lockrun()
            .args(["--redis", &url, "-k", "job", "--", "touch"])
            .arg(&ran)
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(69), "{url}: {stderr}");
        assert!(!ran.exists(), "{url}: the command ran without the lock");
        assert!(
            output.stdout.is_empty(),
            "{url}: stdout belongs to the command"
        );
        assert!(
            stderr.starts_with("lockrun: cannot reach Redis at ") && stderr.lines().count() == 1,
            "{url}: want one line saying Redis is unreachable, got {stderr:?}"
        );
    }
}
