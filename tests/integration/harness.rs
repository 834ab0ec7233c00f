//! The test harness: servers that each test starts and owns (redis-server,
//! which a test can kill, pause or restart; PostgreSQL for the fencing
//! example), the lockrun binary run once (`run_once`) or kept running
//! (`Running`, `Holder`), and polling with deadlines instead of fixed sleeps.

mod postgres;

pub use postgres::PostgresServer;

use std::borrow::BorrowMut;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;
use wait_timeout::ChildExt;

/// How long any single wait in a test may take before it fails. Generous:
/// the machine has two cores and runs several tests at once.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// How long a one-shot run may take: some wait up to `PATIENCE` for a lock
/// themselves, so they get twice that.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// The prefix lockrun puts before every key unless told otherwise.
const DEFAULT_PREFIX: &str = "lockrun:";

/// A redis-server owned by one test, listening on a unix socket in its own
/// temporary directory (optionally on a free TCP port as well).
pub struct RedisServer {
    dir: TempDir,
    socket: PathBuf,
    port: Option<u16>,
    extra: Vec<String>,
    process: Option<Child>,
}

impl RedisServer {
    /// A server reachable only through its unix socket.
    pub fn start() -> Self {
        Self::start_with(None, &[])
    }

    /// A server that also listens on a free loopback TCP port.
    pub fn start_tcp() -> Self {
        Self::start_with(Some(free_port()), &[])
    }

