//! First contact: each mistake a new user makes gets one line that says
//! what is wrong and what to do, with no Rust debug text, against real
//! servers set up the wrong way.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::harness::*;
use crate::tls::tls_server;

/// Longer than any of these mistakes may take to be named: without its
/// own check, each would be named only once this ran out.
const REDIS_TIMEOUT: &str = "10s";

/// What no message shows: Rust's debug rendering of an error.
const DEBUG_TEXT: [&str; 3] = ["Other(", "Error(", "Kind("];

fn no_debug_text(expect: Expect) -> Expect {
    DEBUG_TEXT
        .into_iter()
        .fold(expect, |expect, text| expect.stderr_lacks(text))
}

#[test]
fn a_scheme_that_does_not_match_the_port_is_named_with_the_other() {
    let certs = Certificates::make();
    let tls_port = free_port();
    let _tls = tls_server(&certs, tls_port, &[]);
    let plain = Server::start_tcp();
    let dir = scratch();
    let marker = dir.path().join("ran");

    let plain_at_tls = Lockrun::via(&format!("redis://127.0.0.1:{tls_port}"))
        .key("job")
        .args(["--redis-timeout", REDIS_TIMEOUT])
        .touch(&marker)
        .run();
    plain_at_tls.assert(no_debug_text(
        Expect::code(69)
            .stderr(format!(
                "lockrun: cannot reach Redis at redis://127.0.0.1:{tls_port}: the port speaks \
                 TLS, and the URL plain text; use rediss://127.0.0.1:{tls_port}\n"
            ))
            .context("redis:// at a TLS port"),
    ));
    assert!(
        plain_at_tls.took < Duration::from_secs(3),
        "took {:?}",
        plain_at_tls.took
    );

    let tls_at_plain = Lockrun::via(&format!("rediss://{}", plain.addr()))
        .key("job")
        .args(["--redis-timeout", REDIS_TIMEOUT])
        .args(["--redis-ca-file".as_ref(), certs.ca().as_os_str()])
        .touch(&marker)
        .run();
    tls_at_plain.assert(no_debug_text(
        Expect::code(69)
            .stderr(format!(
                "lockrun: cannot reach Redis at rediss://{0}: the port speaks plain Redis, and \
                 the URL TLS; use redis://{0}\n",
                plain.addr()
            ))
            .context("rediss:// at a plain port"),
    ));
    assert!(
        tls_at_plain.took < Duration::from_secs(3),
        "took {:?}",
        tls_at_plain.took
    );
    assert!(!marker.exists(), "the command never runs");
    assert_eq!(plain.keys(), Vec::<String>::new(), "nothing is written");
}

#[test]
fn a_refused_password_names_the_user_and_where_it_came_from() {
    let server = Server::start_tcp();
    let _: () = server
        .query(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("billing")
                .arg("on")
                .arg(">right")
                .arg("~*")
                .arg("&*")
                .arg("+@all"),
        )
        .expect("ACL SETUSER");
    let dir = scratch();
    let file = dir.path().join("password");
    std::fs::write(&file, "wrong\n").expect("write the password file");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let refused = |from: &str| {
        no_debug_text(
            Expect::code(69)
                .stderr(format!(
                    "lockrun: Redis at redis://{} refused user 'billing' with the password from \
                     {from} (WRONGPASS: a wrong password, or no such user, or the user is off); \
                     check that this user exists on the server, is on, and has that password\n",
                    server.addr()
                ))
                .stderr_lacks("give the password")
                .context(format!("the password from {from}")),
        )
    };
    let as_billing = format!("redis://billing@{}", server.addr());
    Lockrun::via(&as_billing)
        .key("job")
        .arg("--redis-password-file")
        .arg(&file)
        .command(["true"])
        .run()
        .assert(refused(&format!("the password file {}", file.display())));
    Lockrun::via(&as_billing)
        .key("job")
        .env("LOCKRUN_REDIS_PASSWORD", "wrong")
        .command(["true"])
        .run()
        .assert(refused("LOCKRUN_REDIS_PASSWORD"));
    Lockrun::via(&format!("redis://billing:wrong@{}", server.addr()))
        .key("job")
        .command(["true"])
        .run()
        .assert(refused("the URL"));
    // The password itself is never shown.
    Lockrun::via(&format!("redis://billing:s3cret-wrong@{}", server.addr()))
        .key("job")
        .command(["true"])
        .run()
        .assert(
            Expect::code(69)
                .stderr_lacks("s3cret-wrong")
                .stderr_one_line(),
        );
}

#[test]
fn a_version_1_client_certificate_is_named_with_how_to_make_a_version_3_one() {
    let certs = Certificates::mutual();
    let port = free_port();
    let _redis = tls_server(&certs, port, &[]);
    // The usual way, which makes a version 1 certificate: no extensions.
    let v1 = certs.sign_client("v1.pem", None);
    let with_cert = |cert: &std::path::Path| {
        Lockrun::via(&format!("rediss://localhost:{port}"))
            .key("job")
            .args(["--redis-ca-file".as_ref(), certs.ca().as_os_str()])
            .args(["--redis-cert-file".as_ref(), cert.as_os_str()])
            .args(["--redis-key-file".as_ref(), certs.client_key().as_os_str()])
            .command(["true"])
            .run()
    };
    with_cert(&v1).assert(no_debug_text(
        Expect::code(64)
            .stderr(format!(
                "lockrun: --redis-cert-file {}: is an X.509 version 1 certificate (openssl x509 \
                 -req without extensions makes one), which lockrun's TLS (rustls) cannot use; \
                 make a version 3 one: give openssl x509 -req an -extfile with \
                 basicConstraints=CA:FALSE and keyUsage=digitalSignature, or make it with \
                 openssl req -x509\n",
                v1.display()
            ))
            .stderr_lacks("UnsupportedCertVersion"),
    ));
    // What the line says to do works.
    std::fs::write(
        certs.dir().join("v3.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n",
    )
    .expect("write the extension file");
    with_cert(&certs.sign_client("v3.pem", Some("v3.ext"))).assert(Expect::success());
}

/// A user with every rule the man page gives a run, but `taken` taken
/// away.
fn user_without(server: &Server, user: &str, taken: &[&str]) -> Lockrun<'static> {
    let rules: Vec<String> = crate::acl::rules("run")
        .into_iter()
        .filter(|rule| !taken.iter().any(|t| rule.starts_with(t)))
        .collect();
    let mut setuser = redis::cmd("ACL");
    setuser
        .arg("SETUSER")
        .arg(user)
        .arg(crate::acl::rules("user"))
        .arg(rules);
    let _: () = server.query(&setuser).expect("ACL SETUSER");
    Lockrun::via(&format!("redis://{user}@{}", server.addr()))
        .env("LOCKRUN_REDIS_PASSWORD", crate::acl::PASSWORD)
}

