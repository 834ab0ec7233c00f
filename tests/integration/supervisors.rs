//! The example units under a real systemd as PID 1: two containers are two hosts sharing the test's Redis, and each test checks what an operator would, systemd's own report of the unit and what is left in Redis.

use std::time::Duration;

use crate::harness::*;

/// singleton.service's daemon: ready at once, then pings the watchdog
/// (which lockrun passes on) until told to hang; dies of SIGSEGV when told
/// to crash. It ends as a plain daemon does on SIGTERM: killed by it.
const SCHEDULER: &str = r#"#!/bin/bash
printf '%s %s\n' "$(date +%s.%N)" "$LOCKRUN_FENCING_TOKEN" >/out/scheduler.started
systemd-notify --ready
while :; do
  [ -e /out/crash ] && kill -SEGV $$
  [ -e /out/hang ] || systemd-notify WATCHDOG=1
  sleep 0.1
done
"#;

/// billing.service's job: its fencing token, then work until stopped.
const INVOICE: &str = r#"#!/bin/bash
echo "$LOCKRUN_FENCING_TOKEN" >/out/invoice.token
exec sleep infinity
"#;

const SINGLETON: &str = "singleton.service";
const BILLING: &str = "billing.service";

/// systemd's `ExecMainCode` for a process killed by a signal without a
/// core dump (CLD_KILLED); CLD_DUMPED, 3, would mean lockrun dumped core.
const KILLED: &str = "2";

/// How much later than the holder's lockrun ending the standby may start
/// its command: the issue's "at once", with room for a loaded machine.
const TAKEOVER: f64 = 1.0;

/// How long to wait for a standby that the lock reaches only when its lease
/// runs out (30 s in singleton.service): long enough to say how late it was.
const LEASE_RUNS_OUT: Duration = Duration::from_secs(45);

fn singleton_host(name: &str, redis: &Server, extra: &str) -> Container {
    HostSetup::new(name, redis)
        .unit(SINGLETON, extra)
        .program("/usr/bin/scheduler", SCHEDULER)
        .boot()
}

/// When the scheduler started on `host` (s since the epoch), waiting up to
/// `limit` for it.
fn scheduler_started(host: &Container, limit: Duration) -> Option<f64> {
    let file = host.out("scheduler.started");
    eventually(limit, || read_log(&file).ends_with('\n')).then(|| epoch_seconds(&read_log(&file)))
}

/// Host A holds the scheduler's lock, host B stands by in line.
fn holder_and_standby(redis: &Server, extra: &str) -> (Container, Container) {
    let a = singleton_host("host-a", redis, extra);
    let b = singleton_host("host-b", redis, extra);
    // Type=notify: start returns once the scheduler said READY=1.
    a.must(&["systemctl", "start", SINGLETON]);
    let holding = a.show(SINGLETON);
    assert_eq!(holding.state(), "active/running", "{holding:?}");
    let status = holding.get("StatusText");
    assert!(
        status.starts_with("holding scheduler (fencing token "),
        "{status}"
    );
    assert_eq!(
        redis.holder_field("scheduler", "host").as_deref(),
        Some("host-a")
    );
    b.must(&["systemctl", "start", SINGLETON]);
    stands_by_behind(&b, "host-a");
    assert_eq!(redis.in_line("scheduler"), 1);
    (a, b)
}

/// Asserts that systemd saw the unit's main process, lockrun, killed by
/// `signal`, with no core dumped: the core is the command's to dump.
#[track_caller]
fn assert_killed(unit: &Unit, signal: u8) {
    assert_eq!(
        (unit.get("ExecMainCode"), unit.get("ExecMainStatus")),
        (KILLED, signal.to_string().as_str()),
        "lockrun, the main process, was not killed by signal {signal} (without a core): {unit:?}"
    );
}

