//! What a failed Redis call means for lockrun. Errors are classified by the
//! reply's code, not its text, into an `ErrorKind` that decides whether
//! waiting may help (`Transient`) and which message the operator gets. The
//! messages name the server but never a password: every detail is masked
//! before it is kept, however it came to hold one.

use std::time::Duration;

use redis::ConnectionAddr;

mod code;
mod message;
mod noperm;
mod tls;

pub(crate) use code::{script_refusal, ScriptRefusal};
pub(crate) use tls::TlsRefusal;

use super::target::show_addr;
use super::Target;
use crate::clock::show_exact;

/// What a failed call means for lockrun: which message the operator gets,
/// and whether waiting may help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// Could not connect, the connection broke, or no answer in time.
    Unreachable,
    /// The TLS handshake failed on a certificate: no retry will help.
    Tls(TlsRefusal),
    /// The URL's scheme does not match the port: `redis://` at a port that
    /// speaks only TLS, or `rediss://` at a plain one.
    Scheme,
    /// The server wants a password and was given none.
    NoPassword,
    /// The server refused the password it was given.
    Auth,
    /// The server was sent a password for its `default` user, which has
    /// none (Redis: `AUTH <password> called without any password
    /// configured for the default user`).
    PasswordUnset,
    /// Whatever answered does not speak the Redis protocol.
    NotRedis,
    /// Redis answered, but cannot serve the lock yet: asking again later
    /// may work.
    Transient(Unready),
    /// A replica reached through a one-server URL, which takes no writes.
    ReadOnly,
    /// The server refused lockrun's user a command, key or channel (NOPERM,
    /// or a script's command refused the same way).
    NoPerm,
    /// The server is out of memory: over its `maxmemory`, with a policy
    /// that evicts nothing (`noeviction`), it refuses every write (OOM).
    OutOfMemory,
    /// The server does not know WAIT (renamed away, or a service or proxy
    /// without it): it cannot acknowledge replication.
    NoWait,
    /// The server answered with an error.
    Server,
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
    /// At its `maxclients` limit, it refused a new connection.
    MaxClients,
    /// It closed a new connection before answering, without a reason that
    /// lockrun could read; `at_limit` when it had said `max number of
    /// clients reached` to this run before, the likely reason again.
    Closed { at_limit: bool },
}

/// A failed Redis call, with the address but never the password.
#[derive(Debug, Clone)]
pub(crate) struct RedisError {
    pub(crate) kind: ErrorKind,
    target: String,
    detail: String,
    /// For a call that got no answer: how long it waited, and what the
    /// message can say of the link. Boxed: every `Result` carries the error.
    pub(super) no_answer: Option<Box<NoAnswer>>,
}

/// A call that got no answer within `after`: whether the connection was
/// open (the server took it, so it is up, stuck, or behind a link slower
/// than the limit), and --redis-timeout's default and the ttl it was derived
/// from, when it was not given.
#[derive(Debug, Clone, Copy)]
pub(super) struct NoAnswer {
    pub(super) after: Duration,
    pub(super) connected: bool,
    pub(super) from_ttl: Option<(Duration, Duration)>,
}

/// How Redis refuses WAIT on a replica (`-ERR WAIT cannot be used with
/// replica instances. …`).
const WAIT_ON_REPLICA: &str = "WAIT cannot be used with replica instances";

impl RedisError {
    /// Whether Redis said "not now" rather than "no": worth waiting through
    /// while nothing is held yet.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self.kind, ErrorKind::Transient(_))
    }

    /// This failure, followed by `later`, which giving back a lock the
    /// failed call may have taken ran into. Only a second wait is worth
    /// saying: it makes the line's "no answer within" add up to the time
    /// the operator saw pass.
    pub(crate) fn then_giving_back(mut self, later: &RedisError) -> RedisError {
        if let Some(waited) = &later.no_answer {
            self.detail = format!(
                "{}, nor within {} more to giving back a lock that call may have taken",
                self.detail,
                show_exact(waited.after)
            );
        }
        self
    }
}

impl std::error::Error for RedisError {}

impl Target {
    pub(crate) fn error(&self, err: &redis::RedisError) -> RedisError {
        self.error_at(err, None)
    }

    /// `err` from the server `node` (when lockrun knows which), classified,
    /// with a hint when the URL looks like the cause.
    pub(super) fn error_at(&self, err: &redis::RedisError, node: Option<&str>) -> RedisError {
        let kind = self.classify(err);
        let detail = match (kind, self.cluster_hint(err)) {
            (_, Some(hint)) => hint,
            // The crate's words for WRONGPASS name no one.
            (ErrorKind::Auth, None) => self.whose_password(),
            (ErrorKind::NoPassword, None) => self.user().unwrap_or("default").to_owned(),
            (ErrorKind::PasswordUnset, None) => self.password_source(),
            (_, None) => one_line(err),
        };
        self.failure(kind, &detail, node)
    }

