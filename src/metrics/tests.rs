//! The file's format, parsing and merging, the holders' records, and
//! updates of a real file.

use std::fs::File;
use std::time::Instant;

use nix::fcntl::{Flock, FlockArg};

use super::*;

mod records;

const S: Duration = Duration::from_secs(1);

/// The end of a run; one that held the lock ends 3 s after it took it.
fn ended(outcome: Outcome, held: Option<HoldSummary>) -> Change {
    Change::Ended {
        outcome,
        at_us: held.map_or(1, |h| h.acquired_us + 3_000_000),
        waited: Duration::from_millis(250),
        held,
    }
}

fn held(acquired_us: u64, exit_status: u8) -> HoldSummary {
    HoldSummary {
        acquired_us,
        duration: 3 * S,
        exit_status,
    }
}

fn acquired(at_us: u64) -> Change {
    Change::Acquired { at_us, waited: S }
}

/// A process of this boot and pid namespace, as a record names it.
fn process(pid: u32) -> Process {
    Process {
        pid,
        start: format!("{}", pid * 10),
        boot: "b00t".into(),
        ns: "4026531836".into(),
    }
}

#[test]
fn a_run_renders_every_metric_once_with_escaped_keys() {
    let mut metrics = Metrics::default();
    let key = "we\"ird\\key\nname";
    metrics.apply(
        key,
        ended(Outcome::Ok, Some(held(1_700_000_000_000_001, 0))),
        &process(1),
    );
    let text = metrics.render();
    assert!(
        text.contains("lockrun_running{key=\"we\\\"ird\\\\key\\nname\"} 0\n"),
        "{text}"
    );
    assert!(text.contains("lockrun_acquired_timestamp_seconds{key=\"we\\\"ird\\\\key\\nname\"} 1700000000.000001\n"), "{text}");
    assert!(
        text.contains("lockrun_last_hold_seconds{key=\"we\\\"ird\\\\key\\nname\"} 3.000000\n"),
        "{text}"
    );
    assert!(
        text.contains("lockrun_last_wait_seconds{key=\"we\\\"ird\\\\key\\nname\"} 0.250000\n"),
        "{text}"
    );
    assert!(
        text.contains("lockrun_runs_total{key=\"we\\\"ird\\\\key\\nname\",outcome=\"ok\"} 1\n"),
        "{text}"
    );
    for name in [
        "lockrun_running",
        "lockrun_acquired_timestamp_seconds",
        "lockrun_first_seen_timestamp_seconds",
        "lockrun_last_exit_status",
        "lockrun_last_success_timestamp_seconds",
        "lockrun_last_wait_seconds",
        "lockrun_last_hold_seconds",
        "lockrun_runs_total",
    ] {
        assert_eq!(
            text.matches(&format!("# HELP {name} ")).count(),
            1,
            "{name}"
        );
        assert_eq!(
            text.matches(&format!("# TYPE {name} ")).count(),
            1,
            "{name}"
        );
    }
    assert_eq!(
        text.matches("lockrun_runs_total{").count(),
        6,
        "every outcome"
    );
    // What it wrote, it reads back the same.
    assert_eq!(Metrics::parse(&text), metrics);
}

#[test]
fn a_busy_run_writes_its_count_wait_and_first_seen_and_none_running() {
    let mut metrics = Metrics::default();
    metrics.apply("job", ended(Outcome::Busy, None), &process(1));
    let text = metrics.render();
    assert!(text.contains("lockrun_running{key=\"job\"} 0\n"), "{text}");
    assert!(
        text.contains("lockrun_first_seen_timestamp_seconds{key=\"job\"} 0.000001\n"),
        "{text}"
    );
    for absent in [
        "lockrun_running_since",
        "lockrun_acquired",
        "lockrun_last_exit_status",
        "lockrun_last_success",
        "# lockrun_holder",
    ] {
        assert!(!text.contains(absent), "{absent} in {text}");
    }
    assert!(text.contains("lockrun_runs_total{key=\"job\",outcome=\"busy\"} 1\n"));
    assert!(text.contains("lockrun_last_wait_seconds{key=\"job\"} 0.250000\n"));
}

