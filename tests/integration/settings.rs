//! First contact: lockrun never guesses a server; where the server and the
//! other per-host settings come from (option, environment, the
//! configuration file through LOCKRUN_CONFIG, never /etc in a test), what a
//! file or URL that cannot be used gets, and that `-v` and `status` say
//! which server they used. Also the command line an operator's habits
//! expect: the Redis options before a subcommand, and a `-h` that fits a
//! screen.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::harness::*;

const NO_SERVER: &str = "lockrun: no Redis server named, so nothing was sent anywhere; give \
                         --redis URL, set LOCKRUN_REDIS_URL, or write redis = URL in \
                         /etc/lockrun.conf (e.g. redis://10.0.0.5:6379)\n";

/// A configuration file holding `text`, with `mode`.
fn config(dir: &Path, text: &str, mode: u32) -> PathBuf {
    let path = dir.join("lockrun.conf");
    std::fs::write(&path, text).expect("write the configuration file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    path
}

#[test]
fn without_a_server_every_invocation_exits_64_and_runs_nothing() {
    let dir = scratch();
    let ran_file = dir.path().join("ran");
    let ran = Lockrun::new().key("job").touch(&ran_file).run();
    ran.assert(Expect::code(64).stderr(NO_SERVER));
    assert!(!ran_file.exists(), "the command ran");
    for (subcommand, args) in [
        ("status", &["-k", "job"][..]),
        ("release", &["-k", "job", "--force"][..]),
        ("list", &[][..]),
    ] {
        let ran = Lockrun::new().subcommand(subcommand).args(args).run();
        ran.assert(Expect::code(64).stderr(NO_SERVER).context(subcommand));
    }
    // A configuration file without `redis` is named in the line instead.
    let file = config(dir.path(), "prefix = jobs:\n", 0o644);
    let ran = Lockrun::new()
        .config(&file)
        .key("job")
        .touch(&ran_file)
        .run();
    ran.assert(Expect::code(64).stderr(format!(
        "lockrun: no Redis server named, so nothing was sent anywhere; give --redis URL, set \
         LOCKRUN_REDIS_URL, or write redis = URL in {} (e.g. redis://10.0.0.5:6379)\n",
        file.display()
    )));
    assert!(!ran_file.exists(), "the command ran");
}

#[test]
fn the_configuration_file_names_the_server_and_verbose_says_so() {
    let redis = Server::start();
    let dir = scratch();
    let file = config(
        dir.path(),
        &format!(
            "# this host's lockrun\n\nredis = {}\nprefix = jobs:\n",
            redis.url()
        ),
        0o644,
    );
    let ran = Lockrun::new()
        .config(&file)
        .key("job")
        .arg("-v")
        .command(["true"])
        .run();
    ran.assert(
        Expect::success()
            .stderr_starts(format!(
                "lockrun: read the settings in {}\n",
                file.display()
            ))
            .stderr_has(format!(
                "lockrun: acquired jobs:{{job}} on {} (from {} line 3) with fencing token ",
                redis.url(),
                file.display()
            )),
    );
    assert!(redis.keys().iter().any(|key| key.starts_with("jobs:")));
}

#[test]
fn an_option_wins_over_the_environment_which_wins_over_the_file() {
    let redis = Server::start();
    let dir = scratch();
    let dead = "redis://127.0.0.1:1";
    let file = config(dir.path(), &format!("redis = {dead}\n"), 0o644);
    // The environment over the file.
    let ran = Lockrun::new()
        .config(&file)
        .env("LOCKRUN_REDIS_URL", redis.url())
        .key("job")
        .command(["true"])
        .run();
    ran.assert(Expect::success());
    // The option over the environment.
    let ran = Lockrun::via(&redis.url())
        .config(&file)
        .env("LOCKRUN_REDIS_URL", dead)
        .key("job")
        .command(["true"])
        .run();
    ran.assert(Expect::success());
    // And the file's server is the one used when nothing else names one.
    let ran = Lockrun::new()
        .config(&file)
        .key("job")
        .command(["true"])
        .run();
    ran.assert_redis_unreachable();
    // The prefix likewise: option, then file.
    let file = config(
        dir.path(),
        &format!("redis = {}\nprefix = file:\n", redis.url()),
        0o644,
    );
    Lockrun::new()
        .config(&file)
        .prefix("option:")
        .key("job")
        .command(["true"])
        .run()
        .assert(Expect::success());
    Lockrun::new()
        .config(&file)
        .env("LOCKRUN_PREFIX", "env:")
        .key("job")
        .command(["true"])
        .run()
        .assert(Expect::success());
    let keys = redis.keys();
    assert!(
        keys.iter().any(|key| key.starts_with("option:")),
        "{keys:?}"
    );
    assert!(keys.iter().any(|key| key.starts_with("env:")), "{keys:?}");
    assert!(!keys.iter().any(|key| key.starts_with("file:")), "{keys:?}");
    // A subcommand too, the option before it or after it.
    let held = Lockrun::at(&redis).prefix("option:").key("job").hold();
    for args in [
        &["--prefix", "option:", "status", "-k", "job"][..],
        &["status", "-k", "job", "--prefix", "option:"],
    ] {
        let ran = Lockrun::new().config(&file).args(args).run();
        ran.assert(
            Expect::success()
                .stdout_starts("job: held by ")
                .context(args.join(" ")),
        );
    }
    drop(held);
}

#[test]
fn a_file_that_cannot_be_used_exits_64_naming_file_and_line() {
    let redis = Server::start();
    let dir = scratch();
    let ran_file = dir.path().join("ran");
    let url = redis.url();
    let path = dir.path().join("lockrun.conf");
    let shown = path.display().to_string();
    let cases: Vec<(&[u8], String)> = vec![
        (
            b"redis\n",
            format!(
                "configuration file {shown} (named by LOCKRUN_CONFIG): line 1: it has no '='; \
                 write each setting as name = value (# starts a comment)"
            ),
        ),
        (
            b"# ok\nttl = 5s\n",
            format!(
                "configuration file {shown} (named by LOCKRUN_CONFIG): line 2: unknown setting \
                 'ttl'; a configuration file may set redis, redis-password-file, redis-ca-file, \
                 redis-cert-file, redis-key-file, prefix, redis-timeout, replica-acks, \
                 log-format, metrics-file, history"
            ),
        ),
        (
            b"prefix = a\nprefix = b\n",
            format!(
                "configuration file {shown} (named by LOCKRUN_CONFIG): line 2: prefix is set \
                 again (first on line 1); set it once"
            ),
        ),
        (
            b"redis-timeout = 5\n",
            format!(
                "configuration file {shown} (named by LOCKRUN_CONFIG): line 1: redis-timeout 5: \
                 a number needs a unit: write 5s for 5 seconds, or 500ms, 2m, 1h30m"
            ),
        ),
        (
            b"prefix = \xff\n",
            format!(
                "configuration file {shown} (named by LOCKRUN_CONFIG): line 1: it is not UTF-8 \
                 text"
            ),
        ),
        (
            b"redis = 127.0.0.1:6379\n",
            format!(
                "{shown} line 1 '127.0.0.1:6379' has no scheme; write redis://127.0.0.1:6379 \
                 (rediss://127.0.0.1:6379 for TLS)"
            ),
        ),
    ];
    for (text, want) in cases {
        std::fs::write(&path, text).expect("write");
        let ran = Lockrun::via(&url)
            .config(&path)
            .key("job")
            .touch(&ran_file)
            .run();
        ran.assert(Expect::code(64).stderr(format!("lockrun: {want}\n")));
        assert!(!ran_file.exists(), "the command ran");
    }
    // Missing, or a directory.
    let missing = dir.path().join("missing.conf");
    let ran = Lockrun::via(&url)
        .config(&missing)
        .key("job")
        .touch(&ran_file)
        .run();
    ran.assert(
        Expect::code(64)
            .stderr_starts(format!(
                "lockrun: configuration file {} (named by LOCKRUN_CONFIG): cannot open it: ",
                missing.display()
            ))
            .stderr_one_line(),
    );
    let ran = Lockrun::via(&url)
        .config(dir.path())
        .key("job")
        .touch(&ran_file)
        .run();
    ran.assert(Expect::code(64).stderr(format!(
        "lockrun: configuration file {} (named by LOCKRUN_CONFIG): it is a directory\n",
        dir.path().display()
    )));
    assert!(!ran_file.exists(), "the command ran");
    assert!(
        redis.keys().is_empty(),
        "something was written: {:?}",
        redis.keys()
    );
}

#[test]
fn a_password_in_a_readable_file_is_refused_like_a_password_file() {
    let redis = Server::start_with(Some(free_port()), &["--requirepass", "s3cret"]);
    let dir = scratch();
    let text = format!(
        "redis = {}\n",
        redis.tcp_url().replace("redis://", "redis://:s3cret@")
    );
    let file = config(dir.path(), &text, 0o640);
    let ran = Lockrun::new()
        .config(&file)
        .key("job")
        .command(["true"])
        .run();
    ran.assert(Expect::code(64).stderr(format!(
        "lockrun: configuration file {0} (named by LOCKRUN_CONFIG): the redis URL on line 1 \
         holds a password, and users other than the file's owner may read it (mode 0640); \
         make it private (chmod 600 {0}), or move the password to a file named by \
         redis-password-file\n",
        file.display()
    )));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let ran = Lockrun::new()
        .config(&file)
        .key("job")
        .command(["true"])
        .run();
    ran.assert(Expect::success());
}

#[test]
fn a_refused_url_is_quoted_with_its_source_and_the_url_meant() {
    let dir = scratch();
    let ran_file = dir.path().join("ran");
    let from_option = |url: &str| Lockrun::via(url);
    let from_env = |url: &str| Lockrun::new().env("LOCKRUN_REDIS_URL", url);
    let cwd = std::env::current_dir().expect("cwd");
    for (lockrun, want) in [
        (
            from_option("127.0.0.1:6379"),
            "--redis '127.0.0.1:6379' has no scheme; write redis://127.0.0.1:6379 \
             (rediss://127.0.0.1:6379 for TLS)"
                .to_owned(),
        ),
        (
            from_env("db.internal"),
            "LOCKRUN_REDIS_URL 'db.internal' has no scheme; write redis://db.internal \
             (rediss://db.internal for TLS)"
                .to_owned(),
        ),
        (
            from_option("http://app:s3cret@db:6379"),
            "--redis 'http://app:***@db:6379': lockrun speaks Redis, not http; write \
             redis://app:***@db:6379"
                .to_owned(),
        ),
        (
            from_env("unix://relative.sock"),
            format!(
                "LOCKRUN_REDIS_URL 'unix://relative.sock': a socket path must be absolute, \
                 after three slashes; write unix://{}/relative.sock",
                cwd.display()
            ),
        ),
        (
            from_option(""),
            "--redis is empty; give the URL of your Redis, e.g. redis://HOST:6379".to_owned(),
        ),
    ] {
        let ran = lockrun.key("job").touch(&ran_file).run();
        ran.assert(Expect::code(64).stderr(format!("lockrun: {want}\n")));
    }
    assert!(!ran_file.exists(), "the command ran");
}

#[test]
fn status_names_the_server_it_asked() {
    let redis = Server::start();
    let (code, json) = Lockrun::at(&redis).key("job").status_json();
    assert_eq!(code, Some(1));
    assert_eq!(json["server"], redis.url());
    let ran = Lockrun::at(&redis).subcommand("status").key("job").run();
    ran.assert(Expect::code(1).stdout(format!("job: free\n  server: {}\n", redis.url())));
    // Over TCP with a password: the address, never the password.
    let secured = Server::start_with(Some(free_port()), &["--requirepass", "s3cret"]);
    let url = secured.tcp_url().replace("redis://", "redis://:s3cret@");
    let ran = Lockrun::via(&url).subcommand("status").key("job").run();
    ran.assert(
        Expect::code(1)
            .stdout(format!("job: free\n  server: {}\n", secured.tcp_url()))
            .stderr_lacks("s3cret"),
    );
}

#[test]
fn the_redis_options_go_before_a_subcommand_too() {
    let redis = Server::start();
    let ran = Lockrun::new()
        .args([
            "--redis",
            &redis.url(),
            "--prefix",
            "p:",
            "status",
            "-k",
            "job",
        ])
        .run();
    ran.assert(Expect::code(1).stdout_starts("job: free\n"));
    let ran = Lockrun::new()
        .args(["--ttl", "5s", "status", "-k", "job"])
        .run();
    ran.assert(Expect::code(64).stderr(
        "lockrun: --ttl is an option of a run, not of 'lockrun status'; see 'lockrun --help'\n",
    ));
    // A subcommand tells the environment's URL from the option's too.
    let ran = Lockrun::new()
        .env("LOCKRUN_REDIS_URL", "127.0.0.1:6379")
        .subcommand("status")
        .key("job")
        .run();
    ran.assert(Expect::code(64).stderr(
        "lockrun: LOCKRUN_REDIS_URL '127.0.0.1:6379' has no scheme; write \
         redis://127.0.0.1:6379 (rediss://127.0.0.1:6379 for TLS)\n",
    ));
}

/// The lock's name goes before the subcommand that takes one too, as
/// `--redis` does; twice with two names, or missing, is a usage error.
#[test]
fn the_key_goes_before_status_or_release_too() {
    let redis = Server::start();
    let ran = Lockrun::new()
        .args(["--redis", &redis.url(), "-k", "job", "status"])
        .run();
    ran.assert(Expect::code(1).stdout_starts("job: free\n"));
    let ran = Lockrun::new()
        .args([
            "--redis",
            &redis.url(),
            "--key",
            "job",
            "release",
            "--force",
        ])
        .run();
    ran.assert(Expect::success().stdout("job was not held\n"));
    let ran = Lockrun::new()
        .args(["--redis", &redis.url(), "-k", "a", "status", "-k", "b"])
        .run();
    ran.assert(Expect::code(64).stderr(
        "lockrun: --key is given twice, with two names: give it once; see 'lockrun --help'\n",
    ));
    let ran = Lockrun::new()
        .args(["--redis", &redis.url(), "status"])
        .run();
    ran.assert(Expect::code(64).stderr(
        "lockrun: the following required arguments were not provided: --key <NAME>; see \
         'lockrun --help'\n",
    ));
    let ran = Lockrun::new()
        .args(["--redis", &redis.url(), "-k", "job", "list"])
        .run();
    ran.assert(Expect::code(64).stderr(
        "lockrun: --key is an option of a run, not of 'lockrun list'; see 'lockrun --help'\n",
    ));
}

#[test]
fn short_help_fits_a_screen_and_says_where_the_rest_is() {
    let short = Lockrun::new().arg("-h").run();
    short.assert(Expect::success().stdout_any());
    let lines = short.stdout.lines().count();
    assert!(lines <= 40, "-h is {lines} lines:\n{}", short.stdout);
    assert!(short.stdout.contains("lockrun --help") && short.stdout.contains("man lockrun"));
    assert!(short.stdout.contains("--redis <URL>"));
    assert!(!short.stdout.contains("--replica-acks"));
    let long = Lockrun::new().arg("--help").run();
    long.assert(Expect::success().stdout_any());
    for option in [
        "--replica-acks",
        "--redis-ca-file",
        "--metrics-file",
        "--supersede",
    ] {
        assert!(long.stdout.contains(option), "--help lacks {option}");
    }
    assert!(!long.stdout.contains("=]"), "{}", long.stdout);
    assert!(long.stdout.contains("[env: LOCKRUN_REDIS_URL]"));
}

#[test]
fn the_package_ships_both_man_pages_and_the_template_as_a_conffile() {
    let manifest = crate::generated::read("Cargo.toml");
    for asset in [
        r#"["man/lockrun.1", "usr/share/man/man1/lockrun.1", "644"]"#,
        r#"["man/lockrun-redis.7", "usr/share/man/man7/lockrun-redis.7", "644"]"#,
        r#"["etc/lockrun.conf", "etc/lockrun.conf", "644"]"#,
        r#"conf-files = ["/etc/lockrun.conf"]"#,
    ] {
        assert!(manifest.contains(asset), "Cargo.toml lacks {asset}");
    }
    // The template names no server: a run reading it is told where to add one.
    let template = crate::generated::repo().join("etc/lockrun.conf");
    let ran = Lockrun::new()
        .config(&template)
        .key("job")
        .command(["true"])
        .run();
    ran.assert(Expect::code(64).stderr_has(format!("write redis = URL in {}", template.display())));
    let page = crate::generated::read("man/lockrun.1");
    assert!(page.contains(".SH FILES\n") && page.contains(".BR lockrun\\-redis (7)"));
}

/// `lockrun` run with `-k job -- true` refuses it in one line starting with
/// `prefix`, and exits 64.
fn refused(lockrun: Lockrun<'_>, prefix: String) {
    let ran = lockrun.key("job").command(["true"]).run();
    ran.assert(
        Expect::code(64)
            .stderr_starts(format!("lockrun: {prefix}"))
            .stderr_one_line(),
    );
}

#[test]
fn a_file_setting_lockrun_cannot_use_is_named_by_file_and_line() {
    let redis = Server::start();
    let dir = scratch();
    let missing = dir.path().join("missing-password");
    let setting = |line: String| {
        let text = format!("redis = {}\n{line}\n", redis.url());
        config(dir.path(), &text, 0o644)
    };
    let file = setting(format!("redis-password-file = {}", missing.display()));
    refused(
        Lockrun::new().config(&file),
        format!(
            "{} line 2: redis-password-file {}: cannot open it: ",
            file.display(),
            missing.display()
        ),
    );
    // Given as an option, the option is named.
    let option = ["--redis-password-file", &missing.display().to_string()].map(String::from);
    refused(
        Lockrun::new().config(&file).args(option),
        format!(
            "--redis-password-file {}: cannot open it: ",
            missing.display()
        ),
    );
    let ca = dir.path().join("ca.pem");
    let file = setting(format!("redis-ca-file = {}", ca.display()));
    refused(
        Lockrun::new().config(&file),
        format!(
            "{} line 2: redis-ca-file {}: it is for TLS, but --redis names no rediss:// URL",
            file.display(),
            ca.display()
        ),
    );
}

/// `redis = redis://10.0.0.5:6379 # main`: a comment after a value, after a
/// space, is a comment; a relative path is taken from the file's
/// directory, whatever directory the run starts in.
#[test]
fn a_comment_may_follow_a_value_and_paths_are_the_files() {
    let redis = Server::start_with(Some(free_port()), &["--requirepass", "s3cret"]);
    let dir = scratch();
    let secret = dir.path().join("redis-password");
    std::fs::write(&secret, "s3cret\n").expect("write the password file");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let file = config(
        dir.path(),
        &format!(
            "redis = {} # main\nredis-password-file = redis-password # next to this file\n",
            redis.tcp_url()
        ),
        0o644,
    );
    // lockrun starts in the test's directory, not the file's.
    assert_ne!(std::env::current_dir().expect("cwd"), dir.path());
    Lockrun::new()
        .config(&file)
        .key("job")
        .arg("-v")
        .command(["true"])
        .run()
        .assert(Expect::success().stderr_has(format!("on {} (from ", redis.tcp_url())));
}
