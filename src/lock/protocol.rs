//! The names that the Rust calls and the Lua scripts share, declared once:
//! the keys of a lock, and each script's keys and arguments.
//!
//! `build.rs` compiles this file too, and writes from it the head of each
//! script: a `local NAME = KEYS[i]` line for each key and a
//! `local NAME = ARGV[j]` line for each argument, in the order a call sends
//! them (`lock/script.rs`). The scripts use those names only, so a call
//! cannot send its arguments in an order other than the one its script
//! reads them in, and an argument added here without its script using it
//! fails a unit test. Plain Rust without dependencies, for the build script.

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
    /// Its name in the scripts.
    #[allow(dead_code)] // Read by build.rs and the tests.
    pub(crate) lua: &'static str,
    /// What follows `P{NAME}` in its Redis name, for lock NAME under
    /// prefix P. No suffix ends another, so a key names one lock.
    pub(crate) suffix: &'static str,
    /// The Redis type lockrun keeps in it (`lock/guard.lua`).
    pub(crate) holds: &'static str,
    #[allow(dead_code)] // Read by build.rs.
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

/// Which keys a script takes, as its `KEYS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Takes {
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

/// A script's call: its keys, and its arguments in order.
pub(crate) trait Args {
    const TAKES: Takes;
    /// The arguments' names, as the script calls them (upper-cased).
    const ARGV: &'static [&'static str];
    /// The arguments, in `ARGV`'s order.
    fn encode(&self, argv: &mut Vec<Vec<u8>>);
}

/// One argument as a script receives it: a string.
pub(crate) trait Arg {
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
pub(crate) trait Rest {
    fn put_all(&self, argv: &mut Vec<Vec<u8>>);
}

impl Rest for &[&str] {
    fn put_all(&self, argv: &mut Vec<Vec<u8>>) {
        for arg in *self {
            arg.put(argv);
        }
    }
}

/// One declared script, as `build.rs` reads it.
#[allow(dead_code)] // Read by build.rs and the tests.
pub(crate) struct Declared {
    /// Its file in `src/lock/`, without `.lua`.
    pub(crate) script: &'static str,
    pub(crate) takes: Takes,
    pub(crate) argv: &'static [&'static str],
    /// The name of the `Args` type.
    pub(crate) rust: &'static str,
    /// Whether that type has a lifetime.
    pub(crate) borrows: bool,
    /// Whether its last argument is a list (`Rest`).
    pub(crate) rest: bool,
}

