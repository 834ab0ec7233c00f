//! The happy path and the plain failures: exit statuses, what is left in
//! Redis, what reaches the command.

use crate::harness::*;

#[test]
fn exit_statuses_pass_through_and_nothing_is_left_behind() {
    let redis = RedisServer::start();
    for code in [0, 3, 255] {
        let output = lockrun_at(
            &redis,
            &["--key", "job", "--", "sh", "-c", &format!("exit {code}")],
        )
        .output()
        .expect("run");
        assert_eq!(output.status.code(), Some(code));
        assert!(
            output.stdout.is_empty() && output.stderr.is_empty(),
            "silent on success"
        );
    }
    // Only the fencing counter stays: the lease and holder record are gone.
    assert_eq!(redis.keys(), ["lockrun:{job}:fence"]);
}

#[test]
fn command_gets_key_and_increasing_fencing_tokens() {
    let redis = RedisServer::start();
    let fence = || -> u64 {
        let output = lockrun_at(
            &redis,
            &[
                "-k",
                "job",
                "--",
                "sh",
                "-c",
                "echo $LOCKRUN_KEY $LOCKRUN_FENCING_TOKEN",
            ],
        )
        .output()
        .expect("run");
        let text = String::from_utf8(output.stdout).expect("utf8");
        let (key, fence) = text.trim().split_once(' ').expect("two words");
        assert_eq!(key, "job");
        fence.parse().expect("number")
    };
    let first = fence();
    let second = fence();
    assert!(second > first, "{second} > {first}");
}
