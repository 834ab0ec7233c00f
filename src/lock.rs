//! A lock held on a set of Redis servers: one server (or the primary that
//! Sentinel names, or a cluster) is a quorum of one; `--redis` given three or
//! more times makes a quorum of independent servers (Redlock). Every
//! operation asks all the servers at once and counts their answers by one
//! majority rule (`tally`); a run's own operations go on as soon as the
//! answers decide, without the slowest member. Where a quorum must act
//! differently, `Rules` says so, in one place, with the reason.
//!
//! The protocol itself is a set of atomic Lua scripts (`lock/scripts/`)
//! that touch a lock's keys only while they hold the caller's token;
//! `server` sends them to one server, each with its call and its reply
//! declared in its own module of `scripts`.

mod attempt;
mod error;
mod history;
mod keys;
mod records;
mod role;
mod scripts;
mod server;
mod status;
mod tally;
mod wake;

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

pub(crate) use self::attempt::{Attempt, Grant, Mode};
pub(crate) use self::error::LockError;
pub(crate) use self::history::{merge as merge_histories, Recorded, Run, ToRecord};
pub(crate) use self::keys::{Keys, Token};
pub(crate) use self::records::{
    is_gone_from_here, DoneRecord, Holder, HoldersAndWaiters, Requester, Waiter,
};
pub(crate) use self::role::{Holding, ReplicaAcks, Role};
pub(crate) use self::scripts::Released;
pub(crate) use self::status::{Occupancy, Status, View, Views};
#[cfg(test)]
pub(crate) use self::wake::SubscriptionRefused;
pub(crate) use self::wake::{Wake, Wakes};
#[cfg(test)]
pub(crate) use self::{
    error::{Foreign, NoMajority},
    keys::Part,
};

use self::attempt::most_telling;
use self::server::Server;
use self::tally::Tally;
use crate::clock::BootInstant;
use crate::lease::Timing;
use crate::redis_conn::Target;

/// Where a lock is held.
#[derive(Clone, Debug)]
pub(crate) enum Servers {
    /// One server, Sentinel service or cluster.
    One(Box<Target>),
    /// Three or more independent servers, a majority of which must agree.
    Quorum(Vec<Target>),
}

impl Servers {
    pub(crate) fn targets(&self) -> &[Target] {
        match self {
            Servers::One(target) => std::slice::from_ref(&**target),
            Servers::Quorum(targets) => targets,
        }
    }

    pub(crate) fn targets_mut(&mut self) -> &mut [Target] {
        match self {
            Servers::One(target) => std::slice::from_mut(&mut **target),
            Servers::Quorum(targets) => targets,
        }
    }
}

/// What subscribing to a waiting run's wake-up messages gave.
pub(crate) enum Subscription {
    Wakes(Wakes),
    /// Redis refused or did not answer: the run polls instead.
    Failed(LockError),
    /// A quorum does not queue, so nobody sends its runs any message.
    NoMessages,
}

/// One acquisition attempt: what it found, and every server it could not
/// give back what it may have taken there.
#[derive(Debug)]
pub(crate) struct AttemptResult {
    pub(crate) outcome: Result<Attempt, LockError>,
    pub(crate) not_given_back: Vec<NotGivenBack>,
}

/// A server that could not be given back what an attempt may have taken
/// there (a grant short of a majority, a place in line): until that runs
/// out, within one ttl, it may hold up other runs.
#[derive(Debug)]
pub(crate) struct NotGivenBack {
    /// The server, as messages show it (no credentials).
    pub(crate) server: String,
    pub(crate) cause: LockError,
}

/// What a renewal found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// The lease runs for another ttl, counted from the send.
    Extended,
    /// The lease no longer holds this run's token (on a quorum: on so many
    /// members that no majority can renew it again): it expired, or someone
    /// removed or took the lock.
    Lost,
}

/// What `release --force` removed.
#[derive(Debug, Default)]
pub(crate) struct Removed {
    /// The holder records removed, each with its token; none when the lock
    /// was free.
    pub(crate) holders: Vec<Holder>,
    /// Whether a `--once-per` success was cleared, so that the job runs
    /// again this period.
    pub(crate) done_cleared: bool,
}

