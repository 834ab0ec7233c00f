//! The CPU's features, looked up while the first request is at Redis: the
//! first script call, or the `HELLO` of a connection that speaks RESP3.
//!
//! The redis crate's reply parser searches with memchr, which on its first
//! search asks std which SIMD instructions the CPU has, and std asks the CPU
//! itself with some ten `CPUID` instructions. On a virtual machine each
//! `CPUID` traps to the hypervisor: 7 µs apiece on the machine BENCHMARKS.md
//! was measured on, 0.11 ms per run, spent right after the first reply
//! arrives, on the way to starting the command. Looked up while that reply
//! is awaited, the same work fills time lockrun would spend waiting anyway.
//! std keeps the answer for the whole process, memchr's included.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

static LOOKED_UP: AtomicBool = AtomicBool::new(false);

/// Runs `request` and, once it is on its way (the connection's own task
/// sends it), looks the CPU's features up, the first time only.
pub(super) async fn look_up_meanwhile<F: Future>(request: F) -> F::Output {
    if LOOKED_UP.swap(true, Ordering::Relaxed) {
        return request.await;
    }
    let (output, ()) = tokio::join!(request, async {
        // Lets the connection's task write the request first.
        tokio::task::yield_now().await;
        look_up();
    });
    output
}

fn look_up() {
    #[cfg(target_arch = "x86_64")]
    std::hint::black_box(std::arch::is_x86_feature_detected!("avx2"));
}
