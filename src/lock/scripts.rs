//! The Lua scripts, each in a module of its own beside its file
//! (`scripts/NAME.rs`, `scripts/NAME.lua`), as mini-redis keeps each
//! command in one file: its keys and arguments, the call that sends them,
//! and its reply with its decoding. Here what they share: a script's text,
//! assembled and hashed at its first call, and how a call is sent; `reply`
//! has the shared decoding.
//!
//! A script reads its keys and arguments by name only: its text starts with
//! a `local NAME = KEYS[i]` line for each key it takes and a
//! `local NAME = ARGV[j]` line for each field of its `Args`, in the order a
//! call sends them, so that the two cannot disagree. Then come the parts it
//! needs (`GUARD` ...), then its own file. Sent as EVALSHA, and as EVAL once
//! for a server that does not know it yet (EVAL caches it under the same
//! hash); after one NOSCRIPT on a connection, EVAL at once for each script
//! not yet sent whole on it (`Scripts`).

mod acked;
mod acquire;
mod force_release;
mod one_key;
mod raise_fence;
mod release;
mod renew;
mod reply;
mod status;

use std::fmt::Write as _;
use std::marker::PhantomData;
use std::sync::OnceLock;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Value};

pub(super) use self::acked::AckedArgs;
pub(super) use self::acquire::{Acquire, AcquireArgs};
pub(super) use self::force_release::{ForceRelease, ForceReleaseArgs};
pub(super) use self::one_key::{OneKeyArgs, OneKeyReply};
pub(super) use self::raise_fence::{RaiseFenceArgs, Raised};
pub(super) use self::release::ReleaseArgs;
pub(crate) use self::release::Released;
pub(super) use self::renew::{RenewArgs, RenewTogetherArgs};
pub(super) use self::reply::{Guarded, Reply};
pub(super) use self::status::{view, StatusArgs};
use crate::lock::keys::{Keys, Part, Scope, EVERY_PART, LOCK_KEYS, WAKE};
use crate::redis_conn::{script_refusal, Request, ScriptRefusal, Scripts};

/// The parts put in front of the scripts that need them (their `Lua::new`):
/// the guard of the lock's keys' types, the steps that the scripts of a
/// whole lock and one_key.lua share, the line's rules, the count of online
/// replicas.
const GUARD: &str = include_str!("scripts/guard.lua");
const STEPS: &str = include_str!("scripts/steps.lua");
const QUEUE: &str = include_str!("scripts/queue.lua");
const REPLICAS: &str = include_str!("scripts/replicas.lua");

/// Makes the release's script (text and hash) now, for a run to do while
/// it waits on Redis anyway: after its command ends, a waiter may be
/// waiting on the release (BENCHMARKS.md).
pub(super) fn prepare_release() {
    release::RELEASE.built();
}

/// Which keys a script takes, as its `KEYS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Takes {
    /// Every key of the lock, in `LOCK_KEYS`'s order. Such a script also
    /// gets `OURS` (every key with its type, for `wrong_type`), `ALONE`
    /// (the same for the keys of scope `Alone`), `CROWD` (the keys of
    /// scope `Crowd`) and `WAKE`.
    Lock,
    /// These keys of the lock, in this order.
    Parts(&'static [Part]),
    /// One key of the lock, chosen at each call, as `KEY`; with `WAKE`.
    One,
}

/// A script's arguments: the fields of a struct that `args!` declares, in
/// the order they are sent, each read by the script as its name
/// upper-cased.
pub(super) trait Args {
    /// What the script answers (`reply::Reply`).
    type Reply;
    const TAKES: Takes;
    /// The fields' names, in order.
    const ARGV: &'static [&'static str];
    /// Whether the last field is a list of any length (`..`).
    const REST: bool;
    /// The script these arguments are for.
    fn lua() -> &'static Lua;
    /// The arguments, in `ARGV`'s order.
    fn encode(&self, argv: &mut Vec<Vec<u8>>);
}

