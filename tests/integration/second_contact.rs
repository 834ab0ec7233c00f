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
    // For scripts, the URL stays a URL and the user has a field of its own.
    let (_, json) = Lockrun::via(&url).key("job").status_json();
    assert_eq!(json["server"], format!("redis://{}", server.addr()));
    assert_eq!(json["user"], "lockrun");

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
/// that, with what to do, not as a wrong password. The acquire that went
/// with the refused AUTH ran as `default` and took the lock: the run gives
/// it back, and its command does not run.
#[test]
fn a_password_sent_to_a_server_without_one_is_said_so() {
    let server = Server::start_tcp();
    let dir = scratch();
    let ran_marker = dir.path().join("ran");
    let ran = Lockrun::via(&format!("redis://{}", server.addr()))
        .key("job")
        .env("LOCKRUN_REDIS_PASSWORD", "pw")
        .command(["touch", &ran_marker.display().to_string()])
        .run();
    assert!(!ran_marker.exists(), "the command ran");
    assert!(!server.is_locked("job"), "the lock was left taken");
    ran.assert(Expect::code(69).stderr(format!(
        "lockrun: Redis at redis://{} has no password set (it said: AUTH <password> called \
         without any password configured for the default user), but lockrun sent one from \
         LOCKRUN_REDIS_PASSWORD; leave the password out, or set one on the server \
         (requirepass, or an ACL user named in the URL)\n",
        server.addr()
    )));
}

/// flock(1)'s options, typed from habit, each get one line with the
/// lockrun way, exit 64; a bare number of seconds is told its unit once.
#[test]
fn flock_habits_are_answered_with_the_lockrun_way() {
    let url = "redis://127.0.0.1:1";
    for (args, command, want) in [
        (
            &["-n", "--key", "job"][..],
            &["true"][..],
            "lockrun: unexpected argument '-n' found; flock's -n is lockrun's default: a run \
             that finds the lock taken exits 75 at once; leave -n out (--wait DURATION waits); \
             see 'lockrun --help'\n",
        ),
        (
            &["--key", "job", "-c", "echo hi"],
            &[],
            "lockrun: unexpected argument '-c' found; flock's -c CMD is -- sh -c CMD in \
             lockrun: lockrun --key NAME -- sh -c 'CMD'; see 'lockrun --help'\n",
        ),
        (
            &["-E", "0", "--key", "job"],
            &["true"],
            "lockrun: unexpected argument '-E' found; flock's -E N is --busy-exit-code N in \
             lockrun; see 'lockrun --help'\n",
        ),
        (
            &["-w", "5", "--key", "job"],
            &["true"],
            "lockrun: invalid value '5' for '--wait <DURATION|forever>': a number needs a \
             unit: write 5s for 5 seconds, or 500ms, 2m, 1h30m; see 'lockrun --help'\n",
        ),
        (
            &["--wait", "5", "--key", "job"],
            &["true"],
            "lockrun: invalid value '5' for '--wait <DURATION|forever>': a number needs a \
             unit: write 5s for 5 seconds, or 500ms, 2m, 1h30m; see 'lockrun --help'\n",
        ),
    ] {
        Lockrun::via(url)
            .args(args)
            .command(command)
            .run()
            .assert(Expect::code(64).stderr(want).context(args.join(" ")));
    }
}

/// A ttl too short for the other values is answered with one a person
/// would type, rounded up to a value that fits with the defaults it moves;
/// that value then works.
#[test]
fn a_suggested_ttl_is_one_a_person_types_and_it_fits() {
    let server = Server::start();
    server
        .lockrun("job")
        .args(["--ttl", "30s", "--kill-grace", "20s"])
        .command(["true"])
        .run()
        .assert(Expect::code(64).stderr(
            "lockrun: unsafe timing: renew every 10s + redis timeout 2s + kill grace 20s + \
             clock-drift allowance 302ms = 32s302ms, which does not fit inside the ttl of 30s; \
             use --ttl 34s or more, or --kill-grace 17s or less\n",
        ));
    for fits in [
        ["--ttl", "34s", "--kill-grace", "20s"],
        ["--ttl", "30s", "--kill-grace", "17s"],
    ] {
        server
            .lockrun("job")
            .args(fits)
            .command(["true"])
            .run()
            .assert(Expect::success().context(fits.join(" ")));
    }
}

