//! A run's steps against a Redis that is not there.

use super::*;
use crate::lease::Timing;
use crate::lock::Role;
use crate::redis_conn::Target;

/// A lock on a server that is not there: every call fails at once.
fn unreachable_lock() -> Lock {
    let target =
        Target::parse("unix:///nonexistent/lockrun-test.sock", None).expect("a unix socket URL");
    let servers = Servers::One(Box::new(target));
    let role = Role {
        token: Token::default(),
        holding: Holding::ALONE,
        acks: crate::lock::ReplicaAcks::Count(0),
        may_wait: false,
    };
    Lock::new(
        &servers,
        Timing {
            ttl: Duration::from_secs(30),
            renew_every: Duration::from_secs(10),
            redis_timeout: Duration::from_secs(1),
            kill_grace: Duration::from_secs(2),
        },
        Keys::new("lockrun", "job"),
        &role,
    )
}

#[tokio::test]
async fn a_command_not_started_says_the_lock_could_not_be_released_and_when_it_expires() {
    let mut lock = unreachable_lock();
    let err = not_started("nope".into(), SpawnError::NotFound, &mut lock).await;
    assert_eq!(err.exit_code(), exit_code::NOT_FOUND);
    let said = err.to_string();
    assert!(
        said.starts_with(
            "nope: command not found; could not release job, it will expire within 30s: "
        ),
        "{said}"
    );
}
