//! TLS end to end: `rediss://`, `rediss+sentinel://` and `rediss+cluster://`
//! against servers that speak only TLS, with a CA of the test's own that
//! lockrun is told to trust (`--redis-ca-file`, or `SSL_CERT_FILE`), and
//! servers that ask for a client certificate (mutual TLS); each way a
//! handshake fails gets its own line.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::harness::*;

/// A run through `url` that trusts the test's CA, and only it (the
/// platform's trust store is empty), showing the client certificate if the
/// servers ask for one.
fn trusting<'a>(url: &str, certs: &Certificates) -> Lockrun<'a> {
    let run = trusting_without_certificate(url, certs);
    if certs.is_mutual() {
        run.arg("--redis-cert-file")
            .arg(certs.client_cert())
            .arg("--redis-key-file")
            .arg(certs.client_key())
    } else {
        run
    }
}

/// The same, without a client certificate.
fn trusting_without_certificate<'a>(url: &str, certs: &Certificates) -> Lockrun<'a> {
    distrusting(url, certs)
        .arg("--redis-ca-file")
        .arg(certs.ca())
}

/// A run through `url` whose platform trust store is empty.
fn distrusting<'a>(url: &str, certs: &Certificates) -> Lockrun<'a> {
    Lockrun::via(url)
        .env("SSL_CERT_FILE", "/dev/null")
        .env("SSL_CERT_DIR", certs.no_certificates())
        .key("job")
}

/// A TLS-only server on `port` with `certs`, on its unix socket too (where
/// the harness reads its keys), and `extra` redis-server arguments, which
/// win over the TLS configuration.
pub(crate) fn tls_server(certs: &Certificates, port: u16, extra: &[&str]) -> Server {
    let args: Vec<String> = certs
        .server_config(port)
        .lines()
        .flat_map(|line| {
            let (name, value) = line.split_once(' ').expect("name value");
            [format!("--{name}"), value.to_owned()]
        })
        .collect();
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(extra);
    Server::start_with(None, &args)
}

#[test]
fn tls_verifies_the_server_certificate() {
    let certs = Certificates::make();
    let port = free_port();
    // Also on 127.0.0.2, an address the certificate does not name.
    let redis = tls_server(&certs, port, &["--bind", "127.0.0.1 127.0.0.2"]);
    let url = format!("rediss://localhost:{port}");

    // Trusted by --redis-ca-file, by LOCKRUN_REDIS_CA_FILE, and as part
    // of the platform's trust store (rustls-native-certs reads
    // SSL_CERT_FILE): the lock works over TLS.
    let ran = trusting(&url, &certs).command(["true"]).run();
    ran.assert(Expect::success());
    let ran = distrusting(&url, &certs)
        .env("LOCKRUN_REDIS_CA_FILE", certs.ca())
        .command(["true"])
        .run();
    ran.assert(Expect::success());
    let ran = Lockrun::via(&url)
        .env("SSL_CERT_FILE", certs.ca())
        .key("job")
        .command(["true"])
        .run();
    ran.assert(Expect::success());
    redis.assert_only_fence("job");

    // Not trusting it: the certificate is refused and the command never runs.
    let marker = certs.dir().join("ran");
    let ran = distrusting(&url, &certs).touch(&marker).run();
    ran.assert(
        Expect::code(69)
            .stderr(format!(
                "lockrun: cannot reach Redis at {url}: the server's TLS certificate is not \
                 signed by a CA lockrun trusts (invalid peer certificate: UnknownIssuer); give \
                 the CA that signed it with --redis-ca-file (or LOCKRUN_REDIS_CA_FILE)\n"
            ))
            .stderr_one_line(),
    );
    // Waiting does not mend a certificate: refused at once under --wait too.
    let ran = distrusting(&url, &certs)
        .args(["--wait", "30s"])
        .touch(&marker)
        .run();
    ran.assert(
        Expect::code(69)
            .stderr_has("TLS certificate is not signed by a CA lockrun trusts")
            .stderr_one_line(),
    );
    assert!(ran.took < Duration::from_secs(10), "took {:?}", ran.took);
    // Signed by the trusted CA, but not for the host dialled: refused too.
    let other_host = format!("rediss://127.0.0.2:{port}");
    let ran = trusting(&other_host, &certs).touch(&marker).run();
    ran.assert(
        Expect::code(69)
            .stderr_starts(format!(
                "lockrun: cannot reach Redis at {other_host}: the server's TLS certificate is \
                 for another host (invalid peer certificate: certificate not valid for name \
                 \"127.0.0.2\""
            ))
            .stderr_has("); reach the server by a name or address the certificate holds")
            .stderr_one_line(),
    );
    assert!(!marker.exists(), "the command did not run");
}

