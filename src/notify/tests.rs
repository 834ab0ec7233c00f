//! lockrun's side of the protocol against a socket standing in for systemd's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;
use crate::lock::Holder;

/// A socket where systemd's would be, in a directory removed with it.
struct Listener {
    dir: PathBuf,
    socket: UnixDatagram,
}

impl Listener {
    fn new() -> Listener {
        let dir = relay::private_dir().expect("a directory");
        let socket = UnixDatagram::bind(dir.join("systemd")).expect("bound");
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("a timeout");
        Listener { dir, socket }
    }

    fn systemd(&self) -> Systemd {
        Systemd::at(self.dir.join("systemd").as_os_str())
    }

    fn next(&self) -> String {
        let mut buffer = [0; 4096];
        let len = self.socket.recv(&mut buffer).expect("a message");
        String::from_utf8_lossy(&buffer[..len]).into_owned()
    }

    /// Whether a message is waiting.
    fn quiet(&self) -> bool {
        self.socket.set_nonblocking(true).expect("non-blocking");
        let quiet = self.socket.recv(&mut [0; 16]).is_err();
        self.socket.set_nonblocking(false).expect("blocking");
        quiet
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn held_by_a() -> HoldersAndWaiters {
    HoldersAndWaiters {
        held: true,
        left: None,
        holder: Some(Holder {
            host: "a".into(),
            pid: 7,
            fence: 3,
            ..Holder::default()
        }),
        waiting: 2,
        holding: 0,
    }
}

#[test]
fn a_standby_is_ready_once_and_says_who_holds_the_lock() {
    let listener = Listener::new();
    let systemd = listener.systemd();
    systemd.waiting("job", &held_by_a(), Some(2));
    assert_eq!(
        listener.next(),
        "READY=1\nSTATUS=standing by: job is held by a pid 7 (fencing token 3); place 2 of 2 \
         in line\n"
    );
    // A refresh of its place changes nothing: nothing is said.
    systemd.waiting("job", &held_by_a(), Some(2));
    assert!(listener.quiet());
    systemd.waiting("job", &held_by_a(), Some(1));
    assert_eq!(
        listener.next(),
        "STATUS=standing by: job is held by a pid 7 (fencing token 3); place 1 of 2 in line\n"
    );
}

#[test]
fn a_holder_says_its_lock_and_token_and_then_why_it_stops() {
    let listener = Listener::new();
    let systemd = listener.systemd();
    let since = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    systemd.holding("job", 9, since);
    assert_eq!(
        listener.next(),
        "STATUS=holding job (fencing token 9) since 2027-01-15T08:00:00Z\n"
    );
    systemd.stopping(lost_or_timed_out(None));
    assert_eq!(
        listener.next(),
        "STATUS=stopping the command: --timeout passed\n"
    );
}

#[tokio::test]
async fn the_command_s_messages_are_passed_on_and_its_status_stands() {
    let listener = Listener::new();
    let mut systemd = listener.systemd();
    let env = systemd.for_command();
    let [(SOCKET_ENV, Some(path))] = env.as_slice() else {
        panic!("{env:?}");
    };
    let command = UnixDatagram::unbound().expect("a socket");
    command
        .send_to(b"READY=1\nMAINPID=1\nSTATUS=serving\n", path)
        .expect("sent");
    // The relay runs on this runtime: let it, until the message is through.
    let got = tokio::task::spawn_blocking(move || {
        let got = listener.next();
        (listener, got)
    });
    let (listener, got) = got.await.expect("received");
    assert_eq!(got, "READY=1\nSTATUS=serving\n");
    // The command's status stands over lockrun's holding one.
    systemd.holding("job", 9, SystemTime::now());
    assert!(listener.quiet());
    let dir = path.clone();
    drop(systemd);
    assert!(!Path::new(&dir).exists(), "the socket is removed");
}

#[test]
fn no_socket_named_no_messages_and_nothing_for_the_command() {
    let mut systemd = Systemd::default();
    systemd.waiting("job", &held_by_a(), None);
    assert!(systemd.for_command().is_empty());
}

#[test]
fn a_socket_that_is_no_path_nor_abstract_name_is_not_used() {
    let mut systemd = Systemd::at(std::ffi::OsStr::new("vsock:2:1"));
    assert!(systemd.for_command().is_empty());
}
