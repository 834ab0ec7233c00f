//! The primary behind Redis Sentinel: every listed sentinel is asked at once
//! which server is the primary of the service, and the first named server
//! that confirms with `ROLE` that it is a primary wins. The `ROLE` travels
//! with the first call (`first_call.rs`) unless the session asks for it
//! first, after a server named so said it was not a primary; and the
//! connection to the sentinel that named the server is kept, to ask again
//! in the same flight as a later call (`Session::invoke`), and again and
//! again while that server keeps a connect or a call waiting
//! (`Sentinels::named_other_than`).
//!
//! The redis crate has a Sentinel client, but it takes the sentinels'
//! answers in list order, with its own fixed connect and response limits,
//! and opens a second connection to the primary only to check its role. A
//! hung first sentinel would then cost more than a short --redis-timeout
//! allows; asking all at once costs nothing on a healthy set and keeps a run
//! going while any one sentinel answers.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, Role};

use super::error::{is_auth_error, one_line, tls_refusal};
use super::first_call::{self, FirstCall};
use super::hosts::{self, MultiHost};
use super::pushes::Pushes;
use super::session::{connect, connect_carrying};
use super::target::show_addr;
use super::tls::Tls;
use super::{ErrorKind, InvalidUrl, RedisError, Target, Unready};

/// The sentinels of one service.
#[derive(Clone)]
pub(super) struct Sentinels {
    addrs: Vec<ConnectionAddr>,
    /// The sentinels' own password, not the data nodes'.
    password: Option<String>,
    service: String,
    tls: bool,
    /// TLS for the primaries the sentinels name.
    tls_config: Option<Tls>,
    /// The URL without credentials, for messages.
    shown: String,
}

impl fmt::Display for Sentinels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

/// The primary the sentinels named, and the connection to it.
pub(super) struct Found {
    /// Its `(host, port)`, as the sentinels name it.
    pub(super) named: (String, u16),
    pub(super) conn: MultiplexedConnection,
    pub(super) info: ConnectionInfo,
    /// The connection's push messages, when asked to carry them.
    pub(super) pushes: Option<Pushes>,
    /// The connection to the sentinel that named it.
    pub(super) sentinel: Kept,
}

/// The `(host, port)` the sentinels name as the primary, and the
/// connection to the sentinel that said so.
pub(super) type Named = ((String, u16), Kept);

/// A connection to a sentinel, kept to ask it again.
#[derive(Clone)]
pub(super) struct Kept {
    conn: MultiplexedConnection,
    /// How long an answer on it may take before every sentinel is asked
    /// too: twice what its first question took with the connect, about
    /// four round trips, so that a sentinel that hangs since costs little.
    patience: Duration,
}

/// The least patience with a kept sentinel, for loopback's jitter.
const LEAST_PATIENCE: Duration = Duration::from_millis(10);

/// How often the sentinels are asked again while the server they named
/// keeps a connect or a call waiting: a stalled primary is left as soon as
/// they name another, for one question a period while it stalls, and none
/// while it answers.
const STALL_RECHECK: Duration = Duration::from_millis(250);

/// What the sentinels say of a server they named that is not a primary.
pub(super) const NOT_PRIMARY: &str =
    "the sentinels name it, but it is not a primary (a failover is under way)";

/// Why no primary was found, and how much that says about the cause: the
/// most telling failure among all the sentinels' is the one reported.
#[derive(Debug)]
pub(super) struct Failure {
    kind: ErrorKind,
    detail: String,
    /// The named primary, when the failure is its.
    node: Option<String>,
    rank: Rank,
}

/// How much a failure says about the cause, least first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    /// A sentinel could not be reached: says least, another may answer.
    SentinelDown,
    /// A sentinel does not know the service.
    UnknownService,
    /// The named primary is down or not a primary (yet): a failover.
    PrimaryDown,
    /// A password or address is wrong: no retry will help.
    Misconfigured,
}

impl Failure {
    pub(super) fn into_error(self, target: &Target) -> RedisError {
        // The primary refused the data password: whose, and from where; or
        // the user named without one, who needs one.
        let (kind, detail) = match (self.kind, target.password()) {
            (ErrorKind::Auth, Some(_)) => (ErrorKind::Auth, target.whose_password()),
            (ErrorKind::Auth, None) => (
                ErrorKind::NoPassword,
                target.user().unwrap_or("default").to_owned(),
            ),
            (kind, _) => (kind, self.detail),
        };
        target.failure(kind, &detail, self.node.as_deref())
    }
}