#[test]
fn an_expired_server_certificate_is_refused() {
    let certs = Certificates::make();
    let port = free_port();
    let expired = certs.expired().display().to_string();
    let _redis = tls_server(&certs, port, &["--tls-cert-file", &expired]);
    let url = format!("rediss://localhost:{port}");
    let marker = certs.dir().join("ran");
    let ran = trusting(&url, &certs).touch(&marker).run();
    ran.assert(
        Expect::code(69)
            .stderr_starts(format!(
                "lockrun: cannot reach Redis at {url}: the server's TLS certificate has expired \
                 (invalid peer certificate: "
            ))
            .stderr_has(
                "); the server needs a new one; no lockrun option accepts an expired certificate",
            )
            .stderr_one_line(),
    );
    assert!(!marker.exists(), "the command did not run");
}

/// The line of a run that showed no client certificate to `url`, whose
/// servers ask for one.
fn asks_for_a_certificate(url: &str) -> String {
    format!("lockrun: cannot reach Redis at {url}: the server asks for a client certificate")
}

const GIVE_A_CERTIFICATE: &str = "; give --redis-cert-file and --redis-key-file (or \
                                  LOCKRUN_REDIS_CERT_FILE and LOCKRUN_REDIS_KEY_FILE)\n";

#[test]
fn mutual_tls_shows_the_client_certificate() {
    let certs = Certificates::mutual();
    let port = free_port();
    let redis = tls_server(&certs, port, &[]);
    let url = format!("rediss://localhost:{port}");
    let marker = certs.dir().join("ran");

    // Without one: a line that says what the server wants, and the command
    // never runs.
    let ran = trusting_without_certificate(&url, &certs)
        .touch(&marker)
        .run();
    ran.assert(
        Expect::code(69)
            .stderr_starts(asks_for_a_certificate(&url))
            .stderr_has("CertificateRequired")
            .stderr_has(GIVE_A_CERTIFICATE)
            .stderr_one_line(),
    );
    assert!(!marker.exists(), "the command did not run");

    // With one, by flag or environment: the lock works, and nothing is said.
    trusting(&url, &certs)
        .command(["true"])
        .run()
        .assert(Expect::success());
    trusting_without_certificate(&url, &certs)
        .env("LOCKRUN_REDIS_CERT_FILE", certs.client_cert())
        .env("LOCKRUN_REDIS_KEY_FILE", certs.client_key())
        .command(["true"])
        .run()
        .assert(Expect::success());
    let status = trusting(&url, &certs).subcommand("status").run();
    status.assert(Expect::code(1).stdout_any());
    redis.assert_only_fence("job");

    // A key that others may read: used, with one warning line.
    let shared = certs.dir().join("shared.key");
    std::fs::copy(certs.client_key(), &shared).expect("copy the key");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let ran = trusting_without_certificate(&url, &certs)
        .arg("--redis-cert-file")
        .arg(certs.client_cert())
        .arg("--redis-key-file")
        .arg(&shared)
        .command(["true"])
        .run();
    let shared = shared.display();
    ran.assert(Expect::success().stderr(format!(
        "lockrun: --redis-key-file {shared}: users other than its owner may read the private \
         key (mode 0640); make it private: chmod 600 {shared}\n"
    )));
}

