//! The shell completions in `completions/`, driven the way each shell drives
//! them when Tab is pressed, and judged by what they offer.
//!
//! bash: the completion function is called with COMP_WORDS, COMP_CWORD,
//! COMP_LINE and COMP_POINT set, as bash sets them, and COMPREPLY is read
//! back. zsh has no such entry point (its completion builtins work only
//! inside a completion widget), so an interactive zsh runs in a pseudo-terminal
//! (the zsh/zpty module), gets the line and a Tab typed into it, and reports
//! every match that reached `compadd`. fish answers `complete -C LINE`.
//!
//! bash, bash-completion and zsh must be installed: a missing one fails the
//! test with what to install (`scripts/test` installs them). fish is optional: without
//! it only the generated text is checked.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use wait_timeout::ChildExt;

use crate::docs::on_path;
use crate::harness::{scratch, PATIENCE};

/// A file in the directory where completion runs: completing a flag's value
/// or lockrun's first word must not offer it; completing `ls`'s argument must.
const MARKER: &str = "lockrun-marker-file";

const BASH_COMPLETION: &str = "/usr/share/bash-completion/bash_completion";

fn completions() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("completions")
}

/// `program`, or a failure that says which Debian package brings it.
fn required(program: &str, package: &str) -> PathBuf {
    on_path(program).unwrap_or_else(|| {
        panic!(
            "{program} is not installed; the completion tests need it: \
             apt-get install {package} (scripts/test installs it)"
        )
    })
}

/// Runs `command` in a scratch directory that holds only `MARKER`, and
/// returns its stdout as lines; fails on a non-zero exit or after `PATIENCE`.
fn lines_of(mut command: Command) -> Vec<String> {
    let dir = scratch();
    std::fs::write(dir.path().join(MARKER), "").expect("marker file");
    let mut child = command
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the shell");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let status = match child.wait_timeout(PATIENCE).expect("wait") {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} did not finish in {PATIENCE:?}");
        }
    };
    let (out, err) = (out.join().expect("stdout"), err.join().expect("stderr"));
    assert!(status.success(), "{command:?}: {status}\n{err}");
    out.lines().map(String::from).collect()
}

// --- bash ---

