//! The connection to Redis: a `Session` opens it lazily, drops it after any
//! failure so that the next call starts afresh (behind Sentinel, by asking
//! the sentinels again), and holds every call to one time limit, the
//! crate's own limits included. It also owns what follows a script call on
//! the same server: `WAIT` for replicas, and the waiter's subscription; and
//! `SCAN`, which finds the locks that `lockrun list` shows.

mod refused;
mod scheme;
mod subscribe;

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, Value};
use tokio::time::Instant;

use super::cluster;
use super::error::{is_read_only, is_unknown_command};
use super::first_call::{self, FirstCall, Login};
use super::pushes::{self, Pushes};
use super::sentinel::{Kept, Named, NOT_PRIMARY};
use super::target::{show_addr, Topology};
use super::tls::Tls;
use super::{ErrorKind, RedisError, Target, Unready};
use crate::clock::{show_exact, whole, MS};

/// How many keys one `SCAN` call looks at: a thousand keys take one round
/// trip, and no call holds up the server for long (`KEYS` would, for as
/// long as the whole database takes).
const SCAN_COUNT: u32 = 1000;

/// The pause before a call that a redirection left unserved is sent again,
/// for the cluster's nodes to agree on the slot's new owner: they tell
/// each other within a few gossip rounds of 100 ms.
const REDIRECTION_PAUSE: Duration = Duration::from_millis(20);

/// One request to Redis, sent on a session's connection: a script call (or
/// the PUBLISH that looks whether a channel is allowed). It returns the raw
/// reply, which the session decodes.
pub(crate) trait Request {
    async fn send(
        &self,
        conn: &mut impl ConnectionLike,
        scripts: &mut Scripts,
    ) -> redis::RedisResult<redis::Value>;
}

/// What the open connection has learnt of lockrun's scripts on its server.
/// A server that answers NOSCRIPT for one (restarted, flushed, or never
/// used by lockrun) lacks the others too: each is then sent whole at once,
/// not by its hash first, so that a run there takes one extra round trip,
/// not one per script (BENCHMARKS.md, "Round trips").
#[derive(Default)]
pub(crate) struct Scripts {
    /// Whether the server answered NOSCRIPT on this connection.
    missing: bool,
    /// The SHA-1 of each script sent whole on it since: the server has
    /// those.
    sent: Vec<&'static str>,
}

impl Scripts {
    /// Whether the script `sha` is best sent whole.
    pub(crate) fn lacks(&self, sha: &str) -> bool {
        self.missing && !self.sent.contains(&sha)
    }

    /// Notes that the server lacked a script, and that `sha` was sent whole.
    pub(crate) fn sent_whole(&mut self, sha: &'static str) {
        self.missing = true;
        if !self.sent.contains(&sha) {
            self.sent.push(sha);
        }
    }
}

/// An open connection: to one server, or to a cluster.
enum Conn {
    Single(MultiplexedConnection),
    Cluster(Box<cluster::Nodes>),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// The primary the sentinels named, while connected to it.
struct Primary {
    /// Its `(host, port)`, as the sentinels named it.
    named: (String, u16),
    info: ConnectionInfo,
    /// The connection to the sentinel that named it, kept to ask again.
    sentinel: Option<Kept>,
    /// Whether the next call carries its `ROLE` (`first_call.rs`): until
    /// then, the sentinels' word is all there is.
    role_unconfirmed: bool,
}

impl Primary {
    /// Whether the next call asks the `ROLE`; not the calls after it.
    fn role_asked(&mut self) -> bool {
        std::mem::take(&mut self.role_unconfirmed)
    }
}

/// When the `ROLE` of a server the sentinels named is asked.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RoleCheck {
    /// With the first call on its connection.
    WithFirstCall,
    /// Before it wins, in a flight of its own, from the first time a
    /// server named so said it was not a primary: then another sentinel's
    /// choice can be tried (`Sentinels::primary`), as a failover that
    /// lasts needs.
    First,
}

