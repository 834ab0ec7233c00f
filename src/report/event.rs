//! `--log-format json`: each line lockrun says is also an event with typed
//! fields, made with the line (`message`), so that nothing has to be parsed
//! back out of the text. The schema is the man page's LOG FORMAT section, which a test
//! holds these events to.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::clock::{whole, MS};

/// How lockrun's lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Format {
    /// `lockrun: ` and the message: for people, and today's scripts.
    #[default]
    Text,
    /// One JSON object per line: for log shippers and journald.
    Json,
}

/// How serious a line is, as the `level` field says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    Error,
    Warning,
    Info,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Info => "info",
        }
    }
}

/// What a line is about: its name, its level and its own fields, in order.
#[derive(Debug)]
pub(crate) struct Event {
    level: Level,
    name: &'static str,
    fields: Vec<(&'static str, Value)>,
}

impl Event {
    pub(super) fn error(name: &'static str) -> Self {
        Event::new(Level::Error, name)
    }

    pub(super) fn warning(name: &'static str) -> Self {
        Event::new(Level::Warning, name)
    }

    pub(super) fn info(name: &'static str) -> Self {
        Event::new(Level::Info, name)
    }

    fn new(level: Level, name: &'static str) -> Self {
        Event {
            level,
            name,
            fields: Vec::new(),
        }
    }

    /// One more field of this event's own.
    pub(super) fn with(mut self, field: &'static str, value: impl Into<Value>) -> Self {
        self.fields.push((field, value.into()));
        self
    }

    /// A duration, as whole milliseconds.
    pub(super) fn with_ms(self, field: &'static str, duration: Duration) -> Self {
        self.with(field, whole(duration, MS))
    }
}

/// What every JSON line says besides its event: which lock, and which
/// lockrun on which host.
#[derive(Debug)]
pub(crate) struct Context {
    /// `--key`; None when the command line could not be read.
    pub(crate) key: Option<String>,
    pub(crate) host: String,
    pub(crate) pid: u32,
}

impl Context {
    pub(crate) fn new(key: Option<String>) -> Self {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "unknown".into());
        Context {
            key,
            host,
            pid: std::process::id(),
        }
    }

    /// One line of JSON, the newline included. The common fields come
    /// first, in a fixed order, for people reading the log raw.
    pub(crate) fn json_line(&self, event: Event, message: &str, now: SystemTime) -> String {
        let ts = humantime::format_rfc3339_millis(now).to_string();
        let common: [(&str, Value); 7] = [
            ("ts", ts.into()),
            ("level", event.level.as_str().into()),
            ("event", event.name.into()),
            ("key", self.key.clone().into()),
            ("host", self.host.clone().into()),
            ("pid", self.pid.into()),
            ("message", message.into()),
        ];
        let mut line = String::from("{");
        let own = event.fields.into_iter();
        for (i, (name, value)) in common.into_iter().chain(own).enumerate() {
            if i > 0 {
                line.push(',');
            }
            // Names are this crate's literals, none needing escapes; values
            // are serde_json's.
            let _ = write!(line, "\"{name}\":{value}");
        }
        line.push_str("}\n");
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_line_has_the_common_fields_first_and_parses() {
        let context = Context {
            key: Some("billing".into()),
            host: "web-2".into(),
            pid: 41,
        };
        let event = Event::info("acquired")
            .with("fencing_token", 7_u64)
            .with_ms("waited_ms", Duration::from_millis(1500));
        let now = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_137_445_123);
        let line = context.json_line(event, "acquired \"x\"", now);
        assert_eq!(
            line,
            "{\"ts\":\"2026-12-01T15:04:05.123Z\",\"level\":\"info\",\"event\":\"acquired\",\
             \"key\":\"billing\",\"host\":\"web-2\",\"pid\":41,\"message\":\"acquired \\\"x\\\"\",\
             \"fencing_token\":7,\"waited_ms\":1500}\n"
        );
        let parsed: Value = serde_json::from_str(&line).expect("json");
        assert_eq!(parsed["message"], "acquired \"x\"");
    }

    #[test]
    fn an_unknown_key_is_null() {
        let context = Context {
            key: None,
            host: "h".into(),
            pid: 1,
        };
        let line = context.json_line(Event::error("error"), "m", SystemTime::UNIX_EPOCH);
        let parsed: Value = serde_json::from_str(&line).expect("json");
        assert!(parsed["key"].is_null());
        assert_eq!(parsed["ts"], "1970-01-01T00:00:00.000Z");
    }
}
