//! `lockrun list`: every lock under a prefix that is held or has runs
//! waiting. The names come from `SCAN`; each lock is then read with the
//! status script, as `lockrun status` reads it, so that both show the same.

use std::fmt::Write as _;

use super::{
    done_text, holder_text, print_line, status_json, to_json, StatusJson, CALL_TIMEOUT, FREE,
};
use crate::config::ListConfig;
use crate::error::Error;
use crate::lock::{Keys, Lock};

/// `lockrun list`: 0 when it lists a lock, 1 when there is none, 69 when
/// fewer than a majority of the servers answer.
pub(crate) async fn list(config: ListConfig) -> Result<u8, Error> {
    // The handle starts on no lock in particular; `look_at` moves it from
    // one to the next on the same connections.
    let mut lock = Lock::for_operator(&config.servers, CALL_TIMEOUT, Keys::new(&config.prefix, ""));
    let names = lock.names(&config.prefix, &config.glob).await?;
    let mut listed = Vec::new();
    for name in names {
        lock.look_at(Keys::new(&config.prefix, &name));
        let views = lock.status().await?;
        let state = status_json(lock.keys(), &config.servers, &views);
        if config.all || in_use(&state) {
            listed.push(state);
        }
    }
    if config.json {
        print_line(&to_json(&listed)?);
    } else {
        for state in &listed {
            print_line(&line(state));
        }
    }
    Ok(if listed.is_empty() { FREE } else { 0 })
}

/// Held, with runs in line, with a recorded success (`--once-per`) or, in a
/// quorum, held on any member: anything but a free lock, which keeps only
/// its fencing counter (and, for a moment after its last waiter left,
/// nothing at all).
fn in_use(state: &StatusJson) -> bool {
    state.held
        || !state.waiters.is_empty()
        || state.done.is_some()
        || state.members.iter().any(|m| m.held)
}

/// The first line of `lockrun status`, then how many wait and, in a quorum,
/// what keeps the servers from one view.
fn line(state: &StatusJson) -> String {
    let mut line = holder_text(state)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    if !state.waiters.is_empty() {
        let _ = write!(line, ", {} waiting", state.waiters.len());
    }
    let held_on = state.members.iter().filter(|m| m.held).count();
    if !state.held && held_on > 0 {
        let _ = write!(
            line,
            "; held on {held_on} of {} servers",
            state.members.len()
        );
    }
    if state.majority_agrees == Some(false) {
        line += "; no majority agrees";
    }
    if let Some(done) = &state.done {
        let _ = write!(line, "; {}", done_text(done));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{MemberJson, WaiterJson};

    fn state(held: bool) -> StatusJson {
        StatusJson {
            key: "job".into(),
            redis_key: "lockrun:{job}".into(),
            held,
            ttl_left_ms: None,
            holder: None,
            last_fencing_token: Some(7),
            waiters: Vec::new(),
            server: None,
            user: None,
            redis_node: None,
            replicas_acknowledged: None,
            members: Vec::new(),
            majority_agrees: None,
            done: None,
            last_run: None,
            last_success: None,
            slots: None,
            holders: Vec::new(),
        }
    }

    fn member(held: bool) -> MemberJson {
        MemberJson {
            redis: "redis://r".into(),
            reachable: true,
            held,
            ttl_left_ms: None,
            holder: None,
            last_fencing_token: Some(7),
            error: None,
        }
    }

    #[test]
    fn a_free_lock_is_listed_only_with_waiters_or_a_member_holding_it() {
        assert!(!in_use(&state(false)));
        assert!(in_use(&state(true)));
        let mut waited = state(false);
        waited.waiters.push(WaiterJson {
            host: "h".into(),
            pid: 1,
            command: "c".into(),
            queued_at_ms: 0,
            waited_ms: 0,
            supersede: false,
            shared: false,
            slots: 1,
        });
        assert!(in_use(&waited));
        assert_eq!(line(&waited), "job: free (last fencing token 7), 1 waiting");

        let mut minority = state(false);
        minority.members = vec![member(true), member(false), member(false)];
        minority.majority_agrees = Some(true);
        assert!(in_use(&minority));
        assert_eq!(
            line(&minority),
            "job: free (last fencing token 7); held on 1 of 3 servers"
        );
    }
}
