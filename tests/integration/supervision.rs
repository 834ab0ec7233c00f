//! The command's life: stdin and stdout pass through, process group, exec failures, a command killed by a signal.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::harness::*;

/// Deterministic bytes that no pipe or encoding would pass through unchanged
/// by accident (every byte value, no pattern).
fn noise(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 32) as u8
        })
        .collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// lockrun's own message: exactly one line, prefixed `lockrun:`.
fn assert_one_line(output: &Output, what: &str) {
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("lockrun: ") && stderr.lines().count() == 1,
        "{what}: want one `lockrun:` line on stderr, got {stderr:?}"
    );
}

#[test]
fn stdin_reaches_the_command_unchanged() {
    let redis = RedisServer::start();
    let data = noise(1 << 20);
    let mut child = lockrun_at(&redis, &["-k", "job", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = data.clone();
    // Written from another thread: cat's output must be drained meanwhile.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().expect("run");
    writer.join().expect("writer").expect("write stdin");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        output.stdout == data,
        "stdin came out changed ({} bytes)",
        output.stdout.len()
    );
    assert_eq!(redis.keys(), ["lockrun:{job}:fence"]);
}

#[test]
fn large_stdout_carries_only_the_commands_bytes() {
    let redis = RedisServer::start();
    let dir = scratch();
    let file = dir.path().join("data");
    let data = noise(20 << 20);
    std::fs::write(&file, &data).expect("write data");
    // --verbose makes lockrun talk during the run: all of it must go to stderr.
    let output = lockrun_at(&redis, &["-v", "-k", "job", "--", "head", "-c"])
        .arg((20 << 20).to_string())
        .arg(&file)
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        output.stdout == data,
        "stdout differs from the command's output ({} bytes, want {})",
        output.stdout.len(),
        data.len()
    );
    let stderr = text(&output.stderr);
    assert!(stderr.contains("lockrun: acquired"), "{stderr}");
    assert!(
        stderr.lines().all(|line| line.starts_with("lockrun: ")),
        "{stderr}"
    );
}

#[test]
fn a_command_killed_by_a_signal_gives_128_plus_n() {
    let redis = RedisServer::start();
    for (script, want) in [("kill -9 $$", 137), ("kill -TERM $$", 143)] {
        let output = lockrun_at(&redis, &["-k", "job", "--", "sh", "-c", script])
            .output()
            .expect("run");
        assert_eq!(
            output.status.code(),
            Some(want),
            "{script}: {}",
            text(&output.stderr)
        );
    }
    assert_eq!(redis.keys(), ["lockrun:{job}:fence"]);
}

#[test]
fn a_command_that_cannot_start_gives_126_or_127_and_releases_the_lock() {
    let redis = RedisServer::start();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let script = dir.path().join("not-executable");
    std::fs::write(&script, format!("#!/bin/sh\ntouch '{}'\n", ran.display())).expect("write");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).expect("chmod");

    let cases: [(&Path, u8, &str); 4] = [
        (dir.path(), 126, "is a directory"),
        (&script, 126, "Permission denied"),
        (
            &dir.path().join("no-such-command"),
            127,
            "command not found",
        ),
        (
            Path::new("lockrun-test-no-such-command"),
            127,
            "command not found",
        ),
    ];
    for (program, want, why) in cases {
        let output = lockrun_at(&redis, &["-k", "job", "--"])
            .arg(program)
            .output()
            .expect("run");
        let what = program.display();
        assert_eq!(
            output.status.code(),
            Some(want.into()),
            "{what}: {}",
            text(&output.stderr)
        );
        assert_one_line(&output, &what.to_string());
        assert!(text(&output.stderr).contains(why), "{what}: says {why:?}");
        assert!(
            output.stdout.is_empty(),
            "{what}: stdout belongs to the command"
        );
        assert!(!redis.is_locked("job"), "{what}: the lock was left behind");
    }
    assert!(!ran.exists(), "the non-executable script ran");
    assert_eq!(redis.keys(), ["lockrun:{job}:fence"]);
}

#[test]
fn usage_errors_exit_64_and_touch_nothing() {
    let redis = RedisServer::start();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let ran = ran.to_str().expect("utf-8 temp path");
    let cases: [&[&str]; 6] = [
        &["-k", "job", "--no-such-flag", "--", "touch", ran],
        &["-k", "job", "--ttl", "30", "--", "touch", ran],
        &["--", "touch", ran],
        &["-k", "job"],
        &[
            "-k",
            "job",
            "--ttl",
            "1s",
            "--kill-grace",
            "5s",
            "--",
            "touch",
            ran,
        ],
        &["-k", "", "--", "touch", ran],
    ];
    for args in cases {
        let output = lockrun_at(&redis, args).output().expect("run");
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(
            output.stdout.is_empty(),
            "{args:?}: usage errors go to stderr"
        );
        // Also clap's own errors: one line, like every other lockrun error.
        assert_one_line(&output, &format!("{args:?}"));
    }
    assert!(
        !std::path::Path::new(ran).exists(),
        "a command ran despite a usage error"
    );
    assert!(
        redis.keys().is_empty(),
        "a usage error reached Redis: {:?}",
        redis.keys()
    );
}

#[test]
fn unsafe_timing_says_what_would_fit() {
    let redis = RedisServer::start();
    let output = lockrun_at(
        &redis,
        &[
            "-k",
            "job",
            "--ttl",
            "1s",
            "--kill-grace",
            "5s",
            "--",
            "true",
        ],
    )
    .output()
    .expect("run");
    assert_eq!(output.status.code(), Some(64));
    let stderr = text(&output.stderr);
    assert!(stderr.starts_with("lockrun: unsafe timing:"), "{stderr}");
    assert!(
        stderr.contains("--ttl") && stderr.contains("or more"),
        "{stderr}"
    );
}

#[test]
fn stragglers_in_the_commands_group_are_stopped_when_it_exits() {
    let redis = RedisServer::start();
    let dir = scratch();
    // One grandchild dies of SIGTERM; the other ignores it and needs SIGKILL
    // (within the kill grace, 500ms at this ttl).
    let script = r#"
        sleep 60 & echo $! > "$1/polite"
        (trap '' TERM; exec sleep 60) & echo $! > "$1/stubborn"
        exit 0"#;
    let mut run = Running::spawn(
        lockrun_sh(&redis, &["-k", "job", "--ttl", "2s"], script, dir.path())
            // A straggler holding the test's pipe open would hang it.
            .stdout(Stdio::null()),
    );
    let polite = read_pid(&dir.path().join("polite"));
    let stubborn = read_pid(&dir.path().join("stubborn"));
    assert_eq!(run.wait().code(), Some(0));
    for (name, pid) in [("polite", polite), ("stubborn", stubborn)] {
        assert!(
            eventually(Duration::from_secs(5), || !alive(pid)),
            "the {name} grandchild outlived the command and the lock"
        );
    }
    assert_eq!(redis.keys(), ["lockrun:{job}:fence"]);
}
