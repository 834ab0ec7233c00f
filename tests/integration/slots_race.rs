//! Many runs racing on two keys, one with `--slots 3` and one where
//! `--shared` runs mix with exclusive ones, while holders are killed, frozen
//! past their ttl and Redis is restarted empty: the limits hold throughout,
//! every run ends as a run may, and tokens keep to the order of the grants.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use crate::harness::*;

/// The two keys and the limit each keeps; each has an inside log of its own.
const KEYS: [(&str, Limit); 2] = [
    ("wave", Limit::Slots(3)),
    ("data", Limit::SharedOrExclusive),
];

/// Short leases, so that a dead or frozen holder's place is free again
/// within a second or so.
const TIMING: [&str; 8] = [
    "--ttl",
    "1s",
    "--redis-timeout",
    "200ms",
    "--kill-grace",
    "100ms",
    "--wait",
    "50s",
];
const TTL: Duration = Duration::from_secs(1);

/// The time between two rounds of faults: lets the runs move on between
/// them; nothing waits on it.
const PACE: Duration = Duration::from_millis(350);

/// How long each job stays inside.
const JOB: &str = "0.5";

struct Race {
    runs: Vec<Running>,
    /// Runs the test SIGKILLed: they end without a status.
    killed: Vec<usize>,
    /// Runs the test froze, with their commands, until when.
    frozen: Vec<(usize, i32, Instant)>,
    /// Every run the test froze and the pid of its command.
    were_frozen: Vec<(usize, i32)>,
}

impl Race {
    /// A run that holds on key `key` now, picked with `pick`, not yet hit by
    /// a fault: its entry in the inside log and its index in `runs`.
    fn holder(&mut self, dirs: &[&Path], key: usize, pick: usize) -> Option<(Entry, usize)> {
        let inside = Replay::of(dirs[key], KEYS[key].1).inside;
        let candidates: Vec<(Entry, usize)> = inside
            .into_values()
            .filter_map(|entry| {
                let at = self
                    .runs
                    .iter()
                    .position(|run| run.pid().as_raw() == entry.lockrun_pid)?;
                let hit = self.killed.contains(&at) || self.were_frozen.iter().any(|f| f.0 == at);
                (!hit && self.runs[at].running()).then_some((entry, at))
            })
            .collect();
        let count = candidates.len();
        candidates.into_iter().nth(pick % count.max(1))
    }
}

