//! `Move`: a cluster slot moved by hand, step by step, as
//! `redis-cli --cluster reshard` moves it: opened for migration, its keys
//! moved a few at a time, then given to the target.

use super::{eventually, keys_held_by, node_id, Cluster, Server, TOPOLOGY_PATIENCE};

/// The slot's two nodes: it leaves `source` for `target`.
pub struct Move<'c> {
    cluster: &'c Cluster,
    /// A key of the slot.
    key: String,
    pub slot: u16,
    pub source: &'c Server,
    pub target: &'c Server,
}

fn ok(node: &Server, cmd: &mut redis::Cmd) {
    let done: redis::RedisResult<String> = node.query(cmd);
    assert_eq!(done.as_deref(), Ok("OK"), "{cmd:?}");
}

impl<'c> Move<'c> {
    /// Opens the slot of `key` for migration to another primary, as
    /// `redis-cli --cluster reshard` does before it moves any key.
    pub fn begin(cluster: &'c Cluster, key: &str) -> Self {
        let slot = cluster.slot_of(key);
        let (source, _) = cluster.owner(key);
        let target = cluster
            .primaries()
            .into_iter()
            .find(|&p| p != source)
            .expect("another primary");
        let (source, target) = (cluster.node(source), cluster.node(target));
        let cmd = |state: &str, id: &str| {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
            cmd
        };
        ok(target, &mut cmd("IMPORTING", &node_id(source)));
        ok(source, &mut cmd("MIGRATING", &node_id(target)));
        Move {
            cluster,
            key: key.to_owned(),
            slot,
            source,
            target,
        }
    }

    /// Moves `keys` from the source to the target in one `MIGRATE`.
    pub fn keys(&self, keys: &[&str]) {
        let mut cmd = redis::cmd("MIGRATE");
        cmd.arg("127.0.0.1")
            .arg(self.target.port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(keys);
        ok(self.source, &mut cmd);
    }

    /// Gives the slot to the target on both nodes, as the end of a
    /// resharding does, and waits until every primary agrees.
    pub fn finish(&self) {
        let target = node_id(self.target);
        for node in [self.target, self.source] {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT").arg(self.slot).arg("NODE").arg(&target);
            ok(node, &mut cmd);
        }
        assert!(
            eventually(TOPOLOGY_PATIENCE, || {
                self.cluster.owner(&self.key).0 == self.target.port()
            }),
            "the slot never settled on the target"
        );
    }

    /// Which of `keys` each node holds, source then target.
    pub fn where_are(&self, keys: &[&str]) -> (Vec<String>, Vec<String>) {
        (
            keys_held_by(self.source, keys),
            keys_held_by(self.target, keys),
        )
    }
}
