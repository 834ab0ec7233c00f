//! `--redis` given three or more times: the lock held on a majority of five
//! independent servers, which the tests kill, restart empty and fence.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::{
    eventually, log_file, no_overlap_fences, quorum, read_fence, read_log, read_when_ready,
    scratch, until_voting, uptime, Expect, Lockrun, Running, Server, PATIENCE, QUORUM_TIMING,
};

const NAME: &str = "q";

/// The timing of the stall tests: the default `--redis-timeout`, 2s, which
/// a stalled member used to cost the acquire, the fencing and the release
/// each. A member votes once it has been up for the ttl and its drift.
const STALL_TIMING: [&str; 4] = ["--ttl", "6s", "--redis-timeout", "2s"];
const STALL_VOTES_AFTER_S: u64 = 7;

/// lockrun on every server of `servers`, with `args` before the `--`.
fn lockrun_on(servers: &[Server], args: &[&str]) -> Lockrun<'static> {
    Lockrun::on_all(servers).key(NAME).args(args)
}

/// A run that prints its fencing token.
fn token_run(servers: &[Server]) -> u64 {
    lockrun_on(servers, &QUORUM_TIMING).next_fence()
}

#[test]
fn two_of_five_down_still_runs_and_raises_the_fence_on_the_rest() {
    let mut servers = quorum(5);
    servers[0].kill();
    servers[3].kill();
    let fence = token_run(&servers);
    for at in [1, 2, 4] {
        assert!(!servers[at].is_locked(NAME), "released on member {at}");
        assert_eq!(servers[at].fence(NAME), Some(fence), "member {at}");
    }
}