impl Sentinels {
    /// The sentinels of a `redis+sentinel://…/SERVICE[/DB]` URL, and the
    /// credentials, database and TLS for the primary.
    pub(super) fn from_url(url: &MultiHost<'_>) -> Result<(Self, ConnectionInfo), InvalidUrl> {
        let (service, db) = match url.path.split_once('/') {
            Some((service, db)) => (service, db.parse::<i64>().map_err(|_| InvalidUrl)?),
            None => (url.path, 0),
        };
        if service.is_empty() || db < 0 {
            return Err(InvalidUrl);
        }
        let (addrs, info) = url.addrs_and_info(db)?;
        let sentinels = Sentinels {
            addrs,
            password: None,
            service: service.to_owned(),
            tls: url.tls,
            tls_config: None,
            shown: format!("{}/{service}", url.show()),
        };
        Ok((sentinels, info))
    }

    pub(super) fn set_password(&mut self, password: String) {
        self.password = Some(password);
    }

    /// Uses `tls` on the sentinels and on the primaries they name: lockrun
    /// opens those connections itself (`tls.rs`).
    pub(super) fn trust(&mut self, tls: &Tls) {
        self.tls_config = Some(tls.clone());
    }

    pub(super) fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Finds the primary and connects to it, with `settings` for the primary
    /// and `timeout` on every connect and call. With `confirms_role`, a
    /// named server's `ROLE` is asked before it wins, and another sentinel's
    /// choice is tried when it is not a primary; without, the first named
    /// server that takes the connection wins, and the caller asks its
    /// `ROLE` with the first call. The caller bounds the whole.
    pub(super) async fn primary(
        &self,
        settings: &RedisConnectionInfo,
        timeout: Duration,
        pushes: bool,
        confirms_role: bool,
    ) -> Result<Found, Failure> {
        let mut answers: FuturesUnordered<_> = self
            .addrs
            .iter()
            .map(|addr| self.ask(addr, timeout))
            .collect();
        let mut tried: Vec<(String, u16)> = Vec::new();
        let mut worst: Option<Failure> = None;
        // A server named while the last one stalled, asked before the rest.
        let mut named_since = None;
        loop {
            let answer = match named_since.take() {
                Some(named) => Ok(named),
                None => match answers.next().await {
                    Some(answer) => answer,
                    None => break,
                },
            };
            let outcome = match answer {
                Ok((named, _)) if tried.contains(&named) => continue,
                Ok((named, sentinel)) => {
                    tried.push(named.clone());
                    let confirming =
                        self.confirm(named.clone(), settings, timeout, pushes, confirms_role);
                    let other = self.named_other_than(&named, Some(sentinel.clone()), timeout);
                    tokio::select! {
                        biased;
                        confirmed = confirming => confirmed.map(|(conn, info, pushes)| Found {
                            named,
                            conn,
                            info,
                            pushes,
                            sentinel,
                        }),
                        other = other => {
                            named_since = Some(other);
                            continue;
                        }
                    }
                }
                Err(failure) => Err(failure),
            };
            match outcome {
                Ok(found) => return Ok(found),
                Err(failure) if worst.as_ref().is_none_or(|w| failure.rank >= w.rank) => {
                    worst = Some(failure);
                }
                Err(_) => {}
            }
        }
        Err(worst.unwrap_or(Failure {
            kind: ErrorKind::Unreachable,
            detail: "no sentinel listed".into(),
            node: None,
            rank: Rank::SentinelDown,
        }))
    }

