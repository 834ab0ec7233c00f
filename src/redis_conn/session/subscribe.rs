//! A waiting run's subscription to its wake-up channel, on the server where
//! the lock's scripts run and publish: the one server, the primary the
//! sentinels name, or the cluster node that owns the channel's slot (a
//! channel named with the lock's hash tag has the lock's slot). There, a
//! script's `PUBSUB NUMSUB` counts this subscriber, which tells a live
//! waiter from a dead one.

use std::time::Duration;

use futures_util::stream::{self, LocalBoxStream, StreamExt};
use futures_util::FutureExt;
use tokio::time::Instant;

use super::cluster::Seeds;
use super::{connect_carrying, pushes, Conn, Session};
use crate::redis_conn::target::Topology;
use crate::redis_conn::RedisError;

/// The payloads of the messages published on a channel, as they arrive, or
/// why the subscription was refused; the stream ends when the subscription
/// breaks.
pub(crate) type Messages = LocalBoxStream<'static, Result<String, RedisError>>;

/// A subscription made: its messages, and in a cluster the id of the node
/// it is on, which owned the channel's slot when it was made.
pub(crate) struct Subscribed {
    pub(crate) messages: Messages,
    pub(crate) node: Option<String>,
}

impl Session {
    /// Subscribes to `channel`, within `within`: in a cluster on a
    /// connection of its own to the node owning the channel's slot (a
    /// cluster's command connections carry no pushes), elsewhere on the
    /// command connection, answered with the next call.
    pub(crate) async fn subscribe(
        &mut self,
        channel: &str,
        within: Duration,
    ) -> Result<Subscribed, RedisError> {
        match &self.target.topology {
            Topology::Cluster(seeds) => {
                let seeds = seeds.clone();
                self.subscribe_on_slot_owner(&seeds, channel, within).await
            }
            Topology::Single | Topology::Sentinel(_) => Ok(Subscribed {
                messages: self.subscribe_on_calls(channel, within).await?,
                node: None,
            }),
        }
    }

    /// Subscribes on the command connection without waiting for Redis's
    /// answer: the request is queued on the connection at once, so it goes
    /// out ahead of the next call, in the same write, and Redis runs it
    /// first; that call's reply comes after its answer. A refusal is the
    /// first item of the messages.
    async fn subscribe_on_calls(
        &mut self,
        channel: &str,
        within: Duration,
    ) -> Result<Messages, RedisError> {
        // A connection without pushes to hand over has lost the
        // subscription that took them (its messages ended): start afresh.
        // Only a session made to listen (`Session::new`) subscribes.
        if self.pushes.is_none() {
            self.drop_connection();
        }
        self.open_within(within).await?;
        let (Some(Conn::Single(conn)), Some(pushes)) = (self.conn.as_mut(), self.pushes.take())
        else {
            return Err(self.target.timed_out(within));
        };
        let mut listener = conn.clone();
        let channel = channel.to_owned();
        let mut answer = Box::pin(async move { listener.subscribe(channel).await });
        // The first poll queues the request; the connection has room, for
        // it carries one call at a time. The crate's response timeout
        // bounds the answer.
        let answered = (&mut answer).now_or_never();
        let (target, node) = (self.target.clone(), self.primary_node());
        let messages = pushes::messages(pushes).map(Ok);
        let subscribed = async move {
            let answer = match answered {
                Some(answer) => answer,
                None => answer.await,
            };
            match answer {
                Ok(()) => messages.boxed_local(),
                // Refused by the server (NOPERM): the waiter polls instead.
                Err(err) if err.code().is_some() => {
                    stream::iter([Err(target.error_at(&err, node.as_deref()))]).boxed_local()
                }
                // The connection failed or timed out: the subscription
                // broke before it began, and is made again once Redis
                // answers.
                Err(_) => stream::empty().boxed_local(),
            }
        };
        Ok(stream::once(subscribed).flatten().boxed_local())
    }

    async fn subscribe_on_slot_owner(
        &mut self,
        seeds: &Seeds,
        channel: &str,
        within: Duration,
    ) -> Result<Subscribed, RedisError> {
        let started = Instant::now();
        self.open_within(within).await?;
        let left = within.saturating_sub(started.elapsed());
        let owner = match self.conn.as_mut() {
            Some(Conn::Cluster(nodes)) => tokio::time::timeout(left, nodes.owner_of(channel))
                .await
                .ok()
                .flatten(),
            _ => None,
        };
        let info = owner
            .as_ref()
            .and_then(|node| seeds.node_info(&node.addr, self.target.info.redis_settings()));
        let left = within.saturating_sub(started.elapsed());
        // A connection of lockrun's own making (`connect_carrying`), with
        // its TLS, speaking RESP3: the messages come as its pushes.
        let subscribed = async {
            let Some(info) = info else {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "no node owning the lock's slot to subscribe on",
                )));
            };
            let (mut conn, pushes) = connect_carrying(&info, seeds.tls(), left, true).await?;
            conn.subscribe(channel).await?;
            let pushes = pushes.ok_or_else(|| {
                redis::RedisError::from((redis::ErrorKind::Client, "a connection without pushes"))
            })?;
            Ok((conn, pushes))
        };
        match tokio::time::timeout(left, subscribed).await {
            Ok(Ok((conn, pushes))) => Ok(Subscribed {
                // The connection lives as long as its messages are read.
                messages: pushes::messages(pushes)
                    .map(move |message| {
                        let _listening = &conn;
                        Ok(message)
                    })
                    .boxed_local(),
                node: owner.map(|node| node.id),
            }),
            Ok(Err(err)) => Err(self.error(&err)),
            Err(_) => Err(self.target.timed_out(within)),
        }
    }
}
