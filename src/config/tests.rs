use super::*;

const S: Duration = Duration::from_secs(1);
/// A server named, never asked: validation sends nothing.
const SERVER: &str = "--redis=redis://127.0.0.1:1";

#[test]
fn defaults_scale_with_the_ttl() {
    let t = timing(30 * S, None, None, None).expect("defaults fit");
    assert_eq!(t.renew_every, 10 * S);
    assert_eq!(t.redis_timeout, 2 * S);
    assert_eq!(t.kill_grace, 5 * S);

    let t = timing(S, None, None, None).expect("a ttl of 1s alone is valid");
    assert_eq!(
        t.renew_every,
        Duration::from_millis(333) + Duration::from_nanos(333_333)
    );
    assert_eq!(t.redis_timeout, Duration::from_millis(100));
    assert_eq!(t.kill_grace, Duration::from_millis(250));
}

#[test]
fn unsafe_timing_says_what_fits() {
    let err = timing(30 * S, None, None, Some(20 * S))
        .expect_err("does not fit")
        .to_string();
    assert!(err.starts_with("unsafe timing:"), "{err}");
    // Rounded to what a person writes, on the side that still fits: at
    // 33s the default renewal, a third of the ttl, would not.
    assert!(err.contains("--ttl 34s or more"), "{err}");
    assert!(timing(34 * S, None, None, Some(20 * S)).is_ok());
    assert!(timing(33 * S, None, None, Some(20 * S)).is_err());
    assert!(err.contains("--kill-grace 17s or less"), "{err}");
}

#[test]
fn zero_and_tiny_values_are_refused() {
    assert!(timing(Duration::from_millis(5), None, None, None).is_err());
    assert!(timing(30 * S, Some(Duration::ZERO), None, None).is_err());
    assert!(timing(30 * S, None, None, Some(Duration::ZERO)).is_ok());
}

/// Every flag that takes a duration.
const DURATION_FLAGS: [&str; 8] = [
    "--ttl",
    "--renew-every",
    "--redis-timeout",
    "--kill-grace",
    "--wait",
    "--min-hold",
    "--once-per",
    "--timeout",
];

#[test]
fn every_duration_flag_has_an_upper_bound() {
    for flag in DURATION_FLAGS {
        let err = run_config(&[SERVER, &format!("{flag}=1y1s")]).expect_err("past the bound");
        assert_eq!(err.exit_code(), 64, "{flag}: {err}");
        assert_eq!(
            err.to_string(),
            format!("{flag} 1year1s is too long; use 1y (365.25 days) or less")
        );
    }
    let config = run_config(&[
        SERVER,
        "--ttl=1y",
        "--wait=1y",
        "--min-hold=1y",
        "--timeout=1y",
    ])
    .expect("1y is allowed");
    assert_eq!(config.timing.ttl, MAX_DURATION);
    assert!(run_config(&[SERVER, "--wait=forever"]).is_ok());
}

/// The run a command line asks for, through clap and validation as
/// `lib::main` does it; a clap error is a usage error too.
fn run_config(flags: &[&str]) -> Result<RunConfig, Error> {
    run_with_file(flags, None)
}

/// The same, over a configuration file at /etc/lockrun.conf holding `file`.
fn run_with_file(flags: &[&str], file: Option<&str>) -> Result<RunConfig, Error> {
    let options = crate::cli::command();
    let path = std::path::Path::new(file::DEFAULT_PATH);
    let file = file.map(|text| file::parse(path, text.as_bytes(), &options).expect("valid"));
    let args: Vec<OsString> = ["lockrun", "--key", "k"]
        .into_iter()
        .chain(flags.iter().copied())
        .chain(["--", "true"])
        .map(OsString::from)
        .collect();
    let presets = file.as_ref().map(FileSettings::presets).unwrap_or_default();
    let cli = crate::cli::parse_from(options, presets, &args)
        .map_err(|err| Error::Usage(err.to_string()))?;
    match Invocation::from_cli(cli, Passwords::default(), file.as_ref())? {
        Invocation::Run(config) => Ok(config),
        other => panic!("not a run: {other:?}"),
    }
}

#[test]
fn slots_shared_and_once_per_make_how_a_run_holds_the_lock() {
    let holding = |flags: &[&str]| {
        let flags: Vec<&str> = [SERVER].iter().chain(flags).copied().collect();
        run_config(&flags).expect("valid").holding
    };
    let hour = Some(Duration::from_secs(3600));
    assert_eq!(holding(&[]), Holding::ALONE);
    assert_eq!(
        holding(&["--slots=1", "--once-per=1h"]),
        Holding::Alone {
            once_per: hour,
            slot_zero: true
        }
    );
    assert_eq!(holding(&["--slots=3"]), Holding::Slots(3));
    assert_eq!(holding(&["--shared"]), Holding::Shared);
    assert_eq!(holding(&["--shared", "--slots=1"]), Holding::Shared);
    let err = run_config(&[SERVER, "--shared", "--once-per=1h"]).expect_err("alone only");
    assert_eq!(
        err.to_string(),
        "--once-per is for runs that hold the lock alone, not with --shared"
    );
}

#[test]
fn no_server_named_is_a_usage_error_naming_the_three_ways() {
    let err = run_config(&[]).expect_err("no server");
    assert_eq!(err.exit_code(), 64);
    assert_eq!(
        err.to_string(),
        "no Redis server named, so nothing was sent anywhere; give --redis URL, set \
         LOCKRUN_REDIS_URL, or write redis = URL in /etc/lockrun.conf (e.g. \
         redis://10.0.0.5:6379)"
    );
}

