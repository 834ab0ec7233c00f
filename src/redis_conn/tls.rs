//! Which certificates lockrun trusts for TLS to Redis. By default the
//! platform's (rustls-native-certs: `SSL_CERT_FILE`, `SSL_CERT_DIR`, else
//! the system bundle). With `--redis-ca-file` only the CA certificates in
//! that file, as `redis-cli --cacert` does: a private CA is trusted for
//! Redis alone, and the command keeps the environment it had, where
//! `SSL_CERT_FILE` would have replaced the trust of every TLS client it
//! runs. The host name is verified either way.

use std::fmt;

use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// The CA certificates of `--redis-ca-file`, checked to parse.
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
        let mut count = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            cert.map_err(|err| format!("not a PEM certificate: {err}"))?;
            count += 1;
        }
        if count == 0 {
            return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
        }
        let ca = Ca { pem };
        // The redis crate parses them again into its trust store; a
        // certificate it cannot use is refused now rather than at connect.
        ca.trusted(ConnectionAddr::TcpTls {
            host: "localhost".into(),
            port: 6379,
            insecure: false,
            tls_params: None,
        })
        .map_err(|err| err.to_string())?;
        Ok(ca)
    }

    pub(super) fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: None,
            root_cert: Some(self.pem.clone()),
        }
    }

    /// `addr`, trusting these certificates if it is a TLS address.
    pub(super) fn trusted(&self, addr: ConnectionAddr) -> redis::RedisResult<ConnectionAddr> {
        Ok(self
            .trusted_info(addr.into_connection_info()?)?
            .addr()
            .clone())
    }

    /// `info` with its address trusting these certificates if it is a TLS
    /// address; its credentials unchanged.
    pub(super) fn trusted_info(&self, info: ConnectionInfo) -> redis::RedisResult<ConnectionInfo> {
        if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
            return Ok(info);
        }
        // The crate keeps the trust store in the address, which every
        // connection made from a clone of it then uses.
        let client = Client::build_with_tls(info, self.certificates())?;
        Ok(client.get_connection_info().clone())
    }
}

/// `info`, trusting `ca` if there is one.
pub(super) fn trusting(
    ca: Option<&Ca>,
    info: ConnectionInfo,
) -> redis::RedisResult<ConnectionInfo> {
    match ca {
        Some(ca) => ca.trusted_info(info),
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
}
