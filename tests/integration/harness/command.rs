//! `Lockrun`, the one builder of lockrun command lines, and `Ran`, a run to its end that a deadline bounds.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{eventually, Expect, Running, Server, PATIENCE};

/// The lockrun under test: the one `LOCKRUN_TEST_BINARY` names (the static
/// builds in .ci/run, or a script that runs one under qemu), else the one
/// cargo just built. It is a path wherever a `&str` or a program goes.
pub static LOCKRUN: Binary = Binary;

pub struct Binary;

impl Binary {
    /// Whether the lockrun under test is a script that runs the binary
    /// under an emulator, as .ci/run's aarch64 pass does with qemu-user.
    /// qemu-user keeps SIGABRT for itself: one sent to it ends qemu, and
    /// the emulated lockrun never sees it.
    pub fn emulated(&self) -> bool {
        let mut start = [0; 2];
        std::fs::File::open(Binary::path())
            .and_then(|mut file| file.read_exact(&mut start))
            .is_ok_and(|()| &start == b"#!")
    }

    fn path() -> &'static str {
        static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        PATH.get_or_init(|| {
            std::env::var("LOCKRUN_TEST_BINARY")
                .unwrap_or_else(|_| env!("CARGO_BIN_EXE_lockrun").to_owned())
        })
    }
}

impl std::ops::Deref for Binary {
    type Target = str;

    fn deref(&self) -> &str {
        Binary::path()
    }
}

impl AsRef<OsStr> for Binary {
    fn as_ref(&self) -> &OsStr {
        OsStr::new(Binary::path())
    }
}

impl std::fmt::Display for Binary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(Binary::path())
    }
}

/// How long a run to its end may take: some wait up to `PATIENCE` for a lock
/// themselves, so they get twice that.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// A lockrun command line, `lockrun [SUBCOMMAND] [ARGS] [--redis URL]...
/// [-- COMMAND]`, with none of the caller's LOCKRUN_* settings and stdin
/// closed.
#[derive(Default)]
pub struct Lockrun<'a> {
    /// The server given with `at`: a holder reads its lock there.
    pub(super) server: Option<&'a Server>,
    subcommand: Option<&'static str>,
    redis: Vec<String>,
    args: Vec<OsString>,
    command: Vec<OsString>,
    pub(super) key: Option<String>,
    pub(super) prefix: Option<String>,
    env: Vec<(OsString, OsString)>,
    input: Option<Vec<u8>>,
    /// Signal names lockrun starts with ignored, as `trap '' NAMES` leaves them.
    ignored: Option<&'static str>,
    /// The host name lockrun sees (`on_host`).
    host: Option<&'static str>,
    pub(super) stdout: Option<Stdio>,
    pub(super) stderr: Option<Stdio>,
}

impl Lockrun<'static> {
    /// lockrun with no `--redis`: for the environment's URL, or none.
    pub fn new() -> Self {
        Self::default()
    }

    /// lockrun pointed at any URL: a Sentinel set, a cluster, a bad one.
    pub fn via(url: &str) -> Self {
        Self::new().redis(url)
    }

    /// lockrun on every server of a quorum.
    pub fn on_all(servers: &[Server]) -> Self {
        servers
            .iter()
            .fold(Self::new(), |lockrun, server| lockrun.redis(&server.url()))
    }
}

impl<'a> Lockrun<'a> {
    /// lockrun pointed at `server`.
    pub fn at(server: &'a Server) -> Self {
        Lockrun {
            server: Some(server),
            ..Lockrun::via(&server.url())
        }
    }

    /// One more `--redis URL`.
    pub fn redis(mut self, url: &str) -> Self {
        self.redis.push(url.to_string());
        self
    }

    /// `status` or `release`, which clap wants before any flag.
    pub fn subcommand(mut self, name: &'static str) -> Self {
        self.subcommand = Some(name);
        self
    }

    /// `-k NAME`.
    pub fn key(mut self, name: &str) -> Self {
        self.key = Some(name.to_string());
        self.args(["-k", name])
    }