#[test]
fn slots_and_shared_runs_keep_their_limits_while_holders_and_redis_fail() {
    let mut redis = Server::start();
    let scratch_dirs = [scratch(), scratch()];
    let dirs: Vec<&Path> = scratch_dirs.iter().map(|d| d.path()).collect();
    let mut race = Race {
        runs: Vec::new(),
        killed: Vec::new(),
        frozen: Vec::new(),
        were_frozen: Vec::new(),
    };
    for at in 0..32 {
        let key = at % 2;
        let (kind, args): (&str, &[&str]) = match (key, at / 2 % 3) {
            (0, _) => ("slot", &["--slots", "3"]),
            (_, 0) => ("exclusive", &[]),
            _ => ("shared", &["--shared"]),
        };
        race.runs.push(
            redis
                .lockrun(KEYS[key].0)
                .args(TIMING)
                .args(args)
                .inside_job(dirs[key], kind, JOB)
                .stderr(Stdio::null())
                .spawn(),
        );
    }

    // A small deterministic shuffle, as in the quorum race: the faults
    // differ between rounds, and a failure can be replayed.
    let mut seed: usize = 11;
    let mut pick = |n: usize| {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345) % (1 << 31);
        seed % n
    };
    let until = Instant::now() + Duration::from_secs(30);
    let (mut rounds, mut faults, mut restarts) = (0, Vec::new(), 0);
    while race.runs.iter_mut().any(Running::running) && Instant::now() < until && rounds < 20 {
        rounds += 1;
        // A frozen run is let go once its lease must have run out: lockrun
        // then stops its command, which is still frozen, and exits 76.
        let now = Instant::now();
        race.frozen.retain(|&(at, _, thaw)| {
            let due = thaw <= now;
            if due {
                let _ = kill(race.runs[at].pid(), Signal::SIGCONT);
            }
            !due
        });
        match pick(6) {
            fault @ 0..=3 => {
                let key = fault % 2;
                // Nobody holds that key at the moment: no fault this round.
                let Some((entry, at)) = race.holder(&dirs, key, pick(3)) else {
                    std::thread::sleep(PACE);
                    continue;
                };
                // Taken out of the log before the signal: from then on, what
                // the run still logs does not count, and its place is not
                // free before its lease runs out.
                note_in_log(dirs[key], &format!("evict {}", entry.token));
                if fault < 2 {
                    // A crash: lockrun dies, and its command with it.
                    let _ = kill(race.runs[at].pid(), Signal::SIGKILL);
                    race.killed.push(at);
                    faults.push(format!("killed {} on {}", entry.token, KEYS[key].0));
                } else {
                    // A frozen host: lockrun and its command both stop.
                    let _ = killpg(Pid::from_raw(entry.job_pid), Signal::SIGSTOP);
                    let _ = kill(race.runs[at].pid(), Signal::SIGSTOP);
                    let thaw = Instant::now() + TTL + Duration::from_millis(700);
                    race.frozen.push((at, entry.job_pid, thaw));
                    race.were_frozen.push((at, entry.job_pid));
                    faults.push(format!("froze {} on {}", entry.token, KEYS[key].0));
                }
            }
            4 if restarts < 2 => {
                // Every lease is lost with the restart. The clock is read once
                // Redis is dead: every token granted before is below it,
                // every token granted after is at least it.
                redis.kill();
                let at = now_micros();
                for dir in &dirs {
                    note_in_log(dir, &format!("restart {at}"));
                }
                redis.restart_empty();
                restarts += 1;
                faults.push("restarted Redis empty".to_string());
            }
            _ => {}
        }
        std::thread::sleep(PACE);
    }
    for &(at, _, _) in &race.frozen {
        let _ = kill(race.runs[at].pid(), Signal::SIGCONT);
    }

    for (at, run) in race.runs.iter_mut().enumerate() {
        let ended = run.wait_for(PATIENCE);
        assert!(ended.is_some(), "run {at} never ended; faults: {faults:?}");
        let code = ended.and_then(|status| status.code());
        // 0: ran; 76: lost its lease to a fault and stopped; 75: its wait
        // ran out. Anything else is a failure of lockrun itself. A run the
        // test SIGKILLed has no status, unless it had just ended.
        let killed = race.killed.contains(&at) && code.is_none();
        assert!(
            killed || matches!(code, Some(0 | 75 | 76)),
            "run {at} exited {code:?}; faults: {faults:?}"
        );
    }
    for &(at, job) in &race.were_frozen {
        assert!(
            eventually(PATIENCE, || !alive(job)),
            "the frozen command of run {at} outlived its lease"
        );
        // Nothing of it may run again, stopped or not.
        let _ = killpg(Pid::from_raw(job), Signal::SIGCONT);
    }

    // The logs, whole now: the replay fails at the first entry that breaks
    // a limit or the order of tokens.
    for (key, (name, limit)) in KEYS.iter().enumerate() {
        let replay = Replay::of(dirs[key], *limit);
        eprintln!(
            "{name}: {} entries, at most {} inside, shared together: {}; {rounds} rounds: {faults:?}",
            replay.entries.len(),
            replay.most_inside,
            replay.shared_together
        );
        assert!(
            !replay.entries.is_empty(),
            "no run got {name} in {rounds} rounds"
        );
        if let Limit::SharedOrExclusive = limit {
            let exclusive = replay.entries.iter().filter(|e| e.exclusive()).count();
            assert!(
                exclusive > 0 && exclusive < replay.entries.len(),
                "{:?}",
                replay.entries
            );
        }
    }
    // What dead and frozen holders left runs out with their leases; the
    // counter and the runs' history stay.
    let clean = eventually(PATIENCE, || {
        redis
            .keys()
            .iter()
            .all(|key| key.ends_with(":fence") || key.ends_with(":history"))
    });
    assert!(clean, "left in Redis: {:?}", redis.keys());
}
