//! Signals to lockrun: forwarded while the command runs, abort the wait before it.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::harness::*;

/// A bash command that logs every forwarded signal it gets, one name a line,
/// and exits 42 once the test creates `stop`. Short sleeps keep it responsive:
/// bash runs a trap only after its foreground command ends.
const TRAPS: &str = r#"
ulimit -c 0 2>/dev/null
note() { echo "$1" >> "$dir/log"; }
dir=$1
for s in INT TERM HUP QUIT ABRT USR1 USR2 WINCH; do trap "note $s" "$s"; done
echo $$ > "$dir/pid"
while [ ! -e "$dir/stop" ]; do sleep 0.05; done
exit 42
"#;

/// lockrun blocks the signals it forwards and SIGCHLD, and ignores SIGPIPE;
/// the command must start as if lockrun were not there: nothing blocked,
/// and none of those ignored. (Any other signal ignored when lockrun started
/// stays ignored, as across any exec: the test harness, linked statically,
/// starts lockrun with glibc's two internal signals ignored.)
#[test]
fn the_command_starts_with_no_signal_blocked_or_ignored() {
    let redis = Server::start();
    let ran = redis
        .lockrun("job")
        .command(["cat", "/proc/self/status"])
        .run();
    ran.assert(Expect::success().stdout_any());
    let mask = |field: &str| {
        let line = ran
            .stdout
            .lines()
            .find(|line| line.starts_with(field))
            .unwrap_or_else(|| panic!("no {field} in {}", ran.stdout));
        let hex = line.rsplit(['\t', ' ']).next().unwrap_or_default();
        u64::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("{line}"))
    };
    assert_eq!(
        mask("SigBlk"),
        0,
        "the command started with signals blocked"
    );
    let lockrun_s = [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGABRT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGPIPE,
        Signal::SIGTERM,
        Signal::SIGCHLD,
        Signal::SIGWINCH,
    ]
    .iter()
    .fold(0_u64, |bits, &signal| bits | 1 << (signal as u64 - 1));
    assert_eq!(
        mask("SigIgn") & lockrun_s,
        0,
        "the command started with lockrun's signals ignored"
    );
}

/// The signals `pid` ignores, from /proc: bit N-1 for signal N.
fn ignored_by(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let hex = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .unwrap_or_else(|| panic!("no SigIgn in {status}"));
    u64::from_str_radix(hex.trim(), 16).unwrap_or_else(|_| panic!("{hex}"))
}

fn bit(signal: Signal) -> u64 {
    1 << (signal as u64 - 1)
}

/// A non-interactive shell starts a background job (`lockrun … &`, as a CI
/// script that traps signals runs it) with SIGINT and SIGQUIT ignored, and
/// the command would inherit that: a cancelled job whose SIGINT lockrun
/// "forwards" would deploy to the end. lockrun takes those two back, as
/// timeout(1) does. nohup's SIGHUP is ignored on purpose: it stays ignored,
/// and lockrun neither takes nor forwards it.
#[test]
fn a_background_job_passes_sigint_on_and_a_nohup_hangup_stays_ignored() {
    let redis = Server::start();
    let mut holder = redis
        .lockrun("job")
        .arg("-v")
        .ignoring("INT QUIT HUP")
        .hold_script("sh", r#"echo $$ > "$1/pid"; exec sleep 60"#);
    let ignored = ignored_by(holder.child());
    assert_eq!(
        ignored & (bit(Signal::SIGINT) | bit(Signal::SIGQUIT)),
        0,
        "the command ignores SIGINT or SIGQUIT"
    );
    assert_ne!(ignored & bit(Signal::SIGHUP), 0, "nohup's SIGHUP was reset");

    // The hangup goes first: had lockrun taken it, it would say so before
    // the SIGINT's stop.
    holder.run.signal(Signal::SIGHUP);
    holder.run.signal(Signal::SIGINT);
    holder.end().assert(
        Expect::killed_by(Signal::SIGINT)
            .stderr_has("SIGINT")
            .stderr_lacks("SIGHUP"),
    );
    assert!(!alive(holder.child()), "the command survived SIGINT");
    redis.assert_only_fence("job");
}

fn stderr(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("stderr")).unwrap_or_default()
}

