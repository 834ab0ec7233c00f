//! Reaching Redis: URLs and passwords (kept out of every message); and
//! lockrun used interactively in a terminal. TLS is in `tls`.

use std::path::Path;
use std::time::Duration;

use crate::harness::*;

#[test]
fn tcp_url_and_environment_url_both_work() {
    let redis = Server::start_tcp();
    let ran = Lockrun::via(&redis.tcp_url())
        .key("job")
        .command(["true"])
        .run();
    ran.assert(Expect::success());

    let ran = Lockrun::new()
        .env("LOCKRUN_REDIS_URL", redis.tcp_url())
        .key("job")
        .command(["true"])
        .run();
    ran.assert(Expect::success());
    redis.assert_only_fence("job");
}

#[test]
fn invalid_url_is_a_usage_error() {
    // Each refusal's wording is in `settings`.
    for url in [
        "localhost:6379",
        "http://example.com",
        "",
        "redis+sentinel://s1",
    ] {
        let ran = Lockrun::via(url).key("job").command(["true"]).run();
        ran.assert(
            Expect::code(64)
                .stderr_starts("lockrun: --redis ")
                .stderr_one_line()
                .context(format!("{url:?}")),
        );
    }
}

#[test]
fn passwords_come_from_the_environment_or_url_and_never_show() {
    let secret = "s3cret-pass";
    let redis = Server::start_with(Some(free_port()), &["--requirepass", secret]);
    let url = redis.tcp_url();

    // No password: refused, and told where to put one.
    let ran = Lockrun::via(&url).key("job").command(["true"]).run();
    ran.assert(Expect::code(69).stderr_has("LOCKRUN_REDIS_PASSWORD"));

    // A wrong password in the URL: refused, and the password is not echoed.
    let wrong = url.replace("redis://", "redis://:wrong-pass@");
    let ran = Lockrun::via(&wrong).key("job").command(["true"]).run();
    ran.assert(
        Expect::code(69)
            .stderr_has("refused user 'default' with the password from the URL")
            .stderr_lacks("wrong-pass")
            .stderr_one_line(),
    );

    // Waiting does not mend a password: refused at once under --wait too.
    let ran = Lockrun::via(&wrong)
        .key("job")
        .args(["--wait", "30s"])
        .command(["true"])
        .run();
    ran.assert(
        Expect::code(69)
            .stderr_has("refused user 'default' with the password from the URL")
            .stderr_one_line(),
    );
    assert!(ran.took < Duration::from_secs(10), "took {:?}", ran.took);

    // The right password from the environment overrides the URL's.
    let ran = Lockrun::via(&wrong)
        .env("LOCKRUN_REDIS_PASSWORD", secret)
        .key("job")
        .command(["true"])
        .run();
    ran.assert(Expect::success());

    // And in the URL.
    let right = url.replace("redis://", &format!("redis://:{secret}@"));
    let ran = Lockrun::via(&right).key("job").command(["true"]).run();
    ran.assert(Expect::success());

    // A lease lost to a Redis that went away names the address, not the secret.
    let ran = Lockrun::via(&right)
        .key("job")
        .arg("-v")
        .command(["true"])
        .run();
    ran.assert(Expect::success().stderr_lacks(secret));
}

/// Runs `lockrun -- bash -c COMMAND` on a pseudo-terminal, feeding it
/// `typed` once COMMAND has touched `$STARTED`.
fn in_terminal(redis: &Server, dir: &Path, command: &str, typed: &[u8]) -> (Option<i32>, String) {
    let started = dir.join("started");
    let mut terminal = Terminal::start(&format!(
        "STARTED={started} {LOCKRUN} --redis {url} -k tty -- bash -c '{command}'",
        url = redis.url(),
        started = started.display(),
    ));
    assert!(
        eventually(PATIENCE, || started.exists()),
        "command never started"
    );
    terminal.type_in(typed);
    let (status, screen) = terminal.wait();
    (status.code(), screen)
}

