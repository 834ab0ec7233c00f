//! The server certificate check: the Web PKI's (webpki, as rustls does it),
//! except that a server certificate that is itself one of the certificates
//! in `--redis-ca-file` is trusted as it stands, as redis-cli (OpenSSL)
//! trusts it; its dates, and its subjectAltNames if it has any, are still
//! checked. Why in docs/design.md ("TLS").

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};

/// webpki's check, with the certificates of the CA file trusted as server
/// certificates too.
#[derive(Debug)]
pub(super) struct Verifier {
    /// The certificates that a server may show as they are; empty when
    /// lockrun trusts the platform's CAs.
    pinned: Vec<CertificateDer<'static>>,
    /// `None` when no CA is trusted (an empty platform store): every
    /// certificate is then from an unknown issuer, as the crate would say.
    webpki: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl Verifier {
    pub(super) fn new(
        pinned: Vec<CertificateDer<'static>>,
        webpki: Option<Arc<WebPkiServerVerifier>>,
    ) -> Self {
        Verifier {
            pinned,
            webpki,
            algorithms: rustls::crypto::ring::default_provider().signature_verification_algorithms,
        }
    }

    fn is_pinned(&self, cert: &CertificateDer<'_>) -> bool {
        self.pinned
            .iter()
            .any(|pinned| pinned.as_ref() == cert.as_ref())
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(webpki) = &self.webpki else {
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer,
            ));
        };
        let refused = match webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => return Ok(verified),
            Err(refused) => refused,
        };
        if !self.is_pinned(end_entity) || !pinning_answers(&refused) {
            return Err(refused);
        }
        names_hold(end_entity, server_name).map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Whether webpki refused the certificate only for what being trusted as it
/// stands makes moot: a CA certificate shown as the server's own, or one
/// that names no host. Anything else (its dates, a name it holds that is
/// not the host dialled) stands.
fn pinning_answers(refused: &rustls::Error) -> bool {
    match refused {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(other))) => {
            other.downcast_ref::<webpki::Error>() == Some(&webpki::Error::CaUsedAsEndEntity)
        }
        rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            presented,
            ..
        }) => presented.is_empty(),
        _ => false,
    }
}

/// The names a pinned certificate holds, if any, checked against the host
/// dialled; webpki stops at the CA flag before it looks at them.
fn names_hold(
    cert: &CertificateDer<'_>,
    server_name: &ServerName<'_>,
) -> Result<(), rustls::Error> {
    let parsed = webpki::EndEntityCert::try_from(cert).map_err(other)?;
    match parsed.verify_is_valid_for_subject_name(server_name) {
        Ok(()) => Ok(()),
        Err(webpki::Error::CertNotValidForName(context)) if context.presented.is_empty() => Ok(()),
        Err(webpki::Error::CertNotValidForName(context)) => Err(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForNameContext {
                expected: context.expected,
                presented: context.presented,
            },
        )),
        Err(err) => Err(other(err)),
    }
}

fn other(err: webpki::Error) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(err))))
}
