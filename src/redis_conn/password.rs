//! The password file (`--redis-password-file`), read again whenever a
//! connection is opened, reconnections included: managed services rotate
//! their tokens (ElastiCache IAM tokens live 15 minutes, Memorystore's one
//! hour) and an agent rewrites the file, so a run that reconnects after a
//! failover or a dropped connection logs in with the password the file holds
//! now. A connection that is open stays open whatever the file says: Redis
//! checks a password only when a client logs in.

use std::path::PathBuf;

use super::Target;
use crate::secret_file::read_password_file;

impl Target {
    /// Reads the password from `path` again at each connection from now on
    /// (the one given to `Target::parse` came from it).
    #[must_use]
    pub(crate) fn with_password_file(mut self, path: Option<PathBuf>) -> Self {
        self.password_file = path;
        self
    }

    /// Whose password a server refused, and where lockrun took it from.
    pub(super) fn whose_password(&self) -> String {
        let user = self.user().unwrap_or("default");
        format!(
            "user '{user}' with the password from {}",
            self.password_source()
        )
    }

    /// Where lockrun took the password it sends.
    pub(super) fn password_source(&self) -> String {
        match &self.password_file {
            Some(path) => format!("the password file {}", path.display()),
            None if self.password_given => "LOCKRUN_REDIS_PASSWORD".to_owned(),
            None => "the URL".to_owned(),
        }
    }

    /// Takes the password the file holds now, before a connection is
    /// opened. A file that cannot be read now (an agent part-way through
    /// rewriting it, say) leaves the password last read: if the server
    /// refuses that one, the login fails as any refused password does.
    pub(super) fn reread_password(&mut self) {
        let Some(path) = &self.password_file else {
            return;
        };
        let Ok(password) = read_password_file(path) else {
            return;
        };
        if self.password() == Some(password.as_str()) {
            return;
        }
        let settings = self.info.redis_settings().clone().set_password(password);
        self.info = self.info.clone().set_redis_settings(settings);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn each_connection_takes_the_password_the_file_holds_now() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("password");
        let write = |text: &str| {
            std::fs::write(&path, text).expect("write");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        };
        write("first\n");
        let mut target = Target::parse("redis://h:1", Some("first".into()))
            .expect("valid")
            .with_password_file(Some(path.clone()));
        write("second\n");
        target.reread_password();
        assert_eq!(target.password(), Some("second"));
        // Part-way through a rewrite: the last password read stays.
        write("");
        target.reread_password();
        assert_eq!(target.password(), Some("second"));
    }
}
