//! Redis Cluster, by lockrun's own slot lookup: the map of the slots is
//! asked of every listed node at once (`CLUSTER SLOTS`, which Redis 6.2 and
//! Valkey 8 both answer) and the first answer is taken; each call then goes
//! to the one primary that owns its key's slot, on a connection opened when
//! it is first needed, and follows MOVED, ASK, TRYAGAIN and CLUSTERDOWN
//! within the call's time limit. A node that a run does not need is never
//! waited on, so one that stalls costs nothing (the redis crate's cluster
//! client connects to every node and waits on each: docs/design.md,
//! "Sentinel and Cluster"). It also routes `WAIT` to the one primary that
//! took the write, and `SCAN`s each primary in turn (`lockrun list`).

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    Arg, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline, RedisConnectionInfo,
    RedisFuture, RedisResult, Value,
};

use super::first_call::{self, FirstCall};
use super::hosts::MultiHost;
use super::session::connect;
use super::tls::Tls;
use super::InvalidUrl;
use crate::clock::{whole, MS};

/// How many times one call may be sent again: enough for a MOVED followed
/// by an ASK during resharding, and a few short pauses.
const RETRIES: u32 = 5;

/// A node's `host` and `port`, as the cluster names it.
type Addr = (String, u16);

/// The nodes a cluster URL lists; any one that answers tells lockrun
/// where every slot lives.
#[derive(Clone)]
pub(super) struct Seeds {
    addrs: Vec<ConnectionAddr>,
    /// TLS for every node.
    tls: Option<Tls>,
    /// The URL without credentials, for messages.
    shown: String,
}

impl fmt::Display for Seeds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Seeds {
    /// The nodes of a `redis+cluster://` URL, and the credentials and TLS
    /// for every node.
    pub(super) fn from_url(url: &MultiHost<'_>) -> Result<(Self, ConnectionInfo), InvalidUrl> {
        // A cluster has only database 0.
        if !url.path.is_empty() && url.path != "0" {
            return Err(InvalidUrl);
        }
        let (addrs, info) = url.addrs_and_info(0)?;
        let seeds = Seeds {
            addrs,
            tls: None,
            shown: url.show(),
        };
        Ok((seeds, info))
    }

    /// The listed nodes' addresses.
    pub(super) fn addrs(&self) -> &[ConnectionAddr] {
        &self.addrs
    }

    /// TLS for every node, if the URL asks for it.
    pub(super) fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    /// Uses `tls` on every node: those listed, and those the cluster names.
    /// lockrun opens those connections itself (`tls.rs`).
    pub(super) fn trust(&mut self, tls: &Tls) {
        self.tls = Some(tls.clone());
    }

    /// Learns where the slots are from the first listed node that answers,
    /// asking them all at once, each connection within `within`; every
    /// call on the nodes is then limited to `calls`. When none answers,
    /// the failure that says most: a node's own refusal (a wrong password,
    /// a missing ACL rule) rather than another's closed port. With
    /// `logs_in_with_call`, a connection opened later to another node logs
    /// in with its first call (`first_call.rs`).
    pub(super) async fn connect(
        &self,
        settings: &RedisConnectionInfo,
        within: Duration,
        calls: Duration,
        logs_in_with_call: bool,
    ) -> RedisResult<Nodes> {
        let (slots, addr, conn) = self.slot_map(settings, within).await?;
        Ok(Nodes {
            seeds: self.clone(),
            settings: settings.clone(),
            calls,
            slots,
            moved: HashMap::new(),
            conns: HashMap::from([(addr, conn)]),
            logs_in_with_call,
            logins: HashMap::new(),
        })
    }

