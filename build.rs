//! Assembles the lock's Lua scripts from their parts in `src/lock/` and
//! hashes each one, so that lockrun sends `EVALSHA` without hashing anything
//! at start-up. Writes `$OUT_DIR/scripts.rs`, which `src/lock/script.rs`
//! includes: one `Lua` static per script, with its whole text and its SHA-1
//! as Redis names it (lower-case hex).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

/// One script: the name of its static, what it does, and its parts in
/// order, joined as they are with nothing between.
struct Script {
    name: &'static str,
    doc: &'static str,
    parts: &'static [&'static str],
}

/// Every script but renew's, split's and acked's works on the lock and its queue, and starts with
/// `guard.lua`, which stops it before it touches a key of the wrong type,
/// then `queue.lua`, the queue's rules.
const SCRIPTS: &[Script] = &[
    Script {
        name: "ACQUIRE",
        doc: "Takes the lock, or a place in its queue.",
        parts: &["guard.lua", "queue.lua", "acquire.lua"],
    },
    Script {
        name: "RENEW",
        doc: "Extends a lease that still holds our token.",
        parts: &["renew.lua"],
    },
    Script {
        name: "SPLIT",
        doc: "One key of a lock whose cluster slot is being migrated.",
        parts: &["split.lua"],
    },
    Script {
        name: "ACKED",
        doc: "Notes in the holder record how many replicas acknowledged the lease.",
        parts: &["acked.lua"],
    },
    Script {
        name: "RELEASE",
        doc: "Gives the lock up, straight to the first waiter.",
        parts: &["guard.lua", "queue.lua", "release.lua"],
    },
    Script {
        name: "FORCE_RELEASE",
        doc: "Removes the lock whoever holds it (`lockrun release --force`).",
        parts: &["guard.lua", "queue.lua", "force_release.lua"],
    },
    Script {
        name: "STATUS",
        doc: "Reads the lock and its queue, changing nothing.",
        parts: &["guard.lua", "queue.lua", "status.lua"],
    },
    Script {
        name: "VOTE",
        doc: "A quorum member's acquire: `fresh.lua` first, so that a member that \
              restarted too recently does not vote.",
        parts: &["guard.lua", "queue.lua", "fresh.lua", "acquire.lua"],
    },
    Script {
        name: "RAISE_FENCE",
        doc: "Quorum mode: raises a member's fence counter to the run's token.",
        parts: &["guard.lua", "queue.lua", "raise_fence.lua"],
    },
];

fn main() {
    let dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo")).join("src/lock");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo")).join("scripts.rs");
    for file in SCRIPTS.iter().flat_map(|script| script.parts) {
        println!("cargo:rerun-if-changed={}", dir.join(file).display());
    }
    let mut rust = String::from("// Written by build.rs from src/lock/*.lua; do not edit.\n");
    for script in SCRIPTS {
        let code: String = script.parts.iter().map(|file| read(&dir, file)).collect();
        let sha = sha1_smol::Sha1::from(&code).digest();
        // `{:?}` of a str is a Rust string literal of it.
        writeln!(
            rust,
            "\n/// {}\n///\n/// {}.\npub(crate) static {}: Lua = Lua {{\n    code: {code:?},\n    \
             sha: \"{sha}\",\n}};",
            script.doc,
            script.parts.join(" + "),
            script.name,
        )
        .expect("writing to a String");
    }
    fs::write(&out, rust).unwrap_or_else(|err| panic!("writing {}: {err}", out.display()));
}

fn read(dir: &Path, file: &str) -> String {
    let path = dir.join(file);
    fs::read_to_string(&path).unwrap_or_else(|err| panic!("reading {}: {err}", path.display()))
}