/// Declares each script: its file, its keys, and its arguments as the
/// fields of a struct, in the order they are sent. `..` before the last
/// field makes it a list of any length.
macro_rules! scripts {
    ($(
        $(#[doc = $doc:literal])*
        $script:literal takes $takes:expr => $name:ident $(<$lt:lifetime>)? {
            $($(#[doc = $fdoc:literal])* $field:ident: $ty:ty,)*
            $(.. $(#[doc = $rdoc:literal])* $rest:ident: $rty:ty,)?
        }
    )*) => {
        $(
            $(#[doc = $doc])*
            pub(crate) struct $name $(<$lt>)? {
                $($(#[doc = $fdoc])* pub(crate) $field: $ty,)*
                $($(#[doc = $rdoc])* pub(crate) $rest: $rty,)?
            }

            impl $(<$lt>)? Args for $name $(<$lt>)? {
                const TAKES: Takes = $takes;
                const ARGV: &'static [&'static str] =
                    &[$(stringify!($field),)* $(stringify!($rest))?];
                #[allow(unused_variables)]
                fn encode(&self, argv: &mut Vec<Vec<u8>>) {
                    $(Arg::put(&self.$field, argv);)*
                    $(Rest::put_all(&self.$rest, argv);)?
                }
            }
        )*

        /// Every declared script.
        #[allow(dead_code)] // Read by build.rs and the tests.
        pub(crate) const DECLARED: &[Declared] = &[$(Declared {
            script: $script,
            takes: $takes,
            argv: &[$(stringify!($field),)* $(stringify!($rest))?],
            rust: stringify!($name),
            borrows: { let lifetimes: &[&str] = &[$(stringify!($lt))?]; !lifetimes.is_empty() },
            rest: { let rest: &[&str] = &[$(stringify!($rest))?]; !rest.is_empty() },
        },)*];
    };
}

scripts! {
    /// Takes the lock, or a place in its line, or refreshes the place.
    "acquire" takes Takes::Lock => AcquireArgs<'a> {
        /// The run's lock token, also its id in line.
        token: &'a str,
        ttl_ms: u64,
        host: &'a str,
        pid: u32,
        command: &'a str,
        /// To take a place in line when the lock cannot be the run's now;
        /// otherwise it only tries.
        waits: bool,
        /// Its place from an earlier reply, so that a waiter that was
        /// dropped (cut off from Redis too long) gets it back; empty at
        /// first.
        arrival: &'a str,
        /// Whether it listens on its wake-up channel.
        listening: bool,
        /// In a cluster, the id of the node its wake-up subscription is on
        /// (`CLUSTER MYID`); empty elsewhere.
        listens_on: &'a str,
        supersede: bool,
        /// How often it refreshes its place.
        refresh_ms: u64,
        /// `--once-per`: a run that would get the lock while a success is
        /// recorded does not take it.
        once_per: bool,
        /// `--slots N` (1: alone).
        slots: u32,
        shared: bool,
        /// To count the online replicas, for a run that waits for all of
        /// them to acknowledge (`--replica-acks all`): INFO is not cheap.
        count_replicas: bool,
        /// A quorum member up for less than this many seconds does not
        /// vote; 0 outside a quorum.
        min_uptime_s: u64,
    }

    /// Extends a lease held alone that still holds the run's token.
    "renew" takes Takes::Parts(&[Part::Lease, Part::Holder]) => RenewArgs<'a> {
        token: &'a str,
        ttl_ms: u64,
    }

    /// Extends a lease held together (`--slots`, `--shared`) that is still
    /// the run's.
    "renew_together" takes Takes::Parts(&[Part::Leases, Part::Holders]) => RenewTogetherArgs<'a> {
        token: &'a str,
        ttl_ms: u64,
    }

    /// Notes in the holder record how many replicas acknowledged the lease.
    "acked" takes Takes::Parts(&[Part::Lease, Part::Holder]) => AckedArgs<'a> {
        token: &'a str,
        replicas_acked: u32,
    }

    /// Gives the lock up, straight to the first waiter, or keeps it for
    /// `--min-hold`.
    "release" takes Takes::Lock => ReleaseArgs<'a> {
        token: &'a str,
        /// How long to keep it (0: release now).
        keep_ms: u64,
        /// `--once-per`'s period when the command succeeded (0: none).
        period_ms: u64,
        /// How many runs the history keeps (`--history`; 0: this run is not
        /// recorded).
        keep_runs: u32,
        /// The run's record (a JSON object), which the script puts in the
        /// history with the server's time and what the release found;
        /// empty for a run that did not start its command.
        record: &'a str,
    }

    /// Removes the lock whoever holds it (`lockrun release --force`).
    "force_release" takes Takes::Lock => ForceReleaseArgs<'a> {
        /// The token of the one holder to remove; empty for every holder.
        only: &'a str,
    }

    /// Reads the lock and its line, changing nothing.
    "status" takes Takes::Lock => StatusArgs {}

    /// Quorum mode: raises a member's fence counter to the run's token.
    "raise_fence" takes Takes::Lock => RaiseFenceArgs<'a> {
        token: &'a str,
        at_least: u64,
    }

    /// One key of a lock whose cluster slot is being migrated.
    "one_key" takes Takes::One => OneKeyArgs<'a> {
        /// The operation (`lock/one_key.lua` lists them).
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
