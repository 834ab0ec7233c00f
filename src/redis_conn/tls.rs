//! TLS to Redis: which certificates lockrun trusts, read once per run and
//! always handed to the redis crate (left to itself it reads the whole
//! system store at every connection), and the client certificate it shows
//! when the server asks for one (mutual TLS). Why, and which connections
//! lockrun opens itself, in docs/design.md ("TLS").

use std::fmt;
use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, ConnectionAddr, ConnectionInfo,
    IntoConnectionInfo, RedisConnectionInfo, TlsCertificates,
};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::RootCertStore;

mod pinned;
mod system;

/// CA certificates to trust (PEM): those of `--redis-ca-file`, checked to
/// parse, or the platform's.
#[derive(Clone)]
pub(crate) struct Ca {
    pem: Vec<u8>,
    /// Whether a server may show one of these certificates as its own
    /// (`pinned`): those of `--redis-ca-file`, which the operator named,
    /// not the platform's.
    pinned: bool,
}

impl fmt::Debug for Ca {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Ca")
    }
}

impl Ca {
    /// The certificates in `pem`; an error says why none can be used.
    pub(crate) fn from_pem(pem: Vec<u8>) -> Result<Self, String> {
        let count = certificates(&pem).map_err(|err| format!("not a PEM certificate: {err}"))?;
        if count == 0 {
            return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
        }
        let ca = Ca { pem, pinned: true };
        // The redis crate parses them again into its trust store; a
        // certificate it cannot use is refused now rather than at connect.
        Tls::with(ca.clone(), None)?
            .trusted(ConnectionAddr::TcpTls {
                host: "localhost".into(),
                port: 6379,
                insecure: false,
                tls_params: None,
            })
            .map_err(|err| err.to_string())?;
        Ok(ca)
    }

    /// The CAs the platform trusts, read once (the redis crate would read
    /// them at each connection).
    pub(crate) fn system() -> Result<Self, String> {
        Ok(Ca {
            pem: system::pem()?,
            pinned: false,
        })
    }
}

/// How many PEM certificates `pem` holds.
fn certificates(pem: &[u8]) -> Result<usize, rustls::pki_types::pem::Error> {
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        cert?;
        count += 1;
    }
    Ok(count)
}

/// The client certificate (with any intermediates) and its private key, of
/// `--redis-cert-file` and `--redis-key-file`.
#[derive(Clone)]
pub(crate) struct Identity {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl fmt::Debug for Identity {
    // Hand-written so that the key can never reach a debug print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Identity")
    }
}

/// Which of the two files an `Identity` could not use.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum IdentityError {
    Cert(String),
    Key(String),
}

impl Identity {
    /// The certificate chain in `cert` and the key in `key` (PEM), checked
    /// to parse and to belong together.
    pub(crate) fn from_pem(cert: Vec<u8>, key: Vec<u8>) -> Result<Self, IdentityError> {
        let chain = CertificateDer::pem_slice_iter(&cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| IdentityError::Cert(format!("not a PEM certificate: {err}")))?;
        if chain.is_empty() {
            return Err(IdentityError::Cert(
                "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
            ));
        }
        let private = PrivateKeyDer::from_pem_slice(&key).map_err(|err| {
            IdentityError::Key(format!(
                "holds no PEM private key (-----BEGIN PRIVATE KEY-----): {err}"
            ))
        })?;
        // The redis crate builds the same configuration at each connection:
        // a key of another certificate, or of a kind rustls cannot sign
        // with, is refused here, before anything is locked.
        rustls::ClientConfig::builder()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_client_auth_cert(chain, private)
            .map_err(|err| match err {
                _ if is_version_1(&err) => IdentityError::Cert(VERSION_1.into()),
                rustls::Error::InvalidCertificate(_) => {
                    IdentityError::Cert(format!("cannot be used: {err}"))
                }
                _ => IdentityError::Key(format!("cannot be used with the certificate: {err}")),
            })?;
        Ok(Identity { cert, key })
    }
}

/// What to say of an X.509 version 1 client certificate. `openssl x509
/// -req` makes one when given no extensions; redis-cli (OpenSSL) shows it,
/// but rustls refuses to, as the Web PKI has not used version 1 for
/// decades.
const VERSION_1: &str = "is an X.509 version 1 certificate (openssl x509 -req without \
                         extensions makes one), which lockrun's TLS (rustls) cannot use; make a \
                         version 3 one: give openssl x509 -req an -extfile with \
                         basicConstraints=CA:FALSE and keyUsage=digitalSignature, or make it with \
                         openssl req -x509";

/// Whether rustls refused a certificate for being X.509 version 1.
fn is_version_1(err: &rustls::Error) -> bool {
    let rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) = err else {
        return false;
    };
    other.0.downcast_ref::<webpki::Error>() == Some(&webpki::Error::UnsupportedCertVersion)
}

/// Everything lockrun needs for TLS to Redis: whom to trust, and what to
/// show when asked.
#[derive(Clone)]
pub(crate) struct Tls {
    /// For the crate's TLS: a cluster's nodes.
    certs: TlsCertificates,
    /// For lockrun's own: one server, and the servers Sentinel names.
    config: Arc<rustls::ClientConfig>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Tls")
    }
}

