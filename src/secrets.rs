//! The Redis password: where lockrun takes it from (its variable or a file,
//! never both), and keeping it out of the command's environment. Why in
//! docs/design.md ("The Redis password"); what a file may hold is
//! `secret_file`'s, and re-reading it at each connection
//! `redis_conn/password.rs`'s.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use crate::error::Error;
use crate::secret_file::read_password_file;

/// Environment variable with the Redis password, so it never shows in `ps`.
pub const PASSWORD_ENV: &str = "LOCKRUN_REDIS_PASSWORD";
/// Environment variable with the password of the sentinels themselves
/// (`redis+sentinel://` URLs); never a flag, for the same reason.
pub const SENTINEL_PASSWORD_ENV: &str = "LOCKRUN_SENTINEL_PASSWORD";
/// The Redis URL, as `--redis`.
const URL_ENV: &str = "LOCKRUN_REDIS_URL";

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
mod tests {
    use super::*;
    use crate::secret_file::tests::file;

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
