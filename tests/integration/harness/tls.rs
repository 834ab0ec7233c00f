//! `Certificates`: a private CA and a server certificate it signed, for TLS-only servers.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tempfile::TempDir;

/// A CA of the test's own and one server certificate for `localhost` and
/// `127.0.0.1` (SANs: rustls checks the name the client dialled, and
/// sentinels and clusters name their servers by IP address). Every server
/// of a topology shares the one certificate, and uses it as its client
/// certificate towards the others (replication, the cluster bus).
pub struct Certificates {
    dir: TempDir,
}

impl Certificates {
    pub fn make() -> Self {
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
        std::fs::create_dir(dir.path().join("empty")).expect("an empty directory");
        Certificates { dir }
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

    /// redis.conf lines for a server (or sentinel) that speaks only TLS, on
    /// `port`: no plain-text port, TLS to its primary and on the cluster
    /// bus, and no client certificate asked of clients (lockrun sends none).
    pub fn server_config(&self, port: u16) -> String {
        let file = |name: &str| self.dir.path().join(name).display().to_string();
        format!(
            "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\n\
             tls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\n",
            file("server.pem"),
            file("server.key"),
            file("ca.pem"),
        )
    }

    /// What `redis-cli` needs to reach these servers.
    pub fn cli_args(&self) -> Vec<String> {
        vec![
            "--tls".into(),
            "--cacert".into(),
            self.ca().display().to_string(),
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
