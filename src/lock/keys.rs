//! The Redis names of one lock and the token that says which run holds it.
//!
//! Every key of lock NAME under prefix P shares the hash tag `{NAME}`, so
//! that they live in one cluster slot and one script can touch them
//! together (`docs/design.md` lists what each holds).

use super::script::Call;

/// The Redis names belonging to one lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    /// The name given to `--key`, for the operator's messages; the Redis
    /// names appear only with --verbose and in `lockrun status`.
    pub(crate) name: String,
    pub(crate) lock: String,
    pub(crate) holder: String,
    pub(crate) fence: String,
    pub(crate) queue: String,
    pub(crate) places: String,
    pub(crate) waiters: String,
    pub(crate) supersedable: String,
    pub(crate) done: String,
    pub(crate) leases: String,
    pub(crate) holders: String,
}

/// The keys of a lock, by what lockrun keeps in them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    Lease,
    Holder,
    Fence,
    /// The waiting runs in arrival order.
    Queue,
    /// When each waiting run's place runs out.
    Places,
    /// Each waiting run's record.
    Waiters,
    /// The waiting runs that gave `--supersede`.
    Supersedable,
    /// The success a `--once-per` run recorded, until its period ends.
    Done,
    /// When the lease of each run holding the lock together (`--slots`,
    /// `--shared`) runs out.
    Leases,
    /// Each of those runs' holder record.
    Holders,
}

impl Keys {
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let lock = format!("{prefix}{{{name}}}");
        Keys {
            holder: format!("{lock}:holder"),
            fence: format!("{lock}:fence"),
            queue: format!("{lock}:queue"),
            places: format!("{lock}:places"),
            waiters: format!("{lock}:waiters"),
            supersedable: format!("{lock}:supersedable"),
            done: format!("{lock}:done"),
            leases: format!("{lock}:leases"),
            holders: format!("{lock}:holders"),
            lock,
            name: name.to_owned(),
        }
    }

    /// Every key with what it holds, in the order `lock/queue.lua` expects
    /// them as KEYS.
    fn parts(&self) -> [(&str, Part); 10] {
        [
            (&self.lock, Part::Lease),
            (&self.holder, Part::Holder),
            (&self.fence, Part::Fence),
            (&self.queue, Part::Queue),
            (&self.places, Part::Places),
            (&self.waiters, Part::Waiters),
            (&self.supersedable, Part::Supersedable),
            (&self.done, Part::Done),
            (&self.leases, Part::Leases),
            (&self.holders, Part::Holders),
        ]
    }

    /// What lockrun keeps under `key`, one of this lock's keys.
    pub(crate) fn part_of(&self, key: &str) -> Part {
        self.parts()
            .into_iter()
            .find_map(|(name, part)| (name == key).then_some(part))
            .unwrap_or(Part::Lease)
    }

    /// The channel on which the run with `token` is told, while it waits,
    /// that the lock is its own, that it is first in line, or that it was
    /// superseded.
    pub(crate) fn wake_channel(&self, token: &Token) -> String {
        format!("{}:wake:{}", self.lock, token.0)
    }

    /// The `--prefix` the lock's keys and channels start with.
    pub(crate) fn prefix(&self) -> &str {
        let tag = self.name.len() + 2;
        &self.lock[..self.lock.len() - tag]
    }

    /// Every key of the lock, as the scripts behind `lock/queue.lua` take
    /// them.
    pub(crate) fn add_to(&self, call: &mut Call) {
        for (key, _) in self.parts() {
            call.key(key);
        }
    }
}

/// What follows `P{NAME}` in each key of lock NAME, as `Keys::new` names
/// them: the lease, then the holder, the fence, the line's keys, the
/// recorded success and the leases held together.
const SUFFIXES: [&str; 10] = [
    "",
    ":holder",
    ":fence",
    ":queue",
    ":places",
    ":waiters",
    ":supersedable",
    ":done",
    ":leases",
    ":holders",
];

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
    SUFFIXES.iter().find_map(|suffix| {
        tagged
            .strip_suffix(suffix)?
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
        assert_eq!(keys.holder, "lockrun:{billing}:holder");
        assert_eq!(keys.fence, "lockrun:{billing}:fence");
        assert_eq!(keys.queue, "lockrun:{billing}:queue");
        assert_eq!(keys.supersedable, "lockrun:{billing}:supersedable");
    }

    #[test]
    fn every_key_is_known_by_what_it_holds() {
        let keys = Keys::new("lockrun:", "job");
        for (key, part) in [
            (&keys.lock, Part::Lease),
            (&keys.holder, Part::Holder),
            (&keys.fence, Part::Fence),
            (&keys.queue, Part::Queue),
            (&keys.places, Part::Places),
            (&keys.waiters, Part::Waiters),
            (&keys.supersedable, Part::Supersedable),
            (&keys.done, Part::Done),
            (&keys.leases, Part::Leases),
            (&keys.holders, Part::Holders),
        ] {
            assert_eq!(keys.part_of(key), part, "{key}");
        }
    }

    #[test]
    fn every_key_of_a_lock_names_it_and_no_other_key_does() {
        for name in ["billing", "a}b", "x}:fence", "{}"] {
            let keys = Keys::new("team:", name);
            for (key, _) in keys.parts() {
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