#[test]
fn interactive_command_reads_the_terminal() {
    let redis = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, screen) = in_terminal(
        &redis,
        dir.path(),
        "touch $STARTED; read line; echo got:$line",
        b"hello\n",
    );
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("got:hello"), "{screen}");
}

#[test]
fn ctrl_c_in_the_terminal_reaches_the_command() {
    let redis = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    // bash, not sh: dash has a window after `touch` in which it swallows a
    // SIGINT meant for the command it is about to start.
    let (code, screen) = in_terminal(
        &redis,
        dir.path(),
        "trap \"exit 130\" INT; touch $STARTED; while :; do sleep 0.1; done",
        b"\x03",
    );
    assert_eq!(code, Some(130), "{screen}");
    redis.assert_only_fence("tty");
}

/// An interactive bash with job control on a pseudo-terminal, typed into.
struct JobShell(Terminal);

impl JobShell {
    fn start() -> Self {
        JobShell(Terminal::start("bash --norc --noprofile -i"))
    }

    fn type_in(&mut self, text: &str) {
        self.0.type_in(text.as_bytes());
    }

    /// Starts `lockrun -k tty ARGS -- <a loop>` at the prompt; returns
    /// lockrun's pid once the loop runs.
    fn start_lockrun(&mut self, redis: &Server, dir: &Path, args: &str) -> i32 {
        let (started, ppid) = (dir.join("started"), dir.join("ppid"));
        self.type_in(&format!(
            "{LOCKRUN} --redis {url} -k tty {args} -- bash -c 'echo $PPID > {ppid}; \
             touch {started}; while :; do sleep 0.1; done'\n",
            url = redis.url(),
            ppid = ppid.display(),
            started = started.display(),
        ));
        assert!(
            eventually(PATIENCE, || started.exists()),
            "command never started"
        );
        read_when_ready(&ppid).parse().expect("lockrun's pid")
    }

    /// Types `exit` and returns everything the terminal showed.
    fn finish(mut self, last: &str) -> String {
        self.type_in(&format!("{last}; exit\n"));
        self.0.close_keyboard();
        let (status, screen) = self.0.wait();
        assert!(status.success(), "{screen}");
        screen
    }
}

#[test]
fn ctrl_z_stops_lockrun_with_its_command_and_fg_continues_both() {
    let redis = Server::start();
    let dir = scratch();
    let mut shell = JobShell::start();
    let lockrun = shell.start_lockrun(&redis, dir.path(), "--ttl 10s");
    let token = redis.lock_value("tty").expect("locked");

    // Ctrl-Z: the command stops, and so does lockrun, so the shell has its
    // job stopped and its prompt back.
    shell.type_in("\x1a");
    assert!(
        eventually(PATIENCE, || process_state(lockrun) == Some('T')),
        "lockrun did not stop with its command"
    );
    // fg: both go on, still under the same lease.
    shell.type_in("fg\n");
    assert!(
        eventually(PATIENCE, || process_state(lockrun) != Some('T')),
        "fg did not continue lockrun"
    );
    assert_eq!(redis.lock_value("tty"), Some(token), "the lease was kept");
    // The command has the terminal again: Ctrl-C reaches it.
    shell.type_in("\x03");
    let screen = shell.finish("echo status=$?");
    assert!(screen.contains("status=130"), "{screen}");
    redis.assert_only_fence("tty");
}

#[test]
fn a_job_stopped_past_its_lease_is_killed_when_continued() {
    let redis = Server::start();
    let dir = scratch();
    let mut shell = JobShell::start();
    let lockrun = shell.start_lockrun(&redis, dir.path(), "--ttl 1s");
    shell.type_in("\x1a");
    assert!(
        eventually(PATIENCE, || process_state(lockrun) == Some('T')),
        "lockrun did not stop with its command"
    );
    // A stopped lockrun cannot renew: the lease runs out in Redis.
    assert!(eventually(PATIENCE, || !redis.is_locked("tty")));
    shell.type_in("fg\n");
    let screen = shell.finish("echo status=$?");
    assert!(screen.contains("status=76"), "{screen}");
}
