//! README and the other Markdown files are held to what they must have: a
//! two-command quick start whose test command is the one `.ci/run` runs, at
//! most 250 lines for README; links that lead to files and headings that
//! exist; a Debian package that ships `docs/`. The command lines in the
//! examples are accepted by lockrun, and the systemd example passes
//! `systemd-analyze verify`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::generated::{read, repo};
use crate::harness::*;

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

/// `.ci/run`'s second and third passes, against Redis 6.2 and Valkey 8,
/// pick their tests by name: a module renamed or a test gone would silently
/// shrink them, as a filter that matches nothing is no error.
#[test]
fn the_redis_6_2_and_valkey_passes_name_tests_that_exist() {
    let ci = read(".ci/run");
    for start in ["redis62=$(scripts/redis62)\n", "valkey=$(scripts/valkey)\n"] {
        let step = ci
            .split(start)
            .nth(1)
            .and_then(|rest| rest.split("\n\n").next())
            .unwrap_or_else(|| panic!(".ci/run has no pass after {start:?}"));
        let modules = read("tests/integration/main.rs");
        let filters: Vec<&str> = step
            .split_whitespace()
            .skip_while(|word| *word != "--")
            .filter(|word| !matches!(*word, "--" | "\\" | "--skip" | "tls" | "--test-threads"))
            .filter(|word| word.parse::<u32>().is_err())
            .collect();
        assert!(filters.len() > 5, "{filters:?}");
        for filter in filters {
            let found = match filter.strip_suffix("::") {
                Some(module) => modules.contains(&format!("\nmod {module};\n")),
                None => read("src/lock/scripts.rs").contains(&format!("fn {filter}()")),
            };
            assert!(
                found,
                ".ci/run's pass after {start:?} names {filter}, which is no test"
            );
        }
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
        "bench/README.md",
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

/// Every file under examples/ that a user runs or reads is in the packages
/// (all but quickstart.sh, which builds lockrun from this repository):
/// [package.metadata.deb] assets is the list scripts/dist makes the .deb,
/// the .rpm and the tarballs from, and checks them against.
#[test]
fn the_packages_ship_every_example() {
    let manifest = read("Cargo.toml");
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")];
    let mut missing = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).expect("read examples/") {
            let path = entry.expect("examples/ entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let file = path
                .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .expect("under the repository")
                .to_string_lossy()
                .into_owned();
            if file != "examples/quickstart.sh" && !manifest.contains(&format!("[\"{file}\", ")) {
                missing.push(file);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in Cargo.toml [package.metadata.deb] assets: {missing:?}"
    );
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
    for name in [
        "billing.service",
        "billing.timer",
        "singleton.service",
        "lockrun-check@.service",
        "lockrun-check@.timer",
    ] {
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
    for path in [
        "examples/cron/crontab",
        "examples/systemd/billing.service",
        "examples/systemd/singleton.service",
    ] {
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
        // A run that may wait would wait an unreachable server out: the
        // last --wait given wins, and 0 tries once.
        let once = args.iter().any(|arg| arg == "--wait" || arg == "-w");
        let ran = Lockrun::new()
            .env("LOCKRUN_REDIS_URL", unreachable)
            .args(&args)
            .args(if once { &["--wait", "0"][..] } else { &[] })
            .command(["true"])
            .run();
        ran.assert(
            Expect::code(i32::from(lockrun::exit_code::REDIS_UNAVAILABLE))
                .stderr_starts(format!("lockrun: cannot reach Redis at {unreachable}: "))
                .stderr_one_line()
                .context(line),
        );
    }
    // examples/ci/deploy.sh is run for real in examples.rs.
}
