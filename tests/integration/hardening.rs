//! Input and Redis replies that must never break the lease promise: durations
//! past any clock, keys of the wrong type, Redis loading or busy, servers that
//! are not Redis or want a password, and the order in which lockrun explains a
//! failure.

use crate::harness::*;

/// Whether the server answers a PING with the error `code`.
fn answers(redis: &Server, code: &str) -> bool {
    let reply: redis::RedisResult<String> = redis::cmd("PING").query(&mut redis.client());
    matches!(reply, Err(err) if err.code() == Some(code))
}

#[test]
fn a_duration_past_one_year_is_a_usage_error_and_nothing_runs() {
    let redis = Server::start();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let cases: [&[&str]; 8] = [
        // Wrapped to a 5 s lease in Redis while the local deadline was
        // centuries away.
        &["--ttl", "18446744073709556s616ms"],
        &["--ttl", "18446744073709551615s"],
        &["--renew-every", "584000000000y"],
        &["--redis-timeout", "584000000000y"],
        &["--kill-grace", "2y"],
        &["--wait", "500000000000y"],
        &["--timeout", "18446744073709551615s"],
        &["--min-hold", "584000000000y"],
    ];
    for args in cases {
        let run = redis.lockrun("job").args(args).touch(&ran).run();
        run.assert(
            Expect::code(64)
                .stderr_starts(format!("lockrun: {} ", args[0]))
                .stderr_has("is too long; use 1y (365.25 days) or less\n")
                .stderr_one_line()
                .context(format!("{args:?}")),
        );
        assert!(!ran.exists(), "{args:?}: the command ran");
        assert!(redis.keys().is_empty(), "{args:?}: {:?}", redis.keys());
    }

    // The bound itself is accepted.
    let run = redis
        .lockrun("job")
        .args(["--ttl", "1y", "--timeout", "1y", "--wait", "1y"])
        .touch(&ran)
        .run();
    run.assert(Expect::success());
    assert!(ran.exists(), "the command did not run");
    redis.assert_only_fence("job");
}

/// Runs `command` (a write), which stores a value of another type than
/// lockrun keeps under one of the lock's names.
fn plant(redis: &Server, command: &[&str]) {
    let mut cmd = redis::cmd(command[0]);
    for arg in &command[1..] {
        cmd.arg(*arg);
    }
    let _: () = cmd.query(&mut redis.client()).expect("plant a foreign key");
}

#[test]
fn a_lock_key_of_another_type_is_named_and_left_alone() {
    // The fence and done keys are all a free lock may have: a run that
    // finds none of the others takes the lock without looking at them
    // (acquire.lua), but not without checking these two.
    let cases: [(&[&str], &str); 7] = [
        (
            &["RPUSH", "lockrun:{job}", "a", "b"],
            "lockrun:{job} holds a list, not a lockrun lease; remove it or choose another \
             --key/--prefix",
        ),
        (
            &["SADD", "lockrun:{job}:holder", "x"],
            "lockrun:{job}:holder holds a set, not a lockrun holder record; remove it or \
             choose another --key/--prefix",
        ),
        (
            &["HSET", "lockrun:{job}:fence", "n", "1"],
            "lockrun:{job}:fence holds a hash, not a lockrun fencing counter; remove it or \
             choose another --key/--prefix",
        ),
        (
            &["SET", "lockrun:{job}:queue", "x"],
            "lockrun:{job}:queue holds a string, not a lockrun wait queue; remove it or choose \
             another --key/--prefix",
        ),
        (
            &["RPUSH", "lockrun:{job}:waiters", "x"],
            "lockrun:{job}:waiters holds a list, not the records of a lockrun wait queue; \
             remove it or choose another --key/--prefix",
        ),
        (
            &["RPUSH", "lockrun:{job}:done", "x"],
            "lockrun:{job}:done holds a list, not a lockrun --once-per success record; remove \
             it or choose another --key/--prefix",
        ),
        (
            &["SET", "lockrun:{job}:leases", "x"],
            "lockrun:{job}:leases holds a string, not the leases of a lockrun lock held \
             together; remove it or choose another --key/--prefix",
        ),
    ];
    for (planted, want) in cases {
        let redis = Server::start();
        plant(&redis, planted);
        let before = redis.keys();
        let dir = scratch();
        let ran = dir.path().join("ran");

        // Neither a busy lock (75) nor one worth waiting for.
        for wait in [&[][..], &["--wait", "forever"]] {
            let run = redis.lockrun("job").args(wait).touch(&ran).run();
            run.assert(
                Expect::code(69)
                    .stderr(format!("lockrun: {want}\n"))
                    .context(format!("{planted:?}")),
            );
            assert!(!ran.exists(), "{planted:?}: the command ran");
            assert_eq!(redis.keys(), before, "{planted:?}: Redis was changed");
        }

        let status = redis.lockrun("job").subcommand("status").run();
        status.assert(
            Expect::code(69)
                .stderr(format!("lockrun: {want}\n"))
                .context(format!("{planted:?}")),
        );

        // A forced release may hand the lock to a waiter, with a new
        // fencing token: every key counts.
        let release = redis
            .lockrun("job")
            .subcommand("release")
            .arg("--force")
            .run();
        release.assert(
            Expect::code(69)
                .stderr(format!("lockrun: {want}\n"))
                .context(format!("{planted:?}")),
        );
        assert_eq!(redis.keys(), before, "{planted:?}: Redis was changed");
    }
}

