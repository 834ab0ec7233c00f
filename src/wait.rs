//! Getting the lock, waiting for it if asked to.
//!
//! A waiter subscribes to the lock's release channel, so it retries the
//! moment the holder lets go instead of polling. Polling stays as the fallback,
//! with jitter so waiters spread out, and never sleeps past the holder's
//! remaining lease: a holder that died publishes nothing, and its lease
//! running out must be noticed at once. Once Redis has answered, losing it
//! while waiting is not the end of the wait: nothing is held yet, so lockrun
//! keeps trying until the wait runs out.

use std::time::Duration;

use futures_util::StreamExt;

use crate::cli::Wait;
use crate::lock::{Attempt, Holder, Lock, Me};
use crate::redis_conn::{ErrorKind, RedisError};
use crate::report::Report;

/// Polling period while subscribed (only a safety net for lost messages).
const POLL_SUBSCRIBED: Duration = Duration::from_secs(1);
/// Polling period when the subscription failed.
const POLL_UNSUBSCRIBED: Duration = Duration::from_millis(200);
/// How long setting up the release subscription may take. Nothing is held
/// while waiting, so this need not fit any lease; past it, lockrun polls.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(2);
/// A little past the holder's expiry, so the retry finds the key gone.
const EXPIRY_MARGIN: Duration = Duration::from_millis(2);

/// The result of trying to get the lock.
pub enum Outcome {
    Acquired {
        fence: u64,
        sent: crate::lease::BootInstant,
    },
    /// Still held by someone else when the wait ran out.
    Busy {
        left: Option<Duration>,
        holder: Option<Holder>,
    },
}

pub async fn acquire(
    lock: &mut Lock,
    ttl: Duration,
    me: &Me,
    wait: Option<Wait>,
    report: Report,
) -> Result<Outcome, RedisError> {
    let started = tokio::time::Instant::now();
    let give_up = match wait {
        None => Some(started),
        Some(Wait::Up(limit)) => Some(started + limit),
        Some(Wait::Forever) => None,
    };
    let (left, holder) = match lock.try_acquire(ttl, me).await? {
        Attempt::Acquired { fence, sent } => return Ok(Outcome::Acquired { fence, sent }),
        Attempt::Busy { left, holder } => (left, holder),
    };
    if give_up.is_some_and(|t| t <= tokio::time::Instant::now()) {
        return Ok(Outcome::Busy { left, holder });
    }
    report.verbose(format_args!("{} is busy; waiting", lock.keys().lock));

    // Subscribe before the next attempt, so a release between that attempt
    // and the wait cannot be missed.
    let mut releases = match subscribe(lock).await {
        Ok(pubsub) => Some(pubsub),
        Err(err) => {
            report.verbose(format_args!(
                "no release notifications, polling instead: {err}"
            ));
            None
        }
    };
    let mut released = releases.as_mut().map(|p| p.on_message());
    let mut failing = false;
    loop {
        let attempt = lock.try_acquire(ttl, me).await;
        let now = tokio::time::Instant::now();
        let waited_out = give_up.is_some_and(|t| t <= now);
        let left = match attempt {
            Ok(Attempt::Acquired { fence, sent }) => return Ok(Outcome::Acquired { fence, sent }),
            Ok(Attempt::Busy { left, holder }) if waited_out => {
                return Ok(Outcome::Busy { left, holder })
            }
            Ok(Attempt::Busy { left, .. }) => {
                if std::mem::take(&mut failing) {
                    report.error("Redis answers again; still waiting");
                }
                left
            }
            // Redis has answered before, and nothing is held while waiting:
            // a restart or a network blip is worth waiting through, as long
            // as the wait lasts. A wrong password or URL failed long before.
            Err(err) if err.kind == ErrorKind::Unreachable && !waited_out => {
                if !std::mem::replace(&mut failing, true) {
                    report.error(format_args!("{err}; still waiting"));
                }
                None
            }
            Err(err) => return Err(err),
        };
        let period = if released.is_some() && !failing {
            POLL_SUBSCRIBED
        } else {
            POLL_UNSUBSCRIBED
        };
        let mut pause = jitter(period);
        if let Some(left) = left {
            pause = pause.min(left + EXPIRY_MARGIN);
        }
        if let Some(give_up) = give_up {
            pause = pause.min(give_up - now);
        }
        match released.as_mut() {
            Some(messages) => {
                tokio::select! {
                    message = messages.next() => {
                        if message.is_none() {
                            // The subscription connection broke: fall back to polling.
                            released = None;
                        }
                    }
                    _ = tokio::time::sleep(pause) => {}
                }
            }
            None => tokio::time::sleep(pause).await,
        }
    }
}

async fn subscribe(lock: &mut Lock) -> Result<redis::aio::PubSub, RedisError> {
    let target = lock.session().target().clone();
    let channel = lock.keys().channel.clone();
    let client = target.client()?;
    let timeout = SUBSCRIBE_TIMEOUT;
    let subscribed = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(&channel).await?;
        Ok::<_, redis::RedisError>(pubsub)
    };
    match tokio::time::timeout(timeout, subscribed).await {
        Ok(Ok(pubsub)) => Ok(pubsub),
        Ok(Err(err)) => Err(target.error(err)),
        Err(_) => Err(target.timed_out(timeout)),
    }
}

/// A random pause between half and all of `period`, so that waiters which
/// started together do not keep retrying together.
fn jitter(period: Duration) -> Duration {
    let fraction = getrandom::u32().unwrap_or(u32::MAX / 2) as f64 / u32::MAX as f64;
    period.mul_f64(0.5 + 0.5 * fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..100 {
            let d = jitter(Duration::from_millis(200));
            assert!(d >= Duration::from_millis(100) && d <= Duration::from_millis(200));
        }
    }
}
