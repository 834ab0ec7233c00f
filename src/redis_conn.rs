//! Where Redis is and how to talk to it: URL parsing with passwords kept
//! out of every message, a connection that is re-established after a failure,
//! and a time limit on every call.
//!
//! Three kinds of target: one server (`redis://`, `rediss://`, `unix://`), the
//! primary that Redis Sentinel names (`sentinel`), and a Redis Cluster
//! (`cluster`). Whichever it is, a `Session` runs a script on the server that
//! owns the lock's keys, and after the script can ask that server to `WAIT`
//! for its replicas.

mod cluster;
mod hosts;
mod sentinel;

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo,
    ServerErrorKind,
};
use tokio::time::Instant;

use crate::clock::show;

use self::cluster::Seeds;
use self::hosts::{MultiHost, Scheme};
use self::sentinel::Sentinels;

/// A `--redis` URL that lockrun cannot use. It never echoes the URL, which
/// may hold a password.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct InvalidUrl;

impl fmt::Display for InvalidUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "invalid Redis URL in --redis or LOCKRUN_REDIS_URL; expected \
             redis://[user:password@]host[:port][/db], rediss://... (TLS), \
             unix:///path/to/redis.sock, \
             redis+sentinel://[user:password@]host[:port][,host[:port]...]/service[/db] \
             or redis+cluster://[user:password@]host[:port][,host[:port]...] \
             (rediss+sentinel://, rediss+cluster:// for TLS)",
        )
    }
}

impl std::error::Error for InvalidUrl {}

/// A parsed Redis address plus credentials.
#[derive(Clone)]
pub(crate) struct Target {
    /// Credentials, database and TLS of the servers holding the lock; for a
    /// single server, its address too.
    info: ConnectionInfo,
    topology: Topology,
}

/// How lockrun finds the server that holds a lock.
#[derive(Clone)]
enum Topology {
    /// The one server at `Target::info`'s address.
    Single,
    /// The primary the sentinels name, asked again after every failure.
    Sentinel(Sentinels),
    /// The cluster node that owns the keys' slot.
    Cluster(Seeds),
}

impl fmt::Debug for Target {
    // Hand-written so that the password can never reach a debug print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Target({self})")
    }
}

impl fmt::Display for Target {
    /// The address without any credentials, for messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.topology {
            Topology::Single => f.write_str(&show_addr(self.info.addr(), true)),
            Topology::Sentinel(sentinels) => sentinels.fmt(f),
            Topology::Cluster(seeds) => seeds.fmt(f),
        }
    }
}

/// An address for messages: with its scheme as a URL, or as `host:port`.
fn show_addr(addr: &ConnectionAddr, as_url: bool) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) if as_url => {
            format!("redis://{}", hosts::authority(host, *port))
        }
        ConnectionAddr::TcpTls { host, port, .. } if as_url => {
            format!("rediss://{}", hosts::authority(host, *port))
        }
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            hosts::authority(host, *port)
        }
        ConnectionAddr::Unix(path) if as_url => format!("unix://{}", path.display()),
        ConnectionAddr::Unix(path) => path.display().to_string(),
        other => other.to_string(),
    }
}

impl Target {
    /// Parses `url`; `password` (from LOCKRUN_REDIS_PASSWORD) overrides any
    /// password in the URL.
    pub(crate) fn parse(url: &str, password: Option<String>) -> Result<Self, InvalidUrl> {
        // The redis crate reads a bare "host:port" as a URL with a scheme of
        // "host"; insist on a scheme so a typo cannot go somewhere unexpected.
        if !url.contains("://") {
            return Err(InvalidUrl);
        }
        let (mut info, topology) = match MultiHost::parse(url) {
            None => (
                url.into_connection_info().map_err(|_| InvalidUrl)?,
                Topology::Single,
            ),
            Some(multi) => {
                let multi = multi?;
                match multi.scheme {
                    Scheme::Sentinel => {
                        let (sentinels, info) = Sentinels::from_url(&multi)?;
                        (info, Topology::Sentinel(sentinels))
                    }
                    Scheme::Cluster => {
                        let (seeds, info) = Seeds::from_url(&multi)?;
                        (info, Topology::Cluster(seeds))
                    }
                }
            }
        };
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        if let Some(password) = password.filter(|p| !p.is_empty()) {
            settings = settings.set_password(password);
        }
        info = info.set_redis_settings(settings);
        Ok(Target { info, topology })
    }