#[test]
fn an_option_wins_over_the_file() {
    let file = "\nredis = redis://from-file:6379\nprefix = file:\nredis-timeout = 700ms\n";
    let config = run_with_file(&[], Some(file)).expect("the file names a server");
    let target = &config.lock.servers.targets()[0];
    assert_eq!(target.to_string(), "redis://from-file:6379");
    assert_eq!(target.source().to_string(), "/etc/lockrun.conf line 2");
    assert_eq!(config.lock.keys.lock, "file:{k}");
    assert_eq!(config.timing.redis_timeout, Duration::from_millis(700));
    let config = run_with_file(
        &[
            "--redis",
            "redis://given:1",
            "--prefix",
            "p:",
            "--redis-timeout",
            "1s",
        ],
        Some(file),
    )
    .expect("valid");
    let target = &config.lock.servers.targets()[0];
    assert_eq!(target.to_string(), "redis://given:1");
    assert_eq!(*target.source(), UrlSource::Option);
    assert_eq!(config.lock.keys.lock, "p:{k}");
    assert_eq!(config.timing.redis_timeout, S);
}

/// A value the option's parser takes but the run refuses names the file's
/// line when the file gave it, the option when the option did.
#[test]
fn a_refused_value_names_where_it_was_given() {
    let file = "redis = redis://h\nredis-timeout = 0s\n";
    let err = run_with_file(&[], Some(file)).expect_err("zero");
    assert_eq!(
        err.to_string(),
        "/etc/lockrun.conf line 2: redis-timeout must be longer than zero"
    );
    let err = run_with_file(&["--redis-timeout=0s"], Some("redis = redis://h")).expect_err("zero");
    assert_eq!(err.to_string(), "--redis-timeout must be longer than zero");
    let err = run_with_file(&[], Some("redis = redis://h\nredis-timeout = 2y")).expect_err("long");
    assert_eq!(
        err.to_string(),
        "/etc/lockrun.conf line 2: redis-timeout 2years is too long; use 1y (365.25 days) or less"
    );
}

mod any_text {
    use proptest::prelude::*;

    use super::*;
    use crate::clock::{whole_up, MS};

    /// What an operator might type for a duration: mostly numbers of any
    /// size with a unit humantime knows, in one or more parts, so that
    /// most cases get past the parser; sometimes any text at all.
    fn duration_text() -> impl Strategy<Value = String> {
        let number = prop_oneof![
            any::<u64>().prop_map(|n| n.to_string()),
            (0u64..100_000).prop_map(|n| n.to_string()),
            "[0-9]{1,30}",
        ];
        let unit = prop::sample::select(vec![
            "ns", "us", "ms", "s", "m", "min", "h", "d", "w", "M", "y", "years",
        ]);
        let part = (number, unit).prop_map(|(n, u)| format!("{n}{u}"));
        prop_oneof![
            8 => prop::collection::vec(part, 1..4).prop_map(|parts| parts.join("")),
            1 => ".{0,24}",
            1 => Just("forever".to_owned()),
        ]
    }

    /// Whether Redis takes `d` as a `PX`/`PEXPIRE` argument: more than
    /// zero, and not past its clock in milliseconds as a signed 64-bit
    /// count.
    fn fits_px(d: Duration) -> bool {
        let now_ms = crate::clock::unix_now_us() / 1000;
        (1..=u64::try_from(i64::MAX).unwrap_or(0) - now_ms).contains(&whole_up(d, MS))
    }

    /// Whether a deadline `d` from now fits every clock lockrun uses.
    fn fits_clocks(d: Duration) -> bool {
        std::time::Instant::now().checked_add(d).is_some()
            && std::time::SystemTime::now().checked_add(d).is_some()
            && d <= MAX_DURATION
    }

    proptest! {
        #[test]
        fn a_duration_flag_is_refused_or_fits_redis_and_the_clock(
            given in prop::collection::vec(
                (prop::sample::select(DURATION_FLAGS.to_vec()), duration_text()),
                1..4,
            ),
        ) {
            let given: Vec<String> =
                given.iter().map(|(flag, value)| format!("{flag}={value}")).collect();
            let given: Vec<&str> =
                std::iter::once(SERVER).chain(given.iter().map(String::as_str)).collect();
            match run_config(&given) {
                Err(err) => prop_assert_eq!(err.exit_code(), 64, "{}", err),
                Ok(config) => {
                    let t = config.timing;
                    prop_assert!(fits_px(t.ttl));
                    prop_assert!(t.needed() < t.ttl);
                    for d in [t.ttl, t.renew_every, t.redis_timeout, t.kill_grace, t.needed()] {
                        prop_assert!(fits_clocks(d), "{:?}", d);
                    }
                    // --min-hold goes to Redis as a PEXPIRE; the others
                    // only become deadlines here.
                    if let Some(min_hold) = config.min_hold {
                        prop_assert!(fits_px(min_hold), "{:?}", min_hold);
                    }
                    for d in [config.min_hold, config.timeout, config.wait.and_then(Wait::limit)]
                        .into_iter()
                        .flatten()
                    {
                        prop_assert!(fits_clocks(d), "{:?}", d);
                    }
                    let now = crate::clock::BootInstant::now();
                    prop_assert!(t.deadline_after(now) > now);
                }
            }
        }
    }
}
