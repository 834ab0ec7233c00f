//! `Cluster`: a Redis Cluster of three primaries with one replica each, all `Server`s, that a test fails over.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wait_timeout::ChildExt;

use super::sentinel::is_primary;
use super::topology::{on_port, on_port_mut, wait_until};
use super::{free_ports, redis_cli, Certificates, Server};

/// Failure detection: a primary is failed over this long after it stops
/// answering.
const NODE_TIMEOUT_MS: u32 = 1500;

pub struct Cluster {
    pub nodes: Vec<Server>,
    /// Whether every node speaks only TLS.
    tls: bool,
    pub started_in: Duration,
}

/// A primary, its replicas and its slots.
#[derive(Debug, Clone)]
pub struct Shard {
    pub primary: u16,
    pub replicas: Vec<u16>,
    pub slots: Vec<std::ops::RangeInclusive<u16>>,
}

impl Cluster {
    pub fn start() -> Self {
        Self::start_as(None, "")
    }

    /// A cluster whose nodes have `config` lines added, e.g.
    /// `rename-command WAIT ""`.
    pub fn start_configured(config: &str) -> Self {
        Self::start_as(None, config)
    }

    /// A cluster whose nodes speak only TLS, to clients and on the cluster
    /// bus, with `certs`. Its nodes then announce their TLS ports.
    pub fn start_tls(certs: &Certificates) -> Self {
        Self::start_as(Some(certs), "")
    }

    fn start_as(tls: Option<&Certificates>, extra: &str) -> Self {
        let began = Instant::now();
        let config = format!(
            "cluster-enabled yes\ncluster-config-file nodes.conf\n\
             cluster-node-timeout {NODE_TIMEOUT_MS}\n{extra}"
        );
        let nodes: Vec<Server> = free_ports(6)
            .into_iter()
            .map(|port| match tls {
                Some(certs) => Server::tls(port, &format!("{config}tls-cluster yes\n"), certs),
                None => Server::node(port, &config),
            })
            .collect();
        for node in &nodes {
            wait_until("cluster node up", || node.answers());
        }
        let mut create = Command::new(redis_cli())
            .args(tls.map(Certificates::cli_args).unwrap_or_default())
            .args(["--cluster", "create"])
            .args(nodes.iter().map(Server::addr))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli must be installed (package redis-tools)");
        // On a loaded machine a node can drop a handshake it was sent
        // (cluster-node-timeout), and then ignores the peers that already
        // know it: redis-cli would wait forever for the cluster to join. A
        // MEET from every node to every other is harmless once they know
        // each other and completes a handshake that was dropped.
        let deadline = Instant::now() + Duration::from_secs(90);
        while create
            .wait_timeout(Duration::from_secs(5))
            .expect("wait for redis-cli")
            .is_none()
        {
            if Instant::now() > deadline {
                let _ = create.kill();
                panic!("redis-cli --cluster create did not finish within 90s");
            }
            for from in &nodes {
                for to in nodes.iter().filter(|to| to.port() != from.port()) {
                    let _: redis::RedisResult<redis::Value> = from.query(
                        redis::cmd("CLUSTER")
                            .arg("MEET")
                            .arg("127.0.0.1")
                            .arg(to.port()),
                    );
                }
            }
        }
        let output = create.wait_with_output().expect("redis-cli's output");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = Cluster {
            nodes,
            tls: tls.is_some(),
            started_in: Duration::ZERO,
        };
        cluster.wait_healthy();
        Cluster {
            started_in: began.elapsed(),
            ..cluster
        }
    }

    /// Waits until every node sees the whole cluster: all slots served,
    /// every replica linked, and who replicates whom.
    fn wait_healthy(&self) {
        for node in &self.nodes {
            wait_until("cluster state ok", || {
                node.info("cluster", "cluster_enabled").is_some()
                    && cluster_info(node, "cluster_state").as_deref() == Some("ok")
                    && cluster_info(node, "cluster_known_nodes").as_deref() == Some("6")
            });
        }
        for node in &self.nodes {
            wait_until("cluster replica linked", || {
                is_primary(node)
                    || node.info("replication", "master_link_status").as_deref() == Some("up")
            });
        }
        // Gossip tells the other nodes who replicates whom a little later;
        // a failover test needs every node to know.
        for node in &self.nodes {
            wait_until("cluster topology known", || {
                let shards = shards_seen_by(node);
                shards.len() == 3 && shards.iter().all(|shard| shard.replicas.len() == 1)
            });
        }
    }

    pub fn node(&self, port: u16) -> &Server {
        on_port(&self.nodes, port)
    }

    pub fn node_mut(&mut self, port: u16) -> &mut Server {
        on_port_mut(&mut self.nodes, port)
    }