    /// A server with extra redis-server arguments (e.g. `--requirepass x`).
    pub fn start_with(port: Option<u16>, extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockrun-redis-")
            .tempdir()
            .expect("temp dir");
        let socket = dir.path().join("redis.sock");
        let mut server = RedisServer {
            dir,
            socket,
            port,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            process: None,
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let port = self.port.unwrap_or(0).to_string();
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port, "--bind", "127.0.0.1"])
            .arg("--unixsocket")
            .arg(&self.socket)
            .args([
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--logfile", "redis.log", "--daemonize", "no"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let process = command
            .spawn()
            .expect("redis-server must be installed (.ci/run installs it)");
        self.process = Some(process);
        let socket = self.socket.clone();
        let ready = eventually(PATIENCE, || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
        assert!(
            ready,
            "redis-server did not start; see {}",
            self.dir.path().display()
        );
    }

    /// The URL lockrun is given: the unix socket.
    pub fn url(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The TCP URL, for servers started with `start_tcp`.
    pub fn tcp_url(&self) -> String {
        format!(
            "redis://127.0.0.1:{}",
            self.port.expect("started with start_tcp")
        )
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.process.as_ref().expect("running").id() as i32)
    }

    /// A direct connection for asserting what lockrun left in Redis.
    pub fn client(&self) -> redis::Connection {
        let mut url = self.url();
        if let Some(pass) = self.password() {
            url = format!("redis+unix://{}?pass={pass}", self.socket.display());
        }
        redis::Client::open(url)
            .expect("client")
            .get_connection()
            .expect("connection to the test's own redis")
    }

    fn password(&self) -> Option<String> {
        let at = self.extra.iter().position(|a| a == "--requirepass")?;
        self.extra.get(at + 1).cloned()
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Starts it again on the same socket and port, with no keys: Redis
    /// restarted without persistence.
    pub fn restart_empty(&mut self) {
        self.kill();
        self.launch();
    }

    pub fn pause(&self) {
        kill(self.pid(), Signal::SIGSTOP).expect("SIGSTOP redis");
    }

    pub fn resume(&self) {
        kill(self.pid(), Signal::SIGCONT).expect("SIGCONT redis");
    }

    // --- What lockrun left in Redis, for lock NAME under the default prefix.

    /// The lease: the value lockrun set on the lock key, if it is held.
    pub fn lock_value(&self, name: &str) -> Option<String> {
        self.get(&lock_key(DEFAULT_PREFIX, name))
    }

    pub fn is_locked(&self, name: &str) -> bool {
        self.lock_value(name).is_some()
    }

    /// The lease's time left in ms (negative: no key, or no expiry).
    pub fn pttl(&self, name: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(lock_key(DEFAULT_PREFIX, name))
            .query(&mut self.client())
            .expect("PTTL")
    }

    /// Sets the fencing counter of lock `name`, as a long history would.
    /// The fencing counter of lock `name`, if there is one.
    pub fn fence(&self, name: &str) -> Option<u64> {
        self.get(&fence_key(name)).map(|text| {
            text.parse()
                .unwrap_or_else(|_| panic!("{text:?} is not a fencing counter"))
        })
    }

    pub fn set_fence(&self, name: &str, value: u64) {
        let _: () = redis::cmd("SET")
            .arg(fence_key(name))
            .arg(value)
            .query(&mut self.client())
            .expect("SET");
    }

    // --- The wait queue of lock NAME (see src/lock/queue.lua).

    /// How many runs wait in line for lock `name`.
    pub fn in_line(&self, name: &str) -> usize {
        redis::cmd("ZCARD")
            .arg(format!("{}:queue", lock_key(DEFAULT_PREFIX, name)))
            .query(&mut self.client())
            .expect("ZCARD")
    }

    /// The records of the runs waiting in line for lock `name` (JSON, in no
    /// order).
    pub fn waiter_records(&self, name: &str) -> Vec<String> {
        redis::cmd("HVALS")
            .arg(waiters_key(name))
            .query(&mut self.client())
            .expect("HVALS")
    }

    /// How many runs wait in line for lock `name` and listen for their
    /// wake-up message.
    pub fn listening_waiters(&self, name: &str) -> usize {
        listening(&self.waiter_records(name))
    }

    /// How many wake-up channels of lock `name` Redis has subscribers on:
    /// one per waiting run whose connection Redis has not seen close.
    pub fn wake_channels(&self, name: &str) -> usize {
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg(wake_channels(name))
            .query(&mut self.client())
            .expect("PUBSUB CHANNELS");
        channels.len()
    }

    /// Asserts that all this server holds is the fencing counter of lock
    /// `name`: every run released its lease and holder record, and the
    /// counter stays so that tokens keep growing.
    #[track_caller]
    pub fn assert_only_fence(&self, name: &str) {
        assert_eq!(
            self.keys(),
            [fence_key(name)],
            "want only the fencing counter of {name} left in Redis"
        );
    }

    /// Every key in this server.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut self.client())
            .expect("KEYS");
        keys.sort();
        keys
    }

    fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.client())
            .expect("GET")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(process) = &self.process {
            // A paused server would ignore SIGKILL until continued on some
            // kernels' ptrace paths; continue it first to be sure.
            let _ = kill(Pid::from_raw(process.id() as i32), Signal::SIGCONT);
        }
        self.kill();
    }
}

/// The key of lock `name` under `prefix`, as lockrun names it.
fn lock_key(prefix: &str, name: &str) -> String {
    format!("{prefix}{{{name}}}")
}

/// The key of lock `name` under the default prefix, for tests that look at
/// servers other than a `RedisServer` (Sentinel sets, clusters).
pub fn default_lock_key(name: &str) -> String {
    lock_key(DEFAULT_PREFIX, name)
}

/// The key of the waiting runs' records of lock `name` under the default
/// prefix, for tests that look at servers other than a `RedisServer`.
pub fn waiters_key(name: &str) -> String {
    format!("{}:waiters", lock_key(DEFAULT_PREFIX, name))
}

