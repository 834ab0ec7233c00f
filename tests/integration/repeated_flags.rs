//! A flag given twice takes its last value, as wrappers that append their own
//! flags to the caller's expect: `--wait forever --wait 1s` waits 1s. Not
//! `--redis`: given three or more times it names a quorum.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use wait_timeout::ChildExt;

use crate::harness::{eventually, RedisServer, PATIENCE};

/// The lockrun just built, with none of the caller's LOCKRUN_* settings.
fn lockrun() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lockrun"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LOCKRUN_") {
            command.env_remove(name);
        }
    }
    command.stdin(Stdio::null());
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `command` to its end, failing the test after `PATIENCE`.
fn finish(command: &mut Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lockrun");
    match child.wait_timeout(PATIENCE).expect("wait") {
        Some(_) => child.wait_with_output().expect("output"),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} still running after {PATIENCE:?}");
        }
    }
}

#[test]
fn the_last_key_wins_but_two_redis_urls_are_refused() {
    let redis = RedisServer::start();
    let output = finish(
        lockrun()
            .arg("--redis")
            .arg(redis.url())
            .args(["-k", "first", "--key", "last", "-q", "--quiet", "--"])
            .args(["sh", "-c", r#"echo "$LOCKRUN_KEY""#]),
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "last\n");

    // --redis given again does not replace the first: three or more make a
    // quorum (quorum.rs), and two are neither.
    let output = finish(
        lockrun()
            .args(["--redis", "unix:///nonexistent/redis.sock", "--redis"])
            .arg(redis.url())
            .args(["-k", "job", "--", "true"]),
    );
    assert_eq!(output.status.code(), Some(64), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("a quorum needs 3 or more servers"),
        "{}",
        text(&output.stderr)
    );

    // The subcommands too.
    let output = finish(
        lockrun()
            .args([
                "status", "--json", "--key", "first", "--key", "last", "--redis",
            ])
            .arg(redis.url()),
    );
    assert_eq!(
        output.status.code(),
        Some(1),
        "free: {}",
        text(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(json["key"], "last", "{json}");
}

/// Kills the holder (lockrun and its `sleep`) when the test ends, however.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        if self.0.wait_timeout(PATIENCE).ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn wait_forever_then_wait_1s_waits_1s() {
    let redis = RedisServer::start();
    let _holder = Holder(
        lockrun()
            .arg("--redis")
            .arg(redis.url())
            .args(["--key", "job", "--", "sleep", "60"])
            .spawn()
            .expect("spawn the holder"),
    );
    let held = eventually(PATIENCE, || {
        redis::cmd("EXISTS")
            .arg("lockrun:{job}")
            .query::<bool>(&mut redis.client())
            .expect("EXISTS")
    });
    assert!(held, "the holder never took the lock");

    let started = Instant::now();
    let output = finish(
        lockrun()
            .arg("--redis")
            .arg(redis.url())
            .args(["--key", "job", "--wait", "forever", "--wait", "1s"])
            .args(["--", "true"]),
    );
    let waited = started.elapsed();
    assert_eq!(
        output.status.code(),
        Some(i32::from(lockrun::exit_code::BUSY_DEFAULT)),
        "{}",
        text(&output.stderr)
    );
    assert!(
        waited >= Duration::from_secs(1),
        "gave up after {waited:?}, before its 1s wait"
    );
}
