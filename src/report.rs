//! Everything lockrun says goes to stderr, one line each, prefixed
//! `lockrun:`. stdout belongs to the command.

use std::fmt::Display;
use std::io::Write;

use crate::config::Verbosity;

#[derive(Clone, Copy, Debug, Default)]
pub struct Report {
    pub verbosity: Verbosity,
}

impl Report {
    /// A failure the operator must see.
    pub fn error(&self, message: impl Display) {
        line(message);
    }

    /// The lock was busy: silent with --quiet.
    pub fn busy(&self, message: impl Display) {
        if self.verbosity != Verbosity::Quiet {
            line(message);
        }
    }

    /// Routine progress, only with --verbose.
    pub fn verbose(&self, message: impl Display) {
        if self.verbosity == Verbosity::Verbose {
            line(message);
        }
    }
}

fn line(message: impl Display) {
    // A closed stderr must not turn into a panic; there is nowhere else to say it.
    let _ = writeln!(std::io::stderr().lock(), "lockrun: {message}");
}
