//! Passwords rotated under a running lockrun: the password file is read
//! again at each connection, so a holder whose connection drops after an
//! agent rewrote the file logs in with the new password and keeps its
//! lease; one whose new password is refused loses the lease and says it
//! was authentication.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::harness::*;

/// The ACL user lockrun logs in as: the `default` user stays without a
/// password, for the harness's own connections.
const USER: &str = "rotated";

/// Writes `password` to `path` as an agent does: a private file of its
/// own, renamed over the old one.
fn rotate_file(path: &Path, password: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, format!("{password}\n")).expect("write");
    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::rename(&next, path).expect("rename");
}

/// A server where `USER` logs in with `first`, a password file holding it,
/// and a holder of lock `job` logged in as `USER` with that file.
fn holder_with_file(dir: &Path) -> (Server, std::path::PathBuf, Holder) {
    let server = Server::start_tcp();
    let _: () = server
        .query(redis::cmd("ACL").arg(&["SETUSER", USER, "on", ">first", "~*", "&*", "+@all"][..]))
        .expect("ACL SETUSER");
    let file = dir.join("password");
    rotate_file(&file, "first");
    let url = format!("redis://{USER}@{}", server.addr());
    let holder = Lockrun::via(&url)
        .key("job")
        .args([
            "--ttl",
            "3s",
            "--renew-every",
            "200ms",
            "--redis-password-file",
        ])
        .arg(&file)
        .hold();
    (server, file, holder)
}

/// Changes `USER`'s password on `server` to `password` (the connections
/// already logged in stay), then drops every connection of `USER`'s.
fn rotate_server_and_drop(server: &Server, password: &str) {
    let rule = format!(">{password}");
    let _: () = server
        .query(redis::cmd("ACL").arg(&["SETUSER", USER, "resetpass", rule.as_str()][..]))
        .expect("ACL SETUSER");
    let _: i64 = server
        .query(redis::cmd("CLIENT").arg(&["KILL", "USER", USER][..]))
        .expect("CLIENT KILL");
}

/// Whether a connection logged in as `USER` is open on `server`.
fn logged_in(server: &Server) -> bool {
    let list: String = server
        .query(redis::cmd("CLIENT").arg("LIST"))
        .unwrap_or_default();
    list.lines()
        .any(|client| client.contains(&format!(" user={USER} ")))
}

#[test]
fn a_holder_reconnects_with_the_rotated_password_and_keeps_its_lease() {
    let dir = scratch();
    let (server, file, mut holder) = holder_with_file(dir.path());
    assert!(logged_in(&server));

    rotate_file(&file, "second");
    rotate_server_and_drop(&server, "second");
    // Only the new password lets a connection in now.
    let back = eventually(PATIENCE, || logged_in(&server));
    assert!(back, "lockrun never logged in again: {}", holder.stderr());
    assert!(
        server.renewed("job", PATIENCE),
        "never renewed after the rotation"
    );

    holder.go();
    holder.end().assert(
        Expect::success()
            .stderr_lacks("authentication")
            .stderr_any(),
    );
}

#[test]
fn a_rotated_password_that_is_refused_loses_the_lease_and_says_so() {
    let dir = scratch();
    let (server, file, mut holder) = holder_with_file(dir.path());

    // The agent wrote a token the server does not take.
    rotate_file(&file, "stale");
    rotate_server_and_drop(&server, "second");

    holder.end().assert(
        Expect::code(76)
            .stderr_has("cannot renew job (Redis at ")
            .stderr_has(format!(
                "refused user 'rotated' with the password from the password file {}",
                file.display()
            ))
            .stderr_has("lost the lock job")
            .stderr_any(),
    );
}
