//! A plain run's command line, parsed without building the subcommands.
//!
//! clap builds a command's whole definition (every flag of every
//! subcommand, their help text and checks) before it parses a single
//! argument, and a plain run would pay for `status`, `release` and `list`
//! on every start. This definition is the run's flags alone: a command line
//! it accepts is one the full definition parses to the same run, since
//! without a subcommand the full one has no other argument to match a word
//! to. Anything else (a subcommand, `--help`, `--version`, a usage error)
//! is parsed again with the full definition, so that what lockrun prints
//! and refuses stays the full definition's own.

use clap::{CommandFactory as _, FromArgMatches as _, Parser};

use super::RunArgs;

/// The run's flags, set as in `Cli` where a setting changes what a command
/// line parses to.
#[derive(Debug, Parser)]
#[command(name = "lockrun", args_override_self = true)]
pub(super) struct PlainRun {
    #[command(flatten)]
    pub(super) run: RunArgs,
}

/// The run's flags, or None when the full definition must decide.
pub(super) fn parse() -> Option<RunArgs> {
    // Leaked, not dropped: freeing the definition's few hundred allocations
    // cost a fifth of building them, for memory the process hands back when
    // it exits anyway.
    let command = Box::leak(Box::new(PlainRun::command()));
    let mut matches = command.try_get_matches_from_mut(std::env::args_os()).ok()?;
    PlainRun::from_arg_matches_mut(&mut matches)
        .ok()
        .map(|plain| plain.run)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;
    use crate::cli::Cli;

    #[test]
    fn definition_is_consistent() {
        PlainRun::command().debug_assert();
    }

    /// Every argument of a plain run, defined the same way in both but for
    /// the order in help, which the full definition's help alone shows.
    #[test]
    fn the_run_has_the_same_flags() {
        let full = Cli::command();
        let plain = PlainRun::command();
        let described = |cmd: &clap::Command| -> Vec<String> {
            cmd.get_arguments()
                .map(|arg| {
                    let text = format!("{arg:?}");
                    let (head, tail) = text.split_once(", disp_ord: ").expect("disp_ord");
                    let tail = tail.split_once(", ").map_or("", |(_, rest)| rest);
                    format!("{head}, {tail}")
                })
                .collect()
        };
        let (full, plain_args) = (described(&full), described(&plain));
        assert_eq!(plain_args.len(), full.len());
        for (plain_arg, full_arg) in plain_args.iter().zip(&full) {
            assert!(plain_arg == full_arg, "{plain_arg}\n!=\n{full_arg}");
        }
        assert_eq!(
            plain.is_args_override_self(),
            Cli::command().is_args_override_self()
        );
    }

    /// What the plain definition accepts, the full one parses to the same
    /// run; what it refuses is left to the full one.
    #[test]
    fn both_parse_a_run_alike() {
        let lines: &[&[&str]] = &[
            &["lockrun", "-k", "job", "--", "echo", "-k", "x"],
            &[
                "lockrun", "--key", "a", "--key", "b", "--wait", "forever", "--wait", "1s", "--",
                "true",
            ],
            &[
                "lockrun",
                "--redis",
                "redis://a",
                "--redis=redis://b",
                "-k",
                "j",
                "-qw",
                "5s",
                "--",
                "x",
            ],
            &["lockrun", "--key", "status", "--", "status"],
            &[
                "lockrun",
                "--key",
                "j",
                "--log-format",
                "json",
                "--ttl",
                "1m",
                "--",
                "x",
            ],
        ];
        for line in lines {
            let plain = PlainRun::try_parse_from(*line).expect("a plain run");
            let full = Cli::try_parse_from(*line).expect("a run");
            assert!(full.action.is_none(), "{line:?}");
            assert_eq!(
                format!("{:?}", plain.run),
                format!("{:?}", full.run),
                "{line:?}"
            );
        }
        let refused: &[&[&str]] = &[
            &["lockrun", "status", "--key", "job"],
            &["lockrun", "list"],
            &["lockrun", "--help"],
            &["lockrun", "-h"],
            &["lockrun", "--version"],
            &["lockrun", "--key", "x", "status"],
            &["lockrun", "--key", "x", "echo", "hi"],
            &["lockrun", "--", "true"],
        ];
        for line in refused {
            assert!(PlainRun::try_parse_from(*line).is_err(), "{line:?}");
        }
    }
}
