//! TLS end to end: `rediss://`, `rediss+sentinel://` and `rediss+cluster://`
//! against servers that speak only TLS, with a CA of the test's own that
//! lockrun is told to trust (`--redis-ca-file`, or `SSL_CERT_FILE`); and a
//! certificate it does not trust refused.

use std::time::Duration;

use crate::harness::*;

/// A run through `url` that trusts the test's CA, and only it: the
/// platform's trust store is empty.
fn trusting<'a>(url: &str, certs: &Certificates) -> Lockrun<'a> {
    distrusting(url, certs)
        .arg("--redis-ca-file")
        .arg(certs.ca())
}

/// A run through `url` whose platform trust store is empty (but readable:
/// the redis crate reads it even with a CA file, and fails if it cannot).
fn distrusting<'a>(url: &str, certs: &Certificates) -> Lockrun<'a> {
    Lockrun::via(url)
        .env("SSL_CERT_FILE", "/dev/null")
        .env("SSL_CERT_DIR", certs.no_certificates())
        .key("job")
}

#[test]
fn tls_verifies_the_server_certificate() {
    let certs = Certificates::make();
    let port = free_port();
    let config = certs.server_config(port);
    let args: Vec<String> = config
        .lines()
        .flat_map(|line| {
            let (name, value) = line.split_once(' ').expect("name value");
            [format!("--{name}"), value.to_owned()]
        })
        .collect();
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Also on 127.0.0.2, an address the certificate does not name.
    args.extend(["--bind", "127.0.0.1 127.0.0.2"]);
    // On its unix socket too, where the harness reads its keys.
    let redis = Server::start_with(None, &args);
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
            .stderr_has("invalid peer certificate: UnknownIssuer")
            .stderr_has("trust its CA with --redis-ca-file"),
    );
    // Signed by the trusted CA, but not for the host dialled: refused too.
    let other_host = format!("rediss://127.0.0.2:{port}");
    let ran = trusting(&other_host, &certs).touch(&marker).run();
    ran.assert(Expect::code(69).stderr_has("not valid for name"));
    assert!(!marker.exists(), "the command did not run");
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

/// `node` has no plain-text port, and lockrun refuses `url`'s certificates
/// unless it trusts their CA.
fn only_tls(url: &str, certs: &Certificates, node: &Server) {
    let plain: Vec<String> = node
        .query(redis::cmd("CONFIG").arg("GET").arg("port"))
        .expect("CONFIG GET port");
    assert_eq!(plain[1], "0", "the server has a plain-text port");
    let untrusted = distrusting(url, certs).command(["true"]).run();
    untrusted.assert(Expect::code(69).stderr_has("trust its CA with --redis-ca-file"));
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
    assert!(waiter.wait().success(), "{}", read_log(&stderr));
    assert!(!node.is_locked("job"));
}

#[test]
fn tls_sentinel_reaches_sentinels_and_primary_over_tls() {
    let certs = Certificates::make();
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
fn tls_cluster_follows_moved_to_tls_ports() {
    let certs = Certificates::make();
    let cluster = Cluster::start_tls(&certs);
    eprintln!("TLS cluster started in {:?}", cluster.started_in);
    let (owner, _) = cluster.owner("lockrun:{job}");
    let other = cluster
        .primaries()
        .into_iter()
        .find(|&p| p != owner)
        .expect("another primary");
    // Only a node that does not own the slot: the way to the owner is a
    // MOVED, which names the owner's TLS port.
    let url = cluster.url_via(&[other]);
    assert!(url.starts_with("rediss+cluster://"), "{url}");
    lock_busy_wait_and_status(&url, &certs, cluster.node(owner), "1");
}
