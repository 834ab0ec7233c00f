//! The Redis password: where lockrun takes it from, and keeping it from the
//! command.
//!
//! Where from: LOCKRUN_REDIS_PASSWORD, or a file named by
//! `--redis-password-file` / LOCKRUN_REDIS_PASSWORD_FILE (a systemd credential
//! fits: `LoadCredential=` and `%d`). Either replaces a password in the URL.
//! Both at once are refused: which one the operator meant cannot be guessed,
//! and a guess that picks a stale password fails at 2 a.m.
//!
//! The file is read once at the start, where a file lockrun cannot use is a
//! usage error, and again whenever a connection is opened
//! (`redis_conn/password.rs`), so that a rotated password is taken up.
//! The file holds one line (a trailing newline is ignored). A file that every
//! user may read or write is refused: its password is no secret, and a
//! writable one can be swapped. Group access is allowed, because a root-owned
//! file readable by the service's group (mode 0640) is the usual way to hand a
//! secret to a service account. Permissions are checked on the opened file, not
//! on its path, so a swap between the check and the read changes nothing.
//!
//! The command inherits lockrun's environment, and a job's `env` dump or
//! crash reporter would carry the password from there to a log. So the
//! command gets neither LOCKRUN_REDIS_PASSWORD nor the password in
//! LOCKRUN_REDIS_URL (the rest of the URL stays, so that a nested lockrun finds
//! the server). LOCKRUN_REDIS_PASSWORD_FILE passes: it only names a file that
//! the command, running as the same user, could read anyway, and it is how a
//! nested lockrun authenticates.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::error::Error;

/// Environment variable with the Redis password, so it never shows in `ps`.
pub const PASSWORD_ENV: &str = "LOCKRUN_REDIS_PASSWORD";
/// Environment variable with the password of the sentinels themselves
/// (`redis+sentinel://` URLs); never a flag, for the same reason.
pub const SENTINEL_PASSWORD_ENV: &str = "LOCKRUN_SENTINEL_PASSWORD";
/// The Redis URL, as `--redis`.
const URL_ENV: &str = "LOCKRUN_REDIS_URL";
/// A password longer than this is some other file given by mistake.
const MAX_PASSWORD_FILE: u64 = 4096;

/// The password to use in place of the URL's, if one was given:
/// `from_env` from LOCKRUN_REDIS_PASSWORD, or the contents of `file`, which
/// messages name as `label` (`--redis-password-file`, or the configuration
/// file's line).
pub(crate) fn password(
    from_env: Option<String>,
    file: Option<&Path>,
    label: &str,
) -> Result<Option<String>, Error> {
    let from_env = from_env.filter(|p| !p.is_empty());
    match (from_env, file) {
        (Some(_), Some(_)) => Err(Error::Usage(format!(
            "{PASSWORD_ENV} and --redis-password-file (or LOCKRUN_REDIS_PASSWORD_FILE) are both \
             set; give the Redis password one way only"
        ))),
        (from_env, None) => Ok(from_env),
        (None, Some(path)) => read_password_file(path)
            .map(Some)
            .map_err(|why| Error::Usage(format!("{label} {}: {why}", path.display()))),
    }
}

