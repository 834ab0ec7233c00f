//! `Expect`, what a run must end with: its exit status, stdout and stderr,
//! checked together by `Ran::assert`, as just's `Test` and ripgrep's
//! `TestCommand` do.
//!
//! stdout and stderr must be empty unless the expectation says otherwise,
//! so that a run that starts saying something new fails the tests that did
//! not expect it. Text that varies from run to run (pids, times, ports,
//! paths) is checked with `stderr_has` and the other partial forms; a
//! stream the test does not care about is marked with `stderr_any` so that
//! the reader sees it was left out on purpose.

use std::fmt::Write as _;

use nix::sys::signal::Signal;

use super::Ran;

/// How a run must end: an exit code and what it must have written.
#[must_use]
pub struct Expect {
    /// What the run was, when the command line alone does not say.
    context: Option<String>,
    end: End,
    stdout: Stream,
    stderr: Stream,
}

/// How the process must end.
#[derive(Clone, Copy, PartialEq)]
enum End {
    Code(i32),
    /// Killed by this signal, as lockrun ends when its command did.
    Signal(Signal),
}

impl End {
    fn of(ran: &Ran) -> Option<End> {
        match (ran.code, ran.signal.map(Signal::try_from)) {
            (Some(code), _) => Some(End::Code(code)),
            (None, Some(Ok(signal))) => Some(End::Signal(signal)),
            _ => None,
        }
    }

    fn show(end: Option<End>) -> String {
        match end {
            Some(End::Code(code)) => code.to_string(),
            Some(End::Signal(signal)) => format!("killed by {signal}"),
            None => "unknown".to_string(),
        }
    }
}

/// What one output stream must hold.
#[derive(Default)]
struct Stream {
    /// None: nothing at all. Some: every check must hold, and an empty list
    /// allows anything.
    checks: Option<Vec<Check>>,
}

enum Check {
    Is(String),
    Has(String),
    Lacks(String),
    StartsWith(String),
    /// A property the text must have, and its description for the report.
    Holds(String, Box<dyn Fn(&str) -> bool>),
}

impl Expect {
    /// Exit code `code`, with nothing on stdout or stderr.
    pub fn code(code: i32) -> Self {
        Expect {
            context: None,
            end: End::Code(code),
            stdout: Stream::default(),
            stderr: Stream::default(),
        }
    }

    /// Killed by `signal` (lockrun ends so when its command died of it, or
    /// when the signal ended its wait), with nothing on stdout or stderr.
    pub fn killed_by(signal: Signal) -> Self {
        Expect {
            end: End::Signal(signal),
            ..Self::code(0)
        }
    }

    /// Exit code 0, with nothing on stdout or stderr.
    pub fn success() -> Self {
        Self::code(0)
    }

    /// Exit code 76 after `lockrun release --force` took lock `name` away:
    /// the lost-lease line, and otherwise only lines saying that replicas
    /// were slow to acknowledge a write, which a loaded machine may bring to
    /// a run through a Sentinel or Cluster URL (`--replica-acks all`).
    pub fn lost_to_force_release(name: &str) -> Self {
        let lost = format!(
            "lockrun: lost the lock {name}: its key no longer holds this run's token (it \
             expired, was removed with `lockrun release --force`, or Redis restarted empty); \
             stopped the command"
        );
        Self::code(76).stderr_has(format!("{lost}\n")).stderr_where(
            "nothing else but replicas slow to acknowledge",
            move |text| {
                text.lines()
                    .all(|line| line == lost || line.contains("replicas acknowledged the write"))
            },
        )
    }

    /// stdout is exactly `text`.
    pub fn stdout(mut self, text: impl Into<String>) -> Self {
        self.stdout.add(Check::Is(text.into()));
        self
    }

    /// stdout holds `needle` (each call adds one).
    pub fn stdout_has(mut self, needle: impl Into<String>) -> Self {
        self.stdout.add(Check::Has(needle.into()));
        self
    }

    /// stdout begins with `prefix`.
    pub fn stdout_starts(mut self, prefix: impl Into<String>) -> Self {
        self.stdout.add(Check::StartsWith(prefix.into()));
        self
    }

    /// stdout has the property that `what` describes.
    pub fn stdout_where(
        mut self,
        what: impl Into<String>,
        holds: impl Fn(&str) -> bool + 'static,
    ) -> Self {
        self.stdout.add(Check::Holds(what.into(), Box::new(holds)));
        self
    }

    /// Whatever the run writes to stdout; the test reads it itself.
    pub fn stdout_any(mut self) -> Self {
        self.stdout.any();
        self
    }

    /// stderr is exactly `text`.
    pub fn stderr(mut self, text: impl Into<String>) -> Self {
        self.stderr.add(Check::Is(text.into()));
        self
    }