#[test]
fn a_holder_gives_back_its_lease_and_leaves_a_queue_key_of_another_type_alone() {
    let redis = Server::start();
    let mut holder = redis.lockrun("job").hold();
    // Someone else's data appears where the lock's line would be.
    plant(&redis, &["SET", "lockrun:{job}:queue", "theirs"]);
    holder.go();
    holder.end().assert(Expect::success());
    assert!(!redis.is_locked("job"), "the lease was not given back");
    assert_eq!(
        redis.keys(),
        [
            "lockrun:{job}:fence",
            "lockrun:{job}:history",
            "lockrun:{job}:queue"
        ],
        "the holder record goes, the foreign key stays"
    );
}

#[test]
fn a_holder_gives_back_its_lease_and_hands_it_on_after_the_scripts_were_flushed() {
    // The release goes behind a TIME (lock/scripts.rs): a server that
    // forgot the script answers that pair NOSCRIPT, and lockrun sends the
    // script itself.
    let redis = Server::start();
    let mut holder = redis.lockrun("job").hold();
    let dir = scratch();
    let ran = dir.path().join("ran");
    let mut waiter = redis
        .lockrun("job")
        .args(["--wait", "20s"])
        .touch(&ran)
        .spawn();
    assert!(
        eventually(PATIENCE, || redis.listening_waiters("job") == 1),
        "the waiter never listened in line"
    );
    let _: () = redis
        .query(redis::cmd("SCRIPT").arg("FLUSH"))
        .expect("SCRIPT FLUSH");
    holder.go();
    holder.end().assert(Expect::success());
    waiter.exits(Expect::success());
    assert!(ran.exists(), "the waiter's command did not run");
    assert!(!redis.is_locked("job"), "the lease was not given back");
}

#[test]
fn a_waiter_waits_while_redis_loads_its_snapshot_and_a_run_without_wait_says_so() {
    // 20,000 keys read at 100 µs each keep Redis loading for a few
    // seconds; both runs below start within milliseconds of the restart.
    // Meanwhile Redis answers LOADING every 2 MiB it reads, about every
    // 2,000 of these 1 KiB values: 6.2 has no
    // loading-process-events-interval-bytes to make that shorter.
    let mut redis = Server::start_with(None, &["--key-load-delay", "100"]);
    let mut fill = redis::cmd("MSET");
    // Bytes that LZF cannot shrink, so that the snapshot holds 20 MiB.
    let mut seed = 0x2545_f491_u32;
    let value: Vec<u8> = (0..1024)
        .map(|_| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (seed >> 16) as u8
        })
        .collect();
    for n in 0..20_000 {
        fill.arg(format!("filler:{n}")).arg(&value);
    }
    let mut client = redis.client();
    let _: () = fill.query(&mut client).expect("MSET");
    let _: () = redis::cmd("SAVE").query(&mut client).expect("SAVE");
    redis.restart_from_snapshot();
    assert!(
        eventually(PATIENCE, || answers(&redis, "LOADING")),
        "Redis never answered LOADING"
    );
    let dir = scratch();
    let ran = dir.path().join("ran");

    let run = redis.lockrun("job").touch(&ran).run();
    let loading = format!(
        "lockrun: Redis at {} is loading its data set into memory (LOADING); it cannot serve \
         the lock yet",
        redis.url()
    );
    run.assert(Expect::code(69).stderr(format!("{loading}\n")));
    assert!(!ran.exists(), "the command ran without the lock");

    let waiter = redis
        .lockrun("job")
        .args(["--wait", "30s"])
        .touch(&ran)
        .run();
    waiter.assert(Expect::success().stderr(format!("{loading}; still waiting\n")));
    assert!(ran.exists(), "the waiter never ran its command");
    assert!(!answers(&redis, "LOADING") && !redis.is_locked("job"));
}

