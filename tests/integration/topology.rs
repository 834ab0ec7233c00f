//! lockrun against replicated Redis: a Sentinel set and a Redis Cluster that
//! the tests start, fail over and break. Each test starts its own topology
//! (about 2.5 s) and stays under about 20 s.

use std::time::Duration;

use crate::harness::*;
use crate::topology_harness::*;

/// Timing for runs that must live through a failover (about 3 s): renewals
/// retry every 125 ms, and the command is stopped only after about 10 s
/// without a successful renewal.
const SURVIVE_FAILOVER: [&str; 8] = [
    "--ttl",
    "12s",
    "--renew-every",
    "500ms",
    "--redis-timeout",
    "600ms",
    "--kill-grace",
    "1s",
];

/// Waits until the lease on `node` is renewed there. Without a renewal on
/// that very node its expiry only shrinks (a failover's snapshot included),
/// so one reading above the one before proves a renewal in between.
fn renewed_on(node: &Node, name: &str) -> bool {
    let key = default_lock_key(name);
    let mut last = node.pttl(&key);
    eventually(TOPOLOGY_PATIENCE, || {
        let now = node.pttl(&key);
        std::mem::replace(&mut last, now) < now
    })
}

#[test]
fn sentinel_lease_handed_to_a_waiter_is_acknowledged_before_its_command_starts() {
    let set = SentinelSet::start();
    let url = set.url();
    let replicas = &set.servers[1..];
    let mut holder = hold_via(&url, "job", &[]);
    let dir = scratch();
    let started = dir.path().join("started");
    let stderr = dir.path().join("stderr");
    let mut waiter = Running::spawn(
        lockrun_via(
            &url,
            &["-k", "job", "--wait", "60s", "--redis-timeout", "500ms"],
        )
        .args(["--", "touch"])
        .arg(&started)
        .stderr(log_file(&stderr)),
    );
    assert!(
        eventually(TOPOLOGY_PATIENCE, || {
            let records: Vec<String> = set
                .primary()
                .query(redis::cmd("HVALS").arg(waiters_key("job")))
                .unwrap_or_default();
            listening(&records) == 1
        }),
        "the waiter never listened in line: {}",
        read_log(&stderr)
    );

    // Replication cut: the replicas stay connected but answer nothing. The
    // release hands the lease over all the same; the waiter must not start
    // on the hand-over's message alone.
    for replica in replicas {
        replica.pause();
    }
    holder.go();
    assert!(holder.run.wait().success(), "{}", holder.stderr());
    let unacknowledged = wait_for_text(&stderr, "replicas acknowledged the write");
    let cut_off = read_log(&stderr);
    let ran_early = started.exists();
    for replica in replicas {
        replica.resume();
    }
    assert!(unacknowledged, "{cut_off}");
    assert!(cut_off.contains("still waiting"), "{cut_off}");
    assert!(!ran_early, "the command started without acknowledgement");

    // Once the replicas answer again, the waiter gets the lock in its place.
    assert!(waiter.wait().success(), "{}", read_log(&stderr));
    assert!(started.exists());
}

#[test]
fn sentinel_run_keeps_its_lock_through_a_primary_crash() {
    let mut set = SentinelSet::start();
    eprintln!("sentinel set started in {:?}", set.started_in);
    let url = set.url();
    let mut holder = hold_via(&url, "job", &[&SURVIVE_FAILOVER[..], &["-v"]].concat());
    let first = set.primary().port;
    assert!(set.primary().get(&default_lock_key("job")).is_some());

    let took = set.kill_primary_and_fail_over();
    eprintln!("sentinel failover took {took:?}");
    let primary = set.primary();
    assert_ne!(primary.port, first);
    assert!(
        renewed_on(primary, "job"),
        "no renewal on the new primary; lockrun said: {}",
        holder.stderr()
    );

    // The lock moved with the failover: a second run finds it busy.
    let (busy, _) = run_to_end(&mut lockrun_via(&url, &["-k", "job", "--", "true"]));
    assert_eq!(busy.status.code(), Some(75), "{}", stderr_of(&busy));

    let (status, _) = run_to_end(&mut lockrun_sub("status", &url, &["--json", "-k", "job"]));
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert_eq!(json["held"], true);
    assert_eq!(json["redis_node"], primary.addr());

    holder.go();
    assert_eq!(holder.run.wait().code(), Some(0), "{}", holder.stderr());
    assert!(primary.get(&default_lock_key("job")).is_none());
}