    /// Sets the password the sentinels themselves want (from
    /// LOCKRUN_SENTINEL_PASSWORD); other targets ignore it.
    #[must_use]
    pub(crate) fn with_sentinel_password(mut self, password: Option<String>) -> Self {
        if let (Topology::Sentinel(sentinels), Some(password)) =
            (&mut self.topology, password.filter(|p| !p.is_empty()))
        {
            sentinels.set_password(password);
        }
        self
    }

    /// Whether the URL names a replicated setup (Sentinel or Cluster), where
    /// waiting for replicas is the default.
    pub(crate) fn is_replicated(&self) -> bool {
        !matches!(self.topology, Topology::Single)
    }

    fn password(&self) -> Option<&str> {
        self.info.redis_settings().password()
    }

    /// Opens one connection to the server at `info`; every call on it is
    /// limited to `timeout`.
    async fn connect_to(
        &self,
        info: &ConnectionInfo,
        timeout: Duration,
    ) -> Result<MultiplexedConnection, redis::RedisError> {
        let client = Client::open(info.clone())?;
        client
            .get_multiplexed_async_connection_with_config(&call_limits(timeout))
            .await
    }

    pub(crate) fn error(&self, err: &redis::RedisError) -> RedisError {
        self.error_at(err, None)
    }

    /// `err` from the server `node` (when lockrun knows which), classified,
    /// with a hint when the URL looks like the cause.
    fn error_at(&self, err: &redis::RedisError, node: Option<&str>) -> RedisError {
        // Some errors span lines (a parser's report of what it got instead
        // of a reply); every lockrun message is one line.
        let mut detail = err
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(hint) = self.hint(err) {
            detail = format!("{detail}; {hint}");
        }
        self.failure(self.classify(err), &detail, node)
    }

    /// A failure described by lockrun itself, at `node` if known. Every
    /// password is masked, however the detail came to hold it.
    fn failure(&self, kind: ErrorKind, detail: &str, node: Option<&str>) -> RedisError {
        let mut detail = detail.to_owned();
        let secrets = [self.password(), self.sentinel_password()];
        for secret in secrets.into_iter().flatten() {
            detail = detail.replace(secret, "***");
        }
        let target = match node {
            Some(node) => format!("{self} (primary {node})"),
            None => self.to_string(),
        };
        RedisError {
            kind,
            target,
            detail,
            timed_out: None,
        }
    }

    fn sentinel_password(&self) -> Option<&str> {
        match &self.topology {
            Topology::Sentinel(sentinels) => sentinels.password(),
            Topology::Single | Topology::Cluster(_) => None,
        }
    }

