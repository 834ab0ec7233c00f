//! `Container`: a "host" with systemd as PID 1, booted with systemd-nspawn from the root scripts/container-root builds, that shares the test's Redis with the other hosts.
//!
//! What a host keeps across a reboot is what a real one would: its
//! `/etc/systemd/system` (units enabled stay enabled) and its journal; the
//! rest of the root is a fresh overlay at every boot (`--volatile=overlay`),
//! so that every test and host shares one root that nothing writes to.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;
use wait_timeout::ChildExt;

use super::{eventually, scratch, Server, LOCKRUN, PATIENCE};

/// The password the containers' Redis requires, so that the units'
/// `LoadCredential=` is what lets lockrun in.
pub const REDIS_PASSWORD: &str = "container-test-password";

/// Where a container finds the Redis socket's directory.
const REDIS_DIR: &str = "/run/redis";

/// The PATH of every command run inside: systemd's own, not the test's.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How long one command inside may take (`systemctl stop` waits for the
/// stop, which the units allow 30 s), and a shutdown.
const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// nspawn's exit status when the container asked for a reboot.
const REBOOTED: i32 = 133;

/// The Redis every container of a test shares, on a unix socket in a
/// directory bound into each, with a password.
pub fn container_redis() -> Server {
    Server::start_with(None, &["--requirepass", REDIS_PASSWORD])
}

/// The root every container boots, which scripts/test names.
fn root() -> PathBuf {
    let Some(root) = std::env::var_os("LOCKRUN_TEST_CONTAINER_ROOT") else {
        panic!(
            "LOCKRUN_TEST_CONTAINER_ROOT is not set: run the tests with scripts/test, which \
             sets it, or set it to the path scripts/container-root prints"
        );
    };
    let root = PathBuf::from(root);
    assert!(
        root.join("usr/lib/systemd/systemd").exists(),
        "LOCKRUN_TEST_CONTAINER_ROOT={} holds no systemd: scripts/container-root builds one",
        root.display()
    );
    root
}

/// What a host is made of before it boots: which example units it has,
/// their drop-ins, and the programs they run.
pub struct HostSetup<'a> {
    name: &'a str,
    redis: &'a Server,
    dir: TempDir,
    binds: Vec<OsString>,
}