    /// `redis+cluster://` (`rediss+` with TLS) naming the nodes on `ports`.
    pub fn url_via(&self, ports: &[u16]) -> String {
        let hosts: Vec<String> = ports.iter().map(|&p| self.node(p).addr()).collect();
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}+cluster://{}", hosts.join(","))
    }

    /// Ports of the primaries that serve slots.
    pub fn primaries(&self) -> Vec<u16> {
        self.shards()
            .into_iter()
            .map(|shard| shard.primary)
            .collect()
    }

    /// Every shard that serves slots, as the first live node that answers
    /// sees them.
    pub fn shards(&self) -> Vec<Shard> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(shards_seen_by)
            .find(|shards| !shards.is_empty())
            .unwrap_or_default()
    }

    pub fn slot_of(&self, key: &str) -> u16 {
        let live = self
            .nodes
            .iter()
            .find(|n| n.is_running())
            .expect("a live node");
        live.query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
            .expect("CLUSTER KEYSLOT")
    }

    /// The port of the primary owning `key`'s slot, and of its replicas.
    pub fn owner(&self, key: &str) -> (u16, Vec<u16>) {
        let slot = self.slot_of(key);
        self.shards()
            .into_iter()
            .find(|shard| shard.slots.iter().any(|r| r.contains(&slot)))
            .map(|shard| (shard.primary, shard.replicas))
            .expect("every slot is served")
    }

    /// The port of a primary that does not own `key`'s slot.
    pub fn other_primary(&self, key: &str) -> u16 {
        let (owner, _) = self.owner(key);
        self.primaries()
            .into_iter()
            .find(|&p| p != owner)
            .expect("another primary")
    }

    /// Kills the primary owning `key` and waits until its replica took over
    /// and the cluster is healthy again. Returns the new owner's port and
    /// how long the failover took.
    pub fn kill_owner_and_fail_over(&mut self, key: &str) -> (u16, Duration) {
        let began = Instant::now();
        let (old, replicas) = self.kill_owner(key);
        let new = self.until_failed_over(key, old, &replicas);
        (new, began.elapsed())
    }

    /// Kills the primary owning `key` and returns at once its port and its
    /// replicas'.
    pub fn kill_owner(&mut self, key: &str) -> (u16, Vec<u16>) {
        let (old, replicas) = self.owner(key);
        self.node_mut(old).kill();
        (old, replicas)
    }

    /// Waits until one of `replicas` took `key` over from `old` and the
    /// cluster is healthy again; returns its port.
    pub fn until_failed_over(&self, key: &str, old: u16, replicas: &[u16]) -> u16 {
        let mut new = 0;
        wait_until("cluster failover", || {
            new = self.owner(key).0;
            new != old
                && replicas.contains(&new)
                && is_primary(self.node(new))
                && self
                    .nodes
                    .iter()
                    .filter(|n| n.is_running())
                    .all(|n| cluster_info(n, "cluster_state").as_deref() == Some("ok"))
        });
        new
    }
}

impl Cluster {
    /// The port of the primary serving `slot` as the node on `port` sees
    /// it; `None` when that node does not answer. For a test that paused
    /// a node, which every node may be asked about but not asked.
    pub fn owner_seen_by(&self, port: u16, slot: u16) -> Option<u16> {
        shards_seen_by(self.node(port))
            .into_iter()
            .find(|shard| shard.slots.iter().any(|range| range.contains(&slot)))
            .map(|shard| shard.primary)
    }
}

/// The shards that serve slots, from `CLUSTER NODES` on `node` (which,
/// unlike `CLUSTER SLOTS`, lists a replica before it reported its
/// replication offset); empty if it does not answer. Each line reads
/// `<id> <ip:port@cport> <flags> <primary id or -> … <link> <slots…>`.
pub(super) fn shards_seen_by(node: &Server) -> Vec<Shard> {
    let Ok(text) = node.query::<String>(redis::cmd("CLUSTER").arg("NODES")) else {
        return Vec::new();
    };
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|line| line.split_whitespace().collect())
        .filter(|fields: &Vec<&str>| fields.len() >= 8)
        .collect();
    let port = |fields: &[&str]| -> Option<u16> {
        let addr = fields[1].split(['@', ',']).next()?;
        addr.rsplit_once(':')?.1.parse().ok()
    };
    let flagged = |fields: &[&str], flag: &str| fields[2].split(',').any(|f| f == flag);
    lines
        .iter()
        .filter(|fields| flagged(fields, "master") && fields.len() > 8)
        .filter_map(|fields| {
            let slots = fields[8..]
                .iter()
                .filter(|slot| !slot.starts_with('['))
                .filter_map(|slot| {
                    let (start, end) = slot.split_once('-').unwrap_or((slot, slot));
                    Some(start.parse().ok()?..=end.parse().ok()?)
                })
                .collect();
            let replicas = lines
                .iter()
                .filter(|other| other[3] == fields[0] && !flagged(other, "fail"))
                .filter_map(|other| port(other))
                .collect();
            Some(Shard {
                primary: port(fields)?,
                replicas,
                slots,
            })
        })
        .collect()
}

/// A field of `CLUSTER INFO`, if the node answers.
pub fn cluster_info(node: &Server, field: &str) -> Option<String> {
    let text: String = node.query(redis::cmd("CLUSTER").arg("INFO")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .map(|value| value.trim().to_string())
}

/// The node id of `node` (`CLUSTER MYID`).
pub fn node_id(node: &Server) -> String {
    node.query(redis::cmd("CLUSTER").arg("MYID"))
        .expect("CLUSTER MYID")
}

/// `cmd` on `node` as a client that followed an ASK there: the target of a
/// migrating slot answers for it, the source only for a key it still has
/// (`None` for an ASK or MOVED elsewhere).
pub fn ask(node: &Server, cmd: &redis::Cmd) -> Option<i64> {
    let mut conn = node.client();
    redis::cmd("ASKING").query::<()>(&mut conn).ok()?;
    cmd.query(&mut conn).ok()
}

/// Which of `keys` `node` has, as a client that follows an ASK sees them.
pub fn keys_held_by(node: &Server, keys: &[&str]) -> Vec<String> {
    keys.iter()
        .filter(|key| ask(node, redis::cmd("EXISTS").arg(**key)) == Some(1))
        .map(|key| (*key).to_owned())
        .collect()
}
