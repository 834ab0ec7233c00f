//! Redis Cluster: the redis crate's cluster client follows MOVED and ASK and
//! retries through failovers; lockrun caps its retries so that every call
//! still ends within --redis-timeout, routes `WAIT` to the one primary that
//! took the write, and `SCAN`s each primary in turn (`lockrun list`).

use std::fmt;
use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, Value};

use super::hosts::MultiHost;
use super::tls::Tls;
use super::InvalidUrl;
use crate::clock::{whole, MS};

/// How many times the cluster client may retry one call: enough for a
/// MOVED followed by an ASK during resharding, and a few short pauses.
const RETRIES: u32 = 5;

/// The nodes a cluster URL lists; any one that answers tells the client
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

    /// Uses `tls` on every node: those listed, and those the cluster names.
    pub(super) fn trust(&mut self, tls: &Tls) -> redis::RedisResult<()> {
        for addr in &mut self.addrs {
            *addr = tls.trusted(addr.clone())?;
        }
        self.tls = Some(tls.clone());
        Ok(())
    }

    fn nodes(&self, settings: &RedisConnectionInfo) -> redis::RedisResult<Vec<ConnectionInfo>> {
        self.addrs
            .iter()
            .map(|addr| {
                Ok(addr
                    .clone()
                    .into_connection_info()?
                    .set_redis_settings(settings.clone()))
            })
            .collect()
    }

    /// Connects to the cluster and learns its slots, each connection within
    /// `within`; every call on it, retries included, is limited to `calls`.
    /// The first connection of a run may take longer than a call may (see
    /// `FIRST_CONNECT_TIMEOUT`), but retry pauses sized from it would let a
    /// call that Redis keeps refusing (TRYAGAIN while the slot migrates)
    /// outlast its limit, where it should end with the refusal.
    pub(super) async fn connect(
        &self,
        settings: &RedisConnectionInfo,
        within: Duration,
        calls: Duration,
    ) -> redis::RedisResult<ClusterConnection> {
        let (min_wait, max_wait) = retry_waits(calls);
        let mut builder = ClusterClientBuilder::new(self.nodes(settings)?);
        // The listed nodes' addresses carry the certificates; the nodes the
        // cluster names (slots, MOVED) are reached with the builder's.
        if let Some(tls) = &self.tls {
            builder = builder.certs(tls.certificates());
        }
        builder
            // The crate's default, 16 retries at least 1.28 s apart, would
            // outlast any lease; lockrun's renewals do the longer retrying.
            .retries(RETRIES)
            .min_retry_wait(min_wait)
            .max_retry_wait(max_wait)
            .connection_timeout(within)
            .response_timeout(calls)
            .overall_response_timeout(Some(calls))
            .build()?
            .get_async_connection()
            .await
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

/// The shortest and longest pause between the cluster client's retries, in
/// ms: all `RETRIES` pauses together take at most 5/16 of `timeout`, so
/// that a call that keeps failing, even on a slow machine, reports the
/// cluster's own error (CLUSTERDOWN, TRYAGAIN) rather than a timeout.
fn retry_waits(timeout: Duration) -> (u64, u64) {
    let max = whole(timeout / 16, MS).max(2);
    ((max / 10).max(1), max)
}

fn route_to_owner(key: &str) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
        key,
        SlotAddr::Master,
    )))
}

/// Sends `wait` (a `WAIT` command) to the primary that owns `key`, or to
/// the node whose id is `node`: while `key`'s slot is being migrated, the
/// target took the writes for the keys the source no longer has, on the
/// connection the client opened there to follow an ASK.
pub(super) async fn wait(
    conn: &mut ClusterConnection,
    key: &str,
    node: Option<&str>,
    wait: redis::Cmd,
) -> redis::RedisResult<i64> {
    let route = match node {
        Some(id) => {
            // A refusal (NOPERM) comes back as a value: as an error it
            // names the rule to add, where parsing it as the node list
            // would blame the server's protocol.
            let nodes = conn
                .route_command(
                    redis::cmd("CLUSTER").arg("NODES").clone(),
                    route_to_owner(key),
                )
                .await?
                .extract_error()?;
            let nodes: String = redis::from_redis_value(nodes)?;
            let (host, port) = address_of(&nodes, id).ok_or_else(|| {
                redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "the cluster does not list the node that took the write",
                ))
            })?;
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port })
        }
        None => route_to_owner(key),
    };
    // A refusal (NOPERM) comes back as a value, not an error.
    let acked = conn.route_command(wait, route).await?.extract_error()?;
    Ok(redis::from_redis_value(acked)?)
}

/// The address of the node with id `id` in `CLUSTER NODES` output.
fn address_of(nodes: &str, id: &str) -> Option<(String, u16)> {
    nodes.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        if fields.next()? != id {
            return None;
        }
        let addr = fields.next()?.split(['@', ',']).next()?;
        let (host, port) = addr.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Some((host.to_owned(), port.parse().ok()?))
    })
}

/// Every primary that serves slots, as `(host, port)`, sorted: the nodes a
/// `SCAN` must visit one by one, since each holds only its own slots' keys.
pub(super) async fn primaries(
    conn: &mut ClusterConnection,
) -> redis::RedisResult<Vec<(String, u16)>> {
    // With no response policy the crate answers a fan-out with a map from
    // each node's address to its reply; only the addresses matter here.
    let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
    let Value::Map(replies) = conn.route_command(redis::cmd("PING"), all).await? else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "the cluster did not name its primaries",
        )));
    };
    let mut nodes = replies
        .into_iter()
        .map(|(addr, _)| {
            let addr: String = redis::from_redis_value(addr)?;
            let port = addr
                .rsplit_once(':')
                .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)));
            port.ok_or_else(|| {
                redis::RedisError::from((redis::ErrorKind::Client, "a node address without a port"))
            })
        })
        .collect::<redis::RedisResult<Vec<_>>>()?;
    nodes.sort();
    Ok(nodes)
}

/// Sends `cmd` to the node at `host:port`, whatever keys it names.
pub(super) async fn on_node(
    conn: &mut ClusterConnection,
    cmd: redis::Cmd,
    (host, port): &(String, u16),
) -> redis::RedisResult<Value> {
    let node = SingleNodeRoutingInfo::ByAddress {
        host: host.clone(),
        port: *port,
    };
    // A refusal (NOPERM) comes back as a value, not an error.
    conn.route_command(cmd, RoutingInfo::SingleNode(node))
        .await?
        .extract_error()
}

/// A cluster node as `CLUSTER NODES` names it.
pub(super) struct Node {
    /// Its cluster id, as `CLUSTER MYID` gives it.
    pub(super) id: String,
    /// `host:port`.
    pub(super) addr: String,
}

/// The primary that owns `key`, as that node itself says (`CLUSTER NODES`,
/// the line flagged `myself`).
pub(super) async fn owner_of(conn: &mut ClusterConnection, key: &str) -> Option<Node> {
    let nodes = conn
        .route_command(
            redis::cmd("CLUSTER").arg("NODES").clone(),
            route_to_owner(key),
        )
        .await
        .ok()?;
    let nodes: String = redis::from_redis_value(nodes).ok()?;
    myself(&nodes)
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
