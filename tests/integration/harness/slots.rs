//! Runs that share a key (`--slots N`, `--shared`): waiters that take their place in line, the job that logs who is inside, and the replay of that log that checks how many were.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::{eventually, read_log, Holder, Lockrun, Server, PATIENCE};

impl Lockrun<'_> {
    /// Starts this run of `HOLD_UNTIL_GO` and returns once it has its
    /// place in line for lock `name` in `redis` and listens for its wake-up
    /// message, so that runs started one after the other arrive in that
    /// order.
    pub fn wait_in_line(self, redis: &Server, name: &str) -> Holder {
        let before = redis.in_line(name);
        let listening = redis.listening_waiters(name);
        let mut waiter = self.spawn_waiter();
        let queued = eventually(PATIENCE, || {
            !waiter.run.running()
                || (redis.in_line(name) > before && redis.listening_waiters(name) > listening)
        });
        assert!(
            queued && waiter.run.running(),
            "the run never took its place in line for {name}: {}",
            waiter.stderr()
        );
        waiter
    }
}

/// The `LOCKRUN_SLOT` that `HOLD_UNTIL_GO` wrote in `dir`, once it is
/// there; None when the variable was not set.
pub fn slot_in(dir: &Path) -> Option<u32> {
    let text = super::read_when_ready(&dir.join("slot"));
    (!text.is_empty()).then(|| {
        text.parse()
            .unwrap_or_else(|_| panic!("{text:?} is not a slot"))
    })
}

/// A job that logs when it is inside: `enter KIND TOKEN SLOT LOCKRUN_PID
/// JOB_PID` (SLOT `-` without `--slots`) to `log` in $1, stays $2 seconds,
/// then logs `leave TOKEN`. Each line is one append, so the log's order is
/// the order of the events. $3 is the kind of run: `slot`, `shared` or
/// `exclusive`, with a name after a `:` if the test wants one (`shared:s4`).
const INSIDE_JOB: &str = r#"echo "enter $3 $LOCKRUN_FENCING_TOKEN ${LOCKRUN_SLOT:--} $PPID $$" >> "$1/log"
sleep "$2"
echo "leave $LOCKRUN_FENCING_TOKEN" >> "$1/log""#;

impl Lockrun<'_> {
    /// Runs `INSIDE_JOB` in `dir` as a run of `kind`, inside for `seconds`.
    pub fn inside_job(self, dir: &Path, kind: &str, seconds: &str) -> Self {
        self.sh(INSIDE_JOB, dir).command([seconds, kind])
    }
}

/// Appends a line of the test's own to the inside log in `dir`: `evict
/// TOKEN` before it kills or freezes the run that holds with TOKEN, `restart
/// MICROS` before it restarts Redis empty.
pub fn note_in_log(dir: &Path, line: &str) {
    use std::io::Write;
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("log"))
        .expect("open the inside log");
    log.write_all(format!("{line}\n").as_bytes())
        .expect("append to the inside log");
}

/// The wall clock in µs, as Redis's `TIME` gives it on this machine: the
/// first fencing token that a Redis restarted empty after this moment can
/// hand out is at least this.
pub fn now_micros() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    u64::try_from(since.as_micros()).expect("µs fit in u64")
}

/// One run's entry, as `INSIDE_JOB` logged it.
#[derive(Clone, Debug)]
pub struct Entry {
    /// `slot`, `shared` or `exclusive`, and the name after it, if any.
    pub kind: String,
    pub name: String,
    pub token: u64,
    pub slot: Option<u32>,
    pub lockrun_pid: i32,
    pub job_pid: i32,
}

impl Entry {
    pub fn exclusive(&self) -> bool {
        self.kind == "exclusive"
    }
}

/// How many runs of one kind may be inside at once.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    /// `--slots N`: at most N, each in a slot of its own below N.
    Slots(u32),
    /// `--shared` runs together, exclusive runs alone.
    SharedOrExclusive,
}

/// The inside log of one key replayed in order, with every rule checked on
/// the way; `replay` fails the test at the first line that breaks one.
///
/// A run counts as inside from its `enter` line to its `leave` line: it was
/// granted the lock before the first and gives it back after the second, so
/// the runs the log shows inside at any moment all held the key then. The
/// test's own `evict` and `restart` lines take out runs that lost their
/// lease to a fault it caused (a frozen or killed holder, Redis restarted
/// empty); whatever such a run logs afterwards is ignored, since it no
/// longer holds anything to check.
#[derive(Debug, Default)]
pub struct Replay {
    /// Every entry that counted, in log order.
    pub entries: Vec<Entry>,
    /// The runs inside at the end of the log, by token.
    pub inside: BTreeMap<u64, Entry>,
    /// The most runs inside at once.
    pub most_inside: usize,
    /// Whether shared runs were ever inside together.
    pub shared_together: bool,
    /// Tokens of runs taken out by the test, and the restarts' floor: a
    /// token below it was granted before the last restart.
    evicted: BTreeSet<u64>,
    floor: u64,
    /// Every later entry must have a larger token than this: the largest
    /// token of a moment when every place was taken (no run not yet seen
    /// can have been granted before that moment).
    watermark: u64,
    seen: BTreeSet<u64>,
}

