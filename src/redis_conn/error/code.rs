//! A failed call's error code: the first word of Redis's error reply
//! (NOAUTH, NOPERM, TRYAGAIN, MOVED, ...), which is all lockrun classifies
//! a reply by. This is the one place that reads further into a reply, for
//! the three replies whose first word hides the code that matters:
//!
//! - Redis before 7 wraps the error that a script's own `redis.call` ran
//!   into under ERR: `Error running script (call to f_SHA):
//!   @user_script:99: @user_script: 99: -READONLY You can't write ...`.
//!   Redis 7 replies with the inner code itself; unwrapped, a 6.2 replica
//!   or a demoted primary reads the same as there.
//! - A script's command that an ACL refused is ERR on every version (`The
//!   user executing the script can't run this command ... @user_script:N`):
//!   here it is NOPERM, as the same command sent directly gets.
//! - A server that wants a password answers a long request (a script call)
//!   from a client that gave none with `ERR Protocol error:
//!   unauthenticated multibulk length`: here it is NOAUTH, as a short
//!   request gets.
//! - A server at its `maxclients` limit greets a new connection with `ERR
//!   max number of clients reached` (Redis 6.2 to 8, Valkey 8; a cluster
//!   node of Redis 7 and later says `max number of clients + cluster
//!   connections reached`) and closes it: here it is MAXCLIENTS, a code of
//!   lockrun's own, since waiting helps there and not after other ERR
//!   replies.
//!
//! A script sent behind `TIME` (`Call::reply_last`) fails as a pipeline,
//! which the redis crate reports with neither code nor detail of its own:
//! its first failure is the reply read here.

/// The code that says what went wrong, looked for inside the replies that
/// wrap it; None for a failure that is not a reply (I/O, parsing).
pub(crate) fn code(err: &redis::RedisError) -> Option<String> {
    let (code, detail) = reply(err)?;
    if code != "ERR" {
        return Some(code);
    }
    let code = if refusal_in(&detail).is_some() {
        "NOPERM"
    } else if detail.starts_with("Protocol error: unauthenticated") {
        "NOAUTH"
    } else if detail.starts_with("max number of clients") {
        "MAXCLIENTS"
    } else {
        inside_script(&detail).map_or("ERR", |(inner, _)| inner)
    };
    Some(code.to_owned())
}

/// The code and detail of the server's reply behind `err`: `err` itself,
/// or the first failure of a pipeline.
fn reply(err: &redis::RedisError) -> Option<(String, String)> {
    let first = err
        .clone()
        .into_server_errors()
        .and_then(|errors| errors.first().map(|(_, first)| first.clone()));
    let (code, detail) = match &first {
        Some(first) => (first.code(), first.details()),
        None => (err.code()?, err.detail()),
    };
    Some((code.to_owned(), detail.unwrap_or("").to_owned()))
}

/// The code and message of the error a script's `redis.call` ran into, as
/// Redis before 7 words it inside an ERR's `detail`.
fn inside_script(detail: &str) -> Option<(&str, &str)> {
    let inner = detail.strip_prefix("Error running script ")?;
    let inner = inner[inner.find(": -")? + 3..].trim_end();
    let (code, message) = inner.split_once(' ').unwrap_or((inner, ""));
    let is_code = !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase());
    is_code.then_some((code, message))
}

/// Whether `err` says the server does not know the command it was sent:
/// code ERR, `unknown command 'WAIT', with args beginning with: ...` (Redis
/// 6.2 quotes the name with a backtick). A command renamed away
/// (`rename-command WAIT ""`) or one that a managed service or proxy does
/// not offer.
pub(crate) fn is_unknown_command(err: &redis::RedisError) -> bool {
    reply(err).is_some_and(|(code, detail)| code == "ERR" && detail.starts_with("unknown command"))
}

/// What an ACL refused a script, as far as Redis says: it names only the
/// script's line for a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScriptRefusal {
    /// Publishing to, or another use of, a channel.
    Channel,
    /// A key.
    Key,
    /// The command (or commands) on this line of the script, counted from 1.
    Line(usize),
}

/// What the ACL refused, if `err` is a script's command refused by an ACL.
pub(crate) fn script_refusal(err: &redis::RedisError) -> Option<ScriptRefusal> {
    let (code, detail) = reply(err)?;
    if code == "ERR" {
        refusal_in(&detail)
    } else {
        None
    }
}

