//! The Redis names of one lock and the token that says which run holds it.
//!
//! Every key of lock NAME under prefix P shares the hash tag `{NAME}`, so
//! that they live in one cluster slot and one script can touch them
//! together. `LOCK_KEYS` declares them once, for Rust and for the scripts.

use std::ops::Index;

/// Declares the keys of a lock: one line each, in the order the scripts
/// that take them all receive them.
macro_rules! lock_keys {
    ($(
        $(#[doc = $doc:literal])*
        $part:ident = $lua:literal, $suffix:literal, $holds:literal, $scope:ident, $what:literal;
    )*) => {
        /// The keys of a lock, by what lockrun keeps in them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Part {
            $($(#[doc = $doc])* $part,)*
        }

        /// Every part, in order.
        pub(crate) const EVERY_PART: &[Part] = &[$(Part::$part,)*];

        /// Every key of a lock, in `Part`'s order.
        pub(crate) const LOCK_KEYS: &[Key] = &[$(Key {
            part: Part::$part,
            lua: $lua,
            suffix: $suffix,
            holds: $holds,
            scope: Scope::$scope,
            what: $what,
        },)*];
    };
}

/// One key of a lock.
pub(crate) struct Key {
    pub(crate) part: Part,
    /// Its name in the scripts (`local LEASE = KEYS[1]`).
    pub(crate) lua: &'static str,
    /// What follows `P{NAME}` in its Redis name, for lock NAME under
    /// prefix P. No suffix ends another, so a key names one lock.
    pub(crate) suffix: &'static str,
    /// The Redis type lockrun keeps in it (`lock/scripts/guard.lua`).
    pub(crate) holds: &'static str,
    pub(crate) scope: Scope,
    /// What lockrun keeps in it, for a message about someone else's data
    /// found there.
    pub(crate) what: &'static str,
}

/// When a key of a lock exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Whenever a run holds the lock alone, and nobody else holds or waits.
    Alone,
    /// Only while other runs are involved: runs waiting in line, or runs
    /// holding the lock together (`--slots`, `--shared`). While none of
    /// these keys exists (one `EXISTS` tells), nobody waits for the lock
    /// and nobody holds it together, which is how a lock that is not
    /// contended looks: a script that finds so skips the line's bookkeeping
    /// and guards only the keys of scope `Alone`, for they are all that it
    /// touches then. Each `redis.call` costs a script far more than the
    /// command itself does, and a run makes two such calls.
    Crowd,
}

lock_keys! {
    /// The lease of a run holding the lock alone: its token, with the
    /// lease's expiry.
    Lease = "LEASE", "", "string", Alone, "a lockrun lease";
    /// The record of the run holding the lock alone (a hash).
    Holder = "HOLDER", ":holder", "hash", Alone, "a lockrun holder record";
    /// The last fencing token handed out.
    Fence = "FENCE", ":fence", "string", Alone, "a lockrun fencing counter";
    /// The waiting runs in arrival order: waiter id -> arrival (server time
    /// in µs, strictly increasing).
    Queue = "QUEUE", ":queue", "zset", Crowd, "a lockrun wait queue";
    /// When each waiting run's place runs out: waiter id -> server time in
    /// ms.
    Places = "PLACES", ":places", "zset", Crowd,
        "the deadlines of a lockrun wait queue's places";
    /// Each waiting run's record (JSON), or why it was taken out.
    Waiters = "WAITERS", ":waiters", "hash", Crowd, "the records of a lockrun wait queue";
    /// The waiting runs that gave `--supersede`: waiter id -> arrival.
    Supersedable = "SUPERSEDABLE", ":supersedable", "zset", Crowd,
        "a lockrun wait queue's --supersede runs";
    /// The success a `--once-per` run recorded (a hash), until its period
    /// ends.
    Done = "DONE", ":done", "hash", Alone, "a lockrun --once-per success record";
    /// When the lease of each run holding the lock together (`--slots`,
    /// `--shared`) runs out: token -> server time in ms.
    Leases = "LEASES", ":leases", "zset", Crowd, "the leases of a lockrun lock held together";
    /// Each of those runs' holder record (JSON).
    Holders = "HOLDERS", ":holders", "hash", Crowd,
        "the holder records of a lockrun lock held together";
    /// The last runs that started the command, newest first (JSON each),
    /// written by their release and capped at their `--history`. Scope
    /// `Alone`, as the fence: it outlives the runs, and a release guards it
    /// before it writes.
    History = "HISTORY", ":history", "list", Alone, "a lockrun run history";
}

/// What follows the lease's key in the name of the channel on which a
/// waiting run with token T is told that the lock is its own, that it is
/// first in line, or that it was superseded: `LEASE:wake:T`. A channel is
/// not a key, so one per waiter keeps every script within its keys.
pub(crate) const WAKE: &str = ":wake:";

impl Part {
    /// Its line of `LOCK_KEYS`.
    pub(crate) fn key(self) -> &'static Key {
        &LOCK_KEYS[self as usize]
    }
}

