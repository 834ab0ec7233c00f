//! `lockrun list`: every lock under a prefix that is held or waited for,
//! found with SCAN among other keys, on one server, the primary Sentinel
//! names, a cluster's primaries and a quorum.

use crate::harness::*;

/// `lockrun list` on `server` with `args`.
fn list(server: &Server, args: &[&str]) -> Ran {
    Lockrun::at(server).subcommand("list").args(args).run()
}

/// The names at the start of each line of `list`'s text output.
fn listed_names(ran: &Ran) -> Vec<String> {
    ran.stdout
        .lines()
        .map(|line| line.split(':').next().unwrap_or_default().to_owned())
        .collect()
}

fn parse_array(ran: &Ran) -> Vec<serde_json::Value> {
    let json: serde_json::Value = serde_json::from_str(ran.stdout.trim())
        .unwrap_or_else(|err| panic!("{err}: {:?}", ran.stdout));
    json.as_array().expect("a JSON array").clone()
}

/// Keys that are not lockrun's, some of them close to a lock's names, in
/// one MSET: more than one SCAN call's worth.
fn fill_with_other_keys(server: &Server) {
    let mut mset = redis::cmd("MSET");
    for n in 0..1000 {
        mset.arg(format!("other:{n}")).arg(n);
    }
    for decoy in ["lockrun:{decoy}:other", "lockrun:plain", "lockrunner:{x}"] {
        mset.arg(decoy).arg("not a lock");
    }
    let _: () = server.query(&mset).expect("MSET");
}

#[test]
fn list_shows_the_held_and_waited_for_locks_among_other_keys() {
    let redis = Server::start();
    fill_with_other_keys(&redis);
    let _alpha = redis.lockrun("alpha").hold();
    let _beta = redis.lockrun("beta").hold();
    let _gamma = redis.lockrun("gamma").hold();
    let _other_prefix = redis.lockrun("delta").prefix("team:").hold();
    let freed = redis.lockrun("free").command(["true"]).run();
    freed.assert(Expect::success());
    let _waiter = redis
        .lockrun("beta")
        .args(["--wait", "1m"])
        .command(["true"])
        .spawn();
    assert!(eventually(PATIENCE, || redis.in_line("beta") == 1));

    let ran = list(&redis, &[]);
    ran.assert(Expect::success().stdout_any());
    assert_eq!(
        listed_names(&ran),
        ["alpha", "beta", "gamma"],
        "{}",
        ran.stdout
    );
    for line in ran.stdout.lines() {
        assert!(line.contains(": held by "), "{line}");
        assert!(line.contains(", fencing token "), "{line}");
    }
    let beta = ran.stdout.lines().nth(1).expect("beta's line");
    assert!(beta.ends_with(", 1 waiting"), "{beta}");
    // The same first line as `lockrun status`, up to the time that passed.
    let status = redis.lockrun("alpha").subcommand("status").run();
    let alpha = ran.stdout.lines().next().expect("alpha's line");
    let before_time = |line: &str| line.split(" for ").next().unwrap_or_default().to_owned();
    assert_eq!(before_time(alpha), before_time(&status.stdout));

    let all = list(&redis, &["--all"]);
    all.assert(Expect::success().stdout_has("\nfree: free (last fencing token "));
    assert_eq!(listed_names(&all), ["alpha", "beta", "free", "gamma"]);

    let globbed = list(&redis, &["[ag]*"]);
    globbed.assert(Expect::success().stdout_any());
    assert_eq!(listed_names(&globbed), ["alpha", "gamma"]);
    let globbed = list(&redis, &["b?ta"]);
    globbed.assert(Expect::success().stdout_any());
    assert_eq!(listed_names(&globbed), ["beta"]);
    let prefixed = list(&redis, &["--prefix", "team:"]);
    prefixed.assert(Expect::success().stdout_any());
    assert_eq!(listed_names(&prefixed), ["delta"]);
}

#[test]
fn list_json_has_the_fields_of_status_json() {
    let redis = Server::start();
    let holder = redis.lockrun("alpha").hold();
    let _beta = redis.lockrun("beta").hold();
    let _waiter = redis
        .lockrun("beta")
        .args(["--wait", "1m", "--supersede"])
        .command(["true"])
        .spawn();
    assert!(eventually(PATIENCE, || redis.in_line("beta") == 1));

    let ran = list(&redis, &["--json"]);
    ran.assert(Expect::success().stdout_where("one line", |out| out.lines().count() == 1));
    let locks = parse_array(&ran);
    assert_eq!(locks.len(), 2, "{}", ran.stdout);
    let status = redis
        .lockrun("alpha")
        .subcommand("status")
        .arg("--json")
        .run();
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("JSON");
    let alpha = &locks[0];
    assert_eq!(field_names(alpha), field_names(&status));
    assert_eq!(
        field_names(&alpha["holder"]),
        field_names(&status["holder"])
    );
    for same in [
        "key",
        "redis_key",
        "held",
        "last_fencing_token",
        "redis_node",
    ] {
        assert_eq!(alpha[same], status[same], "{same}");
    }
    assert_eq!(alpha["holder"]["fencing_token"], holder.fence());
    assert_eq!(alpha["holder"]["pid"], status["holder"]["pid"]);
    let beta = &locks[1];
    assert_eq!(beta["key"], "beta");
    let waiters = beta["waiters"].as_array().expect("waiters");
    assert_eq!(waiters.len(), 1, "{beta}");
    assert_eq!(waiters[0]["supersede"], true);
}

