//! `--metrics-file`: the file is Prometheus text after every kind of run,
//! concurrent runs sharing it lose nothing, a reader never sees part of it,
//! and a file that cannot be written only costs a warning. `lockrun_running`
//! counts the runs that hold the lock, with `--slots` too, and a lockrun
//! killed with SIGKILL stops counting at the next write; the example alert
//! rules pass their promtool tests.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::Signal;

use crate::docs::on_path;
use crate::generated::{read, repo};
use crate::harness::*;

/// A series, `name{label="value",...}` with its labels unescaped and in
/// order, and its value.
type Samples = BTreeMap<String, f64>;

/// `name{labels}` as `Samples` names it.
fn series(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<_> = labels.iter().map(|(n, v)| format!("{n}={v:?}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

/// Parses the exposition format strictly: `# HELP` and `# TYPE` at most once
/// per metric, before its samples; a metric's samples together; each sample
/// `name{label="value",...} value` with only the format's escapes; the text
/// ending in a newline; any other comment is skipped, as every reader of the
/// format does. Returns the samples and each metric's type.
fn parse(text: &str) -> Result<(Samples, BTreeMap<String, String>), String> {
    if !text.ends_with('\n') {
        return Err(format!("does not end in a newline: {text:?}"));
    }
    let (mut samples, mut types) = (Samples::new(), BTreeMap::new());
    let (mut helped, mut done, mut current) = (BTreeSet::new(), BTreeSet::new(), None);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or_default().to_owned();
            if !helped.insert(name.clone()) {
                return Err(format!("second HELP for {name}"));
            }
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or(format!("bad TYPE: {line}"))?;
            if !matches!(kind, "gauge" | "counter") || types.contains_key(name) {
                return Err(format!("bad or second TYPE: {line}"));
            }
            types.insert(name.to_owned(), kind.to_owned());
        } else if line.starts_with('#') {
            // A comment: lockrun's records of the runs that hold a lock.
        } else {
            let (name, labels, value) = sample(line).ok_or(format!("not a sample: {line:?}"))?;
            if !types.contains_key(&name) {
                return Err(format!("{name}: a sample before its TYPE"));
            }
            if current.as_ref() != Some(&name) {
                if !done.insert(name.clone()) {
                    return Err(format!("{name}: samples apart"));
                }
                current = Some(name.clone());
            }
            let labels: Vec<(&str, &str)> = labels
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            if samples.insert(series(&name, &labels), value).is_some() {
                return Err(format!("a second sample: {line}"));
            }
        }
    }
    Ok((samples, types))
}

/// Label names and values, unescaped.
type Labels = Vec<(String, String)>;

/// One sample line: name, labels, value.
fn sample(line: &str) -> Option<(String, Labels, f64)> {
    let (name, mut rest) = line.split_once('{')?;
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if name.is_empty() || !name.chars().all(valid) {
        return None;
    }
    let mut labels = Vec::new();
    loop {
        let (label, after) = rest.split_once("=\"")?;
        if label.is_empty() || !label.chars().all(valid) {
            return None;
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => value.push(match chars.next()?.1 {
                    'n' => '\n',
                    c @ ('\\' | '"') => c,
                    _ => return None,
                }),
                (_, c) => value.push(c),
            }
        };
        labels.push((label.to_owned(), value));
        rest = &after[end + 1..];
        if let Some(after) = rest.strip_prefix('}') {
            let value = after.strip_prefix(' ')?;
            return Some((name.to_owned(), labels, value.parse().ok()?));
        }
        rest = rest.strip_prefix(',')?;
    }
}

/// The file at `path`, parsed; fails the test when it is not valid.
#[track_caller]
fn samples(path: &Path) -> Samples {
    let text = std::fs::read_to_string(path).expect("the metrics file");
    parse(&text)
        .unwrap_or_else(|err| panic!("{err}:\n{text}"))
        .0
}

#[track_caller]
fn value(samples: &Samples, name: &str, key: &str) -> f64 {
    let series = series(name, &[("key", key)]);
    *samples
        .get(&series)
        .unwrap_or_else(|| panic!("no {series} in {samples:#?}"))
}

