//! Where Redis is: the `--redis` URL parsed into a `Target` (one server, the
//! primary that Sentinel names, or a Cluster), kept with its credentials but
//! shown without them, and with where it was given (`UrlSource`). A bad URL
//! is an `InvalidUrl`; `refusal` says why in one line, quoting the URL with
//! its password masked.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use super::cluster::Seeds;
use super::hosts::{self, MultiHost, Scheme};
use super::sentinel::Sentinels;
use super::tls::Tls;

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

/// Where a Redis URL was given, for messages: the option, the environment
/// variable, or a line of the configuration file. Shown as `--redis`,
/// `LOCKRUN_REDIS_URL` or `/etc/lockrun.conf line 3`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum UrlSource {
    /// `--redis URL` on the command line.
    Option,
    /// LOCKRUN_REDIS_URL.
    Env,
    /// `redis = URL` in the configuration file at `path`, on `line`
    /// (counted from 1).
    File { path: PathBuf, line: usize },
}

impl fmt::Display for UrlSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UrlSource::Option => f.write_str("--redis"),
            UrlSource::Env => f.write_str("LOCKRUN_REDIS_URL"),
            UrlSource::File { path, line } => write!(f, "{} line {line}", path.display()),
        }
    }
}

/// Why `url`, given at `source`, is no URL lockrun takes, and the URL meant
/// when that is plain: one line that quotes the URL with its password
/// masked.
pub(crate) fn refusal(url: &str, source: &UrlSource) -> String {
    let shown = masked(url);
    let quoted = format!("{source} '{shown}'");
    if url.trim().is_empty() {
        return format!("{source} is empty; give the URL of your Redis, e.g. redis://HOST:6379");
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        if url.starts_with('/') {
            return format!("{quoted} has no scheme; for a socket write unix://{shown}");
        }
        if !url.contains(['/', ' ', '@']) {
            return format!(
                "{quoted} has no scheme; write redis://{shown} (rediss://{shown} for TLS)"
            );
        }
        return format!("{quoted} is not a Redis URL; {FORMS}");
    };
    match scheme.to_ascii_lowercase().as_str() {
        "http" | "tcp" | "redis-cli" => {
            let rest = masked(rest);
            format!("{quoted}: lockrun speaks Redis, not {scheme}; write redis://{rest}")
        }
        "https" | "tls" => {
            let rest = masked(rest);
            format!("{quoted}: lockrun speaks Redis, not {scheme}; write rediss://{rest} (TLS)")
        }
        "unix" | "redis+unix" if !rest.starts_with('/') => {
            let path = rest.split(['?', '#']).next().unwrap_or(rest);
            let absolute = if path.contains('/') {
                // unix://run/redis.sock: the third slash forgotten.
                Path::new("/").join(path)
            } else {
                std::env::current_dir()
                    .unwrap_or_else(|_| "/".into())
                    .join(path)
            };
            format!(
                "{quoted}: a socket path must be absolute, after three slashes; write \
                 {scheme}://{}",
                absolute.display()
            )
        }
        _ => format!("{quoted} is not a Redis URL; {FORMS}"),
    }
}

/// The URL forms lockrun takes, for a refusal that has no better advice.
const FORMS: &str = "write redis://[USER@]HOST[:PORT][/DB], rediss://... (TLS), unix:///PATH, \
                     redis+sentinel://HOST[:PORT][,...]/SERVICE or \
                     redis+cluster://HOST[:PORT][,...] (see lockrun --help)";

/// `url` as typed, but with any password (`user:PASSWORD@`, `pass=PASSWORD`)
/// shown as `***`.
fn masked(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let rest = match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => rest.to_owned(),
        },
        None => rest.to_owned(),
    };
    let rest = match rest.split_once("pass=") {
        Some((before, after)) => {
            let end = after.find('&').unwrap_or(after.len());
            format!("{before}pass=***{}", &after[end..])
        }
        None => rest,
    };
    scheme + &rest
}

/// A parsed Redis address plus credentials.
#[derive(Clone)]
pub(crate) struct Target {
    /// Credentials, database and TLS of the servers holding the lock; for a
    /// single server, its address too.
    pub(super) info: ConnectionInfo,
    pub(super) topology: Topology,
    /// `--redis-password-file`, read again at each connection
    /// (`password.rs`).
    pub(super) password_file: Option<PathBuf>,
    /// Where the URL was given.
    source: UrlSource,
    /// Whether `parse` was given the password (LOCKRUN_REDIS_PASSWORD, or
    /// the file's), replacing any in the URL: where a refused one came from.
    pub(super) password_given: bool,
    /// Whom to trust over TLS, for the connections lockrun opens itself.
    pub(super) tls: Option<Tls>,
    /// The time limit of calls and the ttl it was derived from, when
    /// --redis-timeout was not given: a call that outlasts it says what to
    /// raise.
    pub(super) limit_from_ttl: Option<(Duration, Duration)>,
}

/// How lockrun finds the server that holds a lock.
#[derive(Clone)]
pub(super) enum Topology {
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
pub(super) fn show_addr(addr: &ConnectionAddr, as_url: bool) -> String {
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
        let password = password.filter(|p| !p.is_empty());
        let password_given = password.is_some();
        if let Some(password) = password {
            settings = settings.set_password(password);
        } else if settings.username().is_some_and(|user| !user.is_empty())
            && settings.password().is_none()
        {
            // The redis crate logs in only when it has a password, so a
            // user named alone would run as `default`, with whatever that
            // user may do. `AUTH user ""` logs in a `nopass` user (any
            // password does) and gets WRONGPASS for one that needs a
            // password, which `classify` says was not given.
            settings = settings.set_password("");
        }
        info = info.set_redis_settings(settings);
        Ok(Target {
            info,
            topology,
            password_file: None,
            source: UrlSource::Option,
            password_given,
            tls: None,
            limit_from_ttl: None,
        })
    }

