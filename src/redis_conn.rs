//! Where Redis is and how to talk to it.
//!
//! Three kinds of target: one server (`redis://`, `rediss://`, `unix://`), the
//! primary that Redis Sentinel names (`sentinel`), and a Redis Cluster
//! (`cluster`). Whichever it is, a `Session` runs a script on the server that
//! owns the lock's keys, and after the script can ask that server to `WAIT`
//! for its replicas.
//!
//! - `target`: the URL, parsed into a `Target` that never shows its password;
//! - `hosts`: the host lists of the Sentinel and Cluster URLs;
//! - `error`: what a failed call means for lockrun, and its message;
//! - `session`: the connection, its time limits, `WAIT` and subscriptions;
//! - `first_call`: what travels with a connection's first call: the
//!   AUTH, and behind Sentinel the primary's `ROLE`;
//! - `sentinel`, `cluster`: finding the server that holds the lock there;
//! - `password`: the password file, read again at each connection;
//! - `tls`: whom lockrun trusts over TLS, and its client certificate.

mod cluster;
mod error;
mod first_call;
mod hosts;
mod password;
mod pushes;
mod sentinel;
mod session;
mod target;
mod tls;

pub(crate) use error::{script_refusal, ErrorKind, RedisError, ScriptRefusal, Unready};
pub(crate) use session::{Request, Scripts, Session};
pub(crate) use target::{refusal as url_refusal, InvalidUrl, Target, UrlSource};
pub(crate) use tls::{Ca, Identity, IdentityError, Tls};
