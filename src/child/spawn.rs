//! Starting the command without copying lockrun's memory.
//!
//! A fork copies the page tables of the whole process and makes every page
//! lockrun writes afterwards fault and copy; std's `Command` falls back to
//! fork as soon as the child has to run code of ours before exec, as the
//! parent-death signal needs. This does what glibc's posix_spawn does: a
//! child that shares lockrun's memory (`CLONE_VM`), runs on a stack of its
//! own while lockrun's thread is suspended (`CLONE_VFORK`) until the exec,
//! and makes only async-signal-safe calls. Everything it reads (program,
//! argv, envp) is built before the clone; it writes nothing of lockrun's but
//! the error it reports, in memory the parent reads after the clone. What it
//! saves against std's `Command` is in BENCHMARKS.md ("Start-up: what each
//! speed-up saves").
//!
//! The child starts as std's would: in a process group of its own, with an
//! empty signal mask, every handled signal and SIGPIPE back to the default,
//! the environment changed as asked, found on PATH as execvp finds it.
//!
//! Some variables must hold the command's own pid (systemd's
//! `WATCHDOG_PID` and `LISTEN_PID`), which exists only once the clone
//! returned in the child: the parent makes room for the digits, and the
//! child writes them between clone and exec, which only formats a number
//! into memory made for it.

