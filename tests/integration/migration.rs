//! lockrun while its lock's cluster slot is half-way through a resharding:
//! the source node has it MIGRATING, the target IMPORTING, and the lock's
//! keys are on either or split between them (see docs/design.md, "A slot
//! being migrated").

use std::path::Path;
use std::time::Duration;

use crate::harness::*;

const NAME: &str = "job";
const LEASE: &str = "lockrun:{job}";
const HOLDER: &str = "lockrun:{job}:holder";
const FENCE: &str = "lockrun:{job}:fence";
/// The run history, which the plain run before a migration leaves.
const HISTORY: &str = "lockrun:{job}:history";

/// Timing that leaves room for the extra calls a half-way slot takes: a
/// first attempt that TRYAGAIN refuses, then the call on each key.
const TIMING: [&str; 6] = [
    "--ttl",
    "8s",
    "--renew-every",
    "300ms",
    "--redis-timeout",
    "1s",
];

fn hold(url: &str) -> Holder {
    Lockrun::via(url)
        .key(NAME)
        .args(["--wait", "20s"])
        .args(TIMING)
        .hold()
}

/// One run of the lock that touches `ran`, to its end: it takes the lock,
/// says nothing, and runs its command.
fn run_touching(url: &str, ran: &Path) {
    let output = Lockrun::via(url).key(NAME).args(TIMING).touch(ran).run();
    output.assert(Expect::success());
    assert!(ran.exists(), "exit 0 without running");
}

/// `lockrun status --json` of the lock, which must show it held.
fn status(url: &str) -> serde_json::Value {
    let (_, json) = Lockrun::via(url).key(NAME).status_json();
    assert_eq!(json["held"], true, "{json}");
    json
}

/// Waits until the lease on `node` is renewed there (its expiry grows).
fn renewed_on(node: &Server) -> bool {
    renewal_seen(TOPOLOGY_PATIENCE, || {
        ask(node, redis::cmd("PTTL").arg(LEASE))
    })
}

/// A run of `true` that finds the lock busy (exit 75).
fn assert_busy(url: &str) {
    let busy = Lockrun::via(url)
        .key(NAME)
        .args(TIMING)
        .command(["true"])
        .run();
    busy.assert(
        Expect::code(75)
            .stderr_starts("lockrun: job is held by ")
            .stderr_one_line(),
    );
}

/// Lease, holder record and fence counter: which node has each.
fn keys_on(slot: &Move<'_>, source: &[&str], target: &[&str]) {
    let owned = |keys: &[&str]| keys.iter().map(|k| (*k).to_owned()).collect();
    assert_eq!(
        slot.where_are(&[LEASE, HOLDER, FENCE]),
        (owned(source), owned(target))
    );
}

#[test]
fn cluster_lock_is_released_renewed_and_taken_while_its_slot_is_half_way() {
    let cluster = Cluster::start();
    let url = cluster.url_via(&cluster.primaries());
    let holder = hold(&url);
    let slot = Move::begin(&cluster, LEASE);
    let dir = scratch();

    released_from_the_source(&slot, &url, holder);
    let fence = taken_while_half_way(&slot, &url, dir.path());
    let held = held_on_the_target(&slot, &url, dir.path(), fence);

    // An operator removes a lock held on the target.
    let mut holder = hold(&url);
    let forced = Lockrun::via(&url)
        .key(NAME)
        .subcommand("release")
        .arg("--force")
        .run();
    forced.assert(Expect::success().stdout_starts("released job held by "));
    holder.end().assert(Expect::lost_to_force_release("job"));
    keys_on(&slot, &[], &[FENCE]);

    // The resharding ends: the lock works as before, on its new node.
    slot.finish();
    run_touching(&url, &dir.path().join("after"));
    let last = slot.target.fence(NAME).expect("the fence moved");
    assert!(last > held, "{last} after {held}");
    assert_eq!(slot.target.lock_value(NAME), None);
}

/// `holder` took the lock before the migration began.
fn released_from_the_source(slot: &Move<'_>, url: &str, mut holder: Holder) {
    // Nothing moved yet: the source still has every key but the line's,
    // which no script naming them all may touch now.
    assert_eq!(status(url)["holder"]["fencing_token"], holder.fence());
    assert_busy(url);

    // The lease still on the source, its holder record moved: no script
    // can name both, yet the run keeps renewing, and releases both.
    slot.keys(&[HOLDER]);
    assert!(renewed_on(slot.source), "{}", holder.stderr());
    assert_eq!(status(url)["holder"]["fencing_token"], holder.fence());
    holder.go();
    holder.end().assert(Expect::success());
    keys_on(slot, &[FENCE], &[]);
}

/// A new run takes the lock while the slot is still half-way: its new keys
/// go to the target, the fence counter stays where it is. Returns the
/// counter.
fn taken_while_half_way(slot: &Move<'_>, url: &str, dir: &Path) -> u64 {
    run_touching(url, &dir.join("first"));
    keys_on(slot, &[FENCE], &[]);
    slot.source
        .fence(NAME)
        .expect("the fence stays on the source")
}