#[test]
fn list_exits_1_when_no_lock_is_held() {
    let redis = Server::start();
    let ran = list(&redis, &[]);
    ran.assert(Expect::code(1));

    let ran = redis.lockrun("done").command(["true"]).run();
    ran.assert(Expect::success());
    let ran = list(&redis, &["--json"]);
    ran.assert(Expect::code(1).stdout("[]\n"));
    let ran = list(&redis, &["--all", "--json"]);
    ran.assert(Expect::success().stdout_any());
    let locks = parse_array(&ran);
    assert_eq!(locks.len(), 1);
    assert_eq!(locks[0]["held"], false);
    assert!(locks[0]["last_fencing_token"].is_u64(), "{}", ran.stdout);
}

#[test]
fn list_with_redis_down_exits_69() {
    let mut redis = Server::start();
    redis.kill();
    list(&redis, &[]).assert_redis_unreachable();
}

#[test]
fn list_scans_every_primary_of_a_cluster() {
    let cluster = Cluster::start();
    let url = cluster.url_via(&[cluster.primaries()[0]]);
    // One lock on each primary, whichever node the URL names.
    let mut owners = Vec::new();
    let mut names = Vec::new();
    for n in 0..100 {
        let name = format!("job{n}");
        let (owner, _) = cluster.owner(&format!("lockrun:{{{name}}}"));
        if !owners.contains(&owner) {
            owners.push(owner);
            names.push(name);
        }
    }
    assert_eq!(owners.len(), 3, "names on every primary");
    let _holders: Vec<Holder> = names
        .iter()
        .map(|name| Lockrun::via(&url).key(name).hold())
        .collect();
    let freed = Lockrun::via(&url).key("free").command(["true"]).run();
    freed.assert(Expect::success());

    let ran = Lockrun::via(&url).subcommand("list").arg("--json").run();
    ran.assert(Expect::success().stdout_any());
    let locks = parse_array(&ran);
    let listed: Vec<&str> = locks.iter().filter_map(|l| l["key"].as_str()).collect();
    let mut expected: Vec<&str> = names.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(listed, expected, "{}", ran.stdout);
    for lock in &locks {
        let name = lock["key"].as_str().expect("key");
        let at = names.iter().position(|n| n == name).expect("one of ours");
        assert_eq!(
            lock["redis_node"],
            cluster.node(owners[at]).addr(),
            "{lock}"
        );
        assert_eq!(lock["held"], true, "{lock}");
    }
    let all = Lockrun::via(&url).subcommand("list").arg("--all").run();
    all.assert(Expect::success().stdout_where("4 lines", |out| out.lines().count() == 4));
}

#[test]
fn list_behind_sentinel_scans_the_primary() {
    let set = SentinelSet::start();
    let url = set.url();
    let _holder = Lockrun::via(&url).key("job").hold();
    let ran = Lockrun::via(&url).subcommand("list").arg("--json").run();
    ran.assert(Expect::success().stdout_any());
    let locks = parse_array(&ran);
    assert_eq!(locks.len(), 1, "{}", ran.stdout);
    assert_eq!(locks[0]["key"], "job");
    assert_eq!(locks[0]["redis_node"], set.primary().addr());
}

#[test]
fn list_over_a_quorum_shows_the_majority_view_and_needs_a_majority() {
    // A member votes once it has been up longer than the ttl and its
    // drift, in whole seconds: `quorum` waits for the 1s of this ttl.
    let mut servers = quorum(3);
    let timing = [
        "--ttl",
        "900ms",
        "--redis-timeout",
        "300ms",
        "--kill-grace",
        "200ms",
    ];
    let _holder = Lockrun::on_all(&servers).key("q").args(timing).hold();
    // Held on one member only, as a run cut off halfway might leave it.
    let _: () = servers[0]
        .query(
            redis::cmd("SET")
                .arg("lockrun:{stray}")
                .arg("x")
                .arg("EX")
                .arg(60),
        )
        .expect("SET");

    let ran = Lockrun::on_all(&servers).subcommand("list").run();
    ran.assert(Expect::success().stdout_any());
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", ran.stdout);
    assert!(lines[0].starts_with("q: held by "), "{}", ran.stdout);
    assert!(
        lines[1].starts_with("stray: free") && lines[1].ends_with("; held on 1 of 3 servers"),
        "{}",
        ran.stdout
    );
    let ran = Lockrun::on_all(&servers)
        .subcommand("list")
        .args(["q", "--json"])
        .run();
    let locks = parse_array(&ran);
    assert_eq!(locks.len(), 1, "{}", ran.stdout);
    assert_eq!(locks[0]["majority_agrees"], true);
    assert_eq!(locks[0]["members"].as_array().map(Vec::len), Some(3));

    servers[2].kill();
    let ran = Lockrun::on_all(&servers).subcommand("list").arg("q").run();
    ran.assert(Expect::success().stdout_any().context("2 of 3 answer"));
    servers[1].kill();
    let ran = Lockrun::on_all(&servers).subcommand("list").run();
    ran.assert(Expect::code(69).stderr_has("no majority").stderr_one_line());
}
