//! A server at its `maxclients` limit: waiting runs that it turns away keep
//! trying until their wait runs out and then run one at a time, a run that
//! does not wait says why it could not connect, and a holder's renewals keep
//! the one connection it has.
//!
//! Every wait is a poll with a deadline; the test's own connections count
//! against the limit too, so it opens one at a time and only between runs.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::*;

/// The server's client limit.
const MAX_CLIENTS: &str = "20";

/// Writes the start and end of a 50 ms job, in nanoseconds, to the file
/// named $2 in the directory $1.
const STAMPED_JOB: &str =
    r#"date +%s%N > "$1/$2.stamps"; sleep 0.05; date +%s%N >> "$1/$2.stamps""#;

/// The start and end that run `name` stamped.
fn stamps(dir: &Path, name: &str) -> (u128, u128) {
    let text = read_log(&dir.join(format!("{name}.stamps")));
    let times: Vec<u128> = text
        .lines()
        .map(|line| line.trim().parse().expect("a stamp"))
        .collect();
    match times[..] {
        [start, end] => (start, end),
        _ => panic!("{name} stamped {text:?}"),
    }
}

#[test]
fn sixty_waiters_at_twenty_clients_each_run_in_turn() {
    let redis = Server::start_with(None, &["--maxclients", MAX_CLIENTS]);
    let dir = scratch();
    let names: Vec<String> = (0..60).map(|n| format!("run{n}")).collect();
    let mut runs: Vec<Running> = names
        .iter()
        .map(|name| {
            redis
                .lockrun("job")
                .args(["--wait", "60s"])
                .sh(STAMPED_JOB, dir.path())
                .command([name])
                .stderr(log_file(&dir.path().join(format!("{name}.stderr"))))
                .spawn()
        })
        .collect();
    let deadline = Instant::now() + PATIENCE;
    for (run, name) in runs.iter_mut().zip(&names) {
        let left = deadline.saturating_duration_since(Instant::now());
        run.exits_within(left, Expect::success(), || {
            let stderr = read_log(&dir.path().join(format!("{name}.stderr")));
            format!("{name}: {stderr}")
        });
    }
    let rejected = redis.info("stats", "rejected_connections");
    let rejected: u64 = rejected.and_then(|n| n.parse().ok()).expect("INFO stats");
    assert!(rejected > 0, "the server never reached its client limit");
    let mut ran: Vec<(u128, u128, &String)> = names
        .iter()
        .map(|name| {
            let (start, end) = stamps(dir.path(), name);
            (start, end, name)
        })
        .collect();
    ran.sort();
    for pair in ran.windows(2) {
        let ((_, end, before), (start, _, after)) = (pair[0], pair[1]);
        assert!(
            end <= start,
            "{after} started before {before} ended: {ran:?}"
        );
    }
}

#[test]
fn a_run_that_does_not_wait_names_the_client_limit() {
    let redis = Server::start_with(None, &["--maxclients", MAX_CLIENTS]);
    let held = take_every_client(&redis);
    let ran = redis.lockrun("job").touch("/nonexistent/never").run();
    ran.assert(
        Expect::code(69)
            .stderr_one_line()
            .stderr_has("max number of clients reached")
            .stderr_has("maxclients")
            .context(format!("{} clients held by the test", held.len())),
    );
    // A run whose wait runs out while the server is full says the same.
    let ran = redis
        .lockrun("job")
        .args(["--wait", "1s"])
        .touch("/nonexistent/never")
        .run();
    ran.assert(
        Expect::code(69)
            .stderr_has("max number of clients reached")
            .stderr_lacks("Broken pipe\n"),
    );
    drop(held);
    // Once clients leave, a run connects again.
    let freed = eventually(PATIENCE, || {
        redis.lockrun("job").command(["true"]).run().code == Some(0)
    });
    assert!(
        freed,
        "no run got a connection once the test let go of its own"
    );
}

