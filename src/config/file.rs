//! The configuration file: the settings every run on a host shares, so that
//! cron lines and units need not repeat them (cron passes no environment).
//! Its format and rules are lockrun(1), FILES. Each value is checked by its
//! option's own value parser, then given to the command line's parser as
//! that option's default (`cli::parse`), so an option or its variable wins.
//! LOCKRUN_CONFIG set to nothing reads none, which keeps a host's own file
//! away from the tests.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use clap::{ArgAction, ValueHint};

use crate::cli::{check, closest};
use crate::error::Error;
use crate::redis_conn::{url_refusal, Target, UrlSource};
use crate::secret_file;
use crate::secrets;

/// The file read when LOCKRUN_CONFIG is not set, if it exists.
pub(crate) const DEFAULT_PATH: &str = "/etc/lockrun.conf";
/// Names the configuration file; set to nothing, no file is read.
pub(crate) const CONFIG_ENV: &str = "LOCKRUN_CONFIG";
/// A configuration file longer than this is some other file given by
/// mistake.
const MAX_FILE: u64 = 64 * 1024;

/// The options a configuration file may set, by their long names: the
/// per-host ones, where Redis is, how to reach it and how long a call to it
/// may take, the key prefix, the log format and the metrics file. What
/// differs from job to job (--key, --ttl, --wait, ...) belongs on the job's
/// own command line.
pub(crate) const NAMES: &[&str] = &[
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
    pub(crate) settings: Vec<Setting>,
}

/// One line of the file: an option's long name and its values, as the
/// command line would give them (a relative path made the file's).
#[derive(Debug)]
pub(crate) struct Setting {
    pub(crate) name: &'static str,
    pub(crate) line: usize,
    pub(crate) values: Vec<OsString>,
}

impl FileSettings {
    /// Each setting as `cli::parse` takes it: the option's name and values.
    pub(crate) fn presets(&self) -> Vec<(&'static str, Vec<OsString>)> {
        let presets = self.settings.iter();
        presets.map(|s| (s.name, s.values.clone())).collect()
    }

    /// The line that set `name` (a long option's, without dashes).
    pub(crate) fn line(&self, name: &str) -> Option<usize> {
        let setting = self.settings.iter().find(|s| s.name == name)?;
        Some(setting.line)
    }
}