#[test]
fn a_client_certificate_needs_its_key_and_a_tls_url() {
    let certs = Certificates::mutual();
    let marker = certs.dir().join("ran");
    let run = |url: &str, args: &[&dyn AsRef<std::ffi::OsStr>]| {
        let mut run = Lockrun::via(url).key("job").touch(&marker);
        for arg in args {
            run = run.arg(arg);
        }
        run.run()
    };
    let (cert, key) = (certs.client_cert(), certs.client_key());
    let tls = "rediss://localhost:1";
    run(tls, &[&"--redis-cert-file", &cert]).assert(Expect::code(64).stderr(
        "lockrun: --redis-cert-file needs --redis-key-file (or LOCKRUN_REDIS_KEY_FILE): a \
         client certificate is shown with its private key\n",
    ));
    run(tls, &[&"--redis-key-file", &key]).assert(
        Expect::code(64)
            .stderr_starts("lockrun: --redis-key-file needs --redis-cert-file")
            .stderr_one_line(),
    );
    let both: [&dyn AsRef<std::ffi::OsStr>; 4] =
        [&"--redis-cert-file", &cert, &"--redis-key-file", &key];
    run("redis://localhost:1", &both).assert(
        Expect::code(64)
            .stderr_starts(format!("lockrun: --redis-cert-file {}: ", cert.display()))
            .stderr_has("names no rediss:// URL")
            .stderr_one_line(),
    );
    // The server's key is not the client certificate's.
    let other_key = certs.dir().join("server.key");
    run(
        tls,
        &[&"--redis-cert-file", &cert, &"--redis-key-file", &other_key],
    )
    .assert(
        Expect::code(64)
            .stderr_starts(format!(
                "lockrun: --redis-key-file {}: cannot be used with the certificate",
                other_key.display()
            ))
            .stderr_one_line(),
    );
    run(
        tls,
        &[&"--redis-cert-file", &key, &"--redis-key-file", &key],
    )
    .assert(
        Expect::code(64)
            .stderr_has("--redis-cert-file")
            .stderr_has("holds no PEM certificate")
            .stderr_one_line(),
    );
    assert!(!marker.exists());
}

#[test]
fn a_ca_file_needs_a_tls_url_and_certificates() {
    let certs = Certificates::make();
    let redis = Server::start();
    let marker = certs.dir().join("ran");
    let plain = trusting(&redis.url(), &certs).touch(&marker).run();
    plain.assert(Expect::code(64).stderr_has("names no rediss:// URL"));
    let missing = Lockrun::via("rediss://localhost:1")
        .args(["--redis-ca-file", "/nonexistent/ca.pem"])
        .key("job")
        .touch(&marker)
        .run();
    missing.assert(Expect::code(64).stderr_has("--redis-ca-file /nonexistent/ca.pem"));
    let key = certs.dir().join("server.key");
    let not_a_ca = Lockrun::via("rediss://localhost:1")
        .arg("--redis-ca-file")
        .arg(&key)
        .key("job")
        .touch(&marker)
        .run();
    not_a_ca.assert(Expect::code(64).stderr_has("holds no PEM certificate"));
    assert!(!marker.exists());
}

/// `node` has no plain-text port, lockrun refuses `url`'s certificates
/// unless it trusts their CA, and servers that ask for a client certificate
/// refuse lockrun without one.
fn only_tls(url: &str, certs: &Certificates, node: &Server) {
    let plain: Vec<String> = node
        .query(redis::cmd("CONFIG").arg("GET").arg("port"))
        .expect("CONFIG GET port");
    assert_eq!(plain[1], "0", "the server has a plain-text port");
    let untrusted = distrusting(url, certs).command(["true"]).run();
    untrusted.assert(
        Expect::code(69)
            .stderr_has("is not signed by a CA lockrun trusts")
            .stderr_has("--redis-ca-file")
            .stderr_one_line(),
    );
    if certs.is_mutual() {
        let without = trusting_without_certificate(url, certs)
            .command(["true"])
            .run();
        without.assert(
            Expect::code(69)
                .stderr_starts(asks_for_a_certificate(url))
                .stderr_has(GIVE_A_CERTIFICATE)
                .stderr_one_line(),
        );
    }
}

