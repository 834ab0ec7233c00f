use super::*;

#[test]
fn definition_is_consistent() {
    command().debug_assert();
}

#[test]
fn durations_need_units() {
    assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert!(parse_duration("30").is_err());
    assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
    assert_eq!(parse_wait("2m"), Ok(Wait::Up(Duration::from_secs(120))));
}

#[test]
fn replica_acks_are_a_count_or_all() {
    assert_eq!(parse_replica_acks("ALL"), Ok(ReplicaAcks::All));
    assert_eq!(parse_replica_acks("2"), Ok(ReplicaAcks::Count(2)));
    assert!(parse_replica_acks("-1").is_err());
    assert!(parse_replica_acks("some").is_err());
}

#[test]
fn command_follows_double_dash() {
    let cli = Cli::try_parse_from(["lockrun", "-k", "job", "--", "echo", "-k", "x"])
        .expect("valid command line");
    assert_eq!(cli.run.key.as_deref(), Some("job"));
    assert_eq!(cli.run.command, ["echo", "-k", "x"]);
}

#[test]
fn subcommands_need_no_run_flags() {
    let cli = Cli::try_parse_from(["lockrun", "status", "--key", "job", "--json"])
        .expect("valid command line");
    assert!(matches!(
        cli.action,
        Some(Action::Status(StatusArgs { json: true, .. }))
    ));
}
