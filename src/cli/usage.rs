//! A usage error as one line, like every other lockrun error: what is wrong,
//! a hint that fits lockrun (the flag or subcommand meant, the command put
//! after `--`), then where to look; in JSON when the refused line asked for
//! it.

use std::ffi::OsString;

use super::command;
use crate::report::Format;

/// clap's usage error as one line, like every other lockrun error: what is
/// wrong, a hint that fits lockrun, then where to look. clap's own rendering
/// spreads it over a paragraph with a usage block, which a cron mail or a
/// journal line cuts apart. `args` is the command line, program name first.
pub(super) fn one_line(err: &clap::Error, args: &[OsString]) -> String {
    let rendered = err.render().to_string();
    let subcommand = args
        .get(1)
        .and_then(|arg| arg.to_str())
        .filter(|arg| command().find_subcommand(arg).is_some());
    let hint = match err.kind() {
        clap::error::ErrorKind::UnknownArgument => unknown_argument_hint(err, subcommand),
        _ => None,
    };
    let mut line = String::new();
    for part in rendered
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(|l| l.trim().trim_start_matches("error: "))
        .filter(|l| !l.is_empty())
        // clap's "to pass '--ky' as a value, use '-- --ky'" would run the
        // typo as the command.
        .filter(|l| !l.starts_with("tip: to pass"))
        // Said once, by lockrun's own hint.
        .filter(|l| hint.is_none() || !l.starts_with("tip: a similar"))
    {
        if !line.is_empty() {
            line += if line.ends_with(':') { " " } else { "; " };
        }
        line += part;
    }
    if let Some(hint) = hint {
        line += "; ";
        line += &hint;
    }
    match subcommand {
        Some(name) => line + &format!("; see 'lockrun {name} --help'"),
        None => line + "; see 'lockrun --help'",
    }
}

/// What the operator most likely meant by an argument clap did not expect.
fn unknown_argument_hint(err: &clap::Error, subcommand: Option<&str>) -> Option<String> {
    let clap::error::ContextValue::String(arg) = err.get(clap::error::ContextKind::InvalidArg)?
    else {
        return None;
    };
    let cmd = command();
    let cmd = subcommand
        .and_then(|name| cmd.find_subcommand(name))
        .unwrap_or(&cmd);
    if let Some(flag) = arg.strip_prefix("--") {
        let flag = flag.split('=').next().unwrap_or(flag);
        let names = cmd.get_arguments().filter_map(clap::Arg::get_long);
        return closest(flag, names).map(|name| format!("did you mean '--{name}'?"));
    }
    if let Some(way) = flock_habit(arg) {
        return Some(way.to_owned());
    }
    // `lockrun help` gets the "see 'lockrun --help'" every usage error ends
    // with, not advice to run `help` as the command.
    if arg.starts_with('-') || subcommand.is_some() || arg == "help" {
        return None;
    }
    if let Some(name) = closest(arg, cmd.get_subcommands().map(clap::Command::get_name)) {
        return Some(format!("did you mean 'lockrun {name}'?"));
    }
    Some(format!(
        "put the command after '--': lockrun --key NAME -- {arg} ..."
    ))
}

/// The lockrun way of a flock(1) option lockrun does not have, for users
/// whose hands know flock. (flock's `-w SECONDS` is lockrun's `-w`, which
/// wants a unit: `parse_duration` says so.)
fn flock_habit(arg: &str) -> Option<&'static str> {
    Some(match arg {
        "-n" => {
            "flock's -n is lockrun's default: a run that finds the lock taken exits 75 at once; \
             leave -n out (--wait DURATION waits)"
        }
        "-c" => "flock's -c CMD is -- sh -c CMD in lockrun: lockrun --key NAME -- sh -c 'CMD'",
        "-E" => "flock's -E N is --busy-exit-code N in lockrun",
        _ => return None,
    })
}

/// The candidate nearest to `typed`, if one is a typo away: one edit, plus
/// one more for every four characters. For flags, subcommands and the
/// configuration file's settings alike.
pub(crate) fn closest<'a>(
    typed: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let allowed = 1 + typed.len() / 4;
    candidates
        .map(|name| (strsim::damerau_levenshtein(typed, name), name))
        .filter(|(edits, _)| *edits <= allowed)
        .min_by_key(|(edits, _)| *edits)
        .map(|(_, name)| name)
}

