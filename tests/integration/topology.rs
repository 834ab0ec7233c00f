//! lockrun against replicated Redis: a Sentinel set and a Redis Cluster that
//! the tests start, fail over and break. Each test starts its own topology
//! (a cluster in about 2 s, a Sentinel set in 0.1 s) and stays under about
//! 20 s.

use std::time::Duration;

use crate::harness::*;

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

/// A run holding lock `job` through a topology URL until the test says
/// `go`. It waits for the lock, so that a topology still settling (a replica
/// slow to acknowledge on a loaded machine) delays the test instead of
/// failing it.
fn hold_via(url: &str, args: &[&str]) -> Holder {
    Lockrun::via(url)
        .key("job")
        .args(["--wait", "20s"])
        .args(args)
        .hold()
}

/// One run of `true` on lock `job` through `url`, to its end.
fn run_true(url: &str) -> Ran {
    Lockrun::via(url).key("job").command(["true"]).run()
}

/// How `run_true` ends while another run holds the lock.
fn busy() -> Expect {
    Expect::code(75)
        .stderr_starts("lockrun: job is held by ")
        .stderr_has("; not running true (exit 75)")
        .stderr_one_line()
}

/// How a `-v` holder that kept its lock ends, whatever it retried meanwhile.
fn verbose_success() -> Expect {
    // Before the lease is its own, a run may say that replicas were slow to
    // acknowledge it, as on a loaded machine: then it waits and tries again.
    Expect::success()
        .stderr_where(
            "first \"lockrun: acquired lockrun:{job} on \", after any line \
             about replicas slow to acknowledge",
            |text| {
                text.lines()
                    .find(|line| !line.contains("replicas acknowledged the write"))
                    .is_some_and(|line| line.starts_with("lockrun: acquired lockrun:{job} on "))
            },
        )
        .stderr_has("\nlockrun: released lockrun:{job}\n")
}

