//! lockrun while its lock's slot moves: the holder releases within the Redis
//! timeout, the runs waiting in line keep their places, follow the slot to
//! its new owner and get the lock at once, in their order, and runs without
//! `--wait`, trying throughout, never overtake them, whether the release
//! comes during the move (the lock's keys moved first, or still to move) or
//! after it. The slot is moved by hand (`Move`), each state reached at
//! once; one test moves it with a real `redis-cli --cluster reshard`, with
//! enough other keys in the slot for the move to take seconds, as a smoke
//! test of the harness's states. `migration_line.rs` moves the lock's keys
//! by hand, some to each node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::harness::*;

/// Its keys' slot is 0, the lowest slot of whichever primary serves it: the
/// one `redis-cli --cluster reshard` moves first.
const NAME: &str = "job3717";
const LEASE: &str = "lockrun:{job3717}";
const FENCE: &str = "lockrun:{job3717}:fence";
const PLACES: &str = "lockrun:{job3717}:places";
/// Every key a lock can have (src/lock/keys.rs).
const LOCK_KEYS: [&str; 10] = [
    LEASE,
    "lockrun:{job3717}:holder",
    FENCE,
    "lockrun:{job3717}:queue",
    PLACES,
    "lockrun:{job3717}:waiters",
    "lockrun:{job3717}:supersedable",
    "lockrun:{job3717}:done",
    "lockrun:{job3717}:leases",
    "lockrun:{job3717}:holders",
];

/// Other keys in the lock's slot. Moved one per `MIGRATE`
/// (`--cluster-pipeline 1`) beside the runs of the test, they take redis-cli
/// about 3 s on an idle machine, when the holder has released after about
/// 700 of them and both waiters' turns take under a second more: the
/// release and the waiters' turns fall inside the move with room for a
/// loaded machine, which slows the move as it slows the runs.
const FILLER: usize = 15_000;
const PIPELINE: u32 = 1;

/// Every run's lease. The Redis timeout is left to its default, ttl/10 =
/// 300 ms, as where the issue was seen. No replica acknowledges anything:
/// under a loaded machine's full test suite, a `WAIT` alone can take longer
/// than that, and a run would exit 69 for it (topology.rs and acks.rs test
/// acknowledgement; migration_line.rs hands the lock over with it).
const TTL: [&str; 4] = ["--ttl", "3s", "--replica-acks", "0"];
/// A waiter refreshes its place (and polls) every 2 s, so a hand-over seen
/// within `AT_ONCE` was no poll's doing; the kill grace makes room for that
/// period in the ttl.
const WAITING: [&str; 7] = [
    "--wait",
    "60s",
    "--renew-every",
    "2s",
    "--kill-grace",
    "500ms",
    "-v",
];
/// From the holder's exit to the first waiter's start: a hand-over takes
/// milliseconds (up to about 120 here, with the move under way); the rest
/// is for a loaded machine.
const AT_ONCE: Duration = Duration::from_secs(1);
/// From `go` to the holder's exit: its command's 50 ms look for `go`, one
/// release within the 300 ms Redis timeout, and room for a loaded machine.
const PROMPT: Duration = Duration::from_secs(1);

/// Appends `$2 start` and `$2 end` to `order` in $1, 0.3 s apart.
const NOTE: &str = r#"echo "$2 start" >> "$1/order"; sleep 0.3; echo "$2 end" >> "$1/order""#;

/// Whether the real move's filler keys are written into the lock's slot
/// before the lock's keys, which then move first (Redis lists a slot's
/// newest keys first); Valkey 8 lists them in hash order, so that there the
/// lock's keys move one by one at random points of the move. `None`: the
/// slot is moved by hand, and holds no filler.
#[derive(Clone, Copy, PartialEq)]
enum Fill {
    Before,
    None,
}

/// Lock `NAME` in a cluster, held, with two runs waiting in line behind its
/// holder and runs without `--wait` trying throughout. The holder's end
/// shows whether it kept its lease and released it promptly.
struct Scene {
    dir: TempDir,
    holder: Holder,
    waiters: Vec<Running>,
    impatient: Impatient,
}

impl Scene {
    fn start(cluster: &Cluster, fill: Fill) -> Self {
        let url = cluster.url_via(&cluster.primaries());
        let dir = scratch();
        if fill == Fill::Before {
            cluster.fill_slot(LEASE, FILLER);
        }
        let holder = Lockrun::via(&url).key(NAME).args(TTL).hold();
        let owner = cluster.node(cluster.owner(LEASE).0);
        let waiters = ["w1", "w2"]
            .into_iter()
            .enumerate()
            .map(|(ahead, name)| wait_in_line(&url, owner, dir.path(), name, ahead))
            .collect();
        let impatient = Impatient::start(&url, dir.path());
        impatient.wait_for_tries(1, Instant::now());
        Scene {
            dir,
            holder,
            waiters,
            impatient,
        }
    }