#[test]
fn a_waiter_waits_while_a_script_keeps_redis_busy() {
    let redis = Server::start_with(None, &["--lua-time-limit", "50"]);
    let script = {
        let mut client = redis.client();
        std::thread::spawn(move || {
            // Runs until SCRIPT KILL; every other client gets BUSY meanwhile.
            let _: redis::RedisResult<()> = redis::cmd("EVAL")
                .arg("while true do end")
                .arg(0)
                .query(&mut client);
        })
    };
    assert!(
        eventually(PATIENCE, || answers(&redis, "BUSY")),
        "Redis never answered BUSY"
    );
    let dir = scratch();
    let ran = dir.path().join("ran");

    let run = redis.lockrun("job").touch(&ran).run();
    run.assert(Expect::code(69).stderr(format!(
        "lockrun: Redis at {} is busy running a script or function (BUSY) and serves nothing \
         else until it ends or is killed; it cannot serve the lock yet\n",
        redis.url()
    )));
    assert!(!ran.exists(), "the command ran without the lock");

    let log = dir.path().join("stderr");
    let mut waiter = redis
        .lockrun("job")
        .args(["--wait", "30s"])
        .touch(&ran)
        .stderr(log_file(&log))
        .spawn();
    assert!(
        wait_for_text(&log, "(BUSY)"),
        "the waiter never said Redis is busy"
    );
    assert!(waiter.running(), "the waiter gave up on a busy Redis");
    let _: () = redis::cmd("SCRIPT")
        .arg("KILL")
        .query(&mut redis.client())
        .expect("SCRIPT KILL");
    script.join().expect("the script's client");
    waiter.exits_saying(Expect::success(), || read_log(&log));
    assert!(ran.exists(), "the waiter never ran its command");
    assert!(!redis.is_locked("job"));
}

#[test]
fn a_server_that_is_not_redis_is_named_as_such() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    // Answers every connection as a web server would; lives as long as the
    // test binary.
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut request = [0u8; 1024];
            let _ = std::io::Read::read(&mut conn, &mut request);
            let _ = std::io::Write::write_all(
                &mut conn,
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let url = format!("redis://127.0.0.1:{port}");
    let dir = scratch();
    let ran = dir.path().join("ran");

    let run = Lockrun::via(&url).key("job").touch(&ran).run();
    run.assert(Expect::code(69).stderr(format!(
        "lockrun: the server at {url} does not speak the Redis protocol; check --redis (or \
         LOCKRUN_REDIS_URL)\n"
    )));
    assert!(!ran.exists(), "the command ran without the lock");
}

#[test]
fn a_server_that_wants_a_password_says_so() {
    let redis = Server::start_with(None, &["--requirepass", "s3cret"]);
    let want = format!(
        "lockrun: Redis at {} requires a password; give it in LOCKRUN_REDIS_PASSWORD, \
         --redis-password-file or the URL\n",
        redis.url()
    );
    let run = redis.lockrun("job").command(["true"]).run();
    run.assert(Expect::code(69).stderr(&want));
    let status = redis.lockrun("job").subcommand("status").run();
    status.assert(Expect::code(69).stderr(want));
}

#[test]
fn an_unanswered_acquire_says_how_long_lockrun_waited_in_all() {
    let redis = Server::start();
    redis.pause();
    let began = std::time::Instant::now();
    let run = redis
        .lockrun("job")
        .args(["--redis-timeout", "1s"])
        .command(["true"])
        .run();
    let took = began.elapsed();
    redis.resume();
    // One timeout for the acquire, one for giving back what it may have
    // taken: the line accounts for both, so for all the time that passed.
    run.assert(
        Expect::code(69)
            .stderr_starts(format!("lockrun: cannot reach Redis at {}", redis.url()))
            .stderr_has(
                ": it took the connection but sent no answer within 1s, nor within 1s more to \
                 giving back a lock that call may have taken; the server is up but stuck",
            )
            .stderr_one_line(),
    );
    assert!(
        took >= std::time::Duration::from_secs(2),
        "the line claims longer than the run took: {took:?}"
    );
}

#[test]
fn when_redis_dies_mid_run_the_lost_lease_is_said_before_the_failed_release() {
    let mut redis = Server::start();
    let mut holder = redis.lockrun("job").args(["--ttl", "2s"]).hold();
    redis.kill();
    // The retries before it vary with timing.
    let last = "lockrun: lost the lock job: the lease could not be renewed in time; stopped the \
                command; could not release job, it will expire within 2s: cannot reach Redis";
    holder.end().assert(
        Expect::code(76)
            .stderr_where(format!("its last line to start {last:?}"), move |text| {
                text.lines().last().unwrap_or_default().starts_with(last)
            })
            .stderr_where("no line to start \"lockrun: could not release\"", |text| {
                text.lines()
                    .all(|line| !line.starts_with("lockrun: could not release"))
            }),
    );
}
