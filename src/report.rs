//! Everything lockrun says goes to stderr, one line each, prefixed
//! `lockrun:`. stdout belongs to the command.

use std::fmt::Display;
use std::io::Write;

use crate::error::{Error, Loudness};

/// How much lockrun says on stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Verbosity {
    /// Not even a busy lock is mentioned.
    Quiet,
    #[default]
    Normal,
    /// Every acquire, renewal and release.
    Verbose,
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Report {
    verbosity: Verbosity,
}

impl Report {
    pub(crate) fn new(verbosity: Verbosity) -> Self {
        Report { verbosity }
    }

    /// A failure the operator must see.
    // A method although every verbosity prints it, so that all of lockrun's
    // output goes through one value.
    #[allow(clippy::unused_self)]
    pub(crate) fn error(self, message: impl Display) {
        line(message);
    }

    /// Routine progress, only with --verbose.
    pub(crate) fn verbose(self, message: impl Display) {
        if self.verbosity == Verbosity::Verbose {
            line(message);
        }
    }

    /// The error that ends this invocation, as loudly as it deserves.
    pub(crate) fn failure(self, err: &Error) {
        match err.loudness() {
            Loudness::Error => self.error(err),
            Loudness::Busy if self.verbosity != Verbosity::Quiet => line(err),
            Loudness::Busy => {}
            Loudness::Verbose => self.verbose(err),
        }
    }
}

fn line(message: impl Display) {
    // A closed stderr must not turn into a panic; there is nowhere else to say it.
    let _ = writeln!(std::io::stderr().lock(), "lockrun: {message}");
}