impl<'a> HostSetup<'a> {
    /// Host `name` (its hostname, which lockrun's holder records give),
    /// sharing `redis`.
    pub fn new(name: &'a str, redis: &'a Server) -> Self {
        let dir = scratch();
        let root = root();
        // A host's own /etc/systemd/system, kept across reboots: a copy of
        // the root's, with its enabled units.
        let status = Command::new("cp")
            .arg("-a")
            .arg(root.join("etc/systemd/system"))
            .arg(dir.path().join("system"))
            .status()
            .expect("run cp");
        assert!(
            status.success(),
            "cp -a of the root's /etc/systemd/system: {status}"
        );
        for sub in ["out", "journal", "etc-lockrun"] {
            std::fs::create_dir(dir.path().join(sub)).expect("create a host directory");
        }
        let password = dir.path().join("etc-lockrun/redis-password");
        std::fs::write(&password, format!("{REDIS_PASSWORD}\n")).expect("write the password");
        std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600))
            .expect("chmod the password");
        let socket_dir = redis
            .socket()
            .expect("a Redis on a unix socket")
            .parent()
            .expect("its directory");
        let mut setup = HostSetup {
            name,
            redis,
            dir,
            binds: Vec::new(),
        };
        setup.bind(
            &setup.dir.path().join("system"),
            "/etc/systemd/system",
            false,
        );
        setup.bind(&setup.dir.path().join("journal"), "/var/log/journal", false);
        setup.bind(&setup.dir.path().join("out"), "/out", false);
        setup.bind(&setup.dir.path().join("etc-lockrun"), "/etc/lockrun", true);
        setup.bind(socket_dir, REDIS_DIR, false);
        setup.bind(Path::new(&*LOCKRUN), "/usr/local/bin/lockrun", true);
        setup
    }

    fn bind(&mut self, from: &Path, to: &str, read_only: bool) {
        let mut arg = OsString::from(if read_only { "--bind-ro=" } else { "--bind=" });
        arg.push(from);
        arg.push(":");
        arg.push(to);
        self.binds.push(arg);
    }

    /// `examples/systemd/NAME`, bound as shipped, with the drop-in
    /// `NAME.d/test.conf` that says what is this site's: where its Redis
    /// is, and `extra` (a `[Section]` and its lines).
    pub fn unit(mut self, name: &str, extra: &str) -> Self {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/systemd")
            .join(name);
        assert!(shipped.exists(), "{} is no example unit", shipped.display());
        self.bind(&shipped, &format!("/etc/systemd/system/{name}"), true);
        if name.ends_with(".service") {
            let drop_in = self.dir.path().join(format!("system/{name}.d"));
            std::fs::create_dir_all(&drop_in).expect("create the drop-in directory");
            let text = format!(
                "# This site's Redis: the test's, on a socket bound into every host.\n\
                 [Service]\nEnvironment=LOCKRUN_REDIS_URL={}\n{extra}",
                self.redis_url()
            );
            std::fs::write(drop_in.join("test.conf"), text).expect("write the drop-in");
        }
        self
    }

    /// The Redis as the host reaches it.
    pub fn redis_url(&self) -> String {
        let socket = self
            .redis
            .socket()
            .and_then(Path::file_name)
            .expect("a socket");
        format!("unix://{REDIS_DIR}/{}", socket.to_string_lossy())
    }

    /// An executable `script` at `path` inside, bound read-only.
    pub fn program(self, path: &str, script: &str) -> Self {
        self.file(path, script, 0o755)
    }

    /// A file of `text` at `path` inside, with `mode`, bound read-only.
    pub fn file(mut self, path: &str, text: &str, mode: u32) -> Self {
        let file = self
            .dir
            .path()
            .join(path.trim_start_matches('/').replace('/', "_"));
        std::fs::write(&file, text).expect("write the file");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode))
            .expect("chmod the file");
        self.bind(&file, path, true);
        self
    }

    /// Boots it and waits until systemd says the boot is over.
    pub fn boot(self) -> Container {
        static BOOTED: AtomicUsize = AtomicUsize::new(0);
        let machine = format!(
            "lockrun-{}-{}",
            std::process::id(),
            BOOTED.fetch_add(1, Ordering::Relaxed)
        );
        let mut container = Container {
            name: self.name.to_owned(),
            machine,
            redis_url: self.redis_url(),
            dir: self.dir,
            binds: self.binds,
            nspawn: None,
            pid1: 0,
            boots: 0,
        };
        container.start();
        container
    }
}

/// A booted host: systemd as PID 1 under systemd-nspawn. Killed with
/// everything in it when dropped.
pub struct Container {
    /// Its hostname, which lockrun's holder records give.
    pub name: String,
    machine: String,
    redis_url: String,
    dir: TempDir,
    binds: Vec<OsString>,
    nspawn: Option<Child>,
    /// The container's PID 1, as the test's PID namespace numbers it.
    pid1: i32,
    boots: u32,
}

