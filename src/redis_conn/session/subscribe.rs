//! A waiting run's subscription to its wake-up channel, on the server where
//! the lock's scripts run and publish: the one server, the primary the
//! sentinels name, or the cluster node that owns the channel's slot (a
//! channel named with the lock's hash tag has the lock's slot). There, a
//! script's `PUBSUB NUMSUB` counts this subscriber, which tells a live
//! waiter from a dead one.

use std::time::Duration;

use futures_util::stream::{LocalBoxStream, StreamExt};
use redis::Client;
use tokio::time::Instant;

use super::{cluster, pushes, Conn, Session};
use crate::redis_conn::target::Topology;
use crate::redis_conn::RedisError;

/// The payloads of the messages published on a channel, as they arrive; the
/// stream ends when the subscription breaks.
pub(crate) type Messages = LocalBoxStream<'static, String>;

impl Session {
    /// Subscribes to `channel`, within `within`: on the command connection
    /// where it carries pushes (`carry_subscription`), else on a connection
    /// of its own.
    pub(crate) async fn subscribe(
        &mut self,
        channel: &str,
        within: Duration,
    ) -> Result<Messages, RedisError> {
        if self.carries_pushes {
            self.subscribe_on_calls(channel, within).await
        } else {
            self.subscribe_apart(channel, within).await
        }
    }

    async fn subscribe_on_calls(
        &mut self,
        channel: &str,
        within: Duration,
    ) -> Result<Messages, RedisError> {
        let started = Instant::now();
        // A connection whose pushes a subscription took already has lost
        // that subscription (its messages ended): start afresh.
        if self.pushes.is_none() {
            self.drop_connection();
        }
        self.open_within(within).await?;
        let (Some(Conn::Single(conn)), Some(pushes)) = (self.conn.as_mut(), self.pushes.take())
        else {
            return Err(self.target.timed_out(within));
        };
        let left = within.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, conn.subscribe(channel)).await {
            Ok(Ok(())) => Ok(pushes::messages(pushes).boxed_local()),
            Ok(Err(err)) => Err(self.failed(&err)),
            Err(_) => {
                self.drop_connection();
                Err(self.target.timed_out(within))
            }
        }
    }

    async fn subscribe_apart(
        &mut self,
        channel: &str,
        within: Duration,
    ) -> Result<Messages, RedisError> {
        let started = Instant::now();
        let node = match &self.target.topology {
            Topology::Single => Some(self.target.info.clone()),
            Topology::Sentinel(_) => {
                self.open_within(within).await?;
                self.primary.clone()
            }
            Topology::Cluster(seeds) => {
                let seeds = seeds.clone();
                self.open_within(within).await?;
                let left = within.saturating_sub(started.elapsed());
                match self.conn.as_mut() {
                    Some(Conn::Cluster(conn)) => {
                        tokio::time::timeout(left, cluster::node_for(conn, channel))
                            .await
                            .ok()
                            .flatten()
                            .and_then(|node| {
                                seeds.node_info(&node, self.target.info.redis_settings())
                            })
                    }
                    _ => None,
                }
            }
        };
        let left = within.saturating_sub(started.elapsed());
        let subscribed = async {
            let Some(info) = node else {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "no primary, or no node owning the lock's slot, to subscribe on",
                )));
            };
            let mut pubsub = Client::open(info)?.get_async_pubsub().await?;
            pubsub.subscribe(channel).await?;
            Ok(pubsub)
        };
        match tokio::time::timeout(left, subscribed).await {
            Ok(Ok(pubsub)) => Ok(pubsub
                .into_on_message()
                .map(|message| message.get_payload::<String>().unwrap_or_default())
                .boxed_local()),
            Ok(Err(err)) => Err(self.error(&err)),
            Err(_) => Err(self.target.timed_out(within)),
        }
    }
}