/// How an acquisition on a quorum differs from one on one server. This is
/// the only place where it does.
struct Rules {
    mode: Mode,
    /// A server up for less than this does not vote.
    min_uptime: Option<Duration>,
    raise_fences: bool,
    /// Whether an attempt that did not get a majority gives back at once
    /// whatever it may have got.
    give_back_short: bool,
}

impl Rules {
    fn new(servers: usize, timing: Timing, mode: Mode) -> Self {
        if servers == 1 {
            return Rules {
                mode,
                min_uptime: None,
                raise_fences: false,
                give_back_short: false,
            };
        }
        Rules {
            // Each member orders its line by its own arrivals, so runs first
            // in line on different members could block each other's
            // majority for good: a quorum run does not queue, it tries again
            // after a jittered pause (`wait`).
            mode: Mode::Once,
            // A member that restarted less than one ttl ago may have lost a
            // lease it granted to another run, which still counts it in its
            // majority (Redlock's delayed restart). One server that restarts
            // takes no one's majority with it, and its fencing counter
            // starts from server time, so it keeps growing.
            min_uptime: Some(timing.ttl + timing.drift()),
            // Each member hands out its own next token; the run takes the
            // highest and raises every member to it, so that any later
            // majority, which shares a member with this one, hands out a
            // higher one. One server's token is its counter already.
            raise_fences: true,
            // A grant from less than a majority holds up every other run:
            // it is given back at once, on the members that did not answer
            // too (their grant may only be slow). One server keeps what it
            // has: its place in line, or a lease whose reply was lost, which
            // the next attempt finds is its own.
            give_back_short: true,
        }
    }
}

/// One run's handle on a lock, on every server that holds it.
pub(crate) struct Lock {
    keys: Keys,
    /// One, or three and more.
    servers: Vec<Server>,
    /// Fixed for the run: every attempt's ttl and validity rule, and the
    /// limit on each call.
    timing: Timing,
}

impl Lock {
    /// A handle on lock `keys` for `role`, with the run's `timing`; each
    /// call is limited to its `redis_timeout`. Nothing is sent yet.
    pub(crate) fn new(servers: &Servers, timing: Timing, keys: Keys, role: &Role) -> Self {
        // Whether this run listens for wake-up messages, decided here only:
        // a run that may wait, on one server. A quorum does not queue, so
        // nobody sends it any (`subscribe_wakes`).
        let listens = role.may_wait && matches!(servers, Servers::One(_));
        Lock {
            servers: servers
                .targets()
                .iter()
                .map(|target| Server::new(target.clone(), timing, keys.clone(), role, listens))
                .collect(),
            keys,
            timing,
        }
    }