    /// Notes that the time limit of calls, `limit`, is --redis-timeout's
    /// default, derived from `ttl`.
    pub(crate) fn set_limit_from_ttl(&mut self, limit: Duration, ttl: Duration) {
        self.limit_from_ttl = Some((limit, ttl));
    }

    /// Notes where the URL was given (`--redis` unless said otherwise).
    #[must_use]
    pub(crate) fn with_source(mut self, source: UrlSource) -> Self {
        self.source = source;
        self
    }

    /// Where the URL was given: `--redis`, LOCKRUN_REDIS_URL or a line of
    /// the configuration file.
    pub(crate) fn source(&self) -> &UrlSource {
        &self.source
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

    /// Uses `tls` (whom to trust, the client certificate) on every server
    /// this target reaches over TLS.
    pub(crate) fn with_tls(mut self, tls: &Tls) -> redis::RedisResult<Self> {
        self.tls = Some(tls.clone());
        match &mut self.topology {
            // lockrun opens these connections itself (`tls.rs`): the crate
            // would parse the certificates again for nothing.
            Topology::Single => {}
            Topology::Sentinel(sentinels) => sentinels.trust(tls),
            Topology::Cluster(seeds) => {
                self.info = tls.trusted_info(self.info)?;
                seeds.trust(tls);
            }
        }
        Ok(self)
    }

    /// Whether lockrun reaches these servers over TLS.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self.info.addr(), ConnectionAddr::TcpTls { .. })
    }

    /// Whether the lock is on a cluster node, each call routed by its key
    /// and redirected (`cluster.rs`).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.topology, Topology::Cluster(_))
    }

    /// Whether the URL names a replicated setup (Sentinel or Cluster), where
    /// waiting for replicas is the default.
    pub(crate) fn is_replicated(&self) -> bool {
        !matches!(self.topology, Topology::Single)
    }

    /// The data nodes' password, to mask in messages and to tell a wrong
    /// password from a missing one; `None` for a user named without one,
    /// whom lockrun logs in with an empty password.
    pub(super) fn password(&self) -> Option<&str> {
        self.info
            .redis_settings()
            .password()
            .filter(|p| !p.is_empty())
    }

    /// The user lockrun logs in as, if the URL names one (else `default`).
    pub(crate) fn user(&self) -> Option<&str> {
        self.info
            .redis_settings()
            .username()
            .filter(|u| !u.is_empty())
    }

    /// This target for `-v` and `status`: its URL, without credentials,
    /// and the user it logs in as if the URL names one (never the
    /// password).
    pub(crate) fn with_user_shown(&self) -> String {
        match self.user() {
            Some(user) => format!("{self} as user '{user}'"),
            None => self.to_string(),
        }
    }

    /// The sentinels' own password, to mask in messages.
    pub(super) fn sentinel_password(&self) -> Option<&str> {
        match &self.topology {
            Topology::Sentinel(sentinels) => sentinels.password(),
            Topology::Single | Topology::Cluster(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_conn::ErrorKind;

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
    fn a_user_named_without_a_password_logs_in_with_an_empty_one() {
        let target = Target::parse("redis://lockrun@h:1", None).expect("valid");
        assert_eq!(target.info.redis_settings().username(), Some("lockrun"));
        assert_eq!(target.info.redis_settings().password(), Some(""));
        assert_eq!(target.password(), None);
        assert_eq!(target.with_user_shown(), "redis://h:1 as user 'lockrun'");
        let given = Target::parse("redis://lockrun@h:1", Some("pw".into())).expect("valid");
        assert_eq!(given.password(), Some("pw"));
        let nobody = Target::parse("redis://h:1", None).expect("valid");
        assert_eq!(nobody.info.redis_settings().password(), None);
        assert_eq!(nobody.with_user_shown(), "redis://h:1");
    }

    #[test]
    fn password_from_environment_wins() {
        let target = Target::parse("redis://:old@h:1", Some("new".into())).expect("valid");
        assert_eq!(target.password(), Some("new"));
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
    fn a_refused_url_is_quoted_with_its_source_and_what_was_meant() {
        let file = UrlSource::File {
            path: "/etc/lockrun.conf".into(),
            line: 3,
        };
        for (url, source, want) in [
            (
                "127.0.0.1:6379",
                &UrlSource::Option,
                "--redis '127.0.0.1:6379' has no scheme; write redis://127.0.0.1:6379 \
                 (rediss://127.0.0.1:6379 for TLS)",
            ),
            (
                "db.internal",
                &UrlSource::Env,
                "LOCKRUN_REDIS_URL 'db.internal' has no scheme; write redis://db.internal \
                 (rediss://db.internal for TLS)",
            ),
            (
                "http://u:s3cret@db:6379",
                &file,
                "/etc/lockrun.conf line 3 'http://u:***@db:6379': lockrun speaks Redis, not \
                 http; write redis://u:***@db:6379",
            ),
            (
                "unix://run/redis.sock",
                &UrlSource::Option,
                "--redis 'unix://run/redis.sock': a socket path must be absolute, after three \
                 slashes; write unix:///run/redis.sock",
            ),
            (
                "",
                &UrlSource::Env,
                "LOCKRUN_REDIS_URL is empty; give the URL of your Redis, e.g. redis://HOST:6379",
            ),
        ] {
            assert_eq!(refusal(url, source), want, "{url}");
        }
        let line = refusal("redis://:pw@h:1?pass=pw2&db=1 x", &UrlSource::Option);
        assert!(!line.contains("pw"), "{line}");
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