    /// The slot map, from whichever listed node answers first, the node's
    /// address and the connection that asked.
    async fn slot_map(
        &self,
        settings: &RedisConnectionInfo,
        within: Duration,
    ) -> RedisResult<(Vec<Slots>, Addr, MultiplexedConnection)> {
        let mut asks: FuturesUnordered<_> = self
            .addrs
            .iter()
            .map(|addr| async move {
                let (host, port) = addr_of(addr)?;
                let info = addr
                    .clone()
                    .into_connection_info()?
                    .set_redis_settings(settings.clone());
                // CLUSTER SLOTS changes nothing: the AUTH travels with it.
                let (info, auth) = match first_call::deferred(&info) {
                    Some((bare, auth)) => (bare, Some(auth)),
                    None => (info, None),
                };
                let mut conn = connect(&info, self.tls.as_ref(), within).await?;
                let mut ask = redis::cmd("CLUSTER");
                ask.arg("SLOTS");
                let reply = FirstCall::new(&mut conn, auth, false)
                    .req_packed_command(&ask)
                    .await?;
                let reply = reply_of(reply)?;
                Ok((parse_slots(reply, &host)?, (host, port), conn))
            })
            .collect();
        let mut failure: Option<redis::RedisError> = None;
        while let Some(answer) = asks.next().await {
            match answer {
                Ok(found) => return Ok(found),
                Err(err) => {
                    if failure.as_ref().is_none_or(|told| told.code().is_none()) {
                        failure = Some(err);
                    }
                }
            }
        }
        Err(failure.unwrap_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Io, "no cluster node listed"))
        }))
    }

    /// How to reach the node at `addr` with `settings`, and with TLS as the
    /// listed nodes are reached.
    fn node_info_at(
        &self,
        (host, port): &Addr,
        settings: &RedisConnectionInfo,
    ) -> Option<ConnectionInfo> {
        self.node_info(&format!("{host}:{port}"), settings)
    }

    /// How to reach `node` (`host:port`, as `CLUSTER NODES` names it) with
    /// `settings`, and with TLS as the listed nodes are reached.
    pub(super) fn node_info(
        &self,
        node: &str,
        settings: &RedisConnectionInfo,
    ) -> Option<ConnectionInfo> {
        let (host, port) = node.rsplit_once(':')?;
        let mut addr = self.addrs.first()?.clone();
        if let ConnectionAddr::Tcp(to, at)
        | ConnectionAddr::TcpTls {
            host: to, port: at, ..
        } = &mut addr
        {
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .clone_into(to);
            *at = port.parse().ok()?;
        }
        let info = addr.into_connection_info().ok()?;
        Some(info.set_redis_settings(settings.clone()))
    }
}

/// A range of slots and the primary that serves them.
struct Slots {
    first: u16,
    last: u16,
    primary: Addr,
}

/// `CLUSTER SLOTS`'s reply: `[first, last, [host, port, …], replicas…]`
/// for each range. An empty host is the answering node's, `host` (Redis
/// says so where it does not know how it is reached); `?`, a node whose
/// endpoint is unknown, serves no call: its range is left out, and a call
/// there is refused as for a slot no node serves.
fn parse_slots(reply: Value, host: &str) -> RedisResult<Vec<Slots>> {
    let unexpected = || {
        redis::RedisError::from((
            redis::ErrorKind::Parse,
            "CLUSTER SLOTS answered in an unknown form",
        ))
    };
    let Value::Array(ranges) = reply else {
        return Err(unexpected());
    };
    ranges
        .into_iter()
        .map(|range| {
            let Value::Array(range) = range else {
                return Err(unexpected());
            };
            let mut fields = range.into_iter();
            let first: u16 = redis::from_redis_value(fields.next().ok_or_else(unexpected)?)?;
            let last: u16 = redis::from_redis_value(fields.next().ok_or_else(unexpected)?)?;
            let Some(Value::Array(primary)) = fields.next() else {
                return Err(unexpected());
            };
            let mut primary = primary.into_iter();
            let named: String = match primary.next() {
                Some(Value::Nil) | None => String::new(),
                Some(named) => redis::from_redis_value(named)?,
            };
            let port: u16 = redis::from_redis_value(primary.next().ok_or_else(unexpected)?)?;
            let named = match named.as_str() {
                "?" => return Ok(None),
                "" | "0.0.0.0" | "::" => host.to_owned(),
                _ => named,
            };
            Ok(Some(Slots {
                first,
                last,
                primary: (named, port),
            }))
        })
        .filter_map(Result::transpose)
        .collect()
}

/// `host` and `port` of a listed node.
fn addr_of(addr: &ConnectionAddr) -> RedisResult<Addr> {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Ok((host.clone(), *port))
        }
        _ => Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "a cluster node is reached over TCP",
        ))),
    }
}

/// A reply as a result: a server's error reply is the call's failure.
fn reply_of(value: Value) -> RedisResult<Value> {
    match value {
        Value::ServerError(err) => Err(err.into()),
        value => Ok(value),
    }
}

