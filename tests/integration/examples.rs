//! The examples do what their comments say, run for real with the lockrun
//! just built: `examples/ci/deploy.sh` passes the exit status through (69
//! when Redis is unreachable), and a CI runner cancelling the job (SIGINT or
//! SIGTERM, to the script alone or to its process group) stops the deploy
//! and frees the lock before the script exits.

use std::fs::Permissions;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::harness::{
    alive, eventually, log_file, parent, read_log, scratch, wait_for_text, Expect, Running, Server,
    LOCKRUN, NO_CONFIG, PATIENCE,
};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// Stands in for the project's own deploy script, which deploy.sh runs as
/// `./scripts/deploy.sh ENV ARG...`: it writes its pid, then either hangs
/// (ARG `hang`) or exits with status ARG.
const STAND_IN: &str = r#"#!/bin/sh
echo $$ > deploy.pid.part && mv deploy.pid.part deploy.pid
[ "$2" = hang ] && exec sleep 600
exit "$2"
"#;

/// The lock deploy.sh takes for environment `staging`.
const LOCK: &str = "deploy-staging";

/// `sh examples/ci/deploy.sh staging ARG` in a directory of its own, with the
/// lockrun just built first on PATH, pointed at the Redis at `url`.
struct Deploy {
    script: Running,
    dir: tempfile::TempDir,
}

impl Deploy {
    fn start(url: &str, arg: &str) -> Self {
        let dir = scratch();
        let scripts = dir.path().join("scripts");
        std::fs::create_dir(&scripts).expect("scripts dir");
        let stand_in = scripts.join("deploy.sh");
        std::fs::write(&stand_in, STAND_IN).expect("write the stand-in deploy");
        std::fs::set_permissions(&stand_in, Permissions::from_mode(0o755)).expect("chmod");
        let bin = Path::new(&*LOCKRUN).parent().expect("bin dir");
        let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
        ))
        .expect("PATH");
        let script = Running::spawn(
            Command::new("sh")
                .arg(repo().join("examples/ci/deploy.sh"))
                .args(["staging", arg])
                .current_dir(dir.path())
                .env("PATH", path)
                .env("LOCKRUN_REDIS_URL", url)
                .env(NO_CONFIG.0, NO_CONFIG.1)
                .env_remove("LOCKRUN_REDIS_PASSWORD")
                .env_remove("LOCKRUN_PREFIX")
                .stdin(Stdio::null())
                .stderr(log_file(&dir.path().join("stderr")))
                // A group of its own, as a runner starts a job's shell.
                .process_group(0),
        );
        Deploy { script, dir }
    }

    /// The stand-in deploy's pid, once it runs (under the lock).
    fn deploy_pid(&mut self) -> i32 {
        let file = self.dir.path().join("deploy.pid");
        let mut pid = None;
        let started = eventually(PATIENCE, || {
            pid = std::fs::read_to_string(&file)
                .ok()
                .and_then(|text| text.trim().parse().ok());
            pid.is_some() || !self.script.running()
        });
        assert!(started, "the deploy never started");
        pid.unwrap_or_else(|| panic!("deploy.sh exited first: {:?}", self.script.child.try_wait()))
    }

    /// Waits for deploy.sh to end as `expect` says, its stderr shown if not.
    fn exits(&mut self, expect: Expect) {
        let stderr = self.dir.path().join("stderr");
        self.script.exits_saying(expect, || read_log(&stderr));
    }

    /// SIGTERM to deploy.sh alone, as a CI runner cancelling the job sends.
    fn terminate(&self) {
        self.script.signal(Signal::SIGTERM);
    }
}