/// How many of the waiting runs' `records` (the values at `waiters_key`)
/// say that their run listens for its wake-up message: a waiter records it
/// once it has subscribed, right after taking its place.
pub fn listening(records: &[String]) -> usize {
    records
        .iter()
        .filter(|record| record.contains(r#""listening":true"#))
        .count()
}

/// The pattern that matches the wake-up channels of the runs waiting for lock
/// `name` under the default prefix, for `PUBSUB CHANNELS`.
pub fn wake_channels(name: &str) -> String {
    format!("{}:wake:*", lock_key(DEFAULT_PREFIX, name))
}

/// The key of the fencing counter of lock `name` under the default prefix.
fn fence_key(name: &str) -> String {
    format!("{}:fence", lock_key(DEFAULT_PREFIX, name))
}

pub fn free_port() -> u16 {
    // Bind to port 0 and let the OS choose; the tiny window before
    // redis-server binds it is acceptable on a test machine.
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Polls `condition` every 10 ms until it holds or `limit` passes.
pub fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The lockrun binary with a clean environment: none of the caller's
/// LOCKRUN_* settings leak into a test.
pub fn lockrun() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lockrun"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LOCKRUN_") {
            command.env_remove(name);
        }
    }
    command
}

/// lockrun pointed at `server`, with `args` before the `--`.
pub fn lockrun_at(server: &RedisServer, args: &[&str]) -> Command {
    let mut command = lockrun();
    command.arg("--redis").arg(server.url()).args(args);
    command
}

/// lockrun pointed at `server`, with `args` before the `--`, running the sh
/// `script` with `dir` as its `$1`.
pub fn lockrun_sh(server: &RedisServer, args: &[&str], script: &str, dir: &Path) -> Command {
    let mut command = lockrun_at(server, args);
    command.args(["--", "sh", "-c", script, "sh"]).arg(dir);
    command
}

/// What a one-shot run left: how it ended and what it wrote.
pub struct Ran {
    /// The exit code; None when a signal ended the process.
    pub code: Option<i32>,
    /// stdout as text (invalid UTF-8 replaced); `stdout_bytes` has it exactly.
    pub stdout: String,
    pub stderr: String,
    stdout_bytes: Vec<u8>,
}

impl Ran {
    /// lockrun's one line on stderr, without its `lockrun: ` prefix; fails
    /// the test unless there is exactly one.
    #[track_caller]
    pub fn one_line(&self) -> &str {
        let mut lines = self.stderr.lines();
        match (lines.next(), lines.next()) {
            (Some(line), None) => line.strip_prefix("lockrun: ").unwrap_or(line),
            _ => panic!("want one line on stderr, got {:?}", self.stderr),
        }
    }

    /// Exactly the bytes written to stdout.
    pub fn stdout_bytes(&self) -> &[u8] {
        &self.stdout_bytes
    }
}

impl From<Output> for Ran {
    fn from(output: Output) -> Self {
        Ran {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            stdout_bytes: output.stdout,
        }
    }
}

/// Runs `command` (lockrun, usually from `lockrun_at`) to its end, with no
/// stdin and its output captured; fails the test if it has not ended after
/// a minute, or if something it started still holds its output open.
pub fn run_once(mut command: impl BorrowMut<Command>) -> Ran {
    let command = command.borrow_mut();
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut run = Running::spawn(command);
    let stdout = read_all(run.child.stdout.take());
    let stderr = read_all(run.child.stderr.take());
    let status = run
        .wait_for(RUN_LIMIT)
        .unwrap_or_else(|| panic!("{command:?} did not end within {RUN_LIMIT:?}"));
    let finished = eventually(PATIENCE, || stdout.is_finished() && stderr.is_finished());
    assert!(finished, "{command:?} ended, but its output was left open");
    let joined = |reader: JoinHandle<Vec<u8>>| reader.join().expect("output reader");
    Ran::from(Output {
        status,
        stdout: joined(stdout),
        stderr: joined(stderr),
    })
}

/// Reads `pipe` to its end on a thread of its own, so that neither pipe can
/// fill up and stall the process while the other is read.
fn read_all(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<Vec<u8>> {
    let mut pipe = pipe.expect("piped");
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        pipe.read_to_end(&mut bytes).expect("read output");
        bytes
    })
}