    /// The primary the sentinels name now, `host:port`, without connecting
    /// to it, and the connection to the sentinel that said so: asked on
    /// `kept`, a sentinel's connection kept from an earlier question, and
    /// when that fails or is slower than it was (`Kept::patience`), of
    /// every sentinel at once on new connections too, the first answer
    /// winning. `None` when no sentinel answers.
    pub(super) async fn named_again(&self, kept: Option<Kept>, timeout: Duration) -> Option<Named> {
        let anew = async {
            let mut answers: FuturesUnordered<_> = self
                .addrs
                .iter()
                .map(|addr| self.ask(addr, timeout))
                .collect();
            while let Some(answer) = answers.next().await {
                if let Ok(named) = answer {
                    return Some(named);
                }
            }
            None
        };
        let Some(mut kept) = kept else {
            return anew.await;
        };
        let patience = kept.patience;
        let on_kept = async move {
            match self.primary_addr(&mut kept.conn).await {
                Ok(Some(named)) => Some((named, kept)),
                _ => None,
            }
        };
        let (mut on_kept, mut anew) = (std::pin::pin!(on_kept), std::pin::pin!(anew));
        tokio::select! {
            named = &mut on_kept => match named {
                Some(named) => Some(named),
                None => anew.await,
            },
            () = tokio::time::sleep(patience) => tokio::select! {
                Some(named) = &mut on_kept => Some(named),
                named = &mut anew => named,
            },
        }
    }

    /// The server the sentinels name once they name one other than
    /// `current`, asked every `STALL_RECHECK` (each question within
    /// `timeout`), first on `kept`: raced against a connect or a call to
    /// `current`, so that one it stalls ends once the failover is made.
    /// Never comes while they name `current`, or none answers.
    pub(super) async fn named_other_than(
        &self,
        current: &(String, u16),
        mut kept: Option<Kept>,
        timeout: Duration,
    ) -> Named {
        loop {
            tokio::time::sleep(STALL_RECHECK).await;
            let asked = tokio::time::timeout(timeout, self.named_again(kept.take(), timeout));
            match asked.await.ok().flatten() {
                Some((named, sentinel)) if named != *current => return (named, sentinel),
                Some((_, sentinel)) => kept = Some(sentinel),
                None => {}
            }
        }
    }

    /// The service's primary, as the sentinel on `conn` names it.
    async fn primary_addr(
        &self,
        conn: &mut (impl ConnectionLike + Send),
    ) -> redis::RedisResult<Option<(String, u16)>> {
        redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.service)
            .query_async(conn)
            .await
    }

    /// Asks the sentinel at `addr` for the service's primary: its
    /// `(host, port)`, and the connection that asked, to keep.
    async fn ask(
        &self,
        addr: &ConnectionAddr,
        timeout: Duration,
    ) -> Result<((String, u16), Kept), Failure> {
        let at = show_addr(addr, false);
        let failed = |err: &redis::RedisError| sentinel_failure(&at, err);
        let mut settings = RedisConnectionInfo::default().set_skip_set_lib_name();
        if let Some(password) = &self.password {
            settings = settings.set_password(password);
        }
        let info = addr
            .clone()
            .into_connection_info()
            .map_err(|err| failed(&err))?
            .set_redis_settings(settings);
        // The question changes nothing: the AUTH travels with it.
        let (info, auth) = match first_call::deferred(&info) {
            Some((bare, auth)) => (bare, Some(auth)),
            None => (info, None),
        };
        let began = Instant::now();
        let mut conn = connect(&info, self.tls_config.as_ref(), timeout)
            .await
            .map_err(|err| failed(&err))?;
        let named = self
            .primary_addr(&mut FirstCall::new(&mut conn, auth, false))
            .await
            .map_err(|err| failed(&err))?;
        let named = named.ok_or_else(|| Failure {
            kind: ErrorKind::Server,
            detail: format!(
                "the sentinel at {at} does not know the service {:?}; check the name after \
                 the hosts in --redis",
                self.service
            ),
            node: None,
            rank: Rank::UnknownService,
        })?;
        let patience = (began.elapsed() * 2).max(LEAST_PATIENCE);
        Ok((named, Kept { conn, patience }))
    }

    /// Connects to the server a sentinel named and, with `confirms_role`,
    /// checks that it is the primary: during a failover a sentinel may
    /// still name the old one.
    async fn confirm(
        &self,
        (host, port): (String, u16),
        settings: &RedisConnectionInfo,
        timeout: Duration,
        pushes: bool,
        confirms_role: bool,
    ) -> Result<(MultiplexedConnection, ConnectionInfo, Option<Pushes>), Failure> {
        let node = hosts::authority(&host, port);
        let failed = |err: &redis::RedisError| {
            let kind = if let Some(why) = tls_refusal(err) {
                ErrorKind::Tls(why)
            } else if is_auth_error(err) {
                ErrorKind::Auth
            } else if is_noperm(err) {
                ErrorKind::NoPerm
            } else {
                ErrorKind::Unreachable
            };
            Failure {
                rank: if matches!(
                    kind,
                    ErrorKind::Auth | ErrorKind::NoPerm | ErrorKind::Tls(_)
                ) {
                    Rank::Misconfigured
                } else {
                    Rank::PrimaryDown
                },
                kind,
                detail: one_line(err),
                node: Some(node.clone()),
            }
        };
        let scheme = if self.tls { "rediss" } else { "redis" };
        let info = format!("{scheme}://{node}")
            .into_connection_info()
            .map_err(|err| failed(&err))?
            .set_redis_settings(settings.clone());
        let (mut conn, pushes) = connect_carrying(&info, self.tls_config.as_ref(), timeout, pushes)
            .await
            .map_err(|err| failed(&err))?;
        if !confirms_role {
            return Ok((conn, info, pushes));
        }
        let role: Role = redis::cmd("ROLE")
            .query_async(&mut conn)
            .await
            .map_err(|err| failed(&err))?;
        if !matches!(role, Role::Primary { .. }) {
            return Err(Failure {
                kind: ErrorKind::Transient(Unready::Failover),
                detail: NOT_PRIMARY.into(),
                node: Some(node),
                rank: Rank::PrimaryDown,
            });
        }
        Ok((conn, info, pushes))
    }
}

