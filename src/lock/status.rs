//! What `lockrun status` reads: each server's view of a lock, and what a
//! majority of them agree on. One server is a quorum of one, whose view is
//! the lock's.

use std::time::Duration;

use super::history::Recorded;
use super::records::{DoneRecord, Holder, Waiter};
use super::tally::majority;

/// Whether a lock is held, and for how much longer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Occupancy {
    #[default]
    Free,
    /// Held, with this much lease time left.
    Leased(Duration),
    /// Held by a key without an expiry (set by hand).
    NoExpiry,
}

/// One server's view of a lock; its default shows it free, with nobody in
/// line.
#[derive(Clone, Debug, Default)]
pub(crate) struct Status {
    pub(crate) occupancy: Occupancy,
    pub(crate) holder: Option<Holder>,
    /// Server time, microseconds since the epoch.
    pub(crate) now_us: u64,
    /// The node that answered (`host:port` or a socket path), when known:
    /// behind Sentinel the primary, in a cluster the node owning the slot.
    pub(crate) node: Option<String>,
    /// The last fencing token handed out for this name, if any.
    pub(crate) last_fence: Option<u64>,
    /// The runs waiting in line, first come first.
    pub(crate) waiters: Vec<Waiter>,
    /// The success a `--once-per` run recorded for this period.
    pub(crate) done: Option<DoneRecord>,
    /// The runs holding the lock together (`--slots`, `--shared`), each with
    /// its token and time left; their lease is not `occupancy`.
    pub(crate) together: Vec<Holder>,
    /// The runs recorded (`--history`), newest first.
    pub(crate) history: Vec<Recorded>,
}

impl Status {
    fn is_held(&self) -> bool {
        self.occupancy != Occupancy::Free || !self.together.is_empty()
    }

    /// The number of slots that the holders and waiters agreed on: 1 for a
    /// run alone or shared; `None` when nobody holds or waits.
    pub(crate) fn slots(&self) -> Option<u32> {
        if self.occupancy != Occupancy::Free {
            return Some(1);
        }
        let holder = self.together.first().map(|h| h.slots);
        let waiter = self.waiters.first().map(|w| w.slots);
        holder.or(waiter).map(|slots| slots.unwrap_or(1))
    }

    /// Whether `self` and `other` show the same acquisition; two holders
    /// that left no record count as the same unknown one.
    fn same_holder(&self, other: &Status) -> bool {
        match (&self.holder, &other.holder) {
            (Some(a), Some(b)) => a.same_acquisition(b),
            (None, None) => true,
            _ => false,
        }
    }
}

/// One server's view of a lock, or why it could not be asked.
#[derive(Debug)]
pub(crate) struct View {
    /// The server, as messages show it (no credentials).
    pub(crate) server: String,
    pub(crate) seen: Result<Status, String>,
}

/// Every server's view of a lock, in the order given.
#[derive(Debug)]
pub(crate) struct Views(pub(crate) Vec<View>);

impl Views {
    pub(crate) fn of(&self) -> usize {
        self.0.len()
    }

    fn answered(&self) -> impl Iterator<Item = &Status> {
        self.0.iter().filter_map(|view| view.seen.as_ref().ok())
    }

    /// The view a majority of servers agree holds the lock, if any.
    pub(crate) fn held(&self) -> Option<&Status> {
        self.answered()
            .filter(|view| view.is_held())
            .find(|view| self.agreeing(view).count() >= majority(self.of()))
    }

    /// Lease time left on the servers that agree with `held`: the least.
    pub(crate) fn left(&self, held: &Status) -> Option<Duration> {
        self.agreeing(held)
            .filter_map(|view| match view.occupancy {
                Occupancy::Leased(left) => Some(left),
                Occupancy::Free | Occupancy::NoExpiry => None,
            })
            .min()
    }

    fn agreeing<'a>(&'a self, held: &'a Status) -> impl Iterator<Item = &'a Status> + 'a {
        self.answered()
            .filter(move |view| view.is_held() && view.same_holder(held))
    }

    /// Whether a majority agree: on a holder, or that the lock is free.
    pub(crate) fn majority_agrees(&self) -> bool {
        let free = self.answered().filter(|view| !view.is_held()).count();
        self.held().is_some() || free >= majority(self.of())
    }

    /// The success a `--once-per` run recorded whose period has not ended,
    /// as any server shows it (the latest): any one member's record makes
    /// a quorum run skip (`Lock::try_acquire`). With the server time of
    /// the view it came from.
    pub(crate) fn done(&self) -> Option<(&DoneRecord, u64)> {
        self.answered()
            .filter_map(|view| Some((view.done.as_ref()?, view.now_us)))
            .filter(|(done, now_us)| done.until_ms > now_us / 1000)
            .max_by_key(|(done, _)| done.until_ms)
    }

    /// The last fencing token any server handed out for this name.
    pub(crate) fn last_fence(&self) -> Option<u64> {
        self.answered().filter_map(|view| view.last_fence).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(holder: Option<(&str, u64)>, left_ms: u64) -> Status {
        Status {
            occupancy: match holder {
                Some(_) => Occupancy::Leased(Duration::from_millis(left_ms)),
                None => Occupancy::Free,
            },
            holder: holder.map(|(host, fence)| Holder {
                host: host.into(),
                fence,
                ..Holder::default()
            }),
            last_fence: holder.map(|(_, fence)| fence),
            ..Status::default()
        }
    }

    fn views(seen: Vec<Result<Status, String>>) -> Views {
        let server = String::new();
        let view = |seen| View {
            server: server.clone(),
            seen,
        };
        Views(seen.into_iter().map(view).collect())
    }

    #[test]
    fn one_server_is_a_quorum_of_one() {
        let one = views(vec![Ok(view(Some(("a", 7)), 900))]);
        let held = one.held().expect("held");
        assert_eq!(one.left(held), Some(Duration::from_millis(900)));
        assert!(one.majority_agrees());
        assert!(views(vec![Ok(view(None, 0))]).held().is_none());
    }

    #[test]
    fn a_majority_must_show_the_same_holder() {
        let disagreeing = views(vec![
            Ok(view(Some(("a", 7)), 900)),
            Ok(view(Some(("b", 8)), 900)),
            Ok(view(None, 0)),
        ]);
        assert!(disagreeing.held().is_none());
        assert!(!disagreeing.majority_agrees());
        assert_eq!(disagreeing.last_fence(), Some(8));

        let agreed = views(vec![
            Ok(view(Some(("a", 7)), 900)),
            Err("down".into()),
            Ok(view(Some(("a", 7)), 400)),
        ]);
        let held = agreed.held().expect("2 of 3 agree");
        assert_eq!(agreed.left(held), Some(Duration::from_millis(400)));
    }

    #[test]
    fn one_member_with_a_live_success_record_shows_it() {
        let done = |until_ms| DoneRecord {
            by: Holder {
                host: "a".into(),
                ..Holder::default()
            },
            until_ms,
        };
        let mut recorded = view(None, 0);
        recorded.now_us = 5_000_000;
        recorded.done = Some(done(9_000));
        let mut ended = view(None, 0);
        ended.now_us = 5_000_000;
        ended.done = Some(done(4_000));
        let views = self::views(vec![Ok(view(None, 0)), Ok(recorded), Err("down".into())]);
        assert_eq!(views.done().map(|(d, _)| d.until_ms), Some(9_000));
        let views = self::views(vec![Ok(ended)]);
        assert!(views.done().is_none());
    }
}