use std::ffi::{c_int, c_void, CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::ptr;

use nix::unistd::Pid;

/// The child's own stack, besides what execvp's script fallback puts there
/// (a copy of argv): room for execvp's PATH buffer (PATH_MAX and NAME_MAX
/// bytes) and the frames of an unoptimised build, twice the 32 KiB that
/// glibc's posix_spawn gives its child.
const STACK: usize = 64 * 1024;
/// The highest signal number on Linux (SIGRTMAX).
const LAST_SIGNAL: c_int = 64;
/// The digits of the largest pid (`pid_t` is 32 bits).
const PID_DIGITS: usize = 10;

/// What the child is handed: raw pointers into the `Plan`, and where it
/// writes the errno of a failed start (0 while none).
struct Handoff {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// Where the child writes its pid, in decimal and NUL-terminated: room
    /// for `PID_DIGITS` bytes and the NUL in each.
    pid_slots: *const *mut u8,
    pid_slot_count: usize,
    parent: libc::pid_t,
    terminal: bool,
    error: c_int,
}

/// Starts `argv` with lockrun's environment changed by `env`, and the
/// variables named in `own_pid` set to the command's pid, and returns its
/// pid. `terminal`: make its group the terminal's foreground group.
pub(super) fn spawn(
    argv: &[OsString],
    env: &[(&str, Option<OsString>)],
    own_pid: &[&str],
    terminal: bool,
) -> io::Result<Pid> {
    let program = c_string(argv.first().map_or(OsStr::new(""), OsString::as_os_str))?;
    let words = argv
        .iter()
        .map(|arg| c_string(arg))
        .collect::<io::Result<Vec<_>>>()?;
    let argv_pointers = null_terminated(&words);
    // `_made` and `pids` hold the strings of the variables set, which
    // `envp` points into.
    let (_made, mut pids, envp_pointers) = environment(env, own_pid)?;
    let pid_slots: Vec<*mut u8> = pids.iter_mut().map(PidVar::slot).collect();
    let mut handoff = Handoff {
        program: program.as_ptr(),
        argv: argv_pointers.as_ptr(),
        envp: envp_pointers.as_ptr(),
        pid_slots: pid_slots.as_ptr(),
        pid_slot_count: pid_slots.len(),
        parent: std::process::id().try_into().map_err(io::Error::other)?,
        terminal,
        error: 0,
    };
    let stack = Stack::new(argv.len())?;
    let all = blocked_all()?;
    // SAFETY: `child` gets a stack of its own that outlives it (lockrun's
    // thread is suspended until the child execs or exits: CLONE_VFORK), and
    // `handoff`, which also outlives it and which nothing else touches until
    // clone returns. Every signal is blocked, so no handler of lockrun's runs
    // on the child's stack.
    let pid = unsafe {
        libc::clone(
            child,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            ptr::from_mut(&mut handoff).cast::<c_void>(),
        )
    };
    let cloned = io::Error::last_os_error();
    restore(&all);
    // The child has exec'd or exited: it no longer runs on the stack.
    drop(stack);
    if pid == -1 {
        return Err(cloned);
    }
    let pid = Pid::from_raw(pid);
    // SAFETY: the child has exec'd or exited: it no longer writes `handoff`.
    let error = unsafe { ptr::read_volatile(&raw const handoff.error) };
    if error != 0 {
        // It exited: reap it, so that no zombie is left for the orphan reaper.
        let _ = nix::sys::wait::waitpid(pid, None);
        return Err(io::Error::from_raw_os_error(error));
    }
    Ok(pid)
}

/// The child's stack: a mapping of its own with a page below it that
/// faults, as a thread's stack has, so that an overflow kills the child
/// rather than writing over lockrun's memory. Unmapped when dropped.
struct Stack {
    base: *mut c_void,
    len: usize,
}

impl Stack {
    /// A stack for a child started with `argc` arguments.
    fn new(argc: usize) -> io::Result<Stack> {
        // SAFETY: sysconf only reads.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(io::Error::other)?;
        // execvp's script fallback copies argv, two more words included.
        let usable = (STACK + (argc + 2) * std::mem::size_of::<usize>()).next_multiple_of(page);
        let len = usable + page;
        // SAFETY: a new private anonymous mapping, which nothing else uses.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of the mapping just made, which nothing
        // uses yet; the guard.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The stack's first address above it: it grows down from there.
    /// Page-aligned, so 16-byte aligned as the ABI wants.
    fn top(&self) -> *mut c_void {
        // SAFETY: one past the end of the mapping, which `len` spans.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made, used by no one once the child
        // exec'd or exited.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

/// The child, between clone and exec.
extern "C" fn child(arg: *mut c_void) -> c_int {
    let handoff = arg.cast::<Handoff>();
    // SAFETY: `arg` is the parent's `Handoff`, alive and untouched by the
    // parent until this child execs or exits. Every call below is an
    // async-signal-safe system call (setpgid, prctl, getppid, sigaction,
    // tcsetpgrp, getpid, sigprocmask, execve through execvpe's PATH walk on
    // this stack, _exit) or writes digits into the pid slots; nothing
    // allocates or takes a lock.
    unsafe {
        let error = prepare(&*handoff).err().unwrap_or_else(|| {
            libc::execvpe((*handoff).program, (*handoff).argv, (*handoff).envp);
            errno()
        });
        ptr::write_volatile(&raw mut (*handoff).error, error.max(1));
        libc::_exit(127)
    }
}

/// Everything the child does before exec, as std's child and the old
/// pre_exec did it; Err is the errno of what failed.
///
/// # Safety
///
/// Only in the child of `spawn`, with every signal blocked.
unsafe fn prepare(handoff: &Handoff) -> Result<(), c_int> {
    // SAFETY: async-signal-safe system calls on this process only.
    unsafe {
        if libc::setpgid(0, 0) == -1 {
            return Err(errno());
        }
        // Die with lockrun, so the command can never run unsupervised. The
        // parent-death signal follows the spawning *thread*; lockrun spawns
        // from its main thread, which lives as long as it does.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
            return Err(errno());
        }
        // lockrun may have died before the line above took effect.
        if libc::getppid() != handoff.parent {
            return Err(libc::ESRCH);
        }
        // A handler of lockrun's must not run in the child, on memory it
        // shares with lockrun; SIGPIPE, which Rust's runtime ignores, gets
        // its default back as std gives it. Signals ignored when lockrun
        // started stay ignored, as they did with std.
        for signal in 1..=LAST_SIGNAL {
            let mut action: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, ptr::null(), &raw mut action) == 0
                && (action.sa_sigaction != libc::SIG_IGN || signal == libc::SIGPIPE)
                && action.sa_sigaction != libc::SIG_DFL
            {
                action.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &raw const action, ptr::null_mut());
            }
        }
        // SIGTTOU is blocked: a background group may take the terminal.
        if handoff.terminal && libc::tcsetpgrp(0, libc::getpid()) == -1 {
            return Err(errno());
        }
        let pid = libc::getpid();
        for at in 0..handoff.pid_slot_count {
            write_pid(*handoff.pid_slots.add(at), pid);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &raw const empty, ptr::null_mut());
    }
    Ok(())
}

/// Writes `pid` in decimal at `slot`, NUL-terminated: arithmetic and plain
/// stores only, so async-signal-safe.
///
/// # Safety
///
/// `slot` has room for `PID_DIGITS` bytes and the NUL.
unsafe fn write_pid(slot: *mut u8, pid: libc::pid_t) {
    let mut digits = [0u8; PID_DIGITS];
    let mut left = pid.unsigned_abs();
    let mut len = 0;
    loop {
        // The remainder is below 10: it always fits.
        digits[len] = b'0' + u8::try_from(left % 10).unwrap_or(0);
        len += 1;
        left /= 10;
        if left == 0 || len == PID_DIGITS {
            break;
        }
    }
    for (at, digit) in digits[..len].iter().rev().enumerate() {
        // SAFETY: `at` < `len` <= PID_DIGITS, within the slot.
        unsafe { slot.add(at).write(*digit) };
    }
    // SAFETY: `len` <= PID_DIGITS: the slot's last byte at most.
    unsafe { slot.add(len).write(0) };
}

/// A variable whose value is the command's pid, written by the child: the
/// name and '=', then room for the digits and the NUL.
struct PidVar(Vec<u8>);

impl PidVar {
    fn new(name: &str) -> PidVar {
        let mut pair = name.as_bytes().to_vec();
        pair.push(b'=');
        pair.resize(pair.len() + PID_DIGITS + 1, 0);
        PidVar(pair)
    }

    /// Where the digits go. The vector is never resized after this.
    fn slot(&mut self) -> *mut u8 {
        let start = self.0.len() - PID_DIGITS - 1;
        // SAFETY: `start` is within the vector.
        unsafe { self.0.as_mut_ptr().add(start) }
    }

    /// The whole variable, NUL-terminated once the child wrote its pid (and
    /// before: the room is zeroed).
    fn pair(&mut self) -> *const libc::c_char {
        self.0.as_mut_ptr().cast_const().cast()
    }
}

fn errno() -> c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// Blocks every signal in lockrun's thread; returns the mask to restore.
fn blocked_all() -> io::Result<libc::sigset_t> {
    // SAFETY: sigfillset and pthread_sigmask write only the sets given.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&raw mut all);
        match libc::pthread_sigmask(libc::SIG_SETMASK, &raw const all, &raw mut old) {
            0 => Ok(old),
            err => Err(io::Error::from_raw_os_error(err)),
        }
    }
}