/// One lazily (re)opened connection. After any failure the connection is
/// dropped, so the next call starts afresh: after a Redis restart the old
/// socket is dead, a timed-out call may have left it in an unknown state, and
/// behind Sentinel the next call asks the sentinels again which server is
/// the primary now.
pub(crate) struct Session {
    target: Target,
    timeout: Duration,
    conn: Option<Conn>,
    /// The primary that the sentinels named, while connected to it.
    primary: Option<Primary>,
    /// When a named server's `ROLE` is asked.
    role_check: RoleCheck,
    /// Whether connections to one server or a primary carry pushes
    /// (`Session::new`).
    carries_pushes: bool,
    /// The open connection's push messages, until a subscription takes
    /// them.
    pushes: Option<Pushes>,
    /// Whether the server said `max number of clients reached` to this
    /// session: then a connection it closes unanswered likely met the same.
    at_limit: bool,
    /// Whether the open connection has answered a call yet: a server that
    /// refuses a connection may close it only when the first call is sent.
    answered: bool,
    /// The open connection's scripts.
    scripts: Scripts,
    /// When it logs in (`first_call.rs`), and the AUTH that the next call
    /// on the open connection carries.
    login: Login,
}

impl Session {
    /// A session whose calls are each limited to `timeout`. With `listens`
    /// (a run that may wait, on one server), its connections carry the
    /// run's wake-up subscription beside its calls (RESP3), so that it
    /// needs no second connection to be told it got the lock; decided here,
    /// before the first connection, so that subscribing does not reconnect.
    /// Not in a cluster, where the subscription keeps a connection of its
    /// own.
    /// With `logs_in_with_call`, its first call on each connection to one
    /// server or a primary carries the AUTH (`first_call.rs` says when).
    pub(crate) fn new(
        target: Target,
        timeout: Duration,
        listens: bool,
        logs_in_with_call: bool,
    ) -> Self {
        let carries_pushes = listens && !target.is_cluster();
        Session {
            carries_pushes,
            target,
            timeout,
            conn: None,
            primary: None,
            role_check: RoleCheck::WithFirstCall,
            pushes: None,
            at_limit: false,
            answered: false,
            scripts: Scripts::default(),
            // RESP3's HELLO stays the crate's.
            login: if logs_in_with_call && !carries_pushes {
                Login::WithFirstCall(None)
            } else {
                Login::AtConnect
            },
        }
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// The primary the connection goes to, `host:port`, when the sentinels
    /// named it.
    fn primary_node(&self) -> Option<String> {
        self.primary
            .as_ref()
            .map(|primary| show_addr(primary.info.addr(), false))
    }

    fn error(&self, err: &redis::RedisError) -> RedisError {
        self.target.error_at(err, self.primary_node().as_deref())
    }

    /// Opens the connection now, allowing `timeout` for it, so that an
    /// unreachable server is reported before anything else happens.
    pub(crate) async fn open_within(&mut self, timeout: Duration) -> Result<(), RedisError> {
        if self.conn.is_some() {
            return Ok(());
        }
        // The crate's own limits cover each step separately; this one bounds
        // the whole, a Sentinel lookup included.
        match tokio::time::timeout(timeout, self.open(timeout)).await {
            Ok(result) => result,
            Err(_) => Err(self.target.timed_out(timeout)),
        }
    }

    async fn open(&mut self, timeout: Duration) -> Result<(), RedisError> {
        self.answered = false;
        self.scripts = Scripts::default();
        self.login.take();
        self.target.reread_password();
        let target = &self.target;
        match &target.topology {
            Topology::Single => {
                let deferred = first_call::deferred(&target.info)
                    .filter(|_| matches!(self.login, Login::WithFirstCall(_)));
                let (info, login) = match deferred {
                    Some((bare, auth)) => (bare, Some(auth)),
                    None => (target.info.clone(), None),
                };
                let opened = tokio::select! {
                    opened = connect_carrying(&info, target.tls.as_ref(), timeout, self.carries_pushes) => opened,
                    mismatch = self.plain_at_tls_url(timeout) => return Err(mismatch),
                };
                let (conn, pushes) = match opened {
                    Ok(opened) => opened,
                    Err(err) => return Err(self.refused(&err, timeout).await),
                };
                self.conn = Some(Conn::Single(conn));
                self.pushes = pushes;
                if let Some(auth) = login {
                    self.login = Login::WithFirstCall(Some(auth));
                }
            }
            Topology::Sentinel(sentinels) => {
                let with_role = self.role_check == RoleCheck::WithFirstCall;
                // A ROLE asked alone is asked as the primary's user.
                let deferred = first_call::deferred(&target.info)
                    .filter(|_| with_role && matches!(self.login, Login::WithFirstCall(_)));
                let (settings, login) = match deferred {
                    Some((bare, auth)) => (bare.redis_settings().clone(), Some(auth)),
                    None => (target.info.redis_settings().clone(), None),
                };
                let found = sentinels
                    .primary(&settings, timeout, self.carries_pushes, !with_role)
                    .await
                    .map_err(|failure| failure.into_error(target))?;
                self.conn = Some(Conn::Single(found.conn));
                self.primary = Some(Primary {
                    named: found.named,
                    info: found.info,
                    sentinel: Some(found.sentinel),
                    role_unconfirmed: with_role,
                });
                self.pushes = found.pushes;
                if let Some(auth) = login {
                    self.login = Login::WithFirstCall(Some(auth));
                }
            }
            Topology::Cluster(seeds) => {
                let logs_in_with_call = matches!(self.login, Login::WithFirstCall(_));
                let opened = seeds
                    .connect(
                        target.info.redis_settings(),
                        timeout,
                        self.timeout,
                        logs_in_with_call,
                    )
                    .await;
                let conn = match opened {
                    Ok(conn) => conn,
                    Err(err) => return Err(self.refused(&err, timeout).await),
                };
                self.conn = Some(Conn::Cluster(Box::new(conn)));
            }
        }
        Ok(())
    }

    /// Forgets the connection after a failure, and with it which server the
    /// sentinels named.
    fn drop_connection(&mut self) {
        self.conn = None;
        self.login.take();
        self.primary = None;
        self.pushes = None;
    }

    /// Runs one script call within the session's timeout.
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &mut self,
        call: &impl Request,
    ) -> Result<T, RedisError> {
        let started = Instant::now();
        let mut asked_again = false;
        let mut asking = self.asking_sentinels_again(started);
        loop {
            let left = self.timeout.saturating_sub(started.elapsed());
            self.open_within(left).await?;
            let current = self.primary.as_ref().map(|primary| primary.named.clone());
            let watching = self.watching_sentinels();
            let Some(conn) = self.conn.as_mut() else {
                return Err(self.target.timed_out(self.timeout));
            };
            let left = self.timeout.saturating_sub(started.elapsed());
            // Decoded here rather than by the crate, so that a reply of the
            // wrong shape is told apart from a server that is not Redis.
            let mut conn = FirstCall::new(
                conn,
                self.login.take(),
                self.primary.as_mut().is_some_and(Primary::role_asked),
            );
            let sent = tokio::time::timeout(left, call.send(&mut conn, &mut self.scripts));
            let sent = unless_named_other(sent, watching);
            let (result, named) = match (asking.take(), &current) {
                (Some(asking), Some(current)) => {
                    let (result, named) = beside(sent, asking, current).await;
                    (result, Some(named))
                }
                _ => (Some(sent.await), None),
            };
            // Named while the call waited: the call is left unanswered.
            let (result, named) = match result {
                Some(Err(other)) => (None, Some(Some(other))),
                Some(Ok(result)) => (Some(result), named),
                None => (None, named),
            };
            let not_primary = conn.not_primary;
            let moved = match named {
                Some(named) => {
                    self.keep_sentinel(named.as_ref());
                    named.is_some_and(|(named, _)| Some(named) != current)
                }
                None => false,
            };
            // A server the sentinels no longer name, or that said it is not
            // a primary: its reply, whatever it was, is not trusted. Once,
            // the call goes where the sentinels point now.
            if moved || not_primary {
                let node = self.primary_node();
                if not_primary {
                    self.role_check = RoleCheck::First;
                }
                self.drop_connection();
                if !asked_again {
                    asked_again = true;
                    continue;
                }
                return Err(self.target.failure(
                    ErrorKind::Transient(Unready::Failover),
                    NOT_PRIMARY,
                    node.as_deref(),
                ));
            }
            let Some(result) = result else {
                return Err(self.target.timed_out(self.timeout));
            };
            match result {
                Ok(Ok(value)) => {
                    self.answered = true;
                    return T::from_redis_value(value)
                        .map_err(|err| self.target.unexpected_reply(&err.to_string()));
                }
                // A leftover redirection ran nothing, and the cluster
                // client's map of the slots is fresher now: try again,
                // within the same time limit.
                Ok(Err(err))
                    if self.target.leftover_redirection(&err)
                        && started.elapsed() + REDIRECTION_PAUSE < self.timeout =>
                {
                    tokio::time::sleep(REDIRECTION_PAUSE).await;
                }
                // The crate's response timer races ours; either way, it is ours.
                Ok(Err(err)) if !err.is_timeout() => {
                    let error = if self.answered {
                        self.error(&err)
                    } else {
                        self.refused(&err, self.timeout).await
                    };
                    self.drop_connection();
                    // A primary that Sentinel demoted refuses the write
                    // before changing anything: ask the sentinels again and
                    // retry at once, within the same time limit.
                    let demoted = is_read_only(&err);
                    if demoted
                        && !asked_again
                        && matches!(self.target.topology, Topology::Sentinel(_))
                    {
                        asked_again = true;
                        continue;
                    }
                    return Err(error);
                }
                // Sent on an open connection: the server is there.
                Ok(Err(_)) | Err(_) => {
                    self.drop_connection();
                    return Err(self.target.unanswered(self.timeout));
                }
            }
        }
    }