    /// What an error means for lockrun, by the reply's error code where
    /// there is one.
    fn classify(&self, err: &redis::RedisError) -> ErrorKind {
        use ServerErrorKind as Code;
        if is_auth_error(err) {
            return if self.password().is_some() {
                ErrorKind::Auth
            } else {
                ErrorKind::NoPassword
            };
        }
        if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
            return ErrorKind::Unreachable;
        }
        let replicated = self.is_replicated();
        match err.kind() {
            redis::ErrorKind::Server(Code::BusyLoading) => ErrorKind::Transient(Unready::Loading),
            redis::ErrorKind::Server(Code::TryAgain) => ErrorKind::Transient(Unready::TryAgain),
            redis::ErrorKind::Server(Code::MasterDown) => ErrorKind::Transient(Unready::MasterDown),
            // The cluster is healing: a later call may succeed.
            redis::ErrorKind::Server(Code::ClusterDown) => {
                ErrorKind::Transient(Unready::ClusterDown)
            }
            // Behind Sentinel or in a cluster, a demoted primary or a moved
            // slot is a failover under way, not a wrong URL.
            redis::ErrorKind::Server(Code::ReadOnly | Code::Moved | Code::Ask) if replicated => {
                ErrorKind::Transient(Unready::Failover)
            }
            redis::ErrorKind::Server(Code::ReadOnly) => ErrorKind::ReadOnly,
            // `Session::invoke` decodes replies itself, so a parse error
            // here is the wire protocol's: whatever answered is not Redis.
            redis::ErrorKind::Parse => ErrorKind::NotRedis,
            // The crate knows no code of its own for these two.
            _ if err.code() == Some("BUSY") => ErrorKind::Transient(Unready::Busy),
            // min-replicas-to-write: too few replicas are connected right now.
            _ if err.code() == Some("NOREPLICAS") => ErrorKind::Transient(Unready::Replicas),
            _ => ErrorKind::Server,
        }
    }

    /// What to change when a one-server URL reaches a server that is part of
    /// a replicated setup.
    fn hint(&self, err: &redis::RedisError) -> Option<String> {
        if self.is_replicated() {
            return None;
        }
        match err.kind() {
            redis::ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask) => {
                let (scheme, at) = match self.info.addr() {
                    ConnectionAddr::TcpTls { .. } => ("rediss", show_addr(self.info.addr(), false)),
                    ConnectionAddr::Tcp(..) => ("redis", show_addr(self.info.addr(), false)),
                    _ => ("redis", "HOST:PORT".to_owned()),
                };
                Some(format!(
                    "this is a Redis Cluster node; use --redis {scheme}+cluster://{at}"
                ))
            }
            _ => None,
        }
    }

    pub(crate) fn timed_out(&self, after: Duration) -> RedisError {
        RedisError {
            timed_out: Some(after),
            ..self.failure(
                ErrorKind::Unreachable,
                &format!("no answer within {}", show(after)),
                None,
            )
        }
    }

    /// `err`, unless it is the crate's own timer, which races lockrun's:
    /// either way the call got no answer within `after`.
    fn call_error(&self, err: &redis::RedisError, after: Duration) -> RedisError {
        if err.is_timeout() {
            self.timed_out(after)
        } else {
            self.error(err)
        }
    }

    /// A reply that is not what the script returns.
    pub(crate) fn unexpected_reply(&self, detail: &str) -> RedisError {
        self.failure(
            ErrorKind::Server,
            &format!("unexpected reply: {detail}"),
            None,
        )
    }
}

/// Connect and response limits for the redis crate, so that its own limits
/// never outlast lockrun's.
fn call_limits(timeout: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
}

fn is_auth_error(err: &redis::RedisError) -> bool {
    if err.kind() == redis::ErrorKind::AuthenticationFailed {
        return true;
    }
    let text = err.to_string();
    // A server with a password answers a client that sent none with NOAUTH,
    // or, for a command with many arguments (our scripts), with a protocol
    // error about an "unauthenticated" request.
    [
        "NOAUTH",
        "WRONGPASS",
        "invalid password",
        "invalid username-password",
        "unauthenticated",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// Could not connect, the connection broke, or no answer in time.
    Unreachable,
    /// The server wants a password and was given none.
    NoPassword,
    /// The server refused the password it was given.
    Auth,
    /// Whatever answered does not speak the Redis protocol.
    NotRedis,
    /// Redis answered, but cannot serve the lock yet: asking again later
    /// may work.
    Transient(Unready),
    /// A replica reached through a one-server URL, which takes no writes.
    ReadOnly,
    /// The server answered with an error.
    Server,
    /// In a quorum, too few servers could vote for a majority: unreachable,
    /// failing, or restarted too recently.
    NoMajority,
}

/// Why a Redis that answers cannot serve the lock yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unready {
    /// LOADING: reading its data set after a restart.
    Loading,
    /// BUSY: a script or function has run past the busy threshold.
    Busy,
    /// TRYAGAIN: a cluster slot is being migrated.
    TryAgain,
    /// MASTERDOWN: a replica that lost its primary.
    MasterDown,
    /// CLUSTERDOWN: the cluster is healing.
    ClusterDown,
    /// Behind Sentinel or in a cluster: a failover is under way.
    Failover,
    /// Too few replicas connected (NOREPLICAS) or acknowledging a write.
    Replicas,
}

/// A failed Redis call, with the address but never the password.
#[derive(Debug, Clone)]
pub(crate) struct RedisError {
    pub(crate) kind: ErrorKind,
    target: String,
    detail: String,
    /// For a call that got no answer: how long it waited.
    timed_out: Option<Duration>,
}