/// The gauge's value, None when the file has no such series.
fn maybe(samples: &Samples, name: &str, key: &str) -> Option<f64> {
    samples.get(&series(name, &[("key", key)])).copied()
}

/// The pids in the file's records of the runs that hold `key`'s lock.
fn holders(path: &Path, key: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(path).expect("the metrics file");
    text.lines()
        .filter_map(|line| sample(line.strip_prefix("# ")?))
        .filter(|(name, labels, _)| {
            name == "lockrun_holder" && labels[0] == ("key".into(), key.into())
        })
        .map(|(_, labels, _)| {
            let (_, pid) = labels.iter().find(|(n, _)| n == "pid").expect("a pid");
            pid.parse().expect("a number")
        })
        .collect()
}

/// Waits until `key`'s `lockrun_running` in the file at `path` is `want`.
#[track_caller]
fn running_becomes(path: &Path, key: &str, want: f64) {
    let now = || maybe(&samples(path), "lockrun_running", key);
    let became = eventually(PATIENCE, || path.exists() && now() == Some(want));
    assert!(became, "{key} running never {want}: {:?}", samples(path));
}

fn runs(samples: &Samples, key: &str, outcome: &str) -> f64 {
    let series = series("lockrun_runs_total", &[("key", key), ("outcome", outcome)]);
    samples.get(&series).copied().unwrap_or(-1.0)
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

#[test]
fn the_file_is_prometheus_text_after_a_success_a_failure_and_a_busy_run() {
    let redis = Server::start();
    let dir = scratch();
    let path = dir.path().join("lockrun.prom");
    let metrics = ["--metrics-file", path.to_str().expect("UTF-8")];
    let ran = redis.lockrun("job").args(metrics).command(["true"]).run();
    ran.assert(Expect::success());
    let s = samples(&path);
    assert_eq!(runs(&s, "job", "ok"), 1.0);
    assert_eq!(value(&s, "lockrun_running", "job"), 0.0);
    assert_eq!(value(&s, "lockrun_last_exit_status", "job"), 0.0);
    let success = value(&s, "lockrun_last_success_timestamp_seconds", "job");
    assert!((now() - success).abs() < 60.0, "{success}");

    let ran = redis
        .lockrun("job")
        .args(metrics)
        .command(["sh", "-c", "exit 3"])
        .run();
    ran.assert(Expect::code(3));
    let s = samples(&path);
    assert_eq!(
        (runs(&s, "job", "ok"), runs(&s, "job", "failed")),
        (1.0, 1.0)
    );
    assert_eq!(value(&s, "lockrun_last_exit_status", "job"), 3.0);

    // The variable, and a file that says so while the lock is held.
    let mut holder = redis
        .lockrun("job")
        .env("LOCKRUN_METRICS_FILE", &path)
        .hold();
    let running = eventually(PATIENCE, || {
        value(&samples(&path), "lockrun_running", "job") == 1.0
    });
    assert!(running, "never running: {:?}", samples(&path));
    let ran = redis.lockrun("job").args(metrics).command(["true"]).run();
    ran.assert(
        Expect::code(75)
            .stderr_starts("lockrun: job is held by ")
            .stderr_one_line(),
    );
    let s = samples(&path);
    assert_eq!(runs(&s, "job", "busy"), 1.0);
    assert_eq!(
        value(&s, "lockrun_running", "job"),
        1.0,
        "a busy run leaves it"
    );
    holder.go();
    holder.end().assert(Expect::success());
    let s = samples(&path);
    assert_eq!(value(&s, "lockrun_running", "job"), 0.0);
    assert_eq!(runs(&s, "job", "ok"), 2.0);
    assert!(value(&s, "lockrun_last_hold_seconds", "job") > 0.0);
}

#[test]
fn keys_are_escaped_and_the_man_page_lists_every_metric() {
    let redis = Server::start();
    let dir = scratch();
    let path = dir.path().join("lockrun.prom");
    let odd = "we\"ird\\key";
    for key in ["job", odd] {
        let ran = redis
            .lockrun(key)
            .arg("--metrics-file")
            .arg(&path)
            .command(["true"])
            .run();
        ran.assert(Expect::success());
    }
    // While a run holds a lock, every metric is in the file.
    let mut holder = redis
        .lockrun("held")
        .arg("--metrics-file")
        .arg(&path)
        .hold();
    running_becomes(&path, "held", 1.0);
    let text = std::fs::read_to_string(&path).expect("the file");
    holder.go();
    holder.end().assert(Expect::success());
    assert!(text.contains("{key=\"we\\\"ird\\\\key\"}"), "{text}");
    let (s, types) = parse(&text).unwrap_or_else(|err| panic!("{err}:\n{text}"));
    assert_eq!((runs(&s, odd, "ok"), runs(&s, "job", "ok")), (1.0, 1.0));
    assert_eq!(types.len(), 9, "{types:?}");
    man_page_lists(&types);
}

/// The man page's METRICS section lists each metric with its type, and
/// gives the alert rules of the example file.
fn man_page_lists(types: &BTreeMap<String, String>) {
    let page = read("man/lockrun.1");
    for (name, kind) in types {
        let entry = format!(".TP\n\\fB{name}\\fR ({kind})\n");
        assert!(page.contains(&entry), "man/sections.roff: {entry}");
    }
    let rules = read("examples/prometheus/lockrun-alerts.yml");
    let exprs: Vec<&str> = rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("expr: "))
        .collect();
    assert_eq!(exprs.len(), 2, "{rules}");
    for expr in exprs {
        let roff = expr.replace('-', "\\-");
        assert!(
            page.contains(&format!("\n{roff}\n")),
            "the man page gives {expr}"
        );
    }
}

