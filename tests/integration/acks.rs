//! `--replica-acks all` behind Sentinel: `status --json` says how many
//! replicas acknowledged the lease, and a run that finds no replica to
//! acknowledge it says so once, as text and as a JSON event.

use std::time::Duration;

use serde_json::Value;

use crate::harness::*;
use crate::log_format::checked_events;

/// `replicas_acknowledged` of lock `job` through `url`.
fn acknowledged(url: &str) -> Value {
    let ran = Lockrun::via(url)
        .subcommand("status")
        .key("job")
        .arg("--json")
        .run();
    ran.assert(Expect::success().stdout_any());
    let status: Value = serde_json::from_str(&ran.stdout).expect("status --json");
    status["replicas_acknowledged"].clone()
}

/// A run holding lock `job` through `url` until `go`, renewing every 200 ms.
fn hold(url: &str) -> Holder {
    Lockrun::via(url)
        .key("job")
        .args(["--wait", "20s", "--ttl", "3s", "--renew-every", "200ms"])
        .hold()
}

/// Lets `holder` finish, and checks it never said its lease was unprotected.
fn ends_without_warning(mut holder: Holder) {
    holder.go();
    holder
        .end()
        .assert(Expect::success().stderr_lacks("--replica-acks all"));
}

#[test]
fn all_with_no_replica_warns_once_and_status_counts_the_acknowledgements() {
    let mut set = SentinelSet::start();
    let url = set.url();

    let holder = hold(&url);
    assert_eq!(acknowledged(&url), 2);
    ends_without_warning(holder);

    without_replicas(&mut set);
    let primary = &set.servers[0];

    // Held through several renewals, which find no replica either: one line.
    let holder = hold(&url);
    assert_eq!(acknowledged(&url), 0);
    let renewed = primary.renewed("job", PATIENCE);
    assert!(renewed, "never renewed");
    holder.go();
    let mut holder = holder;
    holder.end().assert(
        Expect::success()
            .stderr_starts(
                "lockrun: --replica-acks all found no replica connected to the primary holding \
                 lockrun:{job}: the lease is not protected against a failover",
            )
            .stderr_one_line(),
    );

    one_json_event(&url);

    // Asked for no acknowledgement: no warning, and status does not know.
    let holder = Lockrun::via(&url)
        .key("job")
        .args(["--replica-acks", "0"])
        .hold();
    assert_eq!(acknowledged(&url), Value::Null);
    ends_without_warning(holder);
}

/// A run through `url`, whose primary has no replica, writes one
/// `unacknowledged` event as LOG FORMAT documents it.
fn one_json_event(url: &str) {
    assert_eq!(unacknowledged_event(url)["level"], "warning");
}

/// The one event, `unacknowledged`, of a run through `url` whose writes
/// no replica acknowledges.
fn unacknowledged_event(url: &str) -> serde_json::Map<String, serde_json::Value> {
    let ran = Lockrun::via(url)
        .key("job")
        .args(["--log-format", "json"])
        .command(["true"])
        .run();
    ran.assert(Expect::success().stderr_one_line());
    let events = checked_events(&ran.stderr, Some("job"));
    assert_eq!(events[0]["event"], "unacknowledged");
    events[0].clone()
}

/// Kills the replicas of `set`, and waits until its primary counts none.
fn without_replicas(set: &mut SentinelSet) {
    for replica in &mut set.servers[1..] {
        replica.kill();
    }
    let primary = &set.servers[0];
    let gone = eventually(PATIENCE, || {
        primary.info("replication", "connected_slaves").as_deref() == Some("0")
    });
    assert!(gone, "the primary still counts replicas");
}

/// The config line that takes WAIT away, as managed services and proxies
/// that lack it do.
const NO_WAIT: &str = "rename-command WAIT \"\"\n";

/// A run through `url` that asks one replica for an acknowledgement of a
/// server without WAIT exits 69 and says how to run without it.
fn one_ack_is_refused(url: &str) {
    Lockrun::via(url)
        .key("job")
        .args(["--replica-acks", "1"])
        .command(["true"])
        .run()
        .assert(
            Expect::code(69)
                .stderr_has("cannot acknowledge replication: it does not know WAIT")
                .stderr_has("--replica-acks 0 runs without replica acknowledgement")
                .stderr_one_line(),
        );
}

/// A run through `url` (Sentinel or Cluster, whose default is `all`) on
/// servers without WAIT holds the lock, says once that its lease is not
/// protected, and `status --json` counts no acknowledgement.
fn all_runs_unprotected(url: &str) {
    let mut holder = hold(url);
    assert_eq!(acknowledged(url), 0);
    holder.go();
    holder.end().assert(
        Expect::success()
            .stderr_starts(
                "lockrun: --replica-acks all: the primary holding lockrun:{job} cannot \
                 acknowledge replication (it does not know WAIT)",
            )
            .stderr_one_line(),
    );
    assert_eq!(unacknowledged_event(url)["cause"], "no_wait");
}

#[test]
fn a_plain_server_without_wait_refuses_an_explicit_count_only() {
    let server = Server::node(free_port(), NO_WAIT);
    let url = server.url();
    one_ack_is_refused(&url);
    // The default for a plain URL sends no WAIT.
    Lockrun::via(&url)
        .key("job")
        .command(["true"])
        .run()
        .assert(Expect::success().stderr(""));
}

#[test]
fn a_sentinel_set_without_wait_runs_unprotected_by_default() {
    let set = SentinelSet::start_configured(NO_WAIT);
    all_runs_unprotected(&set.url());
    one_ack_is_refused(&set.url());
}

#[test]
fn a_cluster_without_wait_runs_unprotected_by_default() {
    let cluster = Cluster::start_configured(NO_WAIT);
    let url = cluster.url_via(&cluster.primaries());
    all_runs_unprotected(&url);
    one_ack_is_refused(&url);
}

/// A replica paused (SIGSTOP: its link open, nothing answering) behind
/// Sentinel: the primary keeps it connected for repl-timeout (60 s), and
/// `--replica-acks all` used to wait for it all that time, refusing every
/// run. Now it is left out once its acknowledgements are 3 s late: a waiting
/// run started as it stalls gets the lock within seconds, later runs at once
/// with the other replica's acknowledgement.
#[test]
fn a_stalled_replica_holds_up_runs_only_until_its_acknowledgements_are_late() {
    let set = SentinelSet::start();
    set.wait_replicas_in_sync();
    let url = set.url();
    let primary = set.primary().port();
    let replica = set
        .servers
        .iter()
        .find(|server| server.port() != primary)
        .expect("a replica");
    replica.pause();
    let ran = Lockrun::via(&url)
        .key("job")
        .args(["--wait", "20s"])
        .command(["true"])
        .run();
    // It may say once that it waits for the replicas.
    ran.assert(Expect::success().stderr_any());
    // Before: exit 69 after the whole wait, 20 s.
    assert!(ran.took < Duration::from_secs(8), "took {:?}", ran.took);

    let ran = Lockrun::via(&url).key("job").command(["true"]).run();
    ran.assert(Expect::success());
    assert!(ran.took < Duration::from_secs(2), "took {:?}", ran.took);
    let holder = hold(&url);
    assert_eq!(acknowledged(&url), 1);
    ends_without_warning(holder);
    replica.resume();
}