    /// `--prefix PREFIX`, which a holder needs to find its lock.
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = Some(prefix.to_string());
        self.args(["--prefix", prefix])
    }

    /// lockrun's own flags, before the `--`.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        for arg in args {
            let arg = arg.as_ref();
            // The URLs follow the arguments: after a `--` they would be the
            // command's.
            assert_ne!(arg, "--", "give the command with .command()");
            self.args.push(arg.to_owned());
        }
        self
    }

    pub fn arg(self, arg: impl AsRef<OsStr>) -> Self {
        self.args([arg])
    }

    /// The command lockrun runs, after the `--`; more words each call.
    pub fn command<S: AsRef<OsStr>>(mut self, argv: impl IntoIterator<Item = S>) -> Self {
        self.command
            .extend(argv.into_iter().map(|arg| arg.as_ref().to_owned()));
        self
    }

    /// Runs `touch PATH`: whether `path` exists tells whether it ran.
    pub fn touch(self, path: impl AsRef<OsStr>) -> Self {
        self.command(["touch"]).command([path])
    }

    /// Runs the sh `script` with `dir` as its `$1`; `command` adds `$2`...
    pub fn sh(self, script: &str, dir: &Path) -> Self {
        self.command(["sh", "-c", script, "sh"]).command([dir])
    }

    /// LOCKRUN_CONFIG=`path`: this configuration file instead of none.
    pub fn config(self, path: impl AsRef<OsStr>) -> Self {
        self.env("LOCKRUN_CONFIG", path)
    }

    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((name.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// What `run` writes to lockrun's stdin (closed otherwise).
    pub fn input(mut self, bytes: Vec<u8>) -> Self {
        self.input = Some(bytes);
        self
    }

    /// For `spawn`; `run` always captures stdout and stderr.
    pub fn stdout(mut self, stdout: impl Into<Stdio>) -> Self {
        self.stdout = Some(stdout.into());
        self
    }

    pub fn stderr(mut self, stderr: impl Into<Stdio>) -> Self {
        self.stderr = Some(stderr.into());
        self
    }

    pub(super) fn command_is_empty(&self) -> bool {
        self.command.is_empty()
    }

    /// Starts lockrun with these signals (names as `trap` takes them)
    /// ignored, as a non-interactive shell starts a background job (INT
    /// QUIT) or nohup its command (HUP): a shell sets them and execs it.
    pub fn ignoring(mut self, names: &'static str) -> Self {
        self.ignored = Some(names);
        self
    }

    /// Runs lockrun as if on host `name`: in a UTS namespace of its own
    /// (`unshare -u`, as root) whose host name is `name`, so that runs of
    /// one test report different hosts, as they would from a fleet.
    pub fn on_host(mut self, name: &'static str) -> Self {
        self.host = Some(name);
        self
    }

    pub(super) fn build(&mut self) -> Command {
        let mut command = match (self.ignored, self.host) {
            (None, Some(host)) => {
                let mut unshare = Command::new("unshare");
                let script = r#"hostname "$0" && exec "$@""#;
                unshare.args(["-u", "sh", "-c", script, host]).arg(&LOCKRUN);
                unshare
            }
            (None, None) => Command::new(&LOCKRUN),
            (Some(names), _) => {
                let mut shell = Command::new("sh");
                let script = format!("trap '' {names}; exec \"$0\" \"$@\"");
                shell.args(["-c", &script]).arg(&LOCKRUN);
                shell
            }
        };
        clear_lockrun_env(&mut command);
        command.args(self.subcommand).args(&self.args);
        for url in &self.redis {
            command.arg("--redis").arg(url);
        }
        if !self.command.is_empty() {
            command.arg("--").args(&self.command);
        }
        command.envs(self.env.drain(..));
        command.stdin(Stdio::null());
        if let Some(stdout) = self.stdout.take() {
            command.stdout(stdout);
        }
        if let Some(stderr) = self.stderr.take() {
            command.stderr(stderr);
        }
        // A group of its own, so that a run past its deadline is killed with
        // whatever it started in that group.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        command
    }

    /// Starts lockrun and leaves it running.
    pub fn spawn(mut self) -> Running {
        Running::spawn_group(&mut self.build())
    }

    /// `lockrun status --json` for this builder's key and servers: its exit
    /// status and the object it printed (the test fails on anything else).
    pub fn status_json(self) -> (Option<i32>, serde_json::Value) {
        let ran = self.subcommand("status").arg("--json").run();
        let json = serde_json::from_str(ran.stdout.trim())
            .unwrap_or_else(|_| panic!("not JSON: {} {}", ran.stdout, ran.stderr));
        (ran.code, json)
    }

    /// Runs lockrun to its end with its output captured. Fails the test,
    /// killing the run's process group, if it has not ended after a minute
    /// or if something it started still holds its output open.
    pub fn run(mut self) -> Ran {
        let input = self.input.take();
        let mut command = self.build();
        if input.is_some() {
            command.stdin(Stdio::piped());
        }
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let began = Instant::now();
        let mut run = Running::spawn_group(&mut command);
        let writer = input.map(|bytes| {
            let mut stdin = run.child.stdin.take().expect("piped");
            // Its own thread: the output must be drained meanwhile.
            std::thread::spawn(move || stdin.write_all(&bytes))
        });
        let stdout = read_all(run.child.stdout.take());
        let stderr = read_all(run.child.stderr.take());
        let Some(status) = run.wait_for(RUN_LIMIT) else {
            run.kill();
            panic!("{command:?} did not end within {RUN_LIMIT:?}; killed its process group");
        };
        let took = began.elapsed();
        let finished = eventually(PATIENCE, || stdout.is_finished() && stderr.is_finished());
        assert!(finished, "{command:?} ended, but its output was left open");
        if let Some(writer) = writer {
            writer.join().expect("writer").expect("write stdin");
        }
        let joined = |reader: JoinHandle<Vec<u8>>| reader.join().expect("output reader");
        Ran::new(
            status,
            took,
            joined(stdout),
            &joined(stderr),
            format!("{command:?}"),
        )
    }

    /// The fencing token that this run gets, run to its end. What it says
    /// on stderr is left to the caller's other checks: after a failover a
    /// run may warn about its replicas.
    #[track_caller]
    pub fn next_fence(self) -> u64 {
        let ran = self
            .command(["sh", "-c", r#"echo "$LOCKRUN_FENCING_TOKEN""#])
            .run();
        ran.assert(Expect::success().stdout_any().stderr_any());
        ran.stdout
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{:?} is not a fencing token", ran.stdout))
    }
}

impl Server {
    /// lockrun on lock `name` in this server, the usual start of a test's
    /// command line.
    pub fn lockrun(&self, name: &str) -> Lockrun<'_> {
        Lockrun::at(self).key(name)
    }

    /// `lockrun release --force` on lock `name`, with any further `args`
    /// (`--holder TOKEN`); it must succeed.
    #[track_caller]
    pub fn force_release(&self, name: &str, args: &[&str]) -> Ran {
        let ran = self
            .lockrun(name)
            .subcommand("release")
            .arg("--force")
            .args(args)
            .run();
        ran.assert(Expect::success().stdout_any().stderr_any());
        ran
    }
}

/// Keeps the caller's LOCKRUN_* settings from reaching a test's lockrun,
/// and the host's /etc/lockrun.conf too: LOCKRUN_CONFIG set to nothing
/// reads no file. A test of the file names its own with `config`.
pub(super) fn clear_lockrun_env(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LOCKRUN_") {
            command.env_remove(name);
        }
    }
    command.env(NO_CONFIG.0, NO_CONFIG.1);
}