#[test]
fn twenty_concurrent_runs_on_five_keys_lose_no_key_and_no_count() {
    let redis = Server::start();
    let dir = scratch();
    let path = dir.path().join("lockrun.prom");
    let runs_of: Vec<(String, Running, std::path::PathBuf)> = (0..20)
        .map(|i| {
            let key = format!("job-{}", i % 5);
            let log = dir.path().join(format!("{i}.stderr"));
            let mut run = redis
                .lockrun(&key)
                .arg("--metrics-file")
                .arg(&path)
                .stderr(log_file(&log));
            // Half wait their turn, half are busy while another runs.
            if i % 2 == 1 {
                run = run.args(["--wait", "60s"]);
            }
            (key, run.command(["sleep", "0.2"]).spawn(), log)
        })
        .collect();
    let mut expected: BTreeMap<(String, &str), f64> = BTreeMap::new();
    for (key, mut run, log) in runs_of {
        let status = run.wait_for(Duration::from_secs(90)).expect("a run ended");
        let outcome = match status.code() {
            Some(0) => "ok",
            Some(75) => "busy",
            other => panic!("{key} exited {other:?}: {}", read_log(&log)),
        };
        *expected.entry((key, outcome)).or_default() += 1.0;
        assert!(!read_log(&log).contains("metrics"), "{}", read_log(&log));
    }
    let s = samples(&path);
    let mut total = 0.0;
    for i in 0..5 {
        let key = format!("job-{i}");
        for outcome in ["ok", "failed", "busy", "lost", "timeout", "unavailable"] {
            let want = expected
                .get(&(key.clone(), outcome))
                .copied()
                .unwrap_or(0.0);
            assert_eq!(runs(&s, &key, outcome), want, "{key} {outcome}: {s:#?}");
            total += want;
        }
        assert_eq!(value(&s, "lockrun_running", &key), 0.0, "{key}");
    }
    assert_eq!(total, 20.0);
}

