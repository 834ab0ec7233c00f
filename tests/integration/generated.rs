//! The man page and shell completions are generated from the clap definition; this test fails when the checked-in files drift.
//!
//! This module is the generator. `man/lockrun.1` is clap_mangen's NAME,
//! DESCRIPTION and OPTIONS, a SYNOPSIS and SUBCOMMANDS section built from the
//! same definition, then the hand-written `man/sections.roff` (environment,
//! exit status, Redis keys, guarantees, examples). `completions/` holds
//! clap_complete's bash, zsh and fish scripts, each with a few lines added
//! for what follows `--` (see "Completions" below; `completion.rs` drives
//! them in each shell). The test renders all of them
//! in memory and compares; with `LOCKRUN_UPDATE_GENERATED=1` it rewrites the
//! files instead:
//!
//!     LOCKRUN_UPDATE_GENERATED=1 cargo test --test integration generated
//!
//! The other tests here keep the hand-written documentation honest. The man
//! page is the reference: it names every flag, subcommand, environment
//! variable, exit status, `status --json` field and Redis key (the fields and
//! keys as a live run shows them). README is only held to what it must have:
//! a two-command quick start whose test command is the one `.ci/run` runs, at
//! most 250 lines; links between the Markdown files lead to files and
//! headings that exist, and the Debian package ships `docs/`. The command
//! lines in the examples are accepted by lockrun, and the systemd example
//! passes `systemd-analyze verify`.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use clap_mangen::Man;

use crate::harness::*;

const UPDATE_ENV: &str = "LOCKRUN_UPDATE_GENERATED";
const REGENERATE: &str = "LOCKRUN_UPDATE_GENERATED=1 cargo test --test integration generated";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    fs::read_to_string(repo().join(path)).unwrap_or_else(|err| panic!("read {path}: {err}"))
}

/// Every generated file, as a path in the repository and its contents.
fn generated() -> Vec<(&'static str, String)> {
    vec![
        ("man/lockrun.1", man_page()),
        ("completions/lockrun.bash", completion(Shell::Bash)),
        ("completions/_lockrun", completion(Shell::Zsh)),
        ("completions/lockrun.fish", completion(Shell::Fish)),
    ]
}

#[test]
fn generated_files_match_the_command_line() {
    let update = std::env::var_os(UPDATE_ENV).is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (path, want) in generated() {
        let file = repo().join(path);
        let have = fs::read_to_string(&file).unwrap_or_default();
        if have == want {
            continue;
        }
        if update {
            write(&file, &want).unwrap_or_else(|err| panic!("write {path}: {err}"));
            eprintln!("rewrote {path}");
        } else {
            stale.push(format!("{path}: {}", first_difference(&have, &want)));
        }
    }
    assert!(
        stale.is_empty(),
        "generated files differ from what src/cli.rs and man/sections.roff produce \
         (edit those, not the generated files):\n  {}\nregenerate with: {REGENERATE}",
        stale.join("\n  ")
    );
}

fn write(file: &Path, contents: &str) -> io::Result<()> {
    if let Some(dir) = file.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(file, contents)
}

fn first_difference(have: &str, want: &str) -> String {
    if have.is_empty() {
        return "missing".into();
    }
    let (mut have_lines, mut want_lines) = (have.lines(), want.lines());
    for number in 1.. {
        match (have_lines.next(), want_lines.next()) {
            (Some(h), Some(w)) if h == w => continue,
            (None, None) => break,
            (h, w) => {
                return format!(
                    "line {number} is {:?}, expected {:?}",
                    h.unwrap_or("<end of file>"),
                    w.unwrap_or("<end of file>")
                )
            }
        }
    }
    "differs in line endings".into()
}

// --- The man page ---

/// The header roff writes before every rendering; the page carries it once.
fn roff_preamble() -> String {
    Roff::new().render()
}

/// Roff written here, without the preamble.
fn body(roff: &Roff) -> String {
    let text = roff.render();
    text.strip_prefix(&roff_preamble())
        .unwrap_or(&text)
        .to_owned()
}