/// Whether `option` takes `value`, as its value parser checks it on the
/// command line; if not, why, in the parser's own words, without clap's
/// "invalid value for --flag": for a value from the configuration file,
/// whose line says which setting it is.
pub(crate) fn check(option: &clap::Arg, value: &str) -> Result<(), String> {
    let alone = clap::Command::new("lockrun")
        .no_binary_name(true)
        .arg(option.clone());
    let given = format!("--{}={value}", option.get_long().unwrap_or_default());
    match alone.try_get_matches_from([given]) {
        Ok(_) => Ok(()),
        Err(err) => Err(refusal(&err)),
    }
}

fn refusal(err: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    if let Some(why) = std::error::Error::source(err) {
        return why.to_string();
    }
    if let Some(ContextValue::Strings(valid)) = err.get(ContextKind::ValidValue) {
        if let Some((last, rest)) = valid.split_last() {
            if rest.is_empty() {
                return format!("write {last}");
            }
            return format!("write {} or {last}", rest.join(", "));
        }
    }
    let rendered = err.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    first.trim_start_matches("error: ").to_owned()
}

/// Whether lockrun was asked for JSON lines, as far as a command line that
/// clap refused can tell: the last `--log-format` before `--`, else
/// LOCKRUN_LOG_FORMAT. Only for the usage error that ends such a line.
pub(crate) fn log_format_hint() -> Format {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    format_in(&args, std::env::var("LOCKRUN_LOG_FORMAT").ok())
}

fn format_in(args: &[OsString], env: Option<String>) -> Format {
    let mut format = env;
    let mut words = args
        .iter()
        .map(|arg| arg.to_string_lossy())
        .take_while(|arg| arg != "--");
    while let Some(arg) = words.next() {
        if arg == "--log-format" {
            format = words.next().map(String::from);
        } else if let Some(value) = arg.strip_prefix("--log-format=") {
            format = Some(value.to_owned());
        }
    }
    if format.as_deref() == Some("json") {
        Format::Json
    } else {
        Format::Text
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::Cli;

    fn usage_line(args: &[&str]) -> String {
        let err = Cli::try_parse_from(args).expect_err("a usage error");
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        one_line(&err, &args)
    }

    #[test]
    fn usage_errors_hint_at_what_was_meant() {
        let line = usage_line(&["lockrun", "--key", "x", "echo", "hi"]);
        assert!(
            line.contains("put the command after '--': lockrun --key NAME -- echo ..."),
            "{line}"
        );
        let line = usage_line(&["lockrun", "--ky", "demo", "--", "true"]);
        assert!(line.contains("did you mean '--key'?"), "{line}");
        assert!(!line.contains("-- --ky"), "{line}");
        let line = usage_line(&["lockrun", "help"]);
        assert_eq!(
            line,
            "unexpected argument 'help' found; see 'lockrun --help'"
        );
        let line = usage_line(&["lockrun", "statu", "--key", "x"]);
        assert!(line.contains("did you mean 'lockrun status'?"), "{line}");
        let line = usage_line(&["lockrun", "status", "--key", "x", "--jsn"]);
        assert!(line.contains("did you mean '--json'?"), "{line}");
        assert!(line.ends_with("; see 'lockrun status --help'"), "{line}");
        assert_eq!(line.lines().count(), 1);
    }

    #[test]
    fn flock_habits_get_the_lockrun_way() {
        for (args, want) in [
            (
                &["lockrun", "-n", "--key", "x", "--", "true"][..],
                "is lockrun's default",
            ),
            (
                &["lockrun", "--key", "x", "-c", "echo hi"],
                "-- sh -c 'CMD'",
            ),
            (
                &["lockrun", "-E", "0", "--key", "x", "--", "true"],
                "--busy-exit-code N",
            ),
        ] {
            let line = usage_line(args);
            assert!(line.contains(want), "{line}");
            assert_eq!(line.lines().count(), 1);
        }
    }

    #[test]
    fn a_refused_command_line_still_tells_its_log_format() {
        let args = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        let json = Some("json".to_owned());
        assert_eq!(
            format_in(&args(&["--bogus", "--log-format", "json"]), None),
            Format::Json
        );
        assert_eq!(
            format_in(&args(&["--log-format=json", "-k"]), None),
            Format::Json
        );
        assert_eq!(
            format_in(&args(&["--log-format=text"]), json.clone()),
            Format::Text
        );
        assert_eq!(
            format_in(&args(&["--", "--log-format", "json"]), None),
            Format::Text
        );
        assert_eq!(format_in(&args(&["-k"]), json), Format::Json);
    }
}
