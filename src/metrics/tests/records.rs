//! Telling a gone holder from a live one, with real processes.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::super::holders::{gone, pid_namespace, start_time, Process};

/// A child that runs until killed, as a record names it.
fn sleeper() -> (Child, Process) {
    let child = Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("spawn sleep");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).expect("its stat");
    let me = Process::me();
    let process = Process {
        pid: child.id(),
        start: start_time(&stat).expect("its start time"),
        ns: pid_namespace(&child.id().to_string()),
        ..me
    };
    (child, process)
}

#[test]
fn this_process_is_known_in_full() {
    let me = Process::me();
    assert_eq!(me.pid, std::process::id());
    assert!(me.start.parse::<u64>().is_ok(), "{me:?}");
    assert_eq!(me.boot.len(), 36, "a UUID: {me:?}");
    assert!(me.ns.parse::<u64>().is_ok(), "{me:?}");
    assert!(!gone(&me, &me));
}

#[test]
fn a_killed_process_is_gone_and_a_live_one_is_not() {
    let me = Process::me();
    let (mut child, record) = sleeper();
    assert!(!gone(&record, &me), "{record:?} runs");
    child.kill().expect("kill");
    // Killed and not yet reaped: a zombie, which holds nothing.
    let zombie = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", record.pid));
        stat.is_ok_and(|stat| stat.contains(") Z "))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !zombie() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(zombie(), "{record:?} never became a zombie");
    assert!(gone(&record, &me), "{record:?} was killed");
    child.wait().expect("reap");
    assert!(gone(&record, &me), "{record:?} was reaped");
}

#[test]
fn a_reused_pid_another_boot_and_what_cannot_be_told() {
    let me = Process::me();
    let later: u64 = me.start.parse::<u64>().expect("a number") + 1;
    // This pid, taken by a process that started at another time.
    let reused = Process {
        start: later.to_string(),
        ..me.clone()
    };
    assert!(gone(&reused, &me));
    let other_boot = Process {
        boot: "00000000-0000-0000-0000-000000000000".into(),
        ..me.clone()
    };
    assert!(gone(&other_boot, &me));
    // Another pid namespace's pid 1 may well exist there: kept.
    let other_namespace = Process {
        pid: 999_999_999,
        ns: "1".into(),
        ..me.clone()
    };
    assert!(!gone(&other_namespace, &me));
    let unknown = Process {
        start: String::new(),
        pid: 999_999_999,
        ..me.clone()
    };
    assert!(!gone(&unknown, &me), "a record missing a field is kept");
    let no_proc = Process {
        pid: me.pid,
        ..Process::default()
    };
    assert!(!gone(&reused, &no_proc), "without /proc nothing is told");
    let beyond = Process {
        pid: u32::MAX,
        ..me.clone()
    };
    assert!(gone(&beyond, &me), "no such pid");
}

#[test]
fn the_start_time_is_field_22_after_the_last_parenthesis() {
    let stat = "42 (a) b (c) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654 0 0";
    assert_eq!(start_time(stat).as_deref(), Some("987654"));
    assert_eq!(start_time("42 (x) S 1 2"), None);
    assert_eq!(start_time("no parenthesis"), None);
    let bad = "42 (a) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 98x 0";
    assert_eq!(start_time(bad), None);
}
