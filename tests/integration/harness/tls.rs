//! `Certificates`: a private CA, and the server and client certificates it
//! signed, for TLS-only servers that may ask clients for a certificate.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tempfile::TempDir;

/// A CA of the test's own and one server certificate for `localhost` and
/// `127.0.0.1` (SANs: rustls checks the name the client dialled, and
/// sentinels and clusters name their servers by IP address). Every server
/// of a topology shares the one certificate, and uses it as its client
/// certificate towards the others (replication, the cluster bus). Also a
/// client certificate for lockrun (and the harness), and an expired copy of
/// the server's.
pub struct Certificates {
    dir: TempDir,
    /// Whether servers ask every client for a certificate
    /// (`tls-auth-clients yes`, Redis's default).
    mutual: bool,
    /// Whether the servers' certificate is self-signed (`self_signed`).
    self_signed: bool,
}

impl Certificates {
    /// Certificates for servers that ask clients for none.
    pub fn make() -> Self {
        Self::make_for(false)
    }

    /// Certificates for servers that ask every client for one.
    pub fn mutual() -> Self {
        Self::make_for(true)
    }

    /// Certificates for servers that ask clients for none, whose own
    /// certificate is self-signed, its own CA (OpenSSL's default for
    /// `req -x509`): what a client trusts is that very certificate.
    pub fn self_signed() -> Self {
        let mut certs = Self::make_for(false);
        certs.self_signed = true;
        let openssl = |args: &str| openssl(certs.dir(), args);
        openssl(
            "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
             -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
             -keyout server.key -out server.pem",
        );
        std::fs::copy(certs.dir().join("server.pem"), certs.ca()).expect("copy the certificate");
        certs
    }

    fn make_for(mutual: bool) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockrun-tls-")
            .tempdir()
            .expect("temp dir");
        let openssl = |args: &str| openssl(dir.path(), args);
        // P-256 keys: as good for the test as RSA, and much cheaper to make
        // and to handshake with on a busy machine.
        let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
        openssl(&format!(
            "req -x509 {key} -days 2 -subj /CN=lockrun-test-CA -keyout ca.key -out ca.pem"
        ));
        std::fs::write(
            dir.path().join("san.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .expect("write extension file");
        openssl(&format!(
            "req {key} -subj /CN=localhost -keyout server.key -out server.csr"
        ));
        openssl(
            "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
             -extfile san.ext -out server.pem",
        );
        // The same, valid until a day before it was made.
        openssl(
            "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days -1 \
             -extfile san.ext -out expired.pem",
        );
        openssl(&format!(
            "req {key} -subj /CN=lockrun-client -keyout client.key -out client.csr"
        ));
        // With an extension, so a version 3 certificate: rustls takes no
        // other.
        std::fs::write(
            dir.path().join("client.ext"),
            "extendedKeyUsage=clientAuth\n",
        )
        .expect("write extension file");
        openssl(
            "x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
             -extfile client.ext -out client.pem",
        );
        // Private, as a key should be: lockrun warns otherwise.
        let private = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(dir.path().join("client.key"), private).expect("chmod");
        std::fs::create_dir(dir.path().join("empty")).expect("an empty directory");
        Certificates {
            dir,
            mutual,
            self_signed: false,
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A directory with no certificates, for `SSL_CERT_DIR`.
    pub fn no_certificates(&self) -> PathBuf {
        self.dir.path().join("empty")
    }

    /// The CA's certificate, PEM: what a client must trust.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.ca()).expect("read the CA certificate")
    }

    /// Whether servers ask every client for a certificate.
    pub fn is_mutual(&self) -> bool {
        self.mutual
    }

    /// Whether the servers' certificate is self-signed, a CA of its own.
    pub fn is_self_signed(&self) -> bool {
        self.self_signed
    }

    /// lockrun's client certificate, PEM, signed by the CA.
    pub fn client_cert(&self) -> PathBuf {
        self.dir.path().join("client.pem")
    }

    /// Its private key, mode 0600.
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("client.key")
    }

    /// lockrun's client key signed again by the CA into the file `name`,
    /// with the extensions in the file `extfile` in `dir`, or none: then
    /// `openssl x509 -req` makes an X.509 version 1 certificate.
    pub fn sign_client(&self, name: &str, extfile: Option<&str>) -> PathBuf {
        let ext = extfile.map_or(String::new(), |file| format!(" -extfile {file}"));
        openssl(
            self.dir.path(),
            &format!(
                "x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2{ext} \
                 -out {name}"
            ),
        );
        self.dir.path().join(name)
    }

    /// The server's certificate, expired.
    pub fn expired(&self) -> PathBuf {
        self.dir.path().join("expired.pem")
    }

    /// What the harness's own connections trust and show.
    pub fn for_harness(&self) -> redis::TlsCertificates {
        let read = |path: PathBuf| std::fs::read(path).expect("read a certificate");
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: read(self.client_cert()),
                client_key: read(self.client_key()),
            }),
            root_cert: Some(self.ca_pem()),
        }
    }

    /// redis.conf lines for a server (or sentinel) that speaks only TLS, on
    /// `port`: no plain-text port, TLS to its primary and on the cluster
    /// bus, and a client certificate asked of every client if `mutual`.
    pub fn server_config(&self, port: u16) -> String {
        let file = |name: &str| self.dir.path().join(name).display().to_string();
        format!(
            "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\n\
             tls-ca-cert-file {}\ntls-auth-clients {}\ntls-replication yes\n",
            file("server.pem"),
            file("server.key"),
            file("ca.pem"),
            if self.mutual { "yes" } else { "no" },
        )
    }

    /// What `redis-cli` needs to reach these servers.
    pub fn cli_args(&self) -> Vec<String> {
        vec![
            "--tls".into(),
            "--cacert".into(),
            self.ca().display().to_string(),
            "--cert".into(),
            self.client_cert().display().to_string(),
            "--key".into(),
            self.client_key().display().to_string(),
        ]
    }
}

/// Runs `openssl ARGS` (split at spaces) in `dir`.
fn openssl(dir: &Path, args: &str) {
    let status = Command::new("openssl")
        .args(args.split_whitespace())
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl must be installed (scripts/test installs it)");
    assert!(status.success(), "openssl {args}");
}