impl Container {
    fn start(&mut self) {
        self.boots += 1;
        let log = self.nspawn_log();
        let mut command = Command::new("systemd-nspawn");
        command
            .args([
                "-q",
                "-b",
                "--register=no",
                "--keep-unit",
                "--private-network",
            ])
            .args(["--volatile=overlay", "--console=pipe"])
            // Every test has a host-a: the machine name, which nspawn's
            // directories in /run are named by, is this one's alone.
            .arg(format!("--machine={}", self.machine))
            .arg(format!("--hostname={}", self.name))
            .arg("-D")
            .arg(root())
            .args(&self.binds)
            // Containers of other tests boot the same root at once; with
            // --volatile=overlay none writes to it, so nspawn's image lock
            // need not keep them apart.
            .env("SYSTEMD_NSPAWN_LOCK", "0")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).expect("create nspawn's log"))
            .stderr(
                std::fs::File::options()
                    .append(true)
                    .open(&log)
                    .expect("open nspawn's log"),
            );
        let nspawn = match command.spawn() {
            Ok(nspawn) => nspawn,
            Err(err) => {
                panic!("systemd-nspawn: {err} (scripts/container-root installs systemd-container)")
            }
        };
        let nspawn_pid = nspawn.id() as i32;
        self.nspawn = Some(nspawn);
        let mut pid1 = None;
        let found = eventually(PATIENCE, || {
            pid1 = container_init(nspawn_pid);
            pid1.is_some() || !self.nspawn_running()
        });
        match pid1 {
            Some(pid) if found => self.pid1 = pid,
            _ => panic!(
                "{}: systemd-nspawn did not start systemd (it needs root): {}",
                self.name,
                self.said_by_nspawn()
            ),
        }
        let mut state = String::new();
        let booted = eventually(PATIENCE, || {
            state = self.run(&["systemctl", "is-system-running"]).stdout;
            matches!(state.trim(), "running" | "degraded") || !self.nspawn_running()
        });
        assert!(
            booted && self.nspawn_running(),
            "{}: the boot did not finish (systemctl is-system-running: {}): {}",
            self.name,
            state.trim(),
            self.said_by_nspawn()
        );
    }

    fn nspawn_log(&self) -> PathBuf {
        self.dir.path().join(format!("nspawn.{}.log", self.boots))
    }

    fn said_by_nspawn(&self) -> String {
        std::fs::read_to_string(self.nspawn_log()).unwrap_or_default()
    }

    fn nspawn_running(&mut self) -> bool {
        self.nspawn
            .as_mut()
            .is_some_and(|n| matches!(n.try_wait(), Ok(None)))
    }

    /// `command` inside, with systemd's PATH and no other environment; its
    /// output whatever its status.
    pub fn run(&self, command: &[&str]) -> Inside {
        let pid = self.pid1.to_string();
        let output: Output = Command::new("timeout")
            .args(["-k", "5"])
            .arg(COMMAND_LIMIT.as_secs().to_string())
            .args(["nsenter", "-t", &pid, "-a", "-r", "-w", "env", "-i"])
            .arg(format!("PATH={PATH}"))
            .args(command)
            .env_clear()
            .env("PATH", PATH)
            .stdin(Stdio::null())
            .output()
            .expect("run nsenter");
        Inside {
            command: format!("{}: {}", self.name, command.join(" ")),
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `command` inside, which must succeed; its stdout.
    #[track_caller]
    pub fn must(&self, command: &[&str]) -> String {
        self.run(command).ok()
    }

    /// lockrun inside, as an operator runs it there: with the units' Redis
    /// and password file.
    pub fn lockrun(&self, args: &[&str]) -> Inside {
        let url = format!("LOCKRUN_REDIS_URL={}", self.redis_url);
        let mut command = vec![
            "env",
            &url,
            "LOCKRUN_REDIS_PASSWORD_FILE=/etc/lockrun/redis-password",
            "lockrun",
        ];
        command.extend(args);
        self.run(&command)
    }

    /// `systemctl show` of `unit`'s properties.
    pub fn show(&self, unit: &str) -> Unit {
        let text = self.must(&[
            "systemctl",
            "show",
            "-p",
            "ActiveState,SubState,Result,StatusText,ExecMainCode,ExecMainStatus,NRestarts",
            unit,
        ]);
        Unit(
            text.lines()
                .filter_map(|line| line.split_once('='))
                .map(|(key, value)| (key.to_owned(), value.to_owned()))
                .collect(),
        )
    }

    /// Waits until `unit` is in `state` (ActiveState, or ActiveState/SubState).
    #[track_caller]
    pub fn until_state(&self, unit: &str, state: &str) -> Unit {
        let mut last = None;
        let reached = eventually(PATIENCE, || {
            let now = self.show(unit);
            let hit = now.state() == state || now.get("ActiveState") == state;
            last = Some(now);
            hit
        });
        let last = last.expect("shown once");
        assert!(
            reached,
            "{}: {unit} never became {state}: {last:?}\n{}",
            self.name,
            self.journal(unit)
        );
        last
    }

    /// The journal of `unit` in this boot (`previous`: the boot before),
    /// systemd's words about it and the unit's stderr, with timestamps as
    /// seconds since the epoch.
    pub fn journal_of(&self, unit: &str, previous: bool) -> String {
        let boot = if previous { "-1" } else { "0" };
        self.run(&[
            "journalctl",
            "--no-pager",
            "-o",
            "short-unix",
            "-b",
            boot,
            "-u",
            unit,
        ])
        .stdout
    }

    pub fn journal(&self, unit: &str) -> String {
        self.journal_of(unit, false)
    }

    /// When the journal line of `unit` containing `needle` was written (s
    /// since the epoch), waiting for it.
    #[track_caller]
    pub fn logged_at(&self, unit: &str, needle: &str) -> f64 {
        let mut journal = String::new();
        let found = eventually(PATIENCE, || {
            journal = self.journal(unit);
            journal.contains(needle)
        });
        assert!(
            found,
            "{}: {unit}'s journal never said {needle:?}:\n{journal}",
            self.name
        );
        let line = journal
            .lines()
            .find(|line| line.contains(needle))
            .expect("found");
        epoch_seconds(line)
    }

    /// The file `name` the host wrote in its /out, once it is a whole line.
    pub fn out(&self, name: &str) -> PathBuf {
        self.dir.path().join("out").join(name)
    }

    /// Creates `/out/NAME` inside: how a test tells a program what to do.
    pub fn tell(&self, name: &str) {
        std::fs::write(self.out(name), "").expect("write to the host's /out");
    }

    /// Asks systemd inside to reboot, waits until nspawn exits as it does
    /// then, and boots again.
    pub fn reboot(&mut self) {
        // Its status is no news: the system may go down before it returns.
        let asked = self.run(&["systemctl", "reboot"]);
        let nspawn = self.nspawn.as_mut().expect("booted");
        // The shutdown waits for each unit's stop, 30 s at most in the
        // examples.
        let status = nspawn.wait_timeout(COMMAND_LIMIT).expect("wait for nspawn");
        let Some(status) = status else {
            panic!(
                "{}: still running {COMMAND_LIMIT:?} after systemctl reboot: {}{}",
                self.name, asked.stdout, asked.stderr
            )
        };
        self.nspawn = None;
        assert_eq!(
            status.code(),
            Some(REBOOTED),
            "{}: nspawn ended with {status}, not the reboot's {REBOOTED}: {}",
            self.name,
            self.said_by_nspawn()
        );
        self.start();
    }

    /// Kills everything inside at once: PID 1 first, as its PID namespace
    /// dies with it, and a SIGKILLed nspawn leaves PID 1 running.
    fn kill(&mut self) {
        let Some(mut nspawn) = self.nspawn.take() else {
            return;
        };
        let _ = kill(Pid::from_raw(self.pid1), Signal::SIGKILL);
        if !matches!(nspawn.wait_timeout(Duration::from_secs(10)), Ok(Some(_))) {
            let _ = nspawn.kill();
            let _ = nspawn.wait();
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The container's PID 1 among `nspawn`'s descendants: the process whose
/// innermost PID namespace numbers it 1.
fn container_init(nspawn: i32) -> Option<i32> {
    let mut parents = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some((_, parent, _, _)) = super::stat(pid) {
            parents.insert(pid, parent);
        }
    }
    let descends = |mut pid: i32| {
        while let Some(&parent) = parents.get(&pid) {
            if parent == nspawn {
                return true;
            }
            pid = parent;
        }
        false
    };
    parents
        .keys()
        .copied()
        .filter(|&pid| descends(pid))
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
                status.lines().any(|line| {
                    line.starts_with("NSpid:")
                        && line.split_whitespace().count() > 2
                        && line.ends_with("\t1")
                })
            })
        })
}

/// The seconds since the epoch that a `short-unix` journal line starts with.
pub fn epoch_seconds(line: &str) -> f64 {
    line.split_whitespace()
        .next()
        .and_then(|field| field.parse().ok())
        .unwrap_or_else(|| panic!("{line:?} starts with no time"))
}

/// A command run inside a container, to its end.
pub struct Inside {
    command: String,
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Inside {
    /// Its stdout, failing the test unless it succeeded.
    #[track_caller]
    pub fn ok(self) -> String {
        assert!(
            self.success,
            "{} failed: {}{}",
            self.command, self.stdout, self.stderr
        );
        self.stdout
    }
}

/// A unit's properties, as `systemctl show` gives them.
#[derive(Debug)]
pub struct Unit(BTreeMap<String, String>);

impl Unit {
    pub fn get(&self, property: &str) -> &str {
        self.0.get(property).map_or("", String::as_str)
    }

    /// `ActiveState/SubState`, e.g. `active/running`.
    pub fn state(&self) -> String {
        format!("{}/{}", self.get("ActiveState"), self.get("SubState"))
    }
}
