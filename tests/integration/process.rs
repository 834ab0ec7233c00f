//! What a run leaves behind and lets through: a stderr nobody reads does not
//! hold up the deadline; the Redis password stays with lockrun; everything the
//! command started, setsid daemons included, is stopped and reaped before the
//! lock is released.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::harness::*;

const PASSWORD: &str = "s3cret-Pw";

// --- stderr ---

#[test]
fn a_stderr_nobody_reads_does_not_hold_up_the_deadline() {
    let mut redis = Server::start();
    let dir = scratch();
    // The command fills the stderr it shares with lockrun and blocks there,
    // deaf to SIGTERM: only the SIGKILL at the deadline ends it. --verbose
    // has lockrun say something at every renewal.
    let script = r#"trap '' TERM; echo $$ > "$1/pid"; exec head -c 1048576 /dev/zero >&2"#;
    let mut run = redis
        .lockrun("job")
        .args(["-v", "--ttl", "2s"])
        .sh(script, dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let pid = read_pid(&dir.path().join("pid"));
    redis.kill();
    let killed = Instant::now();
    assert!(
        eventually(PATIENCE, || !alive(pid)),
        "the command outlived its lease: lockrun was stuck writing to a full stderr"
    );
    println!(
        "command killed {:?} after Redis died (ttl 2s)",
        killed.elapsed()
    );
    // Nobody has read the pipe yet: lockrun's last lines wait only so long.
    let status = run
        .wait_for(PATIENCE)
        .expect("lockrun never exited: its last lines waited forever on a full stderr");
    assert_eq!(status.code(), Some(76));
    let mut stderr = Vec::new();
    run.child
        .stderr
        .take()
        .expect("piped")
        .read_to_end(&mut stderr)
        .expect("drain stderr");
    // Less than the MiB the command meant to write: it blocked on a full pipe.
    assert!(
        (16 << 10..1 << 20).contains(&stderr.len()),
        "the command did not fill the pipe: {} bytes",
        stderr.len()
    );
}

/// `program` on PATH, if it is there.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[test]
fn a_background_lockrun_is_not_stopped_by_its_own_messages() {
    if !on_path("script") || !on_path("bash") {
        println!("note: script(1) or bash is missing; the tostop terminal was not tried");
        return;
    }
    let redis = Server::start();
    // In a terminal, the command's group takes the foreground and lockrun
    // goes to the background; with `stty tostop`, a background write to the
    // terminal would stop lockrun (SIGTTOU), and with it the renewals and the
    // deadline. bash -i gives the job control an operator's shell has.
    let line = format!(
        "stty tostop; {LOCKRUN} --redis {} -v -k job --ttl 1s -- sleep 1; echo rc=$?; exit",
        redis.url()
    );
    let mut run = Terminal::start(&format!("bash --norc --noprofile -ic '{line}'"));
    run.close_keyboard();
    // Fails the test if lockrun never finished in the terminal.
    let (_, terminal) = run.wait();
    assert!(!terminal.contains("Stopped"), "{terminal}");
    assert!(terminal.contains("lockrun: renewed"), "{terminal}");
    assert!(terminal.contains("rc=0"), "{terminal}");
    assert!(!redis.is_locked("job"));
}

// --- the Redis password ---

/// Runs `env` under lockrun as `command` sets it up; returns what `env`
/// printed after checking that the run succeeded, so the password worked.
fn env_of(command: Lockrun) -> String {
    let ran = command.key("job").command(["env"]).run();
    ran.assert(Expect::success().stdout_any());
    ran.stdout
}

#[test]
fn the_command_never_sees_the_redis_password() {
    let port = free_port();
    let redis = Server::start_with(Some(port), &["--requirepass", PASSWORD]);
    let socket = redis.url().replacen("unix://", "", 1);

    let env = env_of(Lockrun::at(&redis).env("LOCKRUN_REDIS_PASSWORD", PASSWORD));
    assert!(env.contains("LOCKRUN_KEY=job"), "{env}");
    assert!(!env.contains(PASSWORD), "the password leaked: {env}");
    assert!(!env.contains("LOCKRUN_REDIS_PASSWORD="), "{env}");

    // In the URL: the command keeps the rest of it, for a nested lockrun.
    for (url, kept) in [
        (
            format!("redis+unix://{socket}?db=0&pass={PASSWORD}"),
            format!("LOCKRUN_REDIS_URL=redis+unix://{socket}?db=0\n"),
        ),
        (
            format!("redis://:{PASSWORD}@127.0.0.1:{port}/0"),
            format!("LOCKRUN_REDIS_URL=redis://127.0.0.1:{port}/0\n"),
        ),
    ] {
        let env = env_of(Lockrun::new().env("LOCKRUN_REDIS_URL", &url));
        assert!(!env.contains(PASSWORD), "the password leaked: {env}");
        assert!(env.contains(&kept), "{url}: want {kept:?} in {env}");
    }
}

/// A file holding the password, with `mode`.
fn password_file(dir: &Path, mode: u32) -> String {
    let file = dir.join(format!("password-{mode:o}"));
    std::fs::write(&file, format!("{PASSWORD}\n")).expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
    file.to_str().expect("utf-8 temp path").to_string()
}

#[test]
fn a_password_file_serves_runs_status_and_release() {
    let redis = Server::start_with(None, &["--requirepass", PASSWORD]);
    let dir = scratch();
    let file = password_file(dir.path(), 0o600);
    let flag = ["--redis-password-file", file.as_str()];

    let ran = redis.lockrun("job").args(flag).command(["true"]).run();
    ran.assert(Expect::success());
    let env = env_of(Lockrun::at(&redis).env("LOCKRUN_REDIS_PASSWORD_FILE", &file));
    assert!(
        env.contains(&format!("LOCKRUN_REDIS_PASSWORD_FILE={file}\n")),
        "a nested lockrun needs it: {env}"
    );

    // status: 1 is "free", 69 "cannot ask Redis" (here: no password).
    let status = redis.lockrun("job").subcommand("status").run();
    status.assert(
        Expect::code(69)
            .stderr_has("requires a password")
            .stderr_one_line(),
    );
    let status = redis.lockrun("job").subcommand("status").args(flag).run();
    status.assert(Expect::code(1).stdout_starts("job: free (last fencing token "));
    let release = redis
        .lockrun("job")
        .subcommand("release")
        .arg("--force")
        .args(flag)
        .run();
    release.assert(Expect::success().stdout("job was not held\n"));

    // Two passwords: which one was meant cannot be guessed.
    let both = redis
        .lockrun("job")
        .args(flag)
        .command(["true"])
        .env("LOCKRUN_REDIS_PASSWORD", PASSWORD)
        .run();
    both.assert(Expect::code(64).stderr(
        "lockrun: LOCKRUN_REDIS_PASSWORD and --redis-password-file (or \
         LOCKRUN_REDIS_PASSWORD_FILE) are both set; give the Redis password one way only\n",
    ));
}

#[test]
fn a_password_file_every_user_can_read_is_refused() {
    let redis = Server::start_with(None, &["--requirepass", PASSWORD]);
    let dir = scratch();
    let ran = dir.path().join("ran");
    let run = |file: &str| {
        redis
            .lockrun("job")
            .args(["--redis-password-file", file])
            .touch(&ran)
            .run()
    };

    let open = password_file(dir.path(), 0o644);
    let output = run(&open);
    // Says which file and what to do.
    output.assert(
        Expect::code(64)
            .stderr_has(&open)
            .stderr_has("every user")
            .stderr_has("chmod")
            .stderr_lacks(PASSWORD),
    );
    assert!(!ran.exists(), "the command ran");
    assert!(redis.keys().is_empty(), "{:?}", redis.keys());

    // The file's group may read it: a secret shared with a service account.
    let output = run(&password_file(dir.path(), 0o640));
    output.assert(Expect::success());
    assert!(ran.exists());
}

// --- what the command leaves running ---

#[test]
fn daemons_that_left_the_group_are_stopped_before_the_lock_is_released() {
    let redis = Server::start();
    let dir = scratch();
    // Two daemons in sessions of their own: an orphan, and one whose parent
    // waits for it; that one ignores SIGTERM and needs the SIGKILL after the
    // kill grace (500ms at this ttl).
    let script = r#"
        setsid sh -c 'sleep 300 & echo $! > "$1/orphan"' sh "$1" &
        setsid sh -c 'trap "" TERM; sleep 300 & echo $! > "$1/stubborn"; wait' sh "$1" &
        read -r _ < "$1/go""#;
    let gate = Gate::new(dir.path());
    let mut run = redis
        .lockrun("job")
        .args(["--ttl", "2s"])
        .sh(script, dir.path())
        // A daemon holding the test's pipe open would hang it.
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let lockrun = run.pid().as_raw();
    let orphan = read_pid(&dir.path().join("orphan"));
    let stubborn = read_pid(&dir.path().join("stubborn"));
    let (_, _, _, lockrun_session) = stat(lockrun).expect("lockrun runs");
    for daemon in [orphan, stubborn] {
        let (_, _, _, session) = stat(daemon).expect("the daemon runs");
        assert_ne!(session, lockrun_session, "the daemon left the session");
    }
    assert!(
        eventually(PATIENCE, || parent(orphan) == Some(lockrun)),
        "the orphan was not reparented to lockrun, its subreaper"
    );

    gate.open();
    run.exits(Expect::success());
    for (name, pid) in [("orphan", orphan), ("stubborn", stubborn)] {
        assert!(!alive(pid), "the {name} daemon outlived the run");
    }
    assert!(reaped(orphan), "lockrun left its orphan a zombie");
    assert!(!redis.is_locked("job"));
}

#[test]
fn a_daemon_is_killed_when_the_lease_is_lost() {
    let mut redis = Server::start();
    let dir = scratch();
    let script = r#"trap '' TERM
        setsid sh -c 'sleep 300 & echo $! > "$1/daemon"' sh "$1" &
        while :; do sleep 0.05; done"#;
    let mut run = redis
        .lockrun("job")
        .args(["--ttl", "1s"])
        .sh(script, dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let daemon = read_pid(&dir.path().join("daemon"));
    assert!(alive(daemon));
    redis.kill();
    run.exits(Expect::code(76));
    assert!(!alive(daemon), "the daemon outlived the lease");
}

#[test]
fn an_orphan_left_running_does_not_hold_up_the_exit() {
    let redis = Server::start();
    let dir = scratch();
    let started = Instant::now();
    let mut run = redis
        .lockrun("job")
        .sh(r#"sleep 30 & echo $! > "$1/orphan"; exit 0"#, dir.path())
        .stdout(Stdio::null())
        .spawn();
    run.exits(Expect::success());
    let took = started.elapsed();
    println!("lockrun returned {took:?} after starting `sleep 30 & exit 0`");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let orphan = read_pid(&dir.path().join("orphan"));
    assert!(reaped(orphan), "left a zombie: {:?}", stat(orphan));
    assert!(!redis.is_locked("job"));
}

#[test]
fn orphans_are_reaped_while_the_command_runs() {
    let redis = Server::start();
    let dir = scratch();
    let script = r#"(sleep 300 & echo $! > "$1/orphan")
        read -r _ < "$1/go""#;
    let gate = Gate::new(dir.path());
    let mut run = redis
        .lockrun("job")
        .sh(script, dir.path())
        .stdout(Stdio::null())
        .spawn();
    let lockrun = run.pid().as_raw();
    let orphan = read_pid(&dir.path().join("orphan"));
    assert!(
        eventually(PATIENCE, || parent(orphan) == Some(lockrun)),
        "the orphan was not reparented to lockrun: {:?}",
        stat(orphan)
    );
    kill(Pid::from_raw(orphan), Signal::SIGKILL).expect("kill the orphan");
    assert!(
        eventually(PATIENCE, || reaped(orphan)),
        "lockrun left its orphan a zombie while the command ran: {:?}",
        stat(orphan)
    );
    gate.open();
    run.exits(Expect::success());
}