    fn stderr_of(&self, name: &str) -> String {
        read_log(&self.dir.path().join(format!("{name}.stderr")))
    }

    /// Lets the holder's command end. lockrun must release within the Redis
    /// timeout and exit 0, saying nothing (a release that timed out says
    /// "no answer within"). Returns when it exited.
    fn release(&mut self, context: &str) -> Instant {
        let go = Instant::now();
        self.holder.go();
        let ran = self.holder.end();
        let exited = Instant::now();
        ran.assert(Expect::success().context(format!("the holder, {context}")));
        let took = exited - go;
        assert!(
            took < PROMPT,
            "the holder took {took:?} to release; {context}"
        );
        println!("the holder exited {took:?} after it was let go");
        exited
    }

    /// Checks that w1 started within `AT_ONCE` of `released`, then that both
    /// waiters ran to a success while runs without `--wait` kept trying.
    fn waiters_ran(&mut self, released: Instant, context: &str) {
        let started = eventually(PATIENCE, || self.order().contains("w1 start"));
        let took = released.elapsed();
        assert!(
            started && took < AT_ONCE,
            "w1 started {took:?} after the release, want within {AT_ONCE:?}; {context}\n\
             the runs that started: {}\nw1 said:\n{}",
            summary(&starts_in_order(&self.order())),
            self.stderr_of("w1")
        );
        println!("w1 started {took:?} after the holder exited");
        for (run, name) in self.waiters.iter_mut().zip(["w1", "w2"]) {
            let code = run.wait().code();
            let said = read_log(&self.dir.path().join(format!("{name}.stderr")));
            assert_eq!(
                code,
                Some(0),
                "{name} failed; {context}\n{name} said:\n{said}"
            );
        }
        let (tried, _) = self.impatient.since(released);
        assert!(
            tried > 0,
            "no run without --wait tried while the waiters ran"
        );
    }

    fn order(&self) -> String {
        read_log(&self.dir.path().join("order"))
    }

    /// After the move, once both waiters ran: a run without `--wait` gets
    /// the lock on its new owner; the lock was granted to w1, then w2, before
    /// any run without `--wait`, one run at a time throughout; and nothing
    /// of the lock is left but its fence counter, on its slot's owner.
    fn ends_as_normal(mut self, cluster: &Cluster, context: &str) {
        let after = Instant::now();
        self.impatient.wait_for_ran(after);
        let tries = self.impatient.stop();
        let starts = starts_in_order(&self.order());
        assert_eq!(
            starts.get(..2),
            Some(&["w1".to_owned(), "w2".to_owned()][..]),
            "runs without --wait overtook the line; {context}\nthe runs that started: {}\n\
             w1 said:\n{}\nw2 said:\n{}",
            summary(&starts),
            self.stderr_of("w1"),
            self.stderr_of("w2")
        );
        for (name, code, stderr) in &tries {
            assert!(
                matches!(code, Some(0 | 75)),
                "{name} ended with {code:?}: {stderr}"
            );
        }
        let only_fence = vec![(cluster.owner(LEASE).0, vec![FENCE.to_owned()])];
        eventually(Duration::from_secs(1), || {
            lock_keys_on(cluster) == only_fence
        });
        assert_eq!(
            lock_keys_on(cluster),
            only_fence,
            "the lock's keys on each primary"
        );
    }
}

/// The lock's keys on each primary that has any, as a client that follows
/// an ASK sees them.
fn lock_keys_on(cluster: &Cluster) -> Vec<(u16, Vec<String>)> {
    cluster
        .primaries()
        .into_iter()
        .map(|port| (port, keys_held_by(cluster.node(port), &LOCK_KEYS)))
        .filter(|(_, keys)| !keys.is_empty())
        .collect()
}

/// When each place in the lock's line runs out (ms, Redis's clock), by
/// run, on the node that owns the lock's slot.
fn places(cluster: &Cluster) -> BTreeMap<String, u64> {
    let owner = cluster.node(cluster.owner(LEASE).0);
    let places: Vec<(String, u64)> = owner
        .query(
            redis::cmd("ZRANGE")
                .arg(PLACES)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES"),
        )
        .unwrap_or_default();
    places.into_iter().collect()
}