/// LOCKRUN_CONFIG set to nothing: lockrun reads no configuration file.
pub const NO_CONFIG: (&str, &str) = ("LOCKRUN_CONFIG", "");

/// Reads `pipe` to its end on a thread of its own, so that neither pipe can
/// fill up and stall the process while the other is read.
pub(super) fn read_all(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<Vec<u8>> {
    let mut pipe = pipe.expect("piped");
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        pipe.read_to_end(&mut bytes).expect("read output");
        bytes
    })
}

/// What a run to its end left: how it ended, what it wrote, how long it took.
pub struct Ran {
    /// The exit code; None when a signal ended the process.
    pub code: Option<i32>,
    /// The signal that ended the process, if one did.
    pub signal: Option<i32>,
    /// stdout as text (invalid UTF-8 replaced); `stdout_bytes` has it exactly.
    pub stdout: String,
    pub stderr: String,
    stdout_bytes: Vec<u8>,
    pub took: Duration,
    /// The command line, for a failure's report.
    pub(super) command: String,
}

/// Partial checks, from before `Ran::assert` checked a run whole. Tests
/// written against them still compile; new tests say the whole outcome
/// with `Expect` instead.
impl Ran {
    fn new(
        status: std::process::ExitStatus,
        took: Duration,
        stdout: Vec<u8>,
        stderr: &[u8],
        command: String,
    ) -> Self {
        Ran {
            code: status.code(),
            signal: status.signal(),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(stderr).into_owned(),
            stdout_bytes: stdout,
            took,
            command,
        }
    }

