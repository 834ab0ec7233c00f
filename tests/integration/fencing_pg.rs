//! The PostgreSQL fencing example: a stale holder's late write is rejected by
//! the database, and the newer holder's write stands.
//!
//! The database is a PostgreSQL server the test starts for itself (see
//! `PostgresServer`), or the one `LOCKRUN_TEST_DATABASE_URL` names.

use std::path::PathBuf;

use nix::sys::signal::Signal;

use crate::harness::*;

fn invoice_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/postgres-fencing/invoice.sh")
}

#[test]
fn a_stale_holders_late_write_is_rejected_by_the_database() {
    let Some(database) = PostgresServer::start() else {
        return;
    };
    let redis = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("a-ready");
    let gate = Gate::new(dir.path());
    let a_status = dir.path().join("a-status");
    // A job name of its own, so reruns and other tests never collide.
    let job = format!(
        "fencing-test-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let script = invoice_script();

    // Run A takes the lock, then stalls before its write (as a GC pause or a
    // frozen VM would) until the test lets it go.
    let a_job = format!(
        "echo $LOCKRUN_FENCING_TOKEN > {ready}; read -r _ < {go}; \
         {script}; echo $? > {status}",
        ready = ready.display(),
        go = dir.path().join("go").display(),
        script = script.display(),
        status = a_status.display(),
    );
    let mut a = redis
        .lockrun(&job)
        .args(["--ttl", "1s"])
        .command(["sh", "-c", &a_job])
        .env("DATABASE_URL", database.url())
        .env("BILLING_JOB", &job)
        .env("BILLING_WHO", "A")
        .spawn();
    let a_fence: u64 = read_when_ready(&ready).parse().expect("A's token");

    // lockrun A is paused past its lease, so it can neither renew nor stop
    // its job; the lock expires in Redis.
    a.signal(Signal::SIGSTOP);

    // Run B takes the lock and charges.
    let b = redis
        .lockrun(&job)
        .args(["--wait", "30s"])
        .command([&script])
        .env("DATABASE_URL", database.url())
        .env("BILLING_JOB", &job)
        .env("BILLING_WHO", "B")
        .run();
    b.assert(
        Expect::success()
            .stdout_starts("invoice.sh: charged fencing-test-")
            .context("B charged"),
    );

    // A's job wakes up, still believing it holds the lock, and writes late.
    gate.open();
    assert_eq!(
        read_when_ready(&a_status),
        "3",
        "A's stale write is rejected"
    );

    // lockrun A resumes, finds its lease long gone, and reports it.
    a.signal(Signal::SIGCONT);
    a.exits(Expect::code(76));

    // Only B's invoice exists, and the fence is B's token.
    let rows = database.psql(&format!(
        "select charged_by || ' ' || fence from invoices where job = '{job}' order by id"
    ));
    let (who, b_fence) = rows.split_once(' ').expect("exactly one invoice");
    assert_eq!(who, "B", "{rows}");
    let b_fence: u64 = b_fence.parse().expect("B's token");
    assert!(b_fence > a_fence, "B's token {b_fence} > A's {a_fence}");
    assert_eq!(
        database.psql(&format!(
            "select last_fence from billing_fence where job = '{job}'"
        )),
        b_fence.to_string()
    );
    database.psql(&format!(
        "delete from invoices where job = '{job}'; delete from billing_fence where job = '{job}'"
    ));
}