#[test]
fn merging_sums_counts_and_keeps_other_keys() {
    let mut metrics = Metrics::default();
    metrics.apply("a", ended(Outcome::Ok, Some(held(10, 0))), &process(1));
    metrics.apply("b", ended(Outcome::Busy, None), &process(1));
    let mut again = Metrics::parse(&metrics.render());
    again.apply("a", ended(Outcome::Failed, Some(held(20, 3))), &process(1));
    again.apply("a", ended(Outcome::Ok, Some(held(30, 0))), &process(1));
    again.apply("c", ended(Outcome::Unavailable, None), &process(1));
    let text = again.render();
    for line in [
        "lockrun_runs_total{key=\"a\",outcome=\"ok\"} 2\n",
        "lockrun_runs_total{key=\"a\",outcome=\"failed\"} 1\n",
        "lockrun_runs_total{key=\"b\",outcome=\"busy\"} 1\n",
        "lockrun_runs_total{key=\"c\",outcome=\"unavailable\"} 1\n",
        "lockrun_last_exit_status{key=\"a\"} 0\n",
        "lockrun_last_success_timestamp_seconds{key=\"a\"} 3.000030\n",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
}

#[test]
fn running_counts_the_runs_that_hold_the_lock_whatever_the_order_of_writes() {
    let mut metrics = Metrics::default();
    let (one, two) = (process(1), process(2));
    // Two slots: run 2 took the lock at 200 and wrote it before run 1
    // (acquired at 100) wrote its acquisition.
    metrics.apply("k", acquired(200), &two);
    metrics.apply("k", acquired(100), &one);
    let m = &metrics.keys["k"];
    assert_eq!((m.holders.len(), m.acquired_us), (2, Some(200)));
    let text = metrics.render();
    assert!(text.contains("lockrun_running{key=\"k\"} 2\n"), "{text}");
    assert!(
        text.contains("lockrun_running_since_timestamp_seconds{key=\"k\"} 0.000100\n"),
        "{text}"
    );
    // Run 1 ends first: run 2 still runs, and still counts.
    let mut metrics = Metrics::parse(&text);
    metrics.apply("k", ended(Outcome::Lost, Some(held(100, 76))), &one);
    let m = &metrics.keys["k"];
    assert_eq!(m.holders.len(), 1);
    assert_eq!((m.acquired_us, m.last_exit_status), (Some(200), Some(76)));
    let text = metrics.render();
    assert!(text.contains("lockrun_running{key=\"k\"} 1\n"), "{text}");
    assert!(
        text.contains("lockrun_running_since_timestamp_seconds{key=\"k\"} 0.000200\n"),
        "{text}"
    );
    metrics.apply("k", ended(Outcome::Ok, Some(held(200, 0))), &two);
    let text = metrics.render();
    assert!(text.contains("lockrun_running{key=\"k\"} 0\n"), "{text}");
    assert!(!text.contains("running_since"), "{text}");
    assert!(!text.contains("# lockrun_holder"), "{text}");
    assert_eq!(
        metrics.keys["k"].first_seen_us,
        Some(200),
        "the first write's"
    );
}

#[test]
fn the_records_are_comments_that_read_back_and_gone_holders_are_dropped() {
    let mut metrics = Metrics::default();
    let odd = Process {
        pid: 7,
        start: "70".into(),
        boot: "b\"o\\ot".into(),
        ns: "1".into(),
    };
    metrics.apply("we\"ird\nkey", acquired(5_000_001), &odd);
    metrics.apply("a", acquired(10), &process(3));
    metrics.apply("b", acquired(20), &process(4));
    let text = metrics.render();
    let records: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("# lockrun_"))
        .collect();
    assert_eq!(
        records,
        [
            "# lockrun_holder{key=\"a\",pid=\"3\",start=\"30\",boot=\"b00t\",ns=\"4026531836\"} 0.000010",
            "# lockrun_holder{key=\"b\",pid=\"4\",start=\"40\",boot=\"b00t\",ns=\"4026531836\"} 0.000020",
            "# lockrun_holder{key=\"we\\\"ird\\nkey\",pid=\"7\",start=\"70\",boot=\"b\\\"o\\\\ot\",ns=\"1\"} 5.000001",
        ],
        "{text}"
    );
    // Every other line is a sample, a HELP, a TYPE or the records' comment.
    for line in text.lines().filter(|l| l.starts_with('#')) {
        let known = [
            "# HELP ",
            "# TYPE ",
            "# lockrun_holder{",
            "# The runs that hold",
        ];
        assert!(known.iter().any(|k| line.starts_with(k)), "{line}");
    }
    let mut again = Metrics::parse(&text);
    assert_eq!(again, metrics);
    // A write by any key drops every key's gone holders.
    again.prune(|p| p.pid == 3 || p.pid == 7);
    let text = again.render();
    assert!(text.contains("lockrun_running{key=\"a\"} 0\n"), "{text}");
    assert!(text.contains("lockrun_running{key=\"b\"} 1\n"), "{text}");
    assert!(
        text.contains("lockrun_running{key=\"we\\\"ird\\nkey\"} 0\n"),
        "{text}"
    );
    assert_eq!(text.matches("# lockrun_holder{").count(), 1, "{text}");
}

