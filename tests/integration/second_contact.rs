//! Second contact: what a new user still tripped on once the first-contact
//! messages did their job (issue 46). Each test runs the user's exact
//! command against a real server set up as the user had it, and holds
//! lockrun to working or to one line that says what to do.

use crate::harness::*;

/// `ACL SETUSER` with `rules` on `server`.
fn setuser(server: &Server, rules: &[&str]) {
    let _: () = server
        .query(redis::cmd("ACL").arg("SETUSER").arg(rules))
        .expect("ACL SETUSER");
}

/// `redis://lockrun@host:port` with no password anywhere logs in as
/// `lockrun` (a `nopass` user gets in), not as `default`; `-v` and
/// `status` name the user. A user that needs a password is refused with a
/// line that says none was given and where one can come from.
#[test]
fn a_user_named_without_a_password_is_the_user_lockrun_logs_in_as() {
    let server = Server::start_tcp();
    setuser(&server, &["lockrun", "on", "nopass", "~*", "&*", "+@all"]);
    setuser(
        &server,
        &["secretive", "on", ">s3cret", "~*", "&*", "+@all"],
    );
    // `default` may do nothing with keys: a run that logged in as it fails.
    setuser(
        &server,
        &["default", "resetkeys", "resetchannels", "-@all", "+acl"],
    );
    let url = format!("redis://lockrun@{}", server.addr());
    let ran = Lockrun::via(&url)
        .key("job")
        .arg("-v")
        .command(["true"])
        .run();
    ran.assert(Expect::success().stderr_has(format!(
        "on redis://{} as user 'lockrun' (from --redis) with fencing token",
        server.addr()
    )));
    let status = Lockrun::via(&url).key("job").subcommand("status").run();
    status.assert(Expect::code(1).stdout_has(format!(
        "\n  server: redis://{} as user 'lockrun'\n",
        server.addr()
    )));

    for user in ["secretive", "nosuchuser"] {
        let ran = Lockrun::via(&format!("redis://{user}@{}", server.addr()))
            .key("job")
            .command(["true"])
            .run();
        ran.assert(
            Expect::code(69)
                .stderr(format!(
                    "lockrun: Redis at redis://{} refused user '{user}' without a password \
                     (WRONGPASS: the user needs one, or does not exist, or is off), and none \
                     was given; give it in LOCKRUN_REDIS_PASSWORD, --redis-password-file or \
                     redis-password-file in lockrun.conf\n",
                    server.addr()
                ))
                .context(user),
        );
    }
    // Given one, the user that needs it gets in.
    Lockrun::via(&format!("redis://secretive@{}", server.addr()))
        .key("job")
        .env("LOCKRUN_REDIS_PASSWORD", "s3cret")
        .command(["true"])
        .run()
        .assert(Expect::success());
}

/// A password sent to a server whose `default` user has none is said as
/// that, with what to do, not as a wrong password.
#[test]
fn a_password_sent_to_a_server_without_one_is_said_so() {
    let server = Server::start_tcp();
    let ran = Lockrun::via(&format!("redis://{}", server.addr()))
        .key("job")
        .env("LOCKRUN_REDIS_PASSWORD", "pw")
        .command(["true"])
        .run();
    ran.assert(Expect::code(69).stderr(format!(
        "lockrun: Redis at redis://{} has no password set (it said: AUTH <password> called \
         without any password configured for the default user), but lockrun sent one from \
         LOCKRUN_REDIS_PASSWORD; leave the password out, or set one on the server \
         (requirepass, or an ACL user named in the URL)\n",
        server.addr()
    )));
}
