//! What travels in the same flight as a connection's first call, rather
//! than in a round trip of its own (BENCHMARKS.md, "Round trips"): the
//! AUTH, which the redis crate would send and wait for before it hands a
//! connection over, and behind Sentinel the named server's `ROLE`.
//!
//! A refused AUTH is reported as the crate reports it, so the messages are
//! those of a login at connect. The call behind it then ran as the user
//! the connection had, `default`: refused too where `default` needs a
//! password, but taken where the server lets anyone in. That is a run's
//! acquire or renewal, which the run gives back like any call whose
//! outcome it did not learn (`Server::abandon`); an operator's session
//! (`release --force`) logs in first, as before. In a cluster the first
//! call is `CLUSTER SLOTS`, which changes nothing, so every session's AUTH
//! travels with it.
//!
//! A `ROLE` that does not say primary makes the call's reply untrusted,
//! whatever it was: a read such as `status` may have been answered by a
//! replica, and a write was refused there (`READONLY`) or, on a server
//! being promoted, may yet count; the session asks the sentinels again.

use redis::aio::ConnectionLike;
use redis::{Cmd, ConnectionInfo, Pipeline, RedisConnectionInfo, RedisFuture, Role, Value};

/// `info` without its credentials, and the AUTH to send with the first call,
/// when the credentials can wait for it: a password, RESP2 (RESP3's HELLO
/// stays the crate's) and database 0 (SELECT too would need its own
/// answer).
pub(super) fn deferred(info: &ConnectionInfo) -> Option<(ConnectionInfo, Cmd)> {
    let settings = info.redis_settings();
    let password = settings.password()?;
    if settings.db() != 0 || settings.protocol().supports_resp3() {
        return None;
    }
    let mut auth = redis::cmd("AUTH");
    if let Some(user) = settings.username() {
        auth.arg(user);
    }
    auth.arg(password);
    let bare = RedisConnectionInfo::default().set_skip_set_lib_name();
    Some((info.clone().set_redis_settings(bare), auth))
}

/// When a session logs in.
pub(super) enum Login {
    /// The crate logs in as it opens the connection.
    AtConnect,
    /// The first call on a connection to one server carries the AUTH,
    /// which waits here until then.
    WithFirstCall(Option<Cmd>),
}

impl Login {
    /// The AUTH the next call carries, if any; none after it.
    pub(super) fn take(&mut self) -> Option<Cmd> {
        match self {
            Login::AtConnect => None,
            Login::WithFirstCall(auth) => auth.take(),
        }
    }
}

/// A connection that sends `auth`, then `ROLE` when `asks_role`, in front
/// of the next request, and judges their replies before that request's.
pub(super) struct FirstCall<'a, C> {
    pub(super) conn: &'a mut C,
    pub(super) auth: Option<Cmd>,
    pub(super) asks_role: bool,
    /// Set when `ROLE` answered that the server is not a primary: the
    /// request's reply is then an error, whatever the server said to it.
    pub(super) not_primary: bool,
}

impl<'c, C: ConnectionLike + Send> FirstCall<'c, C> {
    pub(super) fn new(conn: &'c mut C, auth: Option<Cmd>, asks_role: bool) -> Self {
        FirstCall {
            conn,
            auth,
            asks_role,
            not_primary: false,
        }
    }

    /// What goes ahead of the next request, taken: nothing after it.
    fn ahead(&mut self) -> Option<Ahead> {
        let ahead = Ahead {
            auth: self.auth.take(),
            role: std::mem::replace(&mut self.asks_role, false),
        };
        (ahead.auth.is_some() || ahead.role).then_some(ahead)
    }

    /// Judges the replies of what went ahead, AUTH's first: a refused
    /// AUTH, a refused ROLE, or a server that is not a primary, fails the
    /// request behind them.
    fn judge(
        &mut self,
        ahead: &Ahead,
        replies: &mut impl Iterator<Item = Value>,
    ) -> redis::RedisResult<()> {
        if ahead.auth.is_some() {
            logged_in(replies.next().as_ref())?;
        }
        if ahead.role {
            let role = match replies.next().ok_or_else(missing)? {
                Value::ServerError(err) => return Err(err.into()),
                reply => redis::from_redis_value::<Role>(reply)?,
            };
            if !matches!(role, Role::Primary { .. }) {
                self.not_primary = true;
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "the server is not a primary",
                )));
            }
        }
        Ok(())
    }
}

/// The AUTH and the ROLE that go ahead of a connection's first request.
struct Ahead {
    auth: Option<Cmd>,
    role: bool,
}

impl Ahead {
    fn count(&self) -> usize {
        usize::from(self.auth.is_some()) + usize::from(self.role)
    }

    /// A pipeline of these, then `cmds`.
    fn before<'a>(&self, cmds: impl IntoIterator<Item = &'a Cmd>) -> Pipeline {
        let mut all = redis::pipe();
        if let Some(auth) = &self.auth {
            all.add_command(auth.clone());
        }
        if self.role {
            all.cmd("ROLE");
        }
        for cmd in cmds {
            all.add_command(cmd.clone());
        }
        all
    }
}