    /// Behind Sentinel, whether the sentinels still name the open
    /// connection's server as the primary: asked on the kept connection to
    /// a sentinel, beside a call (`beside`), which a server they no longer
    /// name does not answer for. A demoted primary may go on accepting
    /// writes for a while (after a manual failover, Redis 7 kept the old one
    /// a primary for 10 s; across a network partition, for as long as it
    /// lasts): renewing there would keep a lease that the new primary lets
    /// lapse. At most a third of the call's time goes to asking; when no
    /// sentinel answers, the current primary is kept. `None` when there is
    /// nothing to ask: a connection that has answered no call yet was
    /// opened moments ago on the sentinels' word, for this call or the
    /// connect just before it, and asking again would tell nothing new.
    fn asking_sentinels_again(
        &self,
        started: Instant,
    ) -> Option<impl Future<Output = Option<Named>> + use<>> {
        let (Topology::Sentinel(sentinels), Some(_), true) =
            (&self.target.topology, self.conn.as_ref(), self.answered)
        else {
            return None;
        };
        let kept = self
            .primary
            .as_ref()
            .and_then(|primary| primary.sentinel.clone());
        let sentinels = sentinels.clone();
        let within = self.timeout.saturating_sub(started.elapsed()) / 3;
        Some(async move {
            tokio::time::timeout(within, sentinels.named_again(kept, within))
                .await
                .ok()
                .flatten()
        })
    }