impl RedisError {
    /// Whether Redis said "not now" rather than "no": worth waiting through
    /// while nothing is held yet.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self.kind, ErrorKind::Transient(_))
    }

    /// A quorum of `of` servers in which only `able` could vote; `why`
    /// says what became of the others, one reason each.
    pub(crate) fn no_majority(able: usize, of: usize, why: &[String]) -> RedisError {
        RedisError {
            kind: ErrorKind::NoMajority,
            target: format!("{able} of {of}"),
            detail: why.join("; "),
            timed_out: None,
        }
    }

    /// This failure, followed by `later`, which giving back a lock the
    /// failed call may have taken ran into. Only a second wait is worth
    /// saying: it makes the line's "no answer within" add up to the time
    /// the operator saw pass.
    pub(crate) fn then_giving_back(mut self, later: &RedisError) -> RedisError {
        if let Some(waited) = later.timed_out {
            self.detail = format!(
                "{}, nor within {} more to giving back a lock that call may have taken",
                self.detail,
                show(waited)
            );
        }
        self
    }
}

impl fmt::Display for RedisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = &self.target;
        match self.kind {
            ErrorKind::Unreachable => write!(
                f,
                "cannot reach Redis at {target}: {}; check --redis (or LOCKRUN_REDIS_URL) and \
                 that the server is up",
                self.detail
            ),
            ErrorKind::NoPassword => write!(
                f,
                "Redis at {target} requires a password; give it in LOCKRUN_REDIS_PASSWORD, \
                 --redis-password-file or the URL"
            ),
            ErrorKind::Auth => write!(
                f,
                "Redis at {target} refused authentication: {}; give the password in \
                 LOCKRUN_REDIS_PASSWORD, --redis-password-file or the URL",
                self.detail
            ),
            ErrorKind::NotRedis => write!(
                f,
                "the server at {target} does not speak the Redis protocol; check --redis (or \
                 LOCKRUN_REDIS_URL)"
            ),
            ErrorKind::Transient(why) => {
                let state = match why {
                    Unready::Loading => "is loading its data set into memory (LOADING)",
                    Unready::Busy => {
                        "is busy running a script or function (BUSY) and serves nothing else \
                         until it ends or is killed"
                    }
                    Unready::TryAgain => "asks to try again (TRYAGAIN, a slot is migrating)",
                    Unready::MasterDown => {
                        "is a replica that lost its primary (MASTERDOWN) and serves nothing \
                         until it is back"
                    }
                    Unready::ClusterDown | Unready::Failover | Unready::Replicas => {
                        return write!(f, "Redis at {target} is unavailable: {}", self.detail);
                    }
                };
                write!(f, "Redis at {target} {state}; it cannot serve the lock yet")
            }
            ErrorKind::ReadOnly => write!(
                f,
                "Redis at {target} is a read-only replica (READONLY): this server is a replica; \
                 point --redis at the primary or use \
                 redis+sentinel://SENTINEL[,SENTINEL...]/SERVICE"
            ),
            ErrorKind::Server => write!(f, "Redis at {target} failed: {}", self.detail),
            ErrorKind::NoMajority => write!(
                f,
                "no majority of the Redis servers agrees, only {target}: {}",
                self.detail
            ),
        }
    }
}

impl std::error::Error for RedisError {}

/// One request to Redis, sent on a session's connection: a script call. It
/// returns the raw reply, which the session decodes.
pub(crate) trait Request {
    async fn send(&self, conn: &mut impl ConnectionLike) -> redis::RedisResult<redis::Value>;
}

/// An open connection: to one server, or to a cluster.
enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
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
    primary: Option<ConnectionInfo>,
}

