//! The lock's line while a resharding moves its cluster slot (see
//! docs/design.md, "A slot being migrated"): the runs in line keep their
//! places and are handed the lock in turn, by message, whether the lock's
//! keys are split between the two nodes or all moved; a waiter follows the
//! slot to its new owner, where a release can see whether it still lives.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::*;

const NAME: &str = "job";
const LEASE: &str = "lockrun:{job}";
const HOLDER: &str = "lockrun:{job}:holder";
const FENCE: &str = "lockrun:{job}:fence";
const QUEUE: &str = "lockrun:{job}:queue";
const PLACES: &str = "lockrun:{job}:places";
const WAITERS: &str = "lockrun:{job}:waiters";

/// Room for the calls a half-way slot takes, one per key.
const TIMEOUT: [&str; 2] = ["--redis-timeout", "1s"];

/// Appends "$2 start" and, half a second later, "$2 end" to `order` in $1.
const IN_TURN: &str = r#"echo "$2 start" >> "$1/order"; sleep 0.5; echo "$2 end" >> "$1/order""#;

/// A run in line named `name` that refreshes its place every `refresh`;
/// with a long one, a lock that reaches it soon after a release was handed
/// to it by message, not found by looking.
fn queue_up(url: &str, dir: &Path, name: &str, refresh: &str) -> Running {
    Lockrun::via(url)
        .key(NAME)
        .args([
            "--wait",
            "60s",
            "--ttl",
            "30s",
            "--renew-every",
            refresh,
            "-v",
        ])
        .args(TIMEOUT)
        .stderr(log_file(&dir.join(format!("{name}.stderr"))))
        .sh(IN_TURN, dir)
        .command([name])
        .spawn()
}

/// Waits until `node` shows `n` runs in line.
fn in_line(node: &Server, n: usize) {
    assert!(
        eventually(PATIENCE, || node.in_line(NAME) == n),
        "{} in line, want {n}",
        node.in_line(NAME)
    );
}

fn order(dir: &Path) -> Vec<String> {
    read_log(&dir.join("order"))
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits until `line` is in the order file; returns how long that took.
fn until_ordered(dir: &Path, line: &str) -> Duration {
    let began = Instant::now();
    let found = eventually(PATIENCE, || order(dir).iter().any(|l| l == line));
    assert!(
        found,
        "no {line:?}: {:?}\n{}\n{}",
        order(dir),
        read_log(&dir.join("first.stderr")),
        read_log(&dir.join("second.stderr"))
    );
    began.elapsed()
}

/// Lets `holder` release, which hands the lock to "first" at once: in a
/// few seconds at most, where its refresh would take 10 s or more.
fn released_to_first(holder: &mut Holder, dir: &Path) {
    holder.go();
    holder.end().assert(Expect::success());
    let handed = until_ordered(dir, "first start");
    assert!(
        handed < Duration::from_secs(5),
        "first started after {handed:?}"
    );
}

fn assert_busy(url: &str) {
    let busy = Lockrun::via(url)
        .key(NAME)
        .args(TIMEOUT)
        .command(["true"])
        .run();
    busy.assert(Expect::code(75).stderr_starts("lockrun: job is held by "));
}

/// The lock held in `cluster`, and runs "first" and "second" in line for
/// it, in that order, refreshing their places every `refresh`; the node
/// that owns the lock's slot.
fn held_with_two_in_line<'c>(
    cluster: &'c Cluster,
    dir: &Path,
    refresh: [&str; 2],
) -> (Holder, [Running; 2], &'c Server) {
    let url = cluster.url_via(&cluster.primaries());
    let holder = Lockrun::via(&url).key(NAME).args(TIMEOUT).hold();
    let source = cluster.node(cluster.owner(LEASE).0);
    let first = queue_up(&url, dir, "first", refresh[0]);
    in_line(source, 1);
    let second = queue_up(&url, dir, "second", refresh[1]);
    in_line(source, 2);
    (holder, [first, second], source)
}

#[test]
fn runs_in_line_are_handed_the_lock_in_turn_while_its_keys_are_split() {
    let cluster = Cluster::start();
    let url = cluster.url_via(&cluster.primaries());
    let dir = scratch();
    let (mut holder, [mut first, mut second], _) =
        held_with_two_in_line(&cluster, dir.path(), ["10s", "10s"]);

    // The lease and the places on the source, the holder record and the
    // queue on the target: no script can name them all.
    let slot = Move::begin(&cluster, LEASE);
    slot.keys(&[HOLDER, QUEUE]);
    assert_busy(&url);
    released_to_first(&mut holder, dir.path());
    assert_busy(&url);
    first.exits_saying(Expect::success(), || {
        read_log(&dir.path().join("first.stderr"))
    });
    second.exits_saying(Expect::success(), || {
        read_log(&dir.path().join("second.stderr"))
    });
    assert_eq!(
        order(dir.path()),
        ["first start", "first end", "second start", "second end"]
    );

    // Once the slot settles, the line is gone with the runs in it.
    slot.keys(&[LEASE, FENCE, PLACES, WAITERS]);
    slot.finish();
    assert_eq!(slot.target.in_line(NAME), 0);
    assert_eq!(slot.target.lock_value(NAME), None);
}

/// Two runs in line while the slot moves: the first refreshes its place
/// rarely and so still listens on the old owner when the holder releases,
/// the second follows the slot at once and then dies. The release hands
/// the lock to the first at once, as its subscription cannot be seen on
/// the new owner; the first's release then sees that the second no longer
/// listens, and a run without --wait takes the lock at once.
#[test]
fn a_waiter_is_handed_the_lock_after_its_slot_moved_and_follows_it() {
    let cluster = Cluster::start();
    let url = cluster.url_via(&cluster.primaries());
    let dir = scratch();
    let (mut holder, [mut first, second], source) =
        held_with_two_in_line(&cluster, dir.path(), ["20s", "300ms"]);
    assert_eq!(source.wake_channels(NAME), 2);

    let slot = Move::begin(&cluster, LEASE);
    slot.keys(&[LEASE, HOLDER, FENCE, QUEUE, PLACES, WAITERS]);
    slot.finish();
    // Subscribed on the new owner, and said so in its place.
    let listens_there = format!(r#""node":"{}""#, node_id(slot.target));
    let followed = eventually(PATIENCE, || {
        slot.target.wake_channels_now(NAME) == Some(1)
            && slot
                .target
                .waiter_records(NAME)
                .iter()
                .any(|record| record.contains(&listens_there))
    });
    assert!(followed, "{}", read_log(&dir.path().join("second.stderr")));
    assert_eq!(source.wake_channels(NAME), 1, "the first moved too soon");
    second.signal(Signal::SIGKILL);
    assert!(eventually(PATIENCE, || {
        slot.target.wake_channels_now(NAME) == Some(0)
    }));

    released_to_first(&mut holder, dir.path());
    first.exits_saying(Expect::success(), || {
        read_log(&dir.path().join("first.stderr"))
    });
    // The dead second run is skipped, not handed the lock for its ttl.
    let after = Lockrun::via(&url)
        .key(NAME)
        .args(TIMEOUT)
        .touch(dir.path().join("after"))
        .run();
    after.assert(Expect::success());
    assert!(dir.path().join("after").exists());
}
