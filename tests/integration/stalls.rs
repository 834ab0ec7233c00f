//! A stalled Redis Cluster node (SIGSTOP: its sockets open, nothing
//! answering, as a frozen VM or a cut link looks from outside) costs a run
//! nothing unless the run needs it: lockrun learns the slot map from the
//! first listed node that answers and talks only to the lock's slot owner.
//! The runs name every node, as users write the URL, and allow 10 s for
//! each call, so that a run that waited on the stalled node would take
//! that long at least, far beyond the bounds asserted here. (The Sentinel
//! and quorum stalls are acks.rs's and quorum.rs's.)

use std::time::Duration;

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
