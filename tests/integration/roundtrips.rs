//! Round trips over a slow link: `bench/roundtrips.py` runs lockrun through
//! its delay proxy on every path it knows, and each path's flights (bursts
//! to Redis, each answered before the next) and connects are held to the
//! floor the bench states, less the excess listed here with its reason.
//! A change that adds a round trip fails here, where no timing on loopback
//! would show it. And a link slower than the calls' time limit, through
//! the same proxy.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::harness::{redis_cli, redis_server, scratch, Expect, Lockrun, Server, LOCKRUN};

const BENCH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/roundtrips.py");

/// Flights and connects above the floor that a path still takes, and why.
/// A path not named here is at its floor.
const EXCESS: &[(&str, u64, u64, &str)] = &[
    ("--wait, TCP", 1, 0, HELLO_ALONE),
    ("--wait, TCP, password", 1, 0, HELLO_ALONE),
    ("--wait, handed the lock", 1, 0, HELLO_ALONE),
    (
        "quorum of 3",
        1,
        0,
        "the fences are raised in a flight of their own",
    ),
    ("Cluster, lock on the seed", 1, 0, CLUSTER),
    ("Cluster, password, lock on the seed", 1, 0, CLUSTER),
];

const CLUSTER: &str = "the slot map is asked (CLUSTER SLOTS) before the first call, also when \
     the lock is on the node asked";

const HELLO_ALONE: &str =
    "the crate sends HELLO 3 (RESP3, for the wake-ups) alone before the first call";

#[test]
fn every_path_at_its_floor_but_the_listed_excess() {
    let dir = scratch();
    let out = dir.path().join("roundtrips.json");
    // 50 ms: long enough that the bursts of one flight never split in two
    // on a loaded machine (at 10 ms a debug build's TLS Finished and first
    // call did, the server's session ticket answering the first), and a
    // run still takes a fraction of a second.
    let ran = Command::new("python3")
        .arg(BENCH)
        .args(["--lockrun", &LOCKRUN, "--rtt", "50ms", "--runs", "1"])
        .args([
            "--redis-server",
            &redis_server(),
            "--redis-cli",
            &redis_cli(),
        ])
        .arg("--json")
        .arg(&out)
        .output()
        .expect("python3 must be installed (scripts/test installs it)");
    assert!(
        ran.status.success(),
        "bench/roundtrips.py failed:\n{}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    let text = std::fs::read_to_string(&out).expect("the bench's JSON");
    let results: Vec<serde_json::Value> = serde_json::from_str(&text).expect("JSON");
    assert!(results.len() >= 21, "every path measured: {text}");
    let mut wrong = Vec::new();
    for r in &results {
        let path = r["path"].as_str().expect("path");
        let (flights, connects) = EXCESS
            .iter()
            .find(|(name, ..)| *name == path)
            .map_or((0, 0), |&(_, flights, connects, _)| (flights, connects));
        let want = r["floor"].as_u64().expect("floor") + flights;
        let want_connects = r["connects_floor"].as_u64().expect("floor") + connects;
        let expected_status = if path.starts_with("busy") { 75 } else { 0 };
        let flights_ok = match r["flights"].as_u64() {
            Some(n) if overlapping(path) => n <= want,
            n => n == Some(want),
        };
        if !flights_ok
            || r["connects"].as_u64() != Some(want_connects)
            || r["statuses"] != serde_json::json!([expected_status])
        {
            wrong.push(format!(
                "{path}: {} flights (want {want}), {} connects (want {want_connects}), exit {} \
                 ({})",
                r["flights"], r["connects"], r["statuses"], r["stderr"]
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Whether a path's bursts to several servers may overlap, counting as one
/// flight, or not, by timing alone: lockrun asks every listed cluster node
/// for the slot map at once. Such a path is held to at most its flights.
fn overlapping(path: &str) -> bool {
    path.starts_with("Cluster")
}

/// `bench/roundtrips.py --serve`: its delay proxy in front of `server`,
/// `rtt` each round trip, until dropped.
struct SlowLink {
    proxy: std::process::Child,
    port: u16,
}

impl SlowLink {
    fn to(server: &Server, rtt: &str) -> Self {
        let mut proxy = Command::new("python3")
            .arg(BENCH)
            .args(["--serve", &server.port().to_string(), "--rtt", rtt])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 must be installed (scripts/test installs it)");
        let mut line = String::new();
        BufReader::new(proxy.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the proxy's port");
        let port = line.trim().parse().expect("a port");
        SlowLink { proxy, port }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        // Its stdin closed, it exits.
        drop(self.proxy.stdin.take());
        let _ = self.proxy.wait();
    }
}

#[test]
fn a_link_slower_than_a_derived_timeout_is_told_what_to_raise() {
    let redis = Server::start_tcp();
    // The scripts loaded, so that a call is one round trip.
    redis
        .lockrun("job")
        .command(["true"])
        .run()
        .assert(Expect::success());
    let link = SlowLink::to(&redis, "500ms");
    // The proxy holds a connection's first bytes one round trip more (its
    // stand-in for the TCP handshake): the first call takes 1 s.
    let slow = Lockrun::via(&link.url()).key("job").command(["true"]);
    slow.args(["--ttl", "3s"]).run().assert(
        Expect::code(69)
            .stderr_starts(format!(
                "lockrun: cannot reach Redis at {}: it took the connection but sent no answer \
                 within 300ms,",
                link.url()
            ))
            .stderr_has(
                "the server is up but stuck (paused, or running a long script), or the link is \
                 slower than that: 300ms is the --redis-timeout lockrun derived from --ttl 3s \
                 (a tenth of it); over a slower link give a longer --redis-timeout, or --ttl\n",
            )
            .stderr_one_line(),
    );
    let given = Lockrun::via(&link.url()).key("job").command(["true"]);
    given
        .args(["--ttl", "3s", "--redis-timeout", "700ms"])
        .run()
        .assert(Expect::code(69).stderr_has(
            "or the link is slower than that: over a slower link give a --redis-timeout longer \
             than 700ms\n",
        ));
    // What the message says to raise, either of them, makes the run.
    let raised = Lockrun::via(&link.url()).key("job").command(["true"]);
    raised
        .args(["--ttl", "4s", "--redis-timeout", "1500ms"])
        .run()
        .assert(Expect::success());
    let longer = Lockrun::via(&link.url()).key("job").command(["true"]);
    longer
        .args(["--ttl", "20s"])
        .run()
        .assert(Expect::success());
}