    /// The operator's handle, to look at a lock or remove it whoever holds
    /// it: it holds no token of its own.
    pub(crate) fn for_operator(servers: &Servers, timeout: Duration, keys: Keys) -> Self {
        // It takes and renews no lease: only the call limit matters.
        let timing = Timing {
            ttl: Duration::ZERO,
            renew_every: Duration::ZERO,
            redis_timeout: timeout,
            kill_grace: Duration::ZERO,
        };
        Lock::new(servers, timing, keys, &Role::operator())
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The run's timing, fixed when the handle was made.
    pub(crate) fn timing(&self) -> Timing {
        self.timing
    }

    /// Whether `--replica-acks all` found no replica to acknowledge the
    /// lease just acquired, on any of its servers.
    pub(crate) fn unprotected(&self) -> bool {
        self.servers.iter().any(Server::unprotected)
    }

    /// Whether a server found unprotected does not know WAIT, rather than
    /// having no replica connected.
    pub(crate) fn lacks_wait(&self) -> bool {
        self.servers
            .iter()
            .any(|server| server.unprotected() && server.lacks_wait())
    }

    /// `try_acquire`, noting in `not_given_back` each server that could not
    /// be given back what the attempt may have taken there.
    async fn attempt(
        &mut self,
        requester: &Requester,
        mode: Mode,
        not_given_back: &mut Vec<NotGivenBack>,
    ) -> Result<Attempt, LockError> {
        let timing = self.timing;
        let rules = Rules::new(self.servers.len(), timing, mode);
        let sent = BootInstant::now();
        let granted = |attempt: &Attempt| match attempt {
            Attempt::Acquired(grant) => Some(grant.fence),
            _ => None,
        };
        let is_done = |attempt: &Attempt| matches!(attempt, Attempt::Done(_));
        let tally = ask(
            &mut self.servers,
            |s| s.acquire(requester, rules.mode, rules.min_uptime),
            Until::Settled(&|tally: &Tally<Attempt>| {
                tally.count(is_done) > 0 || tally.decided(|a| granted(a).is_some())
            }),
        )
        .await;
        // A success is recorded only by a run that held a majority and is
        // recorded on every member of it that still held its lease (the
        // release counts a majority of those): any later majority shares a
        // member with it, so one member that says "done" is enough to skip.
        // A member's record is never a guess (only a success writes one), so
        // a quorum does not wait for a majority of them. One server is the
        // same rule with one member.
        if let Some(done) = tally.answers().find_map(|a| match a {
            Attempt::Done(done) => Some(done.clone()),
            _ => None,
        }) {
            self.give_back(not_given_back).await;
            return Ok(Attempt::Done(done));
        }
        // The highest token among the grants counted. Every earlier holder's
        // majority shares a member with the granting majority counted here,
        // whose token is above that holder's: a grant that comes later would
        // add nothing.
        if tally.is_majority(tally.count(|a| granted(a).is_some())) {
            let fence = tally.answers().filter_map(granted).max().unwrap_or(0);
            // Slots are refused on a quorum (config), so only one server
            // hands out a slot.
            let slot = tally.answers().find_map(|a| match a {
                Attempt::Acquired(grant) => grant.slot,
                _ => None,
            });
            if rules.raise_fences {
                if let Err(err) = self.raise_fences(fence).await {
                    self.give_back(not_given_back).await;
                    return Err(err);
                }
            }
            if timing.deadline_after(sent).remaining() > timing.renew_every + timing.kill_grace {
                return Ok(Attempt::Acquired(Grant { fence, sent, slot }));
            }
            self.give_back(not_given_back).await;
        } else if rules.give_back_short {
            self.give_back(not_given_back).await;
        }
        if let Some(foreign) = tally.foreign() {
            return Err(LockError::Foreign(foreign.clone()));
        }
        Ok(most_telling(tally.of_a_majority()?))
    }

    /// `abandon`, noting in `not_given_back` each server where it failed.
    async fn give_back(&mut self, not_given_back: &mut Vec<NotGivenBack>) {
        // A member that has not answered yet is said too: the release is on
        // its way, but may not follow the grant on the same connection.
        let tally = ask(&mut self.servers, Server::abandon, Until::Majority).await;
        let failed = self
            .servers
            .iter()
            .zip(tally.results())
            .filter_map(|(server, result)| {
                let cause = result.as_ref().err()?.clone();
                let server = server.target().to_string();
                Some(NotGivenBack { server, cause })
            });
        not_given_back.extend(failed);
    }

    /// The second phase of fencing: every member's counter raised to at
    /// least `fence`, which a majority must confirm.
    async fn raise_fences(&mut self, fence: u64) -> Result<(), LockError> {
        let raised = ask(&mut self.servers, |s| s.raise_fence(fence), Until::Majority).await;
        raised.of_a_majority().map(drop)
    }

    /// Extends the lease to its ttl from now, on every server at once:
    /// `Extended` when a majority renewed; `Lost` when so many lost our
    /// token that no majority can ever renew again; otherwise an error, to
    /// retry while time is left. The deadline counts from the send.
    pub(crate) async fn renew(&mut self) -> Result<Renewal, LockError> {
        let extended = |renewal: &Renewal| *renewal == Renewal::Extended;
        let tally = ask(
            &mut self.servers,
            Server::renew,
            Until::Settled(&|tally: &Tally<Renewal>| tally.decided(extended)),
        )
        .await;
        let yes = tally.count(|renewal| *renewal == Renewal::Extended);
        let gone = tally.count(|renewal| *renewal == Renewal::Lost);
        if tally.is_majority(yes) {
            Ok(Renewal::Extended)
        } else if !tally.is_majority(tally.of() - gone) {
            Ok(Renewal::Lost)
        } else {
            let also = (gone > 0).then(|| format!("{gone} no longer hold this run's token"));
            Err(tally.short_of_majority(yes, also))
        }
    }

    /// Makes the release's script ahead of the release
    /// (`scripts::prepare_release`).
    pub(crate) fn prepare_release() {
        scripts::prepare_release();
    }

    /// Compare-and-delete (or keep for `keep_for`) on every server at once,
    /// those that said no or did not answer included; with `done_for`, the
    /// job is done for that period (`--once-per`) where the lease is still
    /// ours. An error when fewer than a majority answered; `NotOurs` when
    /// fewer than a majority still held our token (and so wrote the done
    /// record).
    pub(crate) async fn release(
        &mut self,
        keep_for: Option<Duration>,
        done_for: Option<Duration>,
        record: Option<&ToRecord>,
    ) -> Result<Released, LockError> {
        let ours = |released: &Released| *released != Released::NotOurs;
        let tally = ask(
            &mut self.servers,
            |s| s.release(keep_for, done_for, record),
            Until::Settled(&|tally: &Tally<Released>| tally.decided(ours)),
        )
        .await;
        let ours = tally.count(ours);
        let kept = tally.count(|r| *r == Released::Kept) > 0;
        let majority_ours = tally.is_majority(ours);
        tally.of_a_majority()?;
        Ok(match (majority_ours, kept) {
            (false, _) => Released::NotOurs,
            (true, true) => Released::Kept,
            (true, false) => Released::Deleted,
        })
    }

    /// The refusal that kept the last release from telling the runs in line
    /// on some server, once; that release was done all the same.
    pub(crate) fn take_unheard(&mut self) -> Option<LockError> {
        self.servers
            .iter_mut()
            .find_map(Server::take_unheard)
            .map(LockError::from)
    }

    /// Gives back, on every server at once, whatever a failed or given-up
    /// attempt may have left there.
    pub(crate) async fn abandon(&mut self) -> Result<(), LockError> {
        let tally = ask(&mut self.servers, Server::abandon, Until::Majority).await;
        tally.first_failure()
    }

    /// Every server's view of the lock; an error when fewer than a majority
    /// could be asked.
    pub(crate) async fn status(&mut self) -> Result<Views, LockError> {
        let seen = ask(&mut self.servers, Server::status, Until::All).await;
        let views = self
            .servers
            .iter()
            .zip(seen.results())
            .map(|(server, seen)| View {
                server: server.target().to_string(),
                seen: seen.clone().map_err(|err| err.to_string()),
            });
        let views = Views(views.collect());
        seen.of_a_majority()?;
        Ok(views)
    }

    /// The names of the locks under `prefix` whose name matches `glob` (Redis
    /// glob syntax), sorted: every name that any server of a majority has a
    /// key of, so that a lock held on some members only is found too. An
    /// error when fewer than a majority could be asked.
    pub(crate) async fn names(
        &mut self,
        prefix: &str,
        glob: &str,
    ) -> Result<Vec<String>, LockError> {
        let pattern = keys::scan_pattern(prefix, glob);
        let found = ask(&mut self.servers, |s| s.scan(&pattern), Until::All).await;
        let found = found.of_a_majority()?;
        let names: BTreeSet<&str> = found
            .iter()
            .flatten()
            .filter_map(|key| keys::name_of(prefix, key))
            .collect();
        Ok(names.into_iter().map(str::to_owned).collect())
    }

    /// Points the operator's handle at lock `keys`, on the connections it
    /// has: `lockrun list` reads one lock after another.
    pub(crate) fn look_at(&mut self, keys: Keys) {
        for server in &mut self.servers {
            server.look_at(keys.clone());
        }
        self.keys = keys;
    }

    /// Removes the lock on every server, whoever holds it, handing what it
    /// frees to the first waiters, and clears any recorded success
    /// (`--once-per`); with `only`, removes only the holder with that token.
    /// What every server removed, together; an error, having removed it
    /// where it could, when fewer than a majority could be asked.
    pub(crate) async fn force_release(&mut self, only: Option<&str>) -> Result<Removed, LockError> {
        let removed = ask(&mut self.servers, |s| s.force_release(only), Until::All).await;
        let removed = removed.of_a_majority()?;
        Ok(Removed {
            done_cleared: removed.iter().any(|r| r.done_cleared),
            holders: removed.into_iter().flat_map(|r| r.holders).collect(),
        })
    }
}

/// What the wait loop asks of a lock: `Lock` is the one, and its waiting
/// operations are defined here; the loop's tests script another under
/// tokio's paused clock.
pub(crate) trait Contended {
    /// The run's timing, which the lock holds.
    fn timing(&self) -> Timing;

