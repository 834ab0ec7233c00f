//! A waiting run's wake-up subscription, and in a cluster the node it is
//! on: a resharding may move the lock's slot away from that node, and the
//! subscription follows it (docs/design.md, "Sentinel and Cluster", wake-ups).

use futures_util::StreamExt;
use tokio::sync::oneshot;

use super::{Server, SUBSCRIBE_TIMEOUT};
use crate::lock::error::LockError;
use crate::lock::wake::{Unheard, Wakes};
use crate::redis_conn::ErrorKind;

/// Where this run's wake-up subscription is.
#[derive(Default)]
pub(super) struct Listening {
    /// The id of the cluster node it is on; `None` outside a cluster.
    pub(super) node: Option<String>,
    /// Ends the subscription's messages when dropped: the waiter then
    /// subscribes again, where the lock's slot is now.
    end: Option<oneshot::Sender<()>>,
}

impl Server {
    /// Subscribes to this run's wake-up channel, on the server that
    /// publishes it (behind Sentinel, the primary; in a cluster, the node
    /// owning the lock's slot).
    pub(in crate::lock) async fn subscribe_wakes(&mut self) -> Result<Wakes, LockError> {
        let channel = self.keys.wake_channel(self.token.as_str());
        let prefix = self.keys.prefix().to_owned();
        let subscribed = self
            .session
            .subscribe(&channel, SUBSCRIBE_TIMEOUT)
            .await
            .map_err(|err| err.under_prefix(&prefix))?;
        let messages = subscribed.messages.map(move |message| {
            message.map_err(|err| Unheard {
                by_acl: err.kind == ErrorKind::NoPerm,
                why: LockError::from(err.under_prefix(&prefix)).to_string(),
            })
        });
        let (end, ended) = oneshot::channel();
        self.listening = Listening {
            node: subscribed.node,
            end: Some(end),
        };
        Ok(Wakes::new(messages.take_until(ended)))
    }

    /// After an attempt that the cluster node `ran_on` answered: if the
    /// lock's slot left the node this run listens on, ends the
    /// subscription, so that the waiter makes it again on `ran_on` and
    /// tells Redis so. Until then its messages still reach it, but the
    /// release that hands it the lock cannot see it listen.
    pub(super) fn follow_slot(&mut self, ran_on: Option<&str>) {
        if ran_on.is_some() && ran_on != self.listening.node.as_deref() {
            self.listening.end = None;
        }
    }
}