impl<C: ConnectionLike + Send> ConnectionLike for FirstCall<'_, C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let Some(ahead) = self.ahead() else {
            return self.conn.req_packed_command(cmd);
        };
        Box::pin(async move {
            let mut replies = self
                .conn
                .req_packed_commands(&ahead.before([cmd]), 0, ahead.count() + 1)
                .await?
                .into_iter();
            self.judge(&ahead, &mut replies)?;
            replies.next().ok_or_else(missing)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let Some(ahead) = self.ahead() else {
            return self.conn.req_packed_commands(pipeline, offset, count);
        };
        Box::pin(async move {
            // A transaction's MULTI and EXEC are the pipeline's own: what
            // goes ahead goes alone (lockrun sends none).
            if pipeline.is_transaction() {
                let mut replies = self
                    .conn
                    .req_packed_commands(&ahead.before([]), 0, ahead.count())
                    .await?
                    .into_iter();
                self.judge(&ahead, &mut replies)?;
                return self.conn.req_packed_commands(pipeline, offset, count).await;
            }
            let mut replies = self
                .conn
                .req_packed_commands(
                    &ahead.before(pipeline.cmd_iter()),
                    0,
                    ahead.count() + offset + count,
                )
                .await?
                .into_iter();
            self.judge(&ahead, &mut replies)?;
            Ok(replies.skip(offset).collect())
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

/// AUTH's reply, judged as the crate judges it at connect: any refusal is
/// "Password authentication failed", which lockrun's messages build on.
fn logged_in(reply: Option<&Value>) -> redis::RedisResult<()> {
    match reply {
        Some(Value::Okay) => Ok(()),
        Some(_) => Err(redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ))),
        None => Err(missing()),
    }
}

fn missing() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Client, "a reply missing from a pipeline"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection whose every pipeline gets `replies`, and every single
    /// command 8.
    struct Canned(Vec<Value>);

    impl ConnectionLike for Canned {
        fn req_packed_command<'a>(&'a mut self, _: &'a Cmd) -> RedisFuture<'a, Value> {
            Box::pin(async move { Ok(Value::Int(8)) })
        }

        fn req_packed_commands<'a>(
            &'a mut self,
            _: &'a Pipeline,
            offset: usize,
            count: usize,
        ) -> RedisFuture<'a, Vec<Value>> {
            let replies = self.0.iter().skip(offset).take(count).cloned().collect();
            Box::pin(async move { Ok(replies) })
        }

        fn get_db(&self) -> i64 {
            0
        }
    }

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn primary() -> Value {
        Value::Array(vec![bulk("master"), Value::Int(0), Value::Array(vec![])])
    }

    fn replica() -> Value {
        Value::Array(vec![
            bulk("slave"),
            bulk("10.0.0.1"),
            Value::Int(6379),
            bulk("connected"),
            Value::Int(0),
        ])
    }

    fn error(line: &str) -> Value {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(value) => value,
            Err(err) => panic!("{err}"),
        }
    }

    /// The call's reply, or its error, behind what `replies` begin with;
    /// and whether the server was found not a primary.
    async fn first(
        replies: Vec<Value>,
        auth: bool,
        role: bool,
    ) -> (redis::RedisResult<Value>, bool) {
        let mut conn = Canned(replies);
        let auth = auth.then(|| redis::cmd("AUTH").arg("pw").clone());
        let mut first = FirstCall::new(&mut conn, auth, role);
        let reply = first.req_packed_command(&redis::cmd("GET")).await;
        (reply, first.not_primary)
    }

    #[tokio::test]
    async fn a_primary_s_reply_is_the_call_s() {
        let (reply, not_primary) =
            first(vec![Value::Okay, primary(), Value::Int(7)], true, true).await;
        assert_eq!(reply.ok(), Some(Value::Int(7)));
        assert!(!not_primary);
    }

    #[tokio::test]
    async fn a_replica_s_reply_is_not_trusted() {
        for call in [
            Value::Int(7),
            error("READONLY You can't write against a read only replica."),
        ] {
            let (reply, not_primary) = first(vec![replica(), call], false, true).await;
            assert!(reply.is_err());
            assert!(not_primary);
        }
    }

    #[tokio::test]
    async fn a_refused_login_or_role_is_the_call_s_failure() {
        let (reply, not_primary) = first(
            vec![
                error("WRONGPASS invalid password"),
                primary(),
                Value::Int(7),
            ],
            true,
            true,
        )
        .await;
        let err = reply.expect_err("refused");
        assert_eq!(err.kind(), redis::ErrorKind::AuthenticationFailed);
        assert!(!not_primary);
        let (reply, not_primary) = first(
            vec![
                error("NOPERM no permissions to run the 'role' command"),
                Value::Int(7),
            ],
            false,
            true,
        )
        .await;
        assert_eq!(reply.expect_err("refused").code(), Some("NOPERM"));
        assert!(!not_primary);
    }

    #[tokio::test]
    async fn only_the_first_call_carries_them() {
        let mut conn = Canned(vec![replica(), Value::Int(7)]);
        let mut first = FirstCall::new(&mut conn, None, true);
        assert!(first.req_packed_command(&redis::cmd("GET")).await.is_err());
        let reply = first.req_packed_command(&redis::cmd("GET")).await;
        assert_eq!(reply.ok(), Some(Value::Int(8)));
    }
}
