//! `Holder`, a lockrun kept holding a lock for as long as a test needs, and the no-overlap job that many runs race with.

use std::path::Path;

use tempfile::TempDir;

use super::keys::{lock_key, DEFAULT_PREFIX};
use super::PATIENCE;
use super::{
    eventually, log_file, read_fence, read_log, read_pid, scratch, Expect, Lockrun, Ran, Running,
};

/// Holds the lock until the test creates `go` in the directory given as $1.
/// The fencing token is written before the pid, so a readable pid file means
/// both are there.
const HOLD_UNTIL_GO: &str = r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/fence"; echo $$ > "$1/pid"
while [ ! -e "$1/go" ]; do sleep 0.05; done"#;

/// A run that keeps a lock busy, in a scratch directory of its own with its
/// stderr in `stderr` there. Made from a `Lockrun` with `hold` or
/// `hold_script`.
pub struct Holder {
    /// lockrun itself.
    pub run: Running,
    /// The lock's value while this run holds it; empty for a holder made
    /// with `Lockrun::via`, whose servers the harness does not read.
    pub token: String,
    child: Option<i32>,
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

    /// Like `hold`, running `HOLD_SLOT_UNTIL_GO`, which also writes the
    /// `LOCKRUN_SLOT` it got (see `Holder::slot`): for `--slots` and
    /// `--shared` runs.
    pub fn hold_slot(self) -> Holder {
        self.hold_script("sh", super::HOLD_SLOT_UNTIL_GO)
    }

    /// Like `hold`, running `shell -c script shell DIR`; the script must
    /// write its pid to `$1/pid` once it runs.
    pub fn hold_script(self, shell: &str, script: &str) -> Holder {
        self.start_holder(Some((shell, script)))
    }

    fn start_holder(mut self, script: Option<(&str, &str)>) -> Holder {
        let dir = scratch();
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

    /// The fencing token `HOLD_UNTIL_GO` was given.
    pub fn fence(&self) -> u64 {
        read_fence(&self.dir.path().join("fence"))
    }

    /// Lets `HOLD_UNTIL_GO` finish, and so lockrun release the lock.
    pub fn go(&self) {
        std::fs::write(self.dir.path().join("go"), "").expect("write go");
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

    /// The `LOCKRUN_SLOT` that `HOLD_SLOT_UNTIL_GO` was given, None when
    /// it was not set.
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
