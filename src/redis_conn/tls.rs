//! TLS to Redis: which certificates lockrun trusts, and the client
//! certificate it shows when the server asks for one (mutual TLS).
//!
//! Trust: by default the platform's (rustls-native-certs: `SSL_CERT_FILE`,
//! `SSL_CERT_DIR`, else the system bundle). With `--redis-ca-file` only the
//! CA certificates in that file, as `redis-cli --cacert` does: a private CA
//! is trusted for Redis alone, and the command keeps the environment it had,
//! where `SSL_CERT_FILE` would have replaced the trust of every TLS client it
//! runs. The host name is verified either way.
//!
//! lockrun always hands the redis crate the certificates to trust, read
//! once per run: left to itself, the crate reads and parses the whole system
//! store at every connection, even one given its own CA, which made a TLS
//! run cost twice a TCP run. With `--redis-ca-file` the system store is
//! never read.

use std::fmt;

use redis::{
    Client, ClientTlsConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, TlsCertificates,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

mod system;

/// CA certificates to trust (PEM): those of `--redis-ca-file`, checked to
/// parse, or the platform's.
#[derive(Clone)]
pub(crate) struct Ca {
    pem: Vec<u8>,
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
        let ca = Ca { pem };
        // The redis crate parses them again into its trust store; a
        // certificate it cannot use is refused now rather than at connect.
        Tls::with(Some(ca.clone()), None)
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
    certs: TlsCertificates,
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
        Ok(Self::with(Some(ca), identity))
    }

    fn with(ca: Option<Ca>, identity: Option<Identity>) -> Self {
        Tls {
            certs: TlsCertificates {
                client_tls: identity.map(|Identity { cert, key }| ClientTlsConfig {
                    client_cert: cert,
                    client_key: key,
                }),
                root_cert: ca.map(|ca| ca.pem),
            },
        }
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

/// `info`, with `tls` if there is one.
pub(super) fn trusting(
    tls: Option<&Tls>,
    info: ConnectionInfo,
) -> redis::RedisResult<ConnectionInfo> {
    match tls {
        Some(tls) => tls.trusted_info(info),
        None => Ok(info),
    }
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
