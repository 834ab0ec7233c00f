//! The parsers of flag values that clap has no parser for: durations,
//! `--wait`'s `forever`, `--replica-acks`'s `all`, and `--log-format`.

use std::time::Duration;

use crate::lock::ReplicaAcks;
use crate::report::Format;
use crate::wait::Wait;

pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| match err {
        // humantime's own advice ("for example 5sec or 5ms") would come
        // before lockrun's; a bare number is most often flock's seconds.
        humantime::DurationError::UnknownUnit { unit, value, .. } if unit.is_empty() => {
            format!(
                "a number needs a unit: write {value}s for {value} seconds, or 500ms, 2m, 1h30m"
            )
        }
        err => format!("{err}; write a number with a unit, like 500ms, 30s, 2m or 1h30m"),
    })
}

pub(super) fn parse_replica_acks(text: &str) -> Result<ReplicaAcks, String> {
    if text.eq_ignore_ascii_case("all") {
        return Ok(ReplicaAcks::All);
    }
    text.parse()
        .map(ReplicaAcks::Count)
        .map_err(|_| "write a number of replicas, or all".to_owned())
}

pub(super) fn log_format_parser() -> impl clap::builder::TypedValueParser<Value = Format> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(["text", "json"]).map(|format| match &*format {
        "json" => Format::Json,
        _ => Format::Text,
    })
}

pub(super) fn parse_wait(text: &str) -> Result<Wait, String> {
    if text.eq_ignore_ascii_case("forever") {
        Ok(Wait::Forever)
    } else {
        parse_duration(text).map(Wait::Up)
    }
}