impl Session {
    pub(crate) fn new(target: Target, timeout: Duration) -> Self {
        Session {
            target,
            timeout,
            conn: None,
            primary: None,
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
            .map(|info| show_addr(info.addr(), false))
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
        let target = &self.target;
        match &target.topology {
            Topology::Single => {
                let conn = target
                    .connect_to(&target.info, timeout)
                    .await
                    .map_err(|err| target.call_error(&err, timeout))?;
                self.conn = Some(Conn::Single(conn));
            }
            Topology::Sentinel(sentinels) => {
                let found = sentinels
                    .primary(target.info.redis_settings(), timeout)
                    .await
                    .map_err(|failure| failure.into_error(target))?;
                self.conn = Some(Conn::Single(found.conn));
                self.primary = Some(found.info);
            }
            Topology::Cluster(seeds) => {
                let conn = seeds
                    .connect(target.info.redis_settings(), timeout)
                    .await
                    .map_err(|err| target.error(&err))?;
                self.conn = Some(Conn::Cluster(conn));
            }
        }
        Ok(())
    }

    /// Forgets the connection after a failure, and with it which server the
    /// sentinels named.
    fn drop_connection(&mut self) {
        self.conn = None;
        self.primary = None;
    }

    /// Runs one script call within the session's timeout.
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &mut self,
        call: &impl Request,
    ) -> Result<T, RedisError> {
        let started = Instant::now();
        let mut asked_again = false;
        self.follow_sentinels(started).await;
        loop {
            let left = self.timeout.saturating_sub(started.elapsed());
            self.open_within(left).await?;
            let Some(conn) = self.conn.as_mut() else {
                return Err(self.target.timed_out(self.timeout));
            };
            let left = self.timeout.saturating_sub(started.elapsed());
            // Decoded here rather than by the crate, so that a reply of the
            // wrong shape is told apart from a server that is not Redis.
            let result = tokio::time::timeout(left, call.send(conn)).await;
            match result {
                Ok(Ok(value)) => {
                    return T::from_redis_value(value)
                        .map_err(|err| self.target.unexpected_reply(&err.to_string()))
                }
                // The crate's response timer races ours; either way, it is ours.
                Ok(Err(err)) if !err.is_timeout() => {
                    let error = self.error(&err);
                    self.drop_connection();
                    // A primary that Sentinel demoted refuses the write
                    // before running anything: ask the sentinels again and
                    // retry at once, within the same time limit.
                    let demoted = err.kind() == redis::ErrorKind::Server(ServerErrorKind::ReadOnly);
                    if demoted
                        && !asked_again
                        && matches!(self.target.topology, Topology::Sentinel(_))
                    {
                        asked_again = true;
                        continue;
                    }
                    return Err(error);
                }
                Ok(Err(_)) | Err(_) => {
                    self.drop_connection();
                    return Err(self.target.timed_out(self.timeout));
                }
            }
        }
    }

    /// Behind Sentinel, drops a connection to a server that the sentinels no
    /// longer name as the primary. A demoted primary may go on accepting
    /// writes for a while (after a manual failover, Redis 7 kept the old one
    /// a primary for 10 s; across a network partition, for as long as it
    /// lasts): renewing there would keep a lease that the new primary lets
    /// lapse. At most a third of the call's time goes to asking; when no
    /// sentinel answers, the current primary is kept.
    async fn follow_sentinels(&mut self, started: Instant) {
        let (Topology::Sentinel(sentinels), Some(current)) =
            (&self.target.topology, self.primary_node())
        else {
            return;
        };
        let within = self.timeout.saturating_sub(started.elapsed()) / 3;
        if let Ok(Some(named)) = tokio::time::timeout(within, sentinels.named(within)).await {
            if named != current {
                self.drop_connection();
            }
        }
    }

    /// Asks the server that took the last script call to wait until
    /// `replicas` of its replicas have every write so far (Redis `WAIT`), within what
    /// is left of the time limit of the call that began at `started`.
    /// Returns how many replicas acknowledged.
    pub(crate) async fn replicate(
        &mut self,
        key: &str,
        replicas: u32,
        started: Instant,
    ) -> Result<u32, RedisError> {
        let left = self.timeout.saturating_sub(started.elapsed());
        // WAIT's own limit ends well before lockrun's, so that slow replicas
        // give a count rather than a timeout: Redis notices a blocked
        // client's timeout only at its next event-loop turn, up to 100 ms
        // late (hz 10). WAIT 0 would mean no limit at all.
        let limit_ms = u64::try_from((left / 2).as_millis()).unwrap_or(u64::MAX);
        let Some(conn) = self.conn.as_mut().filter(|_| limit_ms > 0) else {
            return Ok(0);
        };
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(limit_ms);
        let waited = async {
            match conn {
                Conn::Single(conn) => wait.query_async::<i64>(conn).await,
                // The crate would send a bare WAIT to every primary; only the
                // one owning the key took the write.
                Conn::Cluster(conn) => cluster::wait(conn, key, wait).await,
            }
        };
        match tokio::time::timeout(left, waited).await {
            Ok(Ok(acked)) => Ok(u32::try_from(acked).unwrap_or(0)),
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
            show(self.timeout)
        );
        self.target.failure(
            ErrorKind::Transient(Unready::Replicas),
            &detail,
            self.primary_node().as_deref(),
        )
    }