#[test]
fn a_reader_never_sees_a_half_written_file() {
    let redis = Server::start();
    let dir = scratch();
    let path = dir.path().join("lockrun.prom");
    // Long names make the file span several pages.
    let keys: Vec<String> = (0..5).map(|i| format!("{i}-{}", "k".repeat(200))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (path, stop) = (path.clone(), Arc::clone(&stop));
        std::thread::spawn(move || watch(&path, &stop))
    };
    for batch in 0..3 {
        let mut running: Vec<Running> = keys
            .iter()
            .flat_map(|key| [key, key])
            .map(|key| {
                redis
                    .lockrun(key)
                    .arg("--metrics-file")
                    .arg(&path)
                    .args(["--wait", "60s"])
                    .command(["true"])
                    .spawn()
            })
            .collect();
        for run in &mut running {
            let limit = Duration::from_secs(90);
            run.exits_within(limit, Expect::success(), || format!("batch {batch}"));
        }
    }
    stop.store(true, Ordering::SeqCst);
    let (reads, problems) = reader.join().expect("reader");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(reads >= 10, "only {reads} reads of the file");
    let s = samples(&path);
    for key in &keys {
        assert_eq!(runs(&s, key, "ok"), 6.0, "{key}");
    }
}

/// Reads the file in a loop until `stop`: every read must parse, and once
/// it exists, it must exist at every read, with no count lower and no
/// series fewer than before (but `lockrun_running_since_timestamp_seconds`,
/// there only while a run holds the lock). Returns the reads and what went
/// wrong.
fn watch(path: &Path, stop: &AtomicBool) -> (usize, Vec<String>) {
    let (mut reads, mut problems) = (0, Vec::new());
    let mut last = Samples::new();
    while !stop.load(Ordering::SeqCst) && problems.len() < 5 {
        std::thread::sleep(Duration::from_millis(1));
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if last.is_empty() && err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => {
                problems.push(format!("read: {err}"));
                continue;
            }
        };
        reads += 1;
        let samples = match parse(&text) {
            Ok((samples, _)) => samples,
            Err(err) => {
                problems.push(format!("{err}:\n{text}"));
                continue;
            }
        };
        for (series, before) in &last {
            let counter = series.starts_with("lockrun_runs_total");
            let passing = series.starts_with("lockrun_running_since_timestamp_seconds{");
            match samples.get(series) {
                Some(now) if counter && now < before => problems.push(format!("{series} fell")),
                None if !passing => problems.push(format!("{series} vanished:\n{text}")),
                _ => {}
            }
        }
        last = samples;
    }
    (reads, problems)
}

/// Lines of lockrun's stderr that are the metrics warning.
fn warnings(stderr: &str) -> usize {
    stderr
        .lines()
        .filter(|line| {
            line.starts_with("lockrun: cannot update the metrics file ")
                && line.ends_with("; the run is not affected")
        })
        .count()
}

/// `expect`, and among the lines on stderr one metrics warning.
fn one_warning(expect: Expect) -> Expect {
    expect.stderr_where("one metrics warning", |stderr| warnings(stderr) == 1)
}

#[test]
fn an_unwritable_metrics_file_only_warns() {
    let redis = Server::start();
    let dir = scratch();
    let regular = dir.path().join("regular");
    std::fs::write(&regular, "").expect("a file");
    let unwritable = [
        dir.path().join("missing/lockrun.prom"),
        regular.join("lockrun.prom"),
        // A directory: the lock file can be made, the file not read.
        dir.path().to_path_buf(),
    ];
    for path in &unwritable {
        let ran = redis
            .lockrun("job")
            .arg("--metrics-file")
            .arg(path)
            .command(["sh", "-c", "echo out; exit 3"])
            .run();
        ran.assert(
            one_warning(Expect::code(3).stdout("out\n"))
                .stderr_one_line()
                .context(path.display().to_string()),
        );
    }
    let missing = &unwritable[0];
    let mut holder = redis.lockrun("job").hold();
    let ran = redis
        .lockrun("job")
        .arg("--metrics-file")
        .arg(missing)
        .command(["true"])
        .run();
    ran.assert(one_warning(Expect::code(75)).stderr_has("\nlockrun: job is held by "));
    holder.go();
    holder.run.wait();
    let ran = Lockrun::via("redis://127.0.0.1:1")
        .key("job")
        .arg("--metrics-file")
        .arg(missing)
        .command(["true"])
        .run();
    ran.assert(
        one_warning(Expect::code(69))
            .stderr_has("\nlockrun: cannot reach Redis at redis://127.0.0.1:1: "),
    );
}

