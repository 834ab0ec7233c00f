//! The example crontab under Debian's cron daemon: two containers are two
//! hosts sharing the test's Redis, each with the example's lines installed
//! with `crontab`, the server named in the crontab as README says for cron.
//! Only the schedules change, to every minute, so that the test sees
//! minutes go by; over two of them each key's job runs as its line
//! promises, on one host at a time, with nothing lost to cron's empty
//! environment.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use crate::harness::*;

/// Every job of the example: notes where and when it ran with which token,
/// then works for long enough that both hosts' cron fire while it runs
/// (cron starts a minute's jobs within a second on every host).
const JOB: &str = r#"#!/bin/sh
host=$(cat /proc/sys/kernel/hostname)
echo "$(date +%s) ${0##*/} $host ${LOCKRUN_FENCING_TOKEN:-none}" >>/out/runs
sleep 10
"#;

/// The programs the example's lines run.
const PROGRAMS: [&str; 3] = [
    "/opt/shop/bin/sync-orders",
    "/opt/billing/invoice.sh",
    "/opt/report/bin/report",
];

/// Where the test's crontab is, inside, for `crontab` to install.
const CRONTAB: &str = "/etc/lockrun-test.crontab";

/// The example crontab as this site installs it: the test's Redis and its
/// password named where the comments say, and every job every minute.
fn crontab(setup: &HostSetup) -> String {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cron/crontab"),
    )
    .expect("read examples/cron/crontab");
    let mut jobs = 0;
    let lines: Vec<String> = shipped
        .lines()
        .map(|line| {
            if line.starts_with("LOCKRUN_REDIS_URL=") {
                format!("LOCKRUN_REDIS_URL={}", setup.redis_url())
            } else if line.starts_with("# LOCKRUN_REDIS_PASSWORD=") {
                format!("LOCKRUN_REDIS_PASSWORD={REDIS_PASSWORD}")
            } else if line.starts_with(|c: char| c.is_ascii_digit() || c == '*') {
                jobs += 1;
                let command: Vec<&str> = line.split_whitespace().skip(5).collect();
                format!("* * * * * {}", command.join(" "))
            } else {
                line.to_owned()
            }
        })
        .collect();
    assert_eq!(jobs, 4, "the example's job lines changed: update this test");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("LOCKRUN_REDIS_PASSWORD=")),
        "the example no longer shows where the password goes"
    );
    lines.join("\n") + "\n"
}

fn cron_host(name: &str, redis: &Server) -> Container {
    let setup = HostSetup::new(name, redis);
    let crontab = crontab(&setup);
    let mut setup = setup.file(CRONTAB, &crontab, 0o600);
    for program in PROGRAMS {
        setup = setup.program(program, JOB);
    }
    let host = setup.boot();
    let cron = host.run(&["systemctl", "is-active", "cron"]).stdout;
    assert_eq!(
        cron.trim(),
        "active",
        "{name}: Debian's cron is not running: {}",
        host.journal("cron")
    );
    // cron sees a new crontab by its spool directory's mtime, in whole
    // seconds: one installed in the second cron read the spool at its start
    // would go unseen for good (a user installs theirs long after).
    let loaded = host.logged_at("cron", "Running @reboot jobs").floor();
    let later = eventually(PATIENCE, || unix_seconds() > loaded);
    assert!(later, "{name}: the clock did not pass {loaded}");
    host.must(&["crontab", CRONTAB]);
    host
}

fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// One run of a job, as the job wrote it.
#[derive(Debug)]
struct Run {
    minute: u64,
    job: String,
    host: String,
    token: u64,
}

fn runs(hosts: &[&Container]) -> Vec<Run> {
    let mut runs: Vec<Run> = hosts
        .iter()
        .flat_map(|host| {
            read_log(&host.out("runs"))
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [at, job, host, token] = fields[..] else {
                return None;
            };
            Some(Run {
                minute: at.parse::<u64>().ok()? / 60,
                job: job.to_owned(),
                host: host.to_owned(),
                token: token.parse().unwrap_or(0),
            })
        })
        .collect();
    runs.sort_by_key(|run| (run.minute, run.token));
    runs
}

/// How long the test waits for cron: the minute it was installed in may
/// be missed, then two whole minutes, then the jobs' work.
const CRON_MINUTES: Duration = Duration::from_secs(4 * 60);

#[test]
fn the_example_crontab_on_two_hosts_runs_each_job_once_per_minute_at_most() {
    let redis = container_redis();
    let a = cron_host("cron-a", &redis);
    let b = cron_host("cron-b", &redis);
    let hosts = [&a, &b];

    // sync-orders, the every-5-minutes job made every minute: two lines on
    // each host, four cron runs a minute, one of which runs the job. Two
    // minutes of it, then the work of the last one done.
    let mut minutes = BTreeSet::new();
    let seen = eventually(CRON_MINUTES, || {
        minutes = runs(&hosts)
            .iter()
            .filter(|run| run.job == "sync-orders")
            .map(|run| run.minute)
            .collect();
        minutes.len() >= 3
    });
    let cron_said = || format!("{}\n{}", a.journal("cron"), b.journal("cron"));
    assert!(
        seen,
        "cron ran sync-orders in {} minute(s) of 3 within {CRON_MINUTES:?}: {:?}\n{}",
        minutes.len(),
        runs(&hosts),
        cron_said()
    );
    let runs = runs(&hosts);
    let first = *minutes.first().expect("seen");
    let last = *minutes.last().expect("seen");

    let mut per_minute: BTreeMap<u64, Vec<&Run>> = BTreeMap::new();
    for run in runs.iter().filter(|run| run.job == "sync-orders") {
        per_minute.entry(run.minute).or_default().push(run);
    }
    for minute in first..=last {
        let ran = per_minute.get(&minute).map_or(0, Vec::len);
        assert_eq!(
            ran,
            1,
            "sync-orders ran {ran} times in minute {minute}: {runs:?}\n{}",
            cron_said()
        );
    }
    // Nothing lost to cron's environment: the job got its token, and the
    // tokens of one key grow from run to run.
    let tokens: Vec<u64> = per_minute.values().flatten().map(|run| run.token).collect();
    assert!(
        tokens.iter().all(|&token| token > 0) && tokens.windows(2).all(|w| w[0] < w[1]),
        "sync-orders' fencing tokens: {tokens:?}"
    );

    // --min-hold 10m: the nightly job ran once in these minutes, whatever
    // its schedule. --once-per 50m: so did the hourly report; the runs that
    // found it done, waiting or late, exited 0 without running it.
    for job in ["invoice.sh", "report"] {
        let ran: Vec<&Run> = runs.iter().filter(|run| run.job == job).collect();
        assert_eq!(ran.len(), 1, "{job} ran {} times: {ran:?}", ran.len());
        assert!(ran[0].token > 0, "{job} ran without its token: {ran:?}");
    }
    let hosts_that_ran: BTreeSet<&str> = runs.iter().map(|run| run.host.as_str()).collect();
    assert!(
        hosts_that_ran.is_subset(&BTreeSet::from(["cron-a", "cron-b"])),
        "runs from unknown hosts: {runs:?}"
    );
}