/// One piece rendered by clap_mangen, without the preamble and, for pieces
/// that become part of another section, without their `.SH` heading.
fn piece(render: impl FnOnce(&mut Vec<u8>) -> io::Result<()>, keep_heading: bool) -> String {
    let mut out = Vec::new();
    render(&mut out).expect("render into memory");
    let text = String::from_utf8(out).expect("roff is UTF-8");
    let text = text.strip_prefix(&roff_preamble()).unwrap_or(&text);
    text.lines()
        .filter(|line| keep_heading || !line.starts_with(".SH "))
        .map(|line| format!("{line}\n"))
        .collect()
}

fn man_page() -> String {
    let mut cmd = lockrun::cli::command();
    cmd.build();
    let version = cmd.get_version().expect("version").to_owned();
    let man = Man::new(cmd.clone());

    let mut page = String::new();
    page += &roff_preamble();
    page += ".\\\" Generated by tests/integration/generated.rs from src/cli.rs and\n";
    page += ".\\\" man/sections.roff; edit those, then regenerate with\n";
    page += &format!(".\\\" {REGENERATE}\n");
    // Written here rather than by clap_mangen, which drops an empty date
    // argument and shifts the others left.
    page += &format!(".TH LOCKRUN 1 \"\" \"lockrun {version}\" \"User Commands\"\n");
    page += &piece(|w| man.render_name_section(w), true);
    page += &synopsis(&cmd);
    page += &piece(|w| man.render_description_section(w), true);
    page += &piece(|w| man.render_options_section(w), true);
    page += &subcommands(&cmd);
    page += &read("man/sections.roff");
    page
}

/// One line per form, from clap's own usage strings:
/// `lockrun [OPTIONS] --key <NAME> -- <COMMAND>...`, then each subcommand.
fn synopsis(cmd: &clap::Command) -> String {
    let mut roff = Roff::new();
    roff.control("SH", ["SYNOPSIS"]);
    let forms = std::iter::once(cmd).chain(cmd.get_subcommands());
    for (n, form) in forms.enumerate() {
        if n > 0 {
            roff.control("br", []);
        }
        let usage = form.clone().render_usage().to_string();
        let line = usage.lines().next().unwrap_or_default();
        let line = line.strip_prefix("Usage: ").unwrap_or(line);
        let name = form.get_bin_name().unwrap_or_else(|| form.get_name());
        let rest = line.strip_prefix(name).expect("usage starts with the name");
        let mut inlines = vec![bold(name)];
        for word in rest.split_whitespace() {
            inlines.push(roman(" "));
            inlines.extend(usage_word(word));
        }
        roff.text(inlines);
    }
    body(&roff)
}

/// `--key` in bold, `<NAME>` as an italic NAME, anything else as it is.
fn usage_word(word: &str) -> Vec<Inline> {
    if word.starts_with('-') {
        return vec![bold(word)];
    }
    if let Some(inner) = word.strip_prefix('<') {
        if let Some((value, tail)) = inner.split_once('>') {
            return vec![italic(value), roman(tail)];
        }
    }
    vec![roman(word)]
}

