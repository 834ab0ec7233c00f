//! Replicated Redis for the failover tests: a Sentinel set (one primary, two
//! replicas, three sentinels) and a Redis Cluster (three primaries with one
//! replica each), started on free loopback ports in a temporary directory and
//! killed when dropped. Readiness and failovers are awaited by polling with
//! deadlines, never by fixed sleeps.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::harness::*;

/// How long a topology may take to start or to fail over. Measured here:
/// about 2.5 s to start and 3 s to fail over; the rest is for a loaded
/// machine.
pub const TOPOLOGY_PATIENCE: Duration = Duration::from_secs(40);

/// The Sentinel service name the tests use.
pub const SERVICE: &str = "lockrun-test";

/// Sentinel's failure detection. Shorter is faster, but at 500 ms the
/// sentinels were seen failing over a second time right after promoting.
const DOWN_AFTER_MS: u32 = 1500;

/// Cluster failure detection: a primary is failed over this long after it
/// stops answering.
const CLUSTER_NODE_TIMEOUT_MS: u32 = 1500;

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
            ports.push(port);
        }
    }
    ports
}

/// One redis-server (or sentinel) process of a topology.
pub struct Node {
    pub port: u16,
    /// What the harness's own connections authenticate with.
    password: Option<String>,
    dir: PathBuf,
    conf: PathBuf,
    sentinel: bool,
    process: Option<Child>,
}

impl Node {
    /// Writes `config` to a file of its own (a sentinel rewrites its file)
    /// and starts the server on `port`.
    fn start(
        parent: &Path,
        port: u16,
        config: &str,
        sentinel: bool,
        password: Option<&str>,
    ) -> Node {
        let dir = parent.join(port.to_string());
        std::fs::create_dir_all(&dir).expect("node directory");
        let conf = dir.join("redis.conf");
        let config = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\nlogfile {}\ndaemonize no\n{config}",
            dir.display(),
            dir.join("redis.log").display(),
        );
        std::fs::write(&conf, config).expect("write config");
        let mut node = Node {
            port,
            password: password.map(String::from),
            dir,
            conf,
            sentinel,
            process: None,
        };
        node.launch();
        node
    }

    fn launch(&mut self) {
        let mut command = Command::new("redis-server");
        command.arg(&self.conf);
        if self.sentinel {
            command.arg("--sentinel");
        }
        let process = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (.ci/run installs it)");
        self.process = Some(process);
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.process.as_ref().expect("running").id() as i32)
    }

    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// A connection with short limits, so that a paused or dead node fails a
    /// poll instead of hanging it.
    pub fn client(&self) -> redis::RedisResult<redis::Connection> {
        let url = match &self.password {
            Some(password) => format!("redis://:{password}@{}", self.addr()),
            None => self.url(),
        };
        let client = redis::Client::open(url)?;
        let conn = client.get_connection_with_timeout(Duration::from_millis(500))?;
        conn.set_read_timeout(Some(Duration::from_secs(2)))?;
        conn.set_write_timeout(Some(Duration::from_secs(2)))?;
        Ok(conn)
    }

    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        cmd.query(&mut self.client()?)
    }

    /// A field of `INFO section`, if the node answers and has it.
    pub fn info(&self, section: &str, field: &str) -> Option<String> {
        let text: String = self.query(redis::cmd("INFO").arg(section)).ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{field}:")))
            .map(|value| value.trim().to_string())
    }

    pub fn answers(&self) -> bool {
        self.query::<String>(&redis::cmd("PING")).is_ok()
    }

    /// Kills the node at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = kill(Pid::from_raw(process.id() as i32), Signal::SIGCONT);
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    pub fn pause(&self) {
        kill(self.pid(), Signal::SIGSTOP).expect("SIGSTOP redis");
    }

    pub fn resume(&self) {
        kill(self.pid(), Signal::SIGCONT).expect("SIGCONT redis");
    }

    /// Every key on this node.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.query(redis::cmd("KEYS").arg("*")).expect("KEYS");
        keys.sort();
        keys
    }

    pub fn get(&self, key: &str) -> Option<String> {
        self.query(redis::cmd("GET").arg(key)).expect("GET")
    }

    pub fn pttl(&self, key: &str) -> i64 {
        self.query(redis::cmd("PTTL").arg(key)).expect("PTTL")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Configuration every data node shares: no persistence, and a full sync
/// that starts at once instead of waiting for more replicas.
const DATA_NODE: &str = "save \"\"\nappendonly no\nrepl-diskless-sync yes\n\
                         repl-diskless-sync-delay 0\n";

fn wait_until(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    assert!(
        eventually(limit, &mut condition),
        "{what} (waited {limit:?})"
    );
}

/// Passwords for a Sentinel set: the data nodes' and the sentinels' own.
#[derive(Clone, Copy, Default)]
pub struct Passwords<'a> {
    pub redis: Option<&'a str>,
    pub sentinel: Option<&'a str>,
}