fn restore(mask: &libc::sigset_t) {
    // SAFETY: `mask` is the mask pthread_sigmask returned.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, mask, ptr::null_mut());
    }
}

extern "C" {
    /// The process's environment, as libc keeps it.
    static environ: *const *const libc::c_char;
}

/// The null-terminated pointers of an environment, and what they point
/// into besides `environ`: the strings made for the variables set, and the
/// pid variables.
type Environment = (Vec<CString>, Vec<PidVar>, Vec<*const libc::c_char>);

/// lockrun's environment with `changes` made, and the variables named in
/// `own_pid` made for the child's pid: the variables kept are passed as
/// they are, pointers into `environ` (no copy), and the ones set follow,
/// made here.
fn environment(changes: &[(&str, Option<OsString>)], own_pid: &[&str]) -> io::Result<Environment> {
    let set = changes
        .iter()
        .filter_map(|(name, value)| {
            let value = value.as_ref()?;
            let mut pair = name.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            Some(CString::new(pair).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL)))
        })
        .collect::<io::Result<Vec<_>>>()?;
    let mut pointers = Vec::new();
    // SAFETY: `environ` is a null-terminated array of NUL-terminated strings;
    // lockrun never changes its own environment (no set_var or remove_var
    // anywhere), so nothing rewrites it while it is read here.
    unsafe {
        let mut at = environ;
        while !at.is_null() && !(*at).is_null() {
            let pair = std::ffi::CStr::from_ptr(*at).to_bytes();
            let name = pair.split(|&b| b == b'=').next().unwrap_or(pair);
            let set_here = changes.iter().map(|(changed, _)| changed);
            if !set_here
                .chain(own_pid)
                .any(|changed| changed.as_bytes() == name)
            {
                pointers.push(*at);
            }
            at = at.add(1);
        }
    }
    pointers.extend(set.iter().map(|pair| pair.as_ptr()));
    let mut pids: Vec<PidVar> = own_pid.iter().map(|name| PidVar::new(name)).collect();
    pointers.extend(pids.iter_mut().map(PidVar::pair));
    pointers.push(ptr::null());
    Ok((set, pids, pointers))
}

fn c_string(text: &OsStr) -> io::Result<CString> {
    CString::new(text.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(ptr::null()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mapping as /proc/self/maps lists it: "START-END PERMS ...".
    fn mapping_at(address: usize) -> Option<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
        maps.lines()
            .find(|line| {
                let range = line.split(' ').next().unwrap_or("");
                let (start, end) = range.split_once('-').unwrap_or(("", ""));
                let bound = |hex| usize::from_str_radix(hex, 16).unwrap_or(0);
                (bound(start)..bound(end)).contains(&address)
            })
            .map(str::to_owned)
    }

    #[test]
    fn a_pid_variable_holds_the_pid_the_child_writes() {
        for pid in [1, 42, 4_194_304, libc::pid_t::MAX] {
            let mut var = PidVar::new("WATCHDOG_PID");
            // SAFETY: the slot of a `PidVar`, with room for the digits and NUL.
            unsafe { write_pid(var.slot(), pid) };
            // SAFETY: NUL-terminated: the room was zeroed, and write_pid ends
            // with a NUL.
            let pair = unsafe { std::ffi::CStr::from_ptr(var.pair()) };
            assert_eq!(pair.to_str(), Ok(format!("WATCHDOG_PID={pid}").as_str()));
        }
    }

    #[test]
    fn the_stack_has_a_guard_page_below_it() {
        let stack = Stack::new(3).expect("a stack");
        let (base, top) = (stack.base as usize, stack.top() as usize);
        assert_eq!(top % 16, 0);
        assert!(top - base > STACK + 5 * 8);
        let guard = mapping_at(base).expect("the guard page");
        assert!(guard.contains(" ---p "), "{guard}");
        let usable = mapping_at(top - 1).expect("the stack");
        assert!(usable.contains(" rw-p "), "{usable}");
    }
}