/// Each subcommand with its description and options, in this one page.
/// Options it shares with lockrun itself (`--redis`, `--prefix`) are named,
/// not described again; `--help` is left out.
fn subcommands(cmd: &clap::Command) -> String {
    let mut page = String::from(".SH SUBCOMMANDS\n");
    for sub in cmd.get_subcommands() {
        let name = sub.get_bin_name().unwrap_or_else(|| sub.get_name());
        page += &format!(".SS \"{name}\"\n");
        let mut shared = Vec::new();
        let mut hidden = Vec::new();
        for arg in sub.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let in_main = cmd.get_arguments().any(|a| {
                a.get_long() == Some(long)
                    && a.get_help().map(ToString::to_string)
                        == arg.get_help().map(ToString::to_string)
            });
            if long == "help" || in_main {
                hidden.push(arg.get_id().clone());
            }
            if in_main && long != "help" {
                shared.push(long.to_owned());
            }
        }
        let sub = hidden
            .into_iter()
            .fold(sub.clone(), |sub, id| sub.mut_arg(id, |a| a.hide(true)));
        let man = Man::new(sub);
        page += &piece(|w| man.render_description_section(w), false);
        page += &piece(|w| man.render_options_section(w), false);
        if !shared.is_empty() {
            let mut roff = Roff::new();
            roff.control("PP", []);
            let mut line = vec![roman("Also ")];
            for (n, long) in shared.iter().enumerate() {
                if n > 0 {
                    line.push(roman(if n + 1 == shared.len() { " and " } else { ", " }));
                }
                line.push(bold(format!("--{long}")));
            }
            line.push(roman(", as above."));
            roff.text(line);
            page += &body(&roff);
        }
    }
    page
}

// --- Completions ---

fn completion(shell: Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut lockrun::cli::command(), "lockrun", &mut out);
    let script = String::from_utf8(out).expect("completion is UTF-8");
    let script = match shell {
        Shell::Bash => bash_after_double_dash(script),
        Shell::Zsh => zsh_after_double_dash(script),
        Shell::Fish => fish_after_double_dash(script),
        _ => script,
    };
    let note = format!(
        "# Generated by tests/integration/generated.rs from src/cli.rs; do not edit.\n\
         # Regenerate with: {REGENERATE}\n"
    );
    match shell {
        // zsh finds the function by the `#compdef` line, which must come first.
        Shell::Zsh => match script.split_once('\n') {
            Some((compdef, rest)) => format!("{compdef}\n{note}{rest}"),
            None => script,
        },
        _ => format!("{note}{script}"),
    }
}

// clap_complete knows nothing of lockrun's `-- COMMAND [ARG]...`: bash and
// fish offer lockrun's own flags after `--` and no command names, and zsh
// puts the command before the subcommands, so that `lockrun st<Tab>` finds
// nothing. Each script gets the same small fix, a few lines of its own
// language at the top of its completion: when a `--` comes before the word
// being completed, complete the rest as a command line of its own, as each
// shell does for `nohup` or `sudo`. Each edit checks that clap_complete's
// output still has the shape it expects, so an upgrade that changes it fails
// here instead of shipping a broken script.

/// `text` with `anchor` (which must occur exactly once) followed by `added`.
fn insert_after(text: &str, anchor: &str, added: &str) -> String {
    assert_eq!(
        text.matches(anchor).count(),
        1,
        "clap_complete's output changed: expected {anchor:?} once"
    );
    text.replacen(anchor, &format!("{anchor}{added}"), 1)
}

/// `text` with each of the `count` occurrences of `from` replaced.
fn replace_all(text: &str, from: &str, to: &str, count: usize) -> String {
    assert_eq!(
        text.matches(from).count(),
        count,
        "clap_complete's output changed: expected {from:?} {count} times"
    );
    text.replace(from, to)
}

/// bash-completion's `_comp_command_offset` (called `_command_offset` before
/// 2.12) completes the words from the given index on as a command line; without
/// bash-completion, the command name is completed from `compgen -c` and its
/// arguments fall back to file names.
fn bash_after_double_dash(script: String) -> String {
    insert_after(
        &script,
        "_lockrun() {\n",
        r#"    # Added by tests/integration/generated.rs: after `--` comes the
    # command that lockrun runs; complete it as if it were typed alone.
    local word
    for (( word = 1; word < COMP_CWORD; word++ )); do
        if [[ ${COMP_WORDS[word]} == -- ]]; then
            if declare -F _comp_command_offset >/dev/null; then
                _comp_command_offset $(( word + 1 ))
            elif declare -F _command_offset >/dev/null; then
                _command_offset $(( word + 1 ))
            elif (( COMP_CWORD == word + 1 )); then
                COMPREPLY=( $(compgen -c -- "${COMP_WORDS[COMP_CWORD]}") )
            fi
            return 0
        fi
    done
"#,
    )
}

