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

/// lockrun on key `job` with `args`, running `script` with `dir` as `$1` and
/// its stderr in `dir/stderr`.
fn job(redis: &RedisServer, args: &[&str], script: &str, dir: &Path) -> Command {
    let mut command = lockrun_sh(redis, &[&["-k", "job"], args].concat(), script, dir);
    command.stderr(log_file(&dir.join("stderr")));
    command
}

/// The command's pid, once it has started (see `HOLD`).
fn started(run: &mut Running, dir: &Path) -> i32 {
    read_pid_of(run, &dir.join("pid"), &dir.join("stderr"))
}

/// A run of `HOLD` under the faults' ttl, and its command's pid once started.
fn hold(redis: &RedisServer, dir: &Path) -> (Running, i32) {
    let mut run = Running::spawn(&mut job(redis, &["--ttl", TTL_ARG], HOLD, dir));
    let child = started(&mut run, dir);
    (run, child)
}

/// Brings about `fault`, then waits for lockrun to stop the command `child`:
/// returns when the fault began and when the command was seen gone.
fn fault_until_stopped(child: i32, fault: impl FnOnce()) -> (Instant, Instant) {
    let began = Instant::now();
    fault();
    assert!(
        eventually(PATIENCE, || !alive(child)),
        "the command was never stopped"
    );
    (began, Instant::now())
}

fn fence(dir: &Path) -> u64 {
    read_fence(&dir.join("fence"))
}

/// The fencing token of one more run on the key, with `args`.
fn next_fence(redis: &RedisServer, args: &[&str]) -> u64 {
    let dir = scratch();
    let status = job(
        redis,
        args,
        r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/fence""#,
        dir.path(),
    )
    .status()
    .expect("run");
    assert_eq!(status.code(), Some(0), "{}", stderr(dir.path()));
    fence(dir.path())
}

fn stderr(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("stderr")).unwrap_or_default()
}

#[test]
fn redis_killed_mid_run_stops_the_command_before_the_lease_could_lapse() {
    let mut redis = RedisServer::start();
    let dir = scratch();
    let (mut run, child) = hold(&redis, dir.path());

    // Every renewal lockrun could have made was sent before the fault began,
    // so no lease it holds can outlast killed + ttl.
    let (killed, gone) = fault_until_stopped(child, || redis.kill());
    assert!(
        gone < killed + TTL,
        "the command outlived the lease: stopped {:?} after Redis died, ttl {TTL:?}",
        gone - killed
    );

    assert_eq!(run.wait().code(), Some(76), "{}", stderr(dir.path()));
    assert!(
        stderr(dir.path()).contains("lost the lock job:"),
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

    // SIGTERM is ignored, so only the SIGKILL at the lease deadline stops it.
    // That deadline is at most ttl − drift after the kill, and the drift
    // allowance (22 ms here) is too thin to also cover this test noticing the
    // death, so noticing gets a slack of its own.
    let (killed, gone) = fault_until_stopped(child, || redis.kill());
    let noticing = Duration::from_millis(300);
    assert!(
        gone < killed + TTL + noticing,
        "SIGKILL came late: the command died {:?} after Redis did, ttl {TTL:?}",
        gone - killed
    );
    assert_eq!(run.wait().code(), Some(76), "{}", stderr(dir.path()));
}

#[test]
fn redis_paused_mid_run_stops_the_command_before_the_lease_could_lapse() {
    let redis = RedisServer::start();
    let dir = scratch();
    let (mut run, child) = hold(&redis, dir.path());

    let (paused, gone) = fault_until_stopped(child, || redis.pause());
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
    let (mut run, child) = hold(&redis, dir.path());
    let before = fence(dir.path());

    let (restarted, gone) = fault_until_stopped(child, || redis.restart_empty());
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
    let after = next_fence(&redis, &[]);
    assert!(
        after > before,
        "fencing token went from {before} to {after} across the restart"
    );
}

#[test]
fn lockrun_paused_past_its_ttl_stops_its_command_and_spares_the_new_holder() {
    let redis = RedisServer::start();
    let first_dir = scratch();
    let (mut first, first_child) = hold(&redis, first_dir.path());

    // Freeze lockrun only: its command keeps running, its lease runs out.
    first.signal(Signal::SIGSTOP);
    let mut second = Holder::start(&redis, "job", &["--ttl", TTL_ARG, "--wait", "30s"]);
    assert!(second.fence() > fence(first_dir.path()));
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
    assert_eq!(
        redis.lock_value("job").as_deref(),
        Some(second.token.as_str())
    );
    assert!(
        redis.pttl("job") > 0,
        "the new holder's lease lost its expiry or expired"
    );
    assert!(
        second.run.running() && alive(second.child),
        "the new holder was disturbed"
    );

    second.go();
    assert_eq!(second.run.wait().code(), Some(0), "{}", second.stderr());
    assert_eq!(redis.keys(), ["lockrun:{job}:fence"]);
}

#[test]
fn sigkill_to_lockrun_kills_its_command_and_the_next_run_gets_a_larger_token() {
    let redis = RedisServer::start();
    let first_dir = scratch();
    let (mut first, first_child) = hold(&redis, first_dir.path());

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
    let after = next_fence(&redis, &["--wait", "30s"]);
    let before = fence(first_dir.path());
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
