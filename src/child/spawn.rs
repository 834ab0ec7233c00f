//! Starting the command: std's `Command`, in a process group of its own,
//! with one `pre_exec` for what only the child can do (docs/design.md,
//! "Stopping the command"). Variables holding the command's own pid are
//! written by the child into an environment the parent built with room for
//! them, since std builds its environment before the fork ("Under systemd").

use std::ffi::{c_char, OsString};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use nix::errno::Errno;
use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow, Signal};
use nix::unistd::{getpid, getppid, Pid};

/// The digits of the largest pid (`pid_t` is 32 bits).
const PID_DIGITS: usize = 10;

extern "C" {
    /// The process's environment, as libc keeps it and execvp passes it on.
    static mut environ: *const *const c_char;
}

/// Starts `argv` with lockrun's environment, `inherited`, changed by `env`,
/// and the variables named in `own_pid` set to the command's pid.
/// `terminal`: make its group the terminal's foreground group.
pub(super) fn spawn(
    argv: &[OsString],
    inherited: Inherited,
    env: &[(&str, Option<OsString>)],
    own_pid: &[&str],
    terminal: bool,
) -> io::Result<std::process::Child> {
    let (program, arguments) = argv
        .split_first()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
    let mut environment = Environment::new(inherited, env, own_pid)?;
    let parent = getpid();
    let stdin = io::stdin();
    let mut command = Command::new(program);
    command.args(arguments).process_group(0);
    // SAFETY: the closure runs in the forked child, where only this thread
    // exists: it makes only async-signal-safe system calls (sigprocmask,
    // prctl, getppid, getpid, tcsetpgrp), writes digits and pointers into
    // memory `environment` made before the fork, and assigns `environ`; it
    // neither allocates nor takes a lock (its errors are plain errnos).
    unsafe {
        command.pre_exec(move || in_child(parent, terminal.then_some(&stdin), &mut environment));
    }
    command.spawn()
}

/// What the child does before exec, with every signal blocked until the
/// end: the mask std just emptied would let a terminal signal stop it
/// (SIGTTOU, taking the terminal from the background).
fn in_child(
    parent: Pid,
    terminal: Option<&io::Stdin>,
    environment: &mut Environment,
) -> io::Result<()> {
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), None)?;
    // Die with lockrun, so the command can never run unsupervised. The
    // parent-death signal follows the spawning *thread*; lockrun spawns
    // from its main thread, which lives as long as it does.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    // lockrun may have died before the line above took effect.
    if getppid() != parent {
        return Err(Errno::ESRCH.into());
    }
    if let Some(stdin) = terminal {
        nix::unistd::tcsetpgrp(stdin.as_fd(), getpid())?;
    }
    environment.install(getpid());
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    Ok(())
}

/// lockrun's own environment as `NAME=VALUE` pairs, NUL-terminated: read
/// ahead of the spawn, while the run waits for Redis, for copying every
/// variable is most of what the spawn costs before the fork.
pub(crate) struct Inherited {
    pairs: Vec<Vec<u8>>,
}

impl Inherited {
    pub(crate) fn read() -> Inherited {
        let pairs = std::env::vars_os()
            .map(|(name, value)| pair(name.as_bytes(), value.as_bytes()))
            .collect();
        Inherited { pairs }
    }
}

/// The command's whole environment, made before the fork: every variable
/// NUL-terminated, the pid variables with room for the digits, and a null
/// pointer array the child fills.
struct Environment {
    pairs: Vec<Vec<u8>>,
    /// Where in `pairs` the pid variables are; each ends with `=` and
    /// `PID_DIGITS + 1` bytes of room.
    pid_vars: Vec<usize>,
    /// One pointer per pair and the terminating null: execvp's envp.
    /// Atomic only so that the closure that owns it may be Send and Sync as
    /// `pre_exec` asks; it has the layout of `*mut c_char`.
    pointers: Vec<AtomicPtr<c_char>>,
}

impl Environment {
    /// lockrun's environment, `inherited`, with `changes` made (a value sets
    /// the variable, None removes it), and the variables named in `own_pid`
    /// made room for.
    fn new(
        inherited: Inherited,
        changes: &[(&str, Option<OsString>)],
        own_pid: &[&str],
    ) -> io::Result<Environment> {
        let replaced = |pair: &[u8]| {
            changes
                .iter()
                .map(|(changed, _)| changed)
                .chain(own_pid)
                .any(|changed| {
                    pair.strip_prefix(changed.as_bytes())
                        .is_some_and(|rest| rest.first() == Some(&b'='))
                })
        };
        let mut pairs = inherited.pairs;
        pairs.retain(|pair| !replaced(pair));
        for (name, value) in changes {
            if let Some(value) = value {
                if value.as_bytes().contains(&0) {
                    return Err(io::Error::from_raw_os_error(libc::EINVAL));
                }
                pairs.push(pair(name.as_bytes(), value.as_bytes()));
            }
        }
        let mut pid_vars = Vec::with_capacity(own_pid.len());
        for name in own_pid {
            pid_vars.push(pairs.len());
            let mut room = pair(name.as_bytes(), b"");
            room.resize(room.len() + PID_DIGITS, 0);
            pairs.push(room);
        }
        let pointers = (0..=pairs.len())
            .map(|_| AtomicPtr::new(ptr::null_mut()))
            .collect();
        Ok(Environment {
            pairs,
            pid_vars,
            pointers,
        })
    }

