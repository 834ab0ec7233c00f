//! lockrun as a Redis user with only the rules `man lockrun` gives each use
//! (REDIS PERMISSIONS), read from `man/lockrun-redis.roff` so that the page and
//! the test cannot drift: every use works with exactly those rules, and
//! each rule taken away breaks a step that the refusal's one line names.

use std::process::Stdio;
use std::time::Duration;

use crate::harness::*;

pub(crate) const PASSWORD: &str = "acl-test-password";

/// The rules the man page gives `use_`: every word after `ACL SETUSER
/// USER` on the lines under its `# use_:` comment.
pub(crate) fn rules(use_: &str) -> Vec<String> {
    let roff = include_str!("../../man/lockrun-redis.roff");
    let section = roff
        .split(".SH \"REDIS PERMISSIONS\"")
        .nth(1)
        .and_then(|rest| rest.split("\n.SH ").next())
        .expect("man/lockrun-redis.roff has REDIS PERMISSIONS");
    let mut current = "";
    let mut rules = Vec::new();
    for line in section.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            current = comment.split(':').next().unwrap_or_default();
        } else if let Some(setuser) = line.strip_prefix("ACL SETUSER ") {
            // The user's name, `lockrun` or the sentinels' `default`, is
            // the test's to choose.
            let words = setuser.split_once(' ').map_or("", |(_, words)| words);
            if current == use_ {
                let words = words
                    .replace("\\-", "-")
                    .replace("\\fIpassword\\fR", PASSWORD);
                rules.extend(words.split_whitespace().map(String::from));
            }
        }
    }
    assert!(
        !rules.is_empty(),
        "no rules for {use_:?} in REDIS PERMISSIONS"
    );
    rules
}

/// Makes (or remakes) `user` with the man page's first line and `rules`.
fn create_user(server: &Server, user: &str, rules: &[String]) {
    let mut setuser = redis::cmd("ACL");
    setuser
        .arg("SETUSER")
        .arg(user)
        .arg(self::rules("user"))
        .arg(rules);
    let _: () = server.query(&setuser).expect("ACL SETUSER");
}

/// lockrun logged in as `user`, its password in the environment.
fn as_user(server: &Server, user: &str) -> Lockrun<'static> {
    Lockrun::via(&format!("redis://{user}@{}", server.addr()))
        .env("LOCKRUN_REDIS_PASSWORD", PASSWORD)
}

/// A step of a use that did not work: which, its exit status, its stderr.
#[derive(Debug)]
struct Broken {
    step: &'static str,
    code: Option<i32>,
    stderr: String,
}

fn check(step: &'static str, ran: &Ran, code: i32) -> Result<(), Broken> {
    if ran.code == Some(code) && !ran.stderr.contains("refused lockrun's user") {
        return Ok(());
    }
    // The run took the lock, and only giving it back was refused.
    let step = if ran.stderr.contains("could not release") {
        "release"
    } else {
        step
    };
    Err(Broken {
        step,
        code: ran.code,
        stderr: ran.stderr.clone(),
    })
}