    /// Subscribes to `channel` on a connection of its own, within `within`,
    /// on the server where the lock's scripts run and publish: the one
    /// server, the primary the sentinels name, or the cluster node that owns
    /// the channel's slot (a channel named with the lock's hash tag has the
    /// lock's slot). There, a script's `PUBSUB NUMSUB` counts this
    /// subscriber, which tells a live waiter from a dead one.
    pub(crate) async fn subscribe(
        &mut self,
        channel: &str,
        within: Duration,
    ) -> Result<PubSub, RedisError> {
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
            Ok(Ok(pubsub)) => Ok(pubsub),
            Ok(Err(err)) => Err(self.error(&err)),
            Err(_) => Err(self.target.timed_out(within)),
        }
    }

    /// The server that holds `key`, `host:port` or a socket path, for the
    /// operator: the server in the URL, the primary the sentinels named, or
    /// the cluster node that owns the key's slot. `None` when that cannot be
    /// told.
    pub(crate) async fn node_for(&mut self, key: &str) -> Option<String> {
        match (&self.target.topology, self.conn.as_mut()) {
            (Topology::Single, _) => Some(show_addr(self.target.info.addr(), false)),
            (Topology::Sentinel(_), _) => self.primary_node(),
            (Topology::Cluster(_), Some(Conn::Cluster(conn))) => {
                tokio::time::timeout(self.timeout, cluster::node_for(conn, key))
                    .await
                    .ok()
                    .flatten()
            }
            (Topology::Cluster(_), _) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_never_show_the_password() {
        let target = Target::parse("redis://user:s3cret@db.example:6380/2", None).expect("valid");
        assert_eq!(target.to_string(), "redis://db.example:6380");
        assert!(!format!("{target:?}").contains("s3cret"));
        let err = target.error(&redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "WRONGPASS s3cret",
        )));
        assert_eq!(err.kind, ErrorKind::Auth);
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }

    #[test]
    fn errors_fit_on_one_line() {
        let target = Target::parse("redis://h:1", None).expect("valid");
        let err = target.error(&redis::RedisError::from((
            redis::ErrorKind::Parse,
            "Parse error",
            "at 1\nUnexpected `84`\n".to_string(),
        )));
        assert_eq!(err.to_string().lines().count(), 1, "{err}");
    }

    #[test]
    fn replies_are_classified_by_their_code() {
        use redis::ServerErrorKind as Code;
        let target = Target::parse("redis://h:1", None).expect("valid");
        let kind = |err: redis::RedisError| target.error(&err).kind;
        let server = |code| redis::RedisError::from((redis::ErrorKind::Server(code), "x"));
        assert_eq!(
            kind(server(Code::BusyLoading)),
            ErrorKind::Transient(Unready::Loading)
        );
        assert_eq!(
            kind(server(Code::TryAgain)),
            ErrorKind::Transient(Unready::TryAgain)
        );
        assert_eq!(
            kind(server(Code::MasterDown)),
            ErrorKind::Transient(Unready::MasterDown)
        );
        assert_eq!(kind(server(Code::ReadOnly)), ErrorKind::ReadOnly);
        assert_eq!(kind(server(Code::ResponseError)), ErrorKind::Server);
        let busy = redis::make_extension_error("BUSY".into(), Some("running a script".into()));
        assert_eq!(kind(busy), ErrorKind::Transient(Unready::Busy));
        let garbage = redis::RedisError::from((redis::ErrorKind::Parse, "Parse error"));
        assert_eq!(kind(garbage), ErrorKind::NotRedis);
        let noauth = || redis::make_extension_error("NOAUTH".into(), None);
        assert_eq!(kind(noauth()), ErrorKind::NoPassword);
        let with_password = Target::parse("redis://:pw@h:1", None).expect("valid");
        assert_eq!(with_password.error(&noauth()).kind, ErrorKind::Auth);
    }

    #[test]
    fn an_unanswered_give_back_adds_its_wait() {
        let target = Target::parse("redis://h:1", None).expect("valid");
        let second = Duration::from_secs(1);
        let line = target
            .timed_out(2 * second)
            .then_giving_back(&target.timed_out(second))
            .to_string();
        assert!(
            line.contains(
                "no answer within 2s, nor within 1s more to giving back a lock that call may \
                 have taken;"
            ),
            "{line}"
        );
        let refused = target.error(&redis::RedisError::from((
            redis::ErrorKind::Io,
            "Connection refused",
        )));
        let line = target
            .timed_out(second)
            .then_giving_back(&refused)
            .to_string();
        assert!(line.contains("no answer within 1s;"), "{line}");
    }

    #[test]
    fn password_from_environment_wins() {
        let target = Target::parse("redis://:old@h:1", Some("new".into())).expect("valid");
        assert_eq!(target.password(), Some("new"));
    }

    fn server_error(kind: ServerErrorKind, detail: &str) -> redis::RedisError {
        redis::RedisError::from((redis::ErrorKind::Server(kind), "server", detail.to_string()))
    }

    #[test]
    fn a_plain_url_at_a_cluster_node_or_replica_says_what_to_use() {
        let target = Target::parse("redis://10.0.0.5:7000", None).expect("valid");
        let moved = target.error(&server_error(ServerErrorKind::Moved, "5597 10.0.0.6:7001"));
        assert_eq!(moved.kind, ErrorKind::Server);
        assert!(
            moved.to_string().ends_with(
                "; this is a Redis Cluster node; use --redis redis+cluster://10.0.0.5:7000"
            ),
            "{moved}"
        );
        let readonly = target.error(&server_error(ServerErrorKind::ReadOnly, "replica"));
        assert!(
            readonly
                .to_string()
                .contains("this server is a replica; point --redis at the primary"),
            "{readonly}"
        );
        let tls = Target::parse("rediss://h:7000", None).expect("valid");
        let moved = tls.error(&server_error(ServerErrorKind::Ask, "1 h:7001"));
        assert!(
            moved.to_string().contains("rediss+cluster://h:7000"),
            "{moved}"
        );
    }

    #[test]
    fn failovers_and_a_cluster_healing_are_transient() {
        let single = Target::parse("redis://h:1", None).expect("valid");
        let sentinel = Target::parse("redis+sentinel://s1,s2/svc", None).expect("valid");
        let cluster = Target::parse("redis+cluster://c1:7000", None).expect("valid");
        for target in [&single, &sentinel, &cluster] {
            for kind in [ServerErrorKind::ClusterDown, ServerErrorKind::TryAgain] {
                assert!(target.error(&server_error(kind, "x")).is_transient());
            }
        }
        let readonly = server_error(ServerErrorKind::ReadOnly, "x");
        assert!(sentinel.error(&readonly).is_transient());
        assert!(!single.error(&readonly).is_transient());
        let moved = server_error(ServerErrorKind::Moved, "1 h:2");
        assert!(cluster.error(&moved).is_transient());
        assert!(!single.error(&moved).is_transient());
        assert!(!sentinel
            .error(&server_error(ServerErrorKind::ResponseError, "x"))
            .is_transient());
    }

    #[test]
    fn replicated_targets_show_every_host_and_no_password() {
        let target = Target::parse("redis+sentinel://u:data-pw@s1,s2:26380/svc/1", None)
            .expect("valid")
            .with_sentinel_password(Some("sentinel-pw".into()));
        assert!(target.is_replicated());
        assert_eq!(target.to_string(), "redis+sentinel://s1:26379,s2:26380/svc");
        let err = target.failure(
            ErrorKind::Server,
            "data-pw and sentinel-pw",
            Some("10.0.0.1:6379"),
        );
        assert_eq!(
            err.to_string(),
            "Redis at redis+sentinel://s1:26379,s2:26380/svc (primary 10.0.0.1:6379) failed: \
             *** and ***"
        );
        let cluster = Target::parse("rediss+cluster://:pw@c1,c2:7001", None).expect("valid");
        assert_eq!(cluster.to_string(), "rediss+cluster://c1:6379,c2:7001");
        assert!(!Target::parse("redis://h", None)
            .expect("valid")
            .is_replicated());
    }

    #[test]
    fn all_schemes_parse() {
        for url in [
            "redis://127.0.0.1:6379",
            "rediss://example.com:6380",
            "redis+unix:///tmp/r.sock",
            "unix:///tmp/r.sock",
            "redis+sentinel://10.0.0.1,10.0.0.2:26380/jobs",
            "rediss+sentinel://s.example/jobs/2",
            "redis+cluster://10.0.0.1:7000,10.0.0.2:7000",
            "rediss+cluster://c.example",
        ] {
            assert!(Target::parse(url, None).is_ok(), "{url}");
        }
        for url in [
            "localhost:6379",
            "http://x",
            "",
            "redis+sentinel://s1",
            "redis+cluster://c1/2",
        ] {
            assert!(Target::parse(url, None).is_err(), "{url}");
        }
    }
}
