//! The configuration file: the settings every run on a host shares (where
//! Redis is and how to reach it), so that cron lines and units need not
//! repeat them, and cron, which passes no environment, still finds them.
//!
//! Which file: `/etc/lockrun.conf` when it exists; LOCKRUN_CONFIG names
//! another, which must then exist; LOCKRUN_CONFIG set to nothing reads none
//! (the test harness does so, so that a host's own file cannot reach a
//! test). One setting per line, `name = value`, the name being the long
//! option's without its dashes; `#` starts a comment, at the start of a
//! line or after a space or tab, as in sh: a `#` inside a word, as in a
//! URL's `/2#x`, is part of the value; blank lines are fine. A value is
//! taken as written, spaces at either end trimmed, no quotes. A relative
//! path is taken from the file's directory, not from wherever the run
//! started (cron starts in the user's home).
//!
//! An option or its environment variable wins over the file. Anything the
//! file gets wrong is a usage error naming the file and line, before
//! anything is sent: an unknown name, a value the option would refuse, a
//! setting given twice, a line without `=`. A `redis` URL holding a password
//! in a file that group or others may read is refused as a password file
//! would be: the password is no secret there.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cli::{parse_duration, parse_log_format, parse_replica_acks};
use crate::error::Error;
use crate::lock::ReplicaAcks;
use crate::redis_conn::{url_refusal, Target, UrlSource};
use crate::report::Format;
use crate::secret_file;
use crate::secrets;

/// The file read when LOCKRUN_CONFIG is not set, if it exists.
pub(crate) const DEFAULT_PATH: &str = "/etc/lockrun.conf";
/// Names the configuration file; set to nothing, no file is read.
pub(crate) const CONFIG_ENV: &str = "LOCKRUN_CONFIG";
/// A configuration file longer than this is some other file given by
/// mistake.
const MAX_FILE: u64 = 64 * 1024;

/// The settings a configuration file may hold, as their options are named.
/// The per-host ones: where Redis is, how to reach it and how long a call
/// to it may take, the key prefix, the log format and the metrics file.
/// What differs from job to job (--key, --ttl, --wait, ...) belongs on the
/// job's own command line.
pub(crate) const NAMES: [&str; 11] = [
    "redis",
    "redis-password-file",
    "redis-ca-file",
    "redis-cert-file",
    "redis-key-file",
    "prefix",
    "redis-timeout",
    "replica-acks",
    "log-format",
    "metrics-file",
    "history",
];

/// What a configuration file set, each value checked as its option checks
/// it.
#[derive(Debug, Default)]
pub(crate) struct FileSettings {
    /// The file these came from.
    pub(crate) path: PathBuf,
    /// `redis`: one URL, or several separated by spaces for a quorum; each
    /// with where it was given.
    pub(crate) redis: Vec<(String, UrlSource)>,
    pub(crate) password_file: Option<PathBuf>,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) cert_file: Option<PathBuf>,
    pub(crate) key_file: Option<PathBuf>,
    pub(crate) prefix: Option<String>,
    pub(crate) redis_timeout: Option<Duration>,
    pub(crate) replica_acks: Option<ReplicaAcks>,
    pub(crate) log_format: Option<Format>,
    pub(crate) metrics_file: Option<PathBuf>,
    /// `history`: how many runs each lock keeps in its history.
    pub(crate) history: Option<u32>,
    /// The line of each setting given, by name.
    pub(crate) lines: Vec<(&'static str, usize)>,
}

/// Which file to read: `named` is LOCKRUN_CONFIG's value, if set.
pub(crate) fn load(named: Option<OsString>) -> Result<Option<FileSettings>, Error> {
    let path = match named {
        Some(named) if named.is_empty() => return Ok(None),
        Some(named) => PathBuf::from(named),
        None => {
            let path = PathBuf::from(DEFAULT_PATH);
            // Only a file that is not there is skipped: one that cannot be
            // read is an error, not a reason to run without its settings.
            if matches!(path.try_exists(), Ok(false)) {
                return Ok(None);
            }
            path
        }
    };
    read(&path).map(Some).map_err(|why| {
        if let Why::Said(line) = why {
            return Error::Usage(line);
        }
        let named = if path == Path::new(DEFAULT_PATH) {
            String::new()
        } else {
            format!(" (named by {CONFIG_ENV})")
        };
        Error::Usage(format!(
            "configuration file {}{named}: {why}",
            path.display()
        ))
    })
}