/// A spawned lockrun (or any process) that is killed if the test fails.
pub struct Running {
    pub child: Child,
}

impl Running {
    pub fn spawn(command: &mut Command) -> Self {
        Running {
            child: command.spawn().expect("spawn"),
        }
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).expect("signal lockrun");
    }

    /// Waits for the exit, failing the test after `PATIENCE`.
    pub fn wait(&mut self) -> ExitStatus {
        self.wait_for(PATIENCE)
            .expect("process did not exit in time")
    }

    pub fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
        self.child.wait_timeout(limit).expect("wait")
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = kill(self.pid(), Signal::SIGCONT);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether process `pid` exists (a zombie counts as gone).
pub fn alive(pid: i32) -> bool {
    process_state(pid).is_some_and(|state| state != 'Z')
}

/// The state letter of process `pid` in /proc (R, S, T for stopped, Z...),
/// or None when it is gone.
pub fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name in parentheses.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

/// Waits until `path` exists and returns its trimmed contents.
pub fn read_when_ready(path: &Path) -> String {
    let mut text = String::new();
    let ready = eventually(PATIENCE, || {
        text = std::fs::read_to_string(path).unwrap_or_default();
        text.ends_with('\n')
    });
    assert!(ready, "{} never appeared", path.display());
    text.trim().to_string()
}

/// A temporary directory for one test's own files: pid files, logs, markers.
pub fn scratch() -> TempDir {
    tempfile::Builder::new()
        .prefix("lockrun-test-")
        .tempdir()
        .expect("temp dir")
}

/// Waits up to `PATIENCE` until the file at `path` contains `needle`.
pub fn wait_for_text(path: &Path, needle: &str) -> bool {
    eventually(PATIENCE, || {
        std::fs::read_to_string(path).is_ok_and(|text| text.contains(needle))
    })
}

/// The pid a command wrote to `path` (one line), once it is there.
pub fn read_pid(path: &Path) -> i32 {
    let text = read_when_ready(path);
    text.parse()
        .unwrap_or_else(|_| panic!("{} holds {text:?}, not a pid", path.display()))
}

/// What a spawned process has written to its log file at `path` so far
/// (see `log_file`); empty when there is none yet.
pub fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A file for a spawned process's stderr, so a test can read it while the
/// process runs.
pub fn log_file(path: &Path) -> std::fs::File {
    std::fs::File::create(path).expect("create log file")
}

/// Like `read_pid`, but if `run` exits before the pid appears, fails at once
/// with its exit status and what it wrote to `stderr`.
fn read_pid_of(run: &mut Running, path: &Path, stderr: &Path) -> i32 {
    let written = || std::fs::read_to_string(path).is_ok_and(|text| text.ends_with('\n'));
    eventually(PATIENCE, || written() || !run.running());
    if !written() {
        panic!(
            "{} never appeared; the process {}: {}",
            path.display(),
            match run.child.try_wait() {
                Ok(Some(status)) => format!("exited with {status}"),
                _ => "is still running".to_string(),
            },
            std::fs::read_to_string(stderr).unwrap_or_default()
        );
    }
    read_pid(path)
}

/// The fencing token a command wrote to `path` (one line), once it is there.
pub fn read_fence(path: &Path) -> u64 {
    let text = read_when_ready(path);
    text.parse()
        .unwrap_or_else(|_| panic!("{} holds {text:?}, not a fencing token", path.display()))
}

/// The fencing token that one more run on lock `name` gets, with `args`
/// before the `--`.
pub fn next_fence(server: &RedisServer, name: &str, args: &[&str]) -> u64 {
    let echo = ["--", "sh", "-c", "echo $LOCKRUN_FENCING_TOKEN"];
    let ran = run_once(lockrun_at(server, &[&["-k", name], args, &echo].concat()));
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    ran.stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{:?} is not a fencing token", ran.stdout))
}

