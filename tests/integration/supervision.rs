//! The command's life: stdin and stdout pass through, process group, exec failures, a command killed by a signal.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;

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

/// Exit `code` with lockrun's own message: exactly one line, prefixed
/// `lockrun:`.
fn one_line(code: i32) -> Expect {
    Expect::code(code)
        .stderr_starts("lockrun: ")
        .stderr_one_line()
}

#[test]
fn stdin_reaches_the_command_unchanged() {
    let redis = Server::start();
    let data = noise(1 << 20);
    let ran = redis
        .lockrun("job")
        .command(["cat"])
        .input(data.clone())
        .run();
    ran.assert(Expect::success().stdout_any());
    assert!(
        ran.stdout_bytes() == data,
        "stdin came out changed ({} bytes)",
        ran.stdout_bytes().len()
    );
    redis.assert_only_fence("job");
}

#[test]
fn large_stdout_carries_only_the_commands_bytes() {
    let redis = Server::start();
    let dir = scratch();
    let file = dir.path().join("data");
    let data = noise(20 << 20);
    std::fs::write(&file, &data).expect("write data");
    // --verbose makes lockrun talk during the run: all of it must go to stderr.
    let ran = redis
        .lockrun("job")
        .arg("-v")
        .command(["head", "-c", &(20 << 20).to_string()])
        .command([&file])
        .run();
    ran.assert(
        Expect::success()
            .stdout_any()
            .stderr_has("lockrun: acquired")
            .stderr_where("every line `lockrun: `", |stderr| {
                stderr.lines().all(|line| line.starts_with("lockrun: "))
            }),
    );
    assert!(
        ran.stdout_bytes() == data,
        "stdout differs from the command's output ({} bytes, want {})",
        ran.stdout_bytes().len(),
        data.len()
    );
}

/// lockrun ends as its command ended, so that its parent sees the same
/// death: a shell's `$?` is 128+N, and a shell script stops on Ctrl-C.
#[test]
fn a_command_killed_by_a_signal_ends_lockrun_by_the_same_signal() {
    let redis = Server::start();
    for signal in [Signal::SIGKILL, Signal::SIGTERM, Signal::SIGINT] {
        let script = format!("kill -{} $$", signal as i32);
        let ran = redis.lockrun("job").command(["sh", "-c", &script]).run();
        ran.assert(Expect::killed_by(signal).context(script));
    }
    redis.assert_only_fence("job");

    let line = format!(
        "{LOCKRUN} --redis {} --key job -- sh -c 'kill -TERM $$'; echo $?",
        redis.url()
    );
    let shell = std::process::Command::new("sh")
        .args(["-c", &line])
        .output()
        .expect("run sh");
    assert_eq!(String::from_utf8_lossy(&shell.stdout), "143\n", "{shell:?}");
}

/// A command that dumps core (a crash, or the SIGABRT of systemd's watchdog
/// passed on) has its core file; lockrun, dying of the same signal, leaves
/// none of its own, even where cores are allowed.
#[test]
fn lockrun_dies_of_the_commands_crash_without_a_core_of_its_own() {
    let redis = Server::start();
    let dir = scratch();
    for signal in [Signal::SIGABRT, Signal::SIGSEGV, Signal::SIGQUIT] {
        // The command's own core is kept off: it is not what is checked.
        let script = format!("ulimit -c 0; kill -{} $$", signal as i32);
        let status = std::process::Command::new("sh")
            .args(["-c", r#"ulimit -c unlimited && exec "$@""#, "sh", &LOCKRUN])
            .args([
                "--redis",
                &redis.url(),
                "--key",
                "job",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .current_dir(dir.path())
            .status()
            .expect("run lockrun");
        assert_eq!(status.signal(), Some(signal as i32), "{signal}: {status:?}");
        assert!(!status.core_dumped(), "lockrun dumped core on {signal}");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").collect();
    assert!(left.is_empty(), "files left: {left:?}");
    redis.assert_only_fence("job");
}

#[test]
fn a_command_that_cannot_start_gives_126_or_127_and_releases_the_lock() {
    let redis = Server::start();
    let dir = scratch();
    let marker = dir.path().join("ran");
    let script = dir.path().join("not-executable");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch '{}'\n", marker.display()),
    )
    .expect("write");
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
        let ran = redis.lockrun("job").command([program]).run();
        let what = program.display();
        // Nothing on stdout, which belongs to the command.
        ran.assert(
            one_line(want.into())
                .stderr_has(why)
                .context(what.to_string()),
        );
        assert!(!redis.is_locked("job"), "{what}: the lock was left behind");
    }
    assert!(!marker.exists(), "the non-executable script ran");
    redis.assert_only_fence("job");
}

#[test]
fn usage_errors_exit_64_and_touch_nothing() {
    let redis = Server::start();
    let dir = scratch();
    let marker = dir.path().join("ran");
    let marker = marker.to_str().expect("utf-8 temp path");
    let touch = ["touch", marker];
    let cases: [(&[&str], &[&str]); 6] = [
        (&["-k", "job", "--no-such-flag"], &touch),
        (&["-k", "job", "--ttl", "30"], &touch),
        (&[], &touch),
        (&["-k", "job"], &[]),
        (&["-k", "job", "--ttl", "1s", "--kill-grace", "5s"], &touch),
        (&["-k", ""], &touch),
    ];
    for (args, command) in cases {
        let ran = Lockrun::at(&redis).args(args).command(command).run();
        // Also clap's own errors: one line, like every other lockrun error.
        ran.assert(one_line(64).context(format!("{args:?}")));
    }
    assert!(
        !Path::new(marker).exists(),
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
    let redis = Server::start();
    let ran = redis
        .lockrun("job")
        .args(["--ttl", "1s", "--kill-grace", "5s"])
        .command(["true"])
        .run();
    ran.assert(
        Expect::code(64)
            .stderr_starts("lockrun: unsafe timing:")
            .stderr_has("--ttl")
            .stderr_has("or more"),
    );
}

#[test]
fn stragglers_in_the_commands_group_are_stopped_when_it_exits() {
    let redis = Server::start();
    let dir = scratch();
    // One grandchild dies of SIGTERM; the other ignores it and needs SIGKILL
    // (within the kill grace, 500ms at this ttl).
    let script = r#"
        sleep 60 & echo $! > "$1/polite"
        (trap '' TERM; exec sleep 60) & echo $! > "$1/stubborn"
        exit 0"#;
    let mut run = redis
        .lockrun("job")
        .args(["--ttl", "2s"])
        .sh(script, dir.path())
        // A straggler holding the test's pipe open would hang it.
        .stdout(Stdio::null())
        .spawn();
    let polite = read_pid(&dir.path().join("polite"));
    let stubborn = read_pid(&dir.path().join("stubborn"));
    run.exits(Expect::code(0));
    for (name, pid) in [("polite", polite), ("stubborn", stubborn)] {
        assert!(
            eventually(Duration::from_secs(5), || !alive(pid)),
            "the {name} grandchild outlived the command and the lock"
        );
    }
    redis.assert_only_fence("job");
}