/// Declares a script's arguments as the fields of a struct, in the order
/// they are sent, and links it to the script (`runs`) and its reply
/// (`returns`). `..` before the last field makes it a list of any length.
macro_rules! args {
    (
        $(#[doc = $doc:literal])*
        $name:ident $(<$lt:lifetime>)? takes $takes:expr, runs $lua:ident, returns $reply:ty {
            $($(#[doc = $fdoc:literal])* $field:ident: $ty:ty,)*
            $(.. $(#[doc = $rdoc:literal])* $rest:ident: $rty:ty,)?
        }
    ) => {
        $(#[doc = $doc])*
        pub(in crate::lock) struct $name $(<$lt>)? {
            $($(#[doc = $fdoc])* pub(in crate::lock) $field: $ty,)*
            $($(#[doc = $rdoc])* pub(in crate::lock) $rest: $rty,)?
        }

        impl $(<$lt>)? super::Args for $name $(<$lt>)? {
            type Reply = $reply;
            const TAKES: super::Takes = $takes;
            const ARGV: &'static [&'static str] =
                &[$(stringify!($field),)* $(stringify!($rest))?];
            const REST: bool = {
                let rest: &[&str] = &[$(stringify!($rest))?];
                !rest.is_empty()
            };
            fn lua() -> &'static super::Lua {
                &$lua
            }
            #[allow(unused_variables)]
            fn encode(&self, argv: &mut Vec<Vec<u8>>) {
                $(super::Arg::put(&self.$field, argv);)*
                $(super::Rest::put_all(&self.$rest, argv);)?
            }
        }
    };
}
use args;

/// One argument as a script receives it: a string.
trait Arg {
    fn put(&self, argv: &mut Vec<Vec<u8>>);
}

impl Arg for &str {
    fn put(&self, argv: &mut Vec<Vec<u8>>) {
        argv.push(self.as_bytes().to_vec());
    }
}

impl Arg for u64 {
    fn put(&self, argv: &mut Vec<Vec<u8>>) {
        argv.push(self.to_string().into_bytes());
    }
}

impl Arg for u32 {
    fn put(&self, argv: &mut Vec<Vec<u8>>) {
        u64::from(*self).put(argv);
    }
}

/// `'1'` or `'0'`.
impl Arg for bool {
    fn put(&self, argv: &mut Vec<Vec<u8>>) {
        argv.push(vec![if *self { b'1' } else { b'0' }]);
    }
}

/// Any number of arguments, which the script receives as one table: only
/// a script's last field, after `..` (one of any length anywhere else
/// would move the ones after it).
trait Rest {
    fn put_all(&self, argv: &mut Vec<Vec<u8>>);
}

impl Rest for &[&str] {
    fn put_all(&self, argv: &mut Vec<Vec<u8>>) {
        for arg in *self {
            arg.put(argv);
        }
    }
}

/// A script: its file and the parts in front of it, with the names of its
/// keys and arguments from its `Args`.
pub(crate) struct Lua {
    /// Its file in `scripts/`, without `.lua`.
    name: &'static str,
    takes: Takes,
    argv: &'static [&'static str],
    rest: bool,
    parts: &'static [&'static str],
    body: &'static str,
    /// Its whole text and SHA-1, made at its first call (the release's
    /// ahead of it, `prepare_release`): 0.07 ms for the longest, too little
    /// to earn a build script (BENCHMARKS.md).
    built: OnceLock<Built>,
}

struct Built {
    code: String,
    /// In lower-case hex, as Redis names it.
    sha: String,
}

impl Lua {
    /// The script in `body` (its file, `include_str!`), after `parts`, for
    /// the arguments `A`.
    const fn new<A: Args>(
        name: &'static str,
        parts: &'static [&'static str],
        body: &'static str,
    ) -> Self {
        Lua {
            name,
            takes: A::TAKES,
            argv: A::ARGV,
            rest: A::REST,
            parts,
            body,
            built: OnceLock::new(),
        }
    }

    fn built(&'static self) -> &'static Built {
        self.built.get_or_init(|| {
            let mut code = self.header();
            for part in self.parts.iter().chain([&self.body]) {
                code.push_str(part);
            }
            let sha = sha1_smol::Sha1::from(&code).digest().to_string();
            Built { code, sha }
        })
    }

    fn code(&'static self) -> &'static str {
        &self.built().code
    }

    fn sha(&'static self) -> &'static str {
        &self.built().sha
    }

    /// The lines that name its keys and arguments.
    fn header(&self) -> String {
        let mut lines = format!(
            "-- Keys and arguments: src/lock/scripts/{}.rs.\n",
            self.name
        );
        let keys: Vec<&str> = match self.takes {
            Takes::Lock => LOCK_KEYS.iter().map(|key| key.lua).collect(),
            Takes::Parts(parts) => parts.iter().map(|part| part.key().lua).collect(),
            Takes::One => vec!["KEY"],
        };
        for (i, key) in keys.iter().enumerate() {
            let _ = writeln!(lines, "local {key} = KEYS[{}]", i + 1);
        }
        let last = self.argv.len();
        for (j, arg) in self.argv.iter().enumerate() {
            let name = arg.to_uppercase();
            let _ = if self.rest && j + 1 == last {
                writeln!(lines, "local {name} = {{unpack(ARGV, {})}}", j + 1)
            } else {
                writeln!(lines, "local {name} = ARGV[{}]", j + 1)
            };
        }
        if self.takes == Takes::Lock {
            let typed = |scope: Option<Scope>| {
                let keys: Vec<String> = LOCK_KEYS
                    .iter()
                    .filter(|key| scope.is_none_or(|scope| key.scope == scope))
                    .map(|key| format!("{{{}, '{}'}}", key.lua, key.holds))
                    .collect();
                keys.join(", ")
            };
            let crowd: Vec<&str> = LOCK_KEYS
                .iter()
                .filter(|key| key.scope == Scope::Crowd)
                .map(|key| key.lua)
                .collect();
            let _ = writeln!(lines, "local OURS = {{{}}}", typed(None));
            let _ = writeln!(lines, "local ALONE = {{{}}}", typed(Some(Scope::Alone)));
            let _ = writeln!(lines, "local CROWD = {{{}}}", crowd.join(", "));
        }
        if matches!(self.takes, Takes::Lock | Takes::One) {
            let _ = writeln!(lines, "local WAKE = {WAKE:?}");
        }
        lines
    }
}

/// One call of a script, whose reply is an `R`: its KEYS and ARGV.
pub(super) struct Call<R> {
    lua: &'static Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
    /// Whether the script's reply should reach this run after what the
    /// script publishes reaches its listeners (`reply_last`).
    reply_last: bool,
    reply: PhantomData<fn() -> R>,
}

impl<R> Call<R> {
    /// A call of the script `args` are for, on the keys of `lock` it takes.
    pub(super) fn new<A: Args<Reply = R>>(lock: &Keys, args: &A) -> Self {
        const {
            assert!(
                !matches!(A::TAKES, Takes::One),
                "a script of one key: on_key"
            );
        };
        let parts = match A::TAKES {
            Takes::Lock => EVERY_PART,
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
    pub(super) fn on_key<A: Args<Reply = R>>(lock: &Keys, part: Part, args: &A) -> Self {
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

    fn of<A: Args<Reply = R>>(declared: &A) -> Self {
        let mut args = Vec::with_capacity(A::ARGV.len());
        declared.encode(&mut args);
        Call {
            lua: A::lua(),
            keys: Vec::new(),
            args,
            reply_last: false,
            reply: PhantomData,
        }
    }

    /// Sends the script behind a `TIME` whose answer is ignored, so that
    /// this connection has output waiting before the script runs. Redis
    /// (6.2 to 7.x) writes the connections with output waiting newest
    /// first, so the grant a release publishes reaches the waiter before
    /// the release's reply reaches this run: on a busy CPU, the waiter then
    /// starts its command while this run is still exiting, instead of after
    /// (docs/design.md).
    pub(super) fn reply_last(&mut self) -> &mut Self {
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

impl<R> Request for Call<R> {
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

impl<R> Call<R> {
    async fn send_script(
        &self,
        conn: &mut impl ConnectionLike,
        scripts: &mut Scripts,
    ) -> RedisResult<Value> {
        if scripts.lacks(self.lua.sha()) {
            scripts.sent_whole(self.lua.sha());
            return self.send_as("EVAL", self.lua.code().as_bytes(), conn).await;
        }
        match self
            .send_as("EVALSHA", self.lua.sha().as_bytes(), conn)
            .await
        {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                scripts.sent_whole(self.lua.sha());
                self.send_as("EVAL", self.lua.code().as_bytes(), conn).await
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
    fn refusal(&'static self, err: &redis::RedisError) -> Option<redis::RedisError> {
        let detail = match script_refusal(err)? {
            ScriptRefusal::Channel => "No permissions to access a channel".to_owned(),
            ScriptRefusal::Key => "No permissions to access a key".to_owned(),
            ScriptRefusal::Line(line) => {
                let called = commands_on(self.code().lines().nth(line.checked_sub(1)?)?);
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

    use super::acked::ACKED;
    use super::acquire::ACQUIRE;
    use super::force_release::FORCE_RELEASE;
    use super::one_key::ONE_KEY;
    use super::raise_fence::RAISE_FENCE;
    use super::release::RELEASE;
    use super::renew::{RENEW, RENEW_TOGETHER};
    use super::status::STATUS;
    use super::*;

    /// Every script.
    static ALL: [&Lua; 9] = [
        &ACQUIRE,
        &RENEW,
        &RENEW_TOGETHER,
        &ACKED,
        &RELEASE,
        &FORCE_RELEASE,
        &STATUS,
        &RAISE_FENCE,
        &ONE_KEY,
    ];

    /// Every `.lua` file in `scripts/`, by name, with its text.
    fn lua_files() -> Vec<(String, String)> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/lock/scripts");
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).expect("src/lock/scripts") {
            let path = entry.expect("src/lock/scripts").path();
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
                    "{file} reads {positional}...]: declare the name in its .rs file"
                );
            }
        }
    }

    /// No `.lua` file is left out of every script.
    #[test]
    fn each_lua_file_is_a_script_or_a_part_of_one() {
        for (file, text) in lua_files() {
            let used = ALL
                .iter()
                .any(|lua| lua.body == text || lua.parts.contains(&text.as_str()));
            assert!(
                used,
                "{file} is neither a script (`Lua::new`) nor a part of one"
            );
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
        for lua in ALL {
            let keys: Vec<&str> = match lua.takes {
                // Each guards them all (OURS) and has a waiter's channel.
                Takes::Lock => LOCK_KEYS
                    .iter()
                    .map(|key| key.lua)
                    .chain(["OURS", "WAKE"])
                    .collect(),
                Takes::Parts(parts) => parts.iter().map(|part| part.key().lua).collect(),
                Takes::One => vec!["KEY"],
            };
            let args = lua.argv.iter().map(|arg| arg.to_uppercase());
            for name in keys.into_iter().map(str::to_owned).chain(args) {
                // Its `local` line is one.
                assert!(
                    uses(lua.code(), &name) > 1,
                    "{}.lua does not use {name}",
                    lua.name
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
        let code: Vec<&str> = ACQUIRE.code().lines().collect();
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
            for (n, line) in lua.code().lines().enumerate() {
                let calls = commands_on(line).len();
                assert!(calls <= 1, "{} line {}: {line}", lua.name, n + 1);
            }
        }
    }

    /// A redis-server of the test's own, on a unix socket in a temporary
    /// directory; killed when dropped.
    pub(super) struct Server {
        process: Child,
        dir: tempfile::TempDir,
    }

    impl Server {
        pub(super) fn start() -> Self {
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

        pub(super) fn connect(&self) -> redis::Connection {
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
                .arg(lua.code())
                .query(&mut conn)
                .unwrap_or_else(|err| panic!("SCRIPT LOAD {}: {err}", lua.name));
            assert_eq!(lua.sha(), loaded, "{}", lua.name);
        }
    }
}
