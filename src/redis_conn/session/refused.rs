//! Why a server refused a new connection. Redis at its `maxclients` limit
//! writes `ERR max number of clients reached` as soon as it accepts, then
//! closes: lockrun reads that as the answer to its first command when the
//! reply comes first, but when the close wins the race, the redis crate
//! reports only a broken pipe or a reset, and the reason is lost with its
//! socket. Then lockrun opens one more connection that sends nothing and
//! reads what the server says unasked: the same refusal, if that was it
//! (a server with room says nothing, and the look ends after `LOOK`). In a
//! cluster, when no listed node answered and the failure is one of I/O,
//! every listed node is looked at so.

use std::time::Duration;

use futures_util::future::join_all;
use redis::{ConnectionAddr, RedisConnectionInfo};
use tokio::net::{TcpStream, UnixStream};

use super::{connect, Session, Topology};
use crate::redis_conn::error::is_closed;
use crate::redis_conn::{ErrorKind, RedisError, Unready};

/// How long the look waits for the server to speak first. Redis writes its
/// refusal in the same step that accepts the connection.
const LOOK: Duration = Duration::from_millis(200);

/// The most of a refusal lockrun reads: one error line.
const MAX_REFUSAL: usize = 512;

impl Session {
    /// `err`, the failure to open a connection within `timeout` or of the
    /// first call on it, as the operator should read it: with the server's
    /// reason when it closed the connection under lockrun and says why to
    /// a second look.
    pub(super) async fn refused(
        &mut self,
        err: &redis::RedisError,
        timeout: Duration,
    ) -> RedisError {
        let clustered_io = self.target.is_cluster() && err.kind() == redis::ErrorKind::Io;
        let error = if err.is_timeout() {
            self.target.timed_out(timeout)
        } else if is_closed(err) || clustered_io {
            match self.unasked(LOOK.min(timeout)).await {
                Some(reason) => self.target.error(&reason),
                None if clustered_io => self.error(err),
                None => match self.tls_at_plain_url().await {
                    Some(mismatch) => mismatch,
                    None => self.target.closed_on_open(err, self.at_limit),
                },
            }
        } else {
            self.error(err)
        };
        if error.kind == ErrorKind::Auth && self.lets_in_without_password(timeout).await {
            return self.target.failure(
                ErrorKind::PasswordUnset,
                &self.target.password_source(),
                None,
            );
        }
        if error.kind == ErrorKind::Transient(Unready::MaxClients) {
            self.at_limit = true;
        }
        error
    }

    /// Whether the one server in the URL lets a client in without a
    /// password, when it refused the one lockrun sent for `default`: then
    /// it has none to check. Redis says so (`AUTH <password> called without
    /// any password configured for the default user`), but the redis crate
    /// keeps only that authentication failed.
    async fn lets_in_without_password(&self, timeout: Duration) -> bool {
        if !matches!(self.target.topology, Topology::Single) || self.target.user().is_some() {
            return false;
        }
        let info = self
            .target
            .info
            .clone()
            .set_redis_settings(RedisConnectionInfo::default().set_skip_set_lib_name());
        let ping = async {
            let mut conn = connect(&info, self.target.tls.as_ref(), timeout).await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await
        };
        matches!(tokio::time::timeout(timeout, ping).await, Ok(Ok(_)))
    }

    /// What the one server in the URL, or the first of the cluster nodes it
    /// lists, says unasked, within `within`. Not behind Sentinel, whose
    /// servers the URL does not name.
    async fn unasked(&self, within: Duration) -> Option<redis::RedisError> {
        match &self.target.topology {
            Topology::Single => unasked(self.target.info.addr(), within).await,
            Topology::Cluster(seeds) => {
                let looks = seeds.addrs().iter().map(|addr| unasked(addr, within));
                join_all(looks).await.into_iter().flatten().next()
            }
            Topology::Sentinel(_) => None,
        }
    }
}

/// The error reply the server at `addr` sends a connection that says
/// nothing, within `within`; `None` if it sends none (or over TLS, whose
/// handshake lockrun would have to send first).
async fn unasked(addr: &ConnectionAddr, within: Duration) -> Option<redis::RedisError> {
    let mut said = Vec::new();
    let read = async {
        match addr {
            ConnectionAddr::Tcp(host, port) => {
                let stream = TcpStream::connect((host.as_str(), *port)).await.ok()?;
                read_line(&mut said, |buf| stream.try_read(buf), || stream.readable()).await
            }
            ConnectionAddr::Unix(path) => {
                let stream = UnixStream::connect(path).await.ok()?;
                read_line(&mut said, |buf| stream.try_read(buf), || stream.readable()).await
            }
            _ => None,
        }
    };
    tokio::time::timeout(within, read).await.ok()??;
    match redis::parse_redis_value(&said) {
        Ok(redis::Value::ServerError(reply)) => Some(reply.into()),
        _ => None,
    }
}

/// Reads into `said` until a line ends, the server closes, or the line is
/// longer than any refusal.
async fn read_line<F, R>(
    said: &mut Vec<u8>,
    mut try_read: impl FnMut(&mut [u8]) -> std::io::Result<usize>,
    readable: impl Fn() -> F,
) -> Option<()>
where
    F: std::future::Future<Output = std::io::Result<R>>,
{
    let mut buf = [0u8; MAX_REFUSAL];
    while !said.ends_with(b"\r\n") && said.len() < MAX_REFUSAL {
        readable().await.ok()?;
        match try_read(&mut buf) {
            Ok(0) => break,
            Ok(n) => said.extend_from_slice(&buf[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refusal_sent_unasked_is_read() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accept");
            stream.writable().await.expect("writable");
            stream
                .try_write(b"-ERR max number of clients reached\r\n")
                .expect("write");
        });
        let addr = ConnectionAddr::Tcp("127.0.0.1".into(), port);
        let reason = unasked(&addr, Duration::from_secs(5)).await.expect("read");
        server.await.expect("server");
        let target = crate::redis_conn::Target::parse(&format!("redis://127.0.0.1:{port}"), None)
            .expect("valid");
        let error = target.error(&reason);
        assert_eq!(error.kind, ErrorKind::Transient(Unready::MaxClients));
        assert!(
            error.to_string().contains("max number of clients reached"),
            "{error}"
        );
    }
}
