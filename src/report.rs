//! Everything lockrun says goes to stderr, one line each, prefixed
//! `lockrun:`, or as one JSON object each with `--log-format json` (see
//! `event`). stdout belongs to the command. What each line says is
//! `message`'s; the format and the verbosity are set once at start-up, so
//! code anywhere says a message with `say`, carrying no reporter.
//!
//! Saying something never holds up the deadline: lines go into a bounded
//! queue that a writer thread of its own empties, since a write to a stderr
//! nobody drains would block renewals and the kill on the runtime's one
//! thread. A full queue drops and counts lines; `flush` waits at most
//! `FLUSH_LIMIT` before exit. Why not O_NONBLOCK: docs/design.md ("Stopping
//! the command").

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{self, SigSet, SigmaskHow, Signal};

mod event;
mod failure;
mod message;
pub(crate) use event::Format;
use event::{Context, Event};
pub(crate) use message::Message;
use message::Shown;

/// Lines waiting for the writer thread: far more than lockrun says in a
/// renewal period, even with --verbose.
const QUEUE_LINES: usize = 256;
/// How long lockrun waits, before it exits, for its last lines to be written.
const FLUSH_LIMIT: Duration = Duration::from_secs(2);

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

/// How this invocation says things, read by every line so that no caller
/// carries it. Set in two steps, not once: the format as soon as the command
/// line is read, so that a settings error is said in it, and the verbosity
/// once the settings are valid.
static REPORT: RwLock<Report> = RwLock::new(Report::TEXT);

#[derive(Clone, Copy, Debug)]
struct Report {
    verbosity: Verbosity,
    /// What every JSON line says of this run; None for text.
    json: Option<&'static Context>,
}

/// Lines from now on in `format`, about the lock named `key` (None when
/// the command line could not be read). Set once or twice per invocation,
/// so the context is leaked rather than shared.
pub(crate) fn set_format(format: Format, key: Option<String>) {
    let json = match format {
        Format::Text => None,
        Format::Json => Some(&*Box::leak(Box::new(Context::new(key)))),
    };
    REPORT.write().unwrap_or_else(PoisonError::into_inner).json = json;
}

/// Lines from now on as loud as `verbosity` says.
pub(crate) fn set_verbosity(verbosity: Verbosity) {
    REPORT
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .verbosity = verbosity;
}

/// Says `message`, if the verbosity lets it through.
pub(crate) fn say(message: Message<'_>) {
    let report = Report::now();
    let said = message.said();
    let shown = match said.shown {
        Shown::Always => true,
        Shown::UnlessQuiet => report.verbosity != Verbosity::Quiet,
        Shown::Verbose => report.verbosity == Verbosity::Verbose,
    };
    if shown {
        report.line(said.event, &said.text);
    }
}

impl Report {
    const TEXT: Report = Report {
        verbosity: Verbosity::Normal,
        json: None,
    };