/// What every topology must do over TLS: a holder, a run that finds the
/// lock busy, a waiter woken by its subscription when the holder releases,
/// and `status`. `node` is the server that holds the lock; `acks` replicas
/// must acknowledge every lease.
fn lock_busy_wait_and_status(url: &str, certs: &Certificates, node: &Server, acks: &str) {
    // A long ttl puts the waiter's own looks (every renewal period, 20 s)
    // far from the hand-over, so that starting soon after the release
    // proves the wake-up message came through its TLS subscription.
    let acks = [
        "--replica-acks",
        acks,
        "--ttl",
        "60s",
        "--redis-timeout",
        "2s",
    ];
    only_tls(url, certs, node);
    let mut holder = trusting(url, certs)
        .args(["--wait", "30s"])
        .args(acks)
        .hold();
    assert!(node.is_locked("job"), "{}", holder.stderr());

    let busy = trusting(url, certs).args(acks).command(["true"]).run();
    busy.assert(
        Expect::code(75)
            .stderr_starts("lockrun: job is held by ")
            .stderr_has("; not running true (exit 75)")
            .stderr_one_line(),
    );

    let status = trusting(url, certs)
        .subcommand("status")
        .arg("--json")
        .run();
    status.assert(Expect::success().stdout_any());
    let json: serde_json::Value = serde_json::from_str(&status.stdout).expect("JSON");
    assert_eq!(json["held"], true, "{json}");
    assert_eq!(json["holder"]["fencing_token"], holder.fence());
    assert_eq!(json["redis_node"], node.addr());

    let dir = scratch();
    let (started, stderr) = (dir.path().join("started"), dir.path().join("stderr"));
    let mut waiter = trusting(url, certs)
        .args(["--wait", "60s"])
        .args(acks)
        .touch(&started)
        .stderr(log_file(&stderr))
        .spawn();
    assert!(
        eventually(TOPOLOGY_PATIENCE, || node.listening_waiters("job") == 1),
        "the waiter never listened in line: {}",
        read_log(&stderr)
    );
    holder.go();
    assert!(
        eventually(Duration::from_secs(15), || started.exists()),
        "the waiter was not woken: {}",
        read_log(&stderr)
    );
    holder.end().assert(Expect::success());
    waiter.exits_saying(Expect::success(), || read_log(&stderr));
    assert!(!node.is_locked("job"));
}

#[test]
fn tls_sentinel_reaches_sentinels_and_primary_over_mutual_tls() {
    let certs = Certificates::mutual();
    let set = SentinelSet::start_tls(&certs);
    eprintln!("TLS sentinel set started in {:?}", set.started_in);
    let url = set.url();
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    lock_busy_wait_and_status(&url, &certs, set.primary(), "2");
    set.wait_replicas_in_sync();
    let fence = set.primary().fence("job");
    for replica in &set.servers[1..] {
        assert_eq!(replica.fence("job"), fence, "{}", replica.addr());
    }
}

#[test]
fn tls_cluster_follows_moved_to_tls_ports_over_mutual_tls() {
    let certs = Certificates::mutual();
    let cluster = Cluster::start_tls(&certs);
    eprintln!("TLS cluster started in {:?}", cluster.started_in);
    let (owner, _) = cluster.owner("lockrun:{job}");
    let other = cluster.other_primary("lockrun:{job}");
    // Only a node that does not own the slot: the way to the owner is a
    // MOVED, which names the owner's TLS port.
    let url = cluster.url_via(&[other]);
    assert!(url.starts_with("rediss+cluster://"), "{url}");
    lock_busy_wait_and_status(&url, &certs, cluster.node(owner), "1");
}