/// Asserts that singleton.service on `host` is active, standing by in line
/// behind `holder`, alone.
#[track_caller]
fn stands_by_behind(host: &Container, holder: &str) {
    let standing = host.show(SINGLETON);
    assert_eq!(standing.state(), "active/running", "{standing:?}");
    let status = standing.get("StatusText");
    assert!(
        status.starts_with(&format!("standing by: scheduler is held by {holder} pid "))
            && status.ends_with("; place 1 of 1 in line"),
        "{}: {status}",
        host.name
    );
}

/// `systemctl stop` of `unit` on `host`, which must end it as systemd
/// counts a clean stop: inactive, not failed; systemd's words about it.
#[track_caller]
fn stop_ends_clean(host: &Container, unit: &str) -> String {
    host.must(&["systemctl", "stop", unit]);
    let stopped = host.show(unit);
    let journal = host.journal(unit);
    println!("{}, systemctl stop {unit}:\n{journal}", host.name);
    assert_eq!(
        (stopped.state().as_str(), stopped.get("Result")),
        ("inactive/dead", "success"),
        "{stopped:?}\n{journal}"
    );
    // Not failed: a stop raises no alert.
    let failed = host.must(&[
        "systemctl",
        "list-units",
        "--failed",
        "--plain",
        "--no-legend",
    ]);
    assert!(
        !failed.contains(unit),
        "{}: failed units:\n{failed}",
        host.name
    );
    journal
}

/// Asserts that B's scheduler started within `TAKEOVER` of A's lockrun
/// ending, as A's journal dates it.
#[track_caller]
fn standby_took_over(redis: &Server, b: &Container, a_journal: &str) {
    // systemd says nothing of a main process's clean end but the unit's.
    let exited = a_journal
        .lines()
        .find(|line| {
            line.contains("singleton.service: Main process exited")
                || line.contains("singleton.service: Deactivated successfully")
        })
        .map(epoch_seconds)
        .unwrap_or_else(|| panic!("host-a's journal never said its lockrun ended:\n{a_journal}"));
    let started = scheduler_started(b, LEASE_RUNS_OUT).unwrap_or_else(|| {
        panic!(
            "host-b's scheduler never started:\n{}",
            b.journal(SINGLETON)
        )
    });
    let late = started - exited;
    println!("host-b's scheduler started {late:.3} s after host-a's lockrun ended");
    assert!(
        late < TAKEOVER,
        "host-b took over {late:.3} s after host-a's lockrun ended, not at once: the lock was \
         left to expire\n{a_journal}"
    );
    assert_eq!(b.show(SINGLETON).state(), "active/running");
    assert_eq!(
        redis.holder_field("scheduler", "host").as_deref(),
        Some("host-b")
    );
}

#[test]
fn a_stop_ends_clean_and_the_standby_takes_over_at_once_and_a_stopped_standby_leaves_the_line() {
    let redis = container_redis();
    let (a, b) = holder_and_standby(&redis, "");
    let journal = stop_ends_clean(&a, SINGLETON);
    let stopped = a.show(SINGLETON);
    // lockrun ends as its command did.
    assert_killed(&stopped, 15);
    standby_took_over(&redis, &b, &journal);

    // Host A again, now the standby; stopped while it waits in line.
    a.must(&["systemctl", "start", SINGLETON]);
    stands_by_behind(&a, "host-b");
    assert_eq!(redis.in_line("scheduler"), 1);
    stop_ends_clean(&a, SINGLETON);
    assert_eq!(
        redis.in_line("scheduler"),
        0,
        "the stopped standby is still in line"
    );
    assert_eq!(
        redis.holder_field("scheduler", "host").as_deref(),
        Some("host-b")
    );
}

