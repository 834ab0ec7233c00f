//! `Terminal`: a command line on a pseudo-terminal of its own (util-linux `script`), for lockrun in an operator's terminal.

use std::io::Write;
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;

use super::command::{clear_lockrun_env, read_all};
use super::{eventually, Running, PATIENCE};

pub struct Terminal {
    run: Running,
    keyboard: Option<ChildStdin>,
    /// Read all along: a screen nobody reads would fill the pipe and stall
    /// `script`.
    screen: Option<JoinHandle<Vec<u8>>>,
}

impl Terminal {
    /// Runs `line` with the shell in a new terminal, with none of the
    /// caller's LOCKRUN_* settings.
    pub fn start(line: &str) -> Self {
        let mut script = Command::new("script");
        script
            .args(["-qec", line, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        clear_lockrun_env(&mut script);
        let mut run = Running::spawn(&mut script);
        let keyboard = run.child.stdin.take();
        let screen = Some(read_all(run.child.stdout.take()));
        Terminal {
            run,
            keyboard,
            screen,
        }
    }

    pub fn type_in(&mut self, text: &[u8]) {
        let keyboard = self.keyboard.as_mut().expect("the keyboard is open");
        keyboard.write_all(text).expect("type");
    }

    /// Ends the input, as Ctrl-D at an empty line would.
    pub fn close_keyboard(&mut self) {
        self.keyboard = None;
    }

    /// Waits up to `PATIENCE` for the line to end; returns how it ended and
    /// everything the terminal showed.
    pub fn wait(mut self) -> (ExitStatus, String) {
        let status = self.run.wait();
        self.close_keyboard();
        let screen = self.screen.take().expect("read once");
        let finished = eventually(PATIENCE, || screen.is_finished());
        assert!(finished, "the terminal ended, but its output was left open");
        let screen = screen.join().expect("screen reader");
        (status, String::from_utf8_lossy(&screen).into_owned())
    }
}