/// Nodes whose certificate is self-signed, given to lockrun as its CA
/// file: trusted as it stands on every node, as on one server, the owner
/// a MOVED names and the waiter's subscription included.
#[test]
fn tls_cluster_trusts_its_nodes_self_signed_certificate() {
    let certs = Certificates::self_signed();
    let cluster = Cluster::start_tls(&certs);
    let (owner, _) = cluster.owner("lockrun:{job}");
    let other = cluster.other_primary("lockrun:{job}");
    lock_busy_wait_and_status(&cluster.url_via(&[other]), &certs, cluster.node(owner), "1");
}

/// Runs the shell command `line` in `dir`, as a user would type it.
fn shell(dir: &std::path::Path, line: &str) {
    let status = std::process::Command::new("sh")
        .args(["-c", line])
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("sh runs");
    assert!(status.success(), "{line}");
}

/// A TLS-only server on `port` with `cert` and `key` (files in `dir`),
/// trusting `ca` for clients, which it does not ask for a certificate.
fn server_with(dir: &std::path::Path, port: u16, cert: &str, key: &str, ca: &str) -> Server {
    let file = |name: &str| dir.join(name).display().to_string();
    let (cert, key, ca, port) = (file(cert), file(key), file(ca), port.to_string());
    Server::start_with(
        None,
        &[
            "--port",
            "0",
            "--tls-port",
            &port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
            "--bind",
            "127.0.0.1 127.0.0.2",
        ],
    )
}

/// The certificate most people make first, its own CA (OpenSSL marks it
/// CA:TRUE) and without a subjectAltName, given to the server and to
/// `--redis-ca-file`, is trusted as redis-cli trusts it, at any host; with
/// a subjectAltName, that name is held to it.
#[test]
fn a_self_signed_certificate_in_the_ca_file_is_trusted() {
    let dir = tempfile::tempdir().expect("temp dir");
    shell(
        dir.path(),
        "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -keyout key.pem -out \
         cert.pem",
    );
    // The same marked CA:FALSE, which webpki took for naming no host.
    shell(
        dir.path(),
        "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -addext \
         basicConstraints=critical,CA:FALSE -keyout leaf.key -out leaf.pem",
    );
    for (cert, key) in [("cert.pem", "key.pem"), ("leaf.pem", "leaf.key")] {
        let port = free_port();
        let redis = server_with(dir.path(), port, cert, key, cert);
        let ca = dir.path().join(cert);
        for url in [
            format!("rediss://localhost:{port}"),
            format!("rediss://127.0.0.1:{port}"),
        ] {
            let ran = Lockrun::via(&url)
                .arg("--redis-ca-file")
                .arg(&ca)
                .key("job")
                .command(["true"])
                .run();
            ran.assert(Expect::success().context(format!("{cert} at {url}")));
        }
        redis.assert_only_fence("job");
    }

    // With a subjectAltName: trusted at the names it holds, not elsewhere.
    shell(
        dir.path(),
        "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -addext \
         subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout san.key -out san.pem",
    );
    let port = free_port();
    let _redis = server_with(dir.path(), port, "san.pem", "san.key", "san.pem");
    let ca = dir.path().join("san.pem");
    let url = format!("rediss://localhost:{port}");
    Lockrun::via(&url)
        .arg("--redis-ca-file")
        .arg(&ca)
        .key("job")
        .command(["true"])
        .run()
        .assert(Expect::success());
    let other_host = format!("rediss://127.0.0.2:{port}");
    Lockrun::via(&other_host)
        .arg("--redis-ca-file")
        .arg(&ca)
        .key("job")
        .command(["true"])
        .run()
        .assert(
            Expect::code(69)
                .stderr_starts(format!(
                    "lockrun: cannot reach Redis at {other_host}: the server's TLS certificate \
                     is for another host (invalid peer certificate: certificate not valid for \
                     name \"127.0.0.2\""
                ))
                .stderr_one_line(),
        );
    // Some other self-signed certificate, not the one in the CA file, is
    // not trusted for looking like it.
    let ran = Lockrun::via(&url)
        .arg("--redis-ca-file")
        .arg(dir.path().join("cert.pem"))
        .key("job")
        .command(["true"])
        .run();
    ran.assert(
        Expect::code(69)
            .stderr_has("invalid peer certificate")
            .stderr_one_line(),
    );
}

