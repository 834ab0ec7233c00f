//! The Lua scripts as lockrun sends them: EVALSHA with a SHA-1 that the
//! build script computed, and EVAL once for a server that does not know the
//! script yet (EVAL caches it under the same hash).
//!
//! `build.rs` assembles each script from its parts in this directory and
//! hashes it. `redis::Script` would hash its text whenever one is made, that
//! is at every start of lockrun; with the queue's rules in front of each
//! script, that was a third of the instructions of a whole `lockrun -- true`.

use redis::aio::ConnectionLike;
use redis::{RedisResult, ToRedisArgs, Value};

use crate::redis_conn::Request;

/// A script and its SHA-1, in lower-case hex as Redis names it.
pub(crate) struct Lua {
    code: &'static str,
    sha: &'static str,
}

// ACQUIRE, RENEW, ACKED, RELEASE, FORCE_RELEASE, STATUS, VOTE, RAISE_FENCE: each
// assembled from its parts and hashed by build.rs.
include!(concat!(env!("OUT_DIR"), "/scripts.rs"));

impl Lua {
    /// A call of this script, to which keys and arguments are added.
    pub(crate) fn call(&'static self) -> Call {
        Call {
            lua: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// One call of a script: its KEYS and ARGV.
pub(crate) struct Call {
    lua: &'static Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// `EVALSHA sha` or `EVAL code`, then the keys and arguments.
    fn command(&self, name: &str, script: &[u8]) -> redis::Cmd {
        let mut command = redis::cmd(name);
        command
            .arg(script)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        command
    }
}

impl Request for Call {
    async fn send(&self, conn: &mut impl ConnectionLike) -> RedisResult<Value> {
        self.send_script(conn)
            .await
            .map_err(|err| self.lua.refusal(&err).unwrap_or(err))
    }
}

impl Call {
    async fn send_script(&self, conn: &mut impl ConnectionLike) -> RedisResult<Value> {
        match self
            .command("EVALSHA", self.lua.sha.as_bytes())
            .query_async(conn)
            .await
        {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                self.command("EVAL", self.lua.code.as_bytes())
                    .query_async(conn)
                    .await
            }
            done => done,
        }
    }
}

impl Lua {
    /// A command of this script that the server refused lockrun's user, as
    /// the NOPERM error a command sent directly gets. Redis says only the
    /// script's line (`user_script:N`), so the command is read from that
    /// line; `None` for any other error.
    fn refusal(&self, err: &redis::RedisError) -> Option<redis::RedisError> {
        let text = err.to_string();
        let why = text.split("The user executing the script can't ").nth(1)?;
        let detail = if why.starts_with("publish") || why.contains("channel") {
            "No permissions to access a channel".to_owned()
        } else if why.starts_with("access") {
            "No permissions to access a key".to_owned()
        } else {
            let line = text
                .split("user_script:")
                .nth(1)?
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<usize>()
                .ok()?;
            let called = commands_on(self.code.lines().nth(line.checked_sub(1)?)?);
            let quoted: Vec<String> = called.iter().map(|name| format!("'{name}'")).collect();
            format!(
                "this user has no permissions to run the {} command",
                quoted.join(" or ")
            )
        };
        Some(redis::make_extension_error("NOPERM".into(), Some(detail)))
    }
}

/// Commands whose ACL rules name a subcommand (`+pubsub|numsub`).
const CONTAINERS: [&str; 5] = ["pubsub", "cluster", "object", "memory", "client"];

/// The commands `line` of a script calls, as ACL rules name them:
/// lower-case, with the subcommand for a container command (`pubsub|numsub`).
fn commands_on(line: &str) -> Vec<String> {
    line.split("redis.call(")
        .skip(1)
        .filter_map(|call| {
            let mut args = call.split('\'').skip(1).step_by(2);
            let name = args.next()?.to_lowercase();
            Some(match args.next() {
                Some(sub) if CONTAINERS.contains(&name.as_str()) => {
                    format!("{name}|{}", sub.to_lowercase())
                }
                _ => name,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use super::*;

    /// Every script, by the name lockrun gives it.
    const ALL: [(&str, &Lua); 8] = [
        ("acquire", &ACQUIRE),
        ("renew", &RENEW),
        ("acked", &ACKED),
        ("release", &RELEASE),
        ("force_release", &FORCE_RELEASE),
        ("status", &STATUS),
        ("vote", &VOTE),
        ("raise_fence", &RAISE_FENCE),
    ];

    #[test]
    fn scripts_are_their_parts_in_order() {
        let queue = concat!(include_str!("guard.lua"), include_str!("queue.lua"));
        assert_eq!(ACQUIRE.code, queue.to_owned() + include_str!("acquire.lua"));
        assert_eq!(RENEW.code, include_str!("renew.lua"));
        assert_eq!(ACKED.code, include_str!("acked.lua"));
        assert_eq!(RELEASE.code, queue.to_owned() + include_str!("release.lua"));
        assert_eq!(
            FORCE_RELEASE.code,
            queue.to_owned() + include_str!("force_release.lua")
        );
        assert_eq!(STATUS.code, queue.to_owned() + include_str!("status.lua"));
        assert_eq!(
            VOTE.code,
            queue.to_owned() + include_str!("fresh.lua") + include_str!("acquire.lua")
        );
        assert_eq!(
            RAISE_FENCE.code,
            queue.to_owned() + include_str!("raise_fence.lua")
        );
    }

    #[test]
    fn a_refused_command_in_a_script_is_named_by_its_line() {
        let line = |n: usize| {
            format!("ERR The user executing the script can't run this command or subcommand script: 0123, on @user_script:{n}.")
        };
        let refused = |text: &str| {
            let err = redis::make_extension_error("ERR".into(), Some(text.into()));
            ACQUIRE.refusal(&err).map(|err| err.to_string())
        };
        let code: Vec<&str> = ACQUIRE.code.lines().collect();
        let at = |needle: &str| {
            1 + code
                .iter()
                .position(|l| l.contains(needle))
                .expect("in the script")
        };
        let zadd = refused(&line(at("redis.call('ZADD', QUEUE"))).expect("a refusal");
        assert!(
            zadd.contains("NOPERM") && zadd.contains("'zadd' command"),
            "{zadd}"
        );
        let numsub = refused(&line(at("'PUBSUB', 'NUMSUB'"))).expect("a refusal");
        assert!(numsub.contains("'pubsub|numsub'"), "{numsub}");
        // Redis 6.2 puts the line first.
        let old = format!("ERR Error running script (call to f_0123): @user_script:{}: @user_script: 1: The user executing the script can't run this command or subcommand", at("'ZCARD'"));
        assert!(refused(&old).expect("a refusal").contains("'zcard'"));
        let channel = refused("ERR The user executing the script can't publish to the channel mentioned in the command script: 01, on @user_script:9.");
        assert!(channel.expect("a refusal").contains("access a channel"));
        assert!(refused("ERR something else").is_none());
        assert_eq!(
            commands_on("if redis.call('TYPE', k).ok ~= 'string' or redis.call('GET', k) then"),
            ["type", "get"]
        );
    }

    /// Redis names a script's refused command only by its line, so each
    /// line calls one command at most.
    #[test]
    fn each_line_of_a_script_calls_one_command_at_most() {
        for (name, lua) in ALL {
            for (n, line) in lua.code.lines().enumerate() {
                let calls = commands_on(line).len();
                assert!(calls <= 1, "{name} line {}: {line}", n + 1);
            }
        }
    }

    /// A redis-server of the test's own, on a unix socket in a temporary
    /// directory; killed when dropped.
    struct Server {
        process: Child,
        dir: tempfile::TempDir,
    }

    impl Server {
        fn start() -> Self {
            let dir = tempfile::tempdir().expect("temp dir");
            let process = Command::new("redis-server")
                .args(["--port", "0", "--unixsocket", "redis.sock"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed (.ci/run installs it)");
            Server { process, dir }
        }

        fn connect(&self) -> redis::Connection {
            let url = format!("unix://{}", self.dir.path().join("redis.sock").display());
            let client = redis::Client::open(url).expect("client");
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                match client.get_connection() {
                    Ok(conn) => return conn,
                    Err(err) if Instant::now() > deadline => panic!("redis-server: {err}"),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
    }

    #[test]
    fn hashes_are_the_ones_redis_computes() {
        let server = Server::start();
        let mut conn = server.connect();
        for (name, lua) in ALL {
            let loaded: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(lua.code)
                .query(&mut conn)
                .unwrap_or_else(|err| panic!("SCRIPT LOAD {name}: {err}"));
            assert_eq!(lua.sha, loaded, "{name}");
        }
    }
}
