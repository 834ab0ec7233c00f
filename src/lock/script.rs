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

use crate::redis_conn::{script_refusal, Request, ScriptRefusal};

/// A script and its SHA-1, in lower-case hex as Redis names it.
pub(crate) struct Lua {
    code: &'static str,
    sha: &'static str,
}

// ACQUIRE, RENEW, SPLIT, ACKED, RELEASE, FORCE_RELEASE, STATUS, VOTE,
// RAISE_FENCE: each
// assembled from its parts and hashed by build.rs.
include!(concat!(env!("OUT_DIR"), "/scripts.rs"));

impl Lua {
    /// A call of this script, to which keys and arguments are added.
    pub(crate) fn call(&'static self) -> Call {
        Call {
            lua: self,
            keys: Vec::new(),
            args: Vec::new(),
            reply_last: false,
        }
    }
}

/// One call of a script: its KEYS and ARGV.
pub(crate) struct Call {
    lua: &'static Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
    /// Whether the script's reply should reach this run after what the
    /// script publishes reaches its listeners (`reply_last`).
    reply_last: bool,
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

    /// Sends the script behind a `TIME` whose answer is ignored, so that
    /// this connection has output waiting before the script runs. Redis
    /// (6.2 to 7.x) writes the connections with output waiting newest
    /// first, so the grant a release publishes reaches the waiter before
    /// the release's reply reaches this run: on a busy CPU, the waiter then
    /// starts its command while this run is still exiting, instead of after
    /// (0.1 ms of a hand-off, measured; docs/design.md).
    pub(crate) fn reply_last(&mut self) -> &mut Self {
        self.reply_last = true;
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
        let evalsha = self.command("EVALSHA", self.lua.sha.as_bytes());
        let sent = if self.reply_last {
            let mut behind_time = redis::pipe();
            behind_time.cmd("TIME").ignore().add_command(evalsha);
            behind_time
                .query_async::<(Value,)>(conn)
                .await
                .map(|(reply,)| reply)
        } else {
            evalsha.query_async(conn).await
        };
        match sent {
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
    /// script's line, so the command is read from that line; `None` for
    /// any other error.
    fn refusal(&self, err: &redis::RedisError) -> Option<redis::RedisError> {
        let detail = match script_refusal(err)? {
            ScriptRefusal::Channel => "No permissions to access a channel".to_owned(),
            ScriptRefusal::Key => "No permissions to access a key".to_owned(),
            ScriptRefusal::Line(line) => {
                let called = commands_on(self.code.lines().nth(line.checked_sub(1)?)?);
                let quoted: Vec<String> = called.iter().map(|name| format!("'{name}'")).collect();
                format!(
                    "this user has no permissions to run the {} command",
                    quoted.join(" or ")
                )
            }
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
    const ALL: [(&str, &Lua); 9] = [
        ("acquire", &ACQUIRE),
        ("renew", &RENEW),
        ("split", &SPLIT),
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
        assert_eq!(SPLIT.code, include_str!("split.lua"));
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
            // The integration harness's variable: CI runs this against the
            // oldest Redis lockrun supports too.
            let binary = std::env::var("LOCKRUN_TEST_REDIS_SERVER")
                .unwrap_or_else(|_| "redis-server".into());
            let process = Command::new(&binary)
                .args(["--port", "0", "--unixsocket", "redis.sock"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|err| panic!("{binary}: {err} (scripts/test installs it)"));
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

    /// What `split.lua` says of `op` on `key`: its `kind`, and its
    /// `fence` when it hands one out.
    fn split(conn: &mut redis::Connection, key: &str, op: &[&str]) -> (String, Option<u64>) {
        let reply: Vec<redis::Value> = redis::cmd("EVAL")
            .arg(SPLIT.code)
            .arg(1)
            .arg(key)
            .arg(op[0])
            .arg(0)
            .arg(&op[1..])
            .query(conn)
            .unwrap_or_else(|err| panic!("{op:?}: {err}"));
        let field = |name: &str| {
            let at = reply
                .iter()
                .position(|v| redis::from_redis_value_ref::<String>(v).is_ok_and(|v| v == name))?;
            redis::from_redis_value_ref::<String>(&reply[at + 1]).ok()
        };
        let kind = field("kind").expect("a kind");
        (kind, field("fence").and_then(|f| f.parse().ok()))
    }

    #[test]
    fn split_changes_only_what_holds_the_callers_token() {
        let server = Server::start();
        let mut conn = server.connect();
        let kind = |conn: &mut redis::Connection, key: &str, op: &[&str]| split(conn, key, op).0;
        assert_eq!(kind(&mut conn, "L", &["lease_take", "t1", "5000"]), "taken");
        assert_eq!(kind(&mut conn, "L", &["lease_take", "t2", "5000"]), "busy");
        assert_eq!(kind(&mut conn, "L", &["lease_take", "t1", "5000"]), "mine");
        assert_eq!(kind(&mut conn, "L", &["lease_renew", "t2", "5000"]), "gone");
        assert_eq!(kind(&mut conn, "L", &["lease_release", "t2", "0"]), "gone");
        assert_eq!(
            kind(&mut conn, "L", &["lease_release", "t1", "0"]),
            "deleted"
        );
        assert_eq!(kind(&mut conn, "L", &["lease_get"]), "found");

        let _: () = redis::cmd("SET")
            .arg("F")
            .arg(5)
            .query(&mut conn)
            .expect("SET");
        let (_, fence) = split(&mut conn, "F", &["fence_next"]);
        let fence = fence.expect("a new token");
        assert!(fence > 5, "{fence}");
        assert_eq!(split(&mut conn, "F", &["fence_get"]).1, Some(fence));

        let set = ["holder_set", "host", "1", "cmd", "42", "5000"];
        assert_eq!(kind(&mut conn, "H", &set), "set");
        assert_eq!(kind(&mut conn, "H", &["holder_drop", "41"]), "gone");
        assert_eq!(
            kind(&mut conn, "H", &["holder_renew", "42", "5000"]),
            "mine"
        );
        assert_eq!(kind(&mut conn, "H", &["holder_drop", "42"]), "deleted");

        let _: () = redis::cmd("RPUSH")
            .arg("X")
            .arg("a")
            .query(&mut conn)
            .expect("RPUSH");
        assert_eq!(kind(&mut conn, "X", &["lease_remove"]), "wrongtype");
        let left: i64 = redis::cmd("LLEN").arg("X").query(&mut conn).expect("LLEN");
        assert_eq!(left, 1);
    }
}