/// A certificate a CA signed without a subjectAltName names no host for
/// lockrun (nor for any current TLS client): the line says so, and how to
/// make one that does.
#[test]
fn a_certificate_without_a_subject_alt_name_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().expect("temp dir");
    for line in [
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca -keyout ca.key \
         -out ca.pem",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout redis.key -out redis.csr",
        // Without extensions: an X.509 version 1 certificate.
        "openssl x509 -req -in redis.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out \
         v1.pem",
        "echo basicConstraints=CA:FALSE > leaf.ext",
        "openssl x509 -req -in redis.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
         -extfile leaf.ext -out redis.pem",
    ] {
        shell(dir.path(), line);
    }
    let run = |url: &str| {
        Lockrun::via(url)
            .arg("--redis-ca-file")
            .arg(dir.path().join("ca.pem"))
            .key("job")
            .command(["true"])
            .run()
    };
    let port = free_port();
    let v1 = server_with(dir.path(), port, "v1.pem", "redis.key", "ca.pem");
    let url = format!("rediss://localhost:{port}");
    run(&url).assert(
        Expect::code(69)
            .stderr_starts(format!(
                "lockrun: cannot reach Redis at {url}: the server's TLS certificate is an X.509 \
                 version 1 certificate (openssl x509 -req without extensions makes one), which \
                 lockrun's TLS (rustls) cannot use ("
            ))
            .stderr_has(
                "sign it again with -extfile naming a file that holds \
                 subjectAltName=DNS:localhost,IP:127.0.0.1, the names and addresses lockrun \
                 dials (man lockrun-redis, TLS, has a recipe)\n",
            )
            .stderr_one_line(),
    );
    drop(v1);
    let port = free_port();
    let _redis = server_with(dir.path(), port, "redis.pem", "redis.key", "ca.pem");
    let url = format!("rediss://localhost:{port}");
    let ran = run(&url);
    ran.assert(
        Expect::code(69)
            .stderr_starts(format!(
                "lockrun: cannot reach Redis at {url}: the server's TLS certificate names no \
                 host: it has no subjectAltName, and lockrun, like browsers and other current \
                 TLS clients, does not read the CN (invalid peer certificate: "
            ))
            .stderr_has(
                "make it again with the names and addresses lockrun dials, e.g. openssl req \
                 ... -addext subjectAltName=DNS:localhost,IP:127.0.0.1 (man lockrun-redis, TLS, \
                 has a recipe)\n",
            )
            .stderr_one_line(),
    );
}

/// lockrun-redis(7)'s recipe for a test CA and a server certificate, its
/// commands run as the page writes them, makes a server lockrun reaches.
#[test]
fn the_man_pages_certificate_recipe_works() {
    let roff = include_str!("../../man/lockrun-redis.roff");
    let recipe = roff
        .split("tests/integration/tls.rs runs these commands")
        .nth(1)
        .and_then(|rest| rest.split("\n.fi").next())
        .expect("man/lockrun-redis.roff has the certificate recipe");
    let dir = tempfile::tempdir().expect("temp dir");
    let lines: Vec<String> = recipe
        .lines()
        .skip(1)
        .map(|line| line.replace("\\-", "-"))
        .collect();
    assert!(lines.len() >= 3, "{lines:?}");
    for line in &lines {
        shell(dir.path(), line);
    }
    let port = free_port();
    let redis = server_with(dir.path(), port, "redis.pem", "redis.key", "ca.pem");
    for url in [
        format!("rediss://localhost:{port}"),
        format!("rediss://127.0.0.1:{port}"),
    ] {
        Lockrun::via(&url)
            .arg("--redis-ca-file")
            .arg(dir.path().join("ca.pem"))
            .key("job")
            .command(["true"])
            .run()
            .assert(Expect::success().context(url));
    }
    redis.assert_only_fence("job");
}