    /// The lock's name in Redis, for verbose lines.
    fn redis_key(&self) -> &str;

    /// The name given to `--key`, for systemd's status.
    fn name(&self) -> &str;

    /// Who answers for the lock, for the line that says it answers again.
    fn servers(&self) -> &'static str;

    /// Connects to every server now, allowing `within`, so that a lock that
    /// cannot be reached is reported before anything else happens.
    async fn connect(&mut self, within: Duration) -> Result<(), LockError>;

    /// This run's wake-up messages while it waits in line; `NoMessages`
    /// when nobody sends this lock's waiters any.
    async fn subscribe_wakes(&mut self) -> Subscription;

    /// One attempt on every server at once. The lock is acquired when a
    /// majority granted it and the lease, counted from the send less the
    /// drift allowance, still has more than a renewal period plus the kill
    /// grace left.
    async fn try_acquire(&mut self, requester: &Requester, mode: Mode) -> AttemptResult;

    /// The grant a wake-up message announced, if it can be used as it is
    /// (`Server::handed_over` decides); the lease is this run's either way.
    fn handed_over(&mut self, fence: u64, slot: Option<u32>) -> Option<Grant>;
}

impl Contended for Lock {
    fn timing(&self) -> Timing {
        self.timing
    }

    fn redis_key(&self) -> &str {
        &self.keys.lock
    }

