//! The acquisition rules that need no server.

use super::*;

#[test]
fn a_quorum_does_not_queue_and_one_server_does() {
    let timing = Timing {
        ttl: Duration::from_secs(30),
        renew_every: Duration::from_secs(10),
        redis_timeout: Duration::from_secs(2),
        kill_grace: Duration::from_secs(5),
    };
    let wait = Mode::Wait {
        listening: true,
        supersede: false,
        refresh: Duration::from_secs(10),
    };
    let one = Rules::new(1, timing, wait);
    assert_eq!(one.mode, wait);
    assert_eq!(one.min_uptime, None);
    assert!(!one.raise_fences && !one.give_back_short);
    let five = Rules::new(5, timing, wait);
    assert_eq!(five.mode, Mode::Once);
    assert_eq!(five.min_uptime, Some(timing.ttl + timing.drift()));
    assert!(five.raise_fences && five.give_back_short);
}

#[test]
fn the_most_telling_answer_shows_a_holder() {
    let busy = |held| HoldersAndWaiters {
        held,
        ..HoldersAndWaiters::unknown()
    };
    let grant = Attempt::Acquired(Grant {
        fence: 1,
        sent: BootInstant::now(),
        slot: None,
    });
    let found = most_telling(vec![
        Attempt::Busy(busy(false)),
        grant,
        Attempt::Busy(busy(true)),
    ]);
    assert!(
        matches!(found, Attempt::Busy(HoldersAndWaiters { held: true, .. })),
        "{found:?}"
    );
    let found = most_telling(vec![Attempt::Acquired(Grant {
        fence: 1,
        sent: BootInstant::now(),
        slot: None,
    })]);
    assert!(matches!(found, Attempt::Busy(_)), "{found:?}");
}
