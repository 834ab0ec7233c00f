//! `SentinelSet`: a primary, two replicas and three sentinels, all `Server`s, that a test fails over.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::topology::{on_port, on_port_mut, wait_until};
use super::{free_ports, Certificates, Server};

/// The Sentinel service name the tests use.
pub const SERVICE: &str = "lockrun-test";

/// Sentinel's failure detection. Shorter is faster, but at 500 ms the
/// sentinels were seen failing over a second time right after promoting.
const DOWN_AFTER_MS: u32 = 1500;

/// Passwords for a Sentinel set: the data servers' and the sentinels' own.
#[derive(Clone, Copy, Default)]
pub struct Passwords<'a> {
    pub redis: Option<&'a str>,
    pub sentinel: Option<&'a str>,
}

pub struct SentinelSet {
    /// Sentinels first, so that they are stopped before the servers and do
    /// not start a failover of a set being torn down.
    pub sentinels: Vec<Server>,
    /// The data servers; the first was the primary at the start.
    pub servers: Vec<Server>,
    /// Whether every server and sentinel speaks only TLS.
    tls: bool,
    pub started_in: Duration,
}

impl SentinelSet {
    pub fn start() -> Self {
        Self::start_with(Passwords::default())
    }

    pub fn start_with(passwords: Passwords<'_>) -> Self {
        Self::start_as(passwords, None, "")
    }

    /// A set whose data servers have `config` lines added, e.g.
    /// `rename-command WAIT ""`.
    pub fn start_configured(config: &str) -> Self {
        Self::start_as(Passwords::default(), None, config)
    }

    /// A set whose servers and sentinels speak only TLS, with `certs`.
    pub fn start_tls(certs: &Certificates) -> Self {
        Self::start_as(Passwords::default(), Some(certs), "")
    }

    fn start_as(passwords: Passwords<'_>, tls: Option<&Certificates>, extra: &str) -> Self {
        let began = Instant::now();
        let ports = free_ports(6);
        let primary = ports[0];
        let auth = passwords.redis.map_or_else(String::new, |pass| {
            format!("requirepass {pass}\nmasterauth {pass}\n")
        }) + extra;
        let start = |port: u16, sentinel: bool, config: &str| match (tls, sentinel) {
            (Some(certs), _) => Server::tls(port, sentinel, config, certs),
            (None, false) => Server::node(port, config),
            (None, true) => Server::sentinel(port, config),
        };
        let mut servers = vec![start(primary, false, &auth)];
        for &port in &ports[1..3] {
            servers.push(start(
                port,
                false,
                &format!("{auth}replicaof 127.0.0.1 {primary}\n"),
            ));
        }
        // Sentinels learn of replicas from the primary's INFO, which they
        // read on connecting and then only every 10 s: start them once the
        // replicas are linked, so that the first reading finds both.
        for replica in &servers[1..] {
            wait_until("replica linked", || {
                replica.info("replication", "master_link_status").as_deref() == Some("up")
            });
        }
        let config = sentinel_config(primary, passwords);
        let sentinels = ports[3..]
            .iter()
            .map(|&port| start(port, true, &config))
            .collect();
        let mut set = SentinelSet {
            sentinels,
            servers,
            tls: tls.is_some(),
            started_in: Duration::ZERO,
        };
        // A failover needs every sentinel to know both replicas and both
        // other sentinels.
        for sentinel in &set.sentinels {
            wait_until("sentinel ready", || {
                sentinel_master(sentinel).is_some_and(|master| {
                    master.get("num-slaves").map(String::as_str) == Some("2")
                        && master.get("num-other-sentinels").map(String::as_str) == Some("2")
                })
            });
        }
        set.started_in = began.elapsed();
        set
    }

