//! AUTH in the same flight as a run's first call. The redis crate logs in
//! before it hands a connection over, which costs a round trip of its own
//! (BENCHMARKS.md, "Round trips"): to one server without pushes, a run's
//! session opens the connection without credentials and sends AUTH in the
//! same write as its first call instead.
//!
//! A refused AUTH is reported as the crate reports it, so the messages are
//! those of a login at connect. The call behind it then ran as the user
//! the connection had, `default`: refused too where `default` needs a
//! password, but taken where the server lets anyone in. That is a run's
//! acquire or renewal, which the run gives back like any call whose
//! outcome it did not learn (`Server::abandon`); an operator's session
//! (`release --force`) logs in first, as before.

use redis::aio::ConnectionLike;
use redis::{Cmd, ConnectionInfo, Pipeline, RedisConnectionInfo, RedisFuture, Value};

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

/// A connection that sends `auth`, if any, in front of the next request.
pub(super) struct LoginFirst<'a, C> {
    pub(super) conn: &'a mut C,
    pub(super) auth: Option<Cmd>,
}

impl<C: ConnectionLike + Send> ConnectionLike for LoginFirst<'_, C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let Some(auth) = self.auth.take() else {
            return self.conn.req_packed_command(cmd);
        };
        Box::pin(async move {
            let mut both = redis::pipe();
            both.add_command(auth).add_command(cmd.clone());
            let mut replies = self
                .conn
                .req_packed_commands(&both, 0, 2)
                .await?
                .into_iter();
            logged_in(replies.next().as_ref())?;
            replies.next().ok_or_else(missing)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let Some(auth) = self.auth.take() else {
            return self.conn.req_packed_commands(pipeline, offset, count);
        };
        Box::pin(async move {
            // A transaction's MULTI and EXEC are the pipeline's own: AUTH
            // goes alone (lockrun sends none).
            if pipeline.is_transaction() {
                let reply = self.conn.req_packed_command(&auth).await;
                logged_in(Some(&reply?))?;
                return self.conn.req_packed_commands(pipeline, offset, count).await;
            }
            let mut all = redis::pipe();
            all.add_command(auth);
            for cmd in pipeline.cmd_iter() {
                all.add_command(cmd.clone());
            }
            let mut replies = self
                .conn
                .req_packed_commands(&all, 0, 1 + offset + count)
                .await?
                .into_iter();
            logged_in(replies.next().as_ref())?;
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