    /// Asserts the outcome of a run whose Redis is down: 69, nothing on
    /// stdout, and the line that says Redis cannot be reached.
    #[track_caller]
    pub fn assert_redis_unreachable(&self) {
        self.assert(Expect::code(69).stderr_starts("lockrun: cannot reach Redis"));
    }

    #[track_caller]
    pub fn assert_stdout_has(&self, needle: &str) {
        assert!(
            self.stdout.contains(needle),
            "want {needle:?}: {}",
            self.stdout
        );
    }

    /// Exactly the bytes written to stdout.
    pub fn stdout_bytes(&self) -> &[u8] {
        &self.stdout_bytes
    }
}

impl Running {
    /// Waits up to `PATIENCE` for the end of a run whose stdout and stderr
    /// went to the files `stdout` and `stderr`, and returns it as a `Ran`.
    #[track_caller]
    pub(super) fn ended(&mut self, stdout: &Path, stderr: &Path) -> Ran {
        let status = self.wait();
        let took = self.began.elapsed();
        let stdout = std::fs::read(stdout).unwrap_or_default();
        let stderr = std::fs::read(stderr).unwrap_or_default();
        Ran::new(status, took, stdout, &stderr, self.command.clone())
    }

    /// Waits up to `PATIENCE` for the end of a run whose output the test
    /// does not keep, and checks its status as `expect` says (its checks of
    /// stdout and stderr see nothing written).
    #[track_caller]
    pub fn exits(&mut self, expect: Expect) {
        self.exits_saying(expect, String::new);
    }

    /// `exits`, with what `context` says once the run ended (what it wrote
    /// to a log, say) in a failure's report.
    #[track_caller]
    pub fn exits_saying(&mut self, expect: Expect, context: impl FnOnce() -> String) {
        self.exits_within(PATIENCE, expect, context);
    }

    /// `exits_saying`, waiting up to `limit` rather than `PATIENCE`.
    #[track_caller]
    pub fn exits_within(
        &mut self,
        limit: Duration,
        expect: Expect,
        context: impl FnOnce() -> String,
    ) {
        let status = self
            .wait_for(limit)
            .unwrap_or_else(|| panic!("still running after {limit:?}: {}", self.command));
        let took = self.began.elapsed();
        let ran = Ran::new(status, took, Vec::new(), &[], self.command.clone());
        let said = context();
        let expect = if said.is_empty() {
            expect
        } else {
            expect.context(said)
        };
        ran.assert(expect);
    }
}

/// The names of a JSON object's fields, sorted: what `--json` output
/// promises, compared as a list.
pub fn field_names(value: &serde_json::Value) -> Vec<&str> {
    let mut names: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("not a JSON object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    names
}