#[test]
fn a_watchdog_timeout_hands_the_lock_to_the_standby_at_once() {
    let redis = container_redis();
    let (a, b) = holder_and_standby(&redis, "WatchdogSec=3s\n");
    a.tell("hang");
    a.logged_at(SINGLETON, "Watchdog timeout");
    // Restart=always: the unit waits 5 s to start again, and keeps the
    // result until then.
    let failed = a.until_state(SINGLETON, "activating/auto-restart");
    let journal = a.journal(SINGLETON);
    println!("host-a, watchdog timeout:\n{journal}");
    assert_eq!(failed.get("Result"), "watchdog", "{failed:?}");
    assert_killed(&failed, 6);
    standby_took_over(&redis, &b, &journal);
    // Back in line once restarted, pinging the watchdog itself.
    let restarted = a.until_state(SINGLETON, "active/running");
    assert!(
        restarted.get("StatusText").starts_with("standing by: "),
        "{restarted:?}"
    );
}

#[test]
fn a_command_that_crashes_fails_the_unit_and_frees_the_lock_at_once() {
    let redis = container_redis();
    let (a, b) = holder_and_standby(&redis, "");
    a.tell("crash");
    let failed = a.until_state(SINGLETON, "activating/auto-restart");
    let journal = a.journal(SINGLETON);
    println!("host-a, the scheduler crashed:\n{journal}");
    assert_eq!(
        failed.get("Result"),
        "signal",
        "a crash is a failure: {failed:?}"
    );
    assert_killed(&failed, 11);
    standby_took_over(&redis, &b, &journal);
}

#[test]
fn billing_runs_on_one_host_a_busy_start_succeeds_and_a_stop_ends_clean() {
    let redis = container_redis();
    let host = |name| {
        HostSetup::new(name, &redis)
            .unit(BILLING, "")
            .unit("billing.timer", "")
            .program("/opt/billing/invoice.sh", INVOICE)
            .boot()
    };
    let (a, b) = (host("host-a"), host("host-b"));

    // As the unit's header says to install it.
    for host in [&a, &b] {
        host.must(&["systemctl", "enable", "--now", "billing.timer"]);
        let timers = host.must(&["systemctl", "list-timers", "--all", "billing.timer"]);
        assert!(
            timers.contains("billing.timer") && timers.contains(BILLING),
            "{timers}"
        );
    }
    let verify = a.run(&["systemd-analyze", "verify", BILLING, "billing.timer"]);
    println!(
        "host-a, systemd-analyze verify:\n{}{}",
        verify.stdout, verify.stderr
    );
    // The one complaint left: the man page Documentation= names, which the
    // Debian package installs and this root has no man to find.
    let complaints: Vec<&str> = (verify.stdout.lines().chain(verify.stderr.lines()))
        .filter(|line| !line.contains("man lockrun(1)"))
        .collect();
    assert!(
        complaints.is_empty(),
        "systemd-analyze verify: {complaints:?}"
    );

    // A oneshot's start waits for the job to end: not waited for here.
    a.must(&["systemctl", "start", "--no-block", BILLING]);
    let token = read_fence(&a.out("invoice.token"));
    let running = a.show(BILLING);
    assert_eq!(running.state(), "activating/start", "{running:?}");

    b.must(&["systemctl", "start", BILLING]);
    let busy = b.show(BILLING);
    let journal = b.journal(BILLING);
    println!("host-b, billing busy:\n{journal}");
    assert_eq!(
        (
            busy.state().as_str(),
            busy.get("Result"),
            busy.get("ExecMainStatus")
        ),
        ("inactive/dead", "success", "75"),
        "{busy:?}"
    );
    let status = busy.get("StatusText");
    assert!(
        status.starts_with("billing is held by host-a pid "),
        "StatusText names who holds it: {busy:?}\n{journal}"
    );
    assert!(!b.out("invoice.token").exists(), "host-b ran the job too");

    stop_ends_clean(&a, BILLING);
    // The job ran for less than --min-hold (10m): the lock is kept, as for
    // a run that ended by itself, and said to be only kept.
    let status = a.lockrun(&["status", "--key", "billing"]).ok();
    println!("host-a, lockrun status --key billing:\n{status}");
    assert!(status.contains("kept for --min-hold"), "{status}");
    assert_eq!(redis.fence("billing"), Some(token));
}