/// The command positional comes out as the first positional of the top-level
/// `_arguments`, ahead of the subcommand list; it goes, the subcommand becomes
/// `$line[1]` instead of `$line[2]`, and what follows `--` is handed to
/// `_normal` the way zsh's own `_precommand` (nice, nohup) does.
fn zsh_after_double_dash(script: String) -> String {
    let positional = script
        .lines()
        .find(|line| line.starts_with("':command -- "))
        .expect("clap_complete's output changed: no ':command' positional")
        .to_owned();
    let script = script.replace(&format!("{positional}\n"), "");
    let script = replace_all(&script, "$line[2]", "$line[1]", 3);
    insert_after(
        &script,
        "_lockrun() {\n",
        r#"    # Added by tests/integration/generated.rs: after `--` comes the
    # command that lockrun runs; complete it as if it were typed alone.
    local word
    for (( word = 2; word < CURRENT; word++ )); do
        if [[ $words[word] == -- ]]; then
            shift $word words
            (( CURRENT -= word ))
            _normal
            return
        fi
    done

"#,
    )
}

/// Once a `--` is on the line, clap's conditions all turn false (so neither
/// lockrun's flags nor its subcommands are offered) and one added completion
/// hands the words after `--` to fish's own helpers. Without the added `-f`,
/// fish would offer file names for every value (`--ttl <Tab>`) and as
/// lockrun's first argument, where no file can go.
fn fish_after_double_dash(script: String) -> String {
    let script = insert_after(
        &script,
        "    set -e cmd[1]\n",
        "    # Added by tests/integration/generated.rs: after `--`, nothing is lockrun's.\n    \
         contains -- -- $cmd; and return 1\n",
    );
    script
        + r#"
# Added by tests/integration/generated.rs: lockrun itself takes no file names;
# after `--` comes the command that lockrun runs, completed as if it were
# typed alone.
complete -c lockrun -f

function __fish_lockrun_after_double_dash
    contains -- -- (commandline -opc)
end

function __fish_lockrun_complete_command
    set -l words (commandline -opc)
    set -e words[1..(contains -i -- -- $words)]
    if set -q words[1]
        __fish_complete_subcommand --commandline $words (commandline -ct)
    else
        __fish_complete_command
    end
end

complete -c lockrun -n __fish_lockrun_after_double_dash -f -a '(__fish_lockrun_complete_command)'
"#
}

// --- The man page is the reference: it names everything the code has ---

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

