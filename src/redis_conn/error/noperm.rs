//! A server's refusal of lockrun's user (NOPERM): which command, key or
//! channel, and the ACL rule that allows it.

use super::{ErrorKind, RedisError};

impl RedisError {
    /// A refused key or channel, with the rule that allows lockrun's keys
    /// and channels under `prefix`: Redis names neither the key nor the
    /// pattern it wanted.
    pub(crate) fn under_prefix(mut self, prefix: &str) -> RedisError {
        if self.kind != ErrorKind::NoPerm || self.detail.contains('\'') {
            return self;
        }
        let pattern = escaped(prefix);
        let sigil = if self.detail.to_lowercase().contains("channel") {
            '&'
        } else {
            '~'
        };
        self.detail = format!("{} '{sigil}{pattern}*'", self.detail);
        self
    }
}

impl RedisError {
    /// Whether the server refused lockrun's user the lock's keys.
    pub(crate) fn is_key_refusal(&self) -> bool {
        self.kind == ErrorKind::NoPerm && self.detail.contains("'~")
    }

    /// Whether the server refused lockrun's user a channel.
    pub(crate) fn is_channel_refusal(&self) -> bool {
        self.kind == ErrorKind::NoPerm && self.detail.to_lowercase().contains("channel")
    }

    /// A refusal of the lock's keys that names the channel rule too, for a
    /// user that lacks both.
    pub(crate) fn and_channels_refused(mut self, prefix: &str) -> RedisError {
        self.detail = format!("{} '&{}*'", self.detail, escaped(prefix));
        self
    }
}

/// `prefix` in an ACL pattern: its glob characters escaped.
fn escaped(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern
}

/// What a NOPERM reply's `detail` says was refused, and the rule to add:
/// the commands it quotes (`'zadd'`), or the key (`~`) or channel (`&`)
/// pattern that `RedisError::under_prefix` put there.
pub(super) fn refused(detail: &str) -> (String, String) {
    let quoted: Vec<&str> = detail.split('\'').skip(1).step_by(2).collect();
    match quoted.first() {
        Some(keys) if keys.starts_with('~') => match quoted.get(1) {
            Some(channels) if channels.starts_with('&') => (
                "access to the lock's keys and wake-up channels".into(),
                format!("'{keys} {channels}'"),
            ),
            _ => ("access to the lock's keys".into(), format!("'{keys}'")),
        },
        Some(pattern) if pattern.starts_with('&') => (
            "access to the lock's wake-up channels".into(),
            format!("'{pattern}'"),
        ),
        Some(_) => {
            let quoted: Vec<&str> = quoted.into_iter().flat_map(subcommands).collect();
            let names: Vec<String> = quoted.iter().map(|name| format!("'{name}'")).collect();
            let rules: Vec<String> = quoted.iter().map(|name| format!("+{name}")).collect();
            (
                format!("the command {}", names.join(" or ")),
                format!("'{}'", rules.join(" ")),
            )
        }
        None if detail.to_lowercase().contains("channel") => (
            "access to the lock's wake-up channels".into(),
            "a '&' rule for them (--prefix then '*')".into(),
        ),
        None if detail.to_lowercase().contains("key") => (
            "access to the lock's keys".into(),
            "a '~' rule for them (--prefix then '*')".into(),
        ),
        None => (
            format!("a command ({detail})"),
            "the rules of its use".into(),
        ),
    }
}

/// The subcommands of a container command that lockrun sends and that can
/// be refused: Redis before 7 names only the container (`'sentinel'`), and
/// the rule for the container alone would allow all its subcommands. Of
/// `CLUSTER`, lockrun sends `SLOTS` (the slot map), `MYID` and
/// `NODES` (to find the node that took a write, or that a waiter listens
/// on): such a refusal names the three, as REDIS PERMISSIONS does; Redis 7
/// names the one refused in full.
fn subcommands(name: &str) -> Vec<&str> {
    match name {
        "sentinel" => vec!["sentinel|get-master-addr-by-name"],
        "cluster" => vec!["cluster|slots", "cluster|myid", "cluster|nodes"],
        "pubsub" => vec!["pubsub|numsub"],
        other => vec![other],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_conn::Target;

    #[test]
    fn a_refused_permission_names_the_rule_to_add() {
        let target = Target::parse("redis://h:1", None).expect("valid");
        let noperm =
            |detail: &str| redis::make_extension_error("NOPERM".into(), Some(detail.into()));
        let line = |err: RedisError| {
            assert_eq!(err.kind, ErrorKind::NoPerm);
            let line = err.to_string();
            assert!(
                line.ends_with("to its ACL rules (see man lockrun-redis, REDIS PERMISSIONS)"),
                "{line}"
            );
            line
        };
        let scan = target.error(&noperm(
            "this user has no permissions to run the 'scan' command",
        ));
        assert!(line(scan).starts_with(
            "Redis at redis://h:1 refused lockrun's user the command 'scan' (NOPERM); add '+scan'"
        ));
        let key = target.error(&noperm("No permissions to access a key"));
        let key = key.under_prefix("jobs[1]:");
        assert!(key.is_key_refusal() && !key.is_channel_refusal());
        assert!(line(key.clone()).contains("keys (NOPERM); add '~jobs\\[1\\]:*'"));
        assert!(line(key.and_channels_refused("jobs[1]:"))
            .contains("keys and wake-up channels (NOPERM); add '~jobs\\[1\\]:* &jobs\\[1\\]:*'"));
        let channel = target.error(&noperm("No permissions to access a channel"));
        assert!(
            line(channel.under_prefix("lockrun:")).contains("channels (NOPERM); add '&lockrun:*'")
        );
        // Redis 6.2 names the container command only.
        let old = target.error(&noperm(
            "this user has no permissions to run the 'sentinel' command or its subcommand",
        ));
        assert!(line(old).contains(
            "'sentinel|get-master-addr-by-name' (NOPERM); add '+sentinel|get-master-addr-by-name'"
        ));
        let cluster = target.error(&noperm(
            "this user has no permissions to run the 'cluster' command or its subcommand",
        ));
        assert!(line(cluster).contains("add '+cluster|slots +cluster|myid +cluster|nodes'"));
        let two = target.error(&noperm("no permissions to run the 'type' or 'get' command"));
        assert!(line(two).contains("'type' or 'get' (NOPERM); add '+type +get'"));
        // Another failure keeps its own message, whatever the prefix.
        let other = target.error(&redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "x",
        )));
        assert!(other.under_prefix("p:").to_string().contains("failed"));
    }
}