/// Completes `line` at its end the way bash would on Tab, and prints the
/// number of entries in COMPREPLY, then each on a line. `compopt` works only inside a completion that
/// bash itself started; here it does nothing.
const BASH_DRIVER: &str = r#"
[ "$1" = with ] && source "$2"
source "$3"
compopt() { :; }
COMP_LINE=$4
COMP_POINT=${#COMP_LINE}
read -ra COMP_WORDS <<< "$COMP_LINE"
[[ $COMP_LINE == *' ' ]] && COMP_WORDS+=('')
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMPREPLY=()
_lockrun lockrun "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
echo "${#COMPREPLY[@]}"
[ "${#COMPREPLY[@]}" -eq 0 ] || printf '%s\n' "${COMPREPLY[@]}"
"#;

/// What bash offers for `line`, with or without bash-completion loaded.
fn bash(line: &str, bash_completion: bool) -> Vec<String> {
    let mut command = Command::new(required("bash", "bash"));
    command
        .args(["--norc", "--noprofile", "-c", BASH_DRIVER, "bash"])
        .arg(if bash_completion { "with" } else { "without" })
        .arg(BASH_COMPLETION)
        .arg(completions().join("lockrun.bash"))
        .arg(line);
    let mut lines = lines_of(command);
    let count = lines.remove(0);
    assert_eq!(count, lines.len().to_string(), "COMPREPLY: {lines:?}");
    lines
}

#[test]
fn bash_completes_subcommands_flags_and_the_command_after_double_dash() {
    assert!(
        Path::new(BASH_COMPLETION).is_file(),
        "{BASH_COMPLETION} is missing; the completion tests need it: \
         apt-get install bash-completion (scripts/test installs it)"
    );
    check("bash with bash-completion", EMPTY_LISTS_FILES, |line| {
        bash(line, true)
    });
}

#[test]
fn bash_completes_the_command_after_double_dash_without_bash_completion() {
    check("bash alone", EMPTY_LISTS_FILES, |line| bash(line, false));
}

/// bash's answer is COMPREPLY, and an empty one makes bash list file names
/// (lockrun's completion is registered with `complete -o default`).
const EMPTY_LISTS_FILES: bool = true;

// --- zsh ---

/// Sourced by the interactive zsh: compinit with `completions/` first on
/// fpath (so `_lockrun` is autoloaded, as when installed), Tab bound to plain
/// completion, and `compadd` wrapped to collect what each call adds that
/// matches the word under the cursor. The calls that only compute matches
/// (-O, -A, -D) pass through. After the completion the matches go to
/// $LOCKRUN_OUT, written whole at once.
const ZSH_SETUP: &str = r#"
fpath=($LOCKRUN_COMPLETIONS $fpath)
autoload -Uz compinit && compinit -u -D
bindkey '^I' complete-word
typeset -ga lockrun_matches
compadd() {
    if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then
        builtin compadd "$@"
        return
    fi
    local -a matched
    builtin compadd -O matched "$@"
    lockrun_matches+=("${matched[@]}")
    builtin compadd "$@"
}
lockrun_report() {
    { (( ${#lockrun_matches} )) && print -rl -- "${lockrun_matches[@]}" } > $LOCKRUN_OUT.part
    mv $LOCKRUN_OUT.part $LOCKRUN_OUT
}
comppostfuncs=(lockrun_report)
: > $LOCKRUN_OUT.ready
"#;

/// Starts `zsh -f -i` in a pseudo-terminal, sources the setup, waits for it,
/// types the line and a Tab, waits for the report and prints it. Each wait
/// polls with a deadline and keeps the terminal's output drained.
const ZSH_DRIVER: &str = r#"
zmodload zsh/zpty zsh/zselect || exit 2
export LOCKRUN_OUT=$1 LOCKRUN_COMPLETIONS=$2
setup=$3 line=$4 patience=$5
typeset -F SECONDS
zpty lockrun zsh -f -i
wait_for() {
    local deadline=$(( SECONDS + patience ))
    while [[ ! -e $1 ]] && (( SECONDS < deadline )); do
        zpty -r -t lockrun junk 2>/dev/null
        zselect -t 1
    done
    [[ -e $1 ]]
}
zpty -w lockrun "source ${(q)setup}"
wait_for $LOCKRUN_OUT.ready || { print -u2 "zsh did not finish the setup"; exit 3 }
zpty -w -n lockrun "$line"$'\t'
wait_for $LOCKRUN_OUT || { print -u2 "zsh did not complete ${(q)line}"; exit 4 }
zpty -d lockrun
cat $LOCKRUN_OUT
"#;

/// What zsh offers for `line`.
fn zsh(line: &str) -> Vec<String> {
    let zsh = required("zsh", "zsh");
    let dir = scratch();
    let setup = dir.path().join("setup.zsh");
    std::fs::write(&setup, ZSH_SETUP).expect("write setup.zsh");
    let mut command = Command::new(zsh);
    command
        .args(["-f", "-c", ZSH_DRIVER, "zsh"])
        .arg(dir.path().join("matches"))
        .arg(completions())
        .arg(&setup)
        .arg(line)
        .arg(PATIENCE.as_secs().to_string());
    lines_of(command)
}

#[test]
fn zsh_completes_subcommands_flags_and_the_command_after_double_dash() {
    check("zsh", false, zsh);
}

// --- fish ---

/// What fish offers for `line`: the words of `complete -C`, without their
/// descriptions.
fn fish(fish: &Path, line: &str) -> Vec<String> {
    let mut command = Command::new(fish);
    command
        .args(["--no-config", "-c", "source $argv[1]; complete -C $argv[2]"])
        .arg(completions().join("lockrun.fish"))
        .arg(line);
    lines_of(command)
        .into_iter()
        .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn fish_completes_subcommands_flags_and_the_command_after_double_dash() {
    // The text first, so that the parts that matter are checked without fish.
    let script = std::fs::read_to_string(completions().join("lockrun.fish")).expect("read");
    assert!(
        script.contains("\ncomplete -c lockrun -f\n")
            && script.contains("-l ttl -d 'Lease length written to Redis' -r -f\n")
            && script.contains("__fish_complete_subcommand --commandline"),
        "completions/lockrun.fish lost its file-name and `--` handling"
    );
    let Some(fish_path) = on_path("fish") else {
        println!(
            "note: fish is not installed; only the generated text of lockrun.fish was checked"
        );
        return;
    };
    check("fish", false, |line| fish(&fish_path, line));
}

// --- What every shell must offer ---

/// Completes each line in `shell` and fails with every wrong answer at once.
/// `empty_lists_files`: the shell lists file names when the completion
/// offers nothing (bash), so an empty answer counts as file names.
fn check(shell: &str, empty_lists_files: bool, complete: impl Fn(&str) -> Vec<String>) {
    let lists_files = |got: &[String]| has(got, MARKER) || (empty_lists_files && got.is_empty());
    let mut wrong = Vec::new();
    let mut expect = |line: &str, what: &str, ok: &dyn Fn(&[String]) -> bool| {
        let got = complete(line);
        if !ok(&got) {
            wrong.push(format!("{line:?}<Tab> should {what}; got {got:?}"));
        }
    };
    expect("lockrun st", "give status", &|got| got == ["status"]);
    expect(
        "lockrun ",
        "offer the subcommands and no file names",
        &|got| has(got, "status") && has(got, "release") && !lists_files(got),
    );
    expect("lockrun status --", "offer --json and not --ttl", &|got| {
        has(got, "--json") && !has(got, "--ttl")
    });
    expect("lockrun --key x -- sle", "offer sleep", &|got| {
        has(got, "sleep")
    });
    expect(
        "lockrun --key x -- rel",
        "offer commands, not lockrun's subcommands",
        &|got| !has(got, "release"),
    );
    expect(
        "lockrun --key x -- sleep --",
        "offer none of lockrun's flags",
        &|got| !has(got, "--ttl") && !has(got, "--key"),
    );
    expect(
        &format!("lockrun -- ls {}", &MARKER[..9]),
        "offer ls's file names",
        &lists_files,
    );
    for line in ["lockrun --ttl ", "lockrun --key ", "lockrun --wait "] {
        expect(line, "offer no file names", &|got| !lists_files(got));
    }
    assert!(wrong.is_empty(), "{shell}:\n  {}", wrong.join("\n  "));
}

fn has(words: &[String], word: &str) -> bool {
    words.iter().any(|w| w == word)
}