/// How many runs wait in line for lock `key` and are subscribed to their
/// wake-up channel. A record that says "listening" is not enough: a waiter
/// sends its SUBSCRIBE and its first attempt in one write, so its record
/// says so even when the SUBSCRIBE was refused, until it notices. 0 when
/// the server cannot be asked this time (an interrupted call), for polls to
/// ask again.
fn listening(server: &Server, key: &str) -> usize {
    let channels: Vec<String> = server
        .query(
            redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .arg(format!("lockrun:{{{key}}}:wake:*")),
        )
        .unwrap_or_default();
    let records: Vec<String> = server
        .query(redis::cmd("HVALS").arg(format!("lockrun:{{{key}}}:waiters")))
        .unwrap_or_default();
    let listening = records
        .iter()
        .filter(|record| record.contains(r#""listening":true"#))
        .count();
    listening.min(channels.len())
}

/// A run, a busy one, a renewal, a waiter handed the lock on release and
/// told so on its channel, and `--min-hold`, all as `user`.
fn run_and_wait(server: &Server, user: &str, key: &str) -> Result<(), Broken> {
    let run = || as_user(server, user).key(key);
    check("run", &run().command(["true"]).run(), 0)?;
    // Renewing often, so that the renewal awaited below comes at once.
    let holder = run().args(["--ttl", "2s", "--renew-every", "100ms"]).hold();
    check("busy", &run().command(["true"]).run(), 75)?;
    let renewed = server.renewed(key, PATIENCE);
    assert!(renewed, "never renewed: {}", holder.stderr());
    let dir = scratch();
    let log = dir.path().join("waiter");
    let mut waiter = run()
        .args(["--wait", "20s", "--verbose"])
        .command(["true"])
        .stderr(log_file(&log))
        .spawn();
    let broken = |step, code| {
        let stderr = read_log(&log);
        Err(Broken { step, code, stderr })
    };
    eventually(PATIENCE, || {
        listening(server, key) == 1
            || read_log(&log).contains("polling instead")
            || !waiter.running()
    });
    if !waiter.running() {
        return broken("wait", waiter.wait().code());
    }
    if read_log(&log).contains("polling instead") {
        return broken("wake-up", None);
    }
    holder.go();
    let mut holder = holder;
    holder.run.wait();
    if holder.stderr().contains("refused lockrun's user") {
        let stderr = holder.stderr();
        return Err(Broken {
            step: "release",
            code: None,
            stderr,
        });
    }
    let code = waiter.wait().code();
    if code != Some(0) {
        return broken("hand-over", code);
    }
    check(
        "min-hold",
        &run().args(["--min-hold", "5s"]).command(["true"]).run(),
        0,
    )?;
    check("kept", &run().command(["true"]).run(), 75)
}

/// Lock `key` held and two runs listening in line for it, all as the
/// server's default user: what `status`, `list` and `release --force` read
/// and hand over.
fn held_with_line(server: &Server, key: &str) -> (Holder, Vec<Running>) {
    let holder = server.lockrun(key).hold();
    let waiters = (0..2)
        .map(|_| {
            server
                .lockrun(key)
                .args(["--wait", "30s"])
                .command(["true"])
                .stderr(Stdio::null())
                .spawn()
        })
        .collect();
    let listening = eventually(PATIENCE, || listening(server, key) == 2);
    assert!(listening, "two waiters never listened in line");
    (holder, waiters)
}

fn status(server: &Server, user: &str, key: &str) -> Result<(), Broken> {
    let _held = held_with_line(server, key);
    let ran = as_user(server, user)
        .subcommand("status")
        .key(key)
        .arg("--json")
        .run();
    check("status", &ran, 0)?;
    ran.assert_stdout_has(r#""held":true"#);
    Ok(())
}

fn list(server: &Server, user: &str, key: &str) -> Result<(), Broken> {
    let _held = held_with_line(server, key);
    let ran = as_user(server, user).subcommand("list").run();
    check("list", &ran, 0)?;
    ran.assert_stdout_has(key);
    Ok(())
}

fn release_force(server: &Server, user: &str, key: &str) -> Result<(), Broken> {
    let (_holder, mut waiters) = held_with_line(server, key);
    let ran = as_user(server, user)
        .subcommand("release")
        .key(key)
        .arg("--force")
        .run();
    check("release --force", &ran, 0)?;
    // Handed to the first waiter, which runs, releases, and hands it on.
    for waiter in &mut waiters {
        waiter.exits(Expect::code(0));
    }
    // A lock held together: the places freed go to the waiter.
    let together = format!("{key}-slots");
    let _holders = [0, 1].map(|_| {
        server
            .lockrun(&together)
            .args(["--slots", "2"])
            .command(["sleep", "60"])
            .stderr(Stdio::null())
            .spawn()
    });
    let leases = format!("lockrun:{{{together}}}:leases");
    let held = eventually(PATIENCE, || {
        server.query::<usize>(redis::cmd("ZCARD").arg(&leases)) == Ok(2)
    });
    assert!(held, "the two --slots 2 holders never held {together}");
    let mut waiter = server
        .lockrun(&together)
        .args(["--slots", "2", "--wait", "30s"])
        .command(["true"])
        .stderr(Stdio::null())
        .spawn();
    let listening = eventually(PATIENCE, || listening(server, &together) == 1);
    assert!(listening, "the waiter for the slots never listened in line");
    let ran = as_user(server, user)
        .subcommand("release")
        .key(&together)
        .arg("--force")
        .run();
    check("release --force", &ran, 0)?;
    waiter.exits(Expect::code(0));
    Ok(())
}

type Use = fn(&Server, &str, &str) -> Result<(), Broken>;

/// The rule a NOPERM line says to add: what follows "add '" up to the quote.
fn rules_named(stderr: &str) -> Vec<&str> {
    stderr
        .split("(NOPERM); add '")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .map(|rules| rules.split_whitespace().collect())
        .unwrap_or_default()
}

/// A run refused for want of `rule` alone: 69, and the one line that says
/// to add it.
pub(crate) fn adds_rule(rule: &str) -> Expect {
    Expect::code(69)
        .stderr_starts("lockrun: Redis at ")
        .stderr_has(format!("(NOPERM); add '{rule}' to its ACL rules"))
        .stderr_one_line()
}

/// `use_` works for a user with exactly `rules`, and breaks, naming the
/// rule, for a user with any one of `needed` taken away.
fn each_rule_is_needed(rules: &[String], needed: &[String], use_: Use) {
    let server = Server::start_tcp();
    create_user(&server, "lockrun", rules);
    if let Err(broken) = use_(&server, "lockrun", "all") {
        panic!("with every rule: {broken:?}");
    }
    for (n, rule) in needed.iter().enumerate() {
        if rule == "+eval" {
            // Only a server without the scripts is sent EVAL.
            let _: () = server
                .query(redis::cmd("SCRIPT").arg("FLUSH"))
                .expect("SCRIPT FLUSH");
        }
        let fewer: Vec<String> = rules.iter().filter(|r| *r != rule).cloned().collect();
        let user = format!("without{n}");
        create_user(&server, &user, &fewer);
        let broken = match use_(&server, &user, &format!("job{n}")) {
            Ok(()) => panic!("{rule} taken away broke nothing"),
            Err(broken) => broken,
        };
        assert_eq!(
            rules_named(&broken.stderr),
            [rule.as_str()],
            "{rule} taken away: {broken:?}"
        );
        if !matches!(broken.step, "wake-up" | "release") {
            assert_eq!(broken.code, Some(69), "{rule} taken away: {broken:?}");
        }
    }
}

#[test]
fn a_run_needs_each_of_its_rules() {
    let run = rules("run");
    each_rule_is_needed(&run, &run, run_and_wait);
}

#[test]
fn status_and_list_need_each_of_their_rules() {
    let status_rules = rules("status");
    each_rule_is_needed(&status_rules, &status_rules, status);
    let mut list_rules = status_rules;
    list_rules.extend(rules("list"));
    each_rule_is_needed(&list_rules, &rules("list"), list);
}

#[test]
fn release_force_needs_each_of_its_rules() {
    let release = rules("release");
    each_rule_is_needed(&release, &release, release_force);
}

/// `ACL SETUSER user` with the man page's first line and `rules`, on every
/// server of `servers` (the sentinels' default user logs in without a
/// password).
pub(crate) fn create_user_on(servers: &[Server], user: &str, rules: &[String]) {
    for server in servers {
        let mut setuser = redis::cmd("ACL");
        setuser.arg("SETUSER").arg(user).arg("reset").arg("on");
        if user == "default" {
            // The test's own connections log in as default too: it keeps
            // the right to change itself back.
            setuser
                .arg("nopass")
                .arg("resetchannels")
                .arg("+acl|setuser");
        } else {
            setuser.arg(self::rules("user"));
        }
        let _: () = server.query(setuser.arg(rules)).expect("ACL SETUSER");
    }
}

#[test]
fn sentinel_needs_each_of_its_rules() {
    let set = SentinelSet::start();
    let mut lockrun = rules("run");
    lockrun.extend(rules("acks"));
    lockrun.extend(rules("sentinel"));
    let sentinels = rules("sentinels");
    let run = |user: &str| {
        let url = set.url().replacen("://", &format!("://{user}@"), 1);
        Lockrun::via(&url)
            .env("LOCKRUN_REDIS_PASSWORD", PASSWORD)
            .key("job")
            .command(["true"])
            .run()
    };
    create_user_on(&set.servers, "lockrun", &lockrun);
    create_user_on(&set.sentinels, "default", &sentinels);
    let ran = run("lockrun");
    ran.assert(Expect::success());
    for rule in rules("acks").iter().chain(&rules("sentinel")) {
        let fewer: Vec<String> = lockrun.iter().filter(|r| *r != rule).cloned().collect();
        create_user_on(&set.servers, "fewer", &fewer);
        let ran = run("fewer");
        ran.assert(adds_rule(rule).context(format!("{rule} taken away")));
    }
    create_user_on(&set.sentinels, "default", &[]);
    let ran = run("lockrun");
    create_user_on(
        &set.sentinels,
        "default",
        &["+@all".into(), "~*".into(), "&*".into()],
    );
    ran.assert(adds_rule(&sentinels[0]));
}

#[test]
fn cluster_needs_each_of_its_rules() {
    let cluster = Cluster::start();
    let mut lockrun = rules("run");
    for use_ in ["status", "list", "acks", "cluster"] {
        lockrun.extend(rules(use_));
    }
    let url = cluster.url_via(&cluster.primaries());
    let as_user = |user: &str| {
        Lockrun::via(&url.replacen("://", &format!("://{user}@"), 1))
            .env("LOCKRUN_REDIS_PASSWORD", PASSWORD)
            .key("job")
    };
    create_user_on(&cluster.nodes, "lockrun", &lockrun);
    let ran = as_user("lockrun").command(["true"]).run();
    ran.assert(Expect::success());
    let node = |user: &str| {
        let ran = as_user(user).subcommand("status").arg("--json").run();
        let status: serde_json::Value = serde_json::from_str(&ran.stdout).expect("status --json");
        status["redis_node"].clone()
    };
    assert!(node("lockrun").is_string());
    // ASKING, CLUSTER MYID and CLUSTER NODES (for WAIT) are sent only while
    // the lock's slot migrates: migration.rs shows each is needed then.
    for rule in lockrun
        .iter()
        .filter(|r| ["+cluster|slots", "+wait"].contains(&r.as_str()))
    {
        let fewer: Vec<String> = lockrun.iter().filter(|r| *r != rule).cloned().collect();
        create_user_on(&cluster.nodes, "fewer", &fewer);
        let ran = as_user("fewer").command(["true"]).run();
        ran.assert(adds_rule(rule).context(format!("{rule} taken away")));
    }
    list_needs_scan(&url, &lockrun, &cluster.nodes);
    let fewer: Vec<String> = lockrun
        .iter()
        .filter(|r| *r != "+cluster|nodes")
        .cloned()
        .collect();
    create_user_on(&cluster.nodes, "fewer", &fewer);
    assert!(
        node("fewer").is_null(),
        "status names the node without +cluster|nodes"
    );
}

/// `lockrun list` in the cluster at `url` as a user with `rules`, and
/// without `+scan`.
fn list_needs_scan(url: &str, rules: &[String], nodes: &[Server]) {
    let as_user = |user: &str| {
        Lockrun::via(&url.replacen("://", &format!("://{user}@"), 1))
            .env("LOCKRUN_REDIS_PASSWORD", PASSWORD)
    };
    let holder = as_user("lockrun").key("job").hold();
    let listed = as_user("lockrun").subcommand("list").run();
    listed.assert(Expect::success().stdout_has("job"));
    let fewer: Vec<String> = rules.iter().filter(|r| *r != "+scan").cloned().collect();
    create_user_on(nodes, "fewer", &fewer);
    let listed = as_user("fewer").subcommand("list").run();
    listed.assert(adds_rule("+scan"));
    holder.go();
}

#[test]
fn a_quorum_needs_only_the_rules_of_a_run() {
    let servers = quorum(3);
    // A member votes once up for a ttl (1s) and the drift, rounded up.
    until_voting(&servers, 2);
    create_user_on(&servers, "lockrun", &rules("run"));
    let urls = servers
        .iter()
        .map(|server| format!("{}?user=lockrun", server.url()));
    let ran = urls
        .fold(Lockrun::new(), |lockrun, url| lockrun.redis(&url))
        .env("LOCKRUN_REDIS_PASSWORD", PASSWORD)
        .key("job")
        .args(["--ttl", "1s"])
        .command(["true"])
        .run();
    ran.assert(Expect::success());
}

/// A waiting run whose user lacks SUBSCRIBE says so without `--verbose`, in
/// one line that names the rule and that it polls meanwhile, then gets the
/// lock by polling.
#[test]
fn a_waiter_that_may_not_subscribe_says_so_once_and_polls() {
    let server = Server::start_tcp();
    let fewer: Vec<String> = rules("run")
        .into_iter()
        .filter(|rule| rule != "+subscribe")
        .collect();
    create_user(&server, "nosubscribe", &fewer);
    let run = || as_user(&server, "nosubscribe").key("job");
    let mut holder = run().hold();
    let dir = scratch();
    let log = dir.path().join("waiter");
    let mut waiter = run()
        .args(["--wait", "20s"])
        .command(["true"])
        .stderr(log_file(&log))
        .spawn();
    let said = eventually(PATIENCE, || {
        read_log(&log).contains("polling instead") || !waiter.running()
    });
    assert!(said && waiter.running(), "{}", read_log(&log));
    holder.finish();
    waiter.exits_saying(Expect::success(), || read_log(&log));
    let stderr = read_log(&log);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("lockrun: Redis at ")
            && stderr.contains(
                "(NOPERM); add '+subscribe' to its ACL rules (see man lockrun-redis, REDIS \
                 PERMISSIONS); until then this run waits by polling instead of being woken"
            ),
        "{stderr}"
    );
}

/// A refused command ends even a run told to wait, at once: waiting does
/// not change an ACL.
#[test]
fn a_refused_command_ends_a_waiting_run_at_once() {
    let server = Server::start_tcp();
    create_user(&server, "lockrun", &[]);
    let dir = scratch();
    let ran = as_user(&server, "lockrun")
        .key("job")
        .args(["--wait", "30s"])
        .touch(dir.path().join("ran"))
        .run();
    ran.assert(Expect::code(69).stderr_has("(NOPERM)").stderr_one_line());
    assert!(ran.took < Duration::from_secs(10), "took {:?}", ran.took);
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn a_read_only_user_runs_check_and_history() {
    let server = Server::start_tcp();
    server
        .lockrun("job")
        .command(["true"])
        .run()
        .assert(Expect::success());
    create_user(&server, "reader", &rules("status"));
    let ran = as_user(&server, "reader")
        .subcommand("check")
        .key("job")
        .args(["--succeeded-within", "1h"])
        .run();
    ran.assert(Expect::success().stdout_has("LOCKRUN OK - job succeeded "));
    let ran = as_user(&server, "reader")
        .subcommand("history")
        .key("job")
        .run();
    ran.assert(Expect::success().stdout_has(": exit 0"));
    // Read only: the user cannot take the lock.
    let ran = as_user(&server, "reader")
        .key("job")
        .command(["true"])
        .run();
    ran.assert(Expect::code(69).stderr_any());
}