    /// Behind Sentinel, the server the sentinels name once they name one
    /// other than the open connection's, asked again and again while a call
    /// on it waits (`Sentinels::named_other_than`).
    fn watching_sentinels(&self) -> Option<impl Future<Output = Named> + use<>> {
        let (Topology::Sentinel(sentinels), Some(primary)) =
            (&self.target.topology, self.primary.as_ref())
        else {
            return None;
        };
        let (sentinels, current, kept) = (
            sentinels.clone(),
            primary.named.clone(),
            primary.sentinel.clone(),
        );
        let timeout = self.timeout;
        // Boxed: inline, it took every call's future past 16 KiB.
        Some(Box::pin(async move {
            sentinels.named_other_than(&current, kept, timeout).await
        }))
    }

    /// Keeps the connection to the sentinel that answered, `named`'s; with
    /// no answer, none, so that the next question goes to every sentinel
    /// afresh.
    fn keep_sentinel(&mut self, named: Option<&Named>) {
        if let Some(primary) = self.primary.as_mut() {
            primary.sentinel = named.map(|(_, sentinel)| sentinel.clone());
        }
    }

    /// Drops a connection to a server that the sentinels no longer name,
    /// asking them before a call that cannot go beside the question.
    async fn follow_sentinels(&mut self, started: Instant) {
        let Some(asking) = self.asking_sentinels_again(started) else {
            return;
        };
        let named = asking.await;
        self.keep_sentinel(named.as_ref());
        let current = self.primary.as_ref().map(|primary| &primary.named);
        if named.is_some_and(|(named, _)| Some(&named) != current) {
            self.drop_connection();
        }
    }