#[test]
fn every_forwarded_signal_reaches_the_command_once_and_lockrun_waits_for_it() {
    let redis = Server::start();
    let mut holder = redis
        .lockrun("job")
        .args(["--ttl", "2s"])
        .hold_script("bash", TRAPS);

    let forwarded = [
        (Signal::SIGINT, "INT"),
        (Signal::SIGTERM, "TERM"),
        (Signal::SIGHUP, "HUP"),
        (Signal::SIGQUIT, "QUIT"),
        (Signal::SIGABRT, "ABRT"),
        (Signal::SIGUSR1, "USR1"),
        (Signal::SIGUSR2, "USR2"),
        (Signal::SIGWINCH, "WINCH"),
    ];
    let forwarded: Vec<_> = forwarded
        .into_iter()
        .filter(|(signal, _)| *signal != Signal::SIGABRT || !LOCKRUN.emulated())
        .collect();
    let log = holder.dir().join("log");
    for &(signal, name) in &forwarded {
        // One at a time: signals of one kind that arrive together merge.
        holder.run.signal(signal);
        assert!(
            wait_for_text(&log, &format!("{name}\n")),
            "{signal} never reached the command"
        );
        assert!(
            holder.run.running(),
            "lockrun exited on {signal} instead of forwarding it"
        );
    }
    assert_eq!(
        redis.lock_value("job").as_deref(),
        Some(holder.token.as_str())
    );

    std::fs::write(holder.dir().join("stop"), "").expect("write stop");
    // bash may report the children the signals killed.
    holder.end().assert(Expect::code(42).stderr_any());
    let got = std::fs::read_to_string(&log).expect("log");
    let want: Vec<&str> = forwarded.iter().map(|(_, name)| *name).collect();
    assert_eq!(
        got.lines().collect::<Vec<_>>(),
        want,
        "each signal exactly once, in order"
    );
    redis.assert_only_fence("job");
}

/// Starts `lockrun -k job --wait forever -- touch RAN` against a held lock
/// and returns once it is waiting, its stderr in `dir`.
fn start_waiting(redis: &Server, dir: &Path, ran: &Path) -> Running {
    let waiter = redis
        .lockrun("job")
        .args(["-v", "--wait", "forever"])
        .touch(ran)
        .stderr(log_file(&dir.join("stderr")))
        .spawn();
    // Logged after the first attempt, so its signal handlers are in place.
    if !wait_for_text(&dir.join("stderr"), "is busy; waiting") {
        waiter.signal(Signal::SIGKILL);
        panic!("never started waiting: {}", stderr(dir));
    }
    waiter
}

#[test]
fn sigterm_sigint_and_sigabrt_abort_a_wait_without_running_the_command() {
    let redis = Server::start();
    let mut holder = redis.lockrun("job").args(["--ttl", "2s"]).hold();

    // SIGABRT: systemd's watchdog, for a standby that stopped pinging.
    let abort = (!LOCKRUN.emulated()).then_some(Signal::SIGABRT);
    for signal in [Signal::SIGTERM, Signal::SIGINT].into_iter().chain(abort) {
        let dir = scratch();
        let ran = dir.path().join("ran");
        let mut waiter = start_waiting(&redis, dir.path(), &ran);
        waiter.signal(signal);
        // A wait "forever" that ends at all ended because of the signal;
        // the limit only keeps a broken build from hanging the suite.
        // Ended by it, as the signal would have ended the command.
        let limit = Duration::from_secs(10);
        waiter.exits_within(limit, Expect::killed_by(signal), || stderr(dir.path()));
        assert!(!ran.exists(), "the command ran after {signal}");
        assert_eq!(
            redis.lock_value("job").as_deref(),
            Some(holder.token.as_str()),
            "the waiter touched the holder's lock"
        );
        assert!(holder.run.running());
    }

    holder.go();
    holder.end().assert(Expect::success());
    redis.assert_only_fence("job");
}

#[test]
fn a_terminal_resize_does_not_end_a_wait() {
    let redis = Server::start();
    let holder = redis.lockrun("job").args(["--ttl", "2s"]).hold();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let mut waiter = start_waiting(&redis, dir.path(), &ran);
    // SIGWINCH only says the terminal changed size: the wait goes on, and
    // the command runs once the holder lets go.
    waiter.signal(Signal::SIGWINCH);
    holder.go();
    waiter.exits_saying(Expect::success(), || stderr(dir.path()));
    assert!(ran.exists(), "the command ran after the wait");
}

#[test]
fn sigterm_from_a_service_manager_stops_the_command_and_releases_the_lock() {
    let redis = Server::start();
    let mut holder = redis
        .lockrun("job")
        .hold_script("sh", r#"echo $$ > "$1/pid"; exec sleep 60"#);
    holder.run.signal(Signal::SIGTERM);
    // The command died of the forwarded SIGTERM, and lockrun ends the same
    // way, which systemd counts as a clean stop (exit 143 it would not).
    holder.end().assert(Expect::killed_by(Signal::SIGTERM));
    assert!(!alive(holder.child()));
    redis.assert_only_fence("job");
}
