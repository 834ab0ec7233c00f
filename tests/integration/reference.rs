//! The man pages are the reference: lockrun(1) names every flag,
//! subcommand, environment variable, exit status and `status --json` field,
//! lockrun-redis(7) every Redis key (the fields and keys as a live run shows
//! them).

use std::collections::BTreeSet;

use crate::generated::{read, REGENERATE};
use crate::harness::*;

fn every_command() -> Vec<clap::Command> {
    let mut cmd = lockrun::cli::command();
    cmd.build();
    let mut all = vec![cmd.clone()];
    all.extend(cmd.get_subcommands().cloned());
    all
}

/// Every long flag lockrun accepts, and every environment variable it reads
/// or sets.
fn flags_and_variables() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut flags = BTreeSet::new();
    let mut vars: BTreeSet<String> = [
        lockrun::PASSWORD_ENV,
        lockrun::SENTINEL_PASSWORD_ENV,
        "LOCKRUN_KEY",
        "LOCKRUN_FENCING_TOKEN",
    ]
    .map(String::from)
    .into();
    for cmd in every_command() {
        for arg in cmd.get_arguments() {
            if let Some(long) = arg.get_long() {
                if !matches!(long, "help" | "version") {
                    flags.insert(format!("--{long}"));
                }
            }
            if let Some(env) = arg.get_env() {
                vars.insert(env.to_string_lossy().into_owned());
            }
        }
    }
    (flags, vars)
}

const EXIT_CODES: [u8; 9] = {
    use lockrun::exit_code::*;
    [
        USAGE,
        REDIS_UNAVAILABLE,
        INTERNAL,
        BUSY_DEFAULT,
        LEASE_LOST,
        SUPERSEDED,
        TIMED_OUT,
        NOT_EXECUTABLE,
        NOT_FOUND,
    ]
};

/// `text` as roff writes it: every `-` escaped.
fn roff_escaped(text: &str) -> String {
    text.replace('-', "\\-")
}

/// The body of the man page's section `.SH NAME` (quoted or not), up to the
/// next `.SH`; empty when there is none.
fn man_section(page: &str, name: &str) -> String {
    let mut body = String::new();
    let mut inside = false;
    for line in page.lines() {
        if let Some(heading) = line.strip_prefix(".SH ") {
            inside = heading.trim_matches('"') == name;
            continue;
        }
        if inside {
            body += line;
            body.push('\n');
        }
    }
    body
}

/// `.TP` entries whose tag line is `tag`: how the man page lists an item.
fn has_entry(section: &str, tag: &str) -> bool {
    section.contains(&format!(".TP\n{tag}\n"))
}

fn assert_none_missing(missing: &[String]) {
    assert!(
        missing.is_empty(),
        "missing from man/lockrun.1 (edit man/sections.roff or src/cli.rs, \
         then regenerate with {REGENERATE}):\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn man_page_names_every_flag_variable_and_exit_status() {
    let page = read("man/lockrun.1");
    let (flags, vars) = flags_and_variables();
    let mut missing = Vec::new();
    for flag in &flags {
        if !page.contains(&format!("\\fB{}\\fR", roff_escaped(flag))) {
            missing.push(format!("flag {flag}"));
        }
    }
    let environment = man_section(&page, "ENVIRONMENT");
    for var in &vars {
        if !has_entry(&environment, &format!("\\fB{var}\\fR")) {
            missing.push(format!("variable {var} (an entry under ENVIRONMENT)"));
        }
    }
    for sub in every_command().iter().skip(1) {
        if !page.contains(&format!(".SS \"lockrun {}\"\n", sub.get_name())) {
            missing.push(format!("subcommand {}", sub.get_name()));
        }
    }
    let exit_status = man_section(&page, "EXIT STATUS");
    for code in EXIT_CODES {
        if !has_entry(&exit_status, &code.to_string()) {
            missing.push(format!("exit status {code} (an entry under EXIT STATUS)"));
        }
    }
    assert_none_missing(&missing);
}

/// Every field name in a JSON value, nested ones (in arrays too) included.
fn field_names(value: &serde_json::Value, names: &mut BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (name, inner) in map {
                names.insert(name.clone());
                field_names(inner, names);
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                field_names(item, names);
            }
        }
        _ => {}
    }
}