    /// Asks the server that took the last script call to wait until
    /// `replicas` of its replicas have every write so far (Redis `WAIT`), within what
    /// is left of the time limit of the call that began at `started`. In a
    /// cluster that server is the node owning `key`'s slot, or the one whose
    /// id is `node`. Returns how many replicas acknowledged; a server that
    /// does not know WAIT is `ErrorKind::NoWait`.
    pub(crate) async fn replicate(
        &mut self,
        key: &str,
        node: Option<&str>,
        replicas: u32,
        started: Instant,
    ) -> Result<u32, RedisError> {
        let left = self.timeout.saturating_sub(started.elapsed());
        // WAIT's own limit ends well before lockrun's, so that slow replicas
        // give a count rather than a timeout: Redis notices a blocked
        // client's timeout only at its next event-loop turn, up to 100 ms
        // late (hz 10). WAIT 0 would mean no limit at all.
        let limit_ms = whole(left / 2, MS);
        let Some(conn) = self.conn.as_mut().filter(|_| limit_ms > 0) else {
            return Ok(0);
        };
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(limit_ms);
        let waited = async {
            match conn {
                Conn::Single(conn) => wait.query_async::<i64>(conn).await,
                // Only the primary owning the key (or named) took the write.
                Conn::Cluster(nodes) => nodes.wait(key, node, wait).await,
            }
        };
        match tokio::time::timeout(left, waited).await {
            Ok(Ok(acked)) => Ok(u32::try_from(acked).unwrap_or(0)),
            // The connection is sound: the server only lacks WAIT.
            Ok(Err(err)) if is_unknown_command(&err) => Err(self.target.failure(
                ErrorKind::NoWait,
                "unknown command",
                self.primary_node().as_deref(),
            )),
            Ok(Err(err)) => {
                let error = self.error(&err);
                self.drop_connection();
                Err(error)
            }
            // The write went through; only the count came too late.
            Err(_) => {
                let error = self.unacknowledged(0, replicas);
                self.drop_connection();
                Err(error)
            }
        }
    }

    /// The failure of a write that fewer replicas than `wanted` acknowledged.
    pub(crate) fn unacknowledged(&self, acked: u32, wanted: u32) -> RedisError {
        let detail = format!(
            "only {acked} of {wanted} replicas acknowledged the write within --redis-timeout {}",
            show_exact(self.timeout)
        );
        self.target.failure(
            ErrorKind::Transient(Unready::Replicas),
            &detail,
            self.primary_node().as_deref(),
        )
    }