const EXIT_CODES: [u8; 8] = {
    use lockrun::exit_code::*;
    [
        USAGE,
        REDIS_UNAVAILABLE,
        INTERNAL,
        BUSY_DEFAULT,
        LEASE_LOST,
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
    let ran = Lockrun::on_all(servers)
        .subcommand("status")
        .key(name)
        .arg("--json")
        .run();
    assert_eq!(ran.code, Some(code), "lockrun status: {}", ran.stderr);
    serde_json::from_str(&ran.stdout).expect("one JSON object")
}

/// Runs lockrun so that every field of `status --json` shows and every key
/// and channel a lock can have exists: a holder, and a waiter with
/// `--supersede` that listens for its wake-up; then the same status over a
/// quorum of three servers. Checks the man page against what it saw: each
/// JSON field in bold, each key (`P{name}:suffix`) an entry under REDIS KEYS.
#[test]
fn man_page_names_every_status_json_field_and_redis_key() {
    let redis = Server::start();
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
    let section = man_section(&page, "REDIS KEYS");
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

// --- README and the other Markdown files: only what they must have ---

/// The commands in README's quick start: the first ```sh block under
/// `## Quick start`, without comments.
fn quick_start() -> Vec<String> {
    let readme = read("README.md");
    let section = readme
        .split("\n## ")
        .find(|part| part.starts_with("Quick start\n"))
        .expect("README.md has a `## Quick start` section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the quick start has a ```sh block");
    block
        .lines()
        .map(|line| {
            line.split(" #")
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .filter(|line| !line.is_empty())
        .collect()
}

/// The quick start is two commands: one runs lockrun, the other the tests,
/// with the same command that CI runs (`.ci/run`), a bash script that
/// installs what the tests need and then runs `cargo test`.
#[test]
fn readme_quick_start_runs_lockrun_and_the_ci_test_command() {
    let commands = quick_start();
    assert_eq!(commands.len(), 2, "two commands: {commands:?}");
    assert_eq!(commands[0], "bash examples/quickstart.sh");
    let test = &commands[1];
    let ci = read(".ci/run");
    assert!(
        ci.lines().any(|line| line.trim() == test),
        ".ci/run runs the README's test command {test:?} on a line of its own"
    );
    let script = test.split_whitespace().last().expect("a script");
    let text = read(script);
    assert!(
        text.starts_with("#!/usr/bin/env bash\n")
            && text.contains("\nset -euo pipefail\n")
            && text.trim_end().ends_with("exec cargo test \"$@\""),
        "{script}: a bash script under set -euo pipefail that ends by running cargo test"
    );
    for file in ["examples/quickstart.sh", script] {
        let mode = fs::metadata(repo().join(file)).expect("stat").permissions();
        assert!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o111 != 0,
            "{file} is executable"
        );
        let syntax = Command::new("bash")
            .arg("-n")
            .arg(repo().join(file))
            .output()
            .expect("bash -n");
        assert!(
            syntax.status.success(),
            "bash -n {file}: {}",
            String::from_utf8_lossy(&syntax.stderr)
        );
    }
    // Each package the tests need is installed by the test command.
    for package in [
        "redis-server",
        "redis-tools",
        "openssl",
        "bsdutils",
        "bash-completion",
        "zsh",
        "fish",
        "postgresql",
        "postgresql-client",
    ] {
        assert!(
            text.contains(&format!("need {package} ")),
            "{script} installs {package} when it is missing"
        );
    }
}

#[test]
fn readme_stays_short() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; the reference belongs in man/sections.roff, \
         the design in docs/, development in CONTRIBUTING.md"
    );
}

/// The Markdown files of the documentation.
fn markdown_files() -> Vec<String> {
    let mut files: Vec<String> = [
        "README.md",
        "CONTRIBUTING.md",
        "BENCHMARKS.md",
        "examples/postgres-fencing/README.md",
    ]
    .map(String::from)
    .into();
    for entry in fs::read_dir(repo().join("docs")).expect("docs/") {
        let name = entry.expect("docs/ entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".md") {
            files.push(format!("docs/{name}"));
        }
    }
    files
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-`
/// and `_` dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut found = BTreeSet::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.insert(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

/// Every relative link `](target)` in `markdown`.
fn relative_links(markdown: &str) -> Vec<String> {
    markdown
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|target| !target.contains("://") && !target.starts_with("mailto:"))
        .map(String::from)
        .collect()
}

/// Links between the documentation's files lead somewhere: the file exists,
/// and a `#section` is a heading there.
#[test]
fn markdown_links_point_to_files_and_headings_that_exist() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = read(&file);
        let dir = Path::new(&file).parent().unwrap_or(Path::new(""));
        for link in relative_links(&text) {
            let (path, section) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                PathBuf::from(&file)
            } else {
                dir.join(path)
            };
            if !repo().join(&target).exists() {
                broken.push(format!("{file}: ({link}): no {}", target.display()));
                continue;
            }
            if !section.is_empty() {
                let target_text = fs::read_to_string(repo().join(&target)).unwrap_or_default();
                if !anchors(&target_text).contains(section) {
                    broken.push(format!("{file}: ({link}): no such heading"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

/// The Debian package carries the design and guarantees that the man page
/// points to, under /usr/share/doc/lockrun/docs/, where README's links find
/// them.
#[test]
fn debian_package_ships_the_docs() {
    let manifest = read("Cargo.toml");
    for file in markdown_files()
        .into_iter()
        .filter(|f| f.starts_with("docs/"))
    {
        let asset = format!("[\"{file}\", \"usr/share/doc/lockrun/docs/\", \"644\"]");
        assert!(
            manifest.contains(&asset),
            "Cargo.toml [package.metadata.deb] assets: {asset}"
        );
    }
    let man = read("man/sections.roff");
    for file in ["docs/design.md", "docs/guarantees.md"] {
        assert!(man.contains(file), "man/sections.roff points to {file}");
    }
}

// --- The examples ---

/// `program` on PATH, if it is there.
pub(crate) fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|file| file.is_file())
}

/// The units run `lockrun` from systemd's search path; verify needs an
/// ExecStart binary that exists, so it checks copies that point at the binary
/// just built. `Documentation=man:lockrun(1)` is checked against this
/// repository's man page through MANPATH. (.ci/deb-check verifies the units
/// as shipped, against the installed package.)
#[test]
fn systemd_example_passes_systemd_analyze_verify() {
    let Some(analyze) = on_path("systemd-analyze") else {
        println!("note: systemd-analyze is not on PATH; the systemd example was not verified");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut units = Vec::new();
    for name in ["billing.service", "billing.timer"] {
        let text = read(&format!("examples/systemd/{name}")).replace(
            "ExecStart=lockrun ",
            &format!("ExecStart={} ", env!("CARGO_BIN_EXE_lockrun")),
        );
        let unit = dir.path().join(name);
        fs::write(&unit, text).expect("write unit");
        units.push(unit);
    }
    let mut verify = Command::new(analyze);
    verify.arg("verify");
    if on_path("man").is_some() {
        let man1 = dir.path().join("man/man1");
        fs::create_dir_all(&man1).expect("man dir");
        fs::copy(repo().join("man/lockrun.1"), man1.join("lockrun.1")).expect("copy man page");
        verify.env("MANPATH", dir.path().join("man"));
    } else {
        verify.arg("--man=no");
    }
    let output = verify.args(&units).output().expect("run systemd-analyze");
    let said = String::from_utf8_lossy(&output.stderr).into_owned()
        + &String::from_utf8_lossy(&output.stdout);
    // verify exits 0 on unknown keys and bad values, so any output fails.
    assert!(
        output.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {}\n{said}",
        output.status
    );
}

/// The lockrun command lines in the examples, up to and including `--`.
fn example_command_lines() -> Vec<(String, Vec<String>)> {
    let mut lines = Vec::new();
    for path in ["examples/cron/crontab", "examples/systemd/billing.service"] {
        for line in read(path)
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
        {
            // `* * * * * lockrun ARGS` or `ExecStart=lockrun ARGS`.
            let mut words = line.split_whitespace();
            if !words.any(|word| word == "lockrun" || word.ends_with("=lockrun")) {
                continue;
            }
            let args: Vec<String> = words
                .take_while(|word| *word != "--")
                .map(String::from)
                .collect();
            lines.push((format!("{path}: {line}"), args));
        }
    }
    lines
}

/// Every example's flags parse and its timing is safe: pointed at a Redis
/// that refuses connections, lockrun gets as far as connecting (exit 69)
/// instead of refusing the command line (exit 64).
#[test]
fn example_command_lines_are_accepted() {
    let unreachable = "redis://127.0.0.1:1";
    let lines = example_command_lines();
    assert!(lines.len() >= 4, "found the examples: {lines:?}");
    for (line, args) in lines {
        let ran = Lockrun::new()
            .env("LOCKRUN_REDIS_URL", unreachable)
            .args(&args)
            .command(["true"])
            .run();
        assert_eq!(
            ran.code,
            Some(i32::from(lockrun::exit_code::REDIS_UNAVAILABLE)),
            "{line}\n{}",
            ran.stderr
        );
    }
    // examples/ci/deploy.sh is run for real in examples.rs.
}
