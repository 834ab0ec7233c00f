//! Reading a small secret file: a password, a TLS key. A file that every
//! user may read or write is refused: its secret is no secret, and a
//! writable one can be swapped. Group access is allowed, because a root-owned
//! file readable by the service's group (mode 0640) is the usual way to hand a
//! secret to a service account. Permissions are checked on the opened file, not
//! on its path, so a swap between the check and the read changes nothing.
//! A password file holds one line (a trailing newline is ignored).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A password longer than this is some other file given by mistake.
const MAX_PASSWORD_FILE: u64 = 4096;

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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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
}