#[test]
fn missing_channel_and_key_rules_are_named_together_and_a_release_is_never_a_failure() {
    let server = Server::start_tcp();

    // Neither rule: the first run names both.
    user_without(&server, "bare", &["~", "&"])
        .key("job")
        .command(["true"])
        .run()
        .assert(no_debug_text(
            Expect::code(69)
                .stderr_has(
                    "refused lockrun's user access to the lock's keys and wake-up channels \
                     (NOPERM); add '~lockrun:* &lockrun:*' to its ACL rules",
                )
                .stderr_one_line(),
        ));

    // Keys but no channels: the holder's release still hands the lock on,
    // and says only that the waiter was not told.
    let user = || user_without(&server, "keys-only", &["&"]).key("hand");
    let mut holder = user().hold();
    let dir = scratch();
    let log = dir.path().join("waiter");
    let mut waiter = user()
        .args(["--wait", "30s"])
        .touch(dir.path().join("ran"))
        .stderr(log_file(&log))
        .spawn();
    let polling = eventually(PATIENCE, || read_log(&log).contains("polling instead"));
    assert!(
        polling,
        "the waiter never said it polls: {}",
        read_log(&log)
    );
    holder.go();
    holder.end().assert(
        Expect::success()
            .stderr_has(
                "hand: could not tell the runs waiting for it how it stands now (they find out \
                 at their next look): ",
            )
            .stderr_has("add '&lockrun:*' to its ACL rules")
            .stderr_lacks("could not release")
            .stderr_one_line(),
    );
    waiter.exits(Expect::success());
    assert!(dir.path().join("ran").exists(), "the waiter ran");
    assert!(!server.is_locked("hand"));
}

#[test]
fn a_mistyped_flag_is_suggested_once() {
    Lockrun::via("redis://127.0.0.1:1")
        .key("job")
        .args(["--timout", "3s"])
        .command(["true"])
        .run()
        .assert(Expect::code(64).stderr(
            "lockrun: unexpected argument '--timout' found; did you mean '--timeout'?; see \
             'lockrun --help'\n",
        ));
}

#[test]
fn a_shell_line_given_as_the_command_is_answered_with_sh_c() {
    let server = Server::start();
    server
        .lockrun("job")
        .command(["echo a; echo 'b'"])
        .run()
        .assert(Expect::code(127).stderr(
            "lockrun: echo a; echo 'b': command not found; lockrun runs a command without a \
             shell: for a shell line, give -- sh -c 'echo a; echo '\\''b'\\'''\n",
        ));
    // A program that is just not there gets no such advice.
    server
        .lockrun("job")
        .command(["no-such-program-here"])
        .run()
        .assert(Expect::code(127).stderr("lockrun: no-such-program-here: command not found\n"));
}

#[test]
fn a_holder_killed_on_this_host_is_gone_and_durations_read_as_a_person_would() {
    let server = Server::start();
    let mut holder = server.lockrun("job").args(["--ttl", "2h"]).hold();
    holder.run.signal(Signal::SIGKILL);
    holder.run.wait();
    let status = server.lockrun("job").subcommand("status").run();
    status.assert(Expect::code(0).stdout_where(
        "says the holder is gone and when its lease expires",
        |out| {
            out.contains(
                ", which is gone (no such process on this host): the lock is free \
                     when its lease expires in 2h, at ",
            )
        },
    ));
    server
        .lockrun("job")
        .command(["true"])
        .run()
        .assert(Expect::code(75).stderr_has(
            ", which is gone (no such process on this host): the lock is free when its lease \
             expires in 2h; not running true (exit 75)",
        ));
    let (code, json) = server.lockrun("job").status_json();
    assert_eq!(code, Some(0), "{json}");
    assert_eq!(json["holder"]["gone"], true, "{json}");
    assert_eq!(json["holders"][0]["gone"], true, "{json}");

    // A run holding the lock together is said gone on its own line.
    let mut slot = server
        .lockrun("slots")
        .args(["--slots", "2", "--ttl", "2h"])
        .hold();
    slot.run.signal(Signal::SIGKILL);
    slot.run.wait();
    let line = format!(
        "slot 0: {} pid {} for ",
        nix::unistd::gethostname()
            .expect("the host name")
            .to_string_lossy(),
        slot.run.pid()
    );
    let status = server.lockrun("slots").subcommand("status").run();
    status.assert(Expect::code(0).stdout_any());
    assert!(
        status.stdout.contains(&line)
            && status
                .stdout
                .contains(" (gone: no such process on this host), lease expires in 2h,"),
        "says the holder in slot 0 is gone: {}",
        status.stdout
    );
}
