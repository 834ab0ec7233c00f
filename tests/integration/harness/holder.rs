//! `Holder`, a lockrun kept holding a lock (or waiting for it) for as long as a test needs, its `Gate`, and the no-overlap job that many runs race with.

use std::fs::File;
use std::io::Write as _;
use std::path::Path;

use tempfile::TempDir;

use super::keys::{lock_key, DEFAULT_PREFIX};
use super::PATIENCE;
use super::{
    eventually, log_file, read_fence, read_log, read_pid, scratch, Expect, Lockrun, Ran, Running,
};

/// Writes the slot (empty without `--slots`), the fencing token and the pid
/// to `slot`, `fence` and `pid` in the directory given as $1, then holds
/// the lock until the test opens the `Gate` there (`$1/go`). The pid comes
/// last, so a readable pid file means all three are there.
pub const HOLD_UNTIL_GO: &str = r#"echo "$LOCKRUN_SLOT" > "$1/slot"; echo "$LOCKRUN_FENCING_TOKEN" > "$1/fence"
echo $$ > "$1/pid"
read -r _ < "$1/go""#;

/// A FIFO, `go` in a scratch directory, that a command blocks on with
/// `read -r _ < "$1/go"` until the test opens it: the command goes on at
/// once, with no polling on either side. The test keeps it open for
/// writing, so that opening it to read never blocks and a line written
/// before the command reads it is kept until it does.
pub struct Gate {
    fifo: File,
}

impl Gate {
    /// Makes `go` in `dir`.
    pub fn new(dir: &Path) -> Gate {
        let path = dir.join("go");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo go");
        let fifo = File::options()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open go");
        Gate { fifo }
    }

    /// Lets the command blocked on it (or the next one to read it) go on.
    pub fn open(&self) {
        (&self.fifo).write_all(b"\n").expect("write go");
    }
}

/// A run that holds a lock or waits for it, in a scratch directory of its
/// own with its stderr in `stderr` there. Made from a `Lockrun` with `hold`
/// or `hold_script` (started once it holds the lock), or with
/// `spawn_waiter` or `wait_in_line` (which may still wait for it).
pub struct Holder {
    /// lockrun itself.
    pub run: Running,
    /// The lock's value while this run holds it; empty for a holder made
    /// with `Lockrun::via`, whose servers the harness does not read, and
    /// for a waiter.
    pub token: String,
    child: Option<i32>,
    gate: Gate,
    // Declared last so that it is removed after `run` is stopped.
    dir: TempDir,
}

impl Lockrun<'_> {
    /// Starts this run as a `Holder` and returns once its command runs, that
    /// is once it holds the lock. With no command given it runs
    /// `HOLD_UNTIL_GO`; a command given writes no pid, so it counts as
    /// started once the lock is taken in the server given with `at`.
    pub fn hold(self) -> Holder {
        self.start_holder(None)
    }

    /// Like `hold`, running `shell -c script shell DIR`; the script must
    /// write its pid to `$1/pid` once it runs.
    pub fn hold_script(self, shell: &str, script: &str) -> Holder {
        self.start_holder(Some((shell, script)))
    }

    fn start_holder(mut self, script: Option<(&str, &str)>) -> Holder {
        let dir = scratch();
        let gate = Gate::new(dir.path());
        let stderr = dir.path().join("stderr");
        self.stdout = Some(log_file(&dir.path().join("stdout")).into());
        self.stderr = Some(log_file(&stderr).into());
        let script = script.or(self.command_is_empty().then_some(("sh", HOLD_UNTIL_GO)));
        if let Some((shell, script)) = script {
            self = self
                .command([shell, "-c", script, shell])
                .command([dir.path()]);
        }
        let server = self.server;
        let key = lock_key(
            self.prefix.as_deref().unwrap_or(DEFAULT_PREFIX),
            self.key.as_deref().expect("a holder needs .key()"),
        );
        let mut run = self.spawn();
        let child = match script {
            Some(_) => Some(read_pid_of(&mut run, &dir.path().join("pid"), &stderr)),
            None => {
                let server = server.expect("a plain command's start is read from its Server");
                let pid = run.pid().as_raw();
                let locked = eventually(PATIENCE, || {
                    server.get(&key).is_some()
                        || server.shared_holder_token(&key, pid).is_some()
                        || !run.running()
                });
                assert!(
                    locked && run.running(),
                    "the holder never took {key}: {}",
                    read_log(&stderr)
                );
                None
            }
        };
        // The exclusive lease's value, or, for a holder with `--slots` or
        // `--shared`, its token in the holder records.
        let pid = run.pid().as_raw();
        let token = server.map_or_else(String::new, |server| {
            server
                .get(&key)
                .or_else(|| server.shared_holder_token(&key, pid))
                .expect("the holder has the lock")
        });
        Holder {
            run,
            token,
            child,
            gate,
            dir,
        }
    }

    /// Starts this run of `HOLD_UNTIL_GO` as a `Holder`, its stderr in
    /// `stderr` in its directory, and returns at once: it may still be
    /// waiting for the lock.
    pub fn spawn_waiter(self) -> Holder {
        let dir = scratch();
        let gate = Gate::new(dir.path());
        let run = self
            .sh(HOLD_UNTIL_GO, dir.path())
            .stdout(log_file(&dir.path().join("stdout")))
            .stderr(log_file(&dir.path().join("stderr")))
            .spawn();
        Holder {
            run,
            token: String::new(),
            child: None,
            gate,
            dir,
        }
    }
}