#[test]
fn three_of_five_down_exits_69_without_running_the_command() {
    let mut servers = quorum(5);
    for at in [0, 2, 4] {
        servers[at].kill();
    }
    let dir = scratch();
    let started = Instant::now();
    let ran = lockrun_on(&servers, &QUORUM_TIMING)
        .sh(r#"touch "$1/ran""#, dir.path())
        .run();
    ran.assert(
        Expect::code(69)
            .stderr_starts("lockrun: no majority of the Redis servers agrees, only 2 of 5: ")
            .stderr_one_line(),
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!dir.path().join("ran").exists(), "the command ran");
    for at in [1, 3] {
        assert!(!servers[at].is_locked(NAME), "given back on member {at}");
    }
}

#[test]
fn a_held_quorum_lock_is_busy_for_another_run() {
    let servers = quorum(5);
    let dir = scratch();
    let mut holder = lockrun_on(&servers, &QUORUM_TIMING)
        .sh(r#"echo go > "$1/started"; sleep 30"#, dir.path())
        .spawn();
    read_when_ready(&dir.path().join("started"));
    let ran = lockrun_on(&servers, &QUORUM_TIMING).command(["true"]).run();
    ran.assert(
        Expect::code(75)
            .stderr_starts("lockrun: q is held by ")
            .stderr_one_line(),
    );
    // A run that waits gets it once the holder is gone.
    holder.signal(nix::sys::signal::Signal::SIGTERM);
    holder.wait();
    let ran = lockrun_on(&servers, &QUORUM_TIMING)
        .args(["--wait", "20s"])
        .command(["true"])
        .run();
    ran.assert(Expect::success());
}

#[test]
fn losing_the_majority_mid_run_stops_the_command_and_exits_76() {
    let mut servers = quorum(5);
    let dir = scratch();
    let mut run = lockrun_on(&servers, &QUORUM_TIMING)
        .sh(
            r#"trap 'echo term > "$1/term"; exit 1' TERM; echo $$ > "$1/pid"; while :; do sleep 0.05; done"#,
            dir.path(),
        )
        .stderr(Stdio::piped())
        .spawn();
    read_when_ready(&dir.path().join("pid"));
    for at in [1, 2, 3] {
        servers[at].kill();
    }
    run.exits(Expect::code(76));
    assert_eq!(read_when_ready(&dir.path().join("term")).trim(), "term");
}

#[test]
fn tokens_grow_across_the_quorum_with_a_member_restarted_empty() {
    let mut servers = quorum(5);
    // One member's counter far ahead of the others (a clock ahead, say).
    let ahead = servers[0].fence(NAME).unwrap_or(0).max(1) + 4_000_000_000_000_000;
    servers[0].set_fence(NAME, ahead);
    // A run goes on once a majority answers: on a loaded machine the member
    // ahead may answer after that, and its counter is then left out.
    let mut first = 0;
    let counted = eventually(PATIENCE, || {
        first = token_run(&servers);
        first > ahead
    });
    assert!(counted, "{first} after {ahead}");
    // The member that knew the highest token loses it; the others were
    // raised to it before the command started.
    servers[0].restart_empty();
    let second = token_run(&servers);
    assert!(second > first, "{second} after {first}");
    until_voting(&servers, 1);
    let third = token_run(&servers);
    assert!(third > second, "{third} after {second}");
}

#[test]
fn a_member_restarted_recently_does_not_vote() {
    let mut servers = quorum(5);
    servers[0].kill();
    servers[1].kill();
    // The member restarted now votes only once up for the ttl and its
    // drift, in whole seconds: 2s, time enough for the first run to find
    // it too new.
    let timing = ["--ttl", "1s"];
    servers[2].restart_empty();
    let ran = lockrun_on(&servers, &timing).command(["true"]).run();
    ran.assert(Expect::code(69).stderr_has("restarted").stderr_one_line());
    // Once it has been up for a ttl, it votes again.
    let voted = eventually(PATIENCE, || {
        lockrun_on(&servers, &timing).command(["true"]).run().code == Some(0)
    });
    assert!(voted, "the restarted member never voted again");
    assert!(uptime(&servers[2]).is_some_and(|up| up >= 2));
}

/// A member paused (SIGSTOP: its socket open, nothing answering) before the
/// run: the run decides on the two others' answers at once, and what it
/// sent the paused one is answered in order once it runs again, the release
/// last, so it keeps no lease.
#[test]
fn a_stalled_member_neither_slows_the_lock_nor_keeps_a_lease() {
    let servers = quorum(3);
    until_voting(&servers, STALL_VOTES_AFTER_S);
    // A run first, so that the member knows the scripts by their hash: a
    // script it did not know would be refused late, and nothing taken.
    lockrun_on(&servers, &STALL_TIMING)
        .command(["true"])
        .run()
        .assert(Expect::success());
    servers[2].pause();
    let ran = lockrun_on(&servers, &STALL_TIMING)
        .command(["sh", "-c", r#"echo "$LOCKRUN_FENCING_TOKEN""#])
        .run();
    ran.assert(Expect::success().stdout_any());
    // Before: 6s, the member's time limit waited out three times.
    assert!(ran.took < Duration::from_secs(2), "took {:?}", ran.took);
    let fence: u64 = ran.stdout.trim().parse().expect("a fencing token");
    servers[2].resume();
    // Its own token is from its own clock, later than the others' grant.
    let answered = eventually(PATIENCE, || {
        servers[2].fence(NAME).is_some_and(|late| late >= fence)
    });
    assert!(answered, "the paused member never got the acquire");
    assert!(!servers[2].is_locked(NAME), "a lease left behind");
}

/// A member paused while a run holds the lock: its renewals go on without
/// it, and its release does not wait for it.
#[test]
fn a_member_stalled_mid_run_holds_up_neither_renewals_nor_the_release() {
    let servers = quorum(3);
    until_voting(&servers, STALL_VOTES_AFTER_S);
    let mut holder = lockrun_on(&servers, &STALL_TIMING).hold();
    servers[1].pause();
    // Renewed every 2s; two renewals prove it carries on.
    for _ in 0..2 {
        assert!(servers[0].renewed(NAME, PATIENCE), "not renewed");
    }
    let began = Instant::now();
    holder.go();
    holder.end().assert(Expect::success());
    // Before: 2s, the release waiting out the paused member.
    let took = began.elapsed();
    assert!(took < Duration::from_millis(1500), "released in {took:?}");
    assert!(!servers[0].is_locked(NAME) && !servers[2].is_locked(NAME));
    servers[1].resume();
    let released = eventually(PATIENCE, || {
        servers[1].answers() && !servers[1].is_locked(NAME)
    });
    assert!(released, "a lease left behind on the paused member");
}

#[test]
fn two_redis_urls_are_refused_and_four_warn() {
    let servers: Vec<Server> = (0..4).map(|_| Server::start()).collect();
    let ran = lockrun_on(&servers[..2], &[]).command(["true"]).run();
    ran.assert(Expect::code(64).stderr_has("3 or more").stderr_one_line());
    until_voting(&servers, 1);
    let ran = lockrun_on(&servers, &QUORUM_TIMING).command(["true"]).run();
    ran.assert(
        Expect::success()
            .stderr_has("even number")
            .stderr_one_line(),
    );
}

#[test]
fn status_shows_each_member_and_release_force_works_on_all() {
    let mut servers = quorum(5);
    let (mut holder, fence) = held_on_every_member(&servers);
    servers[4].kill();

    let ran = lockrun_on(&servers, &["--json"]).subcommand("status").run();
    ran.assert(Expect::success().stdout_any());
    let json: serde_json::Value = serde_json::from_str(ran.stdout.trim()).expect("JSON");
    assert_eq!(json["held"], true, "{json}");
    assert_eq!(json["majority_agrees"], true, "{json}");
    assert_eq!(json["holder"]["fencing_token"], fence, "{json}");
    let members = json["members"].as_array().expect("members");
    assert_eq!(members.len(), 5);
    for member in &members[..4] {
        assert_eq!(member["reachable"], true, "{member}");
        assert_eq!(member["holder"]["fencing_token"], fence, "{member}");
    }
    assert_eq!(members[4]["reachable"], false);

    let ran = lockrun_on(&servers, &[]).subcommand("status").run();
    ran.assert(
        Expect::success()
            .stdout_has("4 of 5 servers, a majority agrees")
            .stdout_has("unreachable"),
    );

    let ran = lockrun_on(&servers, &["--force"])
        .subcommand("release")
        .run();
    ran.assert(Expect::success().stdout_starts("released q on 4 of 5 servers"));
    holder.exits(Expect::code(76));

    let ran = lockrun_on(&servers, &[]).subcommand("status").run();
    ran.assert(Expect::code(1).stdout_starts(format!("q: free (last fencing token {fence})")));
}

/// A run holding the lock on every member, and its fencing token. A run
/// goes on once a majority has it, and on a loaded machine a member that
/// answers after that is left out: such a run is stopped and another
/// started.
fn held_on_every_member(servers: &[Server]) -> (Running, u64) {
    let mut held = None;
    let on_every_member = eventually(PATIENCE, || {
        let dir = scratch();
        let mut holder = lockrun_on(servers, &QUORUM_TIMING)
            .sh(
                r#"echo "$LOCKRUN_FENCING_TOKEN" > "$1/fence"; sleep 30"#,
                dir.path(),
            )
            .stderr(Stdio::null())
            .spawn();
        let fence = read_fence(&dir.path().join("fence"));
        if eventually(Duration::from_secs(1), || {
            servers.iter().all(|s| s.is_locked(NAME))
        }) {
            held = Some((holder, fence));
            return true;
        }
        holder.signal(nix::sys::signal::Signal::SIGTERM);
        holder.wait();
        false
    });
    assert!(on_every_member, "no run held the lock on every member");
    held.expect("the run that held it")
}

/// Many runs racing for the quorum lock while a minority of members is
/// killed, restarted empty and paused at random: at no time do two of them
/// run the job, and the fencing tokens they got grow in the order they ran.
#[test]
fn racing_runs_never_overlap_while_a_minority_of_members_fails() {
    let mut servers = quorum(5);
    let dir = scratch();
    let args = [&QUORUM_TIMING[..], &["--wait", "60s"]].concat();
    let mut runs: Vec<Running> = (0..12)
        .map(|n| {
            lockrun_on(&servers, &args)
                .no_overlap_job(dir.path(), "0.3")
                .stderr(log_file(&dir.path().join(format!("run{n}.log"))))
                .spawn()
        })
        .collect();

    // A small deterministic shuffle: the faults differ between members and
    // rounds, and a failure can be replayed.
    let mut seed: usize = 7;
    let mut pick = |n: usize| {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345) % (1 << 31);
        seed % n
    };
    let until = Instant::now() + Duration::from_secs(60);
    let mut rounds = 0;
    while runs.iter_mut().any(Running::running) && Instant::now() < until {
        // Two members at most are out at once: one restarted empty, which
        // does not vote for a ttl, and one paused meanwhile. The next round
        // starts once the restarted one votes again.
        let restarted = pick(servers.len());
        let paused = (restarted + 1 + pick(servers.len() - 1)) % servers.len();
        servers[restarted].restart_empty();
        servers[paused].pause();
        let _ = runs[0].wait_for(Duration::from_millis(300));
        servers[paused].resume();
        until_voting(&servers[restarted..=restarted], 1);
        rounds += 1;
    }
    for (n, run) in runs.iter_mut().enumerate() {
        let ended = run.wait_for(PATIENCE);
        assert!(ended.is_some(), "a run never ended");
        // 0: ran; 76: lost the lease to the faults and stopped in time; 75:
        // its wait ran out. Anything else is a failure of lockrun itself.
        let code = ended.and_then(|status| status.code());
        assert!(
            matches!(code, Some(0 | 75 | 76)),
            "run {n}: exit {code:?}; it said: {}",
            read_log(&dir.path().join(format!("run{n}.log")))
        );
    }
    let fences = no_overlap_fences(dir.path());
    eprintln!(
        "{} runs got the lock over {rounds} rounds of faults",
        fences.len()
    );
    assert!(!fences.is_empty(), "no run got the lock in {rounds} rounds");
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens out of order over {rounds} rounds: {fences:?}"
    );
}