/// The error Redis itself sends for a slot that no node serves.
fn unserved() -> redis::RedisError {
    match redis::parse_redis_value(b"-CLUSTERDOWN Hash slot not served\r\n") {
        Ok(Value::ServerError(err)) => err.into(),
        _ => redis::RedisError::from((redis::ErrorKind::Client, "hash slot not served")),
    }
}

/// The key a command names, whose slot decides where it goes: a script's
/// first key, or the first argument of anything else lockrun routes by
/// key (`PUBLISH`'s channel). Every key of a lock shares one hash tag.
fn key_of(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        Arg::Simple(arg) => Some(arg),
        _ => None,
    });
    let name = args.next()?.to_ascii_uppercase();
    if matches!(
        name.as_slice(),
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO"
    ) {
        args.next()?;
        let keys: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
        if keys == 0 {
            return None;
        }
    }
    args.next()
}

/// The slot of the command's key.
fn slot_of(cmd: &Cmd) -> RedisResult<u16> {
    let key = key_of(cmd).ok_or_else(|| {
        redis::RedisError::from((
            redis::ErrorKind::Client,
            "a command without a key has no cluster slot",
        ))
    })?;
    Ok(slot_for(key))
}

/// How many slots a cluster has.
const SLOTS: u16 = 16384;

/// The slot of `key`: CRC16 (XMODEM) of its hash tag, the part between the
/// first `{` and the next `}` when that is not empty, else of the whole
/// key. (The redis crate computes it too, but keeps the number to itself.)
fn slot_for(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .map(|close| &rest[..close])
        })
        .filter(|tag| !tag.is_empty());
    crc16::State::<crc16::XMODEM>::calculate(tag.unwrap_or(key)) % SLOTS
}

/// The nodes of a cluster as one run uses them: where the slots are, and a
/// connection to each node it called on, opened when first needed.
pub(super) struct Nodes {
    seeds: Seeds,
    settings: RedisConnectionInfo,
    /// Every call's time limit, and every connection's.
    calls: Duration,
    slots: Vec<Slots>,
    /// Where a MOVED sent a slot since the map was learnt.
    moved: HashMap<u16, Addr>,
    conns: HashMap<Addr, MultiplexedConnection>,
    /// Whether a connection opened to a node logs in with its first call.
    logs_in_with_call: bool,
    /// The AUTH that the first call on a node's new connection carries.
    logins: HashMap<Addr, Cmd>,
}

impl Nodes {
    /// The primary serving `slot`.
    fn owner(&self, slot: u16) -> RedisResult<Addr> {
        if let Some(addr) = self.moved.get(&slot) {
            return Ok(addr.clone());
        }
        self.slots
            .iter()
            .find(|range| (range.first..=range.last).contains(&slot))
            .map(|range| range.primary.clone())
            .ok_or_else(unserved)
    }

    /// The connection to `addr`, opened if this run has none there yet.
    async fn conn_to(&mut self, addr: &Addr) -> RedisResult<MultiplexedConnection> {
        if let Some(conn) = self.conns.get(addr) {
            return Ok(conn.clone());
        }
        let info = self
            .seeds
            .node_info_at(addr, &self.settings)
            .ok_or_else(|| {
                redis::RedisError::from((redis::ErrorKind::Client, "no way to reach a node"))
            })?;
        let deferred = first_call::deferred(&info).filter(|_| self.logs_in_with_call);
        let (info, auth) = match deferred {
            Some((bare, auth)) => (bare, Some(auth)),
            None => (info, None),
        };
        let conn = connect(&info, self.seeds.tls.as_ref(), self.calls).await?;
        self.conns.insert(addr.clone(), conn.clone());
        if let Some(auth) = auth {
            self.logins.insert(addr.clone(), auth);
        }
        Ok(conn)
    }

    /// The connection to `addr` (`conn_to`), and the AUTH its next call
    /// carries, taken.
    async fn conn_and_login(
        &mut self,
        addr: &Addr,
    ) -> RedisResult<(MultiplexedConnection, Option<Cmd>)> {
        let conn = self.conn_to(addr).await?;
        Ok((conn, self.logins.remove(addr)))
    }

