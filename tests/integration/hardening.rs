//! Input and Redis replies that must never break the lease promise: durations
//! past any clock, keys of the wrong type, Redis loading or busy, servers that
//! are not Redis or want a password, and the order in which lockrun explains a
//! failure.

use std::process::{Command, Output, Stdio};

use crate::harness::*;

fn output(command: &mut Command) -> Output {
    command.stdin(Stdio::null()).output().expect("run lockrun")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// lockrun's one line on stderr, without its `lockrun: ` prefix; fails
/// unless there is exactly one.
fn one_line(output: &Output) -> String {
    let text = stderr(output);
    let mut lines = text.lines();
    match (lines.next(), lines.next()) {
        (Some(line), None) => line.strip_prefix("lockrun: ").unwrap_or(line).to_owned(),
        _ => panic!("want one line on stderr, got {text:?}"),
    }
}

#[test]
fn a_duration_past_one_year_is_a_usage_error_and_nothing_runs() {
    let redis = RedisServer::start();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let cases: [&[&str]; 8] = [
        // Wrapped to a 5 s lease in Redis while the local deadline was
        // centuries away.
        &["--ttl", "18446744073709556s616ms"],
        &["--ttl", "18446744073709551615s"],
        &["--renew-every", "584000000000y"],
        &["--redis-timeout", "584000000000y"],
        &["--kill-grace", "2y"],
        &["--wait", "500000000000y"],
        &["--timeout", "18446744073709551615s"],
        &["--min-hold", "584000000000y"],
    ];
    for args in cases {
        let run = output(
            lockrun_at(&redis, &[&["-k", "job"], args].concat())
                .arg("--")
                .arg("touch")
                .arg(&ran),
        );
        assert_eq!(run.status.code(), Some(64), "{args:?}: {}", stderr(&run));
        let line = one_line(&run);
        assert!(
            line.starts_with(&format!("{} ", args[0]))
                && line.ends_with("is too long; use 1y (365.25 days) or less"),
            "{args:?}: {line}"
        );
        assert!(!ran.exists(), "{args:?}: the command ran");
        assert!(redis.keys().is_empty(), "{args:?}: {:?}", redis.keys());
    }

    // The bound itself is accepted.
    let run = output(&mut lockrun_at(
        &redis,
        &[
            "-k",
            "job",
            "--ttl",
            "1y",
            "--timeout",
            "1y",
            "--wait",
            "1y",
            "--",
            "true",
        ],
    ));
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert_eq!(redis.keys(), ["lockrun:{job}:fence"]);
}