/// Which file to read: `named` is LOCKRUN_CONFIG's value, if set; `options`
/// is the command line's definition, whose parsers check the values.
pub(crate) fn load(
    named: Option<OsString>,
    options: &clap::Command,
) -> Result<Option<FileSettings>, Error> {
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
    read(&path, options).map(Some).map_err(|why| {
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
pub(super) enum Why {
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

fn read(path: &Path, options: &clap::Command) -> Result<FileSettings, Why> {
    let (bytes, mode) = secret_file::read_at_most(path, MAX_FILE).map_err(Why::File)?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(Why::File(format!(
            "it is over {} KiB: not a lockrun configuration file",
            MAX_FILE >> 10
        )));
    }
    let settings = parse(path, &bytes, options)?;
    let redis = settings.settings.iter().find(|s| s.name == "redis");
    if let Some(Setting { line, .. }) = redis.filter(|s| {
        s.values
            .iter()
            .any(|url| secrets::url_has_password(&url.to_string_lossy()))
    }) {
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
pub(super) fn parse(
    path: &Path,
    bytes: &[u8],
    options: &clap::Command,
) -> Result<FileSettings, Why> {
    let mut settings = FileSettings {
        path: path.to_owned(),
        settings: Vec::new(),
    };
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
        let known = NAMES.iter().copied().find(|known| *known == name);
        let Some((known, option)) = known.and_then(|known| {
            let option = options
                .get_arguments()
                .find(|arg| arg.get_long() == Some(known));
            Some((known, option?))
        }) else {
            return Err(at(unknown(name)));
        };
        if let Some(first) = settings.line(known) {
            return Err(at(format!(
                "{known} is set again (first on line {first}); set it once"
            )));
        }
        if value.is_empty() {
            return Err(at(format!("{known} has no value")));
        }
        // An option given several times takes several values here, on one
        // line: `redis = URL URL URL` for a quorum.
        let values: Vec<&str> = match option.get_action() {
            ArgAction::Append => value.split_whitespace().collect(),
            _ => vec![value],
        };
        for value in &values {
            check(option, value).map_err(|why| at(format!("{known} {value}: {why}")))?;
            // Checked here as well as where the servers are named, so that
            // a bad URL in the file is said even when an option wins over it.
            let source = || UrlSource::File {
                path: path.to_owned(),
                line: number,
            };
            if known == "redis" && Target::parse(value, None).is_err() {
                return Err(Why::Said(url_refusal(value, &source())));
            }
        }
        let values = match option.get_value_hint() {
            ValueHint::FilePath => {
                let dir = path.parent().unwrap_or(Path::new(""));
                values.iter().map(|value| dir.join(value).into()).collect()
            }
            _ => values.into_iter().map(OsString::from).collect(),
        };
        settings.settings.push(Setting {
            name: known,
            line: number,
            values,
        });
    }
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
    match closest(name.trim_start_matches('-'), NAMES.iter().copied()) {
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
        let options = crate::cli::command();
        parse(Path::new("/etc/lockrun.conf"), text.as_bytes(), &options)
            .map_err(|why| why.to_string())
    }

    /// The values `settings` gives `name`, joined by spaces.
    fn value(settings: &FileSettings, name: &str) -> Option<String> {
        let setting = settings.settings.iter().find(|s| s.name == name)?;
        let values: Vec<_> = setting.values.iter().map(|v| v.to_string_lossy()).collect();
        Some(values.join(" "))
    }

    fn load(named: Option<OsString>) -> Result<Option<FileSettings>, Error> {
        super::load(named, &crate::cli::command())
    }

    #[test]
    fn settings_are_names_and_values() {
        let s = settings(
            "# where the locks live\n\n  redis = redis://10.0.0.5:6379/2#x \n\
             prefix=jobs:\nredis-timeout = 500ms\nreplica-acks = all\nlog-format = json\n\
             redis-ca-file = /etc/ssl/ca.pem\n",
        )
        .expect("valid");
        let value = |name| value(&s, name);
        assert_eq!(value("redis").as_deref(), Some("redis://10.0.0.5:6379/2#x"));
        assert_eq!(s.line("redis"), Some(3));
        assert_eq!(value("prefix").as_deref(), Some("jobs:"));
        assert_eq!(value("redis-timeout").as_deref(), Some("500ms"));
        assert_eq!(value("replica-acks").as_deref(), Some("all"));
        assert_eq!(value("log-format").as_deref(), Some("json"));
        assert_eq!(value("redis-ca-file").as_deref(), Some("/etc/ssl/ca.pem"));
        let quorum = settings("redis = redis://a redis://b  redis://c").expect("valid");
        assert_eq!(
            quorum.settings[0].values,
            ["redis://a", "redis://b", "redis://c"]
        );
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
        assert_eq!(value(&s, "redis").as_deref(), Some("redis://10.0.0.5:6379"));
        assert_eq!(value(&s, "prefix").as_deref(), Some("jobs:"));
        assert_eq!(value(&s, "metrics-file").as_deref(), Some("/run/m#1"));
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
            &crate::cli::command(),
        )
        .expect("valid");
        let value = |name| value(&s, name);
        assert_eq!(
            value("redis-ca-file").as_deref(),
            Some("/etc/lockrun/ca.pem")
        );
        assert_eq!(
            value("redis-password-file").as_deref(),
            Some("/etc/lockrun/../secret")
        );
        assert_eq!(value("metrics-file").as_deref(), Some("/run/m"));
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
            ("redis-timeout = 5", "line 1: redis-timeout 5: a number needs a unit: write 5s for 5 seconds, or 500ms, 2m, 1h30m"),
            ("replica-acks = some", "line 1: replica-acks some: write a number of replicas, or all"),
            ("log-format = yaml", "line 1: log-format yaml: write text or json"),
            ("history = -1", "line 1: history -1: -1 is not in 0..=10000"),
            ("history = some", "line 1: history some: invalid digit found in string"),
            ("redis = 127.0.0.1:6379", "/etc/lockrun.conf line 1 '127.0.0.1:6379' has no scheme; write redis://127.0.0.1:6379 (rediss://127.0.0.1:6379 for TLS)"),
        ] {
            assert_eq!(settings(text).expect_err(text), want, "{text}");
        }
        let options = crate::cli::command();
        let err =
            parse(Path::new("f"), b"prefix = a\nprefix = \xff\n", &options).expect_err("not UTF-8");
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
        assert!(none.settings.is_empty());
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
        assert_eq!(all.settings.len(), NAMES.len());
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
        assert!(empty.is_some_and(|s| s.settings.is_empty()));
    }
}
