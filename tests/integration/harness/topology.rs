//! What groups of `Server`s share: free port pairs, their own patience, and the quorum (a plain `Vec<Server>`).

use std::net::TcpListener;
use std::time::Duration;

use super::process::take_port;
use super::{eventually, Server, PATIENCE};

/// How long a Sentinel set or cluster may take to start or to fail over.
/// Measured here: about 2 s to start a cluster, 0.1 s a Sentinel set, and
/// 3 s to fail over; the rest is for a loaded machine.
pub const TOPOLOGY_PATIENCE: Duration = Duration::from_secs(40);

/// `count` free loopback ports, each with port + 10000 free as well (a
/// cluster node's bus port). All are held until all are found, so no port is
/// handed out twice.
pub fn free_ports(count: usize) -> Vec<u16> {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    while ports.len() < count {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = listener.local_addr().expect("local address").port();
        held.push(listener);
        if port > 55535 {
            continue;
        }
        if let Ok(bus) = TcpListener::bind(("127.0.0.1", port + 10000)) {
            held.push(bus);
            if take_port(port, Some(port + 10000)) {
                ports.push(port);
            }
        }
    }
    ports
}

/// Fails the test unless `condition` holds within `TOPOLOGY_PATIENCE`.
pub(super) fn wait_until(what: &str, condition: impl FnMut() -> bool) {
    assert!(
        eventually(TOPOLOGY_PATIENCE, condition),
        "{what} (waited {TOPOLOGY_PATIENCE:?})"
    );
}

/// The server among `servers` on `port`.
pub(super) fn on_port(servers: &[Server], port: u16) -> &Server {
    servers
        .iter()
        .find(|server| server.port() == port)
        .expect("a server of this group")
}

pub(super) fn on_port_mut(servers: &mut [Server], port: u16) -> &mut Server {
    servers
        .iter_mut()
        .find(|server| server.port() == port)
        .expect("a server of this group")
}

/// Timing for runs on a quorum: short enough that a member restarted empty
/// votes again after a second (one ttl plus the drift allowance, rounded up
/// to whole seconds), with room for an acquisition of both phases on a busy
/// machine.
pub const QUORUM_TIMING: [&str; 6] = [
    "--ttl",
    "900ms",
    "--redis-timeout",
    "200ms",
    "--kill-grace",
    "100ms",
];

/// `count` independent servers for `--redis` given that many times, once
/// every one of them votes.
pub fn quorum(count: usize) -> Vec<Server> {
    let servers: Vec<Server> = (0..count).map(|_| Server::start()).collect();
    until_voting(&servers, 1);
    servers
}

/// Seconds since the server started, if it answers.
pub fn uptime(server: &Server) -> Option<u64> {
    server
        .info("server", "uptime_in_seconds")
        .and_then(|n| n.parse().ok())
}

/// Waits until every server of `servers` has been up `seconds`: a member
/// restarted more recently than a ttl does not vote.
pub fn until_voting(servers: &[Server], seconds: u64) {
    let voting = eventually(PATIENCE, || {
        servers
            .iter()
            .all(|s| uptime(s).is_some_and(|up| up >= seconds))
    });
    assert!(voting, "the servers did not come up");
}
