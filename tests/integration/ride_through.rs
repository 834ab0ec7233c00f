//! A run told to `--wait` rides through servers it cannot reach for now, from
//! its first connection on: a single server down and restarted, a Sentinel
//! primary killed and failed over, a Cluster slot owner killed and failed
//! over, a quorum short of a majority until a member comes back. Each test
//! prints the ride-through time, from the fault to the waiting run's
//! command starting. A run without `--wait`, or a failure that waiting
//! cannot mend, ends at once (and `faults::redis_down_at_start_exits_69…`).

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use crate::harness::*;

/// The command of a waiting run: writes when it started, in nanoseconds
/// since the epoch, to `$1/started`.
const SAY_WHEN_STARTED: &str = r#"date +%s%N > "$1/started""#;

/// How long after `fault` the command that wrote `$1/started` started.
fn started_after(dir: &Path, fault: SystemTime) -> Duration {
    let nanos: u64 = read_when_ready(&dir.join("started"))
        .trim()
        .parse()
        .expect("date +%s%N");
    let started = SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos);
    started
        .duration_since(fault)
        .unwrap_or_else(|_| panic!("the command started before the fault it was to ride through"))
}

/// A waiting run on `lockrun`, its stderr in `$dir/stderr`, which says
/// once that it cannot reach its servers and is still waiting.
fn waiting(lockrun: Lockrun<'_>, dir: &Path) -> Running {
    let stderr = dir.join("stderr");
    let run = lockrun
        .key("job")
        .args(["--wait", "60s"])
        .sh(SAY_WHEN_STARTED, dir)
        .stderr(log_file(&stderr))
        .spawn();
    assert!(
        wait_for_text(&stderr, "; still waiting"),
        "the waiter never said it cannot reach its servers: {}",
        read_log(&stderr)
    );
    run
}

/// The waiting run ended well, having said once that it cannot reach its
/// servers, and its command ran after the fault was healed.
fn rode_through(mut run: Running, dir: &Path, healed: SystemTime) {
    let stderr = || read_log(&dir.join("stderr"));
    run.exits_saying(Expect::success(), stderr);
    assert_eq!(stderr().matches("still waiting").count(), 1, "{}", stderr());
    started_after(dir, healed);
}

#[test]
fn a_waiting_run_rides_through_a_single_server_restart() {
    let mut redis = Server::start();
    let dir = scratch();
    redis.kill();
    let down = SystemTime::now();
    let mut run = waiting(redis.lockrun("job"), dir.path());
    std::thread::sleep(Duration::from_millis(500));
    assert!(run.running(), "the wait ended with the server down");

    redis.restart_empty();
    let back = SystemTime::now();
    rode_through(run, dir.path(), back);
    eprintln!(
        "single server: command started {:?} after the restart ({:?} after the kill)",
        started_after(dir.path(), back),
        started_after(dir.path(), down)
    );
    redis.assert_only_fence("job");
}

#[test]
fn a_waiting_run_rides_through_a_sentinel_failover() {
    let mut set = SentinelSet::start();
    let dir = scratch();
    let killed = SystemTime::now();
    let old = set.kill_primary();
    let run = waiting(Lockrun::via(&set.url()), dir.path());
    set.until_failed_over(old);
    rode_through(run, dir.path(), killed);
    eprintln!(
        "sentinel: command started {:?} after the primary was killed",
        started_after(dir.path(), killed)
    );
    assert!(set.primary().fence("job").is_some());
}

#[test]
fn a_waiting_run_rides_through_a_cluster_failover() {
    let mut cluster = Cluster::start();
    let dir = scratch();
    let key = "lockrun:{job}";
    let killed = SystemTime::now();
    let (old, replicas) = cluster.kill_owner(key);
    let alive: Vec<u16> = cluster
        .primaries()
        .into_iter()
        .filter(|port| *port != old)
        .collect();
    let run = Lockrun::via(&cluster.url_via(&alive))
        .key("job")
        .args(["--wait", "60s"])
        .sh(SAY_WHEN_STARTED, dir.path())
        .stderr(log_file(&dir.path().join("stderr")))
        .spawn();
    let new = cluster.until_failed_over(key, old, &replicas);
    let mut run = run;
    run.exits_saying(Expect::success(), || read_log(&dir.path().join("stderr")));
    eprintln!(
        "cluster: command started {:?} after the slot's owner was killed",
        started_after(dir.path(), killed)
    );
    assert!(cluster.node(new).fence("job").is_some());
}

#[test]
fn a_waiting_run_rides_through_a_quorum_without_a_majority_until_one_comes_back() {
    let mut servers = quorum(3);
    let dir = scratch();
    servers[0].kill();
    servers[1].kill();
    let run = waiting(Lockrun::on_all(&servers).args(QUORUM_TIMING), dir.path());
    servers[1].restart_empty();
    let back = SystemTime::now();
    rode_through(run, dir.path(), back);
    eprintln!(
        "quorum: command started {:?} after a majority was back",
        started_after(dir.path(), back)
    );
}

#[test]
fn a_wait_that_runs_out_with_the_server_down_names_the_last_reason() {
    let dir = scratch();
    let url = format!("unix://{}", dir.path().join("no-server.sock").display());
    let ran = Lockrun::via(&url)
        .key("job")
        .args(["--wait", "2s"])
        .touch(dir.path().join("ran"))
        .run();
    ran.assert(
        Expect::code(69)
            .stderr_starts(format!("lockrun: cannot reach Redis at {url}: "))
            .stderr_has("; still waiting\n")
            .stderr_where("the last line says the wait ran out", |text| {
                text.lines().count() == 2
                    && text
                        .lines()
                        .last()
                        .is_some_and(|line| line.ends_with("; gave up after waiting 2s"))
            }),
    );
    assert!(ran.took >= Duration::from_secs(2), "took {:?}", ran.took);
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn a_wait_bounds_connecting_to_a_server_that_never_answers() {
    // Accepts connections (the kernel's backlog does) and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("redis://{}", silent.local_addr().expect("address"));
    let began = Instant::now();
    let ran = Lockrun::via(&url)
        .key("job")
        .args(["--wait", "3s"])
        .command(["true"])
        .run();
    let took = began.elapsed();
    ran.assert(Expect::code(69).stderr_has("; gave up after waiting 3s"));
    // Not the first connection's own 5 s limit: the wait's 3 s, plus
    // start-up on a loaded machine.
    assert!(took < Duration::from_millis(4500), "took {took:?}");
}