#[test]
fn a_reboot_releases_the_lock_during_shutdown_and_the_unit_stands_by_after_it() {
    let redis = container_redis();
    let (mut a, b) = holder_and_standby(&redis, "");
    // As the unit's header says to install it, so that a reboot starts it.
    let enabled = a.run(&["systemctl", "enable", "--now", SINGLETON]);
    let said = format!("{}{}", enabled.stdout, enabled.stderr);
    println!("host-a, systemctl enable --now:\n{said}");
    a.reboot();
    let journal = a.journal_of(SINGLETON, true);
    println!("host-a, before the reboot:\n{journal}");
    standby_took_over(&redis, &b, &journal);
    let is_enabled = a.run(&["systemctl", "is-enabled", SINGLETON]).stdout;
    assert_eq!(
        is_enabled.trim(),
        "enabled",
        "after the reboot, singleton.service is not started at boot: `systemctl enable` \
         said:\n{said}"
    );
    a.until_state(SINGLETON, "active/running");
    stands_by_behind(&a, "host-b");
    assert_eq!(redis.in_line("scheduler"), 1);
}

/// The site's alert that lockrun-check@.service's `OnFailure=` starts: it
/// notes which unit failed.
const ALERT: &str = "[Unit]\nDescription=Alert for %i\n\n[Service]\nType=oneshot\n\
                     ExecStart=/bin/sh -c 'echo \"$1\" >>/out/alerts' sh %i\n";

const CHECK: &str = "lockrun-check@billing.service";

#[test]
fn the_check_timer_alerts_through_on_failure_on_critical_and_warning_only() {
    let redis = container_redis();
    let host = HostSetup::new("monitor", &redis)
        .unit("lockrun-check@.service", "")
        .unit("lockrun-check@.timer", "")
        .file("/etc/systemd/system/alert@.service", ALERT, 0o644)
        .boot();
    host.must(&[
        "systemctl",
        "enable",
        "--now",
        "lockrun-check@billing.timer",
    ]);
    let timers = host.must(&[
        "systemctl",
        "list-timers",
        "--all",
        "lockrun-check@billing.timer",
    ]);
    assert!(timers.contains(CHECK), "{timers}");
    let alerts = host.out("alerts");
    let alerted = |times: usize| {
        let lines = || read_log(&alerts).lines().count();
        assert!(
            eventually(PATIENCE, || lines() >= times),
            "{times} alert(s) wanted, {} raised:\n{}",
            lines(),
            host.journal(CHECK)
        );
        assert_eq!(
            read_log(&alerts).lines().last(),
            Some(CHECK),
            "the alert names the check"
        );
    };

    // No run recorded: CRITICAL, the unit fails, the alert goes out.
    host.run(&["systemctl", "start", CHECK]);
    let failed = host.until_state(CHECK, "failed");
    assert_eq!(failed.get("ExecMainStatus"), "2", "{failed:?}");
    assert!(host.journal(CHECK).contains("LOCKRUN CRITICAL - billing"));
    alerted(1);

    // A success: OK, no alert.
    host.lockrun(&["--key", "billing", "--", "true"]).ok();
    host.must(&["systemctl", "start", CHECK]);
    let ok = host.show(CHECK);
    assert_eq!(
        (ok.get("Result"), ok.get("ExecMainStatus")),
        ("success", "0"),
        "{ok:?}"
    );
    assert!(host
        .journal(CHECK)
        .contains("LOCKRUN OK - billing succeeded "));

    // The last run failed: WARNING, the second alert. Had the OK check
    // raised one, it would have come before this.
    host.lockrun(&["--key", "billing", "--", "false"]);
    host.run(&["systemctl", "start", CHECK]);
    let warned = host.until_state(CHECK, "failed");
    assert_eq!(warned.get("ExecMainStatus"), "1", "{warned:?}");
    assert!(host.journal(CHECK).contains("LOCKRUN WARNING - billing"));
    alerted(2);
    assert_eq!(read_log(&alerts).lines().count(), 2, "one alert a failure");
}