/// Like `read_pid`, but if `run` exits before the pid appears, fails at once
/// with its exit status and what it wrote to `stderr`.
fn read_pid_of(run: &mut Running, path: &Path, stderr: &Path) -> i32 {
    let written = || read_log(path).ends_with('\n');
    eventually(PATIENCE, || written() || !run.running());
    if !written() {
        panic!(
            "{} never appeared; the process {}: {}",
            path.display(),
            match run.child.try_wait() {
                Ok(Some(status)) => format!("exited with {status}"),
                _ => "is still running".to_string(),
            },
            read_log(stderr)
        );
    }
    read_pid(path)
}

impl Holder {
    /// The command's pid, as its script wrote it.
    pub fn child(&self) -> i32 {
        self.child.expect("only a script writes its pid")
    }

    /// Whether its command runs, that is whether it got the lock.
    pub fn entered(&self) -> bool {
        read_log(&self.dir.path().join("pid")).ends_with('\n')
    }

    /// Waits until its command runs; fails the test with what lockrun said
    /// if that does not happen within `PATIENCE`.
    #[track_caller]
    pub fn until_entered(&mut self) {
        let entered = eventually(PATIENCE, || self.entered() || !self.run.running());
        assert!(
            entered && self.entered(),
            "the waiter never got the lock: {}",
            self.stderr()
        );
    }

    /// The fencing token `HOLD_UNTIL_GO` was given.
    pub fn fence(&self) -> u64 {
        read_fence(&self.dir.path().join("fence"))
    }

    /// Lets `HOLD_UNTIL_GO` finish, and so lockrun release the lock.
    pub fn go(&self) {
        self.gate.open();
    }

    /// `go`, then checks that lockrun exited 0.
    #[track_caller]
    pub fn finish(&mut self) {
        self.go();
        self.end().assert(Expect::success().stderr_any());
    }

    /// Waits for the end of a holder whose lease was taken from it: it
    /// stops its command and exits 76.
    #[track_caller]
    pub fn lost(&mut self) {
        self.end().assert(Expect::code(76).stderr_any());
    }

    /// Waits up to `PATIENCE` for lockrun's end: its status, what it wrote
    /// to stdout and stderr (the files `stdout` and `stderr` in `dir`).
    #[track_caller]
    pub fn end(&mut self) -> Ran {
        let dir = self.dir.path();
        self.run.ended(&dir.join("stdout"), &dir.join("stderr"))
    }

    /// What lockrun has written to its stderr so far.
    pub fn stderr(&self) -> String {
        read_log(&self.dir.path().join("stderr"))
    }

    /// The `LOCKRUN_SLOT` that `HOLD_UNTIL_GO` was given, None when it was
    /// not set.
    pub fn slot(&self) -> Option<u32> {
        super::slot_in(self.dir.path())
    }

    /// The scratch directory, the script's `$1`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// A job that must never run alongside another: mkdir is atomic, so it fails
/// while another job is inside. Inside, it appends its fencing token to
/// `fences` in $1 and stays $2 seconds; a job that finds another inside
/// appends its pid to `overlaps` and exits 3. A job that lockrun stops with
/// SIGTERM (its lease lost, which a test may allow) leaves as it would have
/// on its own, so that the next one does not take its mark for an overlap.
const NO_OVERLAP_JOB: &str = r#"mkdir "$1/inside" 2>/dev/null || { echo $$ >> "$1/overlaps"; exit 3; }
trap 'rmdir "$1/inside"; exit 143' TERM
echo "$LOCKRUN_FENCING_TOKEN" >> "$1/fences"
sleep "$2"
rmdir "$1/inside""#;

impl Lockrun<'_> {
    /// Runs the no-overlap job in `dir`, staying inside for `seconds`.
    pub fn no_overlap_job(self, dir: &Path, seconds: &str) -> Self {
        self.sh(NO_OVERLAP_JOB, dir).command([seconds])
    }
}

/// The fencing tokens that the no-overlap jobs in `dir` logged, in the order
/// they got inside, once it is clear that none found another inside.
pub fn no_overlap_fences(dir: &Path) -> Vec<u64> {
    assert!(
        !dir.join("overlaps").exists(),
        "jobs overlapped: {}",
        read_log(&dir.join("overlaps"))
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
