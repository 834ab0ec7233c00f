//! The monitoring examples run as shipped: `examples/monitoring/nagios.cfg`'s
//! command line and `examples/monitoring/crontab`'s textfile line, against a
//! lock with no run, a success and a failed last run. (The systemd timer
//! with `OnFailure=` runs under a real systemd in supervisors.rs.)

use std::path::Path;

use crate::harness::*;

fn example(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// The Nagios command's line for the service's argument (`$ARG1$`), with
/// the lockrun under test for /usr/bin/lockrun.
fn nagios_command_line(key: &str) -> String {
    let config = example("examples/monitoring/nagios.cfg");
    let line = config
        .lines()
        .find_map(|line| line.trim().strip_prefix("command_line"))
        .expect("a command_line in nagios.cfg");
    let argument = config
        .lines()
        .find_map(|line| line.trim().strip_prefix("check_command"))
        .and_then(|command| command.trim().strip_prefix("check_lockrun!"))
        .expect("a service that uses check_lockrun");
    assert_eq!(
        argument, "billing",
        "the service's key changed: update this test"
    );
    line.trim()
        .replace("/usr/bin/lockrun", &LOCKRUN)
        .replace("$ARG1$", key)
}

/// The crontab's job line, its schedule left out, writing to `dir`.
fn textfile_job(dir: &Path) -> String {
    let crontab = example("examples/monitoring/crontab");
    let line = crontab
        .lines()
        .find(|line| line.starts_with('*'))
        .expect("a job line in the crontab");
    let command: Vec<&str> = line.split_whitespace().skip(5).collect();
    command
        .join(" ")
        .replace("lockrun check", &format!("{} check", &*LOCKRUN))
        .replace(
            "/var/lib/prometheus/node-exporter",
            &dir.display().to_string(),
        )
}

/// Runs `line` with sh as Nagios or cron would, the server named in the
/// environment: its exit status and stdout.
fn shell(redis: &Server, line: &str) -> (Option<i32>, String) {
    let output = std::process::Command::new("sh")
        .args(["-c", line])
        .env("LOCKRUN_REDIS_URL", redis.url())
        .env("LOCKRUN_CONFIG", "")
        .env_remove("LOCKRUN_REDIS_PASSWORD")
        .env_remove("LOCKRUN_PREFIX")
        .output()
        .expect("run sh");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[test]
fn the_nagios_command_and_the_textfile_line_say_each_state() {
    let redis = Server::start();
    let dir = scratch();
    let prom = dir.path().join("lockrun-check.prom");
    let nagios = nagios_command_line("billing");
    let cron = textfile_job(dir.path());

    // No run recorded: CRITICAL.
    let (code, out) = shell(&redis, &nagios);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.starts_with("LOCKRUN CRITICAL - billing"), "{out}");
    assert_eq!(shell(&redis, &cron).0, Some(0));
    assert_eq!(read_log(&prom), "lockrun_check_status{key=\"billing\"} 2\n");

    redis
        .lockrun("billing")
        .command(["true"])
        .run()
        .assert(Expect::success());
    let (code, out) = shell(&redis, &nagios);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("LOCKRUN OK - billing succeeded "), "{out}");
    shell(&redis, &cron);
    assert_eq!(read_log(&prom), "lockrun_check_status{key=\"billing\"} 0\n");

    // The last run failed, the success still recent: WARNING.
    redis
        .lockrun("billing")
        .command(["false"])
        .run()
        .assert(Expect::code(1));
    let (code, out) = shell(&redis, &nagios);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.starts_with("LOCKRUN WARNING - billing"), "{out}");
    shell(&redis, &cron);
    assert_eq!(read_log(&prom), "lockrun_check_status{key=\"billing\"} 1\n");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .map(|entry| entry.file_name())
        .collect();
    assert_eq!(left, ["lockrun-check.prom"], "a temporary file was left");
}
