//! The one line an operator reads for each kind of failed call: what went
//! wrong at which server, and what to do about it.

use std::fmt;

use crate::clock::show_exact;

use super::noperm::refused;
use super::{ErrorKind, RedisError, TlsRefusal, Unready};

impl fmt::Display for RedisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = &self.target;
        match self.kind {
            ErrorKind::Unreachable => self.fmt_unreachable(f),
            ErrorKind::Tls(why) => self.fmt_tls(f, why),
            ErrorKind::Scheme => write!(f, "cannot reach Redis at {target}: {}", self.detail),
            ErrorKind::NoPassword if self.detail != "default" => write!(
                f,
                "Redis at {target} refused user '{}' without a password (WRONGPASS: the user \
                 needs one, or does not exist, or is off), and none was given; give it in \
                 LOCKRUN_REDIS_PASSWORD, --redis-password-file or redis-password-file in \
                 lockrun.conf",
                self.detail
            ),
            ErrorKind::NoPassword => write!(
                f,
                "Redis at {target} requires a password; give it in LOCKRUN_REDIS_PASSWORD, \
                 --redis-password-file or the URL"
            ),
            ErrorKind::PasswordUnset => write!(
                f,
                "Redis at {target} has no password set (it said: AUTH <password> called \
                 without any password configured for the default user), but lockrun sent one \
                 from {}; leave the password out, or set one on the server (requirepass, or an \
                 ACL user named in the URL)",
                self.detail
            ),
            ErrorKind::Auth => write!(
                f,
                "Redis at {target} refused {} (WRONGPASS: a wrong password, or no such user, or \
                 the user is off); check that this user exists on the server, is on, and has \
                 that password",
                self.detail
            ),
            ErrorKind::NotRedis => write!(
                f,
                "the server at {target} does not speak the Redis protocol; check --redis (or \
                 LOCKRUN_REDIS_URL)"
            ),
            ErrorKind::Transient(why) => self.fmt_unready(f, why),
            ErrorKind::ReadOnly => write!(
                f,
                "Redis at {target} is a read-only replica (READONLY): this server is a replica; \
                 point --redis at the primary or use \
                 redis+sentinel://SENTINEL[,SENTINEL...]/SERVICE"
            ),
            ErrorKind::NoPerm => {
                let (what, rule) = refused(&self.detail);
                write!(
                    f,
                    "Redis at {target} refused lockrun's user {what} (NOPERM); add {rule} to its \
                     ACL rules (see man lockrun-redis, REDIS PERMISSIONS)"
                )
            }
            // Redis's words name the script's hash and line, which say
            // nothing to the operator; the reply's code is all that counts.
            ErrorKind::OutOfMemory => write!(
                f,
                "Redis at {target} is out of memory (OOM): its used memory is over its \
                 maxmemory and its maxmemory-policy evicts nothing, so it refuses every write; \
                 free memory there or raise its maxmemory (redis-cli CONFIG SET maxmemory)"
            ),
            ErrorKind::NoWait => write!(
                f,
                "Redis at {target} cannot acknowledge replication: it does not know WAIT \
                 ({}); --replica-acks 0 runs without replica acknowledgement",
                self.detail
            ),
            ErrorKind::Server => write!(f, "Redis at {target} failed: {}", self.detail),
        }
    }
}

impl RedisError {
    /// A handshake that failed on a certificate: which one, and what fixes
    /// it.
    fn fmt_tls(&self, f: &mut fmt::Formatter<'_>, why: TlsRefusal) -> fmt::Result {
        let (what, fix) = match why {
            TlsRefusal::CertificateRequired => (
                "the server asks for a client certificate",
                "give --redis-cert-file and --redis-key-file (or LOCKRUN_REDIS_CERT_FILE and \
                 LOCKRUN_REDIS_KEY_FILE)",
            ),
            TlsRefusal::ClientCertificate => (
                "the server refused lockrun's client certificate",
                "give --redis-cert-file a certificate signed by a CA the server trusts (its \
                 tls-ca-cert-file), and not expired",
            ),
            TlsRefusal::UnknownIssuer => (
                "the server's TLS certificate is not signed by a CA lockrun trusts",
                "give the CA that signed it with --redis-ca-file (or LOCKRUN_REDIS_CA_FILE)",
            ),
            TlsRefusal::OtherHost => (
                "the server's TLS certificate is for another host",
                "reach the server by a name or address the certificate holds",
            ),
            TlsRefusal::NoNames => (
                "the server's TLS certificate names no host: it has no subjectAltName, and \
                 lockrun, like browsers and other current TLS clients, does not read the CN",
                "make it again with the names and addresses lockrun dials, e.g. openssl req ... \
                 -addext subjectAltName=DNS:localhost,IP:127.0.0.1 (man lockrun-redis, TLS, has \
                 a recipe)",
            ),
            TlsRefusal::Version1 => (
                "the server's TLS certificate is an X.509 version 1 certificate (openssl x509 \
                 -req without extensions makes one), which lockrun's TLS (rustls) cannot use",
                "sign it again with -extfile naming a file that holds \
                 subjectAltName=DNS:localhost,IP:127.0.0.1, the names and addresses lockrun \
                 dials (man lockrun-redis, TLS, has a recipe)",
            ),
            TlsRefusal::Expired => (
                "the server's TLS certificate has expired",
                "the server needs a new one; no lockrun option accepts an expired certificate",
            ),
            TlsRefusal::Certificate => (
                "lockrun did not accept the server's TLS certificate",
                "check the certificate the server has (tls-cert-file) and --redis-ca-file",
            ),
        };
        write!(
            f,
            "cannot reach Redis at {}: {what} ({}); {fix}",
            self.target, self.detail
        )
    }

