//! The `lockrun` binary: everything lives in the library; this only starts
//! the process and hands the exit status back to the OS.
//!
//! It starts from C's `main`, not Rust's: Rust's start-up would find the
//! main thread's stack by reading and parsing /proc/self/maps
//! (pthread_getattr_np), a tenth of the instructions of a whole
//! `lockrun -- true`, to install a handler that turns a stack overflow into
//! a message instead of a plain SIGSEGV. lockrun does the rest of that
//! start-up here: standard fds 0-2 are opened on /dev/null if closed, so
//! that no socket or file of lockrun's takes their place, and SIGPIPE is
//! ignored, so that a closed pipe is an error to report, not death; stdout
//! is flushed at the end. std::env::args needs none of it: on glibc, std
//! reads argv from `.init_array`, before `main`.

// A test build of this file gets the test harness's `main` instead.
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
use std::ffi::{c_char, c_int};
#[cfg(not(test))]
use std::io::Write as _;

/// The process's entry point, called by libc.
#[cfg(not(test))]
#[no_mangle]
extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    standard_fds_open();
    // SAFETY: setting a signal's disposition to SIG_IGN, before any thread
    // other than this one exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let code = lockrun::main();
    let _ = std::io::stdout().flush();
    c_int::from(code)
}

/// Opens /dev/null on each of fds 0-2 that is closed, as Rust's start-up
/// does; aborts if that fails, as it does too.
#[cfg(not(test))]
fn standard_fds_open() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: poll reads and writes only the three entries of `fds`.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } != -1;
    for pollfd in fds {
        let closed = if polled {
            pollfd.revents & libc::POLLNVAL != 0
        } else {
            // SAFETY: F_GETFD only asks whether the fd is open.
            unsafe { libc::fcntl(pollfd.fd, libc::F_GETFD) == -1 }
        };
        // SAFETY: open with a constant path; the lowest free fd is this one,
        // since the ones below it are open.
        if closed && unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } != pollfd.fd {
            std::process::abort();
        }
    }
}
