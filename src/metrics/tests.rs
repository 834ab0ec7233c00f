//! The file's format, parsing and merging, and updates of a real file.

use super::*;

const S: Duration = Duration::from_secs(1);

fn ended(outcome: Outcome, held: Option<Held>) -> Change {
    Change::Ended {
        outcome,
        waited: Duration::from_millis(250),
        held,
    }
}

fn held(acquired_us: u64, exit_status: u8) -> Held {
    Held {
        acquired_us,
        ended_us: acquired_us + 3_000_000,
        duration: 3 * S,
        exit_status,
    }
}

#[test]
fn a_run_renders_every_metric_once_with_escaped_keys() {
    let mut metrics = Metrics::default();
    let key = "we\"ird\\key\nname";
    metrics.apply(
        key,
        ended(Outcome::Ok, Some(held(1_700_000_000_000_001, 0))),
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
fn a_busy_run_writes_only_its_count_and_wait() {
    let mut metrics = Metrics::default();
    metrics.apply("job", ended(Outcome::Busy, None));
    let text = metrics.render();
    assert!(!text.contains("lockrun_running"), "{text}");
    assert!(!text.contains("lockrun_last_exit_status"), "{text}");
    assert!(text.contains("lockrun_runs_total{key=\"job\",outcome=\"busy\"} 1\n"));
    assert!(text.contains("lockrun_last_wait_seconds{key=\"job\"} 0.250000\n"));
}

#[test]
fn merging_sums_counts_and_keeps_other_keys() {
    let mut metrics = Metrics::default();
    metrics.apply("a", ended(Outcome::Ok, Some(held(10, 0))));
    metrics.apply("b", ended(Outcome::Busy, None));
    let mut again = Metrics::parse(&metrics.render());
    again.apply("a", ended(Outcome::Failed, Some(held(20, 3))));
    again.apply("a", ended(Outcome::Ok, Some(held(30, 0))));
    again.apply("c", ended(Outcome::Unavailable, None));
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
fn a_late_write_leaves_a_newer_acquisition_running() {
    let mut metrics = Metrics::default();
    // Run 2 took the lock at 200 and wrote it before run 1 (acquired at 100)
    // wrote its acquisition and its end.
    metrics.apply(
        "k",
        Change::Acquired {
            at_us: 200,
            waited: S,
        },
    );
    metrics.apply(
        "k",
        Change::Acquired {
            at_us: 100,
            waited: S,
        },
    );
    metrics.apply("k", ended(Outcome::Lost, Some(held(100, 76))));
    let m = &metrics.keys["k"];
    assert_eq!((m.running, m.acquired_us), (Some(true), Some(200)));
    assert_eq!(m.last_exit_status, Some(76));
    metrics.apply("k", ended(Outcome::Ok, Some(held(200, 0))));
    let m = &metrics.keys["k"];
    assert_eq!((m.running, m.acquired_us), (Some(false), Some(200)));
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
    assert_eq!((m.running, m.last_hold_us), (None, None));
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
    update(&path, "a", ended(Outcome::Ok, Some(held(10, 0)))).expect("first update");
    update(&path, "b", ended(Outcome::Failed, Some(held(20, 1)))).expect("second update");
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
    let err = update(&missing, "a", ended(Outcome::Busy, None)).expect_err("no directory");
    assert!(
        err.to_string().starts_with("cannot open the lock file "),
        "{err}"
    );
}