    /// A failure described by lockrun itself, at `node` if known. Every
    /// password is masked, however the detail came to hold it.
    pub(super) fn failure(&self, kind: ErrorKind, detail: &str, node: Option<&str>) -> RedisError {
        let mut detail = detail.to_owned();
        // `password()` is never empty: an empty one would mask every gap.
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
            no_answer: None,
        }
    }

    /// What an error means for lockrun, by the reply's error code where
    /// there is one.
    fn classify(&self, err: &redis::RedisError) -> ErrorKind {
        if let Some(why) = tls_refusal(err) {
            return ErrorKind::Tls(why);
        }
        if is_auth_error(err) {
            if err.to_string().contains("without any password configured") {
                return ErrorKind::PasswordUnset;
            }
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
        match code::code(err).as_deref() {
            Some("LOADING") => ErrorKind::Transient(Unready::Loading),
            Some("TRYAGAIN") => ErrorKind::Transient(Unready::TryAgain),
            // A leftover ASK (`leftover_redirection`) that the session's
            // resends did not get past within the call's limit: the slot is
            // being migrated, and the one-key path takes it so.
            Some("ASK") if self.is_cluster() => ErrorKind::Transient(Unready::TryAgain),
            Some("MASTERDOWN") => ErrorKind::Transient(Unready::MasterDown),
            // The cluster is healing: a later call may succeed.
            Some("CLUSTERDOWN") => ErrorKind::Transient(Unready::ClusterDown),
            // Behind Sentinel or in a cluster, a demoted primary or a moved
            // slot is a failover under way, not a wrong URL.
            Some("READONLY" | "MOVED" | "ASK") if replicated => {
                ErrorKind::Transient(Unready::Failover)
            }
            // A primary demoted between the lock's script and its WAIT (a
            // Cluster node back from a partition, finding its replica
            // promoted) refuses WAIT as a replica: a failover, as READONLY is.
            Some("ERR") if replicated && err.to_string().contains(WAIT_ON_REPLICA) => {
                ErrorKind::Transient(Unready::Failover)
            }
            Some("READONLY") => ErrorKind::ReadOnly,
            Some("NOPERM") => ErrorKind::NoPerm,
            Some("OOM") => ErrorKind::OutOfMemory,
            Some("BUSY") => ErrorKind::Transient(Unready::Busy),
            // min-replicas-to-write: too few replicas are connected right now.
            Some("NOREPLICAS") => ErrorKind::Transient(Unready::Replicas),
            Some("MAXCLIENTS") => ErrorKind::Transient(Unready::MaxClients),
            // `Session::invoke` decodes replies itself, so a parse error
            // here is the wire protocol's: whatever answered is not Redis.
            None if err.kind() == redis::ErrorKind::Parse => ErrorKind::NotRedis,
            _ => ErrorKind::Server,
        }
    }

    /// Whether `err` is a redirection (MOVED, ASK) that a cluster call
    /// had no retry left to follow (`cluster.rs`): the node ran nothing, and the slot
    /// changed hands during the call. ASK comes only from a node that has
    /// the slot MIGRATING and none of the keys named; the call follows it
    /// unless its retries ran out first, as when the last of the keys left
    /// the source between the retries of a call that got TRYAGAIN (Valkey 8
    /// moves a slot's keys in hash order, throughout the move). The one
    /// rule for both layers: the session sends such a call again within its
    /// limit, and `classify` says what one left over after that means.
    /// Outside a cluster, a redirection is a wrong URL (`hint`).
    pub(super) fn leftover_redirection(&self, err: &redis::RedisError) -> bool {
        self.is_cluster() && matches!(code::code(err).as_deref(), Some("MOVED" | "ASK"))
    }

    /// What is wrong, and what to change, when a one-server URL reaches a
    /// cluster node that sends the lock's keys elsewhere.
    fn cluster_hint(&self, err: &redis::RedisError) -> Option<String> {
        if self.is_replicated() {
            return None;
        }
        match code::code(err).as_deref() {
            Some(code @ ("MOVED" | "ASK")) => {
                let (scheme, at) = match self.info.addr() {
                    ConnectionAddr::TcpTls { .. } => ("rediss", show_addr(self.info.addr(), false)),
                    ConnectionAddr::Tcp(..) => ("redis", show_addr(self.info.addr(), false)),
                    _ => ("redis", "HOST:PORT".to_owned()),
                };
                let to = err.detail().map_or(String::new(), |to| format!(" {to}"));
                Some(format!(
                    "this is a Redis Cluster node, and the lock's keys are on another node \
                     ({code}{to}), which a one-server URL never follows; use --redis \
                     {scheme}+cluster://{at}"
                ))
            }
            _ => None,
        }
    }

    /// A call or connection that got no answer within `after`, the
    /// connection not open yet.
    pub(crate) fn timed_out(&self, after: Duration) -> RedisError {
        self.no_answer(after, false)
    }

    /// A call sent on an open connection that got no answer within `after`.
    pub(crate) fn unanswered(&self, after: Duration) -> RedisError {
        self.no_answer(after, true)
    }

    fn no_answer(&self, after: Duration, connected: bool) -> RedisError {
        let detail = if connected {
            format!(
                "it took the connection but sent no answer within {}",
                show_exact(after)
            )
        } else {
            format!("no answer within {}", show_exact(after))
        };
        RedisError {
            no_answer: Some(Box::new(NoAnswer {
                after,
                connected,
                from_ttl: self.limit_from_ttl,
            })),
            ..self.failure(ErrorKind::Unreachable, &detail, None)
        }
    }

    /// A connection that the server closed as it opened, before lockrun
    /// read an answer (`err`: a broken pipe, a reset, an early end);
    /// `at_limit` as in `Unready::Closed`.
    pub(super) fn closed_on_open(&self, err: &redis::RedisError, at_limit: bool) -> RedisError {
        self.failure(
            ErrorKind::Transient(Unready::Closed { at_limit }),
            &one_line(err),
            None,
        )
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

/// What went wrong, if `err` is a TLS handshake that failed on a
/// certificate.
pub(super) fn tls_refusal(err: &redis::RedisError) -> Option<TlsRefusal> {
    if err.is_io_error() {
        tls::refusal(err)
    } else {
        None
    }
}

/// Whether the server refused to let lockrun in: a wrong password, or none
/// where one is wanted.
pub(super) fn is_auth_error(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(code::code(err).as_deref(), Some("NOAUTH" | "WRONGPASS"))
}

/// Whether `err` is the server closing the connection under lockrun: a
/// broken pipe, a reset, or an end of stream where a reply was due.
pub(super) fn is_closed(err: &redis::RedisError) -> bool {
    use std::error::Error;
    let Some(source) = err.source() else {
        return false;
    };
    let io = source.downcast_ref::<std::io::Error>().or_else(|| {
        source
            .downcast_ref::<std::sync::Arc<dyn Error + Send + Sync>>()?
            .downcast_ref::<std::io::Error>()
    });
    io.is_some_and(|io| {
        matches!(
            io.kind(),
            std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::UnexpectedEof
        )
    })
}

/// Whether `err` says the server does not know the command sent.
pub(super) fn is_unknown_command(err: &redis::RedisError) -> bool {
    code::is_unknown_command(err)
}

/// Whether `err` is READONLY: the server is a replica, replied directly or
/// from inside a script.
pub(super) fn is_read_only(err: &redis::RedisError) -> bool {
    code::code(err).as_deref() == Some("READONLY")
}

/// `err` as text on one line. Some errors span lines (a parser's report of
/// what it got instead of a reply); every lockrun message is one line.
pub(super) fn one_line(err: &redis::RedisError) -> String {
    err.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::ServerErrorKind;

    use super::*;

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
    fn an_error_inside_a_script_on_redis_6_is_classified_by_its_own_code() {
        // Redis 6.2.14's replies, verbatim.
        let reply = |inner: &str| -> redis::RedisError {
            let text = format!(
                "-ERR Error running script (call to f_5a3c92a56ae8f6455fc76430810f36be88b5c155): \
                 @user_script:1: @user_script: 1: {inner} \r\n"
            );
            match redis::parse_redis_value(text.as_bytes()) {
                Ok(redis::Value::ServerError(err)) => err.into(),
                other => panic!("{other:?}"),
            }
        };
        let target = Target::parse("redis://h:1", None).expect("valid");
        let replica = reply("-READONLY You can't write against a read only replica.");
        assert_eq!(target.error(&replica).kind, ErrorKind::ReadOnly);
        assert!(is_read_only(&replica));
        let few = reply("-NOREPLICAS Not enough good replicas to write.");
        let kind = target.error(&few).kind;
        assert_eq!(kind, ErrorKind::Transient(Unready::Replicas));
        assert!(!is_read_only(&few));
        let own = reply("Unknown Redis command called from Lua script");
        assert_eq!(target.error(&own).kind, ErrorKind::Server);
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
    fn an_unanswered_call_says_where_its_limit_came_from() {
        let mut target = Target::parse("redis://h:1", None).expect("valid");
        let ms = Duration::from_millis;
        let given = target.unanswered(ms(300)).to_string();
        assert!(
            given.ends_with(
                ": it took the connection but sent no answer within 300ms; the server is up but \
                 stuck (paused, or running a long script), or the link is slower than that: \
                 over a slower link give a --redis-timeout longer than 300ms"
            ),
            "{given}"
        );
        target.set_limit_from_ttl(ms(300), ms(3000));
        let derived = target.unanswered(ms(300)).to_string();
        assert!(
            derived.ends_with(
                "300ms is the --redis-timeout lockrun derived from --ttl 3s (a tenth of it); \
                 over a slower link give a longer --redis-timeout, or --ttl"
            ),
            "{derived}"
        );
        // Not connected: the server may be down, as before, and the limit
        // is said all the same.
        let down = target.timed_out(ms(300)).to_string();
        assert!(
            down.ends_with(
                ": no answer within 300ms; check --redis (or LOCKRUN_REDIS_URL) and that the \
                 server is up; 300ms is the --redis-timeout lockrun derived from --ttl 3s (a \
                 tenth of it); over a slower link give a longer --redis-timeout, or --ttl"
            ),
            "{down}"
        );
        target.set_limit_from_ttl(Duration::from_secs(2), Duration::from_secs(60));
        let capped = target.unanswered(Duration::from_secs(2)).to_string();
        assert!(
            capped.ends_with(
                "2s is --redis-timeout's default (a tenth of --ttl, at most 2s); over a slower \
                 link give a longer --redis-timeout"
            ),
            "{capped}"
        );
        // A first connection is allowed longer than a call (or what was
        // left of --wait): that limit is not --redis-timeout's.
        target.set_limit_from_ttl(ms(200), ms(2000));
        let first = target.unanswered(ms(2999)).to_string();
        assert!(
            first.ends_with("over a slower link give a --redis-timeout longer than 2s999ms"),
            "{first}"
        );
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
                "failed: this is a Redis Cluster node, and the lock's keys are on another node \
                 (MOVED 5597 10.0.0.6:7001), which a one-server URL never follows; use --redis \
                 redis+cluster://10.0.0.5:7000"
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

    /// The Cluster campaign's partitions (scripts/chaos --netns) found a
    /// waiting run that gave up on this: a node back from a partition ran
    /// the lock's script as a primary and refused its WAIT as the replica
    /// it had become. Behind Sentinel or Cluster it is a failover under way.
    #[test]
    fn wait_refused_by_a_demoted_primary_is_a_failover() {
        let refused = match redis::parse_redis_value(
            b"-ERR WAIT cannot be used with replica instances. Please also note that since \
              Redis 4.0 if a replica is configured to be writable (which is not the default) \
              writes to replicas are just local and are not propagated.\r\n",
        ) {
            Ok(redis::Value::ServerError(err)) => redis::RedisError::from(err),
            other => panic!("{other:?}"),
        };
        for url in ["redis+cluster://c1:7000", "redis+sentinel://s1,s2/svc"] {
            let target = Target::parse(url, None).expect("valid");
            assert_eq!(
                target.error(&refused).kind,
                ErrorKind::Transient(Unready::Failover),
                "{url}"
            );
        }
        let single = Target::parse("redis://h:1", None).expect("valid");
        assert_eq!(single.error(&refused).kind, ErrorKind::Server);
    }

    /// The reply that a call's last retry got from a source whose last key
    /// of the lock had just moved: the one-key path takes it as it takes
    /// TRYAGAIN.
    #[test]
    fn an_ask_left_unfollowed_in_a_cluster_is_a_slot_being_migrated() {
        let ask = match redis::parse_redis_value(b"-ASK 0 127.0.0.1:7001\r\n") {
            Ok(redis::Value::ServerError(err)) => redis::RedisError::from(err),
            other => panic!("{other:?}"),
        };
        let cluster = Target::parse("redis+cluster://c1:7000", None).expect("valid");
        let err = cluster.error(&ask);
        assert_eq!(err.kind, ErrorKind::Transient(Unready::TryAgain));
        assert!(
            err.to_string().contains("cluster slot is being migrated"),
            "{err}"
        );
        let sentinel = Target::parse("redis+sentinel://s1,s2/svc", None).expect("valid");
        assert_eq!(
            sentinel.error(&ask).kind,
            ErrorKind::Transient(Unready::Failover)
        );
        let single = Target::parse("redis://h:1", None).expect("valid");
        assert_eq!(single.error(&ask).kind, ErrorKind::Server);
        assert!(cluster.leftover_redirection(&ask));
        assert!(!single.leftover_redirection(&ask));
        let moved = match redis::parse_redis_value(b"-MOVED 0 127.0.0.1:7002\r\n") {
            Ok(redis::Value::ServerError(err)) => redis::RedisError::from(err),
            other => panic!("{other:?}"),
        };
        assert!(cluster.leftover_redirection(&moved));
        let again = redis::make_extension_error("TRYAGAIN".into(), Some("x".into()));
        assert!(!cluster.leftover_redirection(&again));
    }
}
