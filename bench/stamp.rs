//! The job the handoff benchmark runs under each lock: it records when it
//! started and ended on CLOCK_MONOTONIC, holds a marker directory while it
//! runs (mkdir fails if another job still holds it: an overlap), and sleeps.
//!
//! Usage: stamp LOG MARKER_DIR SLEEP_MS
//! Appends "start_ns end_ns overlapped(0|1)" to LOG in one write.
//!
//! Deliberately tiny (std only, built with plain rustc) so that its own start
//! adds as little as possible to the gap; both tools pay it equally.

use std::io::Write;
use std::time::Duration;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

const CLOCK_MONOTONIC: i32 = 1;

fn now_ns() -> i64 {
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the pointer it is given,
    // which points at a live, properly laid out local.
    let rc = unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return -1;
    }
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn main() {
    let start = now_ns();
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: stamp LOG MARKER_DIR SLEEP_MS");
        std::process::exit(2);
    }
    let marker = &args[2];
    let sleep_ms: u64 = args[3].parse().unwrap_or(0);
    let created = std::fs::create_dir(marker).is_ok();
    std::thread::sleep(Duration::from_millis(sleep_ms));
    if created {
        let _ = std::fs::remove_dir(marker);
    }
    let line = format!("{start} {} {}\n", now_ns(), u8::from(!created));
    let written = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&args[1])
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(err) = written {
        eprintln!("stamp: {}: {err}", args[1]);
        std::process::exit(1);
    }
}
