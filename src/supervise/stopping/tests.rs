//! The start of each stop under tokio's paused clock, against a target that
//! notes the signals it would have got: which signal goes out first, to
//! whom, when SIGKILL follows, and what the `stopping` event says of it.

use std::cell::RefCell;

use serde_json::{json, Value};

use super::*;
use crate::report;

use crate::supervise::tests::{ms, no_systemd, timing};

/// The signals a stop sent, in order; `true` for everything the command
/// started, `false` for its process group alone.
#[derive(Default)]
struct Noted(RefCell<Vec<(Signal, bool)>>);

impl Target for Noted {
    fn signal_all(&self, signal: Signal) {
        self.0.borrow_mut().push((signal, true));
    }

    fn signal_group(&self, signal: Signal) {
        self.0.borrow_mut().push((signal, false));
    }
}

impl Noted {
    fn take(&self) -> Vec<(Signal, bool)> {
        std::mem::take(&mut self.0.borrow_mut())
    }
}

fn new_stopping(timeout_at: Option<BootInstant>) -> Stopping<'static> {
    Stopping::new(timing(), timeout_at, "billing", no_systemd())
}

/// event, level, reason, signal, grace_ms, exit_status, message.
fn said(said: Message<'_>) -> Value {
    let line = report::json_of(said);
    let fields = [
        "event",
        "level",
        "reason",
        "signal",
        "grace_ms",
        "exit_status",
        "message",
    ];
    fields
        .map(|field| {
            line.get(field)
                .cloned()
                .unwrap_or_else(|| panic!("{field}"))
        })
        .into()
}