/// A lock file that another process holds makes each write give up after
/// 2 s. Those writes must not hold up the lease: with a 1.5s ttl, a lease
/// kept waiting for them would lapse, and the run would end 76.
#[test]
fn a_held_metrics_lock_delays_neither_the_lease_nor_the_command() {
    let redis = Server::start();
    let dir = scratch();
    let path = dir.path().join("lockrun.prom");
    let lock_file = File::create(dir.path().join("lockrun.prom.lock")).expect("lock file");
    let held = Flock::lock(lock_file, FlockArg::LockExclusive).expect("flock");
    let ran = redis
        .lockrun("job")
        .args(["--ttl", "1500ms", "--metrics-file"])
        .arg(&path)
        .command(["sleep", "2.5"])
        .run();
    ran.assert(
        one_warning(Expect::success())
            .stderr_has("for more than 2s")
            .stderr_one_line(),
    );
    assert!(!path.exists());
    drop(held);
}

/// Two runs of one key on this host at once, with `--slots 2` and with
/// `--shared`: the second to take the lock ends first, and the file still
/// counts the first, which still runs its command.
#[test]
fn two_runs_of_a_key_on_one_host_count_two_then_one_then_zero() {
    let redis = Server::start();
    let dir = scratch();
    let path = dir.path().join("lockrun.prom");
    for (key, share) in [
        ("slots", vec!["--slots", "2"]),
        ("shared", vec!["--shared"]),
    ] {
        let metrics = ["--metrics-file", path.to_str().expect("UTF-8")];
        let start = || redis.lockrun(key).args(&share).args(metrics).hold();
        let mut first = start();
        running_becomes(&path, key, 1.0);
        let since = value(
            &samples(&path),
            "lockrun_running_since_timestamp_seconds",
            key,
        );
        let mut second = start();
        running_becomes(&path, key, 2.0);
        let both = holders(&path, key);
        assert_eq!(both.len(), 2, "{key}: {both:?}");
        for holder in [&first, &second] {
            let pid = holder.run.pid().as_raw().unsigned_abs();
            assert!(both.contains(&pid), "{key}: no record of {pid} in {both:?}");
        }

        second.go();
        second.end().assert(Expect::success());
        let s = samples(&path);
        assert_eq!(
            value(&s, "lockrun_running", key),
            1.0,
            "{key}: the first runs"
        );
        assert_eq!(
            value(&s, "lockrun_running_since_timestamp_seconds", key),
            since,
            "{key}: the first run's acquisition"
        );
        assert_eq!(runs(&s, key, "ok"), 1.0, "{key}");
        let pid = first.run.pid().as_raw().unsigned_abs();
        assert_eq!(holders(&path, key), [pid], "{key}");

        first.go();
        first.end().assert(Expect::success());
        let s = samples(&path);
        assert_eq!(value(&s, "lockrun_running", key), 0.0, "{key}");
        assert_eq!(
            maybe(&s, "lockrun_running_since_timestamp_seconds", key),
            None,
            "{key}"
        );
        assert!(holders(&path, key).is_empty(), "{key}");
    }
}