/// The password in `path`, or why it cannot be used. Never says what the
/// file holds.
pub(crate) fn read_password_file(path: &Path) -> Result<String, String> {
    let (bytes, mode) = read_at_most(path, MAX_PASSWORD_FILE)?;
    if mode & 0o006 != 0 {
        return Err(format!(
            "every user on this machine can {} it (mode {:04o}); make it private, e.g. \
             chmod o-rwx (access for the file's group is fine)",
            if mode & 0o004 == 0 { "write" } else { "read" },
            mode & 0o7777
        ));
    }
    if bytes.len() as u64 > MAX_PASSWORD_FILE {
        return Err(format!(
            "it is longer than {MAX_PASSWORD_FILE} bytes; it should hold only the password"
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string())?;
    let line = text.strip_suffix('\n').map_or(text.as_str(), |line| {
        line.strip_suffix('\r').unwrap_or(line)
    });
    if line.contains(['\n', '\r']) {
        return Err("it holds more than one line; it should hold only the password".into());
    }
    if line.is_empty() {
        return Err("it is empty".into());
    }
    Ok(line.to_string())
}

/// The first `max` + 1 bytes of the file at `path` (more than `max` is for
/// the caller to refuse, in its own words) and its mode, both read from the
/// one opened file, so that they are of the same file.
pub(crate) fn read_at_most(path: &Path, max: u64) -> Result<(Vec<u8>, u32), String> {
    let file = File::open(path).map_err(|err| format!("cannot open it: {err}"))?;
    let metadata = file
        .metadata()
        .map_err(|err| format!("cannot read its permissions: {err}"))?;
    if metadata.is_dir() {
        return Err("it is a directory".into());
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| format!("cannot read it: {err}"))?;
    Ok((bytes, metadata.permissions().mode()))
}

/// How the command's environment differs from lockrun's, so that no Redis
/// password reaches it: a value sets a variable, None removes it.
pub(crate) fn hidden_from_command() -> Vec<(&'static str, Option<OsString>)> {
    hide(std::env::var_os(URL_ENV).as_deref())
}

/// `hidden_from_command` for a LOCKRUN_REDIS_URL of `url`.
fn hide(url: Option<&OsStr>) -> Vec<(&'static str, Option<OsString>)> {
    let mut changes = vec![(PASSWORD_ENV, None), (SENTINEL_PASSWORD_ENV, None)];
    if let Some(url) = url {
        // A URL that cannot be parsed cannot be shown to hold no password.
        let url = url.to_str().and_then(without_password).map(OsString::from);
        changes.push((URL_ENV, url));
    }
    changes
}

/// Whether `url` holds a password: in the user-info (`user:PASSWORD@`, of a
/// one-host URL or a Sentinel or Cluster host list) or the query
/// (`pass=PASSWORD`).
pub(crate) fn url_has_password(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let in_userinfo = authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'));
    let query = rest.split_once('?').map_or("", |(_, query)| query);
    in_userinfo || query.split('&').any(|pair| pair.starts_with("pass="))
}

/// `url` without its password, in the user-info (`redis://user:pw@host`) or
/// the query (`redis+unix:///path?pass=pw`), or None if it is no URL that
/// lockrun accepts.
fn without_password(url: &str) -> Option<String> {
    // As `--redis`: without "//" there is no user-info, and "user:pw@host"
    // would parse as a scheme "user" with the password in its path.
    if !url.contains("://") {
        return None;
    }
    let mut url = url::Url::parse(url).ok()?;
    if url.password().is_some() {
        // Fails only for URLs that cannot have one, which have none.
        let _ = url.set_password(None);
    }
    if url.query_pairs().any(|(name, _)| name == "pass") {
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(name, _)| name != "pass")
            .map(|(name, value)| (name.into_owned(), value.into_owned()))
            .collect();
        if kept.is_empty() {
            url.set_query(None);
        } else {
            url.query_pairs_mut().clear().extend_pairs(kept);
        }
    }
    Some(url.into())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn urls_lose_only_the_password() {
        for (url, want) in [
            ("redis://:pw@h:6380/2", "redis://h:6380/2"),
            ("redis://app:pw@h", "redis://app@h"),
            (
                "rediss://app:p%40ss@h:6380#insecure",
                "rediss://app@h:6380#insecure",
            ),
            ("redis://h:6379", "redis://h:6379"),
            ("unix:///run/r.sock?pass=pw", "unix:///run/r.sock"),
            (
                "redis+unix:///run/r.sock?db=3&pass=pw&user=app",
                "redis+unix:///run/r.sock?db=3&user=app",
            ),
        ] {
            assert_eq!(without_password(url).as_deref(), Some(want), "{url}");
        }
        for unusable in ["not a url", "app:pw@h:6379"] {
            assert_eq!(without_password(unusable), None, "{unusable}");
        }
    }

    #[test]
    fn a_password_in_a_url_is_found() {
        for url in [
            "redis://:pw@h",
            "redis://app:pw@h:6379/2",
            "redis+sentinel://u:pw@a,b:26380/svc",
            "unix:///run/r.sock?db=1&pass=pw",
            "redis://h?pass=pw",
        ] {
            assert!(url_has_password(url), "{url}");
        }
        for url in ["redis://app@h", "redis://h:6379", "unix:///run/r.sock?db=1"] {
            assert!(!url_has_password(url), "{url}");
        }
    }

    #[test]
    fn the_command_loses_the_password_variable_and_keeps_the_server() {
        let changes = hide(Some(OsStr::new("redis://:pw@h:1")));
        assert_eq!(
            changes,
            [
                (PASSWORD_ENV, None),
                (SENTINEL_PASSWORD_ENV, None),
                (URL_ENV, Some(OsString::from("redis://h:1")))
            ]
        );
        assert_eq!(
            hide(None),
            [(PASSWORD_ENV, None), (SENTINEL_PASSWORD_ENV, None)]
        );
        let unparsable = hide(Some(OsStr::new("h:1 pw")));
        assert_eq!(unparsable[2], (URL_ENV, None));
    }

    /// A temporary file holding `contents`, with `mode`.
    pub(crate) fn file(contents: &str, mode: u32) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), contents).expect("write");
        std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(mode))
            .expect("chmod");
        file
    }

    fn read(contents: &str, mode: u32) -> Result<String, String> {
        read_password_file(file(contents, mode).path())
    }

    #[test]
    fn a_password_file_holds_one_line() {
        assert_eq!(read("s3cret\n", 0o600).as_deref(), Ok("s3cret"));
        assert_eq!(read("s3cret\r\n", 0o400).as_deref(), Ok("s3cret"));
        assert_eq!(read(" spaced ", 0o640).as_deref(), Ok(" spaced "));
        for bad in ["", "\n", "a\nb\n", "a\n\n"] {
            assert!(read(bad, 0o600).is_err(), "{bad:?}");
        }
        assert!(read(&"x".repeat(5000), 0o600).is_err());
        let dir = tempfile::tempdir().expect("temp dir");
        let err = read_password_file(dir.path()).expect_err("a directory");
        assert_eq!(err, "it is a directory");
    }

    #[test]
    fn a_file_every_user_can_read_or_write_is_refused() {
        let err = read("s3cret\n", 0o644).expect_err("world-readable");
        assert!(err.contains("every user") && err.contains("0644"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
        assert!(read("s3cret\n", 0o602).is_err());
        assert!(read("s3cret\n", 0o660).is_ok());
    }

    #[test]
    fn one_source_of_password_at_a_time() {
        let f = file("from-file\n", 0o600);
        let label = "--redis-password-file";
        assert!(password(Some("env".into()), Some(f.path()), label).is_err());
        assert_eq!(
            password(None, Some(f.path()), label).expect("file"),
            Some("from-file".into())
        );
        assert_eq!(
            password(Some("env".into()), None, label).expect("env"),
            Some("env".into())
        );
        // An empty variable is as good as none, as before.
        assert_eq!(
            password(Some(String::new()), Some(f.path()), label).expect("file"),
            Some("from-file".into())
        );
    }
}