#[test]
fn sentinel_run_moves_to_the_new_primary_while_the_old_one_still_takes_writes() {
    let set = SentinelSet::start();
    let url = set.url();
    let old = set.primary().port;
    let mut holder = hold_via(&url, "job", &[&SURVIVE_FAILOVER[..], &["-v"]].concat());

    // After a manual failover the old primary keeps accepting writes for a
    // while: renewing there would keep a lease that the new primary lets
    // lapse. Each call checks whom the sentinels name.
    let new = set.manual_failover();
    assert!(
        renewed_on(set.server(new), "job"),
        "no renewal on the new primary; lockrun said: {}",
        holder.stderr()
    );
    // Sentinel demotes the old primary about 10 s after the failover; the
    // renewal came within a renewal period or two, not because the old
    // primary stopped taking writes.
    assert_eq!(
        set.server(old).info("replication", "role").as_deref(),
        Some("master"),
        "the old primary was demoted before lockrun moved"
    );
    let (busy, _) = run_to_end(&mut lockrun_via(&url, &["-k", "job", "--", "true"]));
    assert_eq!(busy.status.code(), Some(75), "{}", stderr_of(&busy));

    holder.go();
    assert_eq!(holder.run.wait().code(), Some(0), "{}", holder.stderr());
}

#[test]
fn sentinel_acknowledgement_refuses_to_start_without_replicas_and_leaves_no_lock() {
    let set = SentinelSet::start();
    let url = set.url();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let replicas = &set.servers[1..];

    // A plain URL at a replica is told what to use instead.
    let (plain, _) = run_to_end(&mut lockrun_via(
        &replicas[0].url(),
        &["-k", "job", "--", "true"],
    ));
    assert_eq!(plain.status.code(), Some(69), "{}", stderr_of(&plain));
    assert!(
        stderr_of(&plain).contains("this server is a replica; point --redis at the primary"),
        "{}",
        stderr_of(&plain)
    );

    // Replication cut: the replicas stay connected but answer nothing.
    for replica in replicas {
        replica.pause();
    }
    let refused = run_to_end(
        lockrun_via(
            &url,
            &["-k", "job", "--redis-timeout", "500ms", "--", "touch"],
        )
        .arg(&ran),
    );
    let waited = run_to_end(
        lockrun_via(
            &url,
            &["-k", "job", "--redis-timeout", "500ms", "--wait", "1s"],
        )
        .args(["--", "touch"])
        .arg(&ran),
    );
    for replica in replicas {
        replica.resume();
    }
    let ((refused, took), (waited, waited_for)) = (refused, waited);
    assert_eq!(refused.status.code(), Some(69), "{}", stderr_of(&refused));
    assert!(
        stderr_of(&refused).contains("only 0 of 2 replicas acknowledged"),
        "{}",
        stderr_of(&refused)
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // A waiting run keeps trying until its wait runs out.
    assert_eq!(waited.status.code(), Some(69), "{}", stderr_of(&waited));
    assert!(waited_for >= Duration::from_secs(1), "{waited_for:?}");
    assert!(
        stderr_of(&waited).contains("still waiting"),
        "{}",
        stderr_of(&waited)
    );
    assert!(!ran.exists(), "the command ran without acknowledgement");

    // The lock was given back: once the replicas catch up, no server has it.
    set.wait_replicas_in_sync();
    for server in &set.servers {
        assert_eq!(
            server.get(&default_lock_key("job")),
            None,
            "{}",
            server.addr()
        );
    }

    let (ok, _) = run_to_end(lockrun_via(&url, &["-k", "job", "--", "touch"]).arg(&ran));
    assert_eq!(ok.status.code(), Some(0), "{}", stderr_of(&ok));
    assert!(ran.exists());
}

/// The fencing token of one quick run through `url`.
fn next_token(url: &str) -> u64 {
    let dir = scratch();
    let (output, _) = run_to_end(
        lockrun_via(url, &["-k", "job", "--", "sh", "-c"])
            .arg(r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/fence""#)
            .arg("sh")
            .arg(dir.path()),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr_of(&output));
    read_fence(&dir.path().join("fence"))
}

#[test]
fn sentinel_fencing_tokens_keep_increasing_across_failovers() {
    let mut set = SentinelSet::start();
    let url = set.url();
    let mut tokens = vec![next_token(&url)];
    for _ in 0..2 {
        let took = set.kill_primary_and_fail_over();
        eprintln!("sentinel failover took {took:?}");
        // Acknowledged before the command started: the promoted replica has
        // the last token, so the next one is larger whatever the clocks say.
        let counter = set.primary().get("lockrun:{job}:fence");
        assert_eq!(counter, Some(tokens[tokens.len() - 1].to_string()));
        set.wait_replicas_in_sync();
        tokens.push(next_token(&url));
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[test]
fn sentinel_url_works_while_any_sentinel_answers() {
    let (redis_pass, sentinel_pass) = ("data-s3cret", "sentinel-s3cret");
    let mut set = SentinelSet::start_with(Passwords {
        redis: Some(redis_pass),
        sentinel: Some(sentinel_pass),
    });
    let url = set.url();
    let run = |sentinel_password: Option<&str>| {
        let mut command = lockrun_via(&url, &["-k", "job", "--", "true"]);
        command.env("LOCKRUN_REDIS_PASSWORD", redis_pass);
        if let Some(password) = sentinel_password {
            command.env("LOCKRUN_SENTINEL_PASSWORD", password);
        }
        run_to_end(&mut command).0
    };

    let refused = run(None);
    assert_eq!(refused.status.code(), Some(69));
    assert!(
        stderr_of(&refused).contains("LOCKRUN_SENTINEL_PASSWORD"),
        "{}",
        stderr_of(&refused)
    );
    let wrong = run(Some("wrong-guess"));
    assert_eq!(wrong.status.code(), Some(69));
    assert!(
        !stderr_of(&wrong).contains("wrong-guess"),
        "{}",
        stderr_of(&wrong)
    );

    for dead in 0..2 {
        let ok = run(Some(sentinel_pass));
        assert_eq!(ok.status.code(), Some(0), "{}", stderr_of(&ok));
        set.sentinels[dead].kill();
    }
    let ok = run(Some(sentinel_pass));
    assert_eq!(ok.status.code(), Some(0), "{}", stderr_of(&ok));

    set.sentinels[2].kill();
    let none = run(Some(sentinel_pass));
    assert_eq!(none.status.code(), Some(69));
    assert!(
        stderr_of(&none).contains("no sentinel answered"),
        "{}",
        stderr_of(&none)
    );
    for secret in [redis_pass, sentinel_pass] {
        for output in [&refused, &wrong, &none] {
            assert!(!stderr_of(output).contains(secret), "{}", stderr_of(output));
        }
    }
}

/// The port of a primary that does not own `key`.
fn other_primary(cluster: &Cluster, key: &str) -> u16 {
    let (owner, _) = cluster.owner(key);
    cluster
        .primaries()
        .into_iter()
        .find(|&p| p != owner)
        .expect("another primary")
}

#[test]
fn cluster_follows_moved_from_a_node_that_does_not_own_the_slot() {
    let cluster = Cluster::start();
    eprintln!("cluster started in {:?}", cluster.started_in);
    let key = default_lock_key("job");
    let (owner, _) = cluster.owner(&key);
    let other = other_primary(&cluster, &key);

    // A plain URL at a cluster node is told what to use instead.
    let plain_url = cluster.node(other).url();
    let (plain, _) = run_to_end(&mut lockrun_via(&plain_url, &["-k", "job", "--", "true"]));
    assert_eq!(plain.status.code(), Some(69), "{}", stderr_of(&plain));
    let hint = format!(
        "this is a Redis Cluster node; use --redis redis+cluster://{}",
        cluster.node(other).addr()
    );
    assert!(stderr_of(&plain).contains(&hint), "{}", stderr_of(&plain));

    let url = cluster.url_via(&[other]);
    let mut holder = hold_via(&url, "job", &["--ttl", "3s"]);
    assert!(cluster.node(owner).get(&key).is_some());

    let (status, _) = run_to_end(&mut lockrun_sub("status", &url, &["--json", "-k", "job"]));
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert_eq!(json["held"], true);
    assert_eq!(json["holder"]["fencing_token"], holder.fence());
    assert_eq!(json["redis_node"], cluster.node(owner).addr());

    let (released, _) = run_to_end(&mut lockrun_sub("release", &url, &["--force", "-k", "job"]));
    assert_eq!(released.status.code(), Some(0), "{}", stderr_of(&released));
    assert_eq!(holder.run.wait().code(), Some(76), "{}", holder.stderr());
    assert_eq!(cluster.node(owner).get(&key), None);
}

#[test]
fn cluster_run_keeps_its_lock_through_a_failover_of_its_slot() {
    let mut cluster = Cluster::start();
    let url = cluster.url_via(&cluster.primaries());
    let mut holder = hold_via(&url, "job", &[&SURVIVE_FAILOVER[..], &["-v"]].concat());

    let (new_owner, took) = cluster.kill_owner_and_fail_over(&default_lock_key("job"));
    eprintln!("cluster failover took {took:?}");
    assert!(
        renewed_on(cluster.node(new_owner), "job"),
        "no renewal on the new owner; lockrun said: {}",
        holder.stderr()
    );
    let (busy, _) = run_to_end(&mut lockrun_via(&url, &["-k", "job", "--", "true"]));
    assert_eq!(busy.status.code(), Some(75), "{}", stderr_of(&busy));

    holder.go();
    assert_eq!(holder.run.wait().code(), Some(0), "{}", holder.stderr());
    assert_eq!(cluster.node(new_owner).get(&default_lock_key("job")), None);
}

#[test]
fn clusterdown_ends_a_run_without_wait_within_the_redis_timeout() {
    let mut cluster = Cluster::start();
    let key = default_lock_key("job");
    let (owner, _) = cluster.owner(&key);
    // A whole other shard down: with slots unserved, every node refuses
    // every key with CLUSTERDOWN.
    let other = cluster
        .shards()
        .into_iter()
        .find(|shard| shard.primary != owner)
        .expect("another shard");
    for port in [&[other.primary][..], &other.replicas].concat() {
        cluster.node_mut(port).kill();
    }
    assert!(
        eventually(TOPOLOGY_PATIENCE, || {
            cluster_info(cluster.node(owner), "cluster_state").as_deref() == Some("fail")
        }),
        "the cluster never noticed the lost shard"
    );

    let dir = scratch();
    let ran = dir.path().join("ran");
    let url = cluster.url_via(&[owner]);
    let (output, took) = run_to_end(
        lockrun_via(&url, &["-k", "job", "--redis-timeout", "1s", "--", "touch"]).arg(&ran),
    );
    assert_eq!(output.status.code(), Some(69), "{}", stderr_of(&output));
    assert!(
        stderr_of(&output).to_lowercase().contains("clusterdown"),
        "{}",
        stderr_of(&output)
    );
    assert!(!ran.exists());
    // The acquire and the release that follows it, 1 s each at most, plus
    // start-up: far from the redis crate's own 16 retries, 1.28 s or more
    // apart.
    assert!(took < Duration::from_millis(3500), "took {took:?}");
}

#[test]
fn cluster_waiter_through_another_node_is_handed_the_lock_on_release() {
    let cluster = Cluster::start();
    let key = default_lock_key("job");
    let (owner, _) = cluster.owner(&key);
    let other = other_primary(&cluster, &key);
    let listening = |port: u16| -> usize {
        let channels: Vec<String> = cluster
            .node(port)
            .query(
                redis::cmd("PUBSUB")
                    .arg("CHANNELS")
                    .arg(wake_channels("job")),
            )
            .expect("PUBSUB CHANNELS");
        channels.len()
    };

    let mut holder = hold_via(&cluster.url_via(&[owner]), "job", &["--ttl", "60s"]);
    let dir = scratch();
    // It refreshes its place every 20 s: only the hand-over's message lets
    // it start sooner.
    let mut waiter = Running::spawn(
        lockrun_via(
            &cluster.url_via(&[other]),
            &[
                "-k", "job", "--wait", "60s", "--ttl", "60s", "--", "sh", "-c",
            ],
        )
        .arg(r#"echo started > "$1/started""#)
        .arg("sh")
        .arg(dir.path()),
    );
    // The waiter was given another node, but listens on the one that owns
    // the lock's slot, where the release's script can tell that it lives.
    assert!(eventually(PATIENCE, || listening(owner) == 1));
    assert_eq!(listening(other), 0);
    assert!(waiter.running());

    let released = std::time::Instant::now();
    holder.go();
    read_when_ready(&dir.path().join("started"));
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the waiter started {took:?} after the release"
    );
    assert!(holder.run.wait().success());
    assert!(waiter.wait().success());
}