/// `lockrun status --json` on these servers, parsed.
fn status_json(servers: &[Server], name: &str, code: i32) -> serde_json::Value {
    let (shown, json) = Lockrun::on_all(servers).key(name).status_json();
    assert_eq!(shown, Some(code), "lockrun status: {json}");
    json
}

/// Runs lockrun so that every field of `status --json` shows and every key
/// and channel a lock can have exists: a holder, and a waiter with
/// `--supersede` that listens for its wake-up; then the same status over a
/// quorum of three servers. Checks the man page against what it saw: each
/// JSON field in bold, each key (`P{name}:suffix`) an entry under REDIS KEYS.
#[test]
fn man_page_names_every_status_json_field_and_redis_key() {
    let redis = Server::start();
    // A run before, so that its record in the history shows too.
    redis.lockrun("job").command(["true"]).run();
    let mut holder = redis.lockrun("job").command(["sleep", "60"]).hold();
    let mut waiter = redis
        .lockrun("job")
        .args(["--wait", "1m", "--supersede"])
        .command(["true"])
        .spawn();
    let channels = || -> Vec<String> {
        redis
            .query(redis::cmd("PUBSUB").arg("CHANNELS").arg("*"))
            .expect("PUBSUB CHANNELS")
    };
    let mut json = serde_json::Value::Null;
    assert!(
        eventually(PATIENCE, || {
            json = status_json(std::slice::from_ref(&redis), "job", 0);
            json["waiters"].as_array().is_some_and(|w| !w.is_empty()) && !channels().is_empty()
        }),
        "the waiter never showed, listening: {json}"
    );
    let keys = redis.keys();
    let channels = channels();
    holder.run.signal(nix::sys::signal::Signal::SIGTERM);
    holder.run.wait();
    waiter.wait();

    let mut names = BTreeSet::new();
    field_names(&json, &mut names);
    let quorum: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    field_names(&status_json(&quorum, "job", 1), &mut names);
    for expected in ["fencing_token", "waited_ms", "members", "reachable"] {
        assert!(names.contains(expected), "{expected} in {names:?}");
    }

    let page = read("man/lockrun.1");
    let mut missing = Vec::new();
    for name in &names {
        if !page.contains(&format!("\\fB{}\\fR", roff_escaped(name))) {
            missing.push(format!("status --json field {name}"));
        }
    }
    // Keys and channels as the man page writes them: prefix P, lock name
    // and a waiter's token in italics.
    let lock = "lockrun:{job}";
    let mut forms = BTreeSet::new();
    for key in &keys {
        let suffix = key
            .strip_prefix(lock)
            .unwrap_or_else(|| panic!("a key of lock job: {key}"));
        forms.insert(suffix.to_owned());
    }
    for channel in &channels {
        let suffix = channel
            .strip_prefix(&format!("{lock}:wake:"))
            .map(|_| ":wake:\\fItoken\\fR")
            .unwrap_or_else(|| panic!("a wake-up channel of lock job: {channel}"));
        forms.insert(suffix.to_owned());
    }
    assert!(
        forms.len() >= 8,
        "the lease, its holder, the fence, the line's keys and a channel: {forms:?}"
    );
    let section = man_section(&read("man/lockrun-redis.7"), "REDIS KEYS");
    for suffix in &forms {
        let tag = format!("\\fIP\\fR{{\\fIname\\fR}}{}", roff_escaped(suffix));
        if !has_entry(&section, &tag) {
            missing.push(format!(
                "Redis key P{{name}}{suffix} (an entry under REDIS KEYS)"
            ));
        }
    }
    assert_none_missing(&missing);
}
