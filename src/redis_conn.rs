//! Where Redis is and how to talk to it: URL parsing with the password kept
//! out of every message, a connection that is re-established after a failure,
//! and a time limit on every call.

use std::fmt;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::clock::show;

/// A `--redis` URL that lockrun cannot use. It never echoes the URL, which
/// may hold a password.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct InvalidUrl;

impl fmt::Display for InvalidUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "invalid Redis URL in --redis or LOCKRUN_REDIS_URL; expected \
             redis://[user:password@]host[:port][/db], rediss://... (TLS) or \
             unix:///path/to/redis.sock",
        )
    }
}

impl std::error::Error for InvalidUrl {}

/// A parsed Redis address plus credentials.
#[derive(Clone)]
pub(crate) struct Target {
    info: ConnectionInfo,
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
        match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => write!(f, "redis://{host}:{port}"),
            ConnectionAddr::TcpTls { host, port, .. } => write!(f, "rediss://{host}:{port}"),
            ConnectionAddr::Unix(path) => write!(f, "unix://{}", path.display()),
            other => write!(f, "{other}"),
        }
    }
}

impl Target {
    /// Parses `url`; `password` (from LOCKRUN_REDIS_PASSWORD or the password
    /// file) overrides any password in the URL.
    pub(crate) fn parse(url: &str, password: Option<String>) -> Result<Self, InvalidUrl> {
        // The redis crate reads a bare "host:port" as a URL with a scheme of
        // "host"; insist on a scheme so a typo cannot go somewhere unexpected.
        if !url.contains("://") {
            return Err(InvalidUrl);
        }
        let mut info = url.into_connection_info().map_err(|_| InvalidUrl)?;
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        if let Some(password) = password.filter(|p| !p.is_empty()) {
            settings = settings.set_password(password);
        }
        info = info.set_redis_settings(settings);
        Ok(Target { info })
    }

    fn password(&self) -> Option<&str> {
        self.info.redis_settings().password()
    }

    /// Opens one connection; every call on it is limited to `timeout`.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
    ) -> Result<MultiplexedConnection, RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let client = Client::open(self.info.clone()).map_err(|e| self.error(&e))?;
        // The crate's own timeout covers connect and handshake separately;
        // this one bounds the whole.
        match tokio::time::timeout(
            timeout,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        {
            Ok(Ok(conn)) => Ok(conn),
            // The crate's own timer races this one; either way, it is ours.
            Ok(Err(e)) if e.is_timeout() => Err(self.timed_out(timeout)),
            Ok(Err(e)) => Err(self.error(&e)),
            Err(_) => Err(self.timed_out(timeout)),
        }
    }

    /// A client for a second, subscribe-only connection.
    pub(crate) fn client(&self) -> Result<Client, RedisError> {
        Client::open(self.info.clone()).map_err(|e| self.error(&e))
    }

    pub(crate) fn error(&self, err: &redis::RedisError) -> RedisError {
        // Some errors span lines (a parser's report of what it got instead
        // of a reply); every lockrun message is one line.
        let mut detail = err
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(password) = self.password() {
            detail = detail.replace(password, "***");
        }
        RedisError {
            kind: self.classify(err),
            target: self.to_string(),
            detail,
            timed_out: None,
        }
    }

    /// What an error means for lockrun, by the reply's error code where
    /// there is one.
    fn classify(&self, err: &redis::RedisError) -> ErrorKind {
        use redis::ServerErrorKind as Code;
        match err.kind() {
            redis::ErrorKind::Server(Code::BusyLoading) => {
                return ErrorKind::Transient(Unready::Loading)
            }
            redis::ErrorKind::Server(Code::TryAgain) => {
                return ErrorKind::Transient(Unready::TryAgain)
            }
            redis::ErrorKind::Server(Code::MasterDown) => {
                return ErrorKind::Transient(Unready::MasterDown)
            }
            redis::ErrorKind::Server(Code::ReadOnly) => return ErrorKind::ReadOnly,
            // `Session::invoke` decodes replies itself, so a parse error
            // here is the wire protocol's: whatever answered is not Redis.
            redis::ErrorKind::Parse => return ErrorKind::NotRedis,
            _ => {}
        }
        // The crate knows no BUSY code of its own.
        if err.code() == Some("BUSY") {
            ErrorKind::Transient(Unready::Busy)
        } else if is_auth_error(err) {
            if self.password().is_some() {
                ErrorKind::Auth
            } else {
                ErrorKind::NoPassword
            }
        } else if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
            ErrorKind::Unreachable
        } else {
            ErrorKind::Server
        }
    }

    pub(crate) fn timed_out(&self, after: Duration) -> RedisError {
        RedisError {
            kind: ErrorKind::Unreachable,
            target: self.to_string(),
            detail: format!("no answer within {}", show(after)),
            timed_out: Some(after),
        }
    }

    /// A reply that is not what the script returns.
    pub(crate) fn unexpected_reply(&self, detail: &str) -> RedisError {
        RedisError {
            kind: ErrorKind::Server,
            target: self.to_string(),
            detail: format!("unexpected reply: {detail}"),
            timed_out: None,
        }
    }
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
    /// Redis answered, but cannot serve yet: asking again later may work.
    Transient(Unready),
    /// A replica, which takes no writes. After a failover the address may
    /// soon lead to the new primary, but nothing retries on that yet.
    ReadOnly,
    /// The server answered with an error.
    Server,
}

