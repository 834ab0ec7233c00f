//! The file itself: its lock file, and its replacement by rename(2).

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// How long an update waits for another lockrun's update of the same file
/// before it gives up. Far longer than an update takes; short enough that a
/// lock file held by a stuck process delays a run's end only a little.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(2);
/// How often a waiting update tries the lock again.
const LOCK_POLL: Duration = Duration::from_millis(2);

/// Why the file could not be updated, with the file that refused.
#[derive(Debug)]
pub(crate) struct UpdateError(String);

impl std::fmt::Display for UpdateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub(super) fn failed(doing: &str, path: &Path, err: &io::Error) -> UpdateError {
    UpdateError(format!("cannot {doing} {}: {err}", path.display()))
}
/// `path` with `suffix` appended to its file name: in the same directory.
pub(super) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The exclusive flock on `path`, created if missing and never removed (a
/// lock file removed while held would let the next writer lock another
/// inode), within `wait`.
pub(super) fn lock(path: &Path, wait: Duration) -> Result<Flock<File>, UpdateError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
        // flock needs no write access: another user's lock file will do.
        .or_else(|err| match err.kind() {
            io::ErrorKind::PermissionDenied => File::open(path),
            _ => Err(err),
        })
        .map_err(|err| failed("open the lock file", path, &err))?;
    let give_up = Instant::now() + wait;
    loop {
        // Polled rather than blocking, so that the wait has a bound.
        file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => return Ok(locked),
            Err((file, Errno::EAGAIN | Errno::EINTR)) if Instant::now() < give_up => file,
            Err((_, Errno::EAGAIN)) => {
                return Err(UpdateError(format!(
                    "another process held {} for more than {}s",
                    path.display(),
                    wait.as_secs()
                )))
            }
            Err((_, errno)) => return Err(failed("lock", path, &errno.into())),
        };
        std::thread::sleep(LOCK_POLL);
    }
}

/// Replaces the file at `path` with `text`: a temporary file in the same
/// directory (so that the rename stays on one file system), then rename(2).
pub(super) fn replace(path: &Path, text: &str) -> Result<(), UpdateError> {
    let temporary = with_suffix(path, &format!(".{}.tmp", std::process::id()));
    let written = write_synced(&temporary, text).map_err(|err| failed("write", &temporary, &err));
    let renamed = written.and_then(|()| {
        std::fs::rename(&temporary, path).map_err(|err| failed("replace", path, &err))
    });
    if renamed.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    renamed
}

fn write_synced(path: &Path, text: &str) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(path)?;
    file.write_all(text.as_bytes())?;
    // Without it, some file systems can keep the rename but not the data
    // across a crash, and leave an empty file.
    file.sync_data()
}