/// Why a file cannot be used, for the line `load` says it in.
#[derive(Debug)]
enum Why {
    /// The whole file: cannot be opened, a directory, too long, readable.
    File(String),
    /// One line of it.
    Line(usize, String),
    /// A line that names the file and line itself (a refused URL).
    Said(String),
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::File(why) => f.write_str(why),
            Why::Line(line, why) => write!(f, "line {line}: {why}"),
            Why::Said(line) => f.write_str(line),
        }
    }
}

fn read(path: &Path) -> Result<FileSettings, Why> {
    let (bytes, mode) = secret_file::read_at_most(path, MAX_FILE).map_err(Why::File)?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(Why::File(format!(
            "it is over {} KiB: not a lockrun configuration file",
            MAX_FILE >> 10
        )));
    }
    let settings = parse(path, &bytes)?;
    if let Some((_, UrlSource::File { line, .. })) = settings
        .redis
        .iter()
        .find(|(url, _)| secrets::url_has_password(url))
    {
        if mode & 0o044 != 0 {
            return Err(Why::File(format!(
                "the redis URL on line {line} holds a password, and users other than the \
                 file's owner may read it (mode {:04o}); make it private (chmod 600 {}), or \
                 move the password to a file named by redis-password-file",
                mode & 0o7777,
                path.display()
            )));
        }
    }
    Ok(settings)
}

