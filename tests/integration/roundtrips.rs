//! Round trips over a slow link: `bench/roundtrips.py` runs lockrun through
//! its delay proxy on every path it knows, and each path's flights (bursts
//! to Redis, each answered before the next) and connects are held to the
//! floor the bench states, less the excess listed here with its reason.
//! A change that adds a round trip fails here, where no timing on loopback
//! would show it.

use std::process::Command;

use crate::harness::{redis_cli, redis_server, scratch, LOCKRUN};

/// Flights above the floor that a path still takes, and why. A path not
/// named here is at its floor.
const EXCESS: &[(&str, u32, &str)] = &[
    ("TCP, password", 1, AUTH_ALONE),
    ("TCP, ACL user", 1, AUTH_ALONE),
    ("TLS 1.3, password", 1, AUTH_ALONE),
    ("TLS 1.3, ACL user", 1, AUTH_ALONE),
    (
        "quorum of 3",
        1,
        "the fences are raised in a flight of their own",
    ),
];

const AUTH_ALONE: &str = "the crate sends AUTH alone before the first call";

#[test]
fn every_path_at_its_floor_but_the_listed_excess() {
    let dir = scratch();
    let out = dir.path().join("roundtrips.json");
    let bench = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/roundtrips.py");
    // 50 ms: long enough that the bursts of one flight never split in two
    // on a loaded machine (at 10 ms a debug build's TLS Finished and first
    // call did, the server's session ticket answering the first), and a
    // run still takes a fraction of a second.
    let ran = Command::new("python3")
        .arg(bench)
        .args(["--lockrun", &LOCKRUN, "--rtt", "50ms", "--runs", "1"])
        .args([
            "--redis-server",
            &redis_server(),
            "--redis-cli",
            &redis_cli(),
        ])
        .arg("--json")
        .arg(&out)
        .output()
        .expect("python3 must be installed (scripts/test installs it)");
    assert!(
        ran.status.success(),
        "bench/roundtrips.py failed:\n{}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    let text = std::fs::read_to_string(&out).expect("the bench's JSON");
    let results: Vec<serde_json::Value> = serde_json::from_str(&text).expect("JSON");
    assert!(results.len() >= 11, "every path measured: {text}");
    let mut wrong = Vec::new();
    for r in &results {
        let path = r["path"].as_str().expect("path");
        let excess = EXCESS
            .iter()
            .find(|(name, ..)| *name == path)
            .map_or(0, |(_, n, _)| *n);
        let want = r["floor"].as_u64().expect("floor") + u64::from(excess);
        let expected_status = if path.starts_with("busy") { 75 } else { 0 };
        if r["flights"].as_u64() != Some(want)
            || r["connects"] != r["connects_floor"]
            || r["statuses"] != serde_json::json!([expected_status])
        {
            wrong.push(format!(
                "{path}: {} flights (want {want}), {} connects (want {}), exit {} ({})",
                r["flights"], r["connects"], r["connects_floor"], r["statuses"], r["stderr"]
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