/// Redis says `The user executing the script can't run this command ...`
/// (or `access at least one of the keys`, `publish to the channel`); Valkey
/// 8 says `ACL failure in script: User u has no permissions to run the
/// 'type' command` (or `No permissions to access a key`, `a channel`).
fn refusal_in(detail: &str) -> Option<ScriptRefusal> {
    let why = detail
        .split("The user executing the script can't ")
        .nth(1)
        .or_else(|| detail.split("ACL failure in script: ").nth(1))?;
    if why.starts_with("publish") || why.contains("channel") {
        return Some(ScriptRefusal::Channel);
    }
    if why.starts_with("access") || why.starts_with("No permissions to access a key") {
        return Some(ScriptRefusal::Key);
    }
    let line = detail
        .split("user_script:")
        .nth(1)?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some(ScriptRefusal::Line(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(text: &str) -> redis::RedisError {
        match redis::parse_redis_value(format!("{text}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(err)) => err.into(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_code_is_the_first_word_or_the_one_a_reply_wraps() {
        assert_eq!(
            code(&reply("-TRYAGAIN Multiple keys")).as_deref(),
            Some("TRYAGAIN")
        );
        assert_eq!(code(&reply("-ERR unknown command")).as_deref(), Some("ERR"));
        // Redis 6.2.14's reply, verbatim.
        let wrapped = reply(
            "-ERR Error running script (call to f_5a3c92a56ae8f6455fc76430810f36be88b5c155): \
             @user_script:1: @user_script: 1: -READONLY You can't write against a read only \
             replica. ",
        );
        assert_eq!(code(&wrapped).as_deref(), Some("READONLY"));
        let own = reply(
            "-ERR Error running script (call to f_0123): @user_script:1: @user_script: 1: \
             Unknown Redis command called from Lua script ",
        );
        assert_eq!(code(&own).as_deref(), Some("ERR"));
        let long = reply("-ERR Protocol error: unauthenticated multibulk length");
        assert_eq!(code(&long).as_deref(), Some("NOAUTH"));
        // Redis 7.2 and Valkey 8.1's greeting at maxclients, verbatim.
        let full = reply("-ERR max number of clients reached");
        assert_eq!(code(&full).as_deref(), Some("MAXCLIENTS"));
        let node = reply("-ERR max number of clients + cluster connections reached");
        assert_eq!(code(&node).as_deref(), Some("MAXCLIENTS"));
        let io = redis::RedisError::from((redis::ErrorKind::Io, "Connection refused"));
        assert!(!is_unknown_command(&io));
        assert_eq!(code(&io).as_deref(), None);
    }

    #[test]
    fn an_unknown_command_is_told_apart_on_every_version() {
        // Redis 7 and Valkey 8, then Redis 6.2, verbatim.
        let seven = reply("-ERR unknown command 'WAIT', with args beginning with: '1' '997' ");
        assert!(is_unknown_command(&seven));
        let six = reply("-ERR unknown command `WAIT`, with args beginning with: `1`, `997`, ");
        assert!(is_unknown_command(&six));
        assert!(!is_unknown_command(&reply("-ERR syntax error")));
        assert!(!is_unknown_command(&reply("-NOPERM unknown command")));
    }

    #[test]
    fn a_script_refused_by_an_acl_is_noperm() {
        let refused = reply(
            "-ERR The user executing the script can't run this command or subcommand script: \
             0123, on @user_script:12.",
        );
        assert_eq!(code(&refused).as_deref(), Some("NOPERM"));
        assert_eq!(script_refusal(&refused), Some(ScriptRefusal::Line(12)));
        // Redis 6.2 puts the line first.
        let old = reply(
            "-ERR Error running script (call to f_0123): @user_script:7: @user_script: 7: The \
             user executing the script can't run this command or subcommand",
        );
        assert_eq!(script_refusal(&old), Some(ScriptRefusal::Line(7)));
        let channel = reply(
            "-ERR The user executing the script can't publish to the channel mentioned in the \
             command script: 01, on @user_script:9.",
        );
        assert_eq!(script_refusal(&channel), Some(ScriptRefusal::Channel));
        assert_eq!(script_refusal(&reply("-ERR something else")), None);
        // Valkey 8.1's replies, verbatim.
        let valkey = |why: &str| {
            reply(&format!(
                "-ERR ACL failure in script: {why} script: 351eeebcab9bc5de4670b053bb8c122f89753c07, \
                 on @user_script:43."
            ))
        };
        let command = valkey("User u has no permissions to run the 'type' command");
        assert_eq!(code(&command).as_deref(), Some("NOPERM"));
        assert_eq!(script_refusal(&command), Some(ScriptRefusal::Line(43)));
        let key = valkey("No permissions to access a key");
        assert_eq!(script_refusal(&key), Some(ScriptRefusal::Key));
        let channel = valkey("No permissions to access a channel");
        assert_eq!(script_refusal(&channel), Some(ScriptRefusal::Channel));
    }
}