    /// Sends `cmd` to the node at `addr`, after ASKING when `asking`. A
    /// connection that failed is forgotten.
    async fn send_to(&mut self, addr: &Addr, cmd: &Cmd, asking: bool) -> RedisResult<Value> {
        let (mut conn, auth) = self.conn_and_login(addr).await?;
        let mut conn = FirstCall::new(&mut conn, auth, false);
        let sent = if asking {
            let mut both = redis::pipe();
            both.cmd("ASKING").add_command(cmd.clone());
            // A refused ASKING (NOPERM) is the failure, not the
            // redirection back that the command then gets.
            conn.req_packed_commands(&both, 0, 2)
                .await
                .and_then(|replies| {
                    let mut replies = replies.into_iter();
                    match (replies.next(), replies.next()) {
                        (Some(asked), Some(reply)) => reply_of(asked).map(|_| reply),
                        _ => Err(redis::RedisError::from((
                            redis::ErrorKind::Client,
                            "no reply after ASKING",
                        ))),
                    }
                })
        } else {
            conn.req_packed_command(cmd).await
        };
        if sent.as_ref().is_err_and(|err| err.code().is_none()) {
            self.conns.remove(addr);
        }
        reply_of(sent?)
    }

    /// Sends `cmd` to the primary serving `slot`, following the cluster's
    /// redirections: a MOVED (the slot has a new owner), an ASK (the key is
    /// on the target of a migration), TRYAGAIN and CLUSTERDOWN (a slot
    /// being migrated, a cluster healing: after a pause), a node that
    /// dropped the connection (the map is learnt again). The caller bounds
    /// the whole; the pauses together take at most a third of a call's
    /// time, so that a refusal that lasts is reported as it is.
    async fn on_slot(&mut self, slot: u16, cmd: &Cmd) -> RedisResult<Value> {
        let (shortest, longest) = retry_waits(self.calls);
        let mut asked: Option<Addr> = None;
        let mut tries = 0;
        loop {
            let (addr, asking) = match asked.take() {
                Some(addr) => (addr, true),
                None => (self.owner(slot)?, false),
            };
            let err = match self.send_to(&addr, cmd, asking).await {
                Ok(value) => return Ok(value),
                Err(err) => err,
            };
            if tries == RETRIES {
                return Err(err);
            }
            tries += 1;
            let pause = Duration::from_millis((shortest << tries).min(longest));
            match (err.code(), err.redirect_node()) {
                (Some("MOVED"), Some((to, _))) => {
                    let to = node_addr(to).ok_or(err)?;
                    self.moved.insert(slot, to);
                }
                (Some("ASK"), Some((to, _))) => asked = Some(node_addr(to).ok_or(err)?),
                (Some("TRYAGAIN" | "CLUSTERDOWN"), _) => tokio::time::sleep(pause).await,
                (None, _) if err.is_io_error() || err.is_connection_dropped() => {
                    tokio::time::sleep(pause).await;
                    self.relearn().await?;
                }
                _ => return Err(err),
            }
        }
    }

    /// Learns the slot map again from the listed nodes: after a node
    /// dropped its connection, one that answers says who serves its slots
    /// now.
    async fn relearn(&mut self) -> RedisResult<()> {
        let (slots, addr, conn) = self.seeds.slot_map(&self.settings, self.calls).await?;
        self.slots = slots;
        self.moved.clear();
        self.conns.insert(addr, conn);
        Ok(())
    }

    /// Sends `wait` (a `WAIT` command) to the primary that owns `key`, or
    /// to the node whose id is `node`: while `key`'s slot is being
    /// migrated, the target took the writes for the keys the source no
    /// longer has, on the connection opened there to follow an ASK.
    pub(super) async fn wait(
        &mut self,
        key: &str,
        node: Option<&str>,
        wait: Cmd,
    ) -> RedisResult<i64> {
        let slot = slot_for(key.as_bytes());
        let acked = match node {
            Some(id) => {
                let nodes = self.on_slot(slot, &cluster_nodes()).await?;
                let nodes: String = redis::from_redis_value(nodes)?;
                let addr = address_of(&nodes, id).ok_or_else(|| {
                    redis::RedisError::from((
                        redis::ErrorKind::Client,
                        "the cluster does not list the node that took the write",
                    ))
                })?;
                self.send_to(&addr, &wait, false).await?
            }
            None => self.on_slot(slot, &wait).await?,
        };
        Ok(redis::from_redis_value(acked)?)
    }