    /// `redis+sentinel://…/SERVICE` (`rediss+` with TLS) naming every
    /// sentinel, first to last.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(Server::addr).collect();
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}+sentinel://{}/{SERVICE}", hosts.join(","))
    }

    /// The port of the primary, as the first answering sentinel names it.
    pub fn named_primary(&self) -> Option<u16> {
        self.sentinels
            .iter()
            .filter(|s| s.is_running())
            .find_map(|s| {
                let (_, port): (String, u16) = s
                    .query(
                        redis::cmd("SENTINEL")
                            .arg("GET-MASTER-ADDR-BY-NAME")
                            .arg(SERVICE),
                    )
                    .ok()?;
                Some(port)
            })
    }

    pub fn server(&self, port: u16) -> &Server {
        on_port(&self.servers, port)
    }

    /// The current primary: named by the sentinels and a primary by its own
    /// account.
    pub fn primary(&self) -> &Server {
        let mut port = 0;
        wait_until("a primary", || {
            port = self.named_primary().unwrap_or(0);
            port != 0 && self.server(port).is_running() && is_primary(self.server(port))
        });
        self.server(port)
    }

    /// Kills the current primary and waits until the sentinels named
    /// another one that knows it is the primary, and every sentinel agrees.
    /// Returns how long the failover took.
    pub fn kill_primary_and_fail_over(&mut self) -> Duration {
        let began = Instant::now();
        let old = self.kill_primary();
        self.until_failed_over(old);
        began.elapsed()
    }

    /// Kills the current primary and returns its port at once, before the
    /// sentinels notice.
    pub fn kill_primary(&mut self) -> u16 {
        let old = self.primary().port();
        on_port_mut(&mut self.servers, old).kill();
        old
    }

    /// Waits until the sentinels named a primary other than `old` that
    /// knows it is the primary, and every sentinel agrees.
    pub fn until_failed_over(&self, old: u16) {
        wait_until("failover", || {
            self.named_primary().is_some_and(|port| {
                port != old
                    && is_primary(self.server(port))
                    && self.sentinels.iter().filter(|s| s.is_running()).all(|s| {
                        sentinel_master(s).and_then(|m| m.get("port").cloned())
                            == Some(port.to_string())
                    })
            })
        });
    }

    /// Asks a sentinel for a failover while the primary stays up, and waits
    /// until the sentinels name another primary that knows it. The old one
    /// goes on as a primary for a while (Sentinel demotes it about 10 s
    /// later). Returns the new primary's port.
    pub fn manual_failover(&self) -> u16 {
        let old = self.primary().port();
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.is_running())
            .expect("a sentinel");
        let _: String = sentinel
            .query(redis::cmd("SENTINEL").arg("FAILOVER").arg(SERVICE))
            .expect("SENTINEL FAILOVER");
        let mut new = 0;
        wait_until("manual failover", || {
            new = self.named_primary().unwrap_or(old);
            new != old && is_primary(self.server(new))
        });
        new
    }

    /// Waits until every live replica of the primary is online and has all
    /// of the primary's writes.
    pub fn wait_replicas_in_sync(&self) {
        let primary = self.primary();
        let live = self
            .servers
            .iter()
            .filter(|n| n.is_running() && n.port() != primary.port())
            .count();
        wait_until("replicas in sync", || {
            let Some(offset) = primary.info("replication", "master_repl_offset") else {
                return false;
            };
            let online = (0..live)
                .filter_map(|i| primary.info("replication", &format!("slave{i}")))
                .filter(|line| line.contains("state=online"))
                .filter(|line| line.contains(&format!("offset={offset},")))
                .count();
            online == live
        });
    }
}

pub fn is_primary(server: &Server) -> bool {
    server.info("replication", "role").as_deref() == Some("master")
}

/// The sentinels' configuration: the primary to watch, and passwords.
fn sentinel_config(primary: u16, passwords: Passwords<'_>) -> String {
    let mut config = format!(
        "sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n\
         sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n\
         sentinel failover-timeout {SERVICE} 10000\n\
         sentinel parallel-syncs {SERVICE} 2\n"
    );
    if let Some(pass) = passwords.redis {
        config += &format!("sentinel auth-pass {SERVICE} {pass}\n");
    }
    if let Some(pass) = passwords.sentinel {
        config += &format!("requirepass {pass}\nsentinel sentinel-pass {pass}\n");
    }
    config
}

/// `SENTINEL MASTER SERVICE` as a map, if the sentinel answers.
fn sentinel_master(sentinel: &Server) -> Option<HashMap<String, String>> {
    let flat: Vec<String> = sentinel
        .query(redis::cmd("SENTINEL").arg("MASTER").arg(SERVICE))
        .ok()?;
    Some(
        flat.chunks_exact(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect(),
    )
}
