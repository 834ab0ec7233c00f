//! Orders and outcomes that hold by construction, pinned: a waiter listens
//! before it takes its place in line; a command that cannot be started gives
//! the lock back and says so; an attempt that cannot give back what it may
//! hold on a quorum member says so with --verbose.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use crate::harness::{
    eventually, quorum, scratch, Expect, Lockrun, Server, PATIENCE, QUORUM_TIMING,
};

/// Every command a server runs, scripts' own calls included, in the order
/// it runs them: Redis's MONITOR, read on a thread of its own until the
/// server goes away.
struct Monitor(Arc<Mutex<Vec<String>>>);

impl Monitor {
    fn start(redis: &Server) -> Self {
        let url = redis.url();
        let socket = url.strip_prefix("unix://").expect("a server on a socket");
        let mut stream = UnixStream::connect(socket).expect("connect to redis");
        stream.write_all(b"MONITOR\r\n").expect("send MONITOR");
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok).expect("MONITOR's reply");
        assert_eq!(ok.trim_end(), "+OK");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                seen.lock().expect("monitor lines").push(line);
            }
        });
        Monitor(lines)
    }

    /// The index of the first command seen that contains `needle`.
    fn first(&self, needle: &str) -> Option<usize> {
        let lines = self.0.lock().expect("monitor lines");
        lines.iter().position(|line| line.contains(needle))
    }

    fn all(&self) -> String {
        self.0.lock().expect("monitor lines").join("\n")
    }
}

/// A release skips a waiter whose place says it listens but that nobody
/// subscribed for (it died): were the place written before the waiter's
/// SUBSCRIBE reached Redis, a release in between would drop a live waiter.
#[test]
fn a_waiter_subscribes_before_its_first_place_in_line_is_written() {
    let redis = Server::start();
    let monitor = Monitor::start(&redis);
    let mut holder = redis.lockrun("job").args(["--ttl", "30s"]).hold();
    let mut waiter = redis
        .lockrun("job")
        .args(["--wait", "forever"])
        .command(["true"])
        .spawn();
    let place = r#"[0 lua] "ZADD" "lockrun:{job}:queue""#;
    assert!(
        eventually(PATIENCE, || monitor.first(place).is_some()),
        "the waiter took no place in line:\n{}",
        monitor.all()
    );
    holder.go();
    waiter.exits(Expect::success().context("the waiter"));
    holder.end().assert(Expect::success().context("the holder"));

    let subscribed = monitor.first(r#""SUBSCRIBE" "lockrun:{job}:wake:"#);
    let placed = monitor.first(place);
    let listening = monitor.first(r#"[0 lua] "HSET" "lockrun:{job}:waiters""#);
    let (Some(subscribed), Some(placed), Some(listening)) = (subscribed, placed, listening) else {
        panic!("no SUBSCRIBE or no place in line:\n{}", monitor.all());
    };
    assert!(
        subscribed < placed,
        "the place in line was written before the SUBSCRIBE:\n{}",
        monitor.all()
    );
    let record = &monitor.0.lock().expect("monitor lines")[listening];
    assert!(
        record.contains(r#"\"listening\":true"#),
        "the place does not say the waiter listens: {record}"
    );
}

/// A command that is not there (127) or not executable (126) never ran:
/// the lock is given back at once, and --verbose says so.
#[test]
fn a_command_that_cannot_be_started_gives_the_lock_back_and_says_so() {
    let redis = Server::start();
    let dir = scratch();
    let not_executable = dir.path().join("job.sh");
    std::fs::write(&not_executable, "#!/bin/sh\ntrue\n").expect("write job.sh");
    std::fs::set_permissions(&not_executable, std::fs::Permissions::from_mode(0o644))
        .expect("chmod job.sh");
    let not_there = dir.path().join("no-such-command");
    for (command, code) in [(&not_there, 127), (&not_executable, 126)] {
        let ran = redis
            .lockrun("job")
            .arg("--verbose")
            .command([command])
            .run();
        assert_eq!(ran.code, Some(code), "{}", ran.stderr);
        assert!(
            ran.stderr.contains("released lockrun:{job}"),
            "{}",
            ran.stderr
        );
        assert!(!redis.is_locked("job"), "the lock was left held");
    }
}

/// An attempt short of a majority gives back what it may hold on every
/// member; a member that cannot be asked is said with --verbose, one line
/// for each, since the lease or place it may keep there holds up other runs
/// until it runs out.
#[test]
fn a_give_back_that_fails_on_a_quorum_member_is_said_with_verbose() {
    let servers = quorum(3);
    // Another run's lease on the first member, the second not answering:
    // only the third grants, short of a majority.
    let _: () = servers[0]
        .query(
            redis::cmd("SET")
                .arg("lockrun:{q}")
                .arg("x")
                .arg("PX")
                .arg(60_000),
        )
        .expect("SET");
    servers[1].pause();
    let ran = Lockrun::on_all(&servers)
        .key("q")
        .args(QUORUM_TIMING)
        .arg("--verbose")
        .command(["true"])
        .run();
    servers[1].resume();
    assert_eq!(ran.code, Some(75), "{}", ran.stderr);
    let said: Vec<&str> = ran
        .stderr
        .lines()
        .filter(|line| line.contains("could not give back"))
        .collect();
    assert_eq!(said.len(), 1, "{}", ran.stderr);
    assert!(said[0].contains(&servers[1].url()), "{}", ran.stderr);
    assert!(said[0].contains("expires within 900ms"), "{}", ran.stderr);
    assert!(!servers[2].is_locked("q"), "given back on the third member");
}