/// Holds the lock until the test creates `go` in the directory given as $1.
/// The fencing token is written before the pid, so a readable pid file means
/// both are there.
const HOLD_UNTIL_GO: &str = r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/fence"; echo $$ > "$1/pid"
while [ ! -e "$1/go" ]; do sleep 0.05; done"#;

/// A run that keeps a lock busy for as long as a test needs, in a scratch
/// directory of its own with its stderr in `stderr` there. Made with
/// `Holder::builder`; by default its command is `HOLD_UNTIL_GO`.
pub struct Holder {
    /// lockrun itself.
    pub run: Running,
    /// The lock's value while this run holds it; empty for a holder made
    /// with `builder_at`, whose servers the harness cannot read.
    pub token: String,
    child: Option<i32>,
    // Declared last so that it is removed after `run` is stopped.
    dir: TempDir,
}

/// What a `Holder` runs under the lock.
enum Held {
    /// `SHELL -c SCRIPT SHELL DIR`; the script writes its pid to `$1/pid`
    /// once it runs.
    Script(&'static str, String),
    /// A plain command; it counts as started once the lock is taken.
    Command(Vec<String>),
}

/// How to start a `Holder`: `Holder::builder(&redis, "job")`, then any of
/// `args`, `prefix`, `sh`, `bash`, `command`, then `start`.
pub struct HolderBuilder<'a> {
    /// The server the test started, when it did: a plain command's start
    /// and the token are read from it.
    server: Option<&'a RedisServer>,
    url: String,
    name: String,
    prefix: String,
    args: Vec<String>,
    held: Held,
}

impl Holder {
    /// A holder of lock `name` in `server`.
    pub fn builder<'a>(server: &'a RedisServer, name: &str) -> HolderBuilder<'a> {
        Self::builder_at(&server.url(), name).on(server)
    }

    /// A holder of lock `name` through any `--redis` URL: a Sentinel set, a
    /// cluster. It runs a script (the default), which says when it started.
    pub fn builder_at(url: &str, name: &str) -> HolderBuilder<'static> {
        HolderBuilder {
            server: None,
            url: url.to_string(),
            name: name.to_string(),
            prefix: DEFAULT_PREFIX.to_string(),
            args: Vec::new(),
            held: Held::Script("sh", HOLD_UNTIL_GO.to_string()),
        }
    }

    /// The command's pid, as its script wrote it.
    pub fn child(&self) -> i32 {
        self.child.expect("only a script writes its pid")
    }

    /// The fencing token `HOLD_UNTIL_GO` was given.
    pub fn fence(&self) -> u64 {
        read_fence(&self.dir.path().join("fence"))
    }

    /// Lets `HOLD_UNTIL_GO` finish, and so lockrun release the lock.
    pub fn go(&self) {
        std::fs::write(self.dir.path().join("go"), "").expect("write go");
    }

    /// What lockrun has written to its stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// The scratch directory, the script's `$1`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl<'a> HolderBuilder<'a> {
    fn on(mut self, server: &'a RedisServer) -> Self {
        self.server = Some(server);
        self
    }

    /// lockrun's flags, after `--redis URL -k NAME`.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|arg| arg.to_string()));
        self
    }

    /// Keys under `prefix` instead of the default one (`--prefix`).
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self.args(&["--prefix", prefix])
    }

    /// Runs the sh `script` instead of `HOLD_UNTIL_GO`; it must write its
    /// pid to `$1/pid` once it runs.
    pub fn sh(mut self, script: &str) -> Self {
        self.held = Held::Script("sh", script.to_string());
        self
    }

    /// Like `sh`, with bash.
    pub fn bash(mut self, script: &str) -> Self {
        self.held = Held::Script("bash", script.to_string());
        self
    }

    /// Runs `argv`, which writes no pid: it counts as started once the lock
    /// is taken.
    pub fn command(mut self, argv: &[&str]) -> Self {
        self.held = Held::Command(argv.iter().map(|arg| arg.to_string()).collect());
        self
    }

    /// Starts lockrun and returns once its command runs, that is once it
    /// holds the lock.
    pub fn start(self) -> Holder {
        let dir = scratch();
        let stderr = dir.path().join("stderr");
        let mut command = lockrun();
        command
            .arg("--redis")
            .arg(&self.url)
            .args(["-k", &self.name]);
        command
            .args(&self.args)
            .arg("--")
            .stdin(Stdio::null())
            .stderr(log_file(&stderr));
        match &self.held {
            Held::Script(shell, script) => command
                .args([*shell, "-c", script.as_str(), *shell])
                .arg(dir.path()),
            Held::Command(argv) => command.args(argv),
        };
        let mut run = Running::spawn(&mut command);
        let key = lock_key(&self.prefix, &self.name);
        let child = match &self.held {
            Held::Script(..) => Some(read_pid_of(&mut run, &dir.path().join("pid"), &stderr)),
            Held::Command(_) => {
                let server = self
                    .server
                    .expect("a plain command's start is read from its RedisServer");
                let locked = eventually(PATIENCE, || server.get(&key).is_some() || !run.running());
                assert!(
                    locked && run.running(),
                    "the holder never took {key}: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                );
                None
            }
        };
        let token = self.server.map_or_else(String::new, |server| {
            server.get(&key).expect("the holder has the lock")
        });
        Holder {
            run,
            token,
            child,
            dir,
        }
    }
}