/// One primary, two replicas and three sentinels.
pub struct SentinelSet {
    /// Sentinels first, so that they are stopped before the servers and do
    /// not start a failover of a set being torn down.
    pub sentinels: Vec<Node>,
    /// The data nodes; the first was the primary at the start.
    pub servers: Vec<Node>,
    pub started_in: Duration,
    dir: TempDir,
}

impl SentinelSet {
    pub fn start() -> Self {
        Self::start_with(Passwords::default())
    }

    pub fn start_with(passwords: Passwords<'_>) -> Self {
        let began = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("lockrun-sentinel-")
            .tempdir()
            .expect("temp dir");
        let ports = free_ports(6);
        let primary = ports[0];
        let data_node = match passwords.redis {
            Some(pass) => format!("{DATA_NODE}requirepass {pass}\nmasterauth {pass}\n"),
            None => DATA_NODE.to_string(),
        };
        let mut servers = vec![Node::start(
            dir.path(),
            primary,
            &data_node,
            false,
            passwords.redis,
        )];
        for &port in &ports[1..3] {
            let config = format!("{data_node}replicaof 127.0.0.1 {primary}\n");
            servers.push(Node::start(
                dir.path(),
                port,
                &config,
                false,
                passwords.redis,
            ));
        }
        // Sentinels learn of replicas from the primary's INFO, which they
        // read on connecting and then only every 10 s: start them once the
        // replicas are linked, so that the first reading finds both.
        for replica in &servers[1..] {
            wait_until("replica linked", TOPOLOGY_PATIENCE, || {
                replica.info("replication", "master_link_status").as_deref() == Some("up")
            });
        }
        let mut sentinel_config = format!(
            "sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {SERVICE} 10000\n\
             sentinel parallel-syncs {SERVICE} 2\n"
        );
        if let Some(pass) = passwords.redis {
            sentinel_config += &format!("sentinel auth-pass {SERVICE} {pass}\n");
        }
        if let Some(pass) = passwords.sentinel {
            sentinel_config += &format!("requirepass {pass}\nsentinel sentinel-pass {pass}\n");
        }
        let sentinels = ports[3..]
            .iter()
            .map(|&port| Node::start(dir.path(), port, &sentinel_config, true, passwords.sentinel))
            .collect();
        let set = SentinelSet {
            sentinels,
            servers,
            started_in: Duration::ZERO,
            dir,
        };
        set.wait_ready();
        SentinelSet {
            started_in: began.elapsed(),
            ..set
        }
    }

    /// Until every sentinel knows both replicas and both other sentinels
    /// (which a failover needs).
    fn wait_ready(&self) {
        for sentinel in &self.sentinels {
            wait_until("sentinel ready", TOPOLOGY_PATIENCE, || {
                let Some(master) = sentinel_master(sentinel) else {
                    return false;
                };
                master.get("num-slaves").map(String::as_str) == Some("2")
                    && master.get("num-other-sentinels").map(String::as_str) == Some("2")
            });
        }
    }

    /// `redis+sentinel://…/SERVICE` naming every sentinel, first to last.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(Node::addr).collect();
        format!("redis+sentinel://{}/{SERVICE}", hosts.join(","))
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

    pub fn server(&self, port: u16) -> &Node {
        self.servers
            .iter()
            .find(|n| n.port == port)
            .expect("a server of this set")
    }

    pub fn server_mut(&mut self, port: u16) -> &mut Node {
        self.servers
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a server of this set")
    }