/// Starts waiter `name`, and returns once it has its place in line behind
/// `ahead` others and listens for its wake-up message.
fn wait_in_line(url: &str, owner: &Server, dir: &Path, name: &str, ahead: usize) -> Running {
    let stderr = dir.join(format!("{name}.stderr"));
    let mut run = Lockrun::via(url)
        .key(NAME)
        .args(TTL)
        .args(WAITING)
        .sh(NOTE, dir)
        .command([name])
        .stderr(log_file(&stderr))
        .spawn();
    let queued = eventually(PATIENCE, || {
        !run.running() || (owner.in_line(NAME) > ahead && owner.listening_waiters(NAME) > ahead)
    });
    assert!(
        queued && run.running(),
        "{name} never took its place in line: {}",
        read_log(&stderr)
    );
    run
}

/// The names in `order`, in the order the runs started; fails the test if
/// one started before the last one ended.
fn starts_in_order(order: &str) -> Vec<String> {
    let mut inside: Option<&str> = None;
    let mut starts = Vec::new();
    for line in order.lines() {
        let (name, what) = line.rsplit_once(' ').expect("a name and start or end");
        match (what, inside) {
            ("start", None) => {
                inside = Some(name);
                starts.push(name.to_owned());
            }
            ("end", Some(now)) if now == name => inside = None,
            _ => panic!("runs overlapped at {line:?}:\n{order}"),
        }
    }
    starts
}

/// `starts` for a failure's report, each stretch of runs without `--wait`
/// as their number.
fn summary(starts: &[String]) -> String {
    let mut shown: Vec<String> = Vec::new();
    let mut impatient = 0;
    for name in starts {
        if name.starts_with("nowait") {
            impatient += 1;
            continue;
        }
        if impatient > 0 {
            shown.push(format!("{} without --wait", std::mem::take(&mut impatient)));
        }
        shown.push(name.clone());
    }
    if impatient > 0 {
        shown.push(format!("{impatient} without --wait"));
    }
    shown.join(", ")
}

/// One run without `--wait` to its end: its name, exit code, stderr.
type Try = (String, Option<i32>, String);

/// Runs without `--wait`, one after another on a thread of their own until
/// stopped, each noting its start and end in `order` when it runs.
struct Impatient {
    stop: Arc<AtomicBool>,
    /// Each run as it ended, and when.
    tries: Arc<Mutex<Vec<(Try, Instant)>>>,
    thread: Option<JoinHandle<()>>,
}

impl Impatient {
    fn start(url: &str, dir: &Path) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tries = Arc::new(Mutex::new(Vec::new()));
        let (url, dir): (String, PathBuf) = (url.to_owned(), dir.to_owned());
        let (stopped, tried) = (Arc::clone(&stop), Arc::clone(&tries));
        let thread = std::thread::spawn(move || {
            for n in 1.. {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let name = format!("nowait{n}");
                let ran = Lockrun::via(&url)
                    .key(NAME)
                    .args(TTL)
                    .sh(NOTE, &dir)
                    .command([&name])
                    .run();
                let done = ((name, ran.code, ran.stderr), Instant::now());
                tried.lock().expect("tries").push(done);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Impatient {
            stop,
            tries,
            thread: Some(thread),
        }
    }

    /// How many runs ended after `since`, and how many of them ran.
    fn since(&self, since: Instant) -> (usize, usize) {
        let tries = self.tries.lock().expect("tries");
        let after = tries.iter().filter(|(_, ended)| *ended > since);
        let ran = after.clone().filter(|((_, code, _), _)| *code == Some(0));
        (after.count(), ran.count())
    }

    /// Waits until `count` runs ended after `since`.
    #[track_caller]
    fn wait_for_tries(&self, count: usize, since: Instant) {
        let tried = eventually(PATIENCE, || self.since(since).0 >= count);
        assert!(tried, "runs without --wait stopped ending");
    }

    /// Waits until a run that ended after `since` ran its command.
    #[track_caller]
    fn wait_for_ran(&self, since: Instant) {
        let ran = eventually(PATIENCE, || self.since(since).1 > 0);
        assert!(ran, "no run without --wait got the free lock");
    }

    /// Stops the runs, once the one under way ended, and returns them all.
    fn stop(&mut self) -> Vec<Try> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the runs without --wait");
        }
        let tries = std::mem::take(&mut *self.tries.lock().expect("tries"));
        tries.into_iter().map(|(done, _)| done).collect()
    }
}