/// A job that must never run alongside another: mkdir is atomic, so it fails
/// while another job is inside. Inside, it appends its fencing token to
/// `fences` in $1 and stays $2 seconds; a job that finds another inside
/// appends its pid to `overlaps` and exits 3.
pub const NO_OVERLAP_JOB: &str = r#"mkdir "$1/inside" 2>/dev/null || { echo $$ >> "$1/overlaps"; exit 3; }
echo "$LOCKRUN_FENCING_TOKEN" >> "$1/fences"
sleep "$2"
rmdir "$1/inside""#;

/// Spawns `count` runs of `NO_OVERLAP_JOB` in `dir` at once, each with `args`
/// before the `--` and staying inside for `seconds`.
pub fn spawn_no_overlap_jobs(
    server: &RedisServer,
    count: usize,
    args: &[&str],
    dir: &Path,
    seconds: &str,
) -> Vec<Running> {
    (0..count)
        .map(|_| Running::spawn(lockrun_sh(server, args, NO_OVERLAP_JOB, dir).arg(seconds)))
        .collect()
}

/// The fencing tokens that the `NO_OVERLAP_JOB` runs in `dir` logged, in the
/// order they got inside, once it is clear that none found another inside.
pub fn no_overlap_fences(dir: &Path) -> Vec<u64> {
    assert!(
        !dir.join("overlaps").exists(),
        "jobs overlapped: {}",
        std::fs::read_to_string(dir.join("overlaps")).unwrap_or_default()
    );
    std::fs::read_to_string(dir.join("fences"))
        .expect("fences")
        .lines()
        .map(|line| {
            line.parse()
                .unwrap_or_else(|_| panic!("{line:?} in the log of fencing tokens"))
        })
        .collect()
}

impl RedisServer {
    /// Kills the server and starts it again with the same arguments, from
    /// the snapshot that `SAVE` left in its directory (unlike
    /// `restart_empty`, which has none to read). Returns as soon as it
    /// accepts connections, which it does while still loading the snapshot.
    pub fn restart_from_snapshot(&mut self) {
        assert!(
            self.dir.path().join("dump.rdb").exists(),
            "no snapshot to restart from: SAVE first"
        );
        self.kill();
        self.launch();
    }
}