impl Tls {
    /// Trusting `ca` (the platform's CAs when `None`, read now), and
    /// showing `identity` if given.
    pub(crate) fn new(ca: Option<Ca>, identity: Option<Identity>) -> Result<Self, String> {
        let ca = match ca {
            Some(ca) => ca,
            None => Ca::system().map_err(|err| {
                format!(
                    "cannot read the system's CA certificates (SSL_CERT_FILE, SSL_CERT_DIR): \
                     {err}; give the CA to trust with --redis-ca-file"
                )
            })?,
        };
        Self::with(ca, identity)
    }

    fn with(ca: Ca, identity: Option<Identity>) -> Result<Self, String> {
        let config = Arc::new(client_config(&ca, identity.as_ref())?);
        Ok(Tls {
            certs: TlsCertificates {
                client_tls: identity.map(|Identity { cert, key }| ClientTlsConfig {
                    client_cert: cert,
                    client_key: key,
                }),
                root_cert: Some(ca.pem),
            },
            config,
        })
    }

    /// Opens a connection to the server at `host:port` over TLS, checking
    /// its certificate as `pinned` says, and logs in with `settings`. The
    /// caller bounds the whole, as the crate's connection timeout would.
    pub(super) async fn connect(
        &self,
        (host, port): (&str, u16),
        settings: &RedisConnectionInfo,
        config: AsyncConnectionConfig,
    ) -> redis::RedisResult<MultiplexedConnection> {
        let name = ServerName::try_from(host.to_owned()).map_err(|err| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, err.to_string())
        })?;
        let tcp = tokio::net::TcpStream::connect((host, port)).await?;
        // The handshake's last message and the first call are two writes:
        // with Nagle's algorithm the call waits for the server to
        // acknowledge the first, a round trip over a real link
        // (BENCHMARKS.md, "Round trips").
        tcp.set_nodelay(true)?;
        let stream = tokio_rustls::TlsConnector::from(Arc::clone(&self.config))
            .connect(name, tcp)
            .await?;
        let (conn, driver) =
            MultiplexedConnection::new_with_config(settings, stream, config).await?;
        // The driver ends when the last handle to the connection is
        // dropped, or the server closes it.
        tokio::spawn(driver);
        Ok(conn)
    }

    pub(super) fn certificates(&self) -> TlsCertificates {
        self.certs.clone()
    }

    /// `addr`, with these certificates if it is a TLS address.
    pub(super) fn trusted(&self, addr: ConnectionAddr) -> redis::RedisResult<ConnectionAddr> {
        Ok(self
            .trusted_info(addr.into_connection_info()?)?
            .addr()
            .clone())
    }

    /// `info` with its address using these certificates if it is a TLS
    /// address; its credentials unchanged.
    pub(super) fn trusted_info(&self, info: ConnectionInfo) -> redis::RedisResult<ConnectionInfo> {
        if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
            return Ok(info);
        }
        // The crate keeps the parsed certificates in the address, which
        // every connection made from a clone of it then uses.
        let client = Client::build_with_tls(info, self.certificates())?;
        Ok(client.get_connection_info().clone())
    }
}

/// rustls's client configuration: trusting `ca` (`pinned`), and showing
/// `identity` when the server asks for a certificate.
fn client_config(ca: &Ca, identity: Option<&Identity>) -> Result<rustls::ClientConfig, String> {
    let anchors = CertificateDer::pem_slice_iter(&ca.pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| format!("not a PEM certificate: {err}"))?;
    let mut roots = RootCertStore::empty();
    // A certificate webpki cannot take as a trust anchor is skipped here:
    // the crate's own parse of the same file refuses it, for the CA file
    // (`Ca::from_pem`) and the platform's bundle alike.
    roots.add_parsable_certificates(anchors.iter().cloned());
    let webpki = if roots.is_empty() {
        None
    } else {
        Some(
            WebPkiServerVerifier::builder(Arc::new(roots))
                .build()
                .map_err(|err| err.to_string())?,
        )
    };
    let pinned = if ca.pinned { anchors } else { Vec::new() };
    let builder = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(pinned::Verifier::new(pinned, webpki)));
    let Some(identity) = identity else {
        return Ok(builder.with_no_client_auth());
    };
    let chain = CertificateDer::pem_slice_iter(&identity.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| err.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(&identity.key).map_err(|err| err.to_string())?;
    builder
        .with_client_auth_cert(chain, key)
        .map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_certificates_is_refused() {
        assert!(Ca::from_pem(b"".to_vec()).is_err());
        assert!(Ca::from_pem(b"just text\n".to_vec()).is_err());
        let broken = b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n";
        assert!(Ca::from_pem(broken.to_vec()).is_err());
    }

    #[test]
    fn an_identity_needs_a_certificate_and_its_key() {
        let none = Identity::from_pem(b"text".to_vec(), b"text".to_vec());
        assert!(matches!(none, Err(IdentityError::Cert(_))), "{none:?}");
    }
}
