//! A flag given twice takes its last value, as wrappers that append their own
//! flags to the caller's expect: `--wait forever --wait 1s` waits 1s. Not
//! `--redis`: given three or more times it names a quorum.

use std::time::Duration;

use crate::harness::{Expect, Lockrun, Server};

#[test]
fn the_last_key_wins_but_two_redis_urls_are_refused() {
    let redis = Server::start();
    let ran = redis
        .lockrun("first")
        .args(["--key", "last", "-q", "--quiet"])
        .command(["sh", "-c", r#"echo "$LOCKRUN_KEY""#])
        .run();
    ran.assert(Expect::success().stdout("last\n"));

    // --redis given again does not replace the first: three or more make a
    // quorum (quorum.rs), and two are neither.
    let ran = Lockrun::via("unix:///nonexistent/redis.sock")
        .redis(&redis.url())
        .key("job")
        .command(["true"])
        .run();
    ran.assert(
        Expect::code(64)
            .stderr_has("a quorum needs 3 or more servers")
            .stderr_one_line(),
    );

    // The subcommands too.
    let ran = Lockrun::at(&redis)
        .subcommand("status")
        .args(["--json", "--key", "first", "--key", "last"])
        .run();
    ran.assert(Expect::code(1).stdout_any().context("free"));
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("JSON");
    assert_eq!(json["key"], "last", "{json}");
}

#[test]
fn wait_forever_then_wait_1s_waits_1s() {
    let redis = Server::start();
    let _holder = redis.lockrun("job").command(["sleep", "60"]).hold();
    assert!(redis.is_locked("job"), "the holder never took the lock");

    let ran = Lockrun::at(&redis)
        .args(["--key", "job", "--wait", "forever", "--wait", "1s"])
        .command(["true"])
        .run();
    ran.assert(
        Expect::code(i32::from(lockrun::exit_code::BUSY_DEFAULT))
            .stderr_starts("lockrun: job is held by ")
            .stderr_has("; not running true after waiting 1s (exit 75)")
            .stderr_one_line(),
    );
    assert!(
        ran.took >= Duration::from_secs(1),
        "gave up after {:?}, before its 1s wait",
        ran.took
    );
}