/// A server out of memory (`maxmemory` reached, `noeviction`) is said as
/// that, with what to do, without the script's hash and line that Redis's
/// reply names; exit 69 as for any server that cannot serve the lock.
#[test]
fn a_server_out_of_memory_is_said_so() {
    let server = Server::start_with(
        None,
        &["--maxmemory", "1mb", "--maxmemory-policy", "noeviction"],
    );
    // Filled from a script: a script that started under the limit may go
    // past it, which single writes may not.
    let _: () = server
        .query(
            redis::cmd("EVAL")
                .arg("for i = 1, 20000 do redis.call('SET', 'fill' .. i, string.rep('x', 100)) end")
                .arg(0),
        )
        .expect("fill the server");
    let ran = server.lockrun("job").command(["true"]).run();
    ran.assert(
        Expect::code(69)
            .stderr(format!(
                "lockrun: Redis at {} is out of memory (OOM): its used memory is over its \
                 maxmemory and its maxmemory-policy evicts nothing, so it refuses every write; \
                 free memory there or raise its maxmemory (redis-cli CONFIG SET maxmemory)\n",
                server.url()
            ))
            .stderr_lacks("@user_script"),
    );
}

/// What lockrun(1) says a fencing token looks like: the server's clock in
/// microseconds at the grant (or the last token plus one), growing.
#[test]
fn a_fencing_token_is_the_servers_clock_in_microseconds() {
    let redis = Server::start();
    let server_us = || -> u64 {
        let (secs, micros): (u64, u64) = redis.query(&redis::cmd("TIME")).expect("TIME");
        secs * 1_000_000 + micros
    };
    let before = server_us();
    let first = redis.lockrun("job").next_fence();
    let after = server_us();
    assert!(
        (before..=after).contains(&first),
        "token {first} is not the server's clock between {before} and {after}"
    );
    let second = redis.lockrun("job").next_fence();
    assert!(second > first, "{first} then {second}");
}

/// What lockrun(1) SIGNALS says `kill -9` of lockrun leaves behind: the
/// command dies with it, what the command started keeps running, and the
/// lock stays taken until its ttl runs out.
#[test]
fn kill_9_of_lockrun_leaves_what_the_command_started_and_the_lock() {
    let redis = Server::start();
    let mut holder = redis.lockrun("job").args(["--ttl", "1h"]).hold_script(
        "sh",
        "sleep 300 & echo $! > \"$1/started\"; echo $$ > \"$1/pid\"; wait",
    );
    let started = read_pid(&holder.dir().join("started"));
    holder.run.signal(nix::sys::signal::Signal::SIGKILL);
    holder.run.wait();
    assert!(
        eventually(PATIENCE, || !alive(holder.child())),
        "the command outlived lockrun"
    );
    let still = alive(started);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(started),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(still, "what the command started was stopped");
    redis
        .lockrun("job")
        .command(["true"])
        .run()
        .assert(Expect::code(75).stderr_any());
}

/// Behind Sentinel too, a user named without a password logs in as that
/// user on the primary, and one that needs a password is told none was
/// given.
#[test]
fn behind_sentinel_a_user_named_without_a_password_is_that_user() {
    let set = SentinelSet::start();
    // ACL rules are not replicated: each server gets its own.
    for server in &set.servers {
        setuser(server, &["lockrun", "on", "nopass", "~*", "&*", "+@all"]);
        setuser(server, &["secretive", "on", ">s3cret", "~*", "&*", "+@all"]);
    }
    let as_user = |user: &str| set.url().replacen("://", &format!("://{user}@"), 1);
    Lockrun::via(&as_user("lockrun"))
        .key("job")
        .args(["--replica-acks", "0", "-v"])
        .command(["true"])
        .run()
        .assert(Expect::success().stderr_has(" as user 'lockrun' (from --redis)"));
    Lockrun::via(&as_user("secretive"))
        .key("job")
        .args(["--replica-acks", "0"])
        .command(["true"])
        .run()
        .assert(
            Expect::code(69)
                .stderr_has(
                    "refused user 'secretive' without a password (WRONGPASS: the user needs \
                     one, or does not exist, or is off), and none was given; give it in \
                     LOCKRUN_REDIS_PASSWORD, --redis-password-file or redis-password-file in \
                     lockrun.conf",
                )
                .stderr_one_line(),
        );
}