#[test]
fn records_it_cannot_read_are_dropped_and_running_is_never_read_back() {
    let text = "lockrun_running{key=\"old\"} 1\n\
                lockrun_running_since_timestamp_seconds{key=\"old\"} 5\n\
                # lockrun_holder{key=\"a\",pid=\"1\",start=\"2\",boot=\"b\",ns=\"n\"} 3.5\n\
                # lockrun_holder{pid=\"1\",key=\"a\",start=\"2\",boot=\"b\",ns=\"n\"} 3\n\
                # lockrun_holder{key=\"a\",pid=\"x\",start=\"2\",boot=\"b\",ns=\"n\"} 3\n\
                # lockrun_holder{key=\"a\",pid=\"1\",start=\"2\",boot=\"b\"} 3\n\
                # lockrun_holder{key=\"a\",pid=\"1\",start=\"2\",boot=\"b\",ns=\"n\",x=\"y\"} 3\n\
                # lockrun_holder{key=\"a\",pid=\"1\",start=\"2\",boot=\"b\",ns=\"n\"} -3\n\
                #lockrun_holder{key=\"a\",pid=\"1\",start=\"2\",boot=\"b\",ns=\"n\"} 3\n";
    let metrics = Metrics::parse(text);
    // A file from before the records: its gauge says 1, and no record backs
    // it, so nobody is known to hold the lock.
    assert!(!metrics.keys.contains_key("old"), "{metrics:?}");
    assert_eq!(
        metrics.keys["a"].holders.len(),
        1,
        "{:?}",
        metrics.keys["a"]
    );
    assert_eq!(metrics.keys["a"].holders[0].acquired_us, 3_500_000);
}

#[test]
fn first_seen_is_the_first_write_and_stays() {
    let mut metrics = Metrics::default();
    metrics.apply("k", ended(Outcome::Failed, Some(held(50, 1))), &process(1));
    metrics.apply("k", ended(Outcome::Ok, Some(held(90, 0))), &process(1));
    let m = &metrics.keys["k"];
    assert_eq!(m.first_seen_us, Some(3_000_050));
    assert_eq!(m.last_success_us, Some(3_000_090));
    // A key with history but no first_seen (an older file) gets it now.
    let mut old = Metrics::parse("lockrun_runs_total{key=\"k\",outcome=\"failed\"} 4\n");
    old.apply("k", acquired(777), &process(1));
    assert_eq!(old.keys["k"].first_seen_us, Some(777));
    assert_eq!(old.keys["k"].runs[Outcome::Failed.index()], 4);
}

#[test]
fn parsing_keeps_only_lockrun_samples_it_can_read() {
    let text = "# HELP other_metric x\nother_metric{key=\"a\"} 5\n\
                lockrun_runs_total{outcome=\"ok\", key=\"a\"} 4 1700000000000\n\
                lockrun_runs_total{key=\"a\",outcome=\"maybe\"} 9\n\
                lockrun_runs_total{key=\"a\",outcome=\"busy\",extra=\"x\"} 9\n\
                lockrun_running{key=\"a\"} nope\n\
                lockrun_last_wait_seconds{key=\"a\"} 1.5\n\
                lockrun_last_hold_seconds{key=\"a\"} 1e3\n\
                lockrun_running{key=\"unterminated} 1\n\
                garbage\n";
    let metrics = Metrics::parse(text);
    let m = &metrics.keys["a"];
    assert_eq!(m.runs, [4, 0, 0, 0, 0, 0]);
    assert_eq!(m.last_wait_us, Some(1_500_000));
    assert_eq!(m.last_hold_us, None);
    assert_eq!(metrics.keys.len(), 1);
}

#[test]
fn seconds_are_exact_to_the_microsecond() {
    assert_eq!(seconds(1_700_000_000_123_456), "1700000000.123456");
    assert_eq!(
        parse_seconds("1700000000.123456"),
        Some(1_700_000_000_123_456)
    );
    assert_eq!(parse_seconds("2"), Some(2_000_000));
    assert_eq!(parse_seconds("0.1234567"), Some(123_456));
    for bad in ["", ".5", "-1", "NaN", "+Inf", "1.2.3"] {
        assert_eq!(parse_seconds(bad), None, "{bad}");
    }
}

#[test]
fn an_update_creates_merges_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("lockrun.prom");
    let me = Process::me();
    update(&path, "a", ended(Outcome::Ok, Some(held(10, 0))), &me).expect("first update");
    update(&path, "b", ended(Outcome::Failed, Some(held(20, 1))), &me).expect("second update");
    let text = std::fs::read_to_string(&path).expect("the file");
    assert!(
        text.contains("lockrun_runs_total{key=\"a\",outcome=\"ok\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("lockrun_runs_total{key=\"b\",outcome=\"failed\"} 1\n"),
        "{text}"
    );
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["lockrun.prom", "lockrun.prom.lock"]);
}

#[test]
fn an_update_gives_up_on_a_held_lock_and_a_missing_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("lockrun.prom");
    let lock_file = File::create(with_suffix(&path, ".lock")).expect("lock file");
    let _held = Flock::lock(lock_file, FlockArg::LockExclusive).expect("flock");
    let began = Instant::now();
    let err = lock(&with_suffix(&path, ".lock"), Duration::from_millis(50))
        .expect_err("the lock is held");
    assert!(began.elapsed() >= Duration::from_millis(50));
    assert!(
        err.to_string().starts_with("another process held "),
        "{err}"
    );

    let missing = dir.path().join("missing/lockrun.prom");
    let err = update(&missing, "a", ended(Outcome::Busy, None), &Process::me())
        .expect_err("no directory");
    assert!(
        err.to_string().starts_with("cannot open the lock file "),
        "{err}"
    );
}