/// Every key moved: the lock lives on the target alone. Returns the last
/// fencing token.
fn held_on_the_target(slot: &Move<'_>, url: &str, dir: &Path, fence: u64) -> u64 {
    let mut holder = hold(url);
    let held = holder.fence();
    assert!(held > fence, "{held} after {fence}");
    slot.keys(&[FENCE]);
    keys_on(slot, &[], &[LEASE, HOLDER, FENCE]);
    assert!(renewed_on(slot.target), "{}", holder.stderr());
    assert_eq!(status(url)["holder"]["fencing_token"], held);
    assert_busy(url);

    // A run that waits polls, and takes the lock once it is released.
    let (waited, said) = (dir.join("waited"), dir.join("said"));
    let mut waiter = Lockrun::via(url)
        .key(NAME)
        .args(["--wait", "20s", "-v"])
        .args(TIMING)
        .stderr(log_file(&said))
        .touch(&waited)
        .spawn();
    let busy = wait_for_text(&said, "is busy; trying again");
    assert!(busy, "{}", read_log(&said));
    holder.go();
    holder.end().assert(Expect::success());
    waiter.exits_saying(Expect::success(), || read_log(&said));
    assert!(waited.exists());
    keys_on(slot, &[], &[FENCE]);
    read_log(&said)
        .lines()
        .find_map(|line| {
            line.split("fencing token ")
                .nth(1)?
                .split(';')
                .next()?
                .parse()
                .ok()
        })
        .expect("the waiter's fencing token")
}

/// `--once-per`, `--slots` and `--shared` do not take the lock one key at a
/// time, which could neither check the recorded success atomically with
/// the grant nor count the holders: while the slot is half-way they are
/// refused as any TRYAGAIN is (69), and run once it settles.
#[test]
fn once_per_and_slots_runs_wait_for_the_slot_to_settle() {
    let cluster = Cluster::start();
    let url = cluster.url_via(&cluster.primaries());
    let dir = scratch();
    let once = |ran: &Path| {
        Lockrun::via(&url)
            .key(NAME)
            .args(["--once-per", "1h", "--redis-timeout", "1s"])
            .touch(ran)
            .run()
    };
    run_touching(&url, &dir.path().join("plain"));
    let slot = Move::begin(&cluster, LEASE);
    let refused = once(&dir.path().join("refused"));
    refused.assert(Expect::code(69).stderr_has("cluster slot is being migrated"));
    assert!(!dir.path().join("refused").exists(), "ran mid-migration");
    for share in [&["--slots", "2"][..], &["--shared"]] {
        let together = Lockrun::via(&url)
            .key(NAME)
            .args(share)
            .args(["--redis-timeout", "1s"])
            .touch(dir.path().join("together"))
            .run();
        together.assert(
            Expect::code(69)
                .context(format!("{share:?}"))
                .stderr_has("cluster slot is being migrated"),
        );
        assert!(!dir.path().join("together").exists(), "ran mid-migration");
    }
    slot.keys(&[FENCE, HISTORY]);
    slot.finish();
    let settled = Lockrun::via(&url)
        .key(NAME)
        .args(["--slots", "2"])
        .touch(dir.path().join("settled"))
        .run();
    settled.assert(Expect::success());
    let first = once(&dir.path().join("first"));
    first.assert(Expect::success());
    assert!(dir.path().join("first").exists());
    let second = once(&dir.path().join("second"));
    second.assert(Expect::success());
    assert!(
        !dir.path().join("second").exists(),
        "ran twice in one period"
    );
}

/// The man page's ACL user for a run in a cluster (REDIS PERMISSIONS: run,
/// acks and cluster) runs on a half-way slot as the default user does: a
/// holder renews and releases with its holder record moved; with the
/// default timing, the fence counter on the source, a new lease
/// and holder record taken one key at a time on the target (`ASKING`), and
/// the write there acknowledged by its replicas (`CLUSTER MYID`, then
/// `CLUSTER NODES` to reach that node). Each of those rules taken away
/// fails at once, in one line that names it.
#[test]
fn the_documented_acl_user_runs_while_the_slot_is_half_way() {
    use crate::acl::{adds_rule, create_user_on, rules, PASSWORD};
    let cluster = Cluster::start();
    let mut documented = rules("run");
    for use_ in ["acks", "cluster"] {
        documented.extend(rules(use_));
    }
    let url = cluster.url_via(&cluster.primaries());
    let as_user = |user: &str| {
        Lockrun::via(&url.replacen("://", &format!("://{user}@"), 1))
            .env("LOCKRUN_REDIS_PASSWORD", PASSWORD)
            .key(NAME)
    };
    create_user_on(&cluster.nodes, "lockrun", &documented);
    let dir = scratch();
    // A holder renews with its holder record moved, and releases.
    let mut holder = as_user("lockrun")
        .args(["--wait", "20s"])
        .args(TIMING)
        .hold();
    let slot = Move::begin(&cluster, LEASE);
    slot.keys(&[HOLDER]);
    assert!(renewed_on(slot.source), "{}", holder.stderr());
    holder.go();
    holder.end().assert(Expect::success());
    run_as(as_user("lockrun"), &dir.path().join("half-way"));
    keys_on(&slot, &[FENCE], &[]);
    let needed = ["+asking", "+cluster|myid", "+cluster|nodes"];
    for (n, rule) in needed.into_iter().enumerate() {
        let fewer: Vec<String> = documented.iter().filter(|r| *r != rule).cloned().collect();
        let user = format!("without{n}");
        create_user_on(&cluster.nodes, &user, &fewer);
        let ran = as_user(&user).touch(dir.path().join(&user)).run();
        ran.assert(adds_rule(rule).context(format!("{rule} taken away")));
        assert!(ran.took < Duration::from_secs(2), "{rule}: {:?}", ran.took);
    }
    // Every key moved: the lock lives on the target alone.
    slot.keys(&[FENCE]);
    run_as(as_user("lockrun"), &dir.path().join("moved"));
}

/// `lockrun` (as some user) takes the lock and touches `ran`.
fn run_as(lockrun: Lockrun<'_>, ran: &Path) {
    lockrun.touch(ran).run().assert(Expect::success());
    assert!(ran.exists(), "exit 0 without running");
}
