//! The wake-up messages a waiting run gets on its own channel: one release
//! wakes one waiter, instead of every waiter polling.

use std::time::Duration;

use futures_util::stream::{LocalBoxStream, Stream};
use futures_util::StreamExt;

/// What a waiting run is told on its wake-up channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A release handed this run the lease, with this fencing token (and,
    /// with `--slots`, this slot).
    Granted { fence: u64, slot: Option<u32> },
    /// This run is first in line now, and the lease it waits for has this
    /// long left (`None`: no expiry; zero: free now).
    First(Option<Duration>),
    /// A newer run with `--supersede` took this run's place ("HOST pid N").
    Superseded(String),
    /// Redis refused the subscription: no message will come.
    Refused(SubscriptionRefused),
}

/// Why a subscription was refused: the operator's line, and whether the
/// ACL refused it (a rule to add, said without --verbose).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SubscriptionRefused {
    pub(crate) why: String,
    pub(crate) by_acl: bool,
}

impl Wake {
    fn parse(payload: &str) -> Wake {
        // Anything unexpected only means "look now": the next attempt
        // finds out what happened.
        let now = Wake::First(Some(Duration::ZERO));
        match payload.split_once(' ') {
            Some(("granted", grant)) => {
                let (fence, slot) = match grant.split_once(' ') {
                    Some((fence, slot)) => (fence, slot.parse().ok()),
                    None => (grant, None),
                };
                fence
                    .parse()
                    .map_or(now, |fence| Wake::Granted { fence, slot })
            }
            Some(("first", pttl)) => match pttl.parse::<i64>() {
                Ok(-1) => Wake::First(None),
                Ok(ms) => Wake::First(Some(Duration::from_millis(
                    u64::try_from(ms).unwrap_or_default(),
                ))),
                Err(_) => now,
            },
            Some(("superseded", by)) => Wake::Superseded(by.to_owned()),
            _ => now,
        }
    }
}

/// The wake-up messages of one waiting run.
pub(crate) struct Wakes(LocalBoxStream<'static, Result<String, SubscriptionRefused>>);

impl Wakes {
    /// The messages' payloads as they arrive, or why the subscription was
    /// refused; the stream ends when the subscription breaks.
    pub(crate) fn new(
        payloads: impl Stream<Item = Result<String, SubscriptionRefused>> + 'static,
    ) -> Self {
        Wakes(payloads.boxed_local())
    }

    /// Waits for the next message. `None` means the subscription broke and
    /// no more messages will come.
    pub(crate) async fn next(&mut self) -> Option<Wake> {
        match self.0.next().await? {
            Ok(payload) => Some(Wake::parse(&payload)),
            Err(why) => Some(Wake::Refused(why)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_messages_parse_and_anything_else_means_look_now() {
        assert_eq!(
            Wake::parse("granted 1732924800123456"),
            Wake::Granted {
                fence: 1_732_924_800_123_456,
                slot: None
            }
        );
        assert_eq!(
            Wake::parse("granted 17 2"),
            Wake::Granted {
                fence: 17,
                slot: Some(2)
            }
        );
        assert_eq!(
            Wake::parse("first 1500"),
            Wake::First(Some(Duration::from_millis(1500)))
        );
        assert_eq!(Wake::parse("first -1"), Wake::First(None));
        assert_eq!(Wake::parse("first -2"), Wake::First(Some(Duration::ZERO)));
        assert_eq!(
            Wake::parse("superseded ci-7 pid 42"),
            Wake::Superseded("ci-7 pid 42".into())
        );
        for odd in ["", "granted x", "released", "first soon"] {
            assert_eq!(
                Wake::parse(odd),
                Wake::First(Some(Duration::ZERO)),
                "{odd:?}"
            );
        }
    }
}