    fn now() -> Report {
        *REPORT.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn line(self, event: Event, message: &str) {
        push(self.format(event, message), self.dropped_line());
    }

    fn format(self, event: Event, message: &str) -> String {
        match self.json {
            None => format!("lockrun: {message}\n"),
            Some(context) => context.json_line(event, message, SystemTime::now()),
        }
    }

    /// How this report says that lines went missing.
    fn dropped_line(self) -> impl Fn(u64) -> String {
        move |count| {
            let said = Message::Dropped { count }.said();
            self.format(said.event, &said.text)
        }
    }
}

/// `message`'s JSON line, parsed: about the lock `billing`, from pid 41 on
/// web-2, at the epoch.
#[cfg(test)]
pub(crate) fn json_of(message: Message<'_>) -> serde_json::Map<String, serde_json::Value> {
    let context = Context {
        key: Some("billing".into()),
        host: "web-2".into(),
        pid: 41,
    };
    let said = message.said();
    let line = context.json_line(said.event, &said.text, SystemTime::UNIX_EPOCH);
    serde_json::from_str(&line).expect("one JSON object")
}

/// The queue to stderr's writer thread, started by the first line; None if
/// the thread could not be started, and lines are written directly.
static STDERR: OnceLock<Option<&'static Queue>> = OnceLock::new();

fn push(text: String, dropped_line: impl Fn(u64) -> String) {
    match STDERR.get_or_init(|| Queue::start(QUEUE_LINES, std::io::stderr())) {
        Some(queue) => queue.push(text, dropped_line),
        // A closed stderr must not turn into a panic; there is nowhere else
        // to say it.
        None => {
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
    }
}

/// Waits until everything said so far is written, or `FLUSH_LIMIT` passed.
/// Called once, just before lockrun exits.
pub(crate) fn flush() {
    if let Some(Some(queue)) = STDERR.get() {
        queue.flush(FLUSH_LIMIT, Report::now().dropped_line());
    }
}

/// Lines on their way to one writer thread.
struct Queue {
    state: Mutex<State>,
    /// Signalled when a line is queued and when one has been written.
    changed: Condvar,
    capacity: usize,
}

struct State {
    lines: VecDeque<String>,
    /// Lines dropped since the last one queued.
    dropped: u64,
    /// The writer thread is writing a line it took off the queue.
    writing: bool,
}

impl Queue {
    /// Starts a writer thread that writes every queued line to `out`. The
    /// queue lives as long as lockrun, so it is leaked rather than shared.
    fn start(capacity: usize, out: impl Write + Send + 'static) -> Option<&'static Queue> {
        let queue: &'static Queue = Box::leak(Box::new(Queue {
            state: Mutex::new(State {
                lines: VecDeque::with_capacity(capacity),
                dropped: 0,
                writing: false,
            }),
            changed: Condvar::new(),
            capacity,
        }));
        std::thread::Builder::new()
            .name("stderr".into())
            .spawn(move || {
                // While the command has the terminal, lockrun is in the
                // background; with `stty tostop`, its write would stop all of
                // lockrun (SIGTTOU), deadline included. With SIGTTOU blocked
                // in the writing thread, the kernel lets the write through.
                let ttou = SigSet::from(Signal::SIGTTOU);
                let _ = signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), None);
                queue.write_all(out);
            })
            .ok()?;
        Some(queue)
    }

    /// Queues `text`, or drops and counts it if the queue is full. Never
    /// blocks on the writer. `dropped_line` says how many went missing
    /// before it, in the format of the line that follows.
    fn push(&self, text: String, dropped_line: impl Fn(u64) -> String) {
        let mut state = self.lock();
        if state.lines.len() >= self.capacity {
            state.dropped += 1;
            return;
        }
        state.note_dropped(dropped_line);
        state.lines.push_back(text);
        self.changed.notify_all();
    }

    /// Waits until the queue is written out, or `limit` passed.
    fn flush(&self, limit: Duration, dropped_line: impl Fn(u64) -> String) {
        let give_up = Instant::now() + limit;
        let mut state = self.lock();
        state.note_dropped(dropped_line);
        self.changed.notify_all();
        while !state.lines.is_empty() || state.writing {
            let left = give_up.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The writer thread: takes lines off the queue and writes each with
    /// one `write` (a line up to PIPE_BUF bytes is never torn by the
    /// command's writes).
    fn write_all(&self, mut out: impl Write) {
        let mut state = self.lock();
        loop {
            let Some(text) = state.lines.pop_front() else {
                state = self
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            state.writing = true;
            drop(state);
            // A closed stderr: there is nowhere else to say it.
            let _ = out.write_all(text.as_bytes());
            state = self.lock();
            state.writing = false;
            self.changed.notify_all();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; if it did, the lines are
        // still good.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// Queues the line that says how many went missing here, if any did. It
    /// may take the queue one past its capacity.
    fn note_dropped(&mut self, dropped_line: impl Fn(u64) -> String) {
        let dropped = std::mem::take(&mut self.dropped);
        if dropped > 0 {
            self.lines.push_back(dropped_line(dropped));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// How a text report says that lines went missing.
    fn text() -> impl Fn(u64) -> String {
        Report::TEXT.dropped_line()
    }

    /// A stderr that blocks until the test opens it, and tells the test when
    /// a write is waiting.
    struct Gate {
        waiting: mpsc::Sender<()>,
        open: Arc<(Mutex<bool>, Condvar)>,
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.waiting.send(());
            let (open, opened) = &*self.open;
            let mut open = open.lock().expect("gate");
            while !*open {
                open = opened.wait(open).expect("gate");
            }
            self.written.lock().expect("written").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    struct Stuck {
        queue: &'static Queue,
        open: Arc<(Mutex<bool>, Condvar)>,
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl Stuck {
        /// A queue of `capacity` whose writer took `first` off it and is
        /// stuck writing it.
        fn new(capacity: usize, first: &str) -> Self {
            let (waiting, waits) = mpsc::channel();
            let open = Arc::new((Mutex::new(false), Condvar::new()));
            let written = Arc::new(Mutex::new(Vec::new()));
            let gate = Gate {
                waiting,
                open: Arc::clone(&open),
                written: Arc::clone(&written),
            };
            let queue = Queue::start(capacity, gate).expect("writer thread");
            queue.push(first.into(), text());
            waits
                .recv_timeout(Duration::from_secs(30))
                .expect("the writer tries to write");
            Stuck {
                queue,
                open,
                written,
            }
        }

        fn open(&self) {
            *self.open.0.lock().expect("gate") = true;
            self.open.1.notify_all();
        }

        fn text(&self) -> String {
            String::from_utf8(self.written.lock().expect("written").clone()).expect("utf-8")
        }
    }

    #[test]
    fn a_stuck_stderr_drops_and_counts_and_keeps_the_order() {
        let stuck = Stuck::new(3, "one\n");
        for line in ["two", "three", "four", "five", "six"] {
            stuck.queue.push(format!("{line}\n"), text());
        }
        let started = Instant::now();
        stuck.queue.flush(Duration::from_millis(50), text());
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "flush waited {:?} on a stuck stderr",
            started.elapsed()
        );
        stuck.open();
        stuck.queue.flush(Duration::from_secs(30), text());
        stuck.queue.push("seven\n".into(), text());
        stuck.queue.flush(Duration::from_secs(30), text());
        assert_eq!(
            stuck.text(),
            "one\ntwo\nthree\nfour\nlockrun: 2 messages were dropped here: stderr was full \
             (is anyone reading it?)\nseven\n"
        );
    }

    #[test]
    fn json_says_what_was_dropped_in_json() {
        let context = Box::leak(Box::new(Context::new(Some("job".into()))));
        let report = Report {
            json: Some(context),
            ..Report::TEXT
        };
        let line = report.dropped_line()(2);
        assert!(line.ends_with("}\n"), "{line}");
        let parsed: serde_json::Value = serde_json::from_str(&line).expect("one JSON object");
        assert_eq!(parsed["event"], "dropped");
        assert_eq!(parsed["count"], 2);
        assert_eq!(parsed["key"], "job");
        assert_eq!(
            parsed["message"],
            "2 messages were dropped here: stderr was full (is anyone reading it?)"
        );
    }

    #[test]
    fn flush_says_what_was_dropped_at_the_end() {
        let stuck = Stuck::new(1, "one\n");
        stuck.queue.push("two\n".into(), text());
        stuck.queue.push("three\n".into(), text());
        stuck.open();
        stuck.queue.flush(Duration::from_secs(30), text());
        assert_eq!(
            stuck.text(),
            "one\ntwo\nlockrun: 1 message was dropped here: stderr was full (is anyone \
             reading it?)\n"
        );
    }

    #[test]
    fn a_full_pipe_never_blocks_the_caller() {
        let (reader, writer) = std::io::pipe().expect("pipe");
        let queue = Queue::start(QUEUE_LINES, writer).expect("writer thread");
        let (done, finished) = mpsc::channel();
        // 10 MB through a 64 KiB pipe that nobody reads.
        std::thread::spawn(move || {
            for i in 0..100_000 {
                queue.push(format!("{i:>99}\n"), text());
            }
            queue.flush(Duration::from_millis(50), text());
            let _ = done.send(());
        });
        finished
            .recv_timeout(Duration::from_secs(30))
            .expect("pushing and flushing returned although the pipe is full");
        drop(reader);
    }
}
