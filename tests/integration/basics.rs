//! The happy path and the plain failures: exit statuses, what is left in
//! Redis, what reaches the command.

use crate::harness::*;

#[test]
fn exit_statuses_pass_through_and_nothing_is_left_behind() {
    let redis = Server::start();
    for code in [0, 3, 255] {
        let ran = redis
            .lockrun("job")
            .command(["sh", "-c", &format!("exit {code}")])
            .run();
        // Silent, whatever the command's status.
        ran.assert(Expect::code(code));
    }
    // Only the fencing counter stays: the lease and holder record are gone.
    redis.assert_only_fence("job");
}

#[test]
fn command_gets_key_and_increasing_fencing_tokens() {
    let redis = Server::start();
    let fence = || -> u64 {
        let ran = redis
            .lockrun("job")
            .command(["sh", "-c", "echo $LOCKRUN_KEY $LOCKRUN_FENCING_TOKEN"])
            .run();
        ran.assert(Expect::success().stdout_any());
        let (key, fence) = ran.stdout.trim().split_once(' ').expect("two words");
        assert_eq!(key, "job");
        fence.parse().expect("number")
    };
    let first = fence();
    let second = fence();
    assert!(second > first, "{second} > {first}");
}
