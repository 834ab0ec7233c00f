//! The static binary in an empty root: nothing but itself and an
//! `/etc/hosts`, as in a distroless image. It must start, resolve a Redis by
//! a name from that file (musl reads `/etc/hosts` without NSS), hold the lock
//! and run the command.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::harness::*;

/// The name the empty root's `/etc/hosts` gives the loopback address.
const REDIS_HOST: &str = "redis.lockrun.test";

#[test]
fn the_static_binary_runs_in_an_empty_root_and_finds_redis_by_a_name_from_etc_hosts() {
    if !runs_here() {
        return;
    }
    let redis = Server::start_tcp();
    let root = scratch();
    std::fs::copy(&*LOCKRUN, root.path().join("lockrun")).expect("copy the binary");
    std::fs::create_dir(root.path().join("etc")).expect("etc");
    std::fs::write(
        root.path().join("etc/hosts"),
        format!("127.0.0.1 {REDIS_HOST}\n"),
    )
    .expect("write /etc/hosts");
    let url = format!("redis://{REDIS_HOST}:{}", redis.port());
    let in_root = |command: &[&str]| {
        Command::new("unshare")
            .args(["-m", "chroot"])
            .arg(root.path())
            .args(["/lockrun", "--redis", &url, "-k", "job", "--"])
            .args(command)
            // PATH only: for unshare to find chroot.
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .output()
            .expect("run unshare")
    };

    // The command is the binary itself, the only program there is.
    let ran = in_root(&["/lockrun", "--version"]);
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(
        ran.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(stdout.starts_with("lockrun "), "{stdout}");
    assert!(redis.fence("job").is_some(), "no fencing token was drawn");
    redis.assert_only_fence("job");

    // A command the empty root does not have: 127, said, the lock given back.
    let ran = in_root(&["/bin/sh", "-c", "true"]);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(127), "{stderr}");
    assert!(stderr.contains("command not found"), "{stderr}");
    redis.assert_only_fence("job");
}

/// Whether this test can run here: as root (unshare and chroot), against a
/// static binary for this machine. Anything else is said on stderr, with
/// what runs it (.ci/run runs it against the static x86_64 build).
fn runs_here() -> bool {
    let skip = |why: &str| {
        eprintln!(
            "empty_root: skipped: {why} (.ci/run runs it with LOCKRUN_TEST_BINARY \
             naming the static x86_64 build)"
        );
        false
    };
    // /proc/self belongs to the effective user.
    let root = std::fs::metadata("/proc/self").is_ok_and(|dir| dir.uid() == 0);
    if !root {
        return skip("unshare -m and chroot need root");
    }
    match static_for_this_machine(Path::new(&*LOCKRUN)) {
        Ok(()) => true,
        Err(why) => skip(&format!("{}: {why}", &*LOCKRUN)),
    }
}

/// Whether `binary` is an ELF executable for this machine that names no
/// program interpreter (no dynamic loader, no shared libc).
fn static_for_this_machine(binary: &Path) -> Result<(), String> {
    let elf = std::fs::read(binary).map_err(|err| err.to_string())?;
    let field = |at: usize, len: usize| -> Result<u64, String> {
        let bytes = elf.get(at..at + len).ok_or("a truncated ELF file")?;
        Ok(bytes.iter().rev().fold(0, |n, &b| n << 8 | u64::from(b)))
    };
    // 64-bit, little-endian: both targets lockrun ships.
    if elf.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return Err("not a 64-bit little-endian ELF file (a script?)".into());
    }
    let machine = match std::env::consts::ARCH {
        "x86_64" => 62,
        "aarch64" => 183,
        other => return Err(format!("no ELF machine known for {other}")),
    };
    if field(18, 2)? != machine {
        return Err("built for another machine".into());
    }
    let (table, size, count) = (field(32, 8)?, field(54, 2)?, field(56, 2)?);
    for header in 0..count {
        let at = usize::try_from(table + header * size).map_err(|err| err.to_string())?;
        const PT_INTERP: u64 = 3;
        if field(at, 4)? == PT_INTERP {
            return Err("dynamically linked".into());
        }
    }
    Ok(())
}
