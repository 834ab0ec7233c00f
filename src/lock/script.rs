//! The Lua scripts as lockrun sends them: EVALSHA with a SHA-1 that the
//! build script computed, and EVAL once for a server that does not know the
//! script yet (EVAL caches it under the same hash); after one NOSCRIPT on a
//! connection, EVAL at once for each script not yet sent whole on it
//! (`Scripts`).
//!
//! `build.rs` assembles each script from its parts in this directory, with
//! the names of its keys and arguments from `protocol.rs` in front, and
//! hashes it: `redis::Script` would hash its text whenever one is made, that
//! is at every start of lockrun, and the queue's rules make the scripts
//! long. A call is made from a script's `Args`, so it takes the keys and
//! sends the arguments that script names, in its order.

use redis::aio::ConnectionLike;
use redis::{RedisResult, Value};

use super::keys::Keys;
use super::protocol::{self, Args, Part, Takes};
use crate::redis_conn::{script_refusal, Request, ScriptRefusal, Scripts};

/// A script and its SHA-1, in lower-case hex as Redis names it.
pub(crate) struct Lua {
    /// Its file in this directory, without `.lua`.
    #[cfg_attr(not(test), allow(dead_code))]
    name: &'static str,
    code: &'static str,
    sha: &'static str,
}

/// The script that a call with these arguments runs.
pub(crate) trait Script: Args {
    const LUA: &'static Lua;
}

// One `Lua` static per script in this directory, each linked to its `Args`.
include!(concat!(env!("OUT_DIR"), "/scripts.rs"));

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
    /// A call of the script `args` are for, on the keys of `lock` it takes.
    pub(crate) fn new<A: Script>(lock: &Keys, args: &A) -> Self {
        const {
            assert!(
                !matches!(A::TAKES, Takes::One),
                "a script of one key: on_key"
            );
        };
        let parts = match A::TAKES {
            Takes::Lock => protocol::EVERY_PART,
            Takes::Parts(parts) => parts,
            Takes::One => &[],
        };
        let mut call = Call::of(args);
        call.keys = parts
            .iter()
            .map(|&part| lock[part].as_bytes().to_vec())
            .collect();
        call
    }

    /// A call of a script that takes one key of the lock, chosen for each
    /// call (`Takes::One`): `part`'s.
    pub(crate) fn on_key<A: Script>(lock: &Keys, part: Part, args: &A) -> Self {
        const {
            assert!(
                matches!(A::TAKES, Takes::One),
                "a script of several keys: new"
            );
        };
        let mut call = Call::of(args);
        call.keys.push(lock[part].as_bytes().to_vec());
        call
    }

    fn of<A: Script>(declared: &A) -> Self {
        let mut args = Vec::with_capacity(A::ARGV.len());
        declared.encode(&mut args);
        Call {
            lua: A::LUA,
            keys: Vec::new(),
            args,
            reply_last: false,
        }
    }

    /// Sends the script behind a `TIME` whose answer is ignored, so that
    /// this connection has output waiting before the script runs. Redis
    /// (6.2 to 7.x) writes the connections with output waiting newest
    /// first, so the grant a release publishes reaches the waiter before
    /// the release's reply reaches this run: on a busy CPU, the waiter then
    /// starts its command while this run is still exiting, instead of after
    /// (docs/design.md).
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
    async fn send(
        &self,
        conn: &mut impl ConnectionLike,
        scripts: &mut Scripts,
    ) -> RedisResult<Value> {
        self.send_script(conn, scripts)
            .await
            .map_err(|err| self.lua.refusal(&err).unwrap_or(err))
    }
}