    /// Writes `pid`, NUL-terminated, into the room of each pid variable.
    fn write_pid(&mut self, pid: Pid) {
        let digits = Digits::of(pid);
        for &at in &self.pid_vars {
            let pair = &mut self.pairs[at];
            let start = pair.len() - PID_DIGITS - 1;
            pair[start..start + digits.len].copy_from_slice(digits.as_bytes());
            pair[start + digits.len] = 0;
        }
    }

    /// In the child: writes `pid` into the pid variables and makes this the
    /// environment execvp passes on. Stores only: async-signal-safe.
    fn install(&mut self, pid: Pid) {
        self.write_pid(pid);
        for (pointer, pair) in self.pointers.iter().zip(&mut self.pairs) {
            pointer.store(pair.as_mut_ptr().cast(), Ordering::Relaxed);
        }
        let envp = self.pointers.as_ptr().cast::<*const c_char>();
        // SAFETY: `envp` is a null-terminated array of pointers to
        // NUL-terminated strings (AtomicPtr has the layout of a pointer),
        // owned by the `pre_exec` closure, which lives until the exec or the
        // child's exit; only this single-threaded child reads `environ` now.
        unsafe { environ = envp };
    }
}

/// `NAME=VALUE` and its NUL.
fn pair(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut pair = Vec::with_capacity(name.len() + value.len() + 2);
    pair.extend_from_slice(name);
    pair.push(b'=');
    pair.extend_from_slice(value);
    pair.push(0);
    pair
}

/// A pid in decimal, made without allocating.
struct Digits {
    bytes: [u8; PID_DIGITS],
    len: usize,
}

impl Digits {
    fn of(pid: Pid) -> Digits {
        let mut reversed = [0u8; PID_DIGITS];
        let mut left = pid.as_raw().unsigned_abs();
        let mut len = 0;
        while len < PID_DIGITS {
            // The remainder is below 10: it always fits.
            reversed[len] = b'0' + u8::try_from(left % 10).unwrap_or(0);
            len += 1;
            left /= 10;
            if left == 0 {
                break;
            }
        }
        let mut bytes = [0u8; PID_DIGITS];
        for (to, from) in bytes.iter_mut().zip(reversed[..len].iter().rev()) {
            *to = *from;
        }
        Digits { bytes, len }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn a_pid_is_written_in_decimal() {
        for pid in [1, 42, 4_194_304, libc::pid_t::MAX] {
            let digits = Digits::of(Pid::from_raw(pid));
            assert_eq!(digits.as_bytes(), pid.to_string().as_bytes());
        }
    }

    #[test]
    fn the_environment_is_changed_as_asked_and_holds_the_pid() {
        let env = Environment::new(
            Inherited::read(),
            &[("LOCKRUN_T_SET", Some("a b".into())), ("PATH", None)],
            &["WATCHDOG_PID", "LISTEN_PID"],
        )
        .expect("environment");
        let mut env = env;
        env.write_pid(Pid::from_raw(4_194_304));
        let vars: Vec<OsString> = env
            .pairs
            .iter()
            .map(|pair| {
                let end = pair.iter().position(|&b| b == 0).unwrap_or(pair.len());
                OsString::from_vec(pair[..end].to_vec())
            })
            .collect();
        assert!(vars.contains(&"LOCKRUN_T_SET=a b".into()), "{vars:?}");
        assert!(vars.contains(&"WATCHDOG_PID=4194304".into()), "{vars:?}");
        assert!(vars.contains(&"LISTEN_PID=4194304".into()), "{vars:?}");
        assert!(!vars.iter().any(|var| var.as_bytes().starts_with(b"PATH=")));
        let once = |prefix: &[u8]| {
            vars.iter()
                .filter(|var| var.as_bytes().starts_with(prefix))
                .count()
        };
        assert_eq!(once(b"WATCHDOG_PID="), 1);
    }

    #[test]
    fn a_variable_is_replaced_by_its_whole_name_only() {
        let inherited = Inherited {
            pairs: vec![
                pair(b"PATH", b"/bin"),
                pair(b"PATHS", b"x"),
                pair(b"=PATH", b"y"),
            ],
        };
        let env = Environment::new(inherited, &[("PATH", Some("/usr/bin".into()))], &[])
            .expect("environment");
        let vars: Vec<&[u8]> = env.pairs.iter().map(Vec::as_slice).collect();
        assert_eq!(
            vars,
            [&b"PATHS=x\0"[..], b"=PATH=y\0", b"PATH=/usr/bin\0"],
            "{vars:?}"
        );
    }

    #[test]
    fn a_value_with_a_nul_is_refused() {
        let changes = [("X", Some(OsString::from_vec(b"a\0b".to_vec())))];
        let err = Environment::new(Inherited::read(), &changes, &[])
            .err()
            .and_then(|err| err.raw_os_error());
        assert_eq!(err, Some(libc::EINVAL));
    }
}
