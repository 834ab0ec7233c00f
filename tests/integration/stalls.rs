//! A stalled Redis Cluster node (SIGSTOP: its sockets open, nothing
//! answering, as a frozen VM or a cut link looks from outside) costs a run
//! nothing unless the run needs it: lockrun learns the slot map from the
//! first listed node that answers and talks only to the lock's slot owner.
//! The runs name every node, as users write the URL, and allow 10 s for
//! each call, so that a run that waited on the stalled node would take
//! that long at least, far beyond the bounds asserted here. A stalled
//! Sentinel primary costs a run until the sentinels name another, however
//! long its calls may take. (The Sentinel replica and quorum stalls are
//! acks.rs's and quorum.rs's.)

use std::time::{Duration, Instant};

use crate::harness::*;

const KEY: &str = "lockrun:{job}";

/// A run that would wait out a stalled node's 10 s if it waited on it.
const PATIENT: [&str; 4] = ["--redis-timeout", "10s", "--wait", "30s"];

/// Well under the 10 s a call on the stalled node would take, with room
/// for start-up on a loaded machine.
const AT_ONCE: Duration = Duration::from_secs(5);

/// Every node's URL, the stalled one included.
fn every_node(cluster: &Cluster) -> String {
    let ports: Vec<u16> = cluster.nodes.iter().map(Server::port).collect();
    cluster.url_via(&ports)
}

/// One run of lock `job` through `url` with `args`, which must start its
/// command and end well within `within`.
fn runs_within(url: &str, args: &[&str], within: Duration) {
    let dir = scratch();
    let ran = dir.path().join("ran");
    let output = Lockrun::via(url)
        .key("job")
        .args(PATIENT)
        .args(args)
        .touch(&ran)
        .run();
    // With no replica left to acknowledge, a run says so once.
    output.assert(Expect::success().stderr_any());
    assert!(ran.exists(), "the command did not run");
    assert!(output.took < within, "took {:?}", output.took);
}

#[test]
fn a_stalled_primary_of_other_slots_costs_a_run_nothing_before_or_after_its_failover() {
    let cluster = Cluster::start();
    let (owner, _) = cluster.owner(KEY);
    let other = cluster
        .shards()
        .into_iter()
        .find(|shard| shard.primary != owner)
        .expect("another shard");
    let slot = *other.slots[0].start();
    let url = every_node(&cluster);
    cluster.node(other.primary).pause();
    // Before: exit 69 after the whole --wait.
    runs_within(&url, &[], AT_ONCE);
    let promoted = eventually(TOPOLOGY_PATIENCE, || {
        cluster
            .owner_seen_by(owner, slot)
            .is_some_and(|new| other.replicas.contains(&new))
    });
    assert!(promoted, "the stalled primary's replica never took over");
    runs_within(&url, &[], AT_ONCE);
    cluster.node(other.primary).resume();
}

#[test]
fn a_stalled_replica_of_the_owner_costs_nothing_and_is_not_waited_for_once_late() {
    let cluster = Cluster::start();
    let (owner, replicas) = cluster.owner(KEY);
    let url = every_node(&cluster);
    for replica in &replicas {
        cluster.node(*replica).pause();
    }
    // Asking no acknowledgement, a run never needs the replica.
    runs_within(&url, &["--replica-acks", "0"], AT_ONCE);
    // `all` leaves out a replica whose acknowledgements are late (3 s):
    // a run started as it stalls gets the lock once they are.
    runs_within(&url, &[], Duration::from_secs(15));
    // And later runs at once.
    runs_within(&url, &[], AT_ONCE);
    assert!(cluster.node(owner).answers());
    for replica in &replicas {
        cluster.node(*replica).resume();
    }
}

#[test]
fn a_stalled_owner_is_left_for_its_replica_once_promoted() {
    let cluster = Cluster::start();
    let (owner, replicas) = cluster.owner(KEY);
    let slot = cluster.slot_of(KEY);
    let url = every_node(&cluster);
    cluster.node(owner).pause();
    let healthy: Vec<u16> = cluster
        .nodes
        .iter()
        .map(Server::port)
        .filter(|&port| port != owner)
        .collect();
    // Promoted as every other node sees it: whichever answers first
    // sends the run to the new owner.
    let promoted = eventually(TOPOLOGY_PATIENCE, || {
        healthy.iter().all(|&port| {
            cluster
                .owner_seen_by(port, slot)
                .is_some_and(|new| replicas.contains(&new))
        })
    });
    assert!(promoted, "the stalled owner's replica never took over");
    // Before: exit 69 after the whole --wait, however long after the
    // failover.
    runs_within(&url, &[], AT_ONCE);
    cluster.node(owner).resume();
}

/// Calls allowed 20 s (in a 60 s lease): a run that waited on a stalled
/// Sentinel primary for an answer would miss the bounds asserted here by
/// far.
const SLOW_CALLS: [&str; 4] = ["--ttl", "60s", "--redis-timeout", "20s"];

#[test]
fn a_run_started_on_a_stalled_sentinel_primary_takes_the_lock_once_another_is_named() {
    let mut set = SentinelSet::start();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let old = set.pause_primary();
    let paused = Instant::now();
    let mut run = Lockrun::via(&set.url())
        .key("job")
        .args(SLOW_CALLS)
        .args(["--wait", "60s"])
        .touch(&ran)
        .stderr(log_file(&dir.path().join("stderr")))
        .spawn();
    set.until_failed_over(old);
    let failed_over = paused.elapsed();
    // Before: the run's first connection waited on the stalled primary for
    // its 20 s, long after the failover.
    assert!(
        eventually(AT_ONCE, || ran.exists()),
        "the command did not run within {AT_ONCE:?} of the failover"
    );
    eprintln!(
        "sentinel primary stalled: failover seen after {failed_over:?}, the command ran after {:?}",
        paused.elapsed()
    );
    run.exits_saying(Expect::success(), || read_log(&dir.path().join("stderr")));
    assert!(set.primary().fence("job").is_some());
    set.server(old).resume();
}

#[test]
fn a_holder_whose_sentinel_primary_stalls_renews_on_the_new_one() {
    let mut set = SentinelSet::start();
    let mut holder = Lockrun::via(&set.url())
        .key("job")
        .args(SLOW_CALLS)
        .args(["--renew-every", "500ms", "--kill-grace", "1s"])
        .hold();
    let old = set.pause_primary();
    set.until_failed_over(old);
    let failed_over = Instant::now();
    // Before: the renewal waited on the stalled primary for its 20 s.
    assert!(
        set.primary().renewed("job", AT_ONCE),
        "no renewal on the new primary within {AT_ONCE:?} of the failover; lockrun said: {}",
        holder.stderr()
    );
    eprintln!(
        "sentinel primary stalled: a renewal on the new primary seen {:?} after the failover",
        failed_over.elapsed()
    );
    holder.finish();
    assert!(!set.primary().is_locked("job"));
    set.server(old).resume();
}