impl Call {
    async fn send_script(
        &self,
        conn: &mut impl ConnectionLike,
        scripts: &mut Scripts,
    ) -> RedisResult<Value> {
        if scripts.lacks(self.lua.sha) {
            scripts.sent_whole(self.lua.sha);
            return self.send_as("EVAL", self.lua.code.as_bytes(), conn).await;
        }
        match self.send_as("EVALSHA", self.lua.sha.as_bytes(), conn).await {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                scripts.sent_whole(self.lua.sha);
                self.send_as("EVAL", self.lua.code.as_bytes(), conn).await
            }
            done => done,
        }
    }

    /// `command` (EVALSHA or EVAL) of `script`, behind a `TIME` when the
    /// reply should come last (`reply_last`).
    async fn send_as(
        &self,
        command: &str,
        script: &[u8],
        conn: &mut impl ConnectionLike,
    ) -> RedisResult<Value> {
        let call = self.command(command, script);
        if !self.reply_last {
            return call.query_async(conn).await;
        }
        let mut behind_time = redis::pipe();
        behind_time.cmd("TIME").ignore().add_command(call);
        behind_time
            .query_async::<(Value,)>(conn)
            .await
            .map(|(reply,)| reply)
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

    /// Every `.lua` file in this directory, by name, with its text.
    fn lua_files() -> Vec<(String, String)> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/lock");
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).expect("src/lock") {
            let path = entry.expect("src/lock").path();
            if path.extension().is_some_and(|ext| ext == "lua") {
                let text = std::fs::read_to_string(&path).expect("a script");
                files.push((path.display().to_string(), text));
            }
        }
        assert!(files.len() > 5, "{files:?}");
        files
    }

    #[test]
    fn the_scripts_read_their_keys_and_arguments_by_name() {
        for (file, text) in lua_files() {
            for positional in ["KEYS[", "ARGV["] {
                assert!(
                    !text.contains(positional),
                    "{file} reads {positional}...]: declare the name in protocol.rs"
                );
            }
        }
    }

    /// How often `name` is in `code` as a whole word, comments left out.
    fn uses(code: &str, name: &str) -> usize {
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        let in_line = |line: &str| {
            let line = line.split("--").next().unwrap_or_default();
            line.match_indices(name)
                .filter(|(at, _)| {
                    !word(line[..*at].chars().next_back())
                        && !word(line[at + name.len()..].chars().next())
                })
                .count()
        };
        code.lines().map(in_line).sum()
    }

    #[test]
    fn every_declared_key_and_argument_is_used() {
        for declared in protocol::DECLARED {
            let lua = ALL
                .iter()
                .find(|lua| lua.name == declared.script)
                .expect("built from its file");
            let keys: Vec<&str> = match declared.takes {
                // Each guards them all (OURS) and has a waiter's channel.
                Takes::Lock => protocol::LOCK_KEYS
                    .iter()
                    .map(|key| key.lua)
                    .chain(["OURS", "WAKE"])
                    .collect(),
                Takes::Parts(parts) => parts.iter().map(|part| part.key().lua).collect(),
                Takes::One => vec!["KEY"],
            };
            let args = declared.argv.iter().map(|arg| arg.to_uppercase());
            for name in keys.into_iter().map(str::to_owned).chain(args) {
                // Its `local` line is one.
                assert!(
                    uses(lua.code, &name) > 1,
                    "{}.lua does not use {name}",
                    declared.script
                );
            }
        }
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
        for lua in ALL {
            for (n, line) in lua.code.lines().enumerate() {
                let calls = commands_on(line).len();
                assert!(calls <= 1, "{} line {}: {line}", lua.name, n + 1);
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
        for lua in ALL {
            let loaded: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(lua.code)
                .query(&mut conn)
                .unwrap_or_else(|err| panic!("SCRIPT LOAD {}: {err}", lua.name));
            assert_eq!(lua.sha, loaded, "{}", lua.name);
        }
    }

    /// What `one_key.lua` says of `op` on `key`: its `kind`, and its
    /// `fence` when it hands one out.
    fn one_key(conn: &mut redis::Connection, key: &str, op: &[&str]) -> (String, Option<u64>) {
        let part = match op[0].split('_').next() {
            Some("holder") => Part::Holder,
            Some("fence") => Part::Fence,
            _ => Part::Lease,
        };
        let mut argv = Vec::new();
        protocol::OneKeyArgs {
            op: op[0],
            holds: part.key().holds,
            name_node: false,
            operands: &op[1..],
        }
        .encode(&mut argv);
        let reply: Vec<redis::Value> = redis::cmd("EVAL")
            .arg(ONE_KEY.code)
            .arg(1)
            .arg(key)
            .arg(argv)
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
    fn one_key_changes_only_what_holds_the_callers_token() {
        let server = Server::start();
        let mut conn = server.connect();
        let kind = |conn: &mut redis::Connection, key: &str, op: &[&str]| one_key(conn, key, op).0;
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
        let (_, fence) = one_key(&mut conn, "F", &["fence_next"]);
        let fence = fence.expect("a new token");
        assert!(fence > 5, "{fence}");
        assert_eq!(one_key(&mut conn, "F", &["fence_get"]).1, Some(fence));

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