/// The settings in `bytes`, the contents of the file at `path`.
fn parse(path: &Path, bytes: &[u8]) -> Result<FileSettings, Why> {
    let mut settings = FileSettings {
        path: path.to_owned(),
        ..FileSettings::default()
    };
    let mut seen: Vec<(&'static str, usize)> = Vec::new();
    for (index, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let number = index + 1;
        let at = |why: String| Why::Line(number, why);
        let text = without_comment(
            std::str::from_utf8(raw).map_err(|_| at("it is not UTF-8 text".into()))?,
        )
        .trim();
        if text.is_empty() {
            continue;
        }
        // The line is never quoted back: it may hold a password.
        let Some((name, value)) = text.split_once('=') else {
            return Err(at(
                "it has no '='; write each setting as name = value (# starts a comment)".into(),
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        let Some(known) = NAMES.iter().copied().find(|known| *known == name) else {
            return Err(at(unknown(name)));
        };
        if let Some((_, first)) = seen.iter().find(|(seen, _)| *seen == known) {
            return Err(at(format!(
                "{known} is set again (first on line {first}); set it once"
            )));
        }
        seen.push((known, number));
        if value.is_empty() {
            return Err(at(format!("{known} has no value")));
        }
        let refused = |why: String| at(format!("{known} {value}: {why}"));
        let file = || Some(path.parent().unwrap_or(Path::new("")).join(value));
        match known {
            "redis" => {
                for url in value.split_whitespace() {
                    let source = UrlSource::File {
                        path: path.to_owned(),
                        line: number,
                    };
                    if Target::parse(url, None).is_err() {
                        return Err(Why::Said(url_refusal(url, &source)));
                    }
                    settings.redis.push((url.to_owned(), source));
                }
            }
            "redis-password-file" => settings.password_file = file(),
            "redis-ca-file" => settings.ca_file = file(),
            "redis-cert-file" => settings.cert_file = file(),
            "redis-key-file" => settings.key_file = file(),
            "prefix" => settings.prefix = Some(value.to_owned()),
            "redis-timeout" => {
                let timeout = parse_duration(value).map_err(refused)?;
                if timeout.is_zero() || timeout > super::MAX_DURATION {
                    return Err(refused(format!(
                        "give a duration longer than zero and at most {}",
                        super::MAX_DURATION_TEXT
                    )));
                }
                settings.redis_timeout = Some(timeout);
            }
            "replica-acks" => {
                settings.replica_acks = Some(parse_replica_acks(value).map_err(refused)?);
            }
            "log-format" => settings.log_format = Some(parse_log_format(value).map_err(refused)?),
            "metrics-file" => settings.metrics_file = file(),
            "history" => {
                let runs = value.parse::<u32>().ok().filter(|n| *n <= 10_000);
                settings.history = Some(runs.ok_or_else(|| {
                    refused(format!("{value:?} is not a number of runs from 0 to 10000"))
                })?);
            }
            _ => unreachable!("every name in NAMES is handled"),
        }
    }
    settings.lines = seen;
    Ok(settings)
}

/// `line` up to its comment: a `#` at its start or after a space or tab.
fn without_comment(line: &str) -> &str {
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        if c == '#' && previous.is_whitespace() {
            return &line[..at];
        }
        previous = c;
    }
    line
}

/// The line for a setting lockrun does not know, with the one meant when a
/// typo or the option's dashes are all that is wrong.
fn unknown(name: &str) -> String {
    let bare = name.trim_start_matches('-');
    let meant = NAMES
        .iter()
        .map(|known| (strsim::damerau_levenshtein(bare, known), known))
        .filter(|(edits, _)| *edits <= 1 + bare.len() / 4)
        .min_by_key(|(edits, _)| *edits)
        .map(|(_, known)| *known);
    match meant {
        Some(known) => format!("unknown setting '{name}'; did you mean '{known}'?"),
        None => format!(
            "unknown setting '{name}'; a configuration file may set {}",
            NAMES.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret_file::tests::file;

    fn settings(text: &str) -> Result<FileSettings, String> {
        parse(Path::new("/etc/lockrun.conf"), text.as_bytes()).map_err(|why| why.to_string())
    }

    #[test]
    fn settings_are_names_and_values() {
        let s = settings(
            "# where the locks live\n\n  redis = redis://10.0.0.5:6379/2#x \n\
             prefix=jobs:\nredis-timeout = 500ms\nreplica-acks = all\nlog-format = json\n\
             redis-ca-file = /etc/ssl/ca.pem\n",
        )
        .expect("valid");
        assert_eq!(s.redis.len(), 1);
        assert_eq!(s.redis[0].0, "redis://10.0.0.5:6379/2#x");
        assert_eq!(s.redis[0].1.to_string(), "/etc/lockrun.conf line 3");
        assert_eq!(s.prefix.as_deref(), Some("jobs:"));
        assert_eq!(s.redis_timeout, Some(Duration::from_millis(500)));
        assert_eq!(s.replica_acks, Some(ReplicaAcks::All));
        assert_eq!(s.log_format, Some(Format::Json));
        assert_eq!(s.ca_file.as_deref(), Some(Path::new("/etc/ssl/ca.pem")));
        let quorum = settings("redis = redis://a redis://b  redis://c").expect("valid");
        assert_eq!(quorum.redis.len(), 3);
    }

    #[test]
    fn a_comment_may_follow_a_value_after_a_space() {
        let s = settings(
            "redis = redis://10.0.0.5:6379 # main
prefix = jobs:	# shared
             metrics-file = /run/m#1 #
",
        )
        .expect("valid");
        assert_eq!(s.redis.len(), 1);
        assert_eq!(s.redis[0].0, "redis://10.0.0.5:6379");
        assert_eq!(s.prefix.as_deref(), Some("jobs:"));
        assert_eq!(s.metrics_file.as_deref(), Some(Path::new("/run/m#1")));
        let only = settings("prefix = # nothing but a comment").expect_err("no value");
        assert!(only.ends_with("line 1: prefix has no value"), "{only}");
    }

    #[test]
    fn a_relative_path_is_taken_from_the_files_directory() {
        let s = parse(
            Path::new("/etc/lockrun/lockrun.conf"),
            b"redis-ca-file = ca.pem
redis-password-file = ../secret
metrics-file = /run/m
",
        )
        .expect("valid");
        assert_eq!(s.ca_file.as_deref(), Some(Path::new("/etc/lockrun/ca.pem")));
        assert_eq!(
            s.password_file.as_deref(),
            Some(Path::new("/etc/lockrun/../secret"))
        );
        assert_eq!(s.metrics_file.as_deref(), Some(Path::new("/run/m")));
    }

    #[test]
    fn each_mistake_names_its_line() {
        for (text, want) in [
            ("\nredis", "line 2: it has no '='; write each setting as name = value (# starts a comment)"),
            ("ttl = 5s", "line 1: unknown setting 'ttl'; a configuration file may set redis, redis-password-file, redis-ca-file, redis-cert-file, redis-key-file, prefix, redis-timeout, replica-acks, log-format, metrics-file, history"),
            ("--redis = redis://h", "line 1: unknown setting '--redis'; did you mean 'redis'?"),
            ("prefx = a", "line 1: unknown setting 'prefx'; did you mean 'prefix'?"),
            ("prefix = a\n#\nprefix = b", "line 3: prefix is set again (first on line 1); set it once"),
            ("prefix =", "line 1: prefix has no value"),
            ("redis-timeout = 0s", "line 1: redis-timeout 0s: give a duration longer than zero and at most 1y"),
            ("replica-acks = some", "line 1: replica-acks some: write a number of replicas, or all"),
            ("log-format = yaml", "line 1: log-format yaml: write text or json"),
            ("history = -1", "line 1: history -1: \"-1\" is not a number of runs from 0 to 10000"),
            ("redis = 127.0.0.1:6379", "/etc/lockrun.conf line 1 '127.0.0.1:6379' has no scheme; write redis://127.0.0.1:6379 (rediss://127.0.0.1:6379 for TLS)"),
        ] {
            assert_eq!(settings(text).expect_err(text), want, "{text}");
        }
        let err = parse(Path::new("f"), b"prefix = a\nprefix = \xff\n").expect_err("not UTF-8");
        assert_eq!(err.to_string(), "line 2: it is not UTF-8 text");
    }

    #[test]
    fn a_password_is_kept_only_in_a_private_file() {
        let with_password = "redis = redis://app:s3cret@h:6379\n";
        let open = file(with_password, 0o640);
        let err = load(Some(open.path().into())).expect_err("group may read it");
        let line = err.to_string();
        assert!(
            line.contains("mode 0640") && line.contains("line 1"),
            "{line}"
        );
        assert!(!line.contains("s3cret"), "{line}");
        let private = file(with_password, 0o600);
        assert!(load(Some(private.path().into())).is_ok());
        let no_password = file("redis = redis://h:6379\n", 0o644);
        assert!(load(Some(no_password.path().into())).is_ok());
    }

    /// The template the Debian package installs as /etc/lockrun.conf sets
    /// nothing, and every setting it shows, uncommented, is one lockrun
    /// takes.
    #[test]
    fn the_packaged_template_is_all_comments_and_knows_each_setting() {
        let template = include_str!("../../etc/lockrun.conf");
        let none = settings(template).expect("the template parses");
        assert!(none.redis.is_empty() && none.prefix.is_none());
        let uncommented: String = template
            .lines()
            .map(|line| match line.strip_prefix("# ") {
                Some(setting)
                    if setting.split_once(" = ").is_some_and(|(name, _)| {
                        name.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                    }) =>
                {
                    format!("{setting}\n")
                }
                _ => format!("{line}\n"),
            })
            .collect();
        let all = settings(&uncommented).expect("every shown setting parses");
        assert_eq!(all.redis.len(), 1);
        for name in NAMES {
            assert!(
                uncommented
                    .lines()
                    .any(|line| line.starts_with(&format!("{name} = "))),
                "the template shows {name}"
            );
        }
    }

    #[test]
    fn which_file() {
        assert!(load(Some(OsString::new())).expect("none").is_none());
        let err = load(Some("/nonexistent/lockrun.conf".into())).expect_err("missing");
        assert!(
            err.to_string().starts_with(
                "configuration file /nonexistent/lockrun.conf (named by LOCKRUN_CONFIG): \
                 cannot open it:"
            ),
            "{err}"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let err = load(Some(dir.path().into())).expect_err("a directory");
        assert!(err.to_string().ends_with(": it is a directory"), "{err}");
        let empty = load(Some("/dev/null".into())).expect("an empty file");
        assert!(empty.is_some_and(|s| s.redis.is_empty()));
    }
}
