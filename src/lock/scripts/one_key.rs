//! `one_key.lua`: one key of a lock whose cluster slot is being migrated
//! (`server/one_key.rs` says how the lock is handled then).

use std::collections::HashMap;

use redis::ParsingError;

use super::reply::{Fields, Reply};
use super::{args, Lua, Takes, GUARD, REPLICAS, STEPS};
use crate::lock::records::Holder;

pub(super) static ONE_KEY: Lua = Lua::new::<OneKeyArgs>(
    "one_key",
    &[GUARD, STEPS, REPLICAS],
    include_str!("one_key.lua"),
);

args! {
    /// One key of a lock whose cluster slot is being migrated.
    OneKeyArgs<'a> takes Takes::One, runs ONE_KEY, returns OneKeyReply {
        /// The operation (`one_key.lua` lists them).
        op: &'a str,
        /// The type lockrun keeps in the key (`Key::holds`): the script
        /// touches nothing while the key holds another.
        holds: &'a str,
        /// To return the id of the node that ran it.
        name_node: bool,
        ..
        /// The operation's own arguments.
        operands: &'a [&'a str],
    }
}

/// What `one_key.lua` found or did with one key.
pub(in crate::lock) struct OneKeyReply {
    pub(in crate::lock) kind: String,
    /// The cluster id of the node that ran it; empty unless asked for.
    pub(in crate::lock) node: String,
    pub(in crate::lock) replicas: i64,
    pub(in crate::lock) now_us: u64,
    pub(in crate::lock) pttl: Option<i64>,
    pub(in crate::lock) fence: Option<u64>,
    pub(in crate::lock) holder: Option<Holder>,
    /// The first ids in line.
    pub(in crate::lock) ids: Vec<String>,
    /// How many are in line.
    pub(in crate::lock) waiting: Option<u64>,
    /// When a place runs out, ms of server time; -1 for no place.
    pub(in crate::lock) deadline: Option<i64>,
    /// A waiter's record (JSON); empty for none.
    pub(in crate::lock) record: Option<String>,
}

impl Reply for OneKeyReply {
    const SCRIPT: &'static str = "one_key";
    fn decode(fields: &Fields) -> Result<Self, ParsingError> {
        let kind: String = fields.get("kind")?;
        let fence = match fields.optional::<String>("fence")? {
            Some(_) => fields.fence()?,
            None => None,
        };
        if kind == "next" && fence.is_none() {
            return Err("no new fencing token".into());
        }
        Ok(OneKeyReply {
            fence,
            now_us: fields.get("now_us")?,
            pttl: fields.optional("pttl")?,
            holder: fields
                .optional::<HashMap<String, String>>("holder")?
                .and_then(|record| Holder::from_fields(&record)),
            node: fields.get("node")?,
            replicas: fields.get("replicas")?,
            ids: fields.optional("ids")?.unwrap_or_default(),
            waiting: fields.optional("waiting")?,
            deadline: fields.optional("deadline")?,
            record: fields.optional("record")?,
            kind,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::keys::Part;
    use crate::lock::scripts::tests::Server;
    use crate::lock::scripts::Args;

    /// What `one_key.lua` says of `op` on `key`: its `kind`, and its
    /// `fence` when it hands one out.
    fn one_key(conn: &mut redis::Connection, key: &str, op: &[&str]) -> (String, Option<u64>) {
        let part = match op[0].split('_').next() {
            Some("holder") => Part::Holder,
            Some("fence") => Part::Fence,
            _ => Part::Lease,
        };
        let mut argv = Vec::new();
        OneKeyArgs {
            op: op[0],
            holds: part.key().holds,
            name_node: false,
            operands: &op[1..],
        }
        .encode(&mut argv);
        let reply: Vec<redis::Value> = redis::cmd("EVAL")
            .arg(ONE_KEY.code())
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