/// A quorum with two of its three servers full: no majority can be had
/// until they let the run in, which it waits for, as on one server.
#[test]
fn a_waiting_quorum_run_keeps_trying_while_its_servers_are_full() {
    let servers: Vec<Server> = (0..3)
        .map(|_| Server::start_with(None, &["--maxclients", MAX_CLIENTS]))
        .collect();
    let held: Vec<_> = servers[..2].iter().map(take_every_client).collect();
    // A short ttl: servers this new do not vote before they have been up
    // for one and its drift, in whole seconds (Redlock's delayed restart):
    // 1s here.
    let waiting = Lockrun::on_all(&servers).args(["--ttl", "900ms"]);
    runs_once_let_in(waiting, held);
}

/// A cluster whose nodes are all full: a run that does not wait names the
/// limit, one that waits runs once the nodes let it in.
#[test]
fn a_full_cluster_is_named_and_waited_for() {
    let cluster = Cluster::start_configured(&format!("maxclients {MAX_CLIENTS}\n"));
    let url = cluster.url_via(&cluster.primaries());
    let held: Vec<_> = cluster.nodes.iter().map(take_every_client).collect();
    let ran = Lockrun::via(&url)
        .key("job")
        .touch("/nonexistent/never")
        .run();
    ran.assert(
        Expect::code(69)
            .stderr_one_line()
            .stderr_has("max number of clients")
            .stderr_has("maxclients"),
    );
    runs_once_let_in(Lockrun::via(&url), held);
}

/// Runs `lockrun` with `--wait` while the test holds `held`, the clients
/// its servers allow: it must not give up at once, and must run once the
/// test lets go of them.
fn runs_once_let_in(lockrun: Lockrun<'_>, held: Vec<Vec<redis::Connection>>) {
    let dir = scratch();
    let stderr = dir.path().join("stderr");
    let mut waiting = lockrun
        .key("job")
        .args(["--wait", "60s"])
        .stderr(log_file(&stderr))
        .touch(dir.path().join("ran"))
        .spawn();
    // Refused for want of a client, it says it goes on waiting.
    let said = wait_for_text(&stderr, "still waiting");
    assert!(
        said && read_log(&stderr).contains("max number of clients") && waiting.running(),
        "gave up at once: {}",
        read_log(&stderr)
    );
    drop(held);
    waiting.exits_saying(Expect::success(), || read_log(&stderr));
    assert!(dir.path().join("ran").exists());
}

/// Opens connections to `redis` until it refuses one, and returns the ones
/// it accepted: every client it allows, less any it had not yet freed.
fn take_every_client(redis: &Server) -> Vec<redis::Connection> {
    let client = redis::Client::open(redis.url()).expect("client");
    let mut held = Vec::new();
    loop {
        let opened = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .and_then(|mut conn| {
                redis::cmd("PING").query::<String>(&mut conn)?;
                Ok(conn)
            });
        match opened {
            Ok(conn) => held.push(conn),
            // Its own links (a replica's, the harness's) take some.
            Err(_) if held.len() >= 5 => return held,
            Err(err) => panic!("refused after {} connections: {err}", held.len()),
        }
        assert!(held.len() <= 20, "the server took more than its maxclients");
    }
}

#[test]
fn a_holders_renewals_keep_its_connection() {
    let redis = Server::start();
    let opened = || -> u64 {
        redis
            .info("stats", "total_connections_received")
            .and_then(|n| n.parse().ok())
            .expect("INFO stats")
    };
    let before = opened();
    // About ten renewals.
    let ran = redis
        .lockrun("job")
        .args(["--ttl", "3s", "--renew-every", "100ms"])
        .command(["sleep", "1"])
        .run();
    ran.assert(Expect::success());
    // The run's one connection, and the test's own for the second INFO.
    let connections = opened() - before;
    assert!(
        connections <= 2,
        "{connections} connections were opened for one run"
    );
}