#[test]
fn each_reason_says_why_which_signal_and_how_long_until_sigkill() {
    let timed_out = Stop::TimedOut;
    assert_eq!(
        said(stop_said(timed_out, Signal::SIGTERM, ms(10_000), "billing")),
        json!([
            "stopping",
            "warning",
            "timeout",
            "SIGTERM",
            10_000,
            124,
            "the command ran longer than --timeout; stopping the command: SIGTERM now, \
             SIGKILL in 10s"
        ])
    );
    let gone = Stop::Lost(Loss::TokenGone);
    assert_eq!(
        said(stop_said(gone, Signal::SIGTERM, ms(1500), "billing")),
        json!([
            "stopping",
            "warning",
            "lost",
            "SIGTERM",
            1500,
            76,
            format!(
                "lost the lock billing: {}; stopping the command: SIGTERM now, SIGKILL in \
                 1s500ms",
                Loss::TokenGone
            )
        ])
    );
    let lapsed = Stop::Lost(Loss::Lapsed);
    assert_eq!(
        said(stop_said(lapsed, Signal::SIGKILL, ms(0), "billing")),
        json!([
            "stopping",
            "warning",
            "lost",
            "SIGKILL",
            0,
            76,
            format!(
                "lost the lock billing: {}; stopping the command: SIGKILL",
                Loss::Lapsed
            )
        ])
    );
    assert_eq!(
        said(Message::StoppingForwarded {
            signal: Signal::SIGINT
        }),
        json!([
            "stopping",
            "info",
            "signal",
            "SIGINT",
            null,
            null,
            "forwarding SIGINT to the command"
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeout_sends_sigterm_once_and_sigkill_a_kill_grace_later() {
    let t0 = BootInstant::now();
    let lease = Lease::new(t0 + ms(2968));
    let noted = Noted::default();
    let mut stopping = new_stopping(Some(t0 + ms(100)));
    tokio::time::advance(ms(100)).await;
    stopping.on_wake(&noted, &lease);
    assert_eq!(noted.take(), [(Signal::SIGTERM, true)]);
    assert_eq!(stopping.reason, Some(Stop::TimedOut));
    assert_eq!(stopping.kill_at, Some(t0 + ms(600)));
    // A later reason neither signals again nor replaces the first.
    stopping.begin_soon(&noted, &lease, Stop::Lost(Loss::TokenGone));
    stopping.on_wake(&noted, &lease);
    assert_eq!(noted.take(), []);
    assert_eq!(stopping.reason, Some(Stop::TimedOut));
    tokio::time::advance(ms(500)).await;
    stopping.enforce_deadline(&noted, &lease);
    stopping.enforce_deadline(&noted, &lease);
    assert_eq!(noted.take(), [(Signal::SIGKILL, true)]);
    assert_eq!(stopping.next_wake(lease.deadline()), None);
}

#[tokio::test(start_paused = true)]
async fn a_lost_token_near_the_deadline_kills_at_the_deadline() {
    let t0 = BootInstant::now();
    let lease = Lease::new(t0 + ms(300));
    let noted = Noted::default();
    let mut stopping = new_stopping(None);
    stopping.begin_soon(&noted, &lease, Stop::Lost(Loss::TokenGone));
    assert_eq!(noted.take(), [(Signal::SIGTERM, true)]);
    // The kill grace (500 ms) would outlast the lease.
    assert_eq!(stopping.kill_at, Some(t0 + ms(300)));
}

#[tokio::test(start_paused = true)]
async fn renewals_that_fail_stop_the_command_a_kill_grace_before_the_deadline() {
    let t0 = BootInstant::now();
    let lease = Lease::new(t0 + ms(2968));
    let noted = Noted::default();
    let mut stopping = new_stopping(None);
    tokio::time::advance(ms(2468)).await;
    stopping.on_wake(&noted, &lease);
    assert_eq!(noted.take(), [(Signal::SIGTERM, true)]);
    assert_eq!(stopping.reason, Some(Stop::Lost(Loss::Unconfirmed)));
    assert_eq!(stopping.kill_at, Some(t0 + ms(2968)));
}

#[tokio::test(start_paused = true)]
async fn a_lease_found_lapsed_is_stopped_with_one_sigkill() {
    let t0 = BootInstant::now();
    let lease = Lease::new(t0 + ms(2968));
    let noted = Noted::default();
    let mut stopping = new_stopping(None);
    // lockrun could not run until past the deadline: no SIGTERM went out.
    tokio::time::advance(ms(5000)).await;
    stopping.enforce_deadline(&noted, &lease);
    stopping.enforce_deadline(&noted, &lease);
    assert_eq!(noted.take(), [(Signal::SIGKILL, true)]);
    assert_eq!(stopping.reason, Some(Stop::Lost(Loss::Lapsed)));
    assert_eq!(stopping.next_wake(lease.deadline()), None);
}

#[tokio::test(start_paused = true)]
async fn a_forwarded_signal_goes_to_the_group_and_leaves_lockruns_own_stop_to_come() {
    let t0 = BootInstant::now();
    let lease = Lease::new(t0 + ms(2968));
    let noted = Noted::default();
    let mut stopping = new_stopping(Some(t0 + ms(1000)));
    stopping.forward(&noted, Signal::SIGTERM);
    assert!(stopping.asked);
    stopping.forward(&noted, Signal::SIGINT);
    stopping.forward(&noted, Signal::SIGHUP);
    assert_eq!(
        noted.take(),
        [
            (Signal::SIGTERM, false),
            (Signal::SIGINT, false),
            (Signal::SIGHUP, false)
        ]
    );
    // The command decides how long it takes: no SIGKILL of lockrun's own...
    assert_eq!((stopping.reason, stopping.kill_at), (None, None));
    // ...until --timeout passes.
    tokio::time::advance(ms(1000)).await;
    stopping.on_wake(&noted, &lease);
    assert_eq!(noted.take(), [(Signal::SIGTERM, true)]);
    assert_eq!(stopping.reason, Some(Stop::TimedOut));
    stopping.forward(&noted, Signal::SIGTERM);
    assert_eq!(noted.take(), [(Signal::SIGTERM, false)]);
}
