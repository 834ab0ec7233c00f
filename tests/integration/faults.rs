//! Redis failing under a running lockrun: killed, restarted empty, paused; lockrun itself paused or killed.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

/// The lease length of the runs that Redis fails under: short, so the tests
/// stay fast, with room for two cores running several tests at once.
const TTL: Duration = Duration::from_secs(2);
const TTL_ARG: &str = "2s";

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

#[test]
fn redis_killed_mid_run_stops_the_command_before_the_lease_could_lapse() {
    let mut redis = Server::start();
    let mut holder = redis.lockrun("job").args(["--ttl", TTL_ARG]).hold();

    // Every renewal lockrun could have made was sent before the fault began,
    // so no lease it holds can outlast killed + ttl.
    let (killed, gone) = fault_until_stopped(holder.child(), || redis.kill());
    assert!(
        gone < killed + TTL,
        "the command outlived the lease: stopped {:?} after Redis died, ttl {TTL:?}",
        gone - killed
    );

    holder
        .end()
        .assert(Expect::code(76).stderr_has("lockrun: lost the lock job: "));
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_when_the_lease_cannot_be_renewed() {
    let mut redis = Server::start();
    let mut holder = redis.lockrun("job").args(["--ttl", TTL_ARG]).hold_script(
        "sh",
        r#"trap '' TERM; echo $$ > "$1/pid"; while :; do sleep 0.05; done"#,
    );

    // SIGTERM is ignored, so only the SIGKILL at the lease deadline stops it.
    // That deadline is at most ttl − drift after the kill, and the drift
    // allowance (22 ms here) is too thin to also cover this test noticing the
    // death, so noticing gets a slack of its own.
    let (killed, gone) = fault_until_stopped(holder.child(), || redis.kill());
    let noticing = Duration::from_millis(300);
    assert!(
        gone < killed + TTL + noticing,
        "SIGKILL came late: the command died {:?} after Redis did, ttl {TTL:?}",
        gone - killed
    );
    holder
        .end()
        .assert(Expect::code(76).stderr_has("lockrun: lost the lock job: "));
}

#[test]
fn redis_paused_mid_run_stops_the_command_before_the_lease_could_lapse() {
    let redis = Server::start();
    let mut holder = redis.lockrun("job").args(["--ttl", TTL_ARG]).hold();

    let (paused, gone) = fault_until_stopped(holder.child(), || redis.pause());
    assert!(
        gone < paused + TTL,
        "the command outlived the lease: stopped {:?} after Redis froze, ttl {TTL:?}",
        gone - paused
    );
    holder
        .end()
        .assert(Expect::code(76).stderr_has("lockrun: lost the lock job: "));

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
    let mut redis = Server::start();
    let mut holder = redis.lockrun("job").args(["--ttl", TTL_ARG]).hold();
    let before = holder.fence();

    let (restarted, gone) = fault_until_stopped(holder.child(), || redis.restart_empty());
    assert!(
        gone < restarted + TTL,
        "the command ran on {:?} after Redis lost its lock, ttl {TTL:?}",
        gone - restarted
    );
    holder
        .end()
        .assert(Expect::code(76).stderr_has("lockrun: lost the lock job: "));
    assert!(
        !redis.is_locked("job"),
        "lockrun must not recreate the key it lost"
    );

    // The counter went with the restart, yet the next token is still larger.
    let after = redis.lockrun("job").next_fence();
    assert!(
        after > before,
        "fencing token went from {before} to {after} across the restart"
    );
}

#[test]
fn lockrun_paused_past_its_ttl_stops_its_command_and_spares_the_new_holder() {
    let redis = Server::start();
    let mut first = redis.lockrun("job").args(["--ttl", TTL_ARG]).hold();

    // Freeze lockrun only: its command keeps running, its lease runs out.
    first.run.signal(Signal::SIGSTOP);
    let mut second = redis
        .lockrun("job")
        .args(["--ttl", TTL_ARG, "--wait", "30s"])
        .hold();
    assert!(second.fence() > first.fence());
    assert!(first.run.running(), "the first run must still be paused");

    first.run.signal(Signal::SIGCONT);
    // The message must say why.
    first.end().assert(Expect::code(76).stderr(
        "lockrun: lost the lock job: the lease ran out while lockrun could not run \
         (paused or suspended); stopped the command\n",
    ));
    assert!(
        !alive(first.child()),
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
        second.run.running() && alive(second.child()),
        "the new holder was disturbed"
    );

    second.go();
    second.end().assert(Expect::success());
    redis.assert_only_fence("job");
}

#[test]
fn sigkill_to_lockrun_kills_its_command_and_the_next_run_gets_a_larger_token() {
    let redis = Server::start();
    let mut first = redis.lockrun("job").args(["--ttl", TTL_ARG]).hold();

    first.run.signal(Signal::SIGKILL);
    first.run.exits(Expect::killed_by(Signal::SIGKILL));
    assert!(
        eventually(PATIENCE, || !alive(first.child())),
        "the command outlived lockrun"
    );

    // Nobody released the dead run's lease: it expires, and the next run
    // takes the lock.
    redis.expire_lease("job");
    let after = redis.lockrun("job").args(["--wait", "30s"]).next_fence();
    let before = first.fence();
    assert!(
        after > before,
        "fencing token went from {before} to {after}"
    );
    redis.assert_only_fence("job");
}

#[test]
fn redis_down_at_start_exits_69_and_runs_nothing() {
    let dir = scratch();
    let marker = dir.path().join("ran");
    let nothing = free_port();
    let urls = [
        format!("unix://{}", dir.path().join("no-server.sock").display()),
        format!("redis://127.0.0.1:{nothing}"),
    ];
    for url in urls {
        let ran = Lockrun::via(&url).key("job").touch(&marker).run();
        // Nothing on stdout, which belongs to the command, and one line
        // saying Redis is unreachable.
        ran.assert(
            Expect::code(69)
                .stderr_starts(format!("lockrun: cannot reach Redis at {url}: "))
                .stderr_one_line(),
        );
        assert!(!marker.exists(), "{url}: the command ran without the lock");
    }
}