    /// Every primary that serves slots, as `(host, port)`, sorted: the
    /// nodes a `SCAN` must visit one by one, since each holds only its own
    /// slots' keys.
    pub(super) fn primaries(&self) -> Vec<Addr> {
        let mut nodes: Vec<Addr> = self
            .slots
            .iter()
            .map(|range| range.primary.clone())
            .collect();
        nodes.sort();
        nodes.dedup();
        nodes
    }

    /// Sends `cmd` to the node at `addr`, whatever keys it names.
    pub(super) async fn on_node(&mut self, cmd: &Cmd, addr: &Addr) -> RedisResult<Value> {
        self.send_to(addr, cmd, false).await
    }

    /// The primary that owns `key`, as that node itself says (`CLUSTER
    /// NODES`, the line flagged `myself`).
    pub(super) async fn owner_of(&mut self, key: &str) -> Option<Node> {
        let slot = slot_for(key.as_bytes());
        let nodes = self.on_slot(slot, &cluster_nodes()).await.ok()?;
        let nodes: String = redis::from_redis_value(nodes).ok()?;
        myself(&nodes)
    }
}

impl ConnectionLike for Nodes {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let slot = slot_of(cmd)?;
            self.on_slot(slot, cmd).await
        })
    }

    /// A pipeline goes whole to the owner of its first key, redirections
    /// unfollowed: lockrun sends none to a cluster (`Server::release`).
    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let slot = pipeline
                .cmd_iter()
                .find_map(key_of)
                .map(slot_for)
                .ok_or_else(unserved)?;
            let addr = self.owner(slot)?;
            let (mut conn, auth) = self.conn_and_login(&addr).await?;
            FirstCall::new(&mut conn, auth, false)
                .req_packed_commands(pipeline, offset, count)
                .await
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

fn cluster_nodes() -> Cmd {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("NODES");
    cmd
}

/// `host:port` (an IPv6 host in brackets or not) as an address.
fn node_addr(node: &str) -> Option<Addr> {
    let (host, port) = node.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

/// The shortest and longest pause between a call's tries, in ms: all
/// `RETRIES` pauses together take at most 5/16 of `timeout`, so that a
/// call that keeps failing, even on a slow machine, reports the cluster's
/// own error (CLUSTERDOWN, TRYAGAIN) rather than a timeout.
fn retry_waits(timeout: Duration) -> (u64, u64) {
    let max = whole(timeout / 16, MS).max(2);
    ((max / 10).max(1), max)
}

/// The address of the node with id `id` in `CLUSTER NODES` output.
fn address_of(nodes: &str, id: &str) -> Option<Addr> {
    nodes.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        if fields.next()? != id {
            return None;
        }
        node_addr(fields.next()?.split(['@', ',']).next()?)
    })
}

/// A cluster node as `CLUSTER NODES` names it.
pub(super) struct Node {
    /// Its cluster id, as `CLUSTER MYID` gives it.
    pub(super) id: String,
    /// `host:port`.
    pub(super) addr: String,
}

