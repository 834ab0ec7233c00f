//! `Reshard`: a real `redis-cli --cluster reshard` moving one slot of a `Cluster` to another primary, in the background, and the filler keys that make it take seconds.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::cluster::shards_seen_by;
use super::{
    eventually, keys_held_by, log_file, node_id, read_log, redis_cli, scratch, Cluster, Running,
};
use super::{PATIENCE, TOPOLOGY_PATIENCE};

/// How many filler keys one pipelined write sends.
const FILL_BATCH: usize = 1000;

/// A `redis-cli --cluster reshard` under way, moving `slot` from the primary
/// on port `source` to the one on `target`. Killed when dropped.
pub struct Reshard<'c> {
    cluster: &'c Cluster,
    pub slot: u16,
    pub source: u16,
    pub target: u16,
    target_id: String,
    cli: Running,
    /// When redis-cli was started.
    began: Instant,
    // Declared last so that it is removed after `cli` is stopped.
    dir: TempDir,
}

/// The hash tag of `key`: what its slot is computed from.
fn hash_tag(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map_or(key, |(tag, _)| tag)
}

impl Cluster {
    /// Writes `count` filler keys into `key`'s slot (`{TAG}:filler:N`, with
    /// `key`'s hash tag), pipelined: a slot with many keys takes
    /// `redis-cli --cluster reshard` seconds to move.
    pub fn fill_slot(&self, key: &str, count: usize) {
        let owner = self.node(self.owner(key).0);
        let mut conn = owner.client();
        let tag = hash_tag(key);
        for start in (0..count).step_by(FILL_BATCH) {
            let mut pipe = redis::pipe();
            for n in start..count.min(start + FILL_BATCH) {
                pipe.cmd("SET")
                    .arg(format!("{{{tag}}}:filler:{n}"))
                    .arg("x")
                    .ignore();
            }
            pipe.query::<()>(&mut conn).expect("write filler keys");
        }
    }

    /// Starts `redis-cli --cluster reshard` moving `key`'s slot to another
    /// primary, `pipeline` keys a `MIGRATE`. redis-cli moves the lowest slots
    /// its source serves, so `key`'s slot must be the lowest of its owner.
    pub fn reshard(&self, key: &str, pipeline: u32) -> Reshard<'_> {
        let slot = self.slot_of(key);
        let (source, _) = self.owner(key);
        let shards = self.shards();
        let lowest = shards
            .iter()
            .find(|shard| shard.primary == source)
            .and_then(|shard| shard.slots.iter().map(|r| *r.start()).min());
        assert_eq!(
            lowest,
            Some(slot),
            "redis-cli would move another slot first: {key} is in {slot}; {shards:?}"
        );
        let target = shards
            .iter()
            .map(|shard| shard.primary)
            .find(|&p| p != source)
            .expect("another primary");
        let (source_id, target_id) = (node_id(self.node(source)), node_id(self.node(target)));
        let dir = scratch();
        let log = dir.path().join("reshard.log");
        let mut command = Command::new(redis_cli());
        command
            .args(["--cluster", "reshard", &self.node(source).addr()])
            .args(["--cluster-from", &source_id, "--cluster-to", &target_id])
            .args(["--cluster-slots", "1", "--cluster-yes"])
            .args(["--cluster-pipeline", &pipeline.to_string()])
            .stdin(Stdio::null())
            .stdout(log_file(&log))
            .stderr(log_file(&dir.path().join("reshard.stderr")));
        Reshard {
            cluster: self,
            slot,
            source,
            target,
            target_id,
            cli: Running::spawn(&mut command),
            began: Instant::now(),
            dir,
        }
    }
}

impl Reshard<'_> {
    /// Whether the source still has the slot `MIGRATING` (`CLUSTER NODES`
    /// shows `[SLOT->-TARGET]` on its own line).
    pub fn migrating(&self) -> bool {
        let mark = format!("[{}->-{}]", self.slot, self.target_id);
        let nodes: String = self
            .cluster
            .node(self.source)
            .query(redis::cmd("CLUSTER").arg("NODES"))
            .unwrap_or_default();
        nodes
            .lines()
            .any(|line| line.contains("myself") && line.contains(&mark))
    }

    /// How many keys of the slot the source and the target hold.
    pub fn keys_in_slot(&self) -> (u64, u64) {
        let count = |port: u16| {
            self.cluster
                .node(port)
                .query(redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(self.slot))
                .unwrap_or(0)
        };
        (count(self.source), count(self.target))
    }

    /// Waits until keys are moving: the slot is `MIGRATING` on the source,
    /// and each node holds some of its keys.
    #[track_caller]
    pub fn wait_under_way(&mut self) {
        let moving = eventually(TOPOLOGY_PATIENCE, || {
            let (on_source, on_target) = self.keys_in_slot();
            (self.migrating() && on_source > 0 && on_target > 0) || !self.cli.running()
        });
        assert!(
            moving && self.cli.running(),
            "the resharding never got under way: {}",
            self.output()
        );
    }

    /// Waits for redis-cli's end, which must be a success, and until every
    /// primary agrees that the slot is the target's. Returns how long
    /// redis-cli ran.
    #[track_caller]
    pub fn finish(&mut self) -> Duration {
        let status = self.cli.wait_for(TOPOLOGY_PATIENCE);
        let took = self.began.elapsed();
        assert!(
            status.is_some_and(|s| s.success()),
            "redis-cli --cluster reshard ended with {status:?}: {}",
            self.output()
        );
        let settled = eventually(PATIENCE, || {
            self.cluster.primaries().iter().all(|&port| {
                shards_seen_by(self.cluster.node(port))
                    .iter()
                    .find(|shard| shard.slots.iter().any(|r| r.contains(&self.slot)))
                    .is_some_and(|shard| shard.primary == self.target)
            })
        });
        assert!(
            settled,
            "the primaries never agreed that {} moved",
            self.slot
        );
        took
    }

    /// Which of `keys` each node holds, source then target, as a client
    /// that follows an ASK sees them.
    pub fn where_are(&self, keys: &[&str]) -> (Vec<String>, Vec<String>) {
        let on = |port: u16| keys_held_by(self.cluster.node(port), keys);
        (on(self.source), on(self.target))
    }

    /// What redis-cli wrote, its progress dots left out.
    pub fn output(&self) -> String {
        let path = |name: &str| -> PathBuf { self.dir.path().join(name) };
        let out = read_log(&path("reshard.log")).replace('.', "");
        format!("{out}\n{}", read_log(&path("reshard.stderr")))
    }
}