    /// stderr holds `needle` (each call adds one).
    pub fn stderr_has(mut self, needle: impl Into<String>) -> Self {
        self.stderr.add(Check::Has(needle.into()));
        self
    }

    /// stderr does not hold `needle`; other checks decide what it must hold.
    pub fn stderr_lacks(mut self, needle: impl Into<String>) -> Self {
        self.stderr.add(Check::Lacks(needle.into()));
        self
    }

    /// stderr begins with `prefix`.
    pub fn stderr_starts(mut self, prefix: impl Into<String>) -> Self {
        self.stderr.add(Check::StartsWith(prefix.into()));
        self
    }

    /// stderr is one line (lockrun's usual single message).
    pub fn stderr_one_line(self) -> Self {
        self.stderr_where("one line", |text| text.lines().count() == 1)
    }

    /// stderr has the property that `what` describes.
    pub fn stderr_where(
        mut self,
        what: impl Into<String>,
        holds: impl Fn(&str) -> bool + 'static,
    ) -> Self {
        self.stderr.add(Check::Holds(what.into(), Box::new(holds)));
        self
    }

    /// Whatever the run writes to stderr: for a run whose message is not
    /// what the test is about and varies (timing, retries).
    pub fn stderr_any(mut self) -> Self {
        self.stderr.any();
        self
    }

    /// Says what the run was, at the top of a failure's report: for runs
    /// in a loop, where the command line alone does not tell them apart.
    pub fn context(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }

    /// What of this expectation `ran` misses, one line each.
    fn misses(&self, end: Option<End>, stdout: &str, stderr: &str) -> Vec<String> {
        let mut misses = Vec::new();
        if end != Some(self.end) {
            let (want, got) = (End::show(Some(self.end)), End::show(end));
            misses.push(format!("exit code: want {want}, got {got}"));
        }
        self.stdout.misses("stdout", stdout, &mut misses);
        self.stderr.misses("stderr", stderr, &mut misses);
        misses
    }
}

impl Stream {
    fn add(&mut self, check: Check) {
        self.checks.get_or_insert_with(Vec::new).push(check);
    }

    fn any(&mut self) {
        self.checks.get_or_insert_with(Vec::new);
    }

    fn misses(&self, name: &str, text: &str, misses: &mut Vec<String>) {
        let Some(checks) = &self.checks else {
            if !text.is_empty() {
                misses.push(format!("{name}: want it empty"));
            }
            return;
        };
        for check in checks {
            let (holds, want) = match check {
                Check::Is(want) => (text == want, format!("want exactly {want:?}")),
                Check::Has(needle) => (text.contains(needle), format!("want {needle:?} in it")),
                Check::Lacks(needle) => (!text.contains(needle), format!("want no {needle:?}")),
                Check::StartsWith(prefix) => (
                    text.starts_with(prefix),
                    format!("want it to start {prefix:?}"),
                ),
                Check::Holds(what, holds) => (holds(text), format!("want {what}")),
            };
            if !holds {
                misses.push(format!("{name}: {want}"));
            }
        }
    }
}

impl Ran {
    /// Fails the test unless this run ended as `expect` says, showing what
    /// it missed, its command line, status, stdout and stderr.
    #[track_caller]
    pub fn assert(&self, expect: Expect) -> &Self {
        let misses = expect.misses(End::of(self), &self.stdout, &self.stderr);
        if !misses.is_empty() {
            panic!("{}", self.report(&misses, expect.context.as_deref()));
        }
        self
    }

    /// The failure report: what was missed, then the whole run.
    fn report(&self, misses: &[String], context: Option<&str>) -> String {
        let mut report = String::from("\n==========\nthe run did not end as expected");
        if let Some(context) = context {
            let _ = write!(report, " ({context})");
        }
        report.push_str(":\n");
        for miss in misses {
            let _ = writeln!(report, "  - {miss}");
        }
        let code = End::show(End::of(self));
        let _ = write!(
            report,
            "\ncommand: {}\nexit code: {code}, after {:?}\n\nstdout:\n{}\nstderr:\n{}==========\n",
            self.command,
            self.took,
            shown(&self.stdout),
            shown(&self.stderr),
        );
        report
    }
}

/// How much of a stream a report shows: some runs write megabytes.
const SHOWN_LINES: usize = 200;

/// `text` indented, or a note that it is empty.
fn shown(text: &str) -> String {
    if text.is_empty() {
        return "  (empty)\n".to_string();
    }
    let mut shown: String = text
        .lines()
        .take(SHOWN_LINES)
        .map(|line| format!("  {line}\n"))
        .collect();
    let lines = text.lines().count();
    if lines > SHOWN_LINES {
        let _ = writeln!(shown, "  ({} more lines)", lines - SHOWN_LINES);
    } else if !text.ends_with('\n') {
        shown.push_str("  (no newline at the end)\n");
    }
    shown
}