    /// Every key matching `pattern` (a Redis glob), by `SCAN`: on the one
    /// server, the primary the sentinels name, or each primary of a cluster
    /// in turn. Each call has the session's time limit. A key present
    /// throughout is found; one added or removed meanwhile may not be.
    pub(crate) async fn scan(&mut self, pattern: &str) -> Result<Vec<String>, RedisError> {
        self.follow_sentinels(Instant::now()).await;
        self.open_within(self.timeout).await?;
        let nodes = match self.conn.as_mut() {
            Some(Conn::Cluster(nodes)) => nodes.primaries().into_iter().map(Some).collect(),
            _ => vec![None],
        };
        let mut keys = Vec::new();
        for node in nodes {
            let mut cursor = 0;
            loop {
                let (next, found) = self.scan_once(node.as_ref(), cursor, pattern).await?;
                // A lock's name is text (`--key` takes nothing else).
                keys.extend(
                    found
                        .into_iter()
                        .filter_map(|key| String::from_utf8(key).ok()),
                );
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(keys)
    }

    /// One `SCAN` call from `cursor`, on `node` in a cluster: the next
    /// cursor (0 at the end) and the keys found.
    async fn scan_once(
        &mut self,
        node: Option<&(String, u16)>,
        cursor: u64,
        pattern: &str,
    ) -> Result<(u64, Vec<Vec<u8>>), RedisError> {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let Some(conn) = self.conn.as_mut() else {
            return Err(self.target.timed_out(self.timeout));
        };
        let (auth, role) = (
            self.login.take(),
            self.primary.as_mut().is_some_and(Primary::role_asked),
        );
        let mut not_primary = false;
        let sent = async {
            match (conn, node) {
                (Conn::Cluster(nodes), Some(node)) => nodes.on_node(&scan, node).await,
                (conn, _) => {
                    let mut conn = FirstCall::new(conn, auth, role);
                    let reply = scan.query_async::<Value>(&mut conn).await;
                    not_primary = conn.not_primary;
                    reply
                }
            }
        };
        let result = tokio::time::timeout(self.timeout, sent).await;
        match result {
            // A replica's keys may be stale: ask the sentinels again first.
            Ok(Err(_)) if not_primary => {
                let node = self.primary_node();
                self.role_check = RoleCheck::First;
                self.drop_connection();
                Err(self.target.failure(
                    ErrorKind::Transient(Unready::Failover),
                    NOT_PRIMARY,
                    node.as_deref(),
                ))
            }
            Ok(Ok(value)) => redis::from_redis_value(value)
                .map_err(|err| self.target.unexpected_reply(&err.to_string())),
            Ok(Err(err)) => Err(self.failed(&err)),
            Err(_) => Err(self.failed_to_answer()),
        }
    }

    /// A call's failure, the connection dropped so that the next starts
    /// afresh.
    fn failed(&mut self, err: &redis::RedisError) -> RedisError {
        let error = self.error(err);
        self.drop_connection();
        error
    }

    fn failed_to_answer(&mut self) -> RedisError {
        self.drop_connection();
        self.target.unanswered(self.timeout)
    }

    /// The server that holds `key`, `host:port` or a socket path, for the
    /// operator: the server in the URL, the primary the sentinels named, or
    /// the cluster node that owns the key's slot. `None` when that cannot be
    /// told.
    pub(crate) async fn node_for(&mut self, key: &str) -> Option<String> {
        match (&self.target.topology, self.conn.as_mut()) {
            (Topology::Single, _) => Some(show_addr(self.target.info.addr(), false)),
            (Topology::Sentinel(_), _) => self.primary_node(),
            (Topology::Cluster(_), Some(Conn::Cluster(nodes))) => {
                tokio::time::timeout(self.timeout, nodes.owner_of(key))
                    .await
                    .ok()
                    .flatten()
                    .map(|node| node.addr)
            }
            (Topology::Cluster(_), _) => None,
        }
    }
}

/// The outcome of `sent`, a call, and what the sentinels say of the primary,
/// asked at the same time (`asking`). When they name a server other than
/// `current` before the call is answered, the call is left unanswered
/// (`None`): a stalled old primary costs no more than the question.
async fn beside<R>(
    sent: impl Future<Output = R>,
    asking: impl Future<Output = Option<Named>>,
    current: &(String, u16),
) -> (Option<R>, Option<Named>) {
    let (mut sent, mut asking) = (std::pin::pin!(sent), std::pin::pin!(asking));
    tokio::select! {
        result = &mut sent => (Some(result), asking.await),
        named = &mut asking => {
            if named.as_ref().is_some_and(|(named, _)| named != current) {
                (None, named)
            } else {
                (Some(sent.await), named)
            }
        }
    }
}

/// The outcome of `sent`, a call, unless `watching` yields first: the
/// server the sentinels name instead of the one the call waits on.
async fn unless_named_other<R>(
    sent: impl Future<Output = R>,
    watching: Option<impl Future<Output = Named>>,
) -> Result<R, Named> {
    let Some(watching) = watching else {
        return Ok(sent.await);
    };
    tokio::select! {
        biased;
        result = sent => Ok(result),
        other = watching => Err(other),
    }
}

/// Opens one connection to the server at `info`, over TLS with `tls`
/// (`tls.rs` says why lockrun opens that itself); every call on it is
/// limited to `timeout`.
pub(super) async fn connect(
    info: &ConnectionInfo,
    tls: Option<&Tls>,
    timeout: Duration,
) -> redis::RedisResult<MultiplexedConnection> {
    open(info, tls, call_limits(timeout), timeout).await
}

/// Opens one connection to the server at `info` like `connect`; with
/// `pushes`, one that speaks RESP3 and hands its push messages over.
pub(super) async fn connect_carrying(
    info: &ConnectionInfo,
    tls: Option<&Tls>,
    timeout: Duration,
    pushes: bool,
) -> redis::RedisResult<(MultiplexedConnection, Option<Pushes>)> {
    if !pushes {
        return Ok((connect(info, tls, timeout).await?, None));
    }
    let (info, config, pushes) = pushes::carried(info, call_limits(timeout));
    Ok((open(&info, tls, config, timeout).await?, Some(pushes)))
}

async fn open(
    info: &ConnectionInfo,
    tls: Option<&Tls>,
    config: AsyncConnectionConfig,
    timeout: Duration,
) -> redis::RedisResult<MultiplexedConnection> {
    match (info.addr(), tls) {
        (
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                ..
            },
            Some(tls),
        ) => tokio::time::timeout(
            timeout,
            tls.connect((host, *port), info.redis_settings(), config),
        )
        .await
        .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into())),
        _ => {
            Client::open(info.clone())?
                .get_multiplexed_async_connection_with_config(&config)
                .await
        }
    }
}

/// Connect and response limits for the redis crate, so that its own limits
/// never outlast lockrun's.
fn call_limits(timeout: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
}