impl Drop for Deploy {
    fn drop(&mut self) {
        // A failed test may leave lockrun and the stand-in behind: lockrun
        // stops the stand-in when it gets SIGTERM.
        if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("deploy.pid")) {
            if let Some(lockrun) = pid.trim().parse().ok().and_then(parent) {
                let _ = kill(Pid::from_raw(lockrun), Signal::SIGTERM);
            }
        }
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn deploy_sh_exits_with_the_deploys_status() {
    let redis = Server::start();
    let mut deploy = Deploy::start(&redis.url(), "3");
    deploy.exits(Expect::code(3));
    assert!(!redis.is_locked(LOCK), "the lock outlived the deploy");

    // Redis unreachable: the deploy waits it out (--wait 15m) without
    // running, until the CI runner cancels the job.
    let mut deploy = Deploy::start("redis://127.0.0.1:1", "0");
    let stderr = deploy.dir.path().join("stderr");
    assert!(
        wait_for_text(&stderr, "; still waiting"),
        "lockrun never said it waits for Redis: {}",
        read_log(&stderr)
    );
    assert!(deploy.script.running(), "still waiting");
    deploy.terminate();
    deploy.exits(Expect::code(128 + 15).context("cancelled while waiting"));
    assert!(
        !deploy.dir.path().join("deploy.pid").exists(),
        "the deploy ran without the lock"
    );
}

#[test]
fn sigterm_to_deploy_sh_alone_stops_the_deploy_and_frees_the_lock() {
    let redis = Server::start();
    let mut deploy = Deploy::start(&redis.url(), "hang");
    let deploy_pid = deploy.deploy_pid();
    assert!(redis.is_locked(LOCK), "the deploy runs without the lock");
    let lockrun_pid = parent(deploy_pid).expect("the deploy's parent, lockrun");

    // The signal a CI runner sends when the job is cancelled, to the
    // script's pid only.
    deploy.terminate();
    // deploy.sh waited for lockrun, which waited for the deploy (ended by the
    // SIGTERM passed on to it) and released the lock.
    deploy.exits(Expect::code(128 + Signal::SIGTERM as i32));
    assert!(!alive(deploy_pid), "the deploy is still running");
    assert!(!alive(lockrun_pid), "lockrun is still running");
    assert!(!redis.is_locked(LOCK), "the lock is still held");
}

/// Cancels the job as GitHub Actions does: SIGINT, SIGTERM 7.5 s later,
/// SIGKILL 2.5 s after that, to the script alone or, as Ctrl-C in a
/// terminal does, to its whole process group. Returns how the script ended
/// and the last signal it took.
fn cancel(deploy: &mut Deploy, group: bool) -> (ExitStatus, Signal) {
    let pid = deploy.script.pid();
    let steps = [
        (Signal::SIGINT, Duration::from_millis(7500)),
        (Signal::SIGTERM, Duration::from_millis(2500)),
        (Signal::SIGKILL, PATIENCE),
    ];
    for (signal, grace) in steps {
        let sent = if group {
            killpg(pid, signal)
        } else {
            kill(pid, signal)
        };
        sent.expect("signal deploy.sh");
        if let Some(status) = deploy.script.wait_for(grace) {
            return (status, signal);
        }
    }
    panic!("deploy.sh survived SIGKILL");
}

/// A cancelled CI job stops at the first signal: the deploy ends, the lock
/// is freed and the script exits 130, as its comments say. lockrun runs in
/// the background there, where a shell starts it with SIGINT ignored.
#[test]
fn a_cancelled_ci_job_stops_at_sigint_with_130_and_frees_the_lock() {
    let redis = Server::start();
    for group in [false, true] {
        let mut deploy = Deploy::start(&redis.url(), "hang");
        let deploy_pid = deploy.deploy_pid();
        let lockrun_pid = parent(deploy_pid).expect("the deploy's parent, lockrun");
        let (status, last) = cancel(&mut deploy, group);
        let to = if group {
            "its process group"
        } else {
            "the script"
        };
        assert_eq!(
            (status.code(), last),
            (Some(130), Signal::SIGINT),
            "SIGINT to {to}: {status}; {}",
            read_log(&deploy.dir.path().join("stderr"))
        );
        assert!(!alive(deploy_pid), "the deploy is still running");
        assert!(!alive(lockrun_pid), "lockrun is still running");
        assert!(!redis.is_locked(LOCK), "the lock is still held");
    }
}

/// A pipeline waiting for the lock that a newer push supersedes exits 79,
/// which deploy.sh tells apart from 75 (a deploy still held after the wait);
/// the newer push deploys once the running one ends.
#[test]
fn deploy_sh_superseded_in_line_exits_79() {
    let redis = Server::start();
    let mut running = Deploy::start(&redis.url(), "hang");
    running.deploy_pid();
    let mut older = Deploy::start(&redis.url(), "0");
    assert!(
        eventually(PATIENCE, || redis.in_line(LOCK) == 1),
        "no run waits in line"
    );
    let mut newer = Deploy::start(&redis.url(), "0");
    older.exits(Expect::code(i32::from(lockrun::exit_code::SUPERSEDED)));
    assert!(!older.dir.path().join("deploy.pid").exists());
    running.terminate();
    running.exits(Expect::code(128 + Signal::SIGTERM as i32));
    newer.exits(Expect::success().context("the newer push deploys"));
}
