//! Why a TLS handshake with Redis failed, as far as the operator can act on
//! it: a client certificate the server asked for and did not get, or one it
//! refused; a server certificate from a CA lockrun does not trust, for
//! another host, or expired.
//!
//! Read from rustls's own error where the redis crate keeps it: it turns
//! the `io::Error` that carries it into a `RedisError` whose source is that
//! error behind an `Arc`. Only where the crate keeps the text alone is the
//! text read, as rustls words it.

use std::error::Error;
use std::io;
use std::sync::Arc;

use rustls::{AlertDescription, CertificateError};

/// What went wrong in the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TlsRefusal {
    /// The server asks for a client certificate, and lockrun had none.
    CertificateRequired,
    /// The server refused the client certificate lockrun showed.
    ClientCertificate,
    /// The server's certificate is not signed by a CA lockrun trusts.
    UnknownIssuer,
    /// The server's certificate does not name the host lockrun dialled.
    OtherHost,
    /// The server's certificate names no host at all: it has no
    /// subjectAltName, and TLS clients no longer read the CN.
    NoNames,
    /// The server's certificate has expired.
    Expired,
    /// The server's certificate is X.509 version 1, which rustls cannot
    /// use (`openssl x509 -req` without extensions makes one).
    Version1,
    /// lockrun refused the server's certificate for another reason.
    Certificate,
}

/// What went wrong, if `err` is a failed TLS handshake.
pub(crate) fn refusal(err: &redis::RedisError) -> Option<TlsRefusal> {
    match rustls_error(err) {
        Some(tls) => of_error(tls),
        None => by_text(&err.to_string()),
    }
}

/// The rustls error behind `err`, if the crate kept it.
fn rustls_error(err: &redis::RedisError) -> Option<&rustls::Error> {
    let source = err.source()?;
    let io = source.downcast_ref::<io::Error>().or_else(|| {
        source
            .downcast_ref::<Arc<dyn Error + Send + Sync>>()?
            .downcast_ref::<io::Error>()
    })?;
    io.get_ref()?.downcast_ref::<rustls::Error>()
}

fn of_error(err: &rustls::Error) -> Option<TlsRefusal> {
    Some(match err {
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired) => {
            TlsRefusal::CertificateRequired
        }
        rustls::Error::AlertReceived(
            AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA,
        ) => TlsRefusal::ClientCertificate,
        rustls::Error::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer => TlsRefusal::UnknownIssuer,
            CertificateError::NotValidForNameContext { presented, .. } if presented.is_empty() => {
                TlsRefusal::NoNames
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                TlsRefusal::OtherHost
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                TlsRefusal::Expired
            }
            CertificateError::Other(other)
                if other.0.downcast_ref::<webpki::Error>()
                    == Some(&webpki::Error::UnsupportedCertVersion) =>
            {
                TlsRefusal::Version1
            }
            _ => TlsRefusal::Certificate,
        },
        _ => return None,
    })
}

/// The same by rustls's words, for an error whose chain was lost.
fn by_text(text: &str) -> Option<TlsRefusal> {
    if let Some(alert) = text.split("received fatal alert: ").nth(1) {
        let alert = alert.split(|c: char| !c.is_ascii_alphanumeric()).next()?;
        return match alert {
            "CertificateRequired" => Some(TlsRefusal::CertificateRequired),
            "BadCertificate"
            | "UnsupportedCertificate"
            | "CertificateRevoked"
            | "CertificateExpired"
            | "CertificateUnknown"
            | "UnknownCA" => Some(TlsRefusal::ClientCertificate),
            _ => None,
        };
    }
    let why = text.split("invalid peer certificate: ").nth(1)?;
    Some(if why.starts_with("UnknownIssuer") {
        TlsRefusal::UnknownIssuer
    } else if why.contains("UnsupportedCertVersion") {
        TlsRefusal::Version1
    } else if why.contains("not valid for any names") {
        TlsRefusal::NoNames
    } else if why.starts_with("certificate not valid for name")
        || why.starts_with("NotValidForName")
    {
        TlsRefusal::OtherHost
    } else if why.starts_with("certificate expired") || why.starts_with("Expired") {
        TlsRefusal::Expired
    } else {
        TlsRefusal::Certificate
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through_the_crate(err: rustls::Error) -> redis::RedisError {
        redis::RedisError::from(io::Error::new(io::ErrorKind::InvalidData, err))
    }

    #[test]
    fn each_refusal_is_read_from_the_rustls_error() {
        let cases = [
            (
                rustls::Error::AlertReceived(AlertDescription::CertificateRequired),
                TlsRefusal::CertificateRequired,
            ),
            (
                rustls::Error::AlertReceived(AlertDescription::UnknownCA),
                TlsRefusal::ClientCertificate,
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
                TlsRefusal::UnknownIssuer,
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::NotValidForName),
                TlsRefusal::OtherHost,
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
                    expected: rustls::pki_types::ServerName::try_from("localhost")
                        .expect("a name")
                        .to_owned(),
                    presented: Vec::new(),
                }),
                TlsRefusal::NoNames,
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::Expired),
                TlsRefusal::Expired,
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::BadSignature),
                TlsRefusal::Certificate,
            ),
        ];
        for (err, want) in cases {
            let text = err.to_string();
            assert_eq!(refusal(&through_the_crate(err)), Some(want), "{text}");
            let lost = redis::RedisError::from((redis::ErrorKind::Io, "io", text.clone()));
            assert_eq!(refusal(&lost), Some(want), "{text}");
        }
        let other = rustls::Error::AlertReceived(AlertDescription::HandshakeFailure);
        assert_eq!(refusal(&through_the_crate(other)), None);
        let refused = redis::RedisError::from(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(refusal(&refused), None);
    }
}