#[test]
fn sentinel_lease_handed_to_a_waiter_is_acknowledged_before_its_command_starts() {
    let set = SentinelSet::start();
    let url = set.url();
    let replicas = &set.servers[1..];
    let mut holder = hold_via(&url, &[]);
    let dir = scratch();
    let started = dir.path().join("started");
    let stderr = dir.path().join("stderr");
    let mut waiter = Lockrun::via(&url)
        .key("job")
        .args(["--wait", "60s", "--redis-timeout", "500ms"])
        .touch(&started)
        .stderr(log_file(&stderr))
        .spawn();
    assert!(
        eventually(TOPOLOGY_PATIENCE, || {
            set.primary().listening_waiters("job") == 1
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
    holder.end().assert(Expect::success());
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
    waiter.exits_saying(Expect::success(), || read_log(&stderr));
    assert!(started.exists());
}

#[test]
fn sentinel_run_keeps_its_lock_through_a_primary_crash() {
    let mut set = SentinelSet::start();
    eprintln!("sentinel set started in {:?}", set.started_in);
    let url = set.url();
    let mut holder = hold_via(&url, &[&SURVIVE_FAILOVER[..], &["-v"]].concat());
    let first = set.primary().port();
    assert!(set.primary().is_locked("job"));

    let took = set.kill_primary_and_fail_over();
    eprintln!("sentinel failover took {took:?}");
    let primary = set.primary();
    assert_ne!(primary.port(), first);
    assert!(
        primary.renewed("job", TOPOLOGY_PATIENCE),
        "no renewal on the new primary; lockrun said: {}",
        holder.stderr()
    );

    // The lock moved with the failover: a second run finds it busy.
    run_true(&url).assert(busy());

    let status = Lockrun::via(&url)
        .key("job")
        .subcommand("status")
        .arg("--json")
        .run();
    let json: serde_json::Value = serde_json::from_str(&status.stdout).expect("JSON");
    assert_eq!(json["held"], true);
    assert_eq!(json["redis_node"], primary.addr());

    holder.go();
    holder.end().assert(verbose_success());
    assert!(!primary.is_locked("job"));
}

#[test]
fn sentinel_run_moves_to_the_new_primary_while_the_old_one_still_takes_writes() {
    let set = SentinelSet::start();
    let url = set.url();
    let old = set.primary().port();
    let mut holder = hold_via(&url, &[&SURVIVE_FAILOVER[..], &["-v"]].concat());

    // After a manual failover the old primary keeps accepting writes for a
    // while: renewing there would keep a lease that the new primary lets
    // lapse. Each call checks whom the sentinels name.
    let new = set.manual_failover();
    assert!(
        set.server(new).renewed("job", TOPOLOGY_PATIENCE),
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
    run_true(&url).assert(busy());

    holder.go();
    holder.end().assert(verbose_success());
}

#[test]
fn a_replica_that_a_sentinel_names_answers_for_nothing() {
    let set = SentinelSet::start();
    let mut holder = hold_via(&set.url(), &[]);
    // A sentinel of its own, watching a replica as the primary, names it
    // for a minute before it counts it down; the primary's ROLE travels
    // with the first call, whose reply must then count for nothing: the
    // replica's copy of the lock may be stale, and it takes no write.
    let replica = &set.servers[1];
    let port = free_ports(1)[0];
    let config = format!(
        "sentinel monitor lost 127.0.0.1 {} 1\nsentinel down-after-milliseconds lost 60000\n",
        replica.port()
    );
    let sentinel = Server::sentinels_together(&[(port, config)], None);
    let url = format!("redis+sentinel://{}/lost", sentinel[0].addr());
    let not_primary = || {
        Expect::code(69)
            .stderr_has(format!(
                "(primary {}) is unavailable: the sentinels name it, but it is not a primary",
                replica.addr()
            ))
            .stderr_one_line()
    };
    Lockrun::via(&url)
        .key("job")
        .subcommand("status")
        .run()
        .assert(not_primary());
    run_true(&url).assert(not_primary());
    holder.go();
    holder.end().assert(Expect::success());
}

#[test]
fn sentinel_acknowledgement_refuses_to_start_without_replicas_and_leaves_no_lock() {
    let set = SentinelSet::start();
    let url = set.url();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let replicas = &set.servers[1..];

    // A plain URL at a replica is told what to use instead.
    let plain = run_true(&replicas[0].url());
    plain.assert(
        Expect::code(69)
            .stderr_has("this server is a replica; point --redis at the primary")
            .stderr_one_line(),
    );

    // Replication cut: the replicas stay connected but answer nothing.
    for replica in replicas {
        replica.pause();
    }
    let refused = Lockrun::via(&url)
        .key("job")
        .args(["--redis-timeout", "500ms"])
        .touch(&ran)
        .run();
    let waited = Lockrun::via(&url)
        .key("job")
        .args(["--redis-timeout", "500ms", "--wait", "1s"])
        .touch(&ran)
        .run();
    for replica in replicas {
        replica.resume();
    }
    let (took, waited_for) = (refused.took, waited.took);
    refused.assert(Expect::code(69).stderr_has("only 0 of 2 replicas acknowledged"));
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // A waiting run keeps trying until its wait runs out.
    waited.assert(
        Expect::code(69)
            .stderr_has("only 0 of 2 replicas acknowledged")
            .stderr_has("still waiting"),
    );
    assert!(waited_for >= Duration::from_secs(1), "{waited_for:?}");
    assert!(!ran.exists(), "the command ran without acknowledgement");

    // The lock was given back: once the replicas catch up, no server has it.
    set.wait_replicas_in_sync();
    for server in &set.servers {
        assert_eq!(server.lock_value("job"), None, "{}", server.addr());
    }

    let ok = Lockrun::via(&url).key("job").touch(&ran).run();
    ok.assert(Expect::success());
    assert!(ran.exists());
}

#[test]
fn sentinel_fencing_tokens_keep_increasing_across_failovers() {
    let mut set = SentinelSet::start();
    let url = set.url();
    let mut tokens = vec![Lockrun::via(&url).key("job").next_fence()];
    for _ in 0..2 {
        let took = set.kill_primary_and_fail_over();
        eprintln!("sentinel failover took {took:?}");
        // Acknowledged before the command started: the promoted replica has
        // the last token, so the next one is larger whatever the clocks say.
        let counter = set.primary().fence("job");
        assert_eq!(counter, Some(tokens[tokens.len() - 1]));
        set.wait_replicas_in_sync();
        tokens.push(Lockrun::via(&url).key("job").next_fence());
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
        let mut command = Lockrun::via(&url)
            .key("job")
            .command(["true"])
            .env("LOCKRUN_REDIS_PASSWORD", redis_pass);
        if let Some(password) = sentinel_password {
            command = command.env("LOCKRUN_SENTINEL_PASSWORD", password);
        }
        command.run()
    };

    // Refused, and no message shows a password.
    let refused = |expect: Expect| {
        expect
            .stderr_lacks(redis_pass)
            .stderr_lacks(sentinel_pass)
            .stderr_one_line()
    };
    run(None).assert(refused(
        Expect::code(69).stderr_has("LOCKRUN_SENTINEL_PASSWORD"),
    ));
    run(Some("wrong-guess")).assert(refused(
        Expect::code(69)
            .stderr_has("refused authentication")
            .stderr_lacks("wrong-guess"),
    ));

    for dead in 0..2 {
        let ok = run(Some(sentinel_pass));
        ok.assert(Expect::success());
        set.sentinels[dead].kill();
    }
    let ok = run(Some(sentinel_pass));
    ok.assert(Expect::success());

    set.sentinels[2].kill();
    run(Some(sentinel_pass)).assert(refused(Expect::code(69).stderr_has("no sentinel answered")));
}

#[test]
fn cluster_follows_moved_from_a_node_that_does_not_own_the_slot() {
    let cluster = Cluster::start();
    eprintln!("cluster started in {:?}", cluster.started_in);
    let key = "lockrun:{job}";
    let (owner, _) = cluster.owner(key);
    let other = cluster.other_primary(key);

    // A plain URL at a cluster node is told what to use instead.
    let plain_url = cluster.node(other).url();
    let plain = run_true(&plain_url);
    plain.assert(
        Expect::code(69)
            .stderr_has(
                "failed: this is a Redis Cluster node, and the lock's keys are on another node \
                 (MOVED ",
            )
            .stderr_has(format!(
                "), which a one-server URL never follows; use --redis redis+cluster://{}\n",
                cluster.node(other).addr()
            ))
            .stderr_one_line(),
    );
    // At once: a redirection that a plain URL can never follow is not sent
    // again until the call's limit.
    assert!(plain.took < Duration::from_secs(3), "took {:?}", plain.took);

    let url = cluster.url_via(&[other]);
    let mut holder = hold_via(&url, &["--ttl", "3s"]);
    assert!(cluster.node(owner).is_locked("job"));

    let status = Lockrun::via(&url)
        .key("job")
        .subcommand("status")
        .arg("--json")
        .run();
    let json: serde_json::Value = serde_json::from_str(&status.stdout).expect("JSON");
    assert_eq!(json["held"], true);
    assert_eq!(json["holder"]["fencing_token"], holder.fence());
    assert_eq!(json["redis_node"], cluster.node(owner).addr());

    let released = Lockrun::via(&url)
        .key("job")
        .subcommand("release")
        .arg("--force")
        .run();
    released.assert(Expect::success().stdout_starts("released job held by "));
    holder.end().assert(Expect::lost_to_force_release("job"));
    assert_eq!(cluster.node(owner).lock_value("job"), None);
}

#[test]
fn cluster_run_keeps_its_lock_through_a_failover_of_its_slot() {
    let mut cluster = Cluster::start();
    let url = cluster.url_via(&cluster.primaries());
    let mut holder = hold_via(&url, &[&SURVIVE_FAILOVER[..], &["-v"]].concat());

    let (new_owner, took) = cluster.kill_owner_and_fail_over("lockrun:{job}");
    eprintln!("cluster failover took {took:?}");
    assert!(
        cluster.node(new_owner).renewed("job", TOPOLOGY_PATIENCE),
        "no renewal on the new owner; lockrun said: {}",
        holder.stderr()
    );
    run_true(&url).assert(busy());

    holder.go();
    holder.end().assert(verbose_success());
    assert_eq!(cluster.node(new_owner).lock_value("job"), None);
}

#[test]
fn clusterdown_ends_a_run_without_wait_within_the_redis_timeout() {
    let mut cluster = Cluster::start();
    let (owner, _) = cluster.owner("lockrun:{job}");
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
    let output = Lockrun::via(&url)
        .key("job")
        .args(["--redis-timeout", "1s"])
        .touch(&ran)
        .run();
    let took = output.took;
    output.assert(
        Expect::code(69)
            .stderr_where("CLUSTERDOWN in any case", |stderr| {
                stderr.to_lowercase().contains("clusterdown")
            })
            .stderr_one_line(),
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
    let key = "lockrun:{job}";
    let (owner, _) = cluster.owner(key);
    let other = cluster.other_primary(key);
    let listening = |port: u16| cluster.node(port).wake_channels("job");

    let mut holder = hold_via(&cluster.url_via(&[owner]), &["--ttl", "60s"]);
    let dir = scratch();
    // It refreshes its place every 20 s: only the hand-over's message lets
    // it start sooner.
    let mut waiter = Lockrun::via(&cluster.url_via(&[other]))
        .key("job")
        .args(["--wait", "60s", "--ttl", "60s"])
        .sh(r#"echo started > "$1/started""#, dir.path())
        .spawn();
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
    holder.run.exits(Expect::success());
    waiter.exits(Expect::success());
}