    fn name(&self) -> &str {
        &self.keys.name
    }

    fn servers(&self) -> &'static str {
        if self.servers.len() > 1 {
            "a majority of the Redis servers"
        } else {
            "Redis"
        }
    }

    async fn connect(&mut self, within: Duration) -> Result<(), LockError> {
        let connected = ask(&mut self.servers, |s| s.connect(within), Until::Majority).await;
        connected.of_a_majority().map(drop)
    }

    async fn subscribe_wakes(&mut self) -> Subscription {
        match self.servers.as_mut_slice() {
            [one] => match one.subscribe_wakes().await {
                Ok(wakes) => Subscription::Wakes(wakes),
                Err(err) => Subscription::Failed(err),
            },
            _ => Subscription::NoMessages,
        }
    }

    async fn try_acquire(&mut self, requester: &Requester, mode: Mode) -> AttemptResult {
        let mut not_given_back = Vec::new();
        let outcome = self.attempt(requester, mode, &mut not_given_back).await;
        AttemptResult {
            outcome,
            not_given_back,
        }
    }

    /// Only one server hands a lease over: a quorum does not queue.
    fn handed_over(&mut self, fence: u64, slot: Option<u32>) -> Option<Grant> {
        match self.servers.as_mut_slice() {
            [one] => one.handed_over(fence, slot),
            _ => None,
        }
    }
}

/// How long `ask` waits for the servers' answers.
enum Until<'s, T> {
    /// Every server's answer or failure: the operator's look at the lock
    /// (`status`, `list`) shows each member, and `release --force` is told
    /// what each removed.
    All,
    /// A majority's answers, or the failures that make one impossible. What
    /// the others were asked is on its way to them all the same.
    Majority,
    /// Until the answers so far decide.
    Settled(&'s dyn Fn(&Tally<T>) -> bool),
}

/// The one fan-out: asks every server at once, each within its own time
/// limit, and tallies their answers in the servers' order, waiting for them
/// as `until` says. A run's own calls do not wait for a member that has
/// not answered once the others decide: a stalled member (a frozen VM, a
/// cut link) would otherwise cost every call its whole time limit. What was
/// sent to it stays queued on its connection, in order, so a late acquire
/// there is followed by the release sent after it.
async fn ask<'a, T, Asked>(
    servers: &'a mut [Server],
    question: impl FnMut(&'a mut Server) -> Asked,
    until: Until<'_, T>,
) -> Tally<T>
where
    Asked: Future<Output = Result<T, LockError>> + 'a,
{
    let unanswered = servers
        .iter()
        .map(|server| LockError::Unanswered {
            server: server.target().to_string(),
        })
        .collect();
    let asked = servers.iter_mut().map(question);
    match until {
        Until::All => Tally::gather(asked, unanswered, |_| false).await,
        Until::Majority => Tally::gather(asked, unanswered, |t| t.decided(|_| true)).await,
        Until::Settled(settled) => Tally::gather(asked, unanswered, settled).await,
    }
}

#[cfg(test)]
mod tests;
