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
        let start = |port: u16, config: &str| match tls {
            Some(certs) => Server::tls(port, config, certs),
            None => Server::node(port, config),
        };
        let mut servers = vec![start(primary, &auth)];
        for &port in &ports[1..3] {
            servers.push(start(
                port,
                &format!("{auth}replicaof 127.0.0.1 {primary}\n"),
            ));
        }
        for replica in &servers[1..] {
            wait_until("replica linked", || {
                replica.info("replication", "master_link_status").as_deref() == Some("up")
            });
        }
        // What `--replica-acks all` counts: the replicas the primary has
        // online.
        wait_until("replicas online", || {
            online_replica_lines(&servers[0], 2).count() == 2
        });
        let config = sentinel_config(primary, passwords);
        let configs: Vec<(u16, String)> = ports[3..]
            .iter()
            .map(|&port| {
                let known = known_topology(port, &ports[1..3], &ports[3..]);
                (port, format!("{config}{known}"))
            })
            .collect();
        let sentinels = Server::sentinels_together(&configs, tls);
        let mut set = SentinelSet {
            sentinels,
            servers,
            tls: tls.is_some(),
            started_in: Duration::ZERO,
        };
        // lockrun asks any sentinel for the primary, and its replicas for
        // acknowledgements: every sentinel knows all three, has reached
        // them, and knows the other two sentinels (`until_linked` waits
        // for it to reach them too, which only a failover needs).
        for sentinel in &set.sentinels {
            wait_until("sentinel ready", || {
                let counted = sentinel_master(sentinel).is_some_and(|master| {
                    master.get("num-slaves").map(String::as_str) == Some("2")
                        && master.get("num-other-sentinels").map(String::as_str) == Some("2")
                        && field_is(&master, "flags", "master")
                });
                counted
                    && sentinel_list(sentinel, "REPLICAS").is_some_and(|replicas| {
                        replicas.iter().all(|replica| {
                            field_is(replica, "flags", "slave")
                                && field_is(replica, "master-link-status", "ok")
                        })
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

    /// Waits until every live sentinel has reached every other one, which
    /// their vote for a failover needs. A sentinel that tried to reach
    /// another before it listened tries again only a second later, so the
    /// set may start without it. (After a failover a sentinel keeps
    /// flagging the others `master_down` for a few seconds: that is their
    /// last vote, not their link.)
    fn until_linked(&self) {
        let live: Vec<&Server> = self.sentinels.iter().filter(|s| s.is_running()).collect();
        let is_live = |other: &HashMap<String, String>| {
            live.iter()
                .any(|s| other.get("port") == Some(&s.port().to_string()))
        };
        for sentinel in &live {
            wait_until("sentinels linked", || {
                sentinel_list(sentinel, "SENTINELS")
                    .is_some_and(|others| others.iter().filter(|other| is_live(other)).all(reached))
            });
        }
    }

    /// Kills the current primary and returns its port at once, before the
    /// sentinels notice.
    pub fn kill_primary(&mut self) -> u16 {
        self.until_linked();
        let old = self.primary().port();
        on_port_mut(&mut self.servers, old).kill();
        old
    }

    /// Pauses the current primary (SIGSTOP: its sockets open, nothing
    /// answering) and returns its port at once, before the sentinels notice.
    pub fn pause_primary(&mut self) -> u16 {
        self.until_linked();
        let old = self.primary().port();
        self.server(old).pause();
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
        self.until_linked();
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
            let online = online_replica_lines(primary, live)
                .filter(|line| line.contains(&format!("offset={offset},")))
                .count();
            online == live
        });
    }
}

/// The `INFO replication` lines of the first `count` replicas of `primary`
/// that it counts as online, as lockrun's scripts count them.
fn online_replica_lines(primary: &Server, count: usize) -> impl Iterator<Item = String> + '_ {
    (0..count)
        .filter_map(|i| primary.info("replication", &format!("slave{i}")))
        .filter(|line| line.contains("state=online"))
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

/// What a sentinel of the set is told in its file, as Sentinel itself
/// writes there what it learned: its own id, both replicas and the other
/// sentinels. Left to find them, it would learn of the other sentinels
/// only from their hello messages, sent every 2 s. Nothing here starts a
/// failover sooner: the set counts as started only once each sentinel
/// reached every other instance itself.
fn known_topology(me: u16, replicas: &[u16], sentinels: &[u16]) -> String {
    // Any 40 characters; the port makes them unique within the set.
    let id = |port: u16| format!("{port:040x}");
    let mut known = format!("sentinel myid {}\n", id(me));
    for replica in replicas {
        known += &format!("sentinel known-replica {SERVICE} 127.0.0.1 {replica}\n");
    }
    for &other in sentinels.iter().filter(|&&port| port != me) {
        known += &format!(
            "sentinel known-sentinel {SERVICE} 127.0.0.1 {other} {}\n",
            id(other)
        );
    }
    known
}

/// `SENTINEL MASTER SERVICE` as a map, if the sentinel answers.
fn sentinel_master(sentinel: &Server) -> Option<HashMap<String, String>> {
    let flat: Vec<String> = sentinel
        .query(redis::cmd("SENTINEL").arg("MASTER").arg(SERVICE))
        .ok()?;
    Some(pairs(&flat))
}

/// `SENTINEL REPLICAS SERVICE` or `SENTINEL SENTINELS SERVICE`, one map
/// per instance, if the sentinel answers.
fn sentinel_list(sentinel: &Server, which: &str) -> Option<Vec<HashMap<String, String>>> {
    let lists: Vec<Vec<String>> = sentinel
        .query(redis::cmd("SENTINEL").arg(which).arg(SERVICE))
        .ok()?;
    Some(lists.iter().map(|flat| pairs(flat)).collect())
}

fn pairs(flat: &[String]) -> HashMap<String, String> {
    flat.chunks_exact(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect()
}

/// Whether a sentinel's account of another instance says it answers: not
/// down, and not disconnected.
fn reached(instance: &HashMap<String, String>) -> bool {
    instance.get("flags").is_some_and(|flags| {
        flags
            .split(',')
            .all(|flag| !matches!(flag, "disconnected" | "s_down" | "o_down"))
    })
}

/// Whether `field` of a sentinel's account of an instance is `value`: for
/// `flags`, only that flag, so neither down nor disconnected.
fn field_is(instance: &HashMap<String, String>, field: &str, value: &str) -> bool {
    instance.get(field).map(String::as_str) == Some(value)
}