/// The `myself` line of `CLUSTER NODES` output:
/// `<id> <ip:port@cport[,hostname]> <flags> …`.
fn myself(nodes: &str) -> Option<Node> {
    nodes.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (id, addr, flags) = (fields.next()?, fields.next()?, fields.next()?);
        flags.split(',').any(|flag| flag == "myself").then(|| Node {
            id: id.to_owned(),
            addr: addr.split(['@', ',']).next().unwrap_or(addr).to_owned(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_fit_inside_the_call_limit() {
        for ms in [10, 100, 200, 2000, 60_000] {
            let timeout = Duration::from_millis(ms);
            let (min, max) = retry_waits(timeout);
            assert!(min < max, "{ms}: {min} {max}");
            assert!(
                u128::from(max) * u128::from(RETRIES) <= (timeout.as_millis() / 3).max(10),
                "{ms}"
            );
        }
    }

    #[test]
    fn the_answering_node_is_the_myself_line() {
        let nodes = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1 4 connected
e7d1 127.0.0.1:30001@40001,host-a myself,master - 0 0 1 connected 0-5460
";
        let node = myself(nodes).expect("a myself line");
        assert_eq!(
            (node.id.as_str(), node.addr.as_str()),
            ("e7d1", "127.0.0.1:30001")
        );
        assert!(myself("x 1.2.3.4:5@6 master - 0 0 1 connected").is_none());
    }

    #[test]
    fn a_key_has_the_slot_redis_gives_it() {
        // CLUSTER KEYSLOT's answers.
        assert_eq!(slot_for(b"foo"), 12182);
        assert_eq!(slot_for(b"{user1000}.following"), slot_for(b"user1000"));
        assert_eq!(slot_for(b"foo{}{bar}"), slot_for(b"foo{}{bar}"));
        assert_ne!(slot_for(b"foo{}{bar}"), slot_for(b"bar"));
        assert_eq!(slot_for(b"123456789"), 0x31C3 % SLOTS);
    }

    #[test]
    fn a_command_is_routed_by_its_first_key() {
        let mut script = redis::cmd("EVALSHA");
        script
            .arg("abc")
            .arg(2)
            .arg("lockrun:{job}")
            .arg("x")
            .arg("arg");
        assert_eq!(key_of(&script), Some(&b"lockrun:{job}"[..]));
        let mut keyless = redis::cmd("EVAL");
        keyless.arg("return 1").arg(0);
        assert_eq!(key_of(&keyless), None);
        let mut publish = redis::cmd("PUBLISH");
        publish.arg("lockrun:{job}:wake").arg("");
        assert_eq!(key_of(&publish), Some(&b"lockrun:{job}:wake"[..]));
    }

    #[test]
    fn the_slot_map_names_each_range_s_primary() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16000), node("", 7001)]),
            Value::Array(vec![Value::Int(16001), Value::Int(16383), node("?", 7002)]),
        ]);
        let slots = parse_slots(reply, "seed").expect("parses");
        assert_eq!(slots.len(), 2);
        assert_eq!((slots[0].first, slots[0].last), (0, 5460));
        assert_eq!(slots[0].primary, ("10.0.0.1".to_owned(), 7000));
        assert_eq!(slots[1].primary, ("seed".to_owned(), 7001));
        assert!(parse_slots(Value::Int(1), "seed").is_err());
    }

    #[test]
    fn a_node_is_found_by_its_id() {
        let nodes = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1 4 connected
e7d1 [::1]:30001@40001,host-a myself,master - 0 0 1 connected 0-5460
";
        assert_eq!(
            address_of(nodes, "07c3"),
            Some(("127.0.0.1".to_owned(), 30004))
        );
        assert_eq!(address_of(nodes, "e7d1"), Some(("::1".to_owned(), 30001)));
        assert_eq!(address_of(nodes, "e7d"), None);
    }

    #[test]
    fn a_node_is_reached_as_the_listed_ones_are() {
        let settings = RedisConnectionInfo::default().set_password("pw");
        for (url, tls) in [
            ("redis+cluster://a:1", false),
            ("rediss+cluster://a:1", true),
        ] {
            let multi = MultiHost::parse(url).expect("multi-host").expect("parses");
            let (seeds, _) = Seeds::from_url(&multi).expect("valid");
            let info = seeds
                .node_info("10.0.0.6:7001", &settings)
                .expect("an address");
            match info.addr() {
                ConnectionAddr::Tcp(host, port) if !tls => {
                    assert_eq!((host.as_str(), *port), ("10.0.0.6", 7001));
                }
                ConnectionAddr::TcpTls { host, port, .. } if tls => {
                    assert_eq!((host.as_str(), *port), ("10.0.0.6", 7001));
                }
                other => panic!("{url}: {other:?}"),
            }
            assert_eq!(info.redis_settings().password(), Some("pw"));
            assert!(seeds.node_info("no port", &settings).is_none());
        }
    }

    #[test]
    fn only_database_zero() {
        let multi = MultiHost::parse("redis+cluster://a:1/1")
            .expect("multi-host")
            .expect("parses");
        assert!(Seeds::from_url(&multi).is_err());
        let multi = MultiHost::parse("redis+cluster://a:1,b:2")
            .expect("multi-host")
            .expect("parses");
        let (seeds, _) = Seeds::from_url(&multi).expect("valid");
        assert_eq!(seeds.to_string(), "redis+cluster://a:1,b:2");
    }
}