impl ErrorKind {
    /// Whether Redis said "not now" rather than "no".
    pub(crate) fn is_transient(self) -> bool {
        matches!(self, ErrorKind::Transient(_))
    }
}

/// Why a Redis that answers cannot serve yet.
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
                };
                write!(f, "Redis at {target} {state}; it cannot serve the lock yet")
            }
            ErrorKind::ReadOnly => write!(
                f,
                "Redis at {target} is a read-only replica (READONLY); point --redis at the \
                 primary"
            ),
            ErrorKind::Server => write!(f, "Redis at {target} failed: {}", self.detail),
        }
    }
}

impl std::error::Error for RedisError {}

/// One lazily (re)opened connection. After any failure the connection is
/// dropped, so the next call starts afresh: after a Redis restart the old
/// socket is dead, and a timed-out call may have left it in an unknown state.
pub(crate) struct Session {
    target: Target,
    timeout: Duration,
    conn: Option<MultiplexedConnection>,
}

impl Session {
    pub(crate) fn new(target: Target, timeout: Duration) -> Self {
        Session {
            target,
            timeout,
            conn: None,
        }
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// Opens the connection now, allowing `timeout` for it, so that an
    /// unreachable server is reported before anything else happens.
    pub(crate) async fn open_within(&mut self, timeout: Duration) -> Result<(), RedisError> {
        if self.conn.is_none() {
            self.conn = Some(self.target.connect(timeout).await?);
        }
        Ok(())
    }

    /// Runs one script call within the session's timeout.
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &mut self,
        call: &redis::ScriptInvocation<'_>,
    ) -> Result<T, RedisError> {
        let started = tokio::time::Instant::now();
        self.open_within(self.timeout).await?;
        let Some(conn) = self.conn.as_mut() else {
            return Err(self.target.timed_out(self.timeout));
        };
        let left = self.timeout.saturating_sub(started.elapsed());
        // Decoded here rather than by the crate, so that a reply of the
        // wrong shape is told apart from a server that is not Redis.
        let result = tokio::time::timeout(left, call.invoke_async::<redis::Value>(conn)).await;
        match result {
            Ok(Ok(value)) => T::from_redis_value(value)
                .map_err(|err| self.target.unexpected_reply(&err.to_string())),
            // The crate's response timer races ours; either way, it is ours.
            Ok(Err(err)) if !err.is_timeout() => {
                self.conn = None;
                Err(self.target.error(&err))
            }
            Ok(Err(_)) | Err(_) => {
                self.conn = None;
                Err(self.target.timed_out(self.timeout))
            }
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

    #[test]
    fn all_schemes_parse() {
        for url in [
            "redis://127.0.0.1:6379",
            "rediss://example.com:6380",
            "redis+unix:///tmp/r.sock",
            "unix:///tmp/r.sock",
        ] {
            assert!(Target::parse(url, None).is_ok(), "{url}");
        }
        for url in ["localhost:6379", "http://x", ""] {
            assert!(Target::parse(url, None).is_err(), "{url}");
        }
    }
}
