//! Push messages on a command connection. In RESP3 a connection that
//! subscribed to a channel still takes calls, and the server sends the
//! channel's messages as pushes between replies; the redis crate hands them
//! to a sender given when the connection opens.

use futures_util::stream::{self, Stream, StreamExt};
use redis::{AsyncConnectionConfig, ConnectionInfo, ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::mpsc::{self, UnboundedReceiver};

/// The push messages of one connection, as they arrive.
pub(super) type Pushes = UnboundedReceiver<PushInfo>;

/// `info` and `config` for a connection that speaks RESP3 and hands its
/// pushes over, and where they arrive.
pub(super) fn carried(
    info: &ConnectionInfo,
    config: AsyncConnectionConfig,
) -> (ConnectionInfo, AsyncConnectionConfig, Pushes) {
    let (sender, pushes) = mpsc::unbounded_channel();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let info = info.clone().set_redis_settings(settings);
    (info, config.set_push_sender(sender), pushes)
}

/// The payloads of the messages published on the channels subscribed to,
/// until the connection closes. Confirmations and other pushes are skipped.
pub(super) fn messages(pushes: Pushes) -> impl Stream<Item = String> {
    stream::unfold(pushes, |mut pushes| async move {
        let push = pushes.recv().await?;
        Some((push, pushes))
    })
    // The crate says "disconnected" when the connection fails or closes.
    .take_while(|push| std::future::ready(push.kind != PushKind::Disconnection))
    .filter_map(|push| std::future::ready(payload(push)))
}

/// A published message's payload: `message`, the channel, the payload.
fn payload(push: PushInfo) -> Option<String> {
    if push.kind != PushKind::Message {
        return None;
    }
    match push.data.into_iter().nth(1)? {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(kind: PushKind, data: &[&str]) -> PushInfo {
        PushInfo {
            kind,
            data: data
                .iter()
                .map(|part| Value::BulkString(part.as_bytes().to_vec()))
                .collect(),
        }
    }

    #[tokio::test]
    async fn messages_are_the_payloads_published_until_the_connection_closes() {
        let (sender, pushes) = mpsc::unbounded_channel();
        for sent in [
            push(PushKind::Subscribe, &["lockrun:{job}:wake:a"]),
            push(PushKind::Message, &["lockrun:{job}:wake:a", "first 1500"]),
            push(PushKind::Message, &["lockrun:{job}:wake:a", "granted 17"]),
            push(PushKind::Disconnection, &[]),
            push(PushKind::Message, &["lockrun:{job}:wake:a", "granted 18"]),
        ] {
            sender.send(sent).expect("the receiver is here");
        }
        let got: Vec<String> = messages(pushes).collect().await;
        assert_eq!(got, ["first 1500", "granted 17"]);
    }

    #[tokio::test]
    async fn messages_end_when_the_connection_is_gone() {
        let (sender, pushes) = mpsc::unbounded_channel();
        drop(sender);
        assert_eq!(messages(pushes).count().await, 0);
    }
}