impl Drop for Impatient {
    /// A test that failed stops its runs too, without waiting for them.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Where the lock's keys are, for a failure's report.
fn keys_at(reshard: &Reshard<'_>, when: &str) -> String {
    let (source, target) = reshard.where_are(&LOCK_KEYS);
    let (on_source, on_target) = reshard.keys_in_slot();
    format!(
        "{when}, the source had {on_source} keys of the slot, the lock's {source:?}, \
         and the target {on_target}, the lock's {target:?}"
    )
}

/// The lock's keys that are still on the move's source, moved to its
/// target.
fn move_lock_keys(slot: &Move<'_>) {
    let (on_source, _) = slot.where_are(&LOCK_KEYS);
    let on_source: Vec<&str> = on_source.iter().map(String::as_str).collect();
    if !on_source.is_empty() {
        slot.keys(&on_source);
    }
}

/// Where the lock's keys are in a move by hand, for a failure's report.
fn moved_keys_at(slot: &Move<'_>, when: &str) -> String {
    let (source, target) = slot.where_are(&LOCK_KEYS);
    format!("{when}, the source had the lock's {source:?}, and the target {target:?}")
}

/// The holder's command ends while the slot is being migrated by hand,
/// with the lock's keys already on the target (`keys_first`) or still on
/// the source; then the rest moves and the slot settles.
fn released_while_moved_by_hand(keys_first: bool) {
    let cluster = Cluster::start();
    let mut scene = Scene::start(&cluster, Fill::None);
    let slot = Move::begin(&cluster, LEASE);
    if keys_first {
        move_lock_keys(&slot);
    }
    let context = moved_keys_at(&slot, "at the release");
    let released = scene.release(&context);
    scene.waiters_ran(released, &context);
    move_lock_keys(&slot);
    slot.finish();
    scene.ends_as_normal(&cluster, &context);
}

/// The smoke test of the real move: the holder's command ends while the
/// slot's keys are moving, the lock's keys moved first.
#[test]
fn a_release_while_a_real_reshard_moves_the_slot_hands_the_lock_to_the_line() {
    let cluster = Cluster::start();
    let mut scene = Scene::start(&cluster, Fill::Before);
    let mut reshard = cluster.reshard(LEASE, PIPELINE);
    reshard.wait_under_way();
    // Where the lock's keys are: all on the target, not some on each,
    // which the first keys moved may still be.
    let on_one_node = eventually(PATIENCE, || {
        let (source, target) = reshard.where_are(&LOCK_KEYS);
        source.is_empty() && !target.is_empty()
    });
    assert!(
        on_one_node,
        "{}",
        keys_at(&reshard, "the lock's keys never settled")
    );
    let context = keys_at(&reshard, "at the release");
    let released = scene.release(&context);
    assert!(
        reshard.migrating(),
        "the move ended before the release: more filler keys needed"
    );
    scene.waiters_ran(released, &context);
    let took = reshard.finish();
    println!("the move took {took:?}");
    scene.ends_as_normal(&cluster, &context);
}

/// The lock's keys moved first: the release finds them on the target while
/// the rest of the slot is still to move.
#[test]
fn a_release_while_the_slot_moves_after_the_locks_keys_hands_the_lock_to_the_line() {
    released_while_moved_by_hand(true);
}

/// The lock's keys are the last to move: the release finds them still on
/// the source while the slot is being migrated.
#[test]
fn a_release_while_the_slot_moves_before_the_locks_keys_hands_the_lock_to_the_line() {
    released_while_moved_by_hand(false);
}

/// The holder's command ends after the move, once runs without `--wait`
/// have tried on the new owner and the waiters have had a refresh of their
/// places there (one `--renew-every`).
#[test]
fn a_release_after_the_slot_moved_hands_the_lock_to_the_line_at_once() {
    let cluster = Cluster::start();
    let mut scene = Scene::start(&cluster, Fill::None);
    let slot = Move::begin(&cluster, LEASE);
    move_lock_keys(&slot);
    slot.finish();
    let moved = Instant::now();
    let before = places(&cluster);
    assert_eq!(before.len(), 2, "the waiters' places: {before:?}");
    scene.impatient.wait_for_tries(3, moved);
    // Not a wait for an outcome but the scenario: the release comes once
    // each waiter has refreshed its place since the move, which pushes its
    // end back.
    let refreshed = eventually(PATIENCE, || {
        let now = places(&cluster);
        before
            .iter()
            .all(|(id, end)| now.get(id).is_some_and(|later| later > end))
    });
    assert!(refreshed, "the waiters never refreshed their places");
    let context = moved_keys_at(&slot, "at the release");
    let released = scene.release(&context);
    scene.waiters_ran(released, &context);
    scene.ends_as_normal(&cluster, &context);
}