fn is_noperm(err: &redis::RedisError) -> bool {
    err.code() == Some("NOPERM")
}

/// What went wrong asking the sentinel at `at`.
fn sentinel_failure(at: &str, err: &redis::RedisError) -> Failure {
    let detail = one_line(err);
    if let Some(why) = tls_refusal(err) {
        // Sentinels and servers share their TLS setup: the same fix.
        return Failure {
            kind: ErrorKind::Tls(why),
            detail: format!("the sentinel at {at}: {detail}"),
            node: None,
            rank: Rank::Misconfigured,
        };
    }
    if is_auth_error(err) {
        return Failure {
            kind: ErrorKind::Server,
            detail: format!(
                "the sentinel at {at} refused authentication: {detail}; set the sentinels' \
                 password in LOCKRUN_SENTINEL_PASSWORD"
            ),
            node: None,
            rank: Rank::Misconfigured,
        };
    }
    if is_noperm(err) {
        // The sentinel's user may not ask: its rules, not its address, are wrong.
        return Failure {
            kind: ErrorKind::NoPerm,
            detail: format!("{detail} (the sentinel at {at})"),
            node: None,
            rank: Rank::Misconfigured,
        };
    }
    if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
        return Failure {
            kind: ErrorKind::Unreachable,
            detail: format!("no sentinel answered; the sentinel at {at}: {detail}"),
            node: None,
            rank: Rank::SentinelDown,
        };
    }
    Failure {
        kind: ErrorKind::Server,
        detail: format!(
            "{at} does not answer as a sentinel ({detail}); redis+sentinel:// lists Sentinel \
             addresses (port 26379 by default), not Redis servers"
        ),
        node: None,
        rank: Rank::Misconfigured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sentinels(url: &str) -> Result<(Sentinels, ConnectionInfo), InvalidUrl> {
        let multi = MultiHost::parse(url).expect("multi-host")?;
        Sentinels::from_url(&multi)
    }

    #[test]
    fn service_and_database_follow_the_hosts() {
        let (s, info) = sentinels("redis+sentinel://:pw@a,b:26380/jobs/3").expect("valid");
        assert_eq!(s.service, "jobs");
        assert_eq!(s.to_string(), "redis+sentinel://a:26379,b:26380/jobs");
        assert_eq!(info.redis_settings().db(), 3);
        assert_eq!(info.redis_settings().password(), Some("pw"));
        assert_eq!(s.addrs.len(), 2);
    }

    #[test]
    fn a_service_name_is_required() {
        for url in [
            "redis+sentinel://a",
            "redis+sentinel://a/",
            "redis+sentinel://a/svc/x",
            "redis+sentinel://a/svc/-1",
        ] {
            assert!(sentinels(url).is_err(), "{url}");
        }
    }
}