impl Replay {
    /// Replays the inside log in `dir` under `limit`.
    #[track_caller]
    pub fn of(dir: &Path, limit: Limit) -> Replay {
        let mut log = read_log(&dir.join("log"));
        // A line still being written, while the runs race, is left for later.
        log.truncate(log.rfind('\n').map_or(0, |end| end + 1));
        let mut replay = Replay::default();
        for (number, line) in log.lines().enumerate() {
            replay.line(line, limit).unwrap_or_else(|why| {
                panic!(
                    "line {} of the inside log: {line:?}: {why}\n{log}",
                    number + 1
                )
            });
        }
        replay
    }

    fn stale(&self, token: u64) -> bool {
        token < self.floor || self.evicted.contains(&token)
    }

    fn line(&mut self, line: &str, limit: Limit) -> Result<(), String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let number = |at: usize| -> Result<u64, String> {
            words
                .get(at)
                .and_then(|word| word.parse().ok())
                .ok_or_else(|| format!("no number at word {at}"))
        };
        match words.first().copied() {
            Some("evict") => {
                let token = number(1)?;
                self.inside.remove(&token);
                self.evicted.insert(token);
            }
            Some("restart") => {
                self.floor = number(1)?;
                let floor = self.floor;
                let lost: Vec<u64> = self.inside.range(..floor).map(|(&t, _)| t).collect();
                for token in lost {
                    self.inside.remove(&token);
                    self.evicted.insert(token);
                }
            }
            Some("leave") => {
                let token = number(1)?;
                if !self.stale(token) && self.inside.remove(&token).is_none() {
                    return Err(format!("{token} left without having entered"));
                }
            }
            Some("enter") => {
                let (kind, name) = match words.get(1).ok_or("no kind")?.split_once(':') {
                    Some((kind, name)) => (kind.to_string(), name.to_string()),
                    None => (words[1].to_string(), String::new()),
                };
                let entry = Entry {
                    kind,
                    name,
                    token: number(2)?,
                    slot: match words.get(3).copied() {
                        Some("-") => None,
                        _ => Some(u32::try_from(number(3)?).map_err(|_| "slot too large")?),
                    },
                    lockrun_pid: i32::try_from(number(4)?).map_err(|_| "pid")?,
                    job_pid: i32::try_from(number(5)?).map_err(|_| "pid")?,
                };
                if !self.stale(entry.token) {
                    self.enter(entry, limit)?;
                }
            }
            _ => return Err("not a line of the inside log".into()),
        }
        Ok(())
    }

    fn enter(&mut self, entry: Entry, limit: Limit) -> Result<(), String> {
        let token = entry.token;
        if !self.seen.insert(token) {
            return Err(format!("token {token} handed out twice"));
        }
        if token <= self.watermark {
            return Err(format!(
                "token {token} granted after a full house whose largest token was {}",
                self.watermark
            ));
        }
        let full = match limit {
            Limit::Slots(n) => {
                let slot = entry.slot.ok_or("a run with --slots got no LOCKRUN_SLOT")?;
                if slot >= n {
                    return Err(format!("slot {slot} of {n}"));
                }
                if let Some(other) = self.inside.values().find(|e| e.slot == Some(slot)) {
                    return Err(format!("slot {slot} is {}'s, still inside", other.token));
                }
                if self.inside.len() >= n as usize {
                    return Err(format!(
                        "{} inside already: {:?}",
                        self.inside.len(),
                        self.inside
                    ));
                }
                self.inside.len() + 1 == n as usize
            }
            Limit::SharedOrExclusive => {
                if entry.slot.is_some() {
                    return Err("LOCKRUN_SLOT set without --slots".into());
                }
                if entry.exclusive() && !self.inside.is_empty() {
                    return Err(format!("an exclusive run entered with {:?}", self.inside));
                }
                if let Some(other) = self.inside.values().find(|e| e.exclusive()) {
                    return Err(format!("entered beside exclusive {}", other.token));
                }
                if !entry.exclusive() && !self.inside.is_empty() {
                    self.shared_together = true;
                }
                // An exclusive run alone: every earlier grant was before its.
                if entry.exclusive() {
                    if let Some(&earlier) = self.seen.range(token..).nth(1) {
                        return Err(format!("exclusive {token} granted after {earlier}"));
                    }
                }
                entry.exclusive()
            }
        };
        self.inside.insert(token, entry.clone());
        self.most_inside = self.most_inside.max(self.inside.len());
        if full {
            self.watermark = self.inside.keys().copied().max().unwrap_or(0);
        }
        self.entries.push(entry);
        Ok(())
    }

    /// The entry of the run named `name`.
    #[track_caller]
    pub fn named(&self, name: &str) -> (usize, &Entry) {
        self.entries
            .iter()
            .enumerate()
            .find(|(_, e)| e.name == name)
            .unwrap_or_else(|| panic!("{name} never entered: {:?}", self.entries))
    }
}

/// The entry of `holders` in `status --json` output `json` that has
/// `token`; fails the test naming the token when it is not listed.
pub fn listed_holder<'j>(json: &'j serde_json::Value, token: &str) -> &'j serde_json::Value {
    json["holders"]
        .as_array()
        .expect("a holders array")
        .iter()
        .find(|entry| entry["token"] == token)
        .unwrap_or_else(|| panic!("{token} not listed: {json}"))
}
