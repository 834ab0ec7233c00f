//! The man page and shell completions are generated from the clap definition; this test fails when the checked-in files drift.
//!
//! This module is the generator. `man/lockrun.1` is clap_mangen's NAME,
//! DESCRIPTION and OPTIONS, a SYNOPSIS and SUBCOMMANDS section built from the
//! same definition, then the hand-written `man/sections.roff` (environment,
//! exit status, log format, guarantees, examples). `man/lockrun-redis.7`,
//! the page of the Redis side an operator reads once (Sentinel and Cluster,
//! TLS, a quorum, Redis keys and permissions, requirements), is
//! `man/lockrun-redis.roff` under a title line with the same version, so
//! that both pages always say which lockrun they describe. `completions/` holds
//! clap_complete's bash, zsh and fish scripts, each with a few lines added
//! for what follows `--` (see "Completions" below; `completion.rs` drives
//! them in each shell). The test renders all of them
//! in memory and compares; with `LOCKRUN_UPDATE_GENERATED=1` it rewrites the
//! files instead:
//!
//!     LOCKRUN_UPDATE_GENERATED=1 cargo test --test integration generated
//!
//! `reference.rs` checks that the man page names everything the code has;
//! `docs.rs` holds README, the other Markdown files and the examples to what
//! they must have.
use std::fs;
use std::io;
use std::path::Path;

use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use clap_mangen::Man;

const UPDATE_ENV: &str = "LOCKRUN_UPDATE_GENERATED";
pub(crate) const REGENERATE: &str =
    "LOCKRUN_UPDATE_GENERATED=1 cargo test --test integration generated";

pub(crate) fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn read(path: &str) -> String {
    fs::read_to_string(repo().join(path)).unwrap_or_else(|err| panic!("read {path}: {err}"))
}

/// Every generated file, as a path in the repository and its contents.
fn generated() -> Vec<(&'static str, String)> {
    vec![
        ("man/lockrun.1", man_page()),
        ("man/lockrun-redis.7", redis_page()),
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
        "generated files differ from what src/cli.rs, man/sections.roff and \
         man/lockrun-redis.roff produce \
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

/// lockrun-redis(7): the hand-written page under its title line.
fn redis_page() -> String {
    let version = lockrun::cli::command()
        .get_version()
        .expect("version")
        .to_owned();
    let mut page = roff_preamble();
    page += ".\\\" Generated by tests/integration/generated.rs from man/lockrun-redis.roff;\n";
    page += &format!(".\\\" edit that, then regenerate with {REGENERATE}\n");
    page += &format!(
        ".TH LOCKRUN\\-REDIS 7 \"\" \"lockrun {version}\" \"Miscellaneous Information Manual\"\n"
    );
    page += &read("man/lockrun-redis.roff");
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