    fn fmt_unreachable(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = &self.target;
        write!(f, "cannot reach Redis at {target}: {}", self.detail)?;
        let Some(slow) = self.no_answer.as_deref() else {
            return write!(
                f,
                "; check --redis (or LOCKRUN_REDIS_URL) and that the server is up"
            );
        };
        let limit = show_exact(slow.after);
        // A limit lockrun derived is one the operator may never have
        // thought of: say where it came from and what moves it.
        let raise = match slow.from_ttl {
            Some((derived, ttl)) if slow.after == derived && derived == ttl / 10 => format!(
                "{limit} is the --redis-timeout lockrun derived from --ttl {} (a tenth of it); \
                 over a slower link give a longer --redis-timeout, or --ttl",
                show_exact(ttl)
            ),
            Some((derived, _)) if slow.after == derived => format!(
                "{limit} is --redis-timeout's default (a tenth of --ttl, at most {limit}); over \
                 a slower link give a longer --redis-timeout"
            ),
            _ => format!("over a slower link give a --redis-timeout longer than {limit}"),
        };
        if slow.connected {
            write!(
                f,
                "; the server is up but stuck (paused, or running a long script), or the link \
                 is slower than that: {raise}"
            )
        } else {
            write!(
                f,
                "; check --redis (or LOCKRUN_REDIS_URL) and that the server is up; {raise}"
            )
        }
    }

    /// A connection closed before the server's reason could be read: the
    /// limit is named only when the server said so to this run before.
    fn fmt_closed(&self, f: &mut fmt::Formatter<'_>, at_limit: bool) -> fmt::Result {
        write!(
            f,
            "cannot reach Redis at {}: the server closed the connection as lockrun opened it, \
             before saying why ({})",
            self.target, self.detail
        )?;
        if at_limit {
            write!(
                f,
                "; earlier in this run it said max number of clients reached (see its \
                 maxclients setting)"
            )
        } else {
            write!(
                f,
                "; check --redis (or LOCKRUN_REDIS_URL) and that the server is up"
            )
        }
    }

    fn fmt_unready(&self, f: &mut fmt::Formatter<'_>, why: Unready) -> fmt::Result {
        let target = &self.target;
        let state = match why {
            Unready::Loading => "is loading its data set into memory (LOADING)",
            Unready::Busy => {
                "is busy running a script or function (BUSY) and serves nothing else until it \
                 ends or is killed"
            }
            Unready::TryAgain => {
                return write!(
                    f,
                    "Redis at {target} cannot serve the lock while its cluster slot is being \
                     migrated with the lock's keys split between two nodes (TRYAGAIN, or an \
                     ASK with no retry left to follow); nothing was read or \
                     changed"
                );
            }
            Unready::MasterDown => {
                "is a replica that lost its primary (MASTERDOWN) and serves nothing until it is \
                 back"
            }
            Unready::MaxClients => {
                return write!(
                    f,
                    "Redis at {target} refused the connection: max number of clients reached \
                     (see its maxclients setting, and CLIENT LIST for who holds them)"
                );
            }
            Unready::Closed { at_limit } => return self.fmt_closed(f, at_limit),
            Unready::ClusterDown | Unready::Failover | Unready::Replicas => {
                return write!(f, "Redis at {target} is unavailable: {}", self.detail);
            }
        };
        write!(f, "Redis at {target} {state}; it cannot serve the lock yet")
    }
}

#[cfg(test)]
mod tests {
    use crate::redis_conn::error::is_closed;
    use crate::redis_conn::{ErrorKind, Target, Unready};

    #[test]
    fn a_refused_connection_names_the_limit_only_when_the_server_did() {
        let target = Target::parse("redis://h:1", None).expect("valid");
        let full =
            redis::make_extension_error("ERR".into(), Some("max number of clients reached".into()));
        let line = target.error(&full).to_string();
        assert!(
            line.contains("max number of clients reached (see its maxclients setting"),
            "{line}"
        );
        let pipe = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(is_closed(&pipe));
        let unseen = target.closed_on_open(&pipe, false);
        assert_eq!(
            unseen.kind,
            ErrorKind::Transient(Unready::Closed { at_limit: false })
        );
        let line = unseen.to_string();
        assert!(line.contains("the server closed the connection"), "{line}");
        assert!(!line.contains("maxclients"), "{line}");
        let line = target.closed_on_open(&pipe, true).to_string();
        assert!(
            line.contains("said max number of clients reached"),
            "{line}"
        );
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(!is_closed(&refused));
    }
}