    /// The current primary: named by the sentinels and a primary by its own
    /// account.
    pub fn primary(&self) -> &Node {
        let mut port = 0;
        wait_until("a primary", TOPOLOGY_PATIENCE, || {
            port = self.named_primary().unwrap_or(0);
            port != 0
                && self.server(port).is_running()
                && self.server(port).info("replication", "role").as_deref() == Some("master")
        });
        self.server(port)
    }

    /// Kills the current primary and waits until the sentinels named
    /// another one that knows it is the primary, and every sentinel agrees.
    /// Returns how long the failover took.
    pub fn kill_primary_and_fail_over(&mut self) -> Duration {
        let old = self.primary().port;
        let began = Instant::now();
        self.server_mut(old).kill();
        wait_until("failover", TOPOLOGY_PATIENCE, || {
            let new = self.named_primary();
            new.is_some_and(|port| {
                port != old
                    && self.server(port).info("replication", "role").as_deref() == Some("master")
                    && self.sentinels.iter().filter(|s| s.is_running()).all(|s| {
                        sentinel_master(s)
                            .and_then(|m| m.get("port").cloned())
                            .as_deref()
                            == Some(port.to_string().as_str())
                    })
            })
        });
        began.elapsed()
    }

    /// Asks a sentinel for a failover while the primary stays up, and waits
    /// until the sentinels name another primary that knows it. The old one
    /// goes on as a primary for a while (Sentinel demotes it about 10 s
    /// later). Returns the new primary's port.
    pub fn manual_failover(&self) -> u16 {
        let old = self.primary().port;
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.is_running())
            .expect("a sentinel");
        let _: String = sentinel
            .query(redis::cmd("SENTINEL").arg("FAILOVER").arg(SERVICE))
            .expect("SENTINEL FAILOVER");
        let mut new = 0;
        wait_until("manual failover", TOPOLOGY_PATIENCE, || {
            new = self.named_primary().unwrap_or(old);
            new != old && self.server(new).info("replication", "role").as_deref() == Some("master")
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
            .filter(|n| n.is_running() && n.port != primary.port)
            .count();
        wait_until("replicas in sync", TOPOLOGY_PATIENCE, || {
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

/// `SENTINEL MASTER SERVICE` as a map, if the sentinel answers.
fn sentinel_master(sentinel: &Node) -> Option<HashMap<String, String>> {
    let flat: Vec<String> = sentinel
        .query(redis::cmd("SENTINEL").arg("MASTER").arg(SERVICE))
        .ok()?;
    Some(
        flat.chunks_exact(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect(),
    )
}

/// A Redis Cluster: three primaries, each with one replica.
pub struct Cluster {
    pub nodes: Vec<Node>,
    pub started_in: Duration,
    dir: TempDir,
}

impl Cluster {
    pub fn start() -> Self {
        let began = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("lockrun-cluster-")
            .tempdir()
            .expect("temp dir");
        let config = format!(
            "{DATA_NODE}cluster-enabled yes\ncluster-config-file nodes.conf\n\
             cluster-node-timeout {CLUSTER_NODE_TIMEOUT_MS}\n"
        );
        let nodes: Vec<Node> = free_ports(6)
            .into_iter()
            .map(|port| Node::start(dir.path(), port, &config, false, None))
            .collect();
        for node in &nodes {
            wait_until("cluster node up", TOPOLOGY_PATIENCE, || node.answers());
        }
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(nodes.iter().map(Node::addr))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli must be installed (package redis-tools)");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = Cluster {
            nodes,
            started_in: Duration::ZERO,
            dir,
        };
        for node in &cluster.nodes {
            wait_until("cluster state ok", TOPOLOGY_PATIENCE, || {
                node.info("cluster", "cluster_enabled").is_some()
                    && cluster_info(node, "cluster_state").as_deref() == Some("ok")
                    && cluster_info(node, "cluster_known_nodes").as_deref() == Some("6")
            });
        }
        for node in &cluster.nodes {
            wait_until("cluster replica linked", TOPOLOGY_PATIENCE, || {
                node.info("replication", "role").as_deref() == Some("master")
                    || node.info("replication", "master_link_status").as_deref() == Some("up")
            });
        }
        // Gossip tells the other nodes who replicates whom a little later;
        // a failover test needs every node to know.
        for node in &cluster.nodes {
            wait_until("cluster topology known", TOPOLOGY_PATIENCE, || {
                let shards = shards_seen_by(node);
                shards.len() == 3 && shards.iter().all(|shard| shard.replicas.len() == 1)
            });
        }
        Cluster {
            started_in: began.elapsed(),
            ..cluster
        }
    }

    pub fn node(&self, port: u16) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
    }

    pub fn node_mut(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
    }

    /// `redis+cluster://` naming `nodes`.
    pub fn url_via(&self, nodes: &[u16]) -> String {
        let hosts: Vec<String> = nodes.iter().map(|&p| self.node(p).addr()).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Ports of the primaries that serve slots, as the first live node sees
    /// them.
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

    /// Kills the primary owning `key` and waits until its replica took over
    /// and the cluster is healthy again. Returns the new owner's port and
    /// how long the failover took.
    pub fn kill_owner_and_fail_over(&mut self, key: &str) -> (u16, Duration) {
        let (old, replicas) = self.owner(key);
        let began = Instant::now();
        self.node_mut(old).kill();
        let mut new = 0;
        wait_until("cluster failover", TOPOLOGY_PATIENCE, || {
            let owner = self.owner(key).0;
            new = owner;
            owner != old
                && replicas.contains(&owner)
                && self.node(owner).info("replication", "role").as_deref() == Some("master")
                && self
                    .nodes
                    .iter()
                    .filter(|n| n.is_running())
                    .all(|n| cluster_info(n, "cluster_state").as_deref() == Some("ok"))
        });
        (new, began.elapsed())
    }
}

/// A primary, its replicas and its slots.
#[derive(Debug, Clone)]
pub struct Shard {
    pub primary: u16,
    pub replicas: Vec<u16>,
    pub slots: Vec<std::ops::RangeInclusive<u16>>,
}

/// The shards that serve slots, from `CLUSTER NODES` on `node` (which,
/// unlike `CLUSTER SLOTS`, lists a replica before it reported its
/// replication offset); empty if it does not answer. Each line reads
/// `<id> <ip:port@cport> <flags> <primary id or -> … <link> <slots…>`.
fn shards_seen_by(node: &Node) -> Vec<Shard> {
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
    lines
        .iter()
        .filter(|fields| fields[2].split(',').any(|flag| flag == "master") && fields.len() > 8)
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
                .filter(|other| other[3] == fields[0])
                .filter(|other| !other[2].split(',').any(|flag| flag == "fail"))
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

/// A field of `CLUSTER INFO`.
pub fn cluster_info(node: &Node, field: &str) -> Option<String> {
    let text: String = node.query(redis::cmd("CLUSTER").arg("INFO")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .map(|value| value.trim().to_string())
}

/// lockrun pointed at `url`, with `args` before the `--`.
pub fn lockrun_via(url: &str, args: &[&str]) -> Command {
    let mut command = lockrun();
    command.arg("--redis").arg(url).args(args);
    command
}

/// `lockrun SUBCOMMAND --redis URL ARGS`, for `status` and `release`.
pub fn lockrun_sub(subcommand: &str, url: &str, args: &[&str]) -> Command {
    let mut command = lockrun();
    command.arg(subcommand).arg("--redis").arg(url).args(args);
    command
}

/// A run holding lock `name` through a topology URL until the test says
/// `go`. It waits for the lock, so that a topology still settling (a replica
/// slow to acknowledge on a loaded machine) delays the test instead of
/// failing it.
pub fn hold_via(url: &str, name: &str, args: &[&str]) -> Holder {
    Holder::builder_at(url, name)
        .args(&[&["--wait", "20s"], args].concat())
        .start()
}

/// Runs lockrun to completion with stdin closed; returns the output and
/// how long it took.
pub fn run_to_end(command: &mut Command) -> (std::process::Output, Duration) {
    let began = Instant::now();
    let output = command.stdin(Stdio::null()).output().expect("run lockrun");
    (output, began.elapsed())
}

pub fn stderr_of(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