/// The Redis names belonging to one lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    /// The name given to `--key`, for the operator's messages; the Redis
    /// names appear only with --verbose and in `lockrun status`.
    pub(crate) name: String,
    /// `P{NAME}`: the lease's key, which every other key's name and every
    /// wake-up channel's starts with.
    pub(crate) lock: String,
    /// Each key's Redis name, in `Part`'s order.
    redis: [String; LOCK_KEYS.len()],
}

impl Keys {
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let lock = format!("{prefix}{{{name}}}");
        Keys {
            redis: std::array::from_fn(|i| format!("{lock}{}", LOCK_KEYS[i].suffix)),
            lock,
            name: name.to_owned(),
        }
    }

    /// What lockrun keeps under `key`, one of this lock's keys.
    pub(crate) fn part_of(&self, key: &str) -> Part {
        LOCK_KEYS
            .iter()
            .find_map(|k| (self[k.part] == *key).then_some(k.part))
            .unwrap_or(Part::Lease)
    }

    /// The channel on which the run with `token` is told, while it waits,
    /// that the lock is its own, that it is first in line, or that it was
    /// superseded.
    pub(crate) fn wake_channel(&self, token: &str) -> String {
        format!("{}{WAKE}{token}", self.lock)
    }

    /// The `--prefix` the lock's keys and channels start with.
    pub(crate) fn prefix(&self) -> &str {
        let tag = self.name.len() + 2;
        &self.lock[..self.lock.len() - tag]
    }
}

impl Index<Part> for Keys {
    type Output = str;

    fn index(&self, part: Part) -> &str {
        &self.redis[part as usize]
    }
}

/// The `SCAN` pattern for every key of the locks under `prefix` whose name
/// matches `glob` (Redis glob syntax). The prefix is matched as it is
/// written, whatever glob characters it has.
pub(crate) fn scan_pattern(prefix: &str, glob: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + glob.len() + 3);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('{');
    pattern.push_str(glob);
    pattern.push_str("}*");
    pattern
}

/// The name of the lock that `key` belongs to, when it is one of the keys
/// lockrun keeps for a lock under `prefix`; `None` for any other key. No
/// suffix ends another, so at most one fits.
pub(crate) fn name_of<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    let tagged = key.strip_prefix(prefix)?.strip_prefix('{')?;
    LOCK_KEYS.iter().find_map(|key| {
        tagged
            .strip_suffix(key.suffix)?
            .strip_suffix('}')
            .filter(|name| !name.is_empty())
    })
}

/// 128 bits from the OS CSPRNG, as hex: unique per acquisition and
/// unguessable, so no other run can renew or release our lease by accident.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Token(String);

impl Token {
    pub(crate) fn generate() -> std::io::Result<Self> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|err| match err.raw_os_error() {
            Some(errno) => std::io::Error::from_raw_os_error(errno),
            None => std::io::Error::other(err.to_string()),
        })?;
        Ok(Token(format!("{:032x}", u128::from_be_bytes(bytes))))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = Keys::new("lockrun:", "billing");
        assert_eq!(keys.lock, "lockrun:{billing}");
        assert_eq!(&keys[Part::Lease], "lockrun:{billing}");
        assert_eq!(&keys[Part::Holder], "lockrun:{billing}:holder");
        assert_eq!(&keys[Part::Fence], "lockrun:{billing}:fence");
        assert_eq!(&keys[Part::Queue], "lockrun:{billing}:queue");
        assert_eq!(&keys[Part::Supersedable], "lockrun:{billing}:supersedable");
        assert_eq!(keys.prefix(), "lockrun:");
    }

    #[test]
    fn every_key_is_known_by_what_it_holds() {
        let keys = Keys::new("lockrun:", "job");
        for (i, key) in LOCK_KEYS.iter().enumerate() {
            assert_eq!(key.part as usize, i, "{}", key.lua);
            assert_eq!(keys.part_of(&keys[key.part]), key.part, "{}", key.lua);
        }
    }

    #[test]
    fn every_key_of_a_lock_names_it_and_no_other_key_does() {
        for name in ["billing", "a}b", "x}:fence", "{}"] {
            let keys = Keys::new("team:", name);
            for key in LOCK_KEYS {
                let key = &keys[key.part];
                assert_eq!(name_of("team:", key), Some(name), "{key}");
            }
        }
        for other in [
            "team:{a}:other",
            "team:{}",
            "team:a",
            "lockrun:{a}",
            "team:{a}:wake:x",
        ] {
            assert_eq!(name_of("team:", other), None, "{other}");
        }
    }

    #[test]
    fn the_scan_pattern_takes_the_prefix_as_written() {
        assert_eq!(scan_pattern("lockrun:", "*"), "lockrun:{*}*");
        assert_eq!(
            scan_pattern("a*[b]?\\:", "bill*"),
            "a\\*\\[b\\]\\?\\\\:{bill*}*"
        );
    }

    #[test]
    fn tokens_are_128_random_bits_in_hex() {
        let a = Token::generate().expect("OS randomness");
        let b = Token::generate().expect("OS randomness");
        assert_eq!(a.0.len(), 32);
        assert!(a.0.bytes().all(|c| c.is_ascii_hexdigit()));
        assert!(a != b);
    }
}