/// A lockrun killed with SIGKILL cannot take its record out; the next
/// lockrun to write the file, for any key, finds its process gone and
/// counts it no more, and a run that takes the lock after it counts alone.
#[test]
fn a_lockrun_killed_with_sigkill_stops_counting_at_the_next_write() {
    let redis = Server::start();
    let dir = scratch();
    let path = dir.path().join("lockrun.prom");
    let mut killed = redis
        .lockrun("job")
        .args(["--ttl", "2s", "--metrics-file"])
        .arg(&path)
        .hold();
    running_becomes(&path, "job", 1.0);
    let pid = killed.run.pid().as_raw().unsigned_abs();
    assert_eq!(holders(&path, "job"), [pid]);
    killed.run.signal(Signal::SIGKILL);
    killed.run.exits(Expect::killed_by(Signal::SIGKILL));
    assert_eq!(
        value(&samples(&path), "lockrun_running", "job"),
        1.0,
        "nobody has written the file since"
    );

    // Another key's run corrects it.
    let ran = redis
        .lockrun("other")
        .arg("--metrics-file")
        .arg(&path)
        .command(["true"])
        .run();
    ran.assert(Expect::success());
    let s = samples(&path);
    assert_eq!(value(&s, "lockrun_running", "job"), 0.0, "{s:#?}");
    assert_eq!(
        maybe(&s, "lockrun_running_since_timestamp_seconds", "job"),
        None
    );
    assert!(holders(&path, "job").is_empty());

    // The next holder of the key, once the killed run's lease has lapsed,
    // counts alone.
    redis.expire_lease("job");
    let mut next = redis
        .lockrun("job")
        .args(["--wait", "60s", "--metrics-file"])
        .arg(&path)
        .hold();
    running_becomes(&path, "job", 1.0);
    assert_eq!(
        holders(&path, "job"),
        [next.run.pid().as_raw().unsigned_abs()]
    );
    next.go();
    next.end().assert(Expect::success());
    assert_eq!(value(&samples(&path), "lockrun_running", "job"), 0.0);
}

/// A key that has failed from its first run has no success time; its first
/// run's time is there for the "no recent success" alert to count from.
#[test]
fn a_key_whose_first_run_fails_has_what_the_alert_needs() {
    let redis = Server::start();
    let dir = scratch();
    let path = dir.path().join("lockrun.prom");
    let before = now();
    for _ in 0..2 {
        let ran = redis
            .lockrun("never-ok")
            .arg("--metrics-file")
            .arg(&path)
            .command(["sh", "-c", "exit 3"])
            .run();
        ran.assert(Expect::code(3));
    }
    let s = samples(&path);
    let key = "never-ok";
    assert_eq!(
        maybe(&s, "lockrun_last_success_timestamp_seconds", key),
        None
    );
    assert_eq!(runs(&s, key, "failed"), 2.0);
    let first = value(&s, "lockrun_first_seen_timestamp_seconds", key);
    let acquired = value(&s, "lockrun_acquired_timestamp_seconds", key);
    assert!(
        before - 1.0 <= first && first < acquired,
        "the first run's time, not the last's: {first} {acquired}"
    );
    assert_eq!(value(&s, "lockrun_running", key), 0.0);
}

/// `promtool test rules` runs the example rules' tests, when promtool is
/// here. Debian's prometheus package has it, but scripts/test does not
/// install it: with its dependencies it takes 332 MB (218 MB of them
/// libjs-moment-timezone, for the web UI). Without it the test says so on
/// the terminal, which cargo does not hide, rather than pass in silence.
#[test]
fn the_example_alert_rules_pass_their_promtool_tests() {
    let dir = repo().join("examples/prometheus");
    // The tests feed the rules only metrics that lockrun writes.
    let tests = read("examples/prometheus/lockrun-alerts.test.yml");
    let page = read("man/lockrun.1");
    for line in tests.lines() {
        if let Some(rest) = line.trim().strip_prefix("- series: '") {
            let name = rest.split('{').next().unwrap_or_default();
            assert!(page.contains(&format!(".TP\n\\fB{name}\\fR (")), "{name}");
        }
    }
    let Some(promtool) = on_path("promtool") else {
        // Straight to the terminal: libtest captures only print! and
        // eprint!.
        let _ = writeln!(
            std::io::stderr(),
            "metrics::the_example_alert_rules_pass_their_promtool_tests: SKIPPED \
             promtool test rules: promtool is not on PATH"
        );
        return;
    };
    for (check, file) in [
        ("check", "lockrun-alerts.yml"),
        ("test", "lockrun-alerts.test.yml"),
    ] {
        let output = Command::new(&promtool)
            .args([check, "rules", file])
            .current_dir(&dir)
            .output()
            .expect("run promtool");
        assert!(
            output.status.success(),
            "promtool {check} rules {file}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
