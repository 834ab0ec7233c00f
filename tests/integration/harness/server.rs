//! `Server`: one redis-server process a test owns, plain, a cluster node or a sentinel.

use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use super::{eventually, free_port, Certificates, Running, PATIENCE};

/// A redis-server in a temporary directory of its own, on a unix socket
/// there, a free loopback port, or both. Killed when dropped.
pub struct Server {
    dir: TempDir,
    port: Option<u16>,
    socket: Option<PathBuf>,
    /// redis-server arguments after the config file, kept for restarts.
    args: Vec<String>,
    /// What the harness's own connections authenticate with.
    password: Option<String>,
    sentinel: bool,
    /// For a TLS-only server: what the harness's own connections trust and
    /// show.
    tls: Option<redis::TlsCertificates>,
    process: Option<Running>,
}

/// The redis-server every `Server` runs: `LOCKRUN_TEST_REDIS_SERVER` when
/// set, so that CI can run the tests against the oldest Redis lockrun
/// supports (scripts/redis62), else the one on PATH.
pub fn redis_server() -> String {
    std::env::var("LOCKRUN_TEST_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// The redis-cli that builds clusters: `LOCKRUN_TEST_REDIS_CLI`, else the
/// one on PATH, so that it can match the server's version.
pub fn redis_cli() -> String {
    std::env::var("LOCKRUN_TEST_REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

/// Every data server: no persistence unless a test SAVEs, and a replica's
/// full sync starts at once instead of waiting for more replicas.
const DATA: &str = "save \"\"\nappendonly no\nrepl-diskless-sync yes\nrepl-diskless-sync-delay 0\n";

impl Server {
    /// A server reachable only through its unix socket.
    pub fn start() -> Self {
        Self::start_with(None, &[])
    }

    /// A server that also listens on a free loopback TCP port.
    pub fn start_tcp() -> Self {
        Self::start_with(Some(free_port()), &[])
    }

    /// A server on its socket (and `port`, if given) with extra redis-server
    /// arguments, e.g. `--requirepass x`.
    pub fn start_with(port: Option<u16>, args: &[&str]) -> Self {
        Self::new(port, true, false, DATA, args)
    }

    /// A data server of a topology on `port` (TCP only: the servers name
    /// each other by address), with `config` lines added.
    pub fn node(port: u16, config: &str) -> Self {
        Self::new(Some(port), false, false, &format!("{DATA}{config}"), &[])
    }

    /// A TLS-only data server of a topology on `port`, with `config` lines
    /// added; the harness reaches it over TLS too.
    pub fn tls(port: u16, config: &str, certs: &Certificates) -> Self {
        let mut server = Self::configured_tls(port, false, config, certs);
        server.launch();
        server
    }

    /// Sentinels on the ports of `configs`, each with its config lines
    /// (`sentinel monitor ...`; TLS-only with `certs`), all spawned before
    /// any is waited for: a sentinel that tries to reach another one not
    /// listening yet tries again only a second later.
    pub fn sentinels_together(
        configs: &[(u16, String)],
        certs: Option<&Certificates>,
    ) -> Vec<Self> {
        let mut sentinels: Vec<Server> = configs
            .iter()
            .map(|(port, config)| {
                let mut sentinel = match certs {
                    Some(certs) => Self::configured_tls(*port, true, config, certs),
                    None => Self::configured(Some(*port), false, true, config, &[]),
                };
                sentinel.spawn();
                sentinel
            })
            .collect();
        for sentinel in &mut sentinels {
            sentinel.until_ready();
        }
        sentinels
    }

    fn configured_tls(port: u16, sentinel: bool, config: &str, certs: &Certificates) -> Self {
        let tls = certs.server_config(port);
        let config = if sentinel {
            format!("{tls}{config}")
        } else {
            format!("{DATA}{tls}{config}")
        };
        // The redis crate's TLS, the harness's, refuses a CA certificate
        // shown as a server's own (lockrun's trusts it): the harness then
        // takes the server's unix socket.
        let over_socket = certs.is_self_signed();
        let mut server = Self::configured(Some(port), over_socket, sentinel, &config, &[]);
        if !over_socket {
            server.tls = Some(certs.for_harness());
        }
        server
    }

    fn new(port: Option<u16>, socket: bool, sentinel: bool, config: &str, args: &[&str]) -> Self {
        let mut server = Self::configured(port, socket, sentinel, config, args);
        server.launch();
        server
    }

    /// Its directory and configuration file, and no process yet.
    fn configured(
        port: Option<u16>,
        socket: bool,
        sentinel: bool,
        config: &str,
        args: &[&str],
    ) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lockrun-redis-")
            .tempdir()
            .expect("temp dir");
        let socket = socket.then(|| dir.path().join("redis.sock"));
        let mut file = format!(
            "port {}\nbind 127.0.0.1\ndir {}\nlogfile {}\ndaemonize no\n",
            port.unwrap_or(0),
            dir.path().display(),
            dir.path().join("redis.log").display()
        );
        if let Some(socket) = &socket {
            file += &format!("unixsocket {}\nunixsocketperm 700\n", socket.display());
        }
        file += config;
        // A sentinel rewrites its file, so the file is written once, here.
        std::fs::write(dir.path().join("redis.conf"), file).expect("write config");
        let password = args
            .windows(2)
            .find(|pair| pair[0] == "--requirepass")
            .map(|pair| pair[1])
            .or_else(|| config.lines().find_map(|l| l.strip_prefix("requirepass ")))
            .map(String::from);
        Server {
            dir,
            port,
            socket,
            args: args.iter().map(|arg| arg.to_string()).collect(),
            password,
            sentinel,
            tls: None,
            process: None,
        }
    }

    fn launch(&mut self) {
        self.spawn();
        self.until_ready();
    }

    fn spawn(&mut self) {
        let mut command = Command::new(redis_server());
        command.arg(self.dir.path().join("redis.conf"));
        if self.sentinel {
            command.arg("--sentinel");
        }
        let command = command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.process = Some(Running::spawn(command));
    }

    /// Waits until it accepts connections.
    fn until_ready(&mut self) {
        let ready = eventually(PATIENCE, || match (&self.socket, self.port) {
            (Some(socket), _) => UnixStream::connect(socket).is_ok(),
            (None, Some(port)) => TcpStream::connect(("127.0.0.1", port)).is_ok(),
            (None, None) => unreachable!("a server listens somewhere"),
        });
        // Something else answering on the port while ours gave up on it.
        let alive = self.process.as_mut().is_some_and(Running::running);
        assert!(ready && alive, "redis-server did not start: {}", self.log());
    }

    /// The URL lockrun is given: the unix socket if there is one.
    pub fn url(&self) -> String {
        match &self.socket {
            Some(socket) => format!("unix://{}", socket.display()),
            None => self.tcp_url(),
        }
    }

    /// Its unix socket, if it has one.
    pub fn socket(&self) -> Option<&std::path::Path> {
        self.socket.as_deref()
    }

    pub fn tcp_url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// `127.0.0.1:PORT`, as topologies name their servers.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    pub fn port(&self) -> u16 {
        self.port.expect("a server with a TCP port")
    }

    pub fn pid(&self) -> Pid {
        self.process.as_ref().expect("running").pid()
    }

    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// A direct connection, authenticated. Its limits make a paused or dead
    /// server fail a poll instead of hanging it.
    pub fn client(&self) -> redis::Connection {
        self.try_client()
            .expect("a connection to the test's own redis")
    }

    /// `connect_once`, again after a signal to the test process interrupted
    /// the connect (EINTR), which says nothing about the server.
    fn try_client(&self) -> redis::RedisResult<redis::Connection> {
        let mut interrupted = 0;
        loop {
            match self.connect_once() {
                Err(err) if is_interrupted(&err) && interrupted < 5 => interrupted += 1,
                connected => return connected,
            }
        }
    }

    fn connect_once(&self) -> redis::RedisResult<redis::Connection> {
        let pass = self.password.as_deref();
        let url = match (&self.socket, pass) {
            (Some(socket), Some(pass)) => format!("redis+unix://{}?pass={pass}", socket.display()),
            (None, Some(pass)) => format!("redis://:{pass}@{}", self.addr()),
            _ => self.url(),
        };
        let client = match &self.tls {
            Some(certs) => redis::Client::build_with_tls(
                url.replacen("redis://", "rediss://", 1),
                certs.clone(),
            )?,
            None => redis::Client::open(url)?,
        };
        let conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        conn.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(conn)
    }

    /// `cmd`'s reply, or the error, for polls that tolerate a server that
    /// is down or not ready yet.
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        cmd.query(&mut self.try_client()?)
    }

    /// A field of `INFO section`, if the server answers and has it.
    pub fn info(&self, section: &str, field: &str) -> Option<String> {
        let text: String = self.query(redis::cmd("INFO").arg(section)).ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{field}:")))
            .map(|value| value.trim().to_string())
    }

    pub fn answers(&self) -> bool {
        self.query::<String>(&redis::cmd("PING")).is_ok()
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
        if let Some(socket) = &self.socket {
            let _ = std::fs::remove_file(socket);
        }
    }

    /// Starts it again on the same socket and port with no keys: Redis
    /// restarted without persistence.
    pub fn restart_empty(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(self.dir.path().join("dump.rdb"));
        self.launch();
    }

    /// Starts it again from the snapshot that `SAVE` left. Returns once it
    /// accepts connections, which it does while still loading.
    pub fn restart_from_snapshot(&mut self) {
        assert!(
            self.dir.path().join("dump.rdb").exists(),
            "no snapshot to restart from: SAVE first"
        );
        self.kill();
        self.launch();
    }

    pub fn pause(&self) {
        kill(self.pid(), Signal::SIGSTOP).expect("SIGSTOP redis");
    }

    pub fn resume(&self) {
        kill(self.pid(), Signal::SIGCONT).expect("SIGCONT redis");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether `err` is a system call that a signal interrupted.
fn is_interrupted(err: &redis::RedisError) -> bool {
    use std::error::Error;
    use std::sync::Arc;
    // The crate keeps the I/O error behind an `Arc`.
    err.source()
        .and_then(|source| source.downcast_ref::<Arc<dyn Error + Send + Sync>>())
        .and_then(|shared| shared.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::Interrupted)
}

/// The I/O error inside the crate's error is found.
#[test]
fn an_interrupted_connect_is_told_apart() {
    let err = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::Interrupted));
    assert!(is_interrupted(&err));
}
