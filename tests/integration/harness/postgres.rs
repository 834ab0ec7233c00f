//! `PostgresServer`: a PostgreSQL server one test owns, for the fencing example.
//!
//! Owned the way a `Server` is: a fresh cluster (`initdb`) in a temporary
//! directory, served by `postgres` on a unix socket in that directory only
//! (no TCP), trust auth, fsync off.
//!
//! The server binaries come from the newest `/usr/lib/postgresql/NN/bin`
//! (Debian keeps them off PATH), else from PATH. `initdb` and `postgres`
//! refuse to run as root, so as root they run as `nobody`.
//!
//! `LOCKRUN_TEST_DATABASE_URL` names a database to use instead (any libpq
//! URL with trust or password-in-URL access); then no server is started.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;
use wait_timeout::ChildExt;

use super::{eventually, log_file, PATIENCE};

/// Names the socket file (`.s.PGSQL.PORT`) only: the server opens no TCP port.
const PORT: &str = "5433";

/// The user that runs the server when the tests run as root.
const UNPRIVILEGED: &str = "nobody";

pub struct PostgresServer {
    url: String,
    /// None when `LOCKRUN_TEST_DATABASE_URL` named the database.
    own: Option<OwnServer>,
}

struct OwnServer {
    process: Child,
    // Declared last so that it is removed after the server is stopped.
    dir: TempDir,
}

impl PostgresServer {
    /// The test's own server, or the database `LOCKRUN_TEST_DATABASE_URL`
    /// names. None, after saying why on stderr, only when running as root
    /// with no unprivileged user to run the server as.
    pub fn start() -> Option<Self> {
        if let Ok(url) = std::env::var("LOCKRUN_TEST_DATABASE_URL") {
            return Some(PostgresServer { url, own: None });
        }
        let user = match run_as() {
            Ok(user) => user,
            Err(why) => {
                eprintln!("\n*** SKIPPED: cannot start PostgreSQL for this test: {why} ***\n");
                return None;
            }
        };
        let dir = tempfile::Builder::new()
            .prefix("lockrun-pg-")
            .tempdir()
            .expect("temp dir");
        if let Some(user) = user {
            user.give(dir.path());
        }
        let data = dir.path().join("data");
        let log = dir.path().join("initdb.log");
        let initdb = server_command("initdb", user, dir.path(), &log)
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8"])
            .args(["--no-locale", "--no-sync"])
            .status()
            .expect(
                "initdb must be installed: Debian's postgresql package (scripts/test installs it)",
            );
        assert!(initdb.success(), "initdb failed: {}", read(&log));

        let log = dir.path().join("postgres.log");
        let process = server_command("postgres", user, dir.path(), &log)
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(dir.path())
            .args(["-p", PORT, "-c", "listen_addresses=", "-F"])
            .spawn()
            .expect("postgres must be installed (scripts/test installs it)");
        let url = format!(
            "postgresql:///postgres?host={}&port={PORT}&user=postgres",
            dir.path().display()
        );
        let mut server = PostgresServer {
            url,
            own: Some(OwnServer { process, dir }),
        };
        server.wait_until_ready(&log);
        Some(server)
    }

    fn wait_until_ready(&mut self, log: &Path) {
        let own = self.own.as_mut().expect("own server");
        let socket_dir = own.dir.path().to_path_buf();
        let mut exited = None;
        let ready = eventually(PATIENCE, || {
            exited = own.process.try_wait().expect("try_wait");
            exited.is_some() || accepting(&socket_dir)
        });
        assert!(
            ready && exited.is_none(),
            "postgres did not start ({}): {}",
            exited.map_or("still starting".to_string(), |status| status.to_string()),
            read(log)
        );
    }

    /// A libpq URL for the database, as `DATABASE_URL` takes it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs `sql` with psql and returns its unaligned output.
    pub fn psql(&self, sql: &str) -> String {
        let output = Command::new("psql")
            .args([self.url(), "-X", "-Atq", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .expect("psql must be installed: postgresql-client (scripts/test installs it)");
        assert!(
            output.status.success(),
            "psql failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let Some(own) = &mut self.own else { return };
        if !matches!(own.process.try_wait(), Ok(None)) {
            return;
        }
        // SIGQUIT is postgres's immediate shutdown: it stops its backends
        // and removes its shared memory; nothing here needs to be kept.
        let _ = kill(Pid::from_raw(own.process.id() as i32), Signal::SIGQUIT);
        if !matches!(own.process.wait_timeout(PATIENCE), Ok(Some(_))) {
            let _ = own.process.kill();
            let _ = own.process.wait();
        }
    }
}

/// Whether the server in `socket_dir` accepts connections.
fn accepting(socket_dir: &Path) -> bool {
    Command::new(server_binary("pg_isready"))
        .arg("-q")
        .arg("-h")
        .arg(socket_dir)
        .args(["-p", PORT, "-U", "postgres", "-d", "postgres"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// `program` from the server binaries, run as `user` when there is one, in
/// `dir`, with its stderr in `log`.
fn server_command(program: &str, user: Option<User>, dir: &Path, log: &Path) -> Command {
    let mut command = Command::new(server_binary(program));
    command
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file(log));
    if let Some(user) = user {
        // std drops the supplementary groups too when root sets a uid.
        command.uid(user.uid).gid(user.gid);
    }
    command
}

/// `program` in the newest `/usr/lib/postgresql/NN/bin`, else on PATH.
fn server_binary(program: &str) -> PathBuf {
    let newest = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: Option<Vec<u32>> = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(|part| part.parse().ok())
                .collect();
            let binary = entry.path().join("bin").join(program);
            Some((version?, binary)).filter(|(_, binary)| binary.is_file())
        })
        .max();
    newest.map_or_else(|| PathBuf::from(program), |(_, binary)| binary)
}

/// Who runs the server.
#[derive(Clone, Copy)]
struct User {
    uid: u32,
    gid: u32,
}

impl User {
    /// Makes `dir` this user's, and checks that the user can reach it.
    fn give(self, dir: &Path) {
        std::os::unix::fs::chown(dir, Some(self.uid), Some(self.gid)).expect("chown temp dir");
        for parent in dir.ancestors().skip(1) {
            let mode = fs::metadata(parent).expect("stat").permissions().mode();
            assert!(
                mode & 0o001 != 0,
                "{UNPRIVILEGED} cannot reach {}: set TMPDIR to a directory every user can enter",
                parent.display()
            );
        }
    }
}

/// None when we are not root (the server runs as us); as root, the
/// unprivileged user to run it as, or why there is none.
fn run_as() -> Result<Option<User>, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let passwd = fs::read_to_string("/etc/passwd").map_err(|err| format!("/etc/passwd: {err}"))?;
    passwd
        .lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|fields| fields.first() == Some(&UNPRIVILEGED))
        .and_then(|fields| {
            Some(User {
                uid: fields.get(2)?.parse().ok()?,
                gid: fields.get(3)?.parse().ok()?,
            })
        })
        .map(Some)
        .ok_or_else(|| {
            format!("running as root, and there is no user {UNPRIVILEGED} to run initdb and postgres as")
        })
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}
