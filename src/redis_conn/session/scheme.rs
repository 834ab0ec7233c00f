//! A URL whose scheme does not match the port: `redis://` at a port that
//! speaks only TLS, or `rediss://` at a plain one. Neither server says so: a
//! TLS port closes a plain connection as it opens, and a plain Redis waits
//! for the end of a command line that a TLS hello never sends, so the
//! handshake gets no answer at all. One more connection that speaks the
//! other scheme's first words tells which it is, and the URL to use.

use std::sync::Arc;
use std::time::Duration;

use redis::ConnectionAddr;
use tokio::net::TcpStream;

use super::Session;
use crate::redis_conn::{ErrorKind, RedisError};

/// How long a look at the other scheme waits for its answer: a server
/// answers its first words at once.
const LOOK: Duration = Duration::from_millis(500);

/// The longest a TLS handshake goes unanswered before lockrun looks whether
/// the port speaks plain Redis: well inside the time an operator waits for
/// a first run to say something.
const HANDSHAKE_UNANSWERED: Duration = Duration::from_secs(1);

impl Session {
    /// For a plain URL whose server closed the connection as it opened:
    /// the mismatch, if the port speaks TLS.
    pub(super) async fn tls_at_plain_url(&self) -> Option<RedisError> {
        let ConnectionAddr::Tcp(host, port) = self.target.info.addr() else {
            return None;
        };
        let hello = client_hello(host)?;
        let answer = tokio::time::timeout(LOOK, exchange(host, *port, &hello, 2)).await;
        // A TLS 1.x record: the server's hello, or an alert.
        let tls = matches!(answer, Ok(Some(bytes)) if matches!(bytes[..], [0x15 | 0x16, 0x03, ..]));
        tls.then(|| self.wrong_scheme("TLS", "plain text", "rediss", host, *port))
    }

    /// For a TLS URL, once its handshake has gone unanswered for a while
    /// (half the time allowed, at most `HANDSHAKE_UNANSWERED`): the
    /// mismatch, if the port speaks plain Redis. Never returns otherwise.
    pub(super) async fn plain_at_tls_url(&self, timeout: Duration) -> RedisError {
        if let ConnectionAddr::TcpTls { host, port, .. } = self.target.info.addr() {
            tokio::time::sleep((timeout / 2).min(HANDSHAKE_UNANSWERED)).await;
            let answer = tokio::time::timeout(LOOK, exchange(host, *port, b"PING\r\n", 1)).await;
            // `+PONG`, or an error such as NOAUTH: a Redis reply either way.
            if matches!(answer, Ok(Some(bytes)) if matches!(bytes[..], [b'+' | b'-', ..])) {
                return self.wrong_scheme("plain Redis", "TLS", "redis", host, *port);
            }
        }
        std::future::pending().await
    }

    fn wrong_scheme(
        &self,
        port_speaks: &str,
        url_speaks: &str,
        scheme: &str,
        host: &str,
        port: u16,
    ) -> RedisError {
        let detail = format!(
            "the port speaks {port_speaks}, and the URL {url_speaks}; use \
             {scheme}://{}",
            crate::redis_conn::hosts::authority(host, port)
        );
        self.target.failure(ErrorKind::Scheme, &detail, None)
    }
}

/// The first flight of a TLS handshake with `host`, as rustls sends it.
fn client_hello(host: &str) -> Option<Vec<u8>> {
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).ok()?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).ok()?;
    Some(hello)
}

/// Sends `words` to `host`:`port` on a new connection and reads until
/// `want` bytes came back or the server closed.
async fn exchange(host: &str, port: u16, words: &[u8], want: usize) -> Option<Vec<u8>> {
    use std::io::ErrorKind::WouldBlock;
    let stream = TcpStream::connect((host, port)).await.ok()?;
    let mut sent = 0;
    while sent < words.len() {
        stream.writable().await.ok()?;
        match stream.try_write(&words[sent..]) {
            Ok(n) => sent += n,
            Err(err) if err.kind() == WouldBlock => {}
            Err(_) => return None,
        }
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while got.len() < want {
        stream.readable().await.ok()?;
        match stream.try_read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(err) if err.kind() == WouldBlock => {}
            Err(_) => break,
        }
    }
    Some(got)
}
